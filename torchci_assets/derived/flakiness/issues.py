"""Flaky verdicts as DISABLED issues in the upstream repo, without ever filing one twice.

For each test the verdict disables, the run finds the test's issue and then:
  open, already covering where it flaked      -> `found` (nothing sent);
  open, but it flaked on a platform not listed -> `updated`: the platforms appended to the
                                                  issue's own `Platforms:` line (an aggregate's:
                                                  the test's line of its list), and a comment
                                                  (on a main flake after the line was last set:
                                                  its filing, this project's last narrowing, or
                                                  when a maintainer's narrowing was first seen);
  closed, and it flaked on main after closing  -> `updated`: reopened (PyTorch's bot does so);
  closed, no main flake since                  -> `found`: a human re-enabled it, left closed;
  none                                         -> `created`, with the evidence in the body.
An aggregate is the test's issue only while open, as for PyTorch's bot: a closed one is never
reopened for one of its tests (that would disable all of them again); a test of it that flakes
on main after its close gets an issue of its own, and until then stays re-enabled (`found`).
Each action is a row of the `disabled_issues` ledger (test, issue_number, action, at, ...).
Only flakiness on main counts, as for PyTorch's bot: a pull request that breaks the test (or makes
it flaky) after a human closed its issue must not reopen it, nor widen an open one.

Finding the issue is what makes "never twice" hold, so it looks wherever it could be:
  1. every open DISABLED issue, from GitHub search (the same query PyTorch's list uses);
  2. every issue changed in the last hour, from the repository's issue list sorted by update:
     search's index lags writes by seconds to minutes, the list does not, so an issue created
     moments ago (by a crashed run, a concurrent one, a human) is seen here;
  3. the issue number the ledger last recorded for the test, read directly;
  4. a search in any state (closed issues are not in 1) for the test's method and class name.
A title counts as the test's when PyTorch's runner takes it for the test (its class name alone: a
dotted suite too, `issue_text.runner_test`), so a maintainer's issue is found like ours, or when it
is exactly the title filed for the test; an open aggregate counts when a line of it names the test
so, and that line is widened under the name written there. An issue counts only
when its author may disable a test, by the rule the published list follows (`trusted_test_issues`):
a stranger's `DISABLED test_x` issue disables nothing, so it must not stand in for the test's issue
either; this project files its own beside it. The account this project files as is learned from
GitHub's answer to each create and kept, so an issue whose create was never recorded (a crash right
after GitHub's 201) is still trusted as ours and found. Before the very first create this project
ever makes, GitHub is asked which account the credentials write as (`GET /user`, or `GET /app`
for an App), and that is kept first. Only where GitHub does not say (an Actions token) can a run
killed right after that first create leave an issue the next run cannot tell from a stranger's:
it files again, learns the account from that answer, and closes its new issue as the twin of the
first (`_unless_twin`). Should that run be killed too, the twin stays open until a run completes:
each closes the open twins of its own it read (`close_own_twins`), so one stays open. A test whose title
PyTorch would not read back as the test (a name with characters other than letters, digits, `-`,
`_` and `.`) gets no issue at all, as it would disable nothing: it is reported instead, with why.
Right before each create the list of step 2 is read again, and once more after it: two runs
racing (which the `github_issues` pool already prevents) would both have to create within that
second, and then the later of the twins is closed as a duplicate of the older. A create that got
no clear answer (timeout, 5xx: GitHub may have created it) is never resent blindly: the list is
read again and the issue adopted if it is there.

A crash between GitHub's 201 and the ledger write therefore costs nothing: the next run finds
the issue through step 2 within the hour and through step 1 after, and records it as found.
The ledger is the record of what was done and the fast path to closed issues, not the guard.

New issues per run are capped (`max_new_per_run`, most flake events first); the rest wait for
the next run and are reported.

GitHub down (no answer, or a 5xx, through one request's whole retry budget) stops the pass at that
request (`stop_pass`): every later test would wait out the same budget in vain. The tests not done
wait for the next run, which finds what this one filed as any other; the retiring and re-enabling
after the filing wait too (lifecycle.py).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import traceback
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import pyarrow as pa

from resources.github import GitHubError, GitHubResource, outage_line, unavailable
from resources.lake import Lake, connect
from resources.sql import SqlFiles, execute
from resources.storage import Store
from torchci_assets.config import DisabledIssuesConfig, TorchciConfig
from torchci_assets.derived.flakiness.aggregates import (AGGREGATE_LABEL, aggregate_body, aggregate_title, groups,
                                                         is_aggregate, listed, with_tests)
from torchci_assets.derived.flakiness.comments import comment_once, digest_marker
from torchci_assets.derived.flakiness.evidence import gather_evidence
from torchci_assets.derived.flakiness.job_issues import (UNSTABLE_JOBS_PATH, UNSTABLE_PREFIX, Permissions, author,
                                                         read_job_list)
from torchci_assets.derived.flakiness.owners import OwnerLookup
from torchci_assets.derived.flakiness.issue_text import (
    DISABLED_PREFIX,
    MARKER,
    Evidence,
    added_platforms,
    disabled_test,
    is_test_issue,
    issue_title,
    line_for_test,
    method_and_class,
    names_by_test,
    parse_platforms,
    pytorch_platforms,
    render_body,
    runner_test,
    titled_for_test,
    unreadable_reason,
    with_platforms,
)
from torchci_assets.derived.flakiness.lists import (decide_disabled, disabled_baseline, dumps, flaky_rows, is_local,
                                                    main_evidence, pytorch_key)
from torchci_assets.publishing import write_if_changed

SQL = SqlFiles(__file__)
LEDGER_TABLE = "disabled_issues"
# the day's last recorded dry-run plan, beside the ledger's parts (a leading '_': not a part)
DRY_RUN_STATE = "_dry_run.json"
# the same for the retiring and re-enabling after the filing (lifecycle.py)
DRY_RUN_LIFECYCLE_STATE = "_dry_run_lifecycle.json"
# the day's last live filing and the open issues it read (a search costs a page per 100 issues,
# at 30 a minute): a refresh reads the issues changed since instead, up to this age
LIVE_STATE = "_live.json"
# the logins this project files issues as (own_logins), beside the ledger's days
OWN_LOGINS = f"{LEDGER_TABLE}/_own_logins.json"
# GitHub's answers to the permission lookups of a day's latest run (run_answers), one file a day
ANSWERS_DIR = f"{LEDGER_TABLE}/_permissions"
SNAPSHOT_MAX_AGE = dt.timedelta(minutes=50)
# Issues read one by one per run for the close time of a re-enabled test (`close_times`)
MAX_CLOSE_READS = 20
# Issue numbers are looked up in the ledger this far back; older issues are found by search.
LEDGER_LOOKBACK_DAYS = 30
# How far back the consistent issue list is read: far longer than search's indexing lag.
RECENT_CHANGES = dt.timedelta(hours=1)
# Overlap between two reads of the list, for clock differences between us and GitHub.
SYNC_OVERLAP = dt.timedelta(minutes=5)
CREATE_ATTEMPTS = 3

LEDGER_SCHEMA = pa.schema([
    ("test", pa.string()), ("issue_number", pa.int64()), ("action", pa.string()),
    ("at", pa.timestamp("ms", tz="UTC")), ("repo", pa.string()), ("issue_url", pa.string()),
    ("issue_state", pa.string()), ("platforms", pa.list_(pa.string())), ("detail", pa.string()),
    ("run_id", pa.string()),
])


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _iso(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_time(text: str | None) -> dt.datetime | None:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def open_disabled_query(repo: str) -> str:
    """PyTorch's query for the disabled list (update_disabled_issues.py)."""
    return f"repo:{repo} is:issue is:open in:title {DISABLED_PREFIX}"


def title_query(repo: str, test: str) -> str:
    """The search for `test`'s issues in any state: its method and class name, the words PyTorch's
    runner matches it by (`method_and_class`), so that an issue titled with a dotted suite
    (`test_x (distributed.test_c10d.TestY)`) is found as well as one under `__main__`; which of the
    hits are the test's is decided by `IssueTracker.titled_for`. A test outside a class is searched by
    its method alone: its title's `__main__` may be written `__main__.` (an earlier version's)."""
    words = [w for w in method_and_class(test) if w]
    return f'repo:{repo} is:issue in:title ' + " ".join(f'"{w.replace(chr(34), " ")}"' for w in words)


MARKER_PREFIX = "<!-- torchci-dagster: "  # how every marker of this project's issues and comments starts
CHANGE = f"{MARKER_PREFIX}change "  # a comment's saying a change, and naming it
NARROWED = f"{MARKER_PREFIX}re-enabled on "  # a comment's saying platforms re-enabled (or all: the close)
AGGREGATE_CHANGE = f"{MARKER_PREFIX}aggregate "  # a comment's saying an aggregate's list changed
# the comments saying an edit of an issue: the newest of them tells whether an edit is said again
# (`comment_once`); a comment saying no edit (a day's rerun evidence) does not hide an earlier one
EDITS = (CHANGE, NARROWED, AGGREGATE_CHANGE)


class IssueTracker:
    """One repository's DISABLED-test issues as GitHub shows them now, from search and from the
    consistent issue list (see the module docstring); of two copies of an issue the later
    `updated_at` wins, and this run's own writes go in directly."""

    def __init__(self, github: GitHubResource, repo: str, clock: Callable[[], dt.datetime] = utc_now,
                 branch: str = "main"):
        self.github = github
        self.repo = repo
        self.branch = branch  # the repository's main branch, as its issues and comments name it
        self.clock = clock
        self.by_number: dict[int, dict] = {}
        self._synced_at: dt.datetime | None = None
        self.allowed: Permissions | None = None  # who may disable a test; None: every author
        self._remember: Callable[[str], None] = lambda login: None

    def trust(self, allowed: Permissions, remember: Callable[[str], None] = lambda login: None) -> None:
        """From now on an issue is the test's only when `allowed` says its author may disable a
        test. The author of each issue this tracker creates is this project, added to `allowed`
        and passed to `remember` to be kept for later runs."""
        self.allowed, self._remember = allowed, remember

    def counts(self, issue: dict) -> bool:
        """Whether `issue` may stand for a test (see `trust`)."""
        return self.allowed is None or self.allowed.wrote(issue)

    def _keep(self, issue: dict) -> dict:
        if "pull_request" not in issue:
            old = self.by_number.get(issue["number"])
            if old is None or (issue.get("updated_at") or "") >= (old.get("updated_at") or ""):
                self.by_number[issue["number"]] = issue
        return issue

    def load_open(self) -> int:
        """Every open DISABLED issue, paginated; returns how many search gave."""
        found = self.github.search_issues(open_disabled_query(self.repo))
        for issue in found:
            self._keep(issue)
        return len(found)

    def sync_recent(self) -> int:
        """Issues changed since the last sync (the last hour the first time); returns how many."""
        start = self.clock()
        since = self._synced_at - SYNC_OVERLAP if self._synced_at else start - RECENT_CHANGES
        changed = self.github.paginate(f"/repos/{self.repo}/issues", {
            "state": "all", "sort": "updated", "direction": "desc", "since": _iso(since), "per_page": 100},
            must_complete=False)
        for issue in changed:
            self._keep(issue)
        self._synced_at = start
        return len(changed)

    def read_open(self, snapshot: dict | None = None) -> bool:
        """Every open issue: from `snapshot` (the issues as a recent run left them) and the changes
        since it, from the consistent issue list, when the snapshot is recent enough; else from
        search and the last hour's changes. Returns whether the snapshot was used."""
        at = _parse_time((snapshot or {}).get("at"))
        if at is None or self.clock() - at > SNAPSHOT_MAX_AGE:
            self.load_open()
            self.sync_recent()
            return False
        self.by_number = {int(i["number"]): i for i in snapshot.get("issues") or []}
        self._synced_at = at
        if self.sync_recent() >= self.github.max_pages * 100:  # the listing may have stopped short
            self.by_number, self._synced_at = {}, None
            self.load_open()
            self.sync_recent()
            return False
        return True

    def snapshot(self) -> dict:
        """What `read_open` builds on: the open issues read, as of the start of the last sync."""
        return {"at": _iso(self._synced_at) if self._synced_at else None, "issues": self.open_any()}

    def search_test(self, test: str) -> None:
        for issue in self.github.search_issues(title_query(self.repo, test)):
            self._keep(issue)

    def get(self, number: int) -> dict | None:
        """The issue as it is now; None when it is gone (deleted, transferred, issues disabled)."""
        try:
            return self._keep(self.github.request("GET", f"/repos/{self.repo}/issues/{number}").json())
        except GitHubError as e:
            if e.status in (404, 410):
                return None
            raise

    def find(self, test: str) -> dict | None:
        """The issue that disables `test`: an open one (of several, the one PyTorch's list
        would use: the first by URL), else the most recently closed. An issue titled exactly as
        this project titles the test's counts too, whether PyTorch reads the title or not: what
        was filed once is found, never filed again. An aggregate counts only while it is open
        (`titled_for`)."""
        mine = [i for i in self.titled_for(test) if self.counts(i)]
        open_ = sorted((i for i in mine if i.get("state") == "open"), key=lambda i: i["html_url"])
        if open_:
            return open_[0]
        closed = sorted(mine, key=lambda i: (i.get("closed_at") or "", i["number"]))
        return closed[-1] if closed else None

    def titled_for(self, test: str) -> list[dict]:
        """Every issue read whose title names `test` (see `find`), whoever wrote it, and every open
        aggregate listing it. A closed aggregate is not the test's issue: reopening it for one test
        would disable again every test it lists, so PyTorch's bot matches an aggregate only while it
        is open (aggregateDisableIssue.ts `testMatchesIssue`) and files the test an issue of its own."""
        title = issue_title(test)
        return [i for i in self.by_number.values() if titled_for_test(i.get("title"), test)
                or (i.get("title") or "").strip() == title or (i.get("state") == "open" and self._lists(i, test))]

    def closed_aggregate(self, test: str) -> dict | None:
        """The most recently closed aggregate that lists `test` and counts (see `trust`): its
        close re-enabled the test, which stays re-enabled until it flakes on main again."""
        closed = [i for i in self.by_number.values() if i.get("state") == "closed" and self._lists(i, test)
                  and self.counts(i)]
        return max(closed, key=lambda i: (i.get("closed_at") or "", i["number"])) if closed else None

    @staticmethod
    def _lists(issue: dict, test: str) -> bool:
        """Whether `issue` is an aggregate with a line for `test` (`line_for_test`: a dotted suite too)."""
        return is_aggregate(issue.get("title")) and line_for_test(listed(issue.get("title"), issue.get("body")),
                                                                  test) is not None

    def refused(self, test: str) -> list[dict]:
        """The issues naming `test` whose authors may not disable it (see `trust`)."""
        return [i for i in self.titled_for(test) if not self.counts(i)]

    def find_titled(self, title: str) -> dict | None:
        """The open issue titled exactly `title` (of several, the oldest) that counts (see `trust`)."""
        same = [i for i in self.open_any() if i.get("title") == title and self.counts(i)]
        return min(same, key=lambda i: i["number"]) if same else None

    def open_any(self) -> list[dict]:
        """Every open issue read so far, whatever its title (pull requests left out)."""
        return [i for i in self.by_number.values() if i.get("state") == "open" and "pull_request" not in i]

    def open_issues(self) -> list[dict]:
        """Every open issue with a disabled-test title: the input of the published list."""
        return [i for i in self.by_number.values()
                if i.get("state") == "open" and disabled_test(i.get("title")) is not None]

    def create(self, title: str, body: str, labels: Iterable[str]) -> dict:
        if self.allowed is not None and not self.allowed.own:
            self._learn_account()
        resp = self.github.request("POST", f"/repos/{self.repo}/issues", retry_ambiguous=False,
                                   json_body={"title": title, "body": body, "labels": list(labels)})
        return self._learn(self._keep(resp.json()))

    def _learn(self, issue: dict) -> dict:
        """`issue` was filed by this project: its author is one of this project's accounts."""
        login = author(issue)
        if login and self.allowed is not None and login not in self.allowed.own:
            self.allowed.own.add(login)
            self._remember(login)
        return issue

    def _learn_account(self) -> None:
        """Before the first issue this project ever files: ask GitHub which account the
        credentials write as, and keep it, so that a run killed right after that create leaves an
        issue the next run knows as ours. GitHub not saying is no error: the create's answer
        teaches the account as before (`_learn`), and a twin is closed (`_unless_twin`)."""
        try:
            login = self.github.account()
        except GitHubError as e:
            if unavailable(e):  # the create would wait out the same retries: the pass stops (`stop_pass`)
                raise
            return
        except (ValueError, KeyError, TypeError):
            return
        if login:
            self.allowed.own.add(login)
            self._remember(login)

    def adopt(self, title: str, seen: set[int]) -> dict | None:
        """After a create GitHub may have taken without answering: the open issue titled `title`
        with this project's marker that was not among the issues `seen` before the create, which
        is that create whoever the trust rule knows its author to be (the first issue this project
        ever files is how it learns its own account); its author is learned as this project's."""
        mine = [i for i in self.open_any() if i["number"] not in seen and i.get("title") == title
                and MARKER in (i.get("body") or "")]
        return self._learn(min(mine, key=lambda i: i["number"])) if mine else None

    def update(self, number: int, **fields) -> dict:
        resp = self.github.request("PATCH", f"/repos/{self.repo}/issues/{number}", json_body=fields)
        return self._keep(resp.json())

    def comment(self, number: int, body: str, before: str, says: str) -> None:
        """Say, before changing the issue from `before`, what the change is (`says`: the comment
        without what varies from run to run, its job links): posted with a marker naming the
        change, and not posted again by a run after a crash between it and the change."""
        comment_once(self.github, self.repo, number, digest_marker(CHANGE, before, says), body,
                     newest_of=EDITS)


# ---- the ledger ------------------------------------------------------------------------


def _slug(test: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "-", test)[:80].strip("-").lower() or "test"


def record(lake: Lake, day: str, rows: list[dict], part: str) -> str:
    """Write `rows` (LEDGER_SCHEMA) as one immutable part of the ledger's `day` partition."""
    part = f"{part}-{uuid.uuid4().hex[:12]}"
    lake.write(LEDGER_TABLE, day, pa.Table.from_pylist(rows, schema=LEDGER_SCHEMA), part=part)
    return lake.partition_path(LEDGER_TABLE, day, part)


def ledger_days(lake: Lake, day: str, lookback_days: int | None = LEDGER_LOOKBACK_DAYS,
                today: dt.date | None = None) -> list[str]:
    """The ledger's partitions from `lookback_days` before `day` (or today, if earlier) on; all of
    them with None."""
    if lookback_days is None:
        return lake.days(LEDGER_TABLE)
    first = min(dt.date.fromisoformat(day), today or utc_now().date()) - dt.timedelta(days=lookback_days)
    return [d for d in lake.days(LEDGER_TABLE) if d >= first.isoformat()]


def _ledger_rows(lake: Lake, day: str, sql: str, lookback_days: int | None = LEDGER_LOOKBACK_DAYS) -> list[tuple]:
    """`sql` over the ledger's recent partitions (view `l`); [] when there are none."""
    days = ledger_days(lake, day, lookback_days)
    if not days:
        return []
    con = connect()
    try:
        if lake.register(con, LEDGER_TABLE, days, name="l") == 0:
            return []
        return execute(con, sql, {}).fetchall()
    finally:
        con.close()


def ledger_issue_numbers(lake: Lake, day: str, lookback_days: int = LEDGER_LOOKBACK_DAYS) -> dict[str, int]:
    """Per test, the issue number its latest ledger row with a number names."""
    return dict(_ledger_rows(lake, day, SQL["ledger_numbers"], lookback_days))


def reenabled_here(lake: Lake, day: str) -> set[str]:
    """The tests this project re-enabled on `day` or the day before (sql/ledger_reenabled.sql): the
    published list losing them is no search outage, however many an aggregate's close takes at once."""
    return {test for (test,) in _ledger_rows(lake, day, SQL["ledger_reenabled"], lookback_days=1)}


MARKS = ("reopened", "widened", "narrowed", "closed", "listed")


@dataclass
class Marks:
    """When the ledger last recorded each of MARKS (sql/ledger_marks.sql): per issue number
    (`issue`, the latest over its tests) and per issue number and test (`line`: for an aggregate,
    what concerns one test's line of its list)."""

    issue: dict[str, dict[int, dt.datetime]]
    line: dict[str, dict[tuple[int, str], dt.datetime]]
    # per issue number and test, its platforms as the ledger's latest row saw them (missing: unknown)
    platforms: dict[tuple[int, str], list[str]] = field(default_factory=dict)

    def of(self, name: str, issue: dict, test: str) -> dt.datetime | None:
        """The mark `name` of `test`'s issue: of the test's line in an aggregate, else of the issue."""
        n = issue.get("number")
        return self.line[name].get((n, test)) if is_aggregate(issue.get("title")) else self.issue[name].get(n)


def ledger_marks(lake: Lake, day: str, lookback_days: int = LEDGER_LOOKBACK_DAYS) -> Marks:
    """Marks from one read of the ledger's recent partitions."""
    out = Marks({name: {} for name in MARKS}, {name: {} for name in MARKS})
    for number, test, platforms, *times in _ledger_rows(lake, day, SQL["ledger_marks"], lookback_days):
        if platforms is not None:  # else an older version's row, which did not read the line
            out.platforms[(int(number), test)] = list(platforms)
        for name, at in zip(MARKS, times):
            if at is None:
                continue
            n, at = int(number), at.astimezone(dt.timezone.utc)
            out.line[name][(n, test)] = at
            out.issue[name][n] = max(at, out.issue[name].get(n, at))
    return out


# ---- filing --------------------------------------------------------------------------


@dataclass(frozen=True)
class Wanted:
    """A test the verdict disables: `platforms` for a new issue's line (PyTorch's names, []
    for everywhere) and `flaked`, where it flaked, to extend an existing issue's line."""

    test: str
    platforms: list[str]
    flaked: list[str]
    flake_events: int = 0


@dataclass(frozen=True)
class ListedIssue:
    """The issue the published list names for a test (a dry run's stand-in): the entry's name (a
    dotted suite too), the issue's number and URL, and the platforms the entry disables it on."""

    name: str
    number: str
    url: str
    platforms: tuple[str, ...] = ()


@dataclass
class FilingReport:
    dry_run: bool
    rows: list[dict] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    first_error: GitHubError | None = None  # the first of `failed`: a refusal (a read-only token) says what to set
    deferred: list[str] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)
    open_issues: int = 0
    skipped: str = ""
    unchanged_since: str = ""  # the run whose identical filing (live) or plan (dry run) stands; this one did nothing
    # every open issue the filing read, and the ones it filed: the retirement step reads no more
    open_list: list[dict] | None = None
    # who may disable a test, as the filing asked (the retiring and re-enabling ask no one again)
    allowed: Permissions | None = None
    # the title of each aggregate issue filed, extended (or, dry run, that would be) -> its new tests
    aggregates: dict[str, list[str]] = field(default_factory=dict)
    # tests given no issue because PyTorch could not read their title -> why (a human must act)
    unreadable: dict[str, str] = field(default_factory=dict)
    # the numbers of this project's open twins closed as duplicates of the oldest (`close_own_twins`)
    twins_closed: list[int] = field(default_factory=list)
    # (dry run) the tests whose issue the published list names: a live run finds it, files none
    listed: list[str] = field(default_factory=list)
    unavailable: str = ""  # GitHub was down: the filing stopped there, and how many tests wait (`stop_pass`)

    def count(self, action: str) -> int:
        return sum(1 for r in self.rows if r["action"] == action)

    def tests(self, action: str) -> list[str]:
        return [r["test"] for r in self.rows if r["action"] == action]


def ledger_row(test: str, action: str, issue: dict | None, repo: str, run_id: str, detail: str,
         platforms: list[str] | None = None) -> dict:
    return {
        "test": test, "issue_number": issue["number"] if issue else None, "action": action, "at": utc_now(),
        "repo": repo, "issue_url": issue.get("html_url", "") if issue else "",
        "issue_state": issue.get("state", "") if issue else "",
        "platforms": current_platforms(issue, test) if issue else (platforms or []),
        "detail": detail, "run_id": run_id,
    }


def dry_run_filing(lake: Lake, day: str, wanted: list[Wanted], repo: str, run_id: str, reason: str,
                   log: Callable[[str], None] = lambda s: None,
                   file_of: Callable[[str], str | None] = lambda test: None,
                   listed: dict[str, ListedIssue] | None = None, skip_repeat: bool = False,
                   max_new: int | None = None, warn: Callable[[str], None] = lambda s: None,
                   branch: str = "main") -> FilingReport:
    """What a live run would look up or file, logged and recorded as `dry_run`; nothing is sent.
    The published list stands in for the issues (`listed`, keyed `runner_test`: `listed_issues`):
    a test it names an issue for has that issue, which a live run finds (`report.listed`) and
    widens where the test flaked beyond the entry's platforms (`planned_issue`); the others are
    new, and those of a file with more than AGGREGATE_ABOVE of them (`file_of`) go to the file's
    aggregate issue, as a live run groups them. New issues beyond `max_new` wait for a
    later run (`report.deferred`), chosen as a live run chooses them (`capped`). The plan opens
    with a warning (`dry_run_opening`), said every run, in words true of whether it is recorded.
    With `skip_repeat` (an intra-day refresh), the same plan as the day's last dry run is neither
    logged nor recorded again: the ledger and the log say it once, not every few minutes."""
    listed = listed or {}
    report = FilingReport(dry_run=True)
    lines = []
    wanted = readable(wanted, report, lambda line: lines.append(f"DRY RUN: {line}"))
    aggregates = {aggregate_title(file): members
                  for file, members in groups(wanted, file_of, lambda test: runner_test(test) not in listed).items()}
    report.deferred = capped(aggregates, wanted, lambda test: runner_test(test) in listed, max_new)
    waiting = set(report.deferred)
    in_aggregate = {w.test: title for title, members in aggregates.items() for w in members}
    for title, members in aggregates.items():
        if members[0].test not in waiting:
            report.aggregates[title] = [w.test for w in members]
            lines.append(f"DRY RUN: would find or file {title!r} in {repo} listing {len(members)} tests: "
                         + ", ".join(f"{w.test} ({', '.join(w.platforms) or 'all'})" for w in members)
                         + f" ({reason})")
    for w in sorted((w for w in wanted if w.test not in waiting), key=lambda w: w.test):
        issue = listed.get(runner_test(w.test))
        if w.test in in_aggregate:
            detail = f"would list it in {in_aggregate[w.test]!r} ({reason})"
        else:
            planned = planned_issue(w.test, issue, w.flaked, branch)
            detail = f"{planned} ({reason})"
            where = "" if issue else f" in {repo} (Platforms: {', '.join(w.platforms) or 'all'})"
            lines.append(f"DRY RUN: {planned}{where} ({reason})")
        report.listed.extend([w.test] if issue else [])
        report.rows.append(ledger_row(w.test, "dry_run", None, repo, run_id, detail, w.platforms))
    since = repeated(lake, day, report.rows, skip_repeat)
    warn(dry_run_opening(reason, report, since))
    part, report.unchanged_since = keep_plan(lake, day, run_id, report.rows, lines, log, skip_repeat, since=since)
    report.parts.extend([part] if part else [])
    return report


def keep_plan(lake: Lake, day: str, run_id: str, rows: list[dict], lines: list[str], log: Callable[[str], None],
              skip_repeat: bool, state: str = DRY_RUN_STATE, part: str = "run", since: str | None = None
              ) -> tuple[str | None, str]:
    """Log a dry run's plan (`lines`) and record its `rows` as a ledger part, unless `skip_repeat`
    (an intra-day refresh) and it is the plan the day's last dry run kept under `state`: a live
    run makes each of those writes once, so the plan is said once, not every few minutes. Returns
    the part written (None: none) and the run whose same plan stands ("" when this one's was kept).
    `since`: `repeated`'s answer when the caller already asked it (the ledger's state is read once)."""
    since = repeated(lake, day, rows, skip_repeat, state) if since is None else since
    if since:
        if rows:
            log(f"DRY RUN: the same {len(rows)} action(s) as run {since} of {day} "
                f"(nothing they depend on changed): not logged or recorded again")
        return None, since
    for line in lines:
        log(line)
    written = record(lake, day, rows, f"{part}-{run_id[:8]}")
    lake.store.write_bytes(f"{LEDGER_TABLE}/day={day}/{state}",
                           json.dumps({"digest": plan_digest(rows), "run_id": run_id}).encode())
    return written, ""


def repeated(lake: Lake, day: str, rows: list[dict], skip_repeat: bool, state: str = DRY_RUN_STATE) -> str:
    """The run whose same plan `keep_plan` would let stand instead of recording `rows` again (with
    `skip_repeat`, the day's last dry run kept under `state`), else ""."""
    last = last_dry_run(lake, day, state) if skip_repeat else None
    return str(last.get("run_id", "")) if last is not None and last.get("digest") == plan_digest(rows) else ""


def capped(aggregates: dict[str, list[Wanted]], wanted: list[Wanted], has_issue: Callable[[str], bool],
           max_new: int | None) -> list[str]:
    """The tests whose new issue a live run leaves for a later run under `max_new` (None: no cap):
    it files the aggregates first, then the issues of the other tests with no issue (`has_issue`),
    most flake events first; each new issue, an aggregate too, counts one."""
    deferred: list[str] = []
    filed = 0
    in_aggregate = {w.test for members in aggregates.values() for w in members}
    singles = [[w.test] for w in sorted(wanted, key=lambda w: (-w.flake_events, w.test))
               if w.test not in in_aggregate and not has_issue(w.test)]
    for tests in [[w.test for w in members] for members in aggregates.values()] + singles:
        if max_new is not None and filed >= max_new:
            deferred.extend(tests)
        else:
            filed += 1
    return deferred


def planned_issue(test: str, issue: ListedIssue | None, flaked: Iterable[str] = (), branch: str = "main") -> str:
    """What a live run does about `test`'s own issue, in the plan's words: find the issue the
    published list names (by number: the list does not say whether an issue's title or an
    aggregate's line names the test, so a title would be a guess), and widen the test's line to
    where it flaked on the main `branch` (`flaked`) beyond the entry's platforms; else find or
    file the exact title it files, which names the test under `__main__` whatever the list
    wrote. A live run widens only on a flake after the line was last set (`platforms_set_at`),
    which the list does not say, so the plan says that condition."""
    if issue is None:
        return f"would find or file {issue_title(test)!r}"
    add = added_platforms(list(issue.platforms), list(flaked))
    return (f"would find #{issue.number} ({issue.url}), its issue on the published list (as {issue.name!r})"
            + (f", and add {', '.join(add)} to its line with a comment, as it flaked on {branch} there: a live run "
               "does so unless the line was set after that flake (the issue's filing or a narrowing, which the "
               "list does not date)" if add else ""))


def plan_digest(rows: list[dict]) -> str:
    """A digest of ledger rows as actions (test, action, platforms, detail), whatever run wrote them."""
    plan = sorted((r["test"], r["action"], list(r["platforms"] or []), r["detail"]) for r in rows)
    return hashlib.sha256(json.dumps(plan).encode()).hexdigest()


def last_dry_run(lake: Lake, day: str, name: str = DRY_RUN_STATE) -> dict | None:
    """The digest and run of the day's last recorded dry-run plan (of the filing, or of the step
    kept under `name`), or None."""
    try:
        state = json.loads(lake.store.read_bytes(f"{LEDGER_TABLE}/day={day}/{name}"))
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def file_disabled_issues(tracker: IssueTracker, lake: Lake, day: str, wanted: list[Wanted],
                         evidence: dict[str, Evidence], labels: Iterable[str], max_new: int, run_id: str,
                         log: Callable[[str], None] = lambda s: None,
                         warn: Callable[[str], None] = lambda s: None,
                         owners: Callable[[str], list[str]] = lambda file: [],
                         only_trusted: bool = False) -> FilingReport:
    """Find, update or create the issue of every wanted test (see the module docstring). A new
    issue gets `labels` and the owner labels of its test file (`owners`). With `only_trusted` (the
    asset's runs), an issue is the test's only when its author may disable the test, as for the
    published list: a stranger's issue is left aside and the test gets this project's own.

    Writes (created, updated) are recorded in the ledger one by one right after GitHub answers;
    `found` rows, which change nothing, are recorded together at the end. A GitHub error on one
    test is reported in `failed` and the others go on, unless GitHub is down (`stop_pass`); an
    error reading the open issues raises.
    """
    report = FilingReport(dry_run=False)
    _read_issues(tracker, lake, day, only_trusted, run_id if only_trusted else None)
    report.open_issues = len(tracker.open_issues())
    wanted = readable(wanted, report, warn, tracker.find)
    ctx = _Filing(ledger_issue_numbers(lake, day), ledger_marks(lake, day), list(labels), owners, run_id, log)
    found_rows: list[dict] = []
    try:
        _file_all(tracker, lake, day, wanted, evidence, max_new, ctx, report, found_rows, warn)
        report.twins_closed = close_own_twins(tracker, log, warn)
    except GitHubError as e:
        if not unavailable(e):
            raise
        done = {r["test"] for r in report.rows} | set(report.failed) | set(report.deferred)
        report.unavailable = stop_pass(e, [w.test for w in wanted if w.test not in done], report.failed, warn)
    report.parts.append(record(lake, day, found_rows, f"run-{run_id[:8]}"))
    report.open_list, report.allowed = tracker.open_any(), tracker.allowed
    return report


def stop_pass(e: GitHubError, waiting: list[str], failed: dict[str, str], warn: Callable[[str], None],
              what: str = "test(s)", count: int | None = None) -> str:
    """Where GitHub went down (`unavailable`): the pass stops, every later call would wait out the
    same retry budget in vain. The `waiting` tests go to `failed` with why, said once (`warn`); the
    next run does them, finding what this one did as it finds any issue. `count`: how many `what`
    wait, when those are not the tests themselves (an aggregate's tests wait together)."""
    said = outage_line(e, f"{len(waiting) if count is None else count} {what}")
    failed.update({t: said for t in waiting})
    warn(said)
    return said


def _file_all(tracker: IssueTracker, lake: Lake, day: str, wanted: list[Wanted], evidence: dict[str, Evidence],
              max_new: int, ctx: _Filing, report: FilingReport, found_rows: list[dict],
              warn: Callable[[str], None]) -> None:
    """The aggregates, then each other test's issue, most flake events first; the `found` rows
    go to `found_rows`, the others to the ledger at once. GitHub down raises (`stop_pass`)."""
    aggregated, created = _file_aggregates(tracker, lake, day, wanted, evidence, ctx.labels, ctx.owners, max_new,
                                           ctx.run_id, report, ctx.log, warn, ctx.known)
    for w in sorted(wanted, key=lambda w: (-w.flake_events, w.test)):
        if w.test in aggregated:
            continue
        tried = []  # a create counts against max_new even when GitHub fails it (it may have taken it)
        try:
            row = _file_one(tracker, w, evidence.get(w.test), ctx, created < max_new, lambda: tried.append(1))
        except GitHubError as e:
            if unavailable(e):
                raise
            report.failed[w.test] = str(e)
            report.first_error = report.first_error or e
            warn(f"{issue_title(w.test)!r}: {e} (left for the next run)")
            continue
        finally:
            created += len(tried)
        if row is None:  # a new issue beyond max_new: its title search waits with it
            report.deferred.append(w.test)
            continue
        report.rows.append(row)
        if row["action"] == "found":
            found_rows.append(row)
        else:
            report.parts.append(record(lake, day, [row], _slug(w.test)))


@dataclass(frozen=True)
class _Filing:
    """What every test's filing reads: the ledger's last issue number per test and its marks, and
    what a new issue gets."""

    known: dict[str, int]
    marks: Marks
    labels: list[str]
    owners: Callable[[str], list[str]]
    run_id: str
    log: Callable[[str], None]


def _file_one(tracker: IssueTracker, w: Wanted, evidence: Evidence | None, ctx: _Filing, may_create: bool,
              creating: Callable[[], None]) -> dict | None:
    """One wanted test's ledger row (None: it needs a new issue and `may_create` is false);
    `creating` is called before a new issue is filed. A test whose only issue is a closed
    aggregate gets an issue of its own once it flakes on main after that close, as PyTorch's bot
    files one (a closed aggregate is not the test's issue, `IssueTracker.titled_for`); until then
    it stays re-enabled."""
    issue = _lookup(tracker, w.test, ctx.known, search=may_create)
    if issue is not None and issue.get("state") != "open":
        return _closed(tracker, w, issue, evidence, ctx.run_id, ctx.log)
    if issue is not None:
        row = _update_open(tracker, w, issue, evidence, ctx.run_id, ctx.log, ctx.marks)
        if row["action"] == "found" and w.test not in ctx.known and MARKER in (issue.get("body") or ""):
            row["detail"] += (f"; filed by this project without a ledger row in the last {LEDGER_LOOKBACK_DAYS}"
                              " days (a run that stopped between filing and recording it)")
        return row
    aggregate = tracker.closed_aggregate(w.test)
    if aggregate is not None and not flaked_since_close(aggregate, evidence):
        return ledger_row(w.test, "found", aggregate, tracker.repo, ctx.run_id,
                          f"listed in aggregate #{aggregate['number']}, closed at {aggregate.get('closed_at')}, "
                          f"no flake on {tracker.branch} since: left closed (re-enabled)")
    if not may_create:
        return None
    creating()
    issue, action, detail = _create(tracker, w, evidence or Evidence(w.test), ctx.labels, ctx.owners, ctx.log)
    if aggregate is not None:
        detail += (f"; aggregate #{aggregate['number']}, closed at {aggregate.get('closed_at')}, listed it: "
                   f"it flaked on {tracker.branch} since, and a closed aggregate is reopened for none of its tests")
    return ledger_row(w.test, action, issue, tracker.repo, ctx.run_id, detail + _left_aside(tracker, w.test))


def _read_issues(tracker: IssueTracker, lake: Lake, day: str, only_trusted: bool, run_id: str | None) -> None:
    """The open issues and the last hour's changes; with `only_trusted`, whose authors may disable
    tests (this project's account, learned from its creates, kept at once)."""
    tracker.load_open()
    tracker.sync_recent()
    if only_trusted:
        tracker.trust(issue_permissions(tracker.github, lake, day, tracker.repo, tracker.by_number.values(), run_id),
                      lambda login: keep_own_logins(lake, {login}))


def _left_aside(tracker: IssueTracker, test: str) -> str:
    """The issues naming `test` that were not taken as its issue, their authors not allowed to
    disable tests, for the ledger's detail (a maintainer can see why the project filed its own)."""
    aside = tracker.refused(test)
    return ("; left aside " + ", ".join(f"#{i['number']} by {author(i) or 'unknown'}" for i in aside)
            + " (authors who may not disable tests)") if aside else ""


def _lookup(tracker: IssueTracker, test: str, known: dict[str, int], search: bool) -> dict | None:
    """The test's issue through steps 1-3 of the module docstring, and step 4 (a title search,
    which the search rate limit makes the dear one) when `search`."""
    issue = tracker.find(test)
    if issue is None and test in known and known[test] not in tracker.by_number:  # else read already
        tracker.get(known[test])
        issue = tracker.find(test)
    if issue is None and search:
        tracker.search_test(test)
        issue = tracker.find(test)
    return issue


def readable(wanted: list[Wanted], report: FilingReport, warn: Callable[[str], None],
             find: Callable[[str], dict | None] = lambda test: None) -> list[Wanted]:
    """The wanted tests PyTorch can disable through an issue. The others get none (an issue whose
    title PyTorch cannot read disables nothing, and would not be found by its reading either) and
    go to `report.unreadable` and the log with the reason, with the issue already titled so
    (`find`), so that a human disables them another way (a renamed test, an issue by hand)."""
    out = []
    for w in wanted:
        why = unreadable_reason(w.test)
        if why is None:
            out.append(w)
            continue
        issue = find(w.test)
        if issue is not None:
            why += f"; #{issue['number']} ({issue.get('state')}) has its title and disables nothing"
        report.unreadable[w.test] = why
        warn(f"{w.test!r} gets no DISABLED issue: {why}")
    return out


def _file_aggregates(tracker: IssueTracker, lake: Lake, day: str, wanted: list[Wanted],
                     evidence: dict[str, Evidence], labels: Iterable[str], owners: Callable[[str], list[str]],
                     max_new: int, run_id: str, report: FilingReport, log: Callable[[str], None],
                     warn: Callable[[str], None], known: dict[str, int]) -> tuple[set[str], int]:
    """One aggregate issue per file with more than AGGREGATE_ABOVE new flaky tests (see
    aggregates.py): the tests it handled, and how many issues it created (each counts as one
    against `max_new`). A test is new only when it has no issue (`_is_new`): an issue a human
    closed (to re-enable the test) is found by its title, or by the ledger's number, as the
    one-test path finds it, before the test is counted toward an aggregate."""
    file_of = {w.test: (evidence.get(w.test) or Evidence(w.test)).file for w in wanted}
    handled: set[str] = set()
    created = 0
    aggregate_of = {f: tracker.find_titled(aggregate_title(f)) for f in set(file_of.values()) if f}

    def has_aggregate(file: str) -> bool:
        return aggregate_of.get(file) is not None

    def is_new(test: str) -> bool:
        return _is_new(tracker, test, known, evidence.get(test))

    try:
        # what the ledger names (a closed issue, a closed aggregate), as the one-test path reads it
        for n in {known[w.test] for w in wanted if w.test in known and tracker.find(w.test) is None}:
            if n not in tracker.by_number:
                tracker.get(n)
        for w in (w for members in groups(wanted, file_of.get, is_new, has_aggregate).values() for w in members):
            tracker.search_test(w.test)
    except GitHubError as e:  # no aggregate on a guess: the one-test path files what it can
        if unavailable(e):
            raise
        warn(f"aggregate issues: looking up the issues of their tests failed: {e} (left for the next run)")
        return handled, created
    for file, members in groups(wanted, file_of.get, is_new, has_aggregate).items():
        tests = [w.test for w in members]
        handled.update(tests)
        if created >= max_new:
            report.deferred.extend(tests)
            continue
        try:
            issue, action, detail = _aggregate(tracker, file, members, evidence, [*labels, AGGREGATE_LABEL,
                                                                                   *owners(file)], log)
        except GitHubError as e:
            if unavailable(e):
                raise
            report.failed.update({t: str(e) for t in tests})
            warn(f"aggregate issue for {file}: {e} (left for the next run)")
            continue
        created += action == "created"
        report.aggregates[issue.get("title") or aggregate_title(file)] = tests
        rows = [listing_row(w.test, action, issue, tracker.repo, run_id, detail) for w in members]
        report.rows.extend(rows)
        report.parts.append(record(lake, day, rows, _slug(file)))
    return handled, created


def listing_row(test: str, action: str, issue: dict, repo: str, run_id: str, detail: str) -> dict:
    """The ledger row of `test` listed in the aggregate `issue`, its detail ending with the line as
    read ("; its line: ..."), which tells it from an older version's row of the same listing, whose
    platforms were the aggregate body's (sql/ledger_marks.sql)."""
    row = ledger_row(test, action, issue, repo, run_id, detail)
    return {**row, "detail": f"{detail}; its line: {', '.join(row['platforms']) or 'all'}"}


def _is_new(tracker: IssueTracker, test: str, known: dict[str, int], evidence: Evidence | None) -> bool:
    """Whether `test` has no issue: none is found, and the ledger names none but a closed aggregate
    listing it that it flaked on main after (a new flake after that close gets a new issue, in a
    new aggregate too, as PyTorch's bot files one); until such a flake, that close re-enabled it."""
    if tracker.find(test) is not None:
        return False
    aggregate = tracker.closed_aggregate(test)
    if aggregate is not None and not flaked_since_close(aggregate, evidence):
        return False
    return test not in known or (aggregate is not None and known[test] == aggregate["number"])


def _aggregate(tracker: IssueTracker, file: str, members: list[Wanted], evidence: dict[str, Evidence],
               labels: list[str], log: Callable[[str], None]) -> tuple[dict, str, str]:
    """Add `members` to the file's open aggregate issue, or create it."""
    title = aggregate_title(file)
    platforms = {w.test: w.platforms for w in members}
    existing = tracker.find_titled(title)
    if existing is not None:
        body = with_tests(title, existing.get("body") or "", platforms)
        said = f"{len(members)} more flaky test(s) of `{file}` added to the list: " + ", ".join(
            f"`{t}`" for t in sorted(platforms))
        tracker.comment(existing["number"], said, existing.get("body") or "", said)
        existing = tracker.update(existing["number"], body=body)  # its rows record the lines it now has
        log(f"{title!r}: #{existing['number']}: {len(members)} test(s) added")
        return existing, "updated", f"added to aggregate #{existing['number']}"
    example = render_body(evidence.get(members[0].test) or Evidence(members[0].test), members[0].platforms,
                          tracker.branch)
    issue, action, detail = _create_once(tracker, title, aggregate_body(file, platforms, example),
                                         list(dict.fromkeys(labels)), lambda: tracker.find_titled(title), log)
    log(f"{title!r}: #{issue['number']} {action} for {len(members)} tests")
    if detail:
        return issue, action, detail
    issue, action, detail = _unless_twin(tracker, title, issue, lambda i: i.get("title") == title, log)
    return issue, action, detail if action == "found" else f"aggregate of {len(members)} tests of {file}"


def _create(tracker: IssueTracker, w: Wanted, evidence: Evidence, labels: Iterable[str],
            owners: Callable[[str], list[str]], log: Callable[[str], None]) -> tuple[dict, str, str]:
    """(issue, action, detail): `created`, or `found` when the issue appeared meanwhile. The
    issue gets `labels` and the owner labels of its test file."""
    title = issue_title(w.test)
    labels = list(dict.fromkeys([*labels, *(owners(evidence.file) if evidence.file else [])]))
    issue, action, detail = _create_once(tracker, title, render_body(evidence, w.platforms, tracker.branch), labels,
                                         lambda: tracker.find(w.test), log)
    if detail:
        return issue, action, detail
    log(f"{title!r}: created #{issue['number']} (Platforms: {', '.join(w.platforms) or 'all'})")
    issue, action, detail = _unless_twin(tracker, title, issue, lambda i: titled_for_test(i.get("title"), w.test), log)
    return issue, action, detail or f"created with Platforms: {', '.join(parse_platforms(issue.get('body'))) or 'all'}"


def _create_once(tracker: IssueTracker, title: str, body: str, labels: Iterable[str],
                 find: Callable[[], dict | None], log: Callable[[str], None]) -> tuple[dict, str, str]:
    """Create an issue unless `find` sees it (re-reading the list before each attempt, never
    resending a create GitHub may have taken): (issue, "created", "") when this call created it,
    else (issue, action, why) for one that appeared meanwhile."""
    unanswered, seen = False, None
    for attempt in range(1, CREATE_ATTEMPTS + 1):
        tracker.sync_recent()  # consistent, and cheap: only what changed since the last read
        seen = set(tracker.by_number) if seen is None else seen  # the issues there were before the first create
        existing = find() or (tracker.adopt(title, seen) if unanswered else None)
        if existing is not None:
            ours = unanswered and MARKER in (existing.get("body") or "")
            log(f"{title!r}: #{existing['number']} " + ("is the create GitHub took without answering"
                if ours else "appeared meanwhile (a concurrent run or a human)") + "; not filing another")
            return (existing, "created" if ours else "found",
                    "created (GitHub took the create without answering)" if ours else "appeared while filing")
        try:
            issue = tracker.create(title, body, labels)
        except GitHubError as e:
            if not e.ambiguous:
                raise
            unanswered = True
            log(f"{title!r}: no clear answer to the create ({e}); checking whether GitHub created it "
                f"before trying again ({attempt}/{CREATE_ATTEMPTS})")
            continue
        return issue, "created", ""
    raise GitHubError(None, f"creating {title!r}: no clear answer after {CREATE_ATTEMPTS} attempts and no such "
                            "issue on GitHub yet; the next run looks for it again before filing")


def _unless_twin(tracker: IssueTracker, title: str, issue: dict, same: Callable[[dict], bool],
                 log: Callable[[str], None]) -> tuple[dict, str, str]:
    """Defence in depth for runs outside the `github_issues` pool (another Dagster instance):
    read the list again; if an older open issue for the same tests (`same`) appeared between our
    check and our create, ours is the twin: close it as not planned, pointing to the older one,
    and keep that. Both racers reach the same verdict, so exactly one issue stays open.
    (issue, "created", "") when there is no twin."""
    tracker.sync_recent()
    older = [i for i in tracker.by_number.values() if i.get("state") == "open" and i["number"] < issue["number"]
             and same(i) and tracker.counts(i)]
    if not older:
        return issue, "created", ""
    keep = min(older, key=lambda i: i["number"])
    _close_twin(tracker, issue, keep, log)
    return keep, "found", f"#{keep['number']}, an older open issue for the same test, is kept; closed #{issue['number']}"


def _close_twin(tracker: IssueTracker, twin: dict, keep: dict, log: Callable[[str], None]) -> None:
    """Close `twin` as a duplicate of `keep`, saying so once: the comment's marker names the twin's
    body and the text, so a run after a crash between the two finds it and only closes."""
    _comment(tracker, twin, f"Duplicate of #{keep['number']}, an older open issue for the same test; "
             "closing this one.", None, log)
    tracker.update(twin["number"], state="closed", state_reason="not_planned")
    log(f"{twin.get('title')!r}: #{keep['number']} was filed first; closed #{twin['number']} as its duplicate")


def own_twins(tracker: IssueTracker) -> dict[int, dict]:
    """The open issues this project filed (its marker, an author of its own when the trust rules
    know them) that share their exact title with an older open issue that counts: twin number ->
    the oldest. A run killed between a create and hearing GitHub's answer, where GitHub does not
    say the account, leaves such a twin; if the run that files the next one and closes it
    (`_unless_twin`) is killed too, only a later run, reading them all, can close it."""
    by_title: dict[str, list[dict]] = {}
    for issue in tracker.open_any():
        if (issue.get("title") or "").startswith(DISABLED_PREFIX) and tracker.counts(issue):
            by_title.setdefault(issue["title"], []).append(issue)
    twins = {}
    for same in by_title.values():
        keep = min(same, key=lambda i: i["number"])
        twins.update({i["number"]: keep for i in same if i is not keep and _filed_here(tracker, i)})
    return twins


def _filed_here(tracker: IssueTracker, issue: dict) -> bool:
    """Whether this project filed `issue`: its body has the marker, and its author is one of this
    project's accounts when the trust rules are on (a maintainer's copy of a body is not ours)."""
    return MARKER in (issue.get("body") or "") and (tracker.allowed is None or author(issue) in tracker.allowed.own)


def close_own_twins(tracker: IssueTracker, log: Callable[[str], None] = lambda s: None,
                    warn: Callable[[str], None] = lambda s: None) -> list[int]:
    """Close every twin `own_twins` finds in the issues the run read, as `_unless_twin` closes one;
    the numbers closed. A dry run (no credentials) logs what it would close; a twin GitHub fails to
    close is warned about and left for the next run."""
    closed = []
    for number, keep in sorted(own_twins(tracker).items()):
        twin = tracker.by_number[number]
        if tracker.github.dry_run:
            log(f"DRY RUN: would close #{number} {twin.get('title')!r} as a duplicate of #{keep['number']}")
            continue
        try:
            _close_twin(tracker, twin, keep, log)
        except GitHubError as e:
            if unavailable(e):
                raise
            warn(f"closing #{number} as a duplicate of #{keep['number']} failed: {e} (left for the next run)")
            continue
        closed.append(number)
    return closed


def platforms_set_at(issue: dict, narrowed_at: dt.datetime | None, listed_at: dt.datetime | None = None
                     ) -> dt.datetime | None:
    """When the test's platforms were last set by what is known: the issue's filing, the test's
    listing in an aggregate (`listed_at`: its filing or the test's addition), or this project's
    last narrowing of them (the ledger's `narrowed` rows)."""
    times = [t for t in (_parse_time(issue.get("created_at")), narrowed_at, listed_at) if t is not None]
    return max(times, default=None)


def narrowed_by_hand(current: list[str], seen: list[str] | None) -> bool:
    """Whether someone took platforms off the test's line since the ledger last saw it as `seen`
    (this project's own narrowing records the line it left): PyTorch's bot tells maintainers to
    re-enable a test on a platform so. The flakes before that edit must not add them back."""
    if seen is None or not current:
        return False
    return not seen or bool(added_platforms(current, seen))


def listed_as(issue: dict, test: str) -> str:
    """The name the aggregate `issue`'s list writes `test` under (`line_for_test`: a dotted suite
    too), else `test`: a line is read, changed and named in comments as its author wrote it."""
    return line_for_test(listed(issue.get("title"), issue.get("body")), test) or test


def current_platforms(issue: dict, test: str) -> list[str]:
    """The platforms `issue` disables `test` on ([]: everywhere): an aggregate's line of it, or a
    single issue's `Platforms:` lines."""
    if is_aggregate(issue.get("title")):
        return list(dict.fromkeys(listed(issue.get("title"), issue.get("body")).get(listed_as(issue, test), [])))
    return list(dict.fromkeys(parse_platforms(issue.get("body"))))


def _update_open(tracker: IssueTracker, w: Wanted, issue: dict, evidence: Evidence | None, run_id: str,
                 log: Callable[[str], None], marks: Marks | None = None) -> dict:
    """Extend the test's platforms (a single issue's line, or the test's line of an aggregate, as
    updateAggregateFlakyTestIssue does) to where it flaked on main, only on a main flake after they
    were last set (`platforms_set_at`), as a closed issue reopens only on a main flake after its
    close: the verdict's window still holds the flakes of the platforms re-enabling just dropped,
    and adding them back would undo it on every run."""
    aggregate = is_aggregate(issue.get("title"))
    current = current_platforms(issue, w.test)
    narrowed, listed_at = (marks.of("narrowed", issue, w.test), marks.of("listed", issue, w.test)) if marks \
        else (None, None)
    seen = marks.platforms.get((issue["number"], w.test)) if marks else None
    by_hand = narrowed_by_hand(current, seen)
    set_at = platforms_set_at(issue, utc_now() if by_hand else narrowed, listed_at)
    last = evidence.last_main_flake_at if evidence else None
    add = added_platforms(current, w.flaked) if last is None or set_at is None or last > set_at else []
    if not add:
        stale = added_platforms(current, w.flaked)
        line = f"listed in aggregate #{issue['number']}; its line" if aggregate else "open; Platforms:"
        return ledger_row(w.test, "found", issue, tracker.repo, run_id,
                          (f"narrowed by hand from {', '.join(seen) or 'all'}; " if by_hand else "")
                          + f"{line} {', '.join(current) or 'all'} covers where it flaked"
                          + (f" since {_iso(set_at)}" if stale and set_at else ""))
    body = (with_tests(issue["title"], issue.get("body") or "", {w.test: current + add}) if aggregate
            else with_platforms(issue.get("body"), current + add))
    what, where = (f"`{listed_as(issue, w.test)}`", "its line of the list") if aggregate else ("It", "the platforms")
    _comment(tracker, issue, f"{what} flaked on {', '.join(add)} as well: adding "
             f"{'it' if len(add) == 1 else 'them'} to {where}.", evidence, log)
    updated = tracker.update(issue["number"], body=body)
    log(f"{issue_title(w.test)!r}: #{issue['number']} now disabled on {', '.join(current + add)}")
    return ledger_row(w.test, "updated", updated, tracker.repo, run_id, f"added platforms: {', '.join(add)}"
                      + (f" (its line of aggregate #{issue['number']})" if aggregate else ""))


def flaked_since_close(issue: dict, evidence: Evidence | None) -> bool:
    """Whether the test flaked on main after `issue` was closed: only that re-disables a test
    whose issue was closed."""
    closed_at = _parse_time(issue.get("closed_at"))
    last = evidence.last_main_flake_at if evidence else None
    return last is not None and closed_at is not None and last > closed_at


def _closed(tracker: IssueTracker, w: Wanted, issue: dict, evidence: Evidence | None, run_id: str,
            log: Callable[[str], None]) -> dict:
    """Reopen a closed issue when the test flaked on main after it was closed; else leave it
    closed (a human re-enabled the test). A failure on a pull request, or a break, is not new
    flakiness on main: it would disable on main a test the pull request broke, and hide the break
    from the pull request's own CI."""
    if not flaked_since_close(issue, evidence):
        return ledger_row(w.test, "found", issue, tracker.repo, run_id,
                    f"closed at {issue.get('closed_at')}, no flake on {tracker.branch} since: left closed (re-enabled)")
    last = evidence.last_main_flake_at
    current = list(dict.fromkeys(parse_platforms(issue.get("body"))))
    add = added_platforms(current, w.flaked)
    fields = {"state": "open", **({"body": with_platforms(issue.get("body"), current + add)} if add else {})}
    _comment(tracker, issue, f"It flaked again on {tracker.branch} at {_iso(last)}, after this issue was closed: "
             "reopening to disable it." + (f" Adding {', '.join(add)} to the platforms." if add else ""),
             evidence, log)
    updated = tracker.update(issue["number"], **fields)
    log(f"{issue_title(w.test)!r}: reopened #{issue['number']} (flaked on {tracker.branch} at {_iso(last)}, closed at "
        f"{issue.get('closed_at')})")
    return ledger_row(w.test, "updated", updated, tracker.repo, run_id,
                      f"reopened: flaked on {tracker.branch} at {_iso(last)} after closing"
                      + (f"; added {', '.join(add)}" if add else ""))


def _comment(tracker: IssueTracker, issue: dict, text: str, evidence: Evidence | None,
             log: Callable[[str], None]) -> None:
    """Say why the bot is about to change the issue, with the latest failing jobs, once
    (`IssueTracker.comment`); a comment that fails is logged, and the change made without it, unless
    GitHub is down: the change would wait out the same retries, so the pass stops (`stop_pass`)."""
    links = [f"- [{j.job_name or 'job'}]({j.url})" for j in (evidence.jobs[:5] if evidence else [])]
    try:
        tracker.comment(issue["number"], "\n".join([text, *(["", "Recent failing jobs:", *links] if links else [])]),
                        issue.get("body") or "", text)
    except GitHubError as e:
        if unavailable(e):
            raise
        log(f"comment on #{issue['number']} failed (the change is made without it): {e}")


# ---- one day's run -------------------------------------------------------------------


@dataclass(frozen=True)
class LoopMode:
    """Live (issues are read and written) or dry run, and why not live."""

    live: bool
    reason: str = ""


def loop_mode(github: GitHubResource, settings: DisabledIssuesConfig, config_source: str) -> LoopMode:
    if not settings.enabled:
        return LoopMode(False, f"disabled_issues.enabled is false in {config_source or 'the config'}")
    if github.dry_run:
        return LoopMode(False, "no GitHub credentials (set GITHUB_TOKEN or a GitHub App)")
    return LoopMode(True)


def wanted_tests(rows: list[dict], previous: dict) -> list[Wanted]:
    """The tests the verdict disables, with platforms in PyTorch's names: decide_disabled over
    the `flaky_tests` rows and, of the published file, the entries without an issue (local ids
    from dry runs, which stay disabled until clean for a window and get their issue when the
    loop is turned on). An entry with a real issue is the issue's business: closing it is how
    a human re-enables the test, so it is not wanted back from the file. Where it flaked, and how
    often, is main's evidence (`main_evidence`), as for disabling: a platform where it flaked
    only on pull requests is not added to its issue."""
    decision = decide_disabled(rows, {k: v for k, v in previous.items() if is_local(v[0])})
    flaked: dict[str, set[str]] = {}
    events: dict[str, int] = {}
    for r in rows:
        count, platforms = main_evidence(r)
        if not count:
            continue  # adds nothing to either (most rows of a day)
        key = pytorch_key(r["classname"], r["name"])
        flaked.setdefault(key, set()).update(platforms)
        events[key] = events.get(key, 0) + count
    return [Wanted(key, pytorch_platforms(entry[2]), pytorch_platforms(flaked.get(key, ())), events.get(key, 0))
            for key, entry in sorted(decision.disabled.items())]


def listed_issues(published: dict) -> dict[str, ListedIssue]:
    """The dry run's stand-ins for the issues: per test (keyed `runner_test`), the entry of the
    published list that names an issue, as a live run takes an issue titled or listed with a
    dotted suite for the test's (`names_by_test`: `test_x (distributed.test_c10d.TestY)` too). An
    entry with a local id names none (`is_local`: a test a dry run disabled): a live run files
    that test's issue, in its file's aggregate with the others when they are many."""
    real = {name: entry for name, entry in published.items() if not is_local(entry[0])}
    return {test: ListedIssue(name, str(real[name][0]), real[name][1], tuple(real[name][2] or ()))
            for test, name in names_by_test(real).items()}


def superseded_by(lake: Lake, day: str) -> str | None:
    """The newest `flaky_tests` partition when it is newer than `day`: issues are filed from the
    newest verdict only, so a backfill of old days does not file what has since been fixed."""
    newer = [d for d in lake.days("flaky_tests") if d > day]
    return newer[-1] if newer else None


def run_disabled_issues(github: GitHubResource, lake: Lake, outputs: Store, day: str, run_id: str,
                        config: TorchciConfig, log: Callable[[str], None] = lambda s: None,
                        warn: Callable[[str], None] = lambda s: None,
                        refresh: bool = False) -> tuple[FilingReport, LoopMode]:
    """The `disabled_issues` asset's work for `day`: find, update or file the issues of the tests
    the verdict disables (live), or record what would be done (dry run). In an intra-day
    `refresh`, what the day's last filing did stands when nothing it acts on changed: the same
    tests to disable and no DISABLED issue changed since (live), or the same plan (dry run)."""
    mode = loop_mode(github, config.disabled_issues, config.source)
    branch = config.main_branch_name
    if not lake.files("flaky_tests", [day]):
        warn(f"flaky_tests has no partition for {day}: no verdict, nothing to file")
        report = FilingReport(dry_run=not mode.live, skipped=f"no flaky_tests partition for {day}")
        report.parts.append(record(lake, day, [], f"run-{run_id[:8]}"))
        return report, mode
    published = disabled_baseline(outputs, day).tests  # as `disabled_tests` decides: against the previous day's
    rows = flaky_rows(lake, day, keys=published)
    wanted = wanted_tests(rows, published)
    if not mode.live:
        file_of = {pytorch_key(r["classname"], r["name"]): r["file"] for r in rows}
        report = dry_run_filing(lake, day, wanted, config.upstream_repo, run_id, mode.reason, log, file_of.get,
                                listed_issues(published), refresh, config.disabled_issues.max_new_per_run, warn,
                                branch)
        warn_deferred(report, config.disabled_issues.max_new_per_run, warn)
        return report, mode
    newer = superseded_by(lake, day)
    if newer:
        warn(f"{day} is not the newest verdict ({newer} is): issues are filed from the newest only")
        report = FilingReport(dry_run=False, skipped=f"superseded by the verdict of {newer}")
        report.parts.append(record(lake, day, [], f"run-{run_id[:8]}"))
        return report, mode
    state = live_state(lake, day)
    tracker, key = IssueTracker(github, config.upstream_repo, branch=branch), wanted_digest(wanted)
    if refresh and state.get("wanted") == key and state.get("complete"):
        unchanged = _unchanged_since(tracker, state, log)
        if unchanged is not None:
            _save_live_state(lake, day, {**state, "snapshot": tracker.snapshot()})
            # what retiring and re-enabling ask, recorded with the rest (keep_answers)
            unchanged.allowed = issue_permissions(github, lake, day, config.upstream_repo, unchanged.open_list, run_id)
            return unchanged, mode
        tracker = IssueTracker(github, config.upstream_repo, branch=branch)  # an issue changed: read them all again
    evidence = gather_evidence(lake, day, [w.test for w in wanted], config.upstream_repo, github.web_url)
    owners = OwnerLookup(github, config.upstream_repo, branch,
                         config.disabled_issues.unknown_owner_label, warn)
    report = file_disabled_issues(tracker, lake, day, wanted, evidence, config.disabled_issues.labels,
                                  config.disabled_issues.max_new_per_run, run_id, log, warn, owners,
                                  only_trusted=True)
    warn_deferred(report, config.disabled_issues.max_new_per_run, warn)
    _save_live_state(lake, day, {"wanted": key, "complete": not report.failed and not report.deferred,
                                 "run_id": run_id, "snapshot": tracker.snapshot()})
    return report, mode


def dry_run_opening(reason: str, report: FilingReport, since: str = "") -> str:
    """The dry run's warning: the tests its plan records (a test a live run leaves for a later run,
    or gives no issue at all, has no `dry_run` row, and is counted apart), or, when the run `since`
    recorded the same plan that day (`repeated`), that it is not recorded again."""
    apart = ([f"{len(report.deferred)} more wait for a later run (max_new_per_run)"] if report.deferred else []) + (
        [f"{len(report.unreadable)} get no issue (PyTorch cannot read their title)"] if report.unreadable else [])
    kept = f", the plan run {since} recorded, not recorded again" if since else " are recorded as dry_run"
    return (f"DRY RUN: {reason}; {report.count('dry_run')} test(s) to disable{kept}"
            + "".join(f", {a}" for a in apart) + ", no issue is searched, filed or changed")


def warn_deferred(report: FilingReport, max_new: int, warn: Callable[[str], None]) -> None:
    if report.deferred:
        warn(f"{len(report.deferred)} new issue(s) beyond max_new_per_run={max_new} wait for the next run: "
             f"{', '.join(report.deferred[:10])}")


def wanted_digest(wanted: list[Wanted]) -> str:
    """What the filing acts on: each wanted test with its platforms and where it flaked."""
    plan = sorted((w.test, w.platforms, sorted(w.flaked)) for w in wanted)
    return hashlib.sha256(json.dumps(plan).encode()).hexdigest()


def live_state(lake: Lake, day: str) -> dict:
    """The day's last live filing: its wanted digest, whether it left nothing for later
    (`complete`: no failure, nothing deferred), its run and the open issues it read
    (`snapshot`); {} before the first."""
    try:
        state = json.loads(lake.store.read_bytes(f"{LEDGER_TABLE}/day={day}/{LIVE_STATE}"))
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def _save_live_state(lake: Lake, day: str, state: dict) -> None:
    lake.store.write_bytes(f"{LEDGER_TABLE}/day={day}/{LIVE_STATE}", json.dumps(state).encode())


def _unchanged_since(tracker: IssueTracker, state: dict, log: Callable[[str], None]) -> FilingReport | None:
    """The report of a filing with nothing to do, when the wanted tests are those the last
    complete filing handled and no disabled-test issue changed since (read from the snapshot and
    the issue list's changes since it, no search); else None."""
    before = {int(i["number"]): _as_seen(i) for i in (state.get("snapshot") or {}).get("issues") or []}
    if not tracker.read_open(state.get("snapshot")):
        return None
    moved = [n for n, i in tracker.by_number.items() if is_test_issue(i.get("title")) and before.get(n) != _as_seen(i)]
    if moved:
        log(f"{len(moved)} DISABLED issue(s) changed since run {state.get('run_id')}: every wanted test is looked up")
        return None
    log(f"the tests to disable and their DISABLED issues are as run {state.get('run_id')} left them: nothing to file")
    report = FilingReport(dry_run=False, skipped=f"nothing changed since run {state.get('run_id')}",
                          unchanged_since=str(state.get("run_id", "")))
    report.open_issues, report.open_list = len(tracker.open_issues()), tracker.open_any()
    return report


def _as_seen(issue: dict) -> list:
    """What the filing acts on of an issue: `updated_at` counts whole seconds, so a change in the
    same second as the snapshot shows only in the fields themselves."""
    labels = sorted(x.get("name", "") if isinstance(x, dict) else str(x) for x in issue.get("labels") or [])
    return [issue.get("updated_at"), issue.get("state"), issue.get("title"), issue.get("body"), labels]


def read_back(github: GitHubResource, repo: str, lake: Lake | None = None, day: str | None = None,
              refresh: bool = False) -> IssueTracker:
    """The issues of `repo` that the DISABLED search and the last hour's changes from the consistent
    issue list show (a just-filed issue, a just-closed one), whatever their titles: disabled tests and
    disabled jobs come from this one read, as PyTorch's script splits one search. In an intra-day
    `refresh`, the open issues the day's last filing read stand in for the search when they are
    recent (`IssueTracker.read_open`)."""
    tracker = IssueTracker(github, repo)
    tracker.read_open(live_state(lake, day).get("snapshot") if refresh and lake is not None and day else None)
    return tracker


def read_back_open(github: GitHubResource, repo: str) -> list[dict]:
    """Every open issue (not pull request) of `repo`, as `read_back` reads them."""
    return read_back(github, repo).open_any()


def close_times(tracker: IssueTracker, numbers: list[str], limit: int = MAX_CLOSE_READS) -> dict[str, dt.datetime]:
    """When each issue of `numbers` (as a list's ids) closed, by GitHub's `closed_at`: from the
    issues `tracker` read (a close within its last sync), else read one by one, `limit` at most (a
    day re-enables a handful of tests; past the limit they stay unknown). An issue open, gone, or
    unreadable has none."""
    found: dict[str, dt.datetime] = {}
    for text in numbers:
        issue = tracker.by_number.get(int(text))
        if issue is None and limit > 0:
            limit -= 1
            try:
                issue = tracker.get(int(text))
            except GitHubError:
                issue = None
        if issue is not None and issue.get("state") == "closed" and (at := _parse_time(issue.get("closed_at"))):
            found[text] = at
    return found


def disabled_test_issues(issues: Iterable[dict]) -> list[dict]:
    """The issues of disabled tests, one or many (aggregates)."""
    return [i for i in issues if is_test_issue(i.get("title"))]


def _kept_own_logins(lake: Lake) -> set[str] | None:
    """The logins kept in OWN_LOGINS; None when none were ever kept (no file), none when it is
    unreadable (it is only added to)."""
    if not lake.store.exists(OWN_LOGINS):
        return None
    try:
        return set(json.loads(lake.store.read_bytes(OWN_LOGINS)).get("logins") or [])
    except (OSError, ValueError, AttributeError):
        return set()


def _keep(lake: Lake, kept: set[str] | None, logins: set[str]) -> set[str]:
    """`logins` added to `kept` (as `_kept_own_logins` read them), written when that adds one or
    when nothing was ever kept (written once even empty: see own_logins); all of them."""
    now = (kept or set()) | logins
    if kept is None or now != kept:
        lake.store.write_bytes(OWN_LOGINS, json.dumps({"logins": sorted(now)}).encode())
    return now


def keep_own_logins(lake: Lake, logins: set[str]) -> set[str]:
    """Add `logins` to the accounts kept as this project's own (OWN_LOGINS); all of them."""
    return _keep(lake, _kept_own_logins(lake), logins)


def own_logins(lake: Lake, day: str, issues: Iterable[dict]) -> set[str]:
    """The accounts this project files DISABLED issues as (a GitHub App's bot is no collaborator,
    so no permission says it may): the authors of `issues` the ledger records this project
    creating, and those learned so by earlier runs (or by a create, `IssueTracker.create`).
    Learned logins are kept (OWN_LOGINS), so a month without a new issue, past the ledger's
    lookback, does not cost its issues their trust. Before any is kept (the first run, or the
    first after an upgrade from a version that kept none) the whole ledger is read, once: its
    issues may all be older than the lookback."""
    kept = _kept_own_logins(lake)
    lookback = LEDGER_LOOKBACK_DAYS if kept is not None else None
    created = {int(n) for (n,) in _ledger_rows(lake, day, SQL["ledger_created"], lookback)}
    return _keep(lake, kept, {author(i) for i in issues if i.get("number") in created} - {""})


def issue_permissions(github: GitHubResource, lake: Lake, day: str, repo: str,
                      issues: Iterable[dict], run_id: str | None = None) -> Permissions:
    """Who may disable a test, for the list and the filing alike: PyTorch's flaky bot, this
    project (`own_logins`, learned from `issues`) or a user with write access, with the answers
    the run `run_id` already got from GitHub (`run_answers`)."""
    return Permissions(github, repo, own_logins(lake, day, issues),
                       run_answers(lake, day, run_id, repo) if run_id else None)


def _answers_path(day: str) -> str:
    return f"{ANSWERS_DIR}/{day}.json"


def run_answers(lake: Lake, day: str, run_id: str, repo: str) -> dict[str, bool]:
    """GitHub's answers to the permission lookups of run `run_id` on `repo` so far ({} for any
    other run): `disabled_issues`, `disabled_tests` and `unstable_jobs` each read issues whose
    authors must be asked, and one run asks each author once between them. Only the same run's
    answers are taken, minutes old at most, as one step's own are: a permission withdrawn counts
    from the next run on, as it did when each step asked for itself."""
    try:
        doc = json.loads(lake.store.read_bytes(_answers_path(day)))
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict) or doc.get("run_id") != run_id or doc.get("repo") != repo:
        return {}
    answers = doc.get("answers")
    return {k: v for k, v in answers.items() if isinstance(k, str) and isinstance(v, bool)} \
        if isinstance(answers, dict) else {}


def keep_answers(lake: Lake, day: str, run_id: str, allowed: Permissions | None) -> int:
    """Record GitHub's answers `allowed` got, with those the run recorded before, for the run's
    later steps (`run_answers`); how many are recorded. A day's runs never overlap (one run per
    partition at a time), so each day's file holds its latest run's answers alone; two steps of a
    run writing at once (a process per step) can only cost a later step a question it asks again."""
    if allowed is None or not allowed.known:
        return 0
    answers = {**run_answers(lake, day, run_id, allowed.repo), **allowed.known}
    lake.store.write_bytes(_answers_path(day), json.dumps(
        {"run_id": run_id, "repo": allowed.repo, "answers": dict(sorted(answers.items()))}).encode())
    return len(answers)


@dataclass
class TrustedIssues:
    """The open issues of disabled tests whose authors may disable a test, the others, and the
    permissions asked (the job lists ask the same authors: once a run)."""

    tests: list[dict]
    refused: list[dict]
    allowed: Permissions


def trusted_test_issues(github: GitHubResource, lake: Lake, day: str, repo: str,
                        open_issues: list[dict], run_id: str | None = None) -> TrustedIssues:
    """Split the open issues of disabled tests (one or many) by author: PyTorch's flaky bot,
    this project (`own_logins`) or a user with write access may disable a test; anyone else may
    open an issue, and PyTorch's bot closes theirs at once (verifyDisableTestIssueBot), so it never
    reaches PyTorch's list. Here such an issue is left out of the list, as jobs' are. The authors
    the run `run_id` asked about already are not asked again."""
    allowed = issue_permissions(github, lake, day, repo, open_issues, run_id)
    tests = disabled_test_issues(open_issues)
    return TrustedIssues([i for i in tests if allowed.wrote(i)], [i for i in tests if not allowed.wrote(i)],
                         allowed)


# ---- the unstable jobs ---------------------------------------------------------------------


@dataclass
class UnstableJobs:
    """What the `unstable_jobs` step did: the list it published (None: none read), or the error
    that left the published one as it was; the authors it asked GitHub about, and those whose
    answers an earlier step of the run had got."""

    mode: LoopMode
    jobs: dict[str, list] | None = None
    changed: bool = False
    error: str = ""
    asked: int = 0
    reused: int = 0
    exception: Exception | None = None  # the error itself: a refusal of the credentials is told apart


def run_unstable_jobs(github: GitHubResource, lake: Lake, outputs: Store, day: str, run_id: str,
                      config: TorchciConfig, log_error: Callable[[str], None] = lambda s: None) -> UnstableJobs:
    """Publish stats/unstable-jobs.json from the open UNSTABLE issues (live; a dry run publishes
    nothing, as for the disabled jobs). The HUD and Dr. CI wait for this step, so that an issue
    opened reaches them in the same run; a step that fails skips what waits for it, so any error
    here (GitHub's, the store's, a bug's) is returned, not raised: the list published last stays
    and the HUD marks the jobs it names, while the error shows on the asset's check and in the log. The
    authors are trusted as for the disabled lists, this project's accounts as kept (it files no
    UNSTABLE issue, so the ledger is not read)."""
    mode = loop_mode(github, config.disabled_issues, config.source)
    if not mode.live:
        return UnstableJobs(mode)
    repo = config.upstream_repo
    report = UnstableJobs(mode)
    try:
        allowed = Permissions(github, repo, _kept_own_logins(lake) or (), run_answers(lake, day, run_id, repo))
        report.reused = len(allowed.known)
        report.jobs = read_job_list(github, repo, UNSTABLE_PREFIX, allowed=allowed)
        report.asked = len(allowed.known) - report.reused
        report.changed = write_if_changed(outputs, UNSTABLE_JOBS_PATH, dumps(report.jobs))
        keep_answers(lake, day, run_id, allowed)
    except Exception as exc:  # noqa: BLE001 - see the docstring: this step must not skip the HUD
        log_error(traceback.format_exc())
        report.jobs, report.changed, report.error = None, False, f"{type(exc).__name__}: {exc}"
        report.exception = exc
    return report
