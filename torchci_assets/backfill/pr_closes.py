"""Lost `pull_request closed` deliveries: pull requests the HUD still shows open that GitHub closed.

A pull request's page, its row in the HUD's list and Dr. CI's view of it follow `pr_jobs`, which
carries an open pull request from day to day until a `closed` delivery says otherwise. GitHub does
not retry a delivery that failed, so one lost close would keep the pull request open there for good.
Nothing in the lake can tell: an open pull request may go weeks without a delivery. So once an hour
gap repair compares the pull requests the newest `pr_jobs` partition shows open with the ones GitHub
lists open (one request per hundred), asks GitHub for each one missing from that list (one request
each), and writes the `closed` record of each one GitHub shows closed, received now, so that it
lands in today's partition and wins over the older `opened` (`shapes.pull_request_deliveries`).
One GitHub no longer has (404, 410: deleted as spam, say) is counted and passed over: it must not
keep the pull requests asked about after it open too. A first 404 may be a passing error, which
taken for a deletion would keep the pull request open for good: it is asked again the next hour, and
deleted (`gone.py`, not asked again) only when GitHub answers 404 again.
Its delivery id is the one `torchci backfill --prs` gives the same record: a repair written twice,
or a backfill of the same pull request, adds no row.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field

from resources.github import GitHubError
from resources.lake import Lake, connect
from resources.sql import SqlFiles, execute
from torchci_assets.backfill import shapes
from torchci_assets.backfill.files import Part
from torchci_assets.backfill.rest import RestReader

MAX_LOOKUPS = 200  # pull requests asked about one by one in a pass; the rest wait for the next
_SQL = SqlFiles(__file__)


@dataclass
class CloseReport:
    open_in_lake: int = 0
    open_on_github: int = 0
    listed: bool = False  # GitHub answered the list of open pull requests
    looked_up: int = 0
    found_closed: int = 0
    gone: list[int] = field(default_factory=list)  # shown open here, unknown to GitHub (404, 410) twice: deleted
    suspected: list[int] = field(default_factory=list)  # shown open here, unknown to GitHub for the first time
    known_gone: list[int] = field(default_factory=list)  # shown open here, GitHub answered 404 before: not asked
    unheard: set[int] = field(default_factory=set)  # shown open here, neither listed nor answered for this pass
    suspected_waiting: list[int] = field(default_factory=list)  # of `unheard`: a 404 on an earlier pass, noted still


def open_in_lake(lake: Lake) -> list[int]:
    """The pull requests the newest `pr_jobs` partition shows open (none before one is built)."""
    days = lake.days("pr_jobs")
    if not days:
        return []
    con = connect()
    try:
        lake.register(con, "pr_jobs", [max(days)])
        return [n for (n,) in execute(con, _SQL["open_pull_requests"]).fetchall()]
    finally:
        con.close()


def repair_closes(reader: RestReader, part: Part, lake: Lake, repo: str, repository: Callable[[], dict],
                  now: dt.datetime, report: CloseReport, gone: set[int] = frozenset(),
                  suspected: set[int] = frozenset()) -> None:
    """Add to `part` the `closed` record of each pull request of `repo` the lake shows open and
    GitHub closed; one whose lookup says open again (reopened meanwhile) gets nothing, and one in
    `gone` (GitHub answered earlier passes 404 for it twice, `gone.py`) is not asked about; one in
    `suspected` (GitHub answered 404 once) is, before the others, and a 404 again makes it gone;
    one past the pass's `MAX_LOOKUPS` stays in `report.unheard`, its first 404 still noted. The
    repository (`repository()`, a request) is asked for only when a record is written: a lake that
    shows no pull request open costs no request at all."""
    shown_open = open_in_lake(lake)
    report.open_in_lake = len(shown_open)
    report.known_gone = [n for n in shown_open if n in gone]
    report.unheard = set(shown_open)  # a list GitHub refuses leaves every earlier first 404 noted
    if not shown_open:
        return
    listed = {pr["number"] for pr in reader.pages(f"/repos/{repo}/pulls", None, {"state": "open"})}
    report.open_on_github, report.listed = len(listed), True
    report.unheard -= listed
    for number in _to_ask(shown_open, listed, gone, suspected):
        pr = _pull_request(reader, repo, number, report, number in suspected)
        report.unheard.discard(number)
        if pr is None or pr.get("state") != "closed":
            continue
        closed = shapes.pull_request_deliveries(pr, repository(), not_before=now, actions=("closed",))
        part.add(closed)
        report.found_closed += bool(closed)


def _to_ask(shown_open: list[int], listed: set[int], gone: set[int], suspected: set[int]) -> list[int]:
    """The pull requests this pass asks about: those GitHub answered 404 for once first, whose
    second answer decides them (behind the others in number order, one could stay open here for
    hours), then the others by number. Passes do not note when they asked about each one; one found
    closed leaves the list once the refresh takes its close, so the others move up."""
    missing = [n for n in shown_open if n not in listed and n not in gone]
    return sorted(missing, key=lambda n: n not in suspected)[:MAX_LOOKUPS]


def _pull_request(reader: RestReader, repo: str, number: int, report: CloseReport, suspected: bool) -> dict | None:
    """The pull request as GitHub shows it now; None when GitHub does not have it: deleted when it
    says so (410) or answered 404 before (`suspected`)."""
    try:
        pr = reader.json(f"/repos/{repo}/pulls/{number}")
    except GitHubError as exc:
        if exc.status not in (404, 410):
            raise
        (report.gone if suspected or exc.status == 410 else report.suspected).append(number)
        return None
    report.looked_up += 1
    return pr
