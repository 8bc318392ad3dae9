"""Gap repair: find what lost webhook deliveries left incomplete in the lake, and ask GitHub.

GitHub does not retry a delivery that failed, so a lost `workflow_job completed` leaves a job
`in_progress` forever (and Dr. CI comments, the HUD and the flaky-test evidence stale with it).
Every few minutes (a Dagster schedule) this reads the last days of `workflow_job` and
`workflow_run` and finds
- jobs whose highest known state is not `completed` and was last heard of more than `limit` ago,
- run attempts with no job heard of at all, requested more than `limit` ago (a re-run's attempt:
  since the re-run, not the run's creation);
then reads each such run attempt's jobs from the REST API (one request per hundred jobs, not one
per job) and writes what it finds as `rest` records (`shapes.py`): the current state of each stale
job, every job of a run that had none, and every job GitHub lists beside a stale one that the lake
never heard of (all its deliveries lost in the same outage: no later pass would find it, since its
attempt is not without jobs). The ingest merges them with the webhooks by the state
lattice, and the delivery ids are those `torchci backfill` writes, so a repair repeated, or
followed by the late webhook itself, adds no row.

What the lake remembers of GitHub's answers keeps each gap to one read per thing it could learn:
once GitHub has shown a run attempt completed (its `rest` completion record is in the lake), the
attempt is never asked about again, whatever that answer held. A completed attempt's jobs no longer
change, so that one read settles a run cancelled while pending, which had jobs whose deliveries
were lost or, replaced in its concurrency group before any was created, no job at all; and a job
GitHub itself still shows queued in a completed run. A job that really runs for hours is not
looked up on each pass (on a PyTorch-sized day, more requests an hour than a token's budget): once
GitHub has shown it in the state the lake has, its attempt is asked again each time its age has
grown by BACKOFF, unless the lake heard the attempt complete, which makes the job a certain gap
(sql/stale_jobs.sql); a run GitHub showed without jobs while it waits likewise. Such a lookup of a
running attempt reads its jobs alone (`_read_attempt`). A run GitHub answers 404 for, in a
repository it shows, may have been deleted: that is an answer, counted, not a failed lookup. But
GitHub also answers 404 for a run it created moments ago, or on a passing error, and a run taken
for deleted loses its jobs for good: the first 404 is noted as a suspicion (`gone.py`), and the run
is asked about again once CONFIRM_GONE_AFTER has passed. A second 404 makes it deleted, and no later
pass asks again; an answer repairs it as any other, one pass later than it would have been.
A pass leaves out the run attempts a pass beside it (passes overlap when one is slow) is asking
about, or was just answered for (`claims.py`).
"""

from __future__ import annotations

import datetime as dt
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from resources.github import GitHubError, GitHubResource, rate_limited
from resources.lake import Lake, connect
from resources.sql import SqlFiles, execute
from resources.storage import Store
from torchci_assets.backfill import claims
from torchci_assets.backfill import gone as deleted
from torchci_assets.backfill import shapes
from torchci_assets.backfill.files import Part
from torchci_assets.backfill.pr_closes import CloseReport, repair_closes
from torchci_assets.backfill.rest import Budget, RestReader

DEFAULT_LIMIT = dt.timedelta(minutes=30)
PASS_EVERY = dt.timedelta(minutes=5)  # the schedule's interval (jobs/gap_repair.py)
# The share of the hour's GitHub budget a pass leaves to the writers that share its credentials (the
# relay's dispatches and check runs, Dr. CI's comments, the DISABLED issues): a late repair costs a
# stale cell a few more minutes, a dispatch or a comment refused for the rate limit costs a backend or a
# developer its news. A pass asks no more once GitHub says less than this share is left (jobs/gap_repair.py).
DEFAULT_RESERVE = 0.2
RESERVE_VAR = "TORCHCI_GAP_REPAIR_RESERVE"
# A job GitHub showed still running is asked about again when its run attempt's age has grown by
# this factor: each wait a quarter of the age, so a 3-hour job costs 9 lookups, not 31.
BACKOFF = 1.25
LOOKBACK_DAYS = 2  # jobs run at most a day or so; older silence is history, not a gap
MAX_JOBS = 5_000
MAX_RUNS = 500
# a run concluding so has a failing job (cancelled: the HUD's failing conclusions, as a job's)
FAILING_RUN_CONCLUSIONS = ("failure", "timed_out", "cancelled", "startup_failure")
# A run GitHub answered 404 for is asked again this long after, and deleted if it answers 404 again:
# long past GitHub's replication lag and a passing error, short beside the two days a gap is looked for.
CONFIRM_GONE_AFTER = dt.timedelta(minutes=30)
_SQL = SqlFiles(__file__)


@dataclass
class Gaps:
    stale_jobs: dict[tuple[str, int, int], set[int]] = field(default_factory=dict)  # (repo, run, attempt) -> job ids
    heard_jobs: dict[tuple[str, int, int], set[int]] = field(default_factory=dict)  # of those attempts: every job heard of
    jobless_runs: set[tuple[str, int, int]] = field(default_factory=set)
    unexplained_runs: set[tuple[str, int, int]] = field(default_factory=set)  # failed, no job heard failing
    heard_completed: set[tuple[str, int, int]] = field(default_factory=set)  # of stale_jobs': run heard completing
    waiting: int = 0  # stale jobs GitHub showed running (or queued), their attempt not due this pass
    suspected: set[tuple[str, int, int]] = field(default_factory=set)  # GitHub answered 404 for once before

    @property
    def attempts(self) -> list[tuple[str, int, int]]:
        return sorted(set(self.stale_jobs) | self.jobless_runs | self.unexplained_runs)

    def drop(self, unwanted: Callable[[tuple[str, int, int]], bool]) -> int:
        """Leave out the attempts `unwanted` says not to ask about; how many there were."""
        keys = [key for key in self.attempts if unwanted(key)]
        for key in keys:
            self.stale_jobs.pop(key, None)
            self.jobless_runs.discard(key)
            self.unexplained_runs.discard(key)
        return len(keys)

    def run_first(self, key: tuple[str, int, int]) -> bool:
        """Whether the attempt's run is likely over: a jobless or failed run, or one heard completing."""
        return key not in self.stale_jobs or key in self.heard_completed


@dataclass
class RepairReport:
    stale_jobs: int = 0
    waiting: int = 0  # stale jobs GitHub last showed running, not asked about on this pass (BACKOFF)
    jobless_runs: int = 0
    unexplained_runs: int = 0
    answered: list[tuple[str, int, int]] = field(default_factory=list)  # run attempts GitHub answered for
    gone: list[tuple[str, int, int]] = field(default_factory=list)  # a second 404 (the repository answers): deleted
    suspected: list[tuple[str, int, int]] = field(default_factory=list)  # a first 404: asked again later
    cleared: list[tuple[str, int, int]] = field(default_factory=list)  # answered after a 404: not deleted
    known_gone: int = 0  # run attempts an earlier pass found deleted, not asked again
    suspected_waiting: int = 0  # run attempts an earlier pass heard a first 404 for, not yet asked again
    claimed_elsewhere: int = 0  # run attempts another pass is asking about (or was just answered for): left out
    repaired_jobs: int = 0  # stale jobs GitHub shows in a higher state than the lake had
    unheard_jobs: int = 0  # jobs of a looked-up attempt the lake had never heard of, written whole
    deliveries: int = 0
    failed: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # what to fix: GitHub refused the credentials or access
    not_asked: int = 0  # run attempts left unasked after such a refusal (every one would be refused too)
    kept_for_writers: int = 0  # run attempts left to a later pass: the budget left was below the reserve
    closes_kept: bool = False  # the pull requests' closes not compared, for the same reason
    closes: CloseReport = field(default_factory=CloseReport)  # the pull requests compared, when they were

    @property
    def looked_up(self) -> int:
        return len(self.answered)

    @property
    def runs_gone(self) -> int:
        return len(self.gone)

    @property
    def problem(self) -> str | None:
        """Why the pass must show as failed, or None: a refusal no later pass gets past by itself, or
        no lookup answered at all. A few lookups failing among answers retry on the next pass."""
        if self.refused:
            n = self.not_asked
            unasked = f" ({n} more run attempt{'s' * (n > 1)} not asked)" if n else ""
            return "; ".join(self.refused) + unasked + "; lost deliveries stay unrepaired until then"
        if self.failed and not self.looked_up and not self.gone and not self.suspected and not self.closes.listed:
            return (f"GitHub answered no lookup of this pass ({len(self.failed)} failed; first: "
                    f"{self.failed[0]}): check GITHUB_API_URL and the network, and that the credentials can read "
                    "Actions on these repositories; lost deliveries stay unrepaired until a pass gets answers")
        return None


def repair_reserve() -> float:
    """The share of the hour's GitHub budget a pass leaves to the writers sharing its credentials
    (RESERVE_VAR, from 0 to below 1; DEFAULT_RESERVE)."""
    text = os.environ.get(RESERVE_VAR, "").strip()
    try:
        share = float(text) if text else DEFAULT_RESERVE
    except ValueError:
        share = -1.0
    if not 0 <= share < 1:
        raise ValueError(f"{RESERVE_VAR}={text!r}: expected the share of GitHub's hourly budget kept for the "
                         "other writers, from 0 (none: gap repair has credentials of its own) to below 1, such as 0.2")
    return share


def find_gaps(lake: Lake, now: dt.datetime, limit: dt.timedelta = DEFAULT_LIMIT,
              every: dt.timedelta = PASS_EVERY) -> Gaps:
    """The gaps a pass at `now` asks GitHub about; passes run every `every` (a job waiting for its
    turn, `Gaps.waiting`, is due at the pass whose interval holds its moment: see sql/stale_jobs.sql)."""
    days = [(now.date() - dt.timedelta(days=i)).isoformat() for i in range(LOOKBACK_DAYS, -1, -1)]
    # A run's jobs (and the record of its completion) may all have landed the day before its first
    # row in the window (a run crossing midnight): looked for there too, or the run would be a gap
    # all day long.
    before = (now.date() - dt.timedelta(days=LOOKBACK_DAYS + 1)).isoformat()
    gaps = Gaps()
    con = connect()
    try:
        if not lake.register(con, "workflow_job", days):
            return gaps
        cutoff = now - limit
        runs = lake.register(con, "workflow_run", days) > 0
        _known_states(con, runs, lake.register(con, "webhook_events", [before, *days], name="deliveries") > 0)
        backoff = {"tick": _tick(now, every), "every_s": every.total_seconds(), "limit_s": limit.total_seconds(),
                   "growth": BACKOFF}
        _stale_jobs(con, gaps, cutoff, backoff)
        if runs:
            lake.register(con, "workflow_job", [before, *days], name="jobs_seen")
            params = {"cutoff": cutoff, "max_runs": MAX_RUNS, **backoff}
            gaps.jobless_runs = {tuple(r) for r in execute(con, _SQL["jobless_runs"], params).fetchall()}
            gaps.unexplained_runs = {tuple(r) for r in execute(
                con, _SQL["unexplained_runs"], {**params, "failing": list(FAILING_RUN_CONCLUSIONS)}).fetchall()}
        # the jobs heard of in the attempts looked up with some jobs: GitHub lists those too
        run_ids = sorted({run_id for _, run_id, _ in [*gaps.stale_jobs, *gaps.unexplained_runs]})
        for repo, run_id, attempt, job_id in execute(con, _SQL["heard_jobs"], {"run_ids": run_ids}).fetchall():
            gaps.heard_jobs.setdefault((repo, run_id, attempt), set()).add(job_id)
    finally:
        con.close()
    return gaps


def _known_states(con, runs: bool, answered: bool) -> None:
    """The temp tables sql/stale_jobs.sql reads: what GitHub answered, and what the lake heard."""
    rest = dict(_SQL.steps("answered_runs"))
    execute(con, rest["rest_runs" if answered else "no_rest_runs"])
    execute(con, rest["answered"])
    known = dict(_SQL.steps("known_states"))
    execute(con, known["backoff_due"])
    execute(con, known["completed_runs" if runs else "no_runs"])
    execute(con, known["shown_jobs" if answered else "none_shown"])


def _tick(now: dt.datetime, every: dt.timedelta) -> dt.datetime:
    """The schedule's tick a pass belongs to: passes started late still cover consecutive intervals."""
    seconds = every.total_seconds()
    return dt.datetime.fromtimestamp(now.timestamp() // seconds * seconds, dt.timezone.utc)


def _stale_jobs(con, gaps: Gaps, cutoff: dt.datetime, backoff: dict) -> None:
    params = {"cutoff": cutoff, "max_jobs": MAX_JOBS, **backoff}
    for repo, run_id, attempt, job_id, _status, _heard, completed, due in execute(
            con, _SQL["stale_jobs"], params).fetchall():
        if due:
            gaps.stale_jobs.setdefault((repo, run_id, attempt), set()).add(job_id)
            if completed:
                gaps.heard_completed.add((repo, run_id, attempt))
        else:
            gaps.waiting += 1


def _repair_attempt(reader: RestReader, part: Part, key: tuple[str, int, int], gaps: Gaps,
                    repositories: dict[str, dict], report: RepairReport) -> None:
    repo, run_id, attempt = key
    repository = _repository(reader, repositories, repo)
    try:
        run, jobs = _read_attempt(reader, f"/repos/{repo}/actions/runs/{run_id}/attempts/{attempt}",
                                  gaps.run_first(key))
    except GitHubError as exc:
        if exc.status != 404:
            raise
        # the repository answered, the run does not: deleted (GitHub lets a run be) once confirmed
        (report.gone if key in gaps.suspected else report.suspected).append(key)
        return
    report.answered.append(key)
    if key in gaps.suspected:
        report.cleared.append(key)
    sender = None if run is None else run.get("triggering_actor") or run.get("actor")
    stale = gaps.stale_jobs.get(key)
    heard = gaps.heard_jobs.get(key, set())
    for job in jobs:
        job.setdefault("run_attempt", attempt)
        if stale is not None and job["id"] in stale:  # the state GitHub shows now
            part.add(shapes.job_records(job, repository, sender, heard=True))
            report.repaired_jobs += job.get("status") == "completed"
        elif job["id"] not in heard:  # never heard of (a jobless run's, or a stale job's sibling): all its states
            part.add(shapes.job_records(job, repository, sender, heard=False))
            report.unheard_jobs += stale is not None or key in gaps.unexplained_runs
    if run is None:  # still running, as its jobs show: nothing to add to what the lake heard of it
        return
    starts = [j["started_at"] for j in jobs if j.get("started_at") and j.get("status") in ("in_progress", "completed")]
    part.add(shapes.run_deliveries(run, min(starts, default=None), repository)[-1:] if stale else
             shapes.run_deliveries(run, min(starts, default=None), repository))


def _read_attempt(reader: RestReader, path: str, run_first: bool) -> tuple[dict | None, list[dict]]:
    """The attempt's run (None when its jobs show it running) and its jobs. A run read completed
    vouches for the jobs listed after it, which no later pass asks for again (sql/answered_runs.sql),
    so the run is read before them. But most lookups are of attempts still running: their jobs are
    read first, and one of them in progress proves the run not over, which costs one request, not
    two (on a PyTorch-sized day, half of gap repair's requests)."""
    if not run_first:
        jobs = list(reader.pages(f"{path}/jobs", "jobs"))
        if any(job.get("status") == "in_progress" for job in jobs):
            return None, jobs
    run = reader.json(path)
    if run_first or run.get("status") == "completed":  # the jobs again, listed after the run
        jobs = list(reader.pages(f"{path}/jobs", "jobs"))
    return run, jobs


def repair_gaps(gh: GitHubResource, archive: Store, lake: Lake, now: dt.datetime,
                limit: dt.timedelta = DEFAULT_LIMIT, log: Callable[[str], None] = lambda s: None,
                pulls_of: str | None = None, every: dt.timedelta = PASS_EVERY,
                reserve: float = DEFAULT_RESERVE) -> RepairReport:
    """Find the gaps and write what GitHub says about them; a run attempt GitHub will not answer
    for is reported and left for the next pass, as are those left once GitHub says less than
    `reserve` of the hour's budget is left (DEFAULT_RESERVE). With `pulls_of`, also the closes of that
    repository's pull requests whose delivery was lost (`pr_closes`)."""
    gaps, gone = find_gaps(lake, now, limit, every), deleted.load(archive, log)
    report = RepairReport(stale_jobs=sum(len(v) for v in gaps.stale_jobs.values()), waiting=gaps.waiting,
                          jobless_runs=len(gaps.jobless_runs), unexplained_runs=len(gaps.unexplained_runs))
    _leave_out_gone(gaps, gone, now, report)
    owner, started = f"{now:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:12]}", time.monotonic()
    report.claimed_elsewhere = _claim(archive, gaps, owner, now)
    if not gaps.attempts and pulls_of is None:
        return report
    reader = RestReader(gh)
    try:
        _ask(reader, archive, lake, gaps, gone, now, pulls_of, report, reserve)
    finally:  # what GitHub answered stays claimed until the refresh has taken it; the rest is released
        if gaps.attempts:
            ended = now + dt.timedelta(seconds=time.monotonic() - started)
            claims.claim(archive, owner, report.answered, ended + claims.AFTER_ANSWER, now)
    _log_pass(log, report, reader, pulls_of)
    if report.kept_for_writers or report.closes_kept:
        closes = " and the pull requests' closes" if report.closes_kept else ""
        budget = reader.budget
        resets = f" (it resets in {max(0, budget.reset - int(time.time())) // 60} min)" if budget.reset else ""
        log(f"gap repair: {report.kept_for_writers} run attempt(s){closes} left to a later pass: GitHub's budget "
            f"left is {budget.remaining} of {budget.limit} this hour{resets}, under the {reserve:.0%} kept for the "
            f"relay, Dr. CI and the DISABLED issues sharing these credentials ({RESERVE_VAR}={reserve:g}; 0 when "
            "gap repair has credentials of its own)")
    return report


def below_reserve(budget: Budget, reserve: float) -> bool:
    """Whether GitHub's last answer left less than `reserve` of the hour's limit (False before any answer)."""
    return budget.remaining is not None and bool(budget.limit) and budget.remaining < reserve * budget.limit


def _claim(archive: Store, gaps: Gaps, owner: str, now: dt.datetime) -> int:
    """Leave out the run attempts another pass is asking about, or was just answered for, and claim
    the rest for this pass (`claims`); how many were left out."""
    if not gaps.attempts:
        return 0
    held = claims.held_elsewhere(archive, owner, now)
    left_out = gaps.drop(lambda key: claims.key(key) in held)
    claims.claim(archive, owner, gaps.attempts, now + claims.CLAIM_FOR, now)
    return left_out


def _ask(reader: RestReader, archive: Store, lake: Lake, gaps: Gaps, gone: deleted.Gone, now: dt.datetime,
         pulls_of: str | None, report: RepairReport, reserve: float) -> None:
    """Look up the gaps (and with `pulls_of`, the closes), write what GitHub answered, note its 404s."""
    part = Part(archive, f"rest-repair-{now.strftime('%Y%m%dT%H%M%S')}")
    repositories: dict[str, dict] = {}
    refused_repos = _repair_attempts(reader, part, gaps, repositories, report, reserve)
    if pulls_of is not None and not refused_repos & {pulls_of, "*"}:
        if below_reserve(reader.budget, reserve):
            report.closes_kept = True
        else:
            _repair_closes(reader, part, lake, pulls_of, repositories, now, gone, report)
    report.deliveries = part.commit()  # what was repaired before a refusal is kept
    _remember_gone(archive, gone, report, now)


def _log_pass(log: Callable[[str], None], report: RepairReport, reader: RestReader, pulls_of: str | None) -> None:
    closes = report.closes
    pulls = (f"; pull requests open here {closes.open_in_lake}, on GitHub {closes.open_on_github}, "
             f"{closes.looked_up} looked up, {closes.found_closed} found closed{_gone(closes.gone)}"
             f"{_gone(closes.suspected, 'answered 404 for the first time')}"
             f"{_gone(closes.suspected_waiting, 'more answered 404 for before, not asked this pass')}"
             if pulls_of else "")
    log(f"gap repair: {report.stale_jobs} stale jobs, {report.waiting} more GitHub showed running not asked "
        f"about this pass, {report.jobless_runs} run attempts without jobs, "
        f"{report.unexplained_runs} failed with no job heard failing; "
        f"{report.looked_up} looked up, {report.repaired_jobs} jobs found completed, {report.unheard_jobs} jobs "
        f"never heard of found beside them, {report.runs_gone} runs deleted on GitHub ({report.known_gone} more "
        f"known deleted, not asked), {len(report.suspected)} answered 404 for the first time "
        f"({report.suspected_waiting} more asked again later), {report.claimed_elsewhere} left to another pass "
        f"asking about them{pulls}; "
        f"{report.deliveries} records written, {len(report.failed)} failed, {report.not_asked} not asked; "
        f"{reader.budget.describe()}")


def _repair_closes(reader: RestReader, part: Part, lake: Lake, repo: str, repositories: dict[str, dict],
                   now: dt.datetime, gone: deleted.Gone, report: RepairReport) -> None:
    """The closes of `repo`'s pull requests whose delivery was lost (`pr_closes`), and what GitHub
    answered 404 for noted in `gone`; a refusal of the list is reported, every first 404 kept."""
    suspected = set(gone.pulls_suspected.get(repo, []))
    try:
        repair_closes(reader, part, lake, repo, lambda: _repository(reader, repositories, repo), now,
                      report.closes, set(gone.pulls.get(repo, [])), suspected)
    except GitHubError as exc:
        report.failed.append(f"{repo} pull requests: {exc}")
        if (fix := refusal(exc, repo, "Pull requests: read")) is not None:
            report.refused.append(fix)
    closes = report.closes
    closes.suspected_waiting = sorted(closes.unheard & suspected)
    gone.set_pulls(repo, closes.known_gone + closes.gone, closes.suspected, closes.unheard)


def _leave_out_gone(gaps: Gaps, gone: deleted.Gone, now: dt.datetime, report: RepairReport) -> None:
    """Leave out the runs found deleted, and those GitHub answered 404 for once, until their turn to
    confirm; note which of those asked about are such a confirmation."""
    def waits(key: tuple[str, int, int]) -> bool:
        since = gone.suspected_since(key)
        return since is not None and now - since < CONFIRM_GONE_AFTER

    report.known_gone = gaps.drop(gone.has_run)
    report.suspected_waiting = gaps.drop(waits)
    gaps.suspected = {key for key in gaps.attempts if gone.suspected_since(key) is not None}


def _remember_gone(archive: Store, gone: deleted.Gone, report: RepairReport, now: dt.datetime) -> None:
    for key in report.gone:
        gone.add_run(key, now)
    for key in report.suspected:
        gone.suspect_run(key, now)
    for key in report.cleared:
        gone.clear_run(key)
    gone.forget_runs_before(now - dt.timedelta(days=LOOKBACK_DAYS + 2))  # no pass reads its jobs any more
    deleted.save(archive, gone)


def _gone(numbers: list[int], what: str = "GitHub no longer has") -> str:
    shown = ", ".join(f"#{n}" for n in numbers[:10]) + (" ..." if len(numbers) > 10 else "")
    return f", {len(numbers)} {what} ({shown})" if numbers else ""


def _repository(reader: RestReader, repositories: dict[str, dict], repo: str) -> dict:
    """The repository's object for the records' `repository`, asked for once a pass."""
    if repo not in repositories:
        repositories[repo] = reader.json(f"/repos/{repo}")
    return repositories[repo]


def _repair_attempts(reader: RestReader, part: Part, gaps: Gaps, repositories: dict[str, dict],
                     report: RepairReport, reserve: float) -> set[str]:
    """Look up every gap's run attempt, newest first, until the budget left is below `reserve`; the
    repositories GitHub refused ("*": the credentials, for every repository)."""
    refused_repos: set[str] = set()
    for n, key in enumerate(gaps.attempts):
        if below_reserve(reader.budget, reserve):
            report.kept_for_writers = len(gaps.attempts) - n
            break
        if key[0] in refused_repos:
            report.not_asked += 1
            continue
        try:
            _repair_attempt(reader, part, key, gaps, repositories, report)
        except GitHubError as exc:
            report.failed.append(f"{key[0]} run {key[1]} attempt {key[2]}: {exc}")
            if (fix := refusal(exc, key[0])) is not None:
                report.refused.append(fix)
                refused_repos.add(key[0])
                if exc.status == 401:  # the credentials themselves: no repository is answered ("*")
                    refused_repos.add("*")
                    report.not_asked += len(gaps.attempts) - n - 1
                    break
    return refused_repos


def refusal(exc: GitHubError, repo: str, permission: str = "Actions: read") -> str | None:
    """What to fix when GitHub refused for good, else None: a refusal answers the same on every
    pass, so it must not pass for one of the transient failures the next pass retries."""
    if exc.status == 401:
        return (f"GitHub refused the credentials ({exc}): set a valid GITHUB_TOKEN, or GITHUB_APP_ID and "
                "GITHUB_APP_PRIVATE_KEY, where Dagster runs")
    if exc.status == 403 and not rate_limited(exc):
        return (f"GitHub refused to show {repo} ({exc}): the token or the GitHub App needs {permission} "
                f"on {repo}")
    return None
