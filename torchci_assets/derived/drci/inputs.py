"""What a Dr. CI comment is computed from, read from the lake with the SQL beside this module.

Heads and their jobs come from the day's `pr_jobs` (the HUD's per-job view, already latest attempt
per job name, infra failures marked); their workflow runs' state (awaiting approval, ended) from
`workflow_run`; their authors (other authors' failures are evidence: `other_failures`) from
`pull_request`; failing tests and their messages from `test_results` (its
failures, extracted once per file: extracts.py); the trunk from `commit_health` and
`test_sha_outcomes`; flakiness from `flaky_tests`; the jobs marked unstable from
`stats/unstable-jobs.json` in the outputs, as the flakiness domain publishes it from the open
UNSTABLE issues. Windows are bounded (WINDOW_DAYS, TRUNK_DAYS) so a day costs the same
whatever the history.
"""

from __future__ import annotations

import bisect
import datetime as dt
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path

import pyarrow as pa

from resources.lake import Lake
from resources.lake_extracts import ExtractPass, register_extract
from resources.sql import Columns, compose
from torchci_assets.derived.drci.classify import (AWAITING_CONCLUSIONS, LOG_PART, LOG_WHOLE, NEAR_COMMITS,
                                                  NO_TEST_RESULTS, SIMILAR_LOOKBACK, SIMILAR_SPAN, FailedTest,
                                                  DisabledIssue, Flaky, FlakySighting, HeadJob, MainFailure,
                                                  OtherFailure, Trunk, base_name, first_line, message_key)
from torchci_assets.derived.drci.extracts import FAILURES, JOB_FAILURES, PR_BASES, PR_MERGES
from torchci_assets.derived.flakiness.issue_text import method_and_class
from torchci_assets.derived.hud.health import LOOKBACK_DAYS as HEALTH_LOOKBACK_DAYS
from torchci_assets.partitions import days_around, days_ending

SQL_DIR = Path(__file__).parent / "sql"
WINDOW_DAYS = 3    # test results and webhooks: a head's jobs run within hours of its push
TRUNK_DAYS = 7     # commit_health partitions read for the merge bases and their neighbours
# workflow_job days read for the conclusions of main's failures: a commit_health partition holds the
# commits pushed up to its LOOKBACK_DAYS before, so TRUNK_DAYS of it reach back that much further
JOB_DAYS = TRUNK_DAYS + HEALTH_LOOKBACK_DAYS
# The pull requests the similar-failure search reads besides the day's (`other_failures`: a head's span
# reaches SIMILAR_SPAN back): those closed in the pr_jobs partitions this many days before the day's, each
# holding the pull requests active on its day and the HEALTH_LOOKBACK_DAYS before it (3 and 6 days back).
EARLIER_PR_JOBS = tuple(range(HEALTH_LOOKBACK_DAYS + 1, SIMILAR_SPAN.days + 1, HEALTH_LOOKBACK_DAYS + 1))
# the days of webhooks and test results their authors, landing and failing tests are read from
LANDED_DAYS = max(EARLIER_PR_JOBS) + HEALTH_LOOKBACK_DAYS + 1
# pr_jobs columns added after partitions were written (an old day recomputed reads them as NULL)
PR_JOBS_ADDED = Columns({"cancelled": "BOOLEAN", "labels": "VARCHAR[]"})
# job_failure's captures and whether the log was read whole, as NULL where a partition lacks them
JOB_FAILURE_ADDED = Columns({"captures": "VARCHAR[]", "run_attempt": "BIGINT", "log_complete": "BOOLEAN"})
# pull_request columns added after partitions were written (who wrote the pull request, what it closes)
PR_ADDED = Columns({"author": "VARCHAR", "closes": "BIGINT[]"})
# disabled_tests' close time of a re-enabled test's issue, NULL in partitions written before it was kept
DISABLED_ADDED = Columns({"closed_at": "TIMESTAMPTZ"})
# workflow_run columns the awaiting runs are read with (a partition without one reads it as NULL)
RUN_COLUMNS = Columns({"id": "BIGINT", "run_attempt": "BIGINT", "repo": "VARCHAR", "name": "VARCHAR",
                       "workflow_id": "BIGINT", "head_sha": "VARCHAR", "status": "VARCHAR",
                       "conclusion": "VARCHAR", "updated_at": "TIMESTAMPTZ"})
_VIEW = "CREATE OR REPLACE TEMP VIEW {{view}} AS SELECT * FROM {{files}}"
_VIEW_ADDED = "CREATE OR REPLACE TEMP VIEW {{view}} AS SELECT *, {{added}} FROM {{files}}"
# the job_failures extract's columns, for an empty view when the window has no workflow_job file
_JOB_FAILURES = pa.schema([("id", pa.int64()), ("run_id", pa.int64()), ("run_attempt", pa.int64()),
                           ("head_sha", pa.string()), ("name", pa.string()), ("conclusion", pa.string())])


@cache
def sql(name: str) -> str:
    return (SQL_DIR / f"{name}.sql").read_text()


def rows(con, name: str, params: dict | None = None) -> list[dict]:
    cur = con.execute(sql(name), params or {})
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


@dataclass
class PullRequest:
    number: int
    head_sha: str
    state: str
    base_ref: str | None
    head_ref: str | None
    updated_at: dt.datetime | None
    jobs: list[HeadJob] = field(default_factory=list)
    pushed_at: dt.datetime | None = None    # the earliest start of its jobs: when CI saw the head
    labels: tuple[str, ...] = ()            # its labels, as its latest pull_request webhook gave them
    author: str | None = None               # its author's login, lower case; None when no webhook named one
    closes: frozenset[int] | None = None     # the issues its body says it closes; None when no webhook said
    # its head's finished jobs (success, skipped) not among `jobs` (`load_heads`: `load_done_jobs` adds
    # them), and the latest end of each run's: nothing is classified from them, and on PyTorch's scale
    # they are most of a day's rows
    done_jobs: int = 0
    done_runs: dict[int, dt.datetime] = field(default_factory=dict)


def register_with(con, lake: Lake, table: str, days: list[str], view: str, columns: Columns) -> bool:
    """View `view` over `table`'s partitions for `days`, with those of `columns` its files lack as NULL
    (files written before a column was added, or by a writer that has no such field); False when
    there is no file."""
    files = f"{view}_files"
    if not lake.register(con, table, days, name=files):
        return False
    have = {r[0] for r in con.execute(compose("DESCRIBE {{files}}", files=files)).fetchall()}
    added = Columns({c: t for c, t in columns.items() if c not in have})
    con.execute(compose(_VIEW_ADDED, view=view, files=files, added=added) if added
                else compose(_VIEW, view=view, files=files))
    return True


def register_pr_jobs(con, lake: Lake, day: str) -> bool:
    """View pj over the day's `pr_jobs`, with the columns of PR_JOBS_ADDED its partition lacks as
    NULL (one written before they were added); False when the day has none."""
    return register_with(con, lake, "pr_jobs", [day], "pj", PR_JOBS_ADDED)


def register_people(con, lake: Lake, day: str) -> bool:
    """View people over the pull_request webhooks of LANDED_DAYS, listed once for `load_heads` (the
    window's) and `attach_people` (all of them); False when there is none."""
    return register_with(con, lake, "pull_request", days_ending(day, LANDED_DAYS), "people", PR_ADDED)


def load_heads(con, lake: Lake, day: str, repo: str, people: bool) -> dict[int, PullRequest]:
    """Each pull request of the day's `pr_jobs` with its head's GitHub jobs, and the open ones of
    the window's pull_request webhooks (view people, when `people`: `register_people`) whose head has
    no job at all (for the lost-webhook refresh)."""
    if not register_pr_jobs(con, lake, day):
        return {}
    prs: dict[int, PullRequest] = {}
    if people:
        since = dt.date.fromisoformat(days_ending(day, WINDOW_DAYS)[0])
        for r in rows(con, "heads_without_jobs", {"repo": repo, "since": since}):
            prs[r["number"]] = PullRequest(r["number"], r["head_sha"], "open", r["base_ref"], r["head_ref"],
                                           r["updated_at"], labels=tuple(r["labels"] or ()))
    _add_jobs(prs, rows(con, "head_jobs", {"finished": False, "numbers": None}))
    for r in rows(con, "head_done"):
        pr = _head_of(prs, r, r["first_start"])
        pr.done_jobs, pr.done_runs = r["jobs"], {e["run_id"]: e["ended"] for e in r["run_ends"] or ()}
    return prs


def load_done_jobs(con, prs: dict[int, PullRequest]) -> None:
    """Add to `prs` the finished jobs `load_heads` left out (sql/head_jobs.sql over view pj): what
    the REST API's jobs are matched with when a head is read again (`refresh.merge_rest_jobs`)."""
    wanted = {n: p for n, p in prs.items() if p.done_jobs}
    if not wanted:
        return
    _add_jobs(wanted, rows(con, "head_jobs", {"finished": True, "numbers": sorted(wanted)}))
    for pr in wanted.values():
        pr.done_jobs, pr.done_runs = 0, {}


def load_earlier(con, lake: Lake, day: str, repo: str, known: set[int], prs: dict[int, PullRequest],
                 since_of: Callable[[PullRequest], dt.datetime | None],
                 seen: ExtractPass | None = None) -> dict[int, PullRequest]:
    """The landed pull requests closed before the day's window that the similar-failure search of a
    head of `prs` reaches (`earlier_wanted`, `load_earlier_heads`), with their failing tests."""
    earlier = load_earlier_heads(con, lake, day, repo, known, earlier_wanted(day, prs, since_of), seen)
    attach_earlier_tests(con, lake, day, earlier, seen)
    return earlier


def load_earlier_heads(con, lake: Lake, day: str, repo: str, known: set[int], wanted: dict[str, dt.datetime],
                       seen: ExtractPass | None = None) -> dict[int, PullRequest]:
    """The pull requests of `repo` closed in the pr_jobs partitions EARLIER_PR_JOBS days before `day`,
    not among `known` (the day's) and landed by a main commit (sql/pr_merges.sql over LANDED_DAYS),
    each with the failing GitHub jobs of its last head as its newest partition holds them
    (sql/earlier_heads.sql): the similar-failure search's evidence from before the day's window. Only
    the jobs of `wanted`'s groups (`earlier_wanted`) failed since the earliest instant it names, from
    the partitions that reach it: none read when no span reaches back that far. No comment is built
    for them."""
    if not wanted:
        return {}
    since = min(wanted.values())
    days = [d for d in (days_around(day, before)[0] for before in EARLIER_PR_JOBS) if _day_end(d) > since]
    if not days or not register_with(con, lake, "pr_jobs", days, "earlier", PR_JOBS_ADDED) \
            or not register_extract(con, lake, PR_MERGES, days_ending(day, LANDED_DAYS), "pm", seen):
        return {}
    _register_list(con, "known_prs", "number", pa.array(sorted(known), pa.int64()))
    _register_list(con, "wanted_groups", "job_group", pa.array(sorted(wanted), pa.string()))
    prs: dict[int, PullRequest] = {}
    _add_jobs(prs, rows(con, "earlier_heads", {"since": since, "repo": repo}))
    return prs


def earlier_wanted(day: str, prs: dict[int, PullRequest],
                   since_of: Callable[[PullRequest], dt.datetime | None]) -> dict[str, dt.datetime]:
    """job group -> the earliest instant a failing job of `prs` in that group searches other pull
    requests' failures from (`similar_span`; `since_of`: a pull request's merge base push), for the
    spans that reach before the day's pr_jobs window: a head on a recent merge base needs no earlier
    partition (`load_earlier_heads`)."""
    window = dt.datetime.fromisoformat(days_ending(day, WINDOW_DAYS)[0]).replace(tzinfo=dt.timezone.utc)
    wanted: dict[str, dt.datetime] = {}
    for pr in prs.values():
        span = similar_span(pr, since_of(pr))
        if span is None or span[0] >= window:
            continue
        for j in pr.jobs:
            if j.state == "failure":
                wanted[j.job_group] = min(span[0], wanted.get(j.job_group, span[0]))
    return wanted


def _day_end(day: str) -> dt.datetime:
    return dt.datetime.fromisoformat(day).replace(tzinfo=dt.timezone.utc) + dt.timedelta(days=1)


def _add_jobs(prs: dict[int, PullRequest], found: list[dict]) -> None:
    """Add each pr_jobs row of `found` to its pull request's jobs (`_head_of`)."""
    for r in found:
        _head_of(prs, r, r["started_at"]).jobs.append(HeadJob(name=r["name"] or "", job_group=r["job_group"] or "", state=r["state"],
                               failure_class=r["failure_class"], job_id=r["job_id"], run_id=r["run_id"],
                               workflow=r["workflow"] or "", build_env=r["build_env"], test_config=r["test_config"],
                               infra_reason=r["infra_reason"], failure_line=r["failure_line"],
                               started_at=r["started_at"], completed_at=r["completed_at"],
                               cancelled=bool(r["cancelled"]), run_attempt=r["run_attempt"]))


def _head_of(prs: dict[int, PullRequest], r: dict, started: dt.datetime | None) -> PullRequest:
    """The pull request of pr_jobs row `r` (made from it if new), pushed no later than `started`: a head
    was pushed when its first job started, as CI saw it."""
    pr = prs.setdefault(r["number"], PullRequest(r["number"], r["head_sha"], r["pr_state"] or "open", r["base_ref"],
                                                 r["head_ref"], r["pr_updated_at"], labels=tuple(r["labels"] or ())))
    if started is not None and (pr.pushed_at is None or started < pr.pushed_at):
        pr.pushed_at = started
    return pr


def attach_people(con, repo: str, prs: dict[int, PullRequest]) -> None:
    """Give each pull request its author and the issues its body closes (sql/pr_people.sql), from the
    pull_request webhooks of LANDED_DAYS (view people: `register_people`): as far back as the earlier
    pull requests the similar-failure search reads, and a pull request whose CI ran lately may have
    had no webhook for days."""
    if prs:
        for r in rows(con, "pr_people", {"repo": repo}):
            if (pr := prs.get(r["number"])) is not None:
                pr.author, pr.closes = r["author"], None if r["closes"] is None else frozenset(r["closes"])


@dataclass(frozen=True)
class _Failed:
    """A failing job of a head, with what tells its pull request from another one's (its number and
    head are the failure's)."""

    head_ref: str | None
    author: str | None
    failure: OtherFailure


def index_failures(prs: dict[int, PullRequest], landed: Mapping[int, frozenset[str]]) -> dict[str, list[_Failed]]:
    """job group -> the failing jobs of the heads that landed, for `other_failures` (built once per
    build). As PyTorch's Dr. CI (isEligibleCommitForSimilarFailureCheck), only a pull request's last
    head, once it landed (closed, and a main commit landed it: `load_merge_commits`), is evidence:
    it was merged over its failures, which its reviewers took for unrelated; any other head is work
    in progress, whose failures may be its own."""
    out: dict[str, list[_Failed]] = {}
    for pr in prs.values():
        if pr.state != "closed" or not landed.get(pr.number):
            continue
        for j in pr.jobs:
            at = j.completed_at or j.started_at
            if j.state != "failure" or at is None:
                continue
            failure = OtherFailure(pr.number, pr.head_sha, j.job_group, j.job_id, j.run_id, at,
                                   message_key(j.failure_line), j.cancelled, j.build_env or "", j.test_config or "",
                                   frozenset((t.key, t.message) for t in j.tests))
            out.setdefault(j.job_group, []).append(_Failed(pr.head_ref, pr.author, failure))
    return out


class _ByGroup(Mapping):
    """job group -> a head's list of it, built when first asked (`_build`); a group whose list is
    empty is absent. The classifier asks only for the groups the head's jobs fail: on PyTorch's scale
    building every group's for every head cost most of a build. Iterating, or asking the length or
    the truth, builds every group's, which nothing in a build does."""

    def __init__(self):
        self._built: dict[str, list] = {}

    def _groups(self) -> Iterable[str]:
        raise NotImplementedError

    def _build(self, group: str) -> list:
        raise NotImplementedError

    def __getitem__(self, group: str) -> list:
        if group not in self._built:
            self._built[group] = self._build(group)
        if not self._built[group]:
            raise KeyError(group)
        return self._built[group]

    def __iter__(self):
        return (group for group in self._groups() if group in self)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class _OtherAuthors(_ByGroup):
    """job group -> the failures of `index` a failure of `pr` may repeat (`other_failures`)."""

    def __init__(self, index: dict[str, list[_Failed]], pr: PullRequest, start: dt.datetime, end: dt.datetime):
        super().__init__()
        self._index, self._pr, self._start, self._end = index, pr, start, end

    def _groups(self) -> Iterable[str]:
        return self._index

    def _build(self, group: str) -> list[OtherFailure]:
        pr = self._pr
        return [f.failure for f in self._index.get(group, ()) if f.failure.pr != pr.number
                and f.failure.sha != pr.head_sha and f.head_ref != pr.head_ref and f.author is not None
                and f.author != pr.author and self._start <= f.failure.at <= self._end]


def similar_span(pr: PullRequest, since: dt.datetime | None) -> tuple[dt.datetime, dt.datetime] | None:
    """When the failures PyTorch's Dr. CI takes as similar to `pr`'s happened (hasSimilarFailures): from
    SIMILAR_LOOKBACK before `since` (the merge base's push; unknown: the head's) up to the head's push;
    None when the head's push is unknown or that spans more than SIMILAR_SPAN."""
    end = pr.pushed_at
    if end is None:
        return None
    start = (since or end) - SIMILAR_LOOKBACK
    return None if end - start > SIMILAR_SPAN else (start, end)


def other_failures(index: dict[str, list[_Failed]], pr: PullRequest,
                   since: dt.datetime | None) -> Mapping[str, list[OtherFailure]]:
    """job group -> the failures of other authors' landed pull requests (`index_failures`) a failure
    of `pr` may repeat, as PyTorch's Dr. CI searches them: failed in `similar_span`; another pull
    request, head and branch; both authors known and different."""
    span = similar_span(pr, since)
    if pr.author is None or span is None:
        return {}
    return _OtherAuthors(index, pr, *span)


def attach_runs(con, lake: Lake, day: str, repo: str, prs: dict[int, PullRequest]) -> None:
    """What the window's `workflow_run` says of the heads: their runs awaiting approval (`attach_awaiting`),
    and the state of each failing job's run (`attach_run_ends`)."""
    if prs and register_runs(con, lake, day):
        attach_awaiting(con, repo, prs)
        attach_run_ends(con, [j for p in prs.values() for j in p.jobs])


def attach_awaiting(con, repo: str, prs: dict[int, PullRequest]) -> int:
    """Add to each head its workflow runs awaiting approval (view wr), as jobs in state `awaiting`: each
    workflow's newest run on the head whose conclusion is one of AWAITING_CONCLUSIONS and that has no
    job in `pr_jobs` (PyTorch's Dr. CI lists a workflow run only when it has no job). Returns how many."""
    by_sha: dict[str, list[PullRequest]] = {}
    for pr in prs.values():
        by_sha.setdefault(pr.head_sha, []).append(pr)
    _register_list(con, "head_shas", "sha", pa.array(sorted(by_sha), pa.string()))
    found = rows(con, "awaiting_runs", {"repo": repo, "conclusions": list(AWAITING_CONCLUSIONS)})
    for r in found:
        name = r["name"] or f"workflow run {r['run_id']}"
        for pr in by_sha[r["head_sha"]]:
            pr.jobs.append(HeadJob(name=name, job_group=name, state="awaiting", run_id=r["run_id"], workflow=name))
    return len(found)


def attach_run_ends(con, jobs: list[HeadJob]) -> None:
    """Give each failing job its workflow run attempt's state as view wr holds it (`run_ends`): a test
    job's reports are due only after its run ended (`classify.results_overdue`). A job whose run the
    lake never heard of is left without one."""
    failing: dict[tuple[int, int], list[HeadJob]] = {}
    for job in jobs:
        if job.state == "failure" and job.run_id is not None and job.run_attempt is not None:
            failing.setdefault((job.run_id, job.run_attempt), []).append(job)
    for key, (status, ended_at) in run_ends(con, sorted(failing)).items():
        for job in failing[key]:
            job.run_status, job.run_ended_at = status, ended_at


def register_runs(con, lake: Lake, day: str) -> bool:
    """View wr over the window's `workflow_run` (a row per run attempt: hundreds to a few thousand a
    day, not jobs), read whole, no extract (the queries cost a few ms over the window); False when
    there is no file."""
    return register_with(con, lake, "workflow_run", days_ending(day, WINDOW_DAYS), "wr", RUN_COLUMNS)


def run_ends(con, keys: list[tuple[int, int]]) -> dict[tuple[int, int], tuple[str, dt.datetime | None]]:
    """(status, end) of each of these run attempts (run_id, run_attempt) the lake heard of, as view wr
    holds them (sql/run_ends.sql)."""
    if not keys:
        return {}
    con.register("job_runs", pa.table({"run_id": pa.array([k[0] for k in keys], pa.int64()),
                                       "run_attempt": pa.array([k[1] for k in keys], pa.int64())}))
    return {(r["run_id"], r["run_attempt"]): (r["status"], r["ended_at"]) for r in rows(con, "run_ends")}


def _register_list(con, name: str, column: str, values: pa.Array) -> None:
    """A one-column view `name` the queries join with: an Arrow table, not row-by-row inserts
    (thousands of them cost more than the query)."""
    con.register(name, pa.table({column: values}))


def attach_tests(con, lake: Lake, day: str, prs: dict[int, PullRequest], seen: ExtractPass | None = None) -> None:
    """Fill each failing job's failing tests and messages from `test_results`, and its log
    classifier's captures (`attach_captures`). `seen`: what this pass found of the extracts
    (`register_extract`), shared with the other reads of the build."""
    if failing := _failing(prs):
        _attach_failed_tests(con, lake, days_ending(day, WINDOW_DAYS), failing, seen)
        attach_captures(con, lake, day, failing)  # the same jobs (temp table failing_jobs)


def attach_earlier_tests(con, lake: Lake, day: str, prs: dict[int, PullRequest],
                         seen: ExtractPass | None = None) -> None:
    """Fill the failing jobs of `load_earlier_heads`' pull requests with their failing tests and
    messages, from `test_results` of LANDED_DAYS (the similar-failure search compares no captures)."""
    if failing := _failing(prs):
        _attach_failed_tests(con, lake, days_ending(day, LANDED_DAYS), failing, seen)


def _failing(prs: dict[int, PullRequest]) -> dict[int, HeadJob]:
    return {j.job_id: j for p in prs.values() for j in p.jobs if j.state == "failure" and j.job_id is not None}


def _attach_failed_tests(con, lake: Lake, days: list[str], failing: dict[int, HeadJob],
                         seen: ExtractPass | None) -> None:
    """Fill `failing`'s jobs with their failing tests and messages from `test_results` of `days`
    (sql/head_tests.sql over temp table failing_jobs, left registered)."""
    _register_list(con, "failing_jobs", "job_id", pa.array(list(failing), pa.int64()))
    if not register_extract(con, lake, FAILURES, days, "tr", seen):
        return
    tests: dict[int, list[FailedTest]] = {}
    for r in rows(con, "head_tests"):
        tests.setdefault(r["job_id"], []).append(FailedTest(r["test"], message_key(r["message"]),
                                                            first_line(r["message"])))
    for job_id, found in tests.items():
        failing[job_id].tests = tuple(found)


def attach_results(con, lake: Lake, day: str, prs: dict[int, PullRequest]) -> None:
    """Give the failing test jobs read from the REST API the infra reason `pr_jobs` will give them once
    their records are ingested: none of their test reports landed (`classify.no_results`), or the
    reports that landed marked the job suspect (`test_jobs.infra_reason`). Reports land by job id,
    whatever became of the job's webhooks. Their job ids alone are looked up (a lost webhook is rare),
    in `test_jobs` over the window."""
    rest = {j.job_id: j for p in prs.values() for j in p.jobs
            if j.from_rest and j.state == "failure" and j.test_config and j.job_id is not None}
    if not rest:
        return
    reported: dict[int, str | None] = {}
    if lake.register(con, "test_jobs", days_ending(day, WINDOW_DAYS), name="tjr"):
        _register_list(con, "rest_test_jobs", "job_id", pa.array(list(rest), pa.int64()))
        reported = {r["job_id"]: r["infra_reason"] for r in rows(con, "reported_jobs")}
    for job_id, job in rest.items():
        reason = reported[job_id] if job_id in reported else NO_TEST_RESULTS
        if reason is not None:
            job.failure_class, job.infra_reason = "infra", reason


def attach_captures(con, lake: Lake, day: str, failing: dict[int, HeadJob]) -> None:
    """Fill the failing jobs' (temp table failing_jobs) log classifier captures from `job_failure` over
    the window: `pr_jobs` keeps the line only, and PyTorch's flaky rules are matched against both. A
    job `job_failure` has is marked read (`HeadJob.log_read`): a failure without a line then says its
    log was read and no rule matched, not that it may not be read yet. A row per failed job a day,
    read whole (no extract)."""
    if not register_with(con, lake, "job_failure", days_ending(day, WINDOW_DAYS), "jfc", JOB_FAILURE_ADDED):
        return
    for r in rows(con, "head_captures"):
        job = failing[r["job_id"]]
        job.captures = tuple(c for c in r["captures"] or () if c)
        job.log_read = LOG_WHOLE if r["complete"] else LOG_PART


def base_shas(con, lake: Lake, day: str, seen: ExtractPass | None = None) -> dict[str, tuple[str | None, str | None]]:
    """head sha -> (base sha, base ref) as the pull_request webhooks carried them."""
    if not register_extract(con, lake, PR_BASES, days_ending(day, WINDOW_DAYS), "we", seen):
        return {}
    return {r["head_sha"]: (r["base_sha"], r["base_ref"]) for r in rows(con, "base_shas")}


@dataclass
class Main:
    """Main's commits in order and their failures, to build each head's `Trunk` from."""

    order: list[str] = field(default_factory=list)
    # sha -> (job group, job id, run id, message key of its line, cancelled) of each failed group
    failures: dict[str, list[tuple[str, int | None, int | None, str, bool]]] = field(default_factory=dict)
    tests: dict[tuple[str, str, str], frozenset[tuple[str, str]]] = field(default_factory=dict)
    # merge base sha -> its jobs (`classify.base_name`), for those that have any
    jobs: dict[str, frozenset[str]] = field(default_factory=dict)
    branch: str = "main"  # the main branch's name (without refs/heads/)
    pushed: dict[str, dt.datetime] = field(default_factory=dict)  # sha -> when main got it (`main_commits`)

    @cached_property
    def place(self) -> dict[str, int]:
        """sha -> its index in `order`: asked for every commit of every head's window, where
        `order.index` would walk the list each time (`order` is set once, by `load_main`)."""
        return {sha: k for k, sha in enumerate(self.order)}

    def refs(self, merge_base: str | None) -> dict[str, int]:
        """sha -> distance from the merge base, for the merge base and NEAR_COMMITS on each side."""
        if merge_base not in self.place:
            return {}
        i = self.place[merge_base]
        lo, hi = max(0, i - NEAR_COMMITS), min(len(self.order), i + NEAR_COMMITS + 1)
        return {self.order[k]: abs(k - i) for k in range(lo, hi)}

    def window(self, merge_base: str | None, until: dt.datetime | None) -> dict[str, int]:
        """sha -> distance from the merge base of the main commits PyTorch's Dr. CI searches for a
        similar failure: pushed from SIMILAR_LOOKBACK before the merge base up to `until` (the head's
        push), none when that spans more than SIMILAR_SPAN (a merge base too old to tell by); the
        `refs` left out (BROKEN TRUNK asks them)."""
        start = self.pushed.get(merge_base) if merge_base in self.place else None
        if start is None or until is None or until - (start - SIMILAR_LOOKBACK) > SIMILAR_SPAN:
            return {}
        i, near = self.place[merge_base], self.refs(merge_base)
        return {sha: abs(k - i) for k, sha in enumerate(self.order) if sha not in near
                and sha in self.pushed and start - SIMILAR_LOOKBACK <= self.pushed[sha] <= until}

    def trunk(self, merge_base: str | None, own: frozenset[str] = frozenset(),
              until: dt.datetime | None = None) -> Trunk:
        """`own`: the main commits that landed this pull request (`load_merge_commits`), left out
        (`own_commits`); `until`: the head's push, the end of the `window` of similar failures."""
        t = Trunk(branch=self.branch)
        refs, window = self.refs(merge_base), self.window(merge_base, until)
        mine = self.own_commits(merge_base, own, {**refs, **window})
        t.failures = self._failures(merge_base, refs, mine)
        t.window = self._failures(merge_base, window, mine)
        t.tests = self.tests
        t.base_jobs = self.jobs.get(merge_base) if merge_base else None
        return t

    @cached_property
    def by_group(self) -> dict[str, list[tuple[int, str, int | None, int | None, str, bool]]]:
        """job group -> its failures on main as (index in `order`, sha, job id, run id, line, cancelled),
        in `order`: a head asks only for the groups it fails, where building every group's failures
        in its window for each head cost most of a build at PyTorch's pull request volume."""
        out: dict[str, list[tuple[int, str, int | None, int | None, str, bool]]] = {}
        for sha, k in self.place.items():
            for group, job_id, run_id, line, cancelled in self.failures.get(sha, ()):
                out.setdefault(group, []).append((k, sha, job_id, run_id, line, cancelled))
        return out

    def _failures(self, merge_base: str | None, refs: dict[str, int], mine: set[str]) -> GroupFailures:
        """job group -> its failures on the commits of `refs` (sha -> distance), those of `mine` left out."""
        return GroupFailures(self, merge_base, refs, mine)

    def own_commits(self, merge_base: str | None, own: frozenset[str],
                    refs: Mapping[str, int] | None = None) -> set[str]:
        """The commits of `refs` (default: near the merge base) whose failure may be the pull request's
        own: those that landed it, and every commit after the merge base that follows one of them (they
        carry the change until its revert). A pull request landed, reverted and pushed again otherwise finds
        its own breakage on main and is told it is the trunk's (PyTorch's Dr. CI likewise rejects
        the pull request's merge commits: isFailureFromPrevMergeCommit)."""
        if not own:
            return set()
        refs = self.refs(merge_base) if refs is None else refs
        base_at = self.place.get(merge_base, len(self.order))
        landed = min((self.place[s] for s in own if s in refs and self.place[s] > base_at), default=None)
        if landed is None:
            return set(own) & set(refs)
        return {s for s in refs if s in own or self.place[s] >= landed}


class GroupFailures(_ByGroup):
    """A head's main failures by job group (`Main._failures`): the commits of `refs` (sha -> distance
    from the merge base) that failed it, those of `mine` left out, in `order` (one after the merge
    base's is `after`)."""

    def __init__(self, main: Main, merge_base: str | None, refs: dict[str, int], mine: set[str]):
        super().__init__()
        self._main, self._refs, self._mine, self._merge_base = main, refs, mine, merge_base
        self._base_at = main.place.get(merge_base, -1)
        places = [main.place[sha] for sha in refs if sha in main.place]
        self._lo, self._hi = (min(places), max(places)) if places else (0, -1)

    def _groups(self) -> Iterable[str]:
        return self._main.by_group

    def _build(self, group: str) -> list[MainFailure]:
        found = self._main.by_group.get(group, ())
        out = []
        for k, sha, job_id, run_id, line, cancelled in found[bisect.bisect_left(found, (self._lo,)):]:
            if k > self._hi:
                break
            if sha in self._refs and sha not in self._mine:
                out.append(MainFailure(sha, group, job_id, run_id, sha == self._merge_base,
                                       self._refs[sha], line, cancelled, k > self._base_at))
        return out


def load_merge_commits(con, lake: Lake, day: str, repo: str, numbers: set[int],
                       seen: ExtractPass | None = None) -> dict[int, frozenset[str]]:
    """pr -> the main commits that landed it (sql/pr_merges.sql), over the webhooks of the days whose
    main commits a merge base's neighbours can be (TRUNK_DAYS) and those the earlier pull requests the
    similar-failure search reads landed on (LANDED_DAYS)."""
    days = days_ending(day, max(TRUNK_DAYS, LANDED_DAYS))
    if not numbers or not register_extract(con, lake, PR_MERGES, days, "pm", seen):
        return {}
    _register_list(con, "pr_numbers", "number", pa.array(sorted(numbers), pa.int64()))
    found: dict[int, set[str]] = {}
    for r in rows(con, "merge_commits", {"repo": repo}):
        found.setdefault(r["number"], set()).add(r["sha"])
    return {n: frozenset(s) for n, s in found.items()}


def load_main(con, lake: Lake, day: str, merge_bases: set[str], seen: ExtractPass | None = None,
              branch: str = "main", until: dt.datetime | None = None) -> Main:
    """Main around `merge_bases`; `until`: the latest head push, the end of every head's `Main.window`."""
    main = Main(branch=branch)
    if not lake.register(con, "commit_health", days_ending(day, TRUNK_DAYS), name="ch"):
        return main
    commits = rows(con, "main_commits")
    main.order = [r["sha"] for r in commits]
    main.pushed = {r["sha"]: r["pushed_at"] for r in commits if r["pushed_at"] is not None}
    if not register_extract(con, lake, JOB_FAILURES, days_ending(day, JOB_DAYS), "wj", seen):
        con.register("wj", _JOB_FAILURES.empty_table())
    for r in rows(con, "main_failures"):
        main.failures.setdefault(r["sha"], []).append((r["job_group"], r["job_id"], r["run_id"],
                                                       message_key(r["failure_line"]), bool(r["cancelled"])))
    main.jobs = merge_base_jobs(con, merge_bases)
    refs = {sha for mb in merge_bases for sha in (*main.refs(mb), *_widest_window(main, mb, until))}
    if refs and register_extract(con, lake, FAILURES, days_ending(day, TRUNK_DAYS), "tr", seen):
        _register_list(con, "ref_shas", "sha", pa.array(sorted(refs), pa.string()))
        tests: dict[tuple[str, str, str], set[tuple[str, str]]] = {}
        for r in rows(con, "main_tests"):
            tests.setdefault((r["sha"], r["build_env"], r["test_config"]), set()).add(
                (r["test"], message_key(r["message"])))
        main.tests = {k: frozenset(v) for k, v in tests.items()}
    return main


def _widest_window(main: Main, merge_base: str, until: dt.datetime | None) -> dict[str, int]:
    """The commits of any head's `Main.window` with this merge base, pushed by `until`: the window up to
    the latest push the span allows (a later head's window is empty, an earlier one's inside it)."""
    start = main.pushed.get(merge_base)
    if start is None or until is None:
        return {}
    return main.window(merge_base, min(until, start - SIMILAR_LOOKBACK + SIMILAR_SPAN))


def merge_base_jobs(con, merge_bases: set[str]) -> dict[str, frozenset[str]]:
    """sha -> the jobs that ran at each merge base main's commit_health (view ch) lists, whatever their
    conclusion, named as upstream compares them (`base_name`); a merge base without any is left out."""
    if not merge_bases:
        return {}
    _register_list(con, "merge_base_shas", "sha", pa.array(sorted(merge_bases), pa.string()))
    jobs: dict[str, set[str]] = {}
    for r in rows(con, "merge_base_jobs"):
        jobs.setdefault(r["sha"], set()).add(base_name(f"{r['workflow']} / {r['job_name']}"))
    return {sha: frozenset(names) for sha, names in jobs.items()}


Sighting = tuple[str, str, str | None, FlakySighting]


@dataclass(frozen=True)
class Sightings:
    """The window's failures of flaky tests (`load_flaky`) by (test, message key), in the order
    found. A pull request's comment looks up only its own failing tests in them (`flaky_for`), so
    the comments of a day cost what their heads fail, not pull requests x sightings."""

    tests: frozenset[str]
    by_key: dict[tuple[str, str], list[tuple[str | None, FlakySighting]]]


def index_sightings(rows: list[Sighting]) -> Sightings:
    by_key: dict[tuple[str, str], list[tuple[str | None, FlakySighting]]] = {}
    for test, message, branch, seen in rows:
        by_key.setdefault((test, message), []).append((branch, seen))
    return Sightings(frozenset(t for t, _ in by_key), by_key)


def load_flaky(con, lake: Lake, day: str, prs: dict[int, PullRequest], seen: ExtractPass | None = None) -> Sightings:
    """Every failure in the window of a flaky test that fails on a head."""
    keys = {t.key for p in prs.values() for j in p.jobs for t in j.tests}
    if not keys or not lake.register(con, "flaky_tests", [day], name="ft"):
        return index_sightings([])
    if not register_extract(con, lake, FAILURES, days_ending(day, WINDOW_DAYS), "tr", seen):
        return index_sightings([])
    _register_list(con, "head_tests", "test", pa.array(sorted(keys), pa.string()))
    return index_sightings([(r["test"], message_key(r["message"]), r["head_branch"],
                             FlakySighting(r["sha"], r["job_id"], r["run_id"])) for r in rows(con, "flaky_sightings")])


class _OffBranch(Mapping):
    """(test, message key) -> the first sighting off the pull request's branch, found when asked."""

    def __init__(self, sightings: Sightings, pr: PullRequest):
        self._by_key, self._sha, self._ref = sightings.by_key, pr.head_sha, pr.head_ref

    def __getitem__(self, key: tuple[str, str]) -> FlakySighting:
        for branch, seen in self._by_key.get(key, ()):
            if seen.sha != self._sha and (branch is None or branch != self._ref):
                return seen
        raise KeyError(key)

    def __iter__(self):
        return (key for key in self._by_key if key in self)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def flaky_for(sightings: Sightings, pr: PullRequest, disabled: Mapping | None = None,
              reenabled: Mapping | None = None, base_pushed: dt.datetime | None = None) -> Flaky:
    """The sightings off this pull request's branch: a failure is not evidence for itself, nor is
    the same failure on an earlier head of the same pull request (PyTorch's Dr. CI likewise
    ignores similar failures by the same author); the `disabled` and lately `reenabled` tests
    (`load_disabled`), with the issues the pull request says it closes and when its merge base was
    pushed."""
    return Flaky(_OffBranch(sightings, pr), sightings.tests, disabled or {}, pr.closes, reenabled or {}, base_pushed)


Disabled = dict[tuple[str, str], tuple[DisabledIssue, ...]]
Reenabled = dict[tuple[str, str], tuple[DisabledIssue, dt.datetime]]


def load_disabled(con, lake: Lake, day: str) -> tuple[Disabled, Reenabled]:
    """From the window's `disabled_tests`, read once: (method, class) -> the DISABLED issues of the
    day's published list that disable it (sql/disabled_issues.sql; none when the list is local), and
    (method, class) -> the issue of a test re-enabled over the window and not disabled again, with
    when its issue closed (sql/reenabled_tests.sql): GitHub's `closed_at` when the list recorded
    it, else the start of the day the list dropped the test (all the lake knows then: a close
    earlier that day is taken for one before a merge base pushed that day)."""
    if not register_with(con, lake, "disabled_tests", days_ending(day, WINDOW_DAYS), "dta", DISABLED_ADDED):
        return {}, {}
    disabled: dict[tuple[str, str], list[DisabledIssue]] = {}
    for r in rows(con, "disabled_issues", {"day": dt.date.fromisoformat(day)}):
        disabled.setdefault(method_and_class(r["test"]), []).append(
            DisabledIssue(r["number"], r["url"] or "", tuple(r["platforms"] or ())))
    reenabled = {method_and_class(r["test"]): (DisabledIssue(r["number"], ""), r["closed_at"] or dt.datetime.combine(
        r["day"], dt.time(), dt.timezone.utc)) for r in rows(con, "reenabled_tests")}
    return {k: tuple(v) for k, v in disabled.items()}, reenabled


