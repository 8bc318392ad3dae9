"""`torchci backfill`: a repository's CI history from GitHub's REST API into the archive.

Day by day (the day a workflow run was created), oldest first: the day's runs of the branch (the
repository's default branch unless one is named; and with `prs`, of pull requests and of the
`ciflow/...` tags PyTorch's bot pushes for them) are listed, then read in parts of `part_runs`
runs, each run with every attempt's run object and jobs, its test-report artifacts (`test-reports*`, or the
config's `backfill.report_artifacts`) and its failed jobs' logs; the
branch's pushes of the day, each as its webhook told it (its commits those GitHub's compare of its two
ends lists), from GitHub's activity list; below the list's reach (or without it), the branch's
first-parent chain, each commit a push of its own. Each part is written, then the cursor saved (files.py),
so an interrupted backfill (a crash, a rate limit that outlasted the wait budget) is continued by
running the same command again, and the result is the same as one uninterrupted run.

GitHub returns at most 1,000 runs for a filtered list, so a window holding more (a busy day of a
large repository) is split in halves until each fits, down to a single second (the finest
`created` filter); a second that still holds more is read as far as GitHub lists it, and the runs
left out are counted and named in the log, never dropped in silence.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import TypeVar

from resources.github import GitHubError, GitHubResource, rate_limited
from resources.storage import Store
from torchci_assets.backfill import shapes
from torchci_assets.backfill.artifacts import artifact_job, report_prefix
from torchci_assets.backfill.files import Cursor, Part, branch_scope, scope
from torchci_assets.backfill.rest import Budget, RestReader
from torchci_assets.config import PYTORCH_REPORT_ARTIFACTS as REPORT_ARTIFACTS

T = TypeVar("T")

LIST_CAP = 1000  # GitHub's most results for one filtered workflow-run list
FAILED = ("failure", "timed_out")
# PyTorch's bot pushes `ciflow/<workflow>/<PR number>` tags to run a pull request's head through
# more workflows (trunk, periodic ...): push runs whose head_branch is the tag, not the branch.
CIFLOW_PREFIX = "ciflow/"
# commits dated before the window the branch's list is read on for, past the chain's last commit
# dated (or, by GitHub's activity list, pushed) in it: two pages of 100, a few requests, where
# reading to the root could take thousands. Where the activity list does not reach, a push of more
# commits all dated before the window (a long-lived branch fast-forwarded onto the branch) ends
# the walk, and what the window pushed below it is not read.
WALK_PAST = 200
# GitHub's activity types that move a branch to the activity's `after` (a branch deletion does not)
BRANCH_MOVES = ("push", "force_push", "pr_merge", "merge_queue_merge", "branch_creation")
# readings of the pull request list: the first, then again while pull requests updated meanwhile turn up
MAX_PULL_READINGS = 10


class MissingBranch(GitHubError):
    """The branch to read is not in the repository: reading nothing would look like a quiet history."""


@dataclass
class BackfillOptions:
    repo: str
    since: dt.date
    until: dt.date  # last day, inclusive
    branch: str | None = None  # None: the repository's default branch
    prs: bool = False
    ciflow_only: bool = False  # only the ciflow tag runs (days an older `prs` backfill finished)
    part_runs: int = 50
    page_size: int = 100  # items per list page (GitHub's most)
    report_artifacts: tuple[str, ...] = REPORT_ARTIFACTS  # name prefixes of the artifacts holding JUnit reports


@dataclass
class Progress:
    budget: Budget = field(default_factory=Budget)
    days: int = 0
    runs: int = 0
    attempts: int = 0
    jobs: int = 0
    deliveries: int = 0
    reports: int = 0
    reports_expired: int = 0
    reports_unattributed: int = 0
    unattributed: dict[str, int] = field(default_factory=dict)  # why (artifacts.py) -> reports
    other_artifacts: int = 0  # not named as report_artifacts: not read, whatever they hold
    report_artifacts: tuple[str, ...] = REPORT_ARTIFACTS
    logs: int = 0
    logs_missing: int = 0
    runs_cut: int = 0  # runs GitHub would not list (more than 1,000 created in one second)
    pushes: int = 0
    pull_requests: int = 0

    def line(self) -> str:
        cut = f", {self.runs_cut} GitHub would not list" if self.runs_cut else ""
        return (f"runs {self.runs} ({self.attempts} attempts, {self.jobs} jobs{cut}), reports {self.reports} "
                f"({self.reports_expired} expired, {self.reports_unattributed} without a job{self._why()}"
                f"{self._other()}), "
                f"logs {self.logs} ({self.logs_missing} missing), "
                f"pushes {self.pushes}, pull requests {self.pull_requests}; {self.budget.describe()}")

    def _why(self) -> str:
        reasons = ", ".join(f"{n} {why}" for why, n in sorted(self.unattributed.items()))
        return f" ({reasons})" if reasons else ""

    def _other(self) -> str:
        if not self.other_artifacts:
            return ""
        named = ", ".join(f"{p}*" for p in self.report_artifacts)
        return (f", {self.other_artifacts} other artifacts not read (test reports are the artifacts named {named}: "
                "backfill.report_artifacts in the config)")


def _days(opts: BackfillOptions) -> list[dt.date]:
    n = (opts.until - opts.since).days + 1
    return [opts.since + dt.timedelta(days=i) for i in range(max(0, n))]


def _stamp(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _window(reader: RestReader, repo: str, filters: dict, lo: dt.datetime, hi: dt.datetime,
            cut: Callable[[dt.datetime, int], None]) -> Iterator[dict]:
    """Runs created in [lo, hi] (whole seconds), split while GitHub would cut the list at LIST_CAP;
    `cut(second, total)` hears of a second that cannot be split and holds more."""
    path = f"/repos/{repo}/actions/runs"
    params = {**filters, "created": f"{_stamp(lo)}..{_stamp(hi)}", "per_page": reader.per_page}
    resp = reader.get(path, params)
    body = resp.json()
    total = body.get("total_count", 0)
    # split at the cap itself: should GitHub ever report a capped count, a full list is split too
    if total >= LIST_CAP and hi > lo:
        mid = (lo + (hi - lo) / 2).replace(microsecond=0)
        yield from _window(reader, repo, filters, lo, mid, cut)
        yield from _window(reader, repo, filters, mid + dt.timedelta(seconds=1), hi, cut)
        return
    if total > LIST_CAP:
        cut(lo, total)
    yield from body.get("workflow_runs") or []
    nxt = resp.links.get("next", {}).get("url")
    if nxt:
        yield from reader.pages(nxt, "workflow_runs", auth_path=path)


def is_ciflow_run(run: dict) -> bool:
    return (run.get("head_branch") or "").startswith(CIFLOW_PREFIX)


def run_queries(opts: BackfillOptions) -> list[tuple[dict, Callable[[dict], bool] | None]]:
    """The run lists a day's reading takes (filters, and which of the runs listed to keep): GitHub
    filters by one exact head_branch, so the ciflow tags' runs are the push runs kept by prefix."""
    ciflow: tuple[dict, Callable[[dict], bool] | None] = ({"event": "push"}, is_ciflow_run)
    if opts.ciflow_only:
        return [ciflow]
    queries: list[tuple[dict, Callable[[dict], bool] | None]] = [({"branch": opts.branch}, None)]
    if opts.prs:
        queries += [({"event": "pull_request"}, None), ciflow]
    return queries


def list_runs(reader: RestReader, opts: BackfillOptions, day: dt.date,
              cut: Callable[[dt.datetime, int], None]) -> list[dict]:
    """The day's runs (latest attempt each) of the branch, and with `prs` of pull requests and
    their ciflow tags, by id."""
    lo = dt.datetime.combine(day, dt.time(), dt.timezone.utc)
    hi = lo + dt.timedelta(days=1, seconds=-1)
    runs: dict[int, dict] = {}
    for filters, keep in run_queries(opts):
        for run in _window(reader, opts.repo, filters, lo, hi, cut):
            if keep is None or keep(run):
                runs[run["id"]] = run
    return [runs[k] for k in sorted(runs)]


def _first_started(jobs: list[dict]) -> str | None:
    starts = [j["started_at"] for j in jobs if j.get("started_at") and j.get("conclusion") != "skipped"
              and j.get("status") in ("in_progress", "completed")]
    return min(starts, key=shapes.parse_time) if starts else None


def _day_of(*stamps: str | None) -> str:
    for s in stamps:
        t = shapes.parse_time(s)
        if t is not None:
            return t.date().isoformat()
    raise ValueError("no timestamp")


def read_attempt(reader: RestReader, repo: str, run: dict, repository: dict, part: Part,
                 progress: Progress) -> list[dict]:
    """One attempt's run object and jobs as deliveries, and its failed jobs' logs; its jobs."""
    attempt = run.get("run_attempt") or 1
    jobs = list(reader.pages(f"/repos/{repo}/actions/runs/{run['id']}/attempts/{attempt}/jobs", "jobs"))
    sender = run.get("triggering_actor") or run.get("actor")
    for job in jobs:
        # older API versions leave these out of a job; the run attempt it was listed under has them
        for key, value in (("run_attempt", attempt), ("workflow_name", run.get("name")),
                           ("head_branch", run.get("head_branch"))):
            if job.get(key) is None:
                job[key] = value
        part.add(shapes.job_deliveries(job, repository, sender))
        if job.get("conclusion") in FAILED:
            day = _day_of(job.get("completed_at"), job.get("started_at"), job.get("created_at"), run.get("updated_at"))
            if reader.download(f"/repos/{repo}/actions/jobs/{job['id']}/logs", part.store,
                               f"logs/day={day}/{job['id']}.log"):
                progress.logs += 1
            else:
                progress.logs_missing += 1
    part.add(shapes.run_deliveries(run, _first_started(jobs), repository))
    progress.attempts += 1
    progress.jobs += len(jobs)
    return jobs


def read_artifacts(reader: RestReader, opts: BackfillOptions, run_id: int, jobs: dict[int, dict], part: Part,
                   progress: Progress) -> None:
    """The run's test-report zips, filed under the job (and attempt) each belongs to (artifacts.py)."""
    for art in reader.pages(f"/repos/{opts.repo}/actions/runs/{run_id}/artifacts", "artifacts"):
        name = art.get("name") or ""
        prefix = report_prefix(name, opts.report_artifacts)
        if prefix is None:
            progress.other_artifacts += 1
            continue
        job, why = artifact_job(name, prefix, jobs, art.get("created_at"))
        if job is None:
            progress.reports_unattributed += 1
            progress.unattributed[why] = progress.unattributed.get(why, 0) + 1
            continue
        day = _day_of(job.get("completed_at"), art.get("created_at"))
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", name.removesuffix(".zip"))
        rel = f"test-reports/day={day}/{run_id}/{job.get('run_attempt') or 1}/{job['id']}/{safe}.zip"
        if art.get("expired") or not reader.download(f"/repos/{opts.repo}/actions/artifacts/{art['id']}/zip",
                                                     part.store, rel):
            progress.reports_expired += 1
            continue
        progress.reports += 1


def read_run(reader: RestReader, opts: BackfillOptions, run: dict, repository: dict, part: Part,
             progress: Progress) -> None:
    latest, repo = run.get("run_attempt") or 1, opts.repo
    jobs: dict[int, dict] = {}
    for n in range(1, latest + 1):
        attempt = run if n == latest else reader.json(f"/repos/{repo}/actions/runs/{run['id']}/attempts/{n}")
        jobs.update((j["id"], j) for j in read_attempt(reader, repo, attempt, repository, part, progress))
    read_artifacts(reader, opts, run["id"], jobs, part, progress)
    progress.runs += 1


def _attempt(run: dict) -> int:
    return run.get("run_attempt") or 1


def _chunks(items: list, n: int) -> Iterator[list]:
    for i in range(0, len(items), n):
        yield items[i:i + n]


def _committed(commit: dict) -> dt.datetime | None:
    return shapes.parse_time(((commit.get("commit") or {}).get("committer") or {}).get("date"))


def _dated_before(commit: dict, start: dt.datetime) -> bool:
    at = _committed(commit)
    return at is None or at < start


@dataclass
class PushClock:
    """When each commit of the branch's first-parent chain was pushed, by GitHub's activity list:
    a commit became part of the branch at the first push whose `after` is it or a commit above it
    on the chain, so walking the chain down from the head, its push time is the earliest of the
    pushes seen so far. Below `boundary` (the `before` of the oldest push GitHub still lists, when
    that push is in the window) the list says nothing, and commits are dated as the walk dates them."""

    pushed: dict[str, dt.datetime]  # a push's `after` -> the earliest push that moved the branch to it
    boundary: str | None = None
    forced: set[str] = field(default_factory=set)  # the `after` of force pushes
    moves: list[dict] = field(default_factory=list)  # the list's items from `start` on, newest first
    times: dict[str, dt.datetime] = field(default_factory=dict)  # commit sha -> when it was pushed
    _at: dt.datetime | None = None
    _below: bool = False

    def __call__(self, commit: dict) -> dt.datetime | None:
        """The push time of the chain's next commit (newest first), None below the list's reach.
        Below a force push's head, down to the next push's, the list says nothing either: the push
        names the head it replaced, not the commits both share, which were on the branch before."""
        sha = commit["sha"]
        self._below = self._below or sha == self.boundary
        if self._below:
            return None
        at = self.pushed.get(sha)
        if at is not None and (self._at is None or at < self._at):
            self._at = at
        found = self._at
        if found is not None:
            self.times[sha] = found
        if sha in self.forced and found == at:
            self._at = None
        return found


def branch_pushes(reader: RestReader, opts: BackfillOptions, start: dt.datetime,
                  log: Callable[[str], None] = print) -> PushClock | None:
    """The branch's pushes from GitHub's activity list (newest first), read back to the first one
    before `start`; None when GitHub lists none, has no such list (404, 422: an older GitHub
    Enterprise Server) or will not show it to these credentials (a 403 that is no rate limit; the
    output says so): the pushes are then the walk's alone. A rate limit the client could not wait
    out raises, as anywhere else in the backfill: the walk is no stand-in for a list GitHub has."""
    clock = PushClock({})
    params = {"ref": opts.branch, "direction": "desc"}
    try:
        for item in reader.pages(f"/repos/{opts.repo}/activity", None, params):
            if _clock_item(clock, item, start):
                return clock
    except GitHubError as exc:
        if exc.status == 403 and not rate_limited(exc):
            log(f"backfill {opts.repo}: GitHub refused its activity list ({exc}); {opts.branch}'s pushes are "
                "walked down its first parents instead, each commit a push of its own at the earliest it can "
                "have been pushed (credentials GitHub shows the list to give each push as it was)")
            return None
        if exc.status not in (404, 422):
            raise
        return None
    return clock if clock.pushed else None


def _clock_item(clock: PushClock, item: dict, start: dt.datetime) -> bool:
    """Take one activity item (newest first) into `clock`; True once it is a push before `start`,
    the last the list needs reading for."""
    # the schema's keys; OpenAPI's example still shows the older `pushed_at`, `push_type`
    at = shapes.parse_time(item.get("timestamp") or item.get("pushed_at"))
    if item.get("activity_type", "push") not in BRANCH_MOVES or at is None or not item.get("after"):
        return False
    clock.pushed[item["after"]] = min(at, clock.pushed.get(item["after"], at))
    if item.get("activity_type") == "force_push":
        clock.forced.add(item["after"])
    if at < start:
        clock.boundary = None
        return True
    clock.moves.append(item)
    clock.boundary = item.get("before")  # the `before` of the oldest push read
    return False


def _unless_missing(read: Callable[[], T]) -> T | None:
    """`read()`'s answer, None for a 404: a commit GitHub no longer has (a head a force push threw
    away, since collected)."""
    try:
        return read()
    except GitHubError as exc:
        if exc.status != 404:
            raise
        return None


def activity_push(reader: RestReader, repo: str, item: dict) -> shapes.Push | None:
    """The push an activity item records, as its webhook told it: its commits those GitHub's compare
    of its two ends lists (`git log before..after`, oldest first), as the webhook lists them. A push
    that created the branch lists none; one whose `before` GitHub no longer has, its head alone; one
    whose head GitHub no longer has is None (nothing of it can be told)."""
    before, after = item.get("before") or shapes.NO_COMMIT, item["after"]
    compare = f"/repos/{repo}/compare/{before}...{after}"
    commits = [] if before == shapes.NO_COMMIT else _unless_missing(lambda: list(reader.pages(compare, "commits")))
    head = (commits[-1] if commits and commits[-1]["sha"] == after
            else _unless_missing(lambda: reader.json(f"/repos/{repo}/commits/{after}")))
    if head is None:
        return None
    at = shapes.parse_time(item.get("timestamp") or item.get("pushed_at"))
    return shapes.Push(at, before, head, tuple(commits if commits is not None else [head]),
                       item.get("activity_type") == "force_push", item.get("actor") or item.get("pusher"))


def first_parent_chain(listing: Iterator[dict], head: str | None, start: dt.datetime,
                       clock: PushClock | None = None) -> list[dict]:
    """The first-parent chain from `head`, newest first, its commits found in `listing` (the
    branch's commit list, newest first, read a page at a time as the walk needs it).

    With GitHub's pushes (`clock`), the walk ends at the first commit pushed before `start`.
    Without them, a commit's date is no bound on when it was pushed: one made weeks before it was
    pushed keeps its old dates, and the window's commits below it are still to come. So the walk
    goes on past commits dated before `start`, and ends once the list has given WALK_PAST of those
    since the chain's last commit dated (or pushed) from `start` on (or at the list's end, or a
    root). Commits of the window are read however many (a merged branch's own, listed between two
    of the chain's)."""
    listed: dict[str, dict] = {}
    old = 0  # commits dated before `start` listed since the chain last reached one of the window
    chain: list[dict] = []
    sha = head
    while sha is not None:
        while sha not in listed and old < WALK_PAST:
            item = next(listing, None)
            if item is None:
                break
            listed[item["sha"]] = item
            old += _dated_before(item, start)
        commit = listed.get(sha)
        pushed = clock(commit) if clock is not None and commit is not None else None
        if commit is None or (pushed is not None and pushed < start):
            break
        chain.append(commit)
        if pushed is not None or not _dated_before(commit, start):
            old = 0
        parents = commit.get("parents") or []
        sha = parents[0]["sha"] if parents else None
    return chain


def pushed_not_before(chain: list[dict], times: dict[str, dt.datetime] | None = None
                      ) -> Iterator[tuple[dict, dt.datetime]]:
    """Each commit of a first-parent chain (newest first) with the instant it is filed at, oldest
    first: when GitHub says it was pushed (`times`), else the earliest it can have been, its
    committer date; a millisecond after its parent's when that is not earlier (the commits of one
    push, a commit made long before it was pushed), as it was pushed after it."""
    last: dt.datetime | None = None
    for commit in reversed(chain):
        at = (times or {}).get(commit["sha"]) or _committed(commit)
        if last is not None and (at is None or at <= last):
            at = last + dt.timedelta(milliseconds=1)
        if at is not None:
            last = at
            yield commit, at


def branch_history(reader: RestReader, opts: BackfillOptions, since: dt.date, default_branch: str | None = None,
                   log: Callable[[str], None] = print) -> dict[str, list[shapes.Push]]:
    """The branch's pushes since `since`, by the day each was pushed: those GitHub's activity list
    gives (`branch_pushes`), each as its webhook told it; and below the list's reach, or without
    it, each commit of the branch's first-parent chain as a push of its own (`walked_pushes`). A
    branch GitHub does not know raises MissingBranch: its runs would list empty too, and the days
    be marked done."""
    try:
        head = reader.json(f"/repos/{opts.repo}/branches/{opts.branch}").get("commit") or {}
    except GitHubError as exc:
        if exc.status != 404:
            raise
        raise MissingBranch(404, f"GitHub has no branch {opts.branch} in {opts.repo} ({exc}): check --branch; "
                                 f"left out, the repository's default branch is read ({default_branch})") from exc
    start = dt.datetime.combine(since, dt.time(), dt.timezone.utc)
    clock = branch_pushes(reader, opts, start, log)
    listed = [p for item in (clock.moves if clock else []) if (p := activity_push(reader, opts.repo, item))]
    covered = {c["sha"] for push in listed for c in (push.head, *push.commits)}
    pushes = listed + walked_pushes(reader, opts, head.get("sha"), start, clock, covered)
    by_day: dict[str, list[shapes.Push]] = {}
    for push in sorted(pushes, key=lambda p: p.at):
        if push.at >= start:
            by_day.setdefault(push.at.date().isoformat(), []).append(push)
    return by_day


def walked_pushes(reader: RestReader, opts: BackfillOptions, head: str | None, start: dt.datetime,
                  clock: PushClock | None, covered: set[str]) -> list[shapes.Push]:
    """The commits the branch pointed to that no push read from the activity list lists (`covered`),
    each a push of its own: its head's first-parent chain, each commit at the time of the push the
    list gives, else at the earliest it can have been pushed (`pushed_not_before`). GitHub's commit list
    is every commit reachable from the branch (`git log`, not `--first-parent`), which with merge
    commits holds each merged pull request's own commits, never pushed to the branch; so the list
    (one walk for the whole backfill) only supplies the objects, and the chain is followed from the
    head through first parents. The list is asked for without `since`: like `git log --since`, it
    would leave out the commits below one dated before it."""
    listing = reader.pages(f"/repos/{opts.repo}/commits", None, {"sha": opts.branch})
    chain = first_parent_chain(listing, head, start, clock)
    times = clock.times if clock else None
    pushes = (shapes.one_commit_push(commit, at) for commit, at in pushed_not_before(chain, times)
              if commit["sha"] not in covered)
    return [p for p in pushes if p is not None]


def backfill_day(reader: RestReader, store: Store, opts: BackfillOptions, day: dt.date, repository: dict,
                 cursor: Cursor, progress: Progress, log: Callable[[str], None], now: dt.datetime,
                 pushed: dict[str, list[shapes.Push]]) -> None:
    """The day's pushes (`pushed`: the branch's pushes by day), then its runs, in parts: each
    progress line counts the pushes of the days read so far, this one's included."""
    key = day.isoformat()
    owner, name = opts.repo.split("/")
    if not opts.ciflow_only:
        write_pushes(store, opts, key, repository, progress, pushed.get(key, []))
    # parts of other options never share a name
    name_runs = f"{name}{scope(opts.branch, opts.prs)}{'-ciflow' if opts.ciflow_only else ''}"

    def cut(second: dt.datetime, total: int) -> None:
        progress.runs_cut += total - LIST_CAP
        log(f"backfill {opts.repo} {key}: GitHub lists only {LIST_CAP:,} of the {total:,} runs created at "
            f"{_stamp(second)}; {total - LIST_CAP:,} are not read (GitHub cannot list a second more finely)")

    runs = list_runs(reader, opts, day, cut)
    last, unfinished, read = cursor.last_run_id(key), cursor.unfinished(key), cursor.attempts(key)
    again = [r for r in runs if r["id"] <= last and (r["id"] in unfinished or _attempt(r) > read.get(r["id"], _attempt(r)))]
    if again:  # runs still going when last read, or re-run since; this reading is a part of its own
        part = Part(store, f"rest-{owner}-{name_runs}-runs-{again[0]['id']}-again-{now:%Y%m%dT%H%M%S}")
        for run in again:
            read_run(reader, opts, run, repository, part, progress)
        progress.deliveries += part.commit()
        cursor.runs_written(key, again)
    todo = [r for r in runs if r["id"] > last]
    done = len(runs) - len(todo)
    for chunk in _chunks(todo, opts.part_runs):
        part = Part(store, f"rest-{owner}-{name_runs}-runs-{chunk[0]['id']}")
        for run in chunk:
            read_run(reader, opts, run, repository, part, progress)
        progress.deliveries += part.commit()
        cursor.runs_written(key, chunk, chunk[-1]["id"])
        done += len(chunk)
        log(f"backfill {opts.repo} {key}: {done}/{len(runs)} runs of the day; {progress.line()}")


def write_pushes(store: Store, opts: BackfillOptions, key: str, repository: dict, progress: Progress,
                 pushes: list[shapes.Push]) -> None:
    """The day's pushes as one part (the same name and bytes when the day is read again)."""
    owner, name = opts.repo.split("/")
    part = Part(store, f"rest-{owner}-{name}{branch_scope(opts.branch)}-push-{key}")
    for push in pushes:
        part.add([shapes.push_delivery(push, f"refs/heads/{opts.branch}", repository)])
        progress.pushes += 1
    progress.deliveries += part.commit()


def updated_pulls(reader: RestReader, repo: str, since: dt.datetime) -> Iterator[dict]:
    """The pull requests updated since `since`, each once, newest first. GitHub pages them sorted by
    update and by page number: one updated while a later page is read moves to the first page, read
    already, and no page read after gives it. So the list is read again from its top, down to the
    newest update the previous reading began with, for the pull requests not given yet, until a
    reading gives none (most often one request)."""
    params = {"state": "all", "sort": "updated", "direction": "desc"}
    seen: set[int] = set()
    stop = since
    for reading in range(MAX_PULL_READINGS):
        began, fresh = None, 0
        for pr in reader.pages(f"/repos/{repo}/pulls", None, params):
            updated = shapes.parse_time(pr.get("updated_at"))
            began = began or updated
            if updated is not None and updated < stop:
                break
            if pr["number"] not in seen:
                seen.add(pr["number"])
                fresh += 1
                yield pr
        if began is None or (reading and not fresh):
            return
        stop = began


def backfill_pulls(reader: RestReader, store: Store, opts: BackfillOptions, repository: dict,
                   progress: Progress, part_size: int = 500) -> None:
    """Pull requests updated since `since` (newest first, as GitHub sorts them); what one did
    before `since` is filed on that first day, so the archive starts where the backfill does."""
    owner, name = opts.repo.split("/")
    since = dt.datetime.combine(opts.since, dt.time(), dt.timezone.utc)
    batch: list[dict] = []

    def flush() -> None:
        part = Part(store, f"rest-{owner}-{name}-pulls-{batch[0]['number']}")
        for pr in batch:
            part.add(shapes.pull_request_deliveries(pr, repository, not_before=since))
        progress.deliveries += part.commit()
        progress.pull_requests += len(batch)
        batch.clear()

    for pr in updated_pulls(reader, opts.repo, since):
        batch.append(pr)
        if len(batch) >= part_size:
            flush()
    if batch:
        flush()


def backfill_ciflow(reader: RestReader, store: Store, opts: BackfillOptions, repository: dict, cursor: Cursor,
                    progress: Progress, log: Callable[[str], None], now: dt.datetime) -> None:
    """The ciflow tag runs of days a `prs` backfill finished before it read them, and only those:
    the days' other runs are in the archive already. Resumed like any day (its own cursor)."""
    days = [d for d in _days(opts) if cursor.ciflow_missing(d.isoformat())]
    if not days:
        return
    log(f"backfill {opts.repo}: reading the ciflow tag runs of {len(days)} days read before they were")
    only = replace(opts, ciflow_only=True)
    own = Cursor(store, opts.repo, opts.branch, True, part="+ciflow")
    for day in days:
        backfill_day(reader, store, only, day, repository, own, progress, log, now, {})
        if not own.unfinished(day.isoformat()):
            cursor.ciflow_done(day.isoformat())


def backfill(gh: GitHubResource, store: Store, opts: BackfillOptions, log: Callable[[str], None] = print,
             today: dt.date | None = None, progress: Progress | None = None) -> Progress:
    """Run (or continue) the backfill; raises GitHubError when GitHub stops answering, with every
    part read so far written and recorded in the cursor."""
    now = dt.datetime.now(dt.timezone.utc)
    today = today or now.date()
    progress = progress or Progress()
    progress.report_artifacts = opts.report_artifacts
    reader = RestReader(gh, progress.budget, opts.page_size)
    repository = reader.json(f"/repos/{opts.repo}")
    if opts.branch is None:
        opts = replace(opts, branch=repository.get("default_branch") or "main")
        log(f"backfill {opts.repo}: branch {opts.branch}, the repository's default")
    cursor = Cursor(store, opts.repo, opts.branch, opts.prs)
    # a day read with pull requests holds the branch's runs too: done for a backfill without them
    wider = None if opts.prs else Cursor(store, opts.repo, opts.branch, True)
    days = [d for d in _days(opts) if not cursor.day_done(d.isoformat())
            and not (wider is not None and wider.day_done(d.isoformat()))]
    pushed = branch_history(reader, opts, days[0], repository.get("default_branch"), log) if days else {}
    for day in days:
        backfill_day(reader, store, opts, day, repository, cursor, progress, log, now, pushed)
        progress.days += 1
        if day < today and not cursor.unfinished(day.isoformat()):  # today's runs are still coming
            cursor.finish_day(day.isoformat())
    if opts.prs:
        backfill_ciflow(reader, store, opts, repository, cursor, progress, log, now)
    if opts.prs and not cursor.pulls_done(opts.since.isoformat()):
        backfill_pulls(reader, store, opts, repository, progress)
        cursor.finish_pulls(opts.since.isoformat())
    log(f"backfill {opts.repo}: done; {progress.line()}")
    return progress
