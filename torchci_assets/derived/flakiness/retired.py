"""DISABLED issues of tests that no longer exist: closed once the test has been gone long enough.

A disabled test keeps appearing in its file's reports: PyTorch's runner reports it as skipped
("disabled by issue ..."), and the rerun_disabled_tests jobs run it. So a test absent from every
report for RETIRE_AFTER_DAYS days while its file kept reporting was deleted or renamed, and its
issue is only noise in the disabled list (PyTorch's own lists carry such issues for months). Its
issue is closed with a comment that says why and how to undo it.

A test whose whole file stopped reporting is left alone and flagged: the file may have moved, be
skipped on every configuration, or CI may be broken; closing on that evidence would re-enable
tests by accident. A window with a missing day decides nothing (a gap is not an absence), more
than half of a list of MASS_MIN or more at once is refused as a likely data outage, and at most
MAX_CLOSED_PER_RUN issues are closed per run.

Closing is two writes, a comment (with RETIRED_MARKER) then the close. A retry after a crash
between them finds its comment by the marker and only closes: never two comments. An issue a
human reopened since (as the comment invites) and closed again is said again.
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from resources.github import GitHubError, GitHubResource, unavailable
from resources.lake import Lake, connect
from resources.lake_extracts import Extract, register_extract
from resources.sql import SqlFiles, execute
from torchci_assets.derived.flakiness.aggregates import ON_AGGREGATE, entry_name, in_aggregate, unsure_of_aggregate
from torchci_assets.derived.flakiness.comments import comment_once
from torchci_assets.derived.flakiness.issue_text import titled_as
from torchci_assets.derived.flakiness.issues import (
    ledger_row,
    record,
    stop_pass,
)
from torchci_assets.derived.flakiness.lists import define_pytorch_key

RETIRE_AFTER_DAYS = 7
# Before the window, how far back a test's file is looked up.
LOOKBACK_DAYS = 30
# The file must have reported on one of the window's last this many days.
RECENT_DAYS = 2
MAX_CLOSED_PER_RUN = 20
MASS_MIN = 10
RETIRED_MARKER = "<!-- torchci-dagster: test retired -->"
SQL = SqlFiles(__file__)
# Per day, when each test last reported in each file, extracted once per test_daily_stats file
# beside the ledger's partitions: each refresh looks at up to LOOKBACK_DAYS + RETIRE_AFTER_DAYS
# days of ~160,000 rows (resources.lake_extracts).
REPORTED_TESTS = Extract("reported_tests", "test_daily_stats", "disabled_issues", SQL)


@dataclass(frozen=True)
class Absent:
    """A disabled test missing from the window's reports: `retired` (its file still reports),
    `file_gone` (its file stopped too) or `unknown` (never seen in the lookback either)."""

    test: str
    file: str | None
    last_seen: dt.datetime | None
    status: str


@dataclass
class Retirement:
    absent: list[Absent]
    skipped: str = ""
    rows: list[dict] = field(default_factory=list)  # the ledger rows of what was (or would be) closed
    failed: dict[str, str] = field(default_factory=dict)
    # deleted tests of aggregates: their lines are dropped with the run's other changes to the same
    # aggregate (aggregate_lifecycle.py), not closed here
    listed: list[Absent] = field(default_factory=list)
    unavailable: str = ""  # GitHub was down: the closing stopped there, and how many wait (`issues.stop_pass`)

    def of(self, status: str) -> list[Absent]:
        return [a for a in self.absent if a.status == status]


def _days(day: str, first: int, last: int) -> list[str]:
    d = dt.date.fromisoformat(day)
    return [(d - dt.timedelta(days=n)).isoformat() for n in range(last, first - 1, -1)]


def find_absent(lake: Lake, day: str, tests: list[str], window_days: int = RETIRE_AFTER_DAYS,
                lookback_days: int = LOOKBACK_DAYS) -> Retirement:
    """The disabled `tests` absent from every report of the `window_days` days ending on `day`."""
    window = _days(day, 0, window_days - 1)
    have = set(lake.days("test_daily_stats"))
    missing = [d for d in window if d not in have]
    if missing:
        return Retirement([], f"test_daily_stats has no partition for {', '.join(missing[:5])}: "
                              f"a {window_days}-day window with gaps decides nothing")
    if not tests:
        return Retirement([])
    history = [d for d in _days(day, window_days, window_days + lookback_days - 1) if d in have]
    con = connect()
    try:
        register_extract(con, lake, REPORTED_TESTS, window, "w_seen")
        if not history or register_extract(con, lake, REPORTED_TESTS, history, "h_seen") == 0:
            con.execute("CREATE TEMP VIEW h_seen AS SELECT * FROM w_seen WHERE false")
        define_pytorch_key(con)
        recent_from = dt.datetime.fromisoformat(window[-RECENT_DAYS]).replace(tzinfo=dt.timezone.utc)
        rows = execute(con, SQL["retired_tests"], {"tests": sorted(set(tests)), "recent_from": recent_from}).fetchall()
    finally:
        con.close()
    return Retirement([Absent(*r) for r in rows])


def refusal(retirement: Retirement, open_tests: int) -> str:
    """Why nothing may be closed this run, or "" (see the module docstring)."""
    retired = len(retirement.of("retired"))
    if open_tests >= MASS_MIN and retired > open_tests / 2:
        return (f"{retired} of {open_tests} disabled tests look deleted at once: more likely missing reports "
                "than deleted tests; nothing closed")
    return retirement.skipped


def comment_text(a: Absent, title: str | None = None, window_days: int = RETIRE_AFTER_DAYS) -> str:
    """The closing comment, naming the test as the issue's `title` does (`titled_as`)."""
    seen = f"last seen {a.last_seen:%Y-%m-%d}" if a.last_seen else "not seen"
    return (f"Closing: `{titled_as(title, a.test)}` has not appeared in any test report for {window_days} days "
            f"({seen}, in `{a.file}`), while `{a.file}` kept reporting: the test was deleted or renamed, so this "
            "issue no longer disables anything. If the test still exists, reopen this issue and it is disabled again.")


def close_retired(github: GitHubResource, repo: str, issue: dict, a: Absent) -> str:
    """Comment (once, found by its marker after a crash) and close; the ledger's detail."""
    number = issue["number"]
    posted = comment_once(github, repo, number, RETIRED_MARKER, comment_text(a, issue.get("title")),
                          undone_by="reopened")
    github.request("PATCH", f"/repos/{repo}/issues/{number}", json_body={"state": "closed",
                                                                        "state_reason": "not_planned"})
    return (f"closed: not in any report for {RETIRE_AFTER_DAYS} days while {a.file} kept reporting"
            + ("" if posted else " (its comment was already there)"))


def describe(retirement: Retirement, log: Callable[[str], None]) -> None:
    for a in retirement.of("file_gone"):
        log(f"{a.test}: its file {a.file} stopped reporting too (last seen "
            f"{a.last_seen:%Y-%m-%d}); left open")


def retire_disabled_tests(github: GitHubResource, lake: Lake, day: str, run_id: str, repo: str,
                          issues: dict[str, dict], live: bool, may_act: Callable[[dict], bool],
                          log: Callable[[str], None] = lambda s: None,
                          warn: Callable[[str], None] = lambda s: None) -> Retirement:
    """Close the issues (`issues`, open single-test issues by test, and tests of aggregates as
    `aggregates.stand_in` gives them) of disabled tests that were deleted (live: only those `may_act`
    allows, see lifecycle.py; its refusals take none of the run's MAX_CLOSED_PER_RUN), or log
    what would be closed (dry run); rows go to the ledger (a dry run's through run_lifecycle). A
    test of an aggregate is only listed in `listed`, its line to be dropped (or, dry run, planned
    so), and counts toward MAX_CLOSED_PER_RUN."""
    retirement = find_absent(lake, day, list(issues))
    describe(retirement, log)
    why = refusal(retirement, len(issues))
    if why:
        warn(f"retiring deleted tests: {why}")
        retirement.skipped = why
        return retirement
    allowed = (a for a in retirement.of("retired") if not live or may_act(issues[a.test]))
    chosen = list(itertools.islice(allowed, MAX_CLOSED_PER_RUN))
    for i, a in enumerate(chosen):
        if in_aggregate(issues[a.test]) is not None:
            retirement.listed.append(a)
            continue
        if not live:
            plan = (f"would comment on the DISABLED issue of {entry_name(issues[a.test], a.test)} and close it as "
                    f"deleted (not in any report for {RETIRE_AFTER_DAYS} days while {a.file} kept reporting)"
                    + unsure_of_aggregate(issues[a.test], ON_AGGREGATE["close"]))
            log(f"DRY RUN: {plan}")
            retirement.rows.append(ledger_row(a.test, "dry_run", None, repo, run_id, plan))
            continue
        try:
            detail = close_retired(github, repo, issues[a.test], a)
        except GitHubError as e:
            if unavailable(e):
                waiting = [b.test for b in chosen[i:] if in_aggregate(issues[b.test]) is None]
                retirement.unavailable = stop_pass(e, waiting, retirement.failed, warn, "issue(s)")
                break
            retirement.failed[a.test] = str(e)
            warn(f"closing the issue of {a.test}: {e} (left for the next run)")
            continue
        log(f"closed #{issues[a.test]['number']} ({a.test}): deleted")
        retirement.rows.append(ledger_row(a.test, "closed", {**issues[a.test], "state": "closed"}, repo, run_id, detail))
    if retirement.rows and live:  # a dry run's plan is recorded by run_lifecycle, once
        record(lake, day, retirement.rows, f"retired-{run_id[:8]}")
    return retirement
