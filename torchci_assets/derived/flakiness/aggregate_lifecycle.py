"""Tests of an aggregate DISABLED issue re-enabled and retired one by one; the aggregate closed
when none is left.

An aggregate disables every test it lists, and they are fixed or deleted one at a time: left as
they are, a fixed test would stay disabled until every other test of the file is fixed too.
Retiring and re-enabling therefore judge each listed test as they judge a single test's issue
(retired.py, reenable.py: the test's line is its `Platforms:` line, its reruns count from when it
was listed), and act on the test's line. A test clean on every platform of its line is dropped from
the list, and an aggregate whose list is left empty is closed, as PyTorch's flaky bot does
(handleNoLongerFlakyTest); a test deleted from the code is dropped so too. Narrowing the line of a
test clean on some platforms to the others is this project's own, as it narrows a single issue: the
bot drops whole tests only. The bot also acts only on an aggregate, as on a single issue, not
updated for two weeks (NUM_HOURS_NOT_UPDATED_BEFORE_CLOSING); this project waits on no issue's last
update, a test's reruns counting from its listing or the aggregate's reopening instead: a wait on
the aggregate's last update would let any change to one line, this project's own edits included,
hold back every other line for two weeks. The tests are taken from the first open aggregate (by
URL) naming them, and left to their own issue when they have an open one. A line is its test's
when PyTorch's runner takes it so (`runner_test`: a dotted suite too), and is changed under the
name its author wrote.

All of one run's changes to an aggregate are one comment, saying which tests and why, then one
edit. The comment carries a marker naming the change (the list before and after), so a run after a
crash between the two, that day's or a later one's, only edits; the same change made again later,
after other changes said on the issue (a line widened back) or a human's reopening of the closed
aggregate, is said again; and an aggregate whose author may not disable tests is left alone,
as a single issue is (lifecycle.py). A dry run plans the same changes on the published list's
entries that name one aggregate (`plan_aggregates`), and writes nothing.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field

from resources.github import GitHubError, GitHubResource, unavailable
from resources.lake import Lake
from torchci_assets.derived.flakiness.aggregates import in_aggregate, listed, stand_in, with_list
from torchci_assets.derived.flakiness.comments import comment_once
from torchci_assets.derived.flakiness.issue_text import (is_aggregate_title, line_for_test, multiple_tests,
                                                        parse_platforms, runner_test)
from torchci_assets.derived.flakiness.issues import (AGGREGATE_CHANGE, EDITS, Marks, ledger_marks, ledger_row, record,
                                                     stop_pass)
from torchci_assets.derived.flakiness.reenable import WINDOW_DAYS, Decision, PlatformRuns
from torchci_assets.derived.flakiness.retired import RETIRE_AFTER_DAYS, Absent


@dataclass(frozen=True)
class LineChange:
    """What becomes of one test's line: dropped (`keep` None) or narrowed to `keep`, and why."""

    test: str
    keep: list[str] | None
    why: str


@dataclass
class AggregateSettling:
    rows: list[dict] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    closed: list[int] = field(default_factory=list)
    unavailable: str = ""  # GitHub was down: the settling stopped there, and how many aggregates wait


def aggregate_members(issues: list[dict], allowed: Callable[[dict], bool], singles: dict[str, dict],
                      marks: Marks) -> dict[str, dict]:
    """Per test listed by an open aggregate of `issues` and without an open issue of its own
    (`singles`), its `stand_in`: of several aggregates, the first by URL whose author may disable
    tests (`allowed`, asked only then), else the first. Tests are keyed as their runs are
    (`runner_test`: a line with a dotted suite is its test's), each stand-in naming its line as
    written. The test's evidence counts from when the ledger last recorded it listed (`marks`)."""
    by_test: dict[str, list[tuple[dict, str, list[str]]]] = {}
    for issue in sorted(issues, key=lambda i: i["html_url"]):
        if issue.get("state") == "open" and is_aggregate_title(issue.get("title")):
            for line, platforms in multiple_tests(issue.get("title"), issue.get("body")):
                if (test := runner_test(line)) not in singles:
                    by_test.setdefault(test, []).append((issue, line, platforms))
    out = {}
    for test, group in by_test.items():
        issue, line, platforms = next((g for g in group if allowed(g[0])), group[0]) if len(group) > 1 else group[0]
        at = marks.line["listed"].get((issue["number"], test))
        out[test] = stand_in(issue, line, platforms, at.strftime("%Y-%m-%dT%H:%M:%SZ") if at else None)
    return out


def changes_of(retired: list[Absent], decided: list[tuple[Decision, dict[str, PlatformRuns]]]) -> list[LineChange]:
    """The line changes the retiring (`retired`) and re-enabling (`decided`) asked for."""
    out = [LineChange(a.test, None, f"not in any test report for {RETIRE_AFTER_DAYS} days while `{a.file}` kept "
                                    "reporting: deleted or renamed") for a in retired]
    for d, _runs in decided:
        clean = f"every rerun in PyTorch's rerun_disabled_tests jobs over the last {WINDOW_DAYS} days passed"
        if d.action == "close":
            where = ", ".join(d.dropped) or "every platform that reran it"
            out.append(LineChange(d.test, None, f"{clean}, on {where}"))
        else:
            out.append(LineChange(d.test, d.keep, f"{clean} on {', '.join(d.dropped)}"))
    return out


def new_list(before: dict[str, list[str]], changes: list[LineChange]) -> tuple[dict[str, list[str]],
                                                                              dict[str, LineChange]]:
    """An aggregate's list (line as written -> platforms) after `changes` to its list `before`
    (each to its test's line, `line_for_test`), and the changes that alter it, by line."""
    by_line = {line: c for c in changes if (line := line_for_test(before, c.test)) is not None}
    after = {t: (by_line[t].keep if t in by_line else p) for t, p in before.items()
             if t not in by_line or by_line[t].keep is not None}
    return after, {line: c for line, c in by_line.items() if after.get(line) != before[line]}


def by_aggregate(stand_ins: dict[str, dict], changes: list[LineChange]) -> dict[int | str, list[LineChange]]:
    """`changes` by the number of the aggregate whose line each is (`stand_ins`: per test; a dry
    run's numbers are the list's, strings)."""
    out: dict[int | str, list[LineChange]] = {}
    for c in changes:
        out.setdefault(in_aggregate(stand_ins[c.test])["number"], []).append(c)
    return out


def comment_text(changes: dict[str, LineChange], after: dict[str, list[str]]) -> str:
    """The comment on `changes` (line as written -> its change)."""
    lines = ["Re-enabling tests of this issue, one by one:", ""]
    for line, c in sorted(changes.items()):
        if c.keep is None:
            lines.append(f"- `{line}` is dropped from the list: {c.why}.")
        else:
            lines.append(f"- `{line}` is re-enabled where {c.why}; it stays disabled on {', '.join(c.keep)}.")
    lines += ["", "No test is left in the list: closing this issue. Reopen it to disable them again."
              if not after else f"{len(after)} test(s) stay disabled by this issue."]
    return "\n".join(lines)


def settle(github: GitHubResource, repo: str, issue: dict, changes: list[LineChange], run_id: str,
           narrowed_at: dt.datetime | None = None) -> list[dict]:
    """Comment (once: its marker names the change, `comment_once`) and edit one aggregate: its list
    without the dropped lines and with the narrowed ones, or closed when none is left. The ledger
    rows (`dropped`, `narrowed`); [] when the list already is so. The marker names the ledger's last
    change of the list too (`narrowed_at`): a line a human put back, which GitHub lists no event
    of, is narrowed again with a comment again."""
    title, body, n = issue["title"], issue.get("body") or "", issue["number"]
    before = listed(title, body)
    after, by_line = new_list(before, changes)
    changes = list(by_line.values())
    if not changes:
        return []
    digest = hashlib.sha256(json.dumps([sorted(before.items()), sorted(after.items())]
                                       + ([narrowed_at.isoformat()] if narrowed_at else [])).encode()).hexdigest()[:16]
    comment_once(github, repo, n, f"{AGGREGATE_CHANGE}{digest} -->", comment_text(by_line, after),
                 newest_of=EDITS, undone_by=None if after else "reopened")
    fields = {"state": "closed", "state_reason": "completed"} if not after else {"body": with_list(body, after)}
    github.request("PATCH", f"/repos/{repo}/issues/{n}", json_body=fields)
    now = {**issue, **fields}
    end = "; the aggregate is closed: no test is left" if not after else ""
    return [ledger_row(c.test, "dropped" if c.keep is None else "narrowed", now, repo, run_id,
                       (f"dropped from aggregate #{n}: " if c.keep is None
                        else f"narrowed to {', '.join(c.keep)} in aggregate #{n}: ") + c.why + end) for c in changes]


def settle_aggregates(github: GitHubResource, lake: Lake, day: str, run_id: str, repo: str, members: dict[str, dict],
                      retired: list[Absent], decided: list[tuple[Decision, dict[str, PlatformRuns]]],
                      log: Callable[[str], None] = lambda s: None,
                      warn: Callable[[str], None] = lambda s: None) -> AggregateSettling:
    """Carry out, aggregate by aggregate, the line changes retiring and re-enabling asked for
    (`members`: the tests' stand-ins); the rows go to the ledger. A GitHub error on one aggregate
    leaves its tests for the next run; GitHub down stops the settling there (`issues.stop_pass`)."""
    out = AggregateSettling()
    by_number = by_aggregate(members, changes_of(retired, decided))
    marks = ledger_marks(lake, day) if by_number else None
    ordered = sorted(by_number.items())
    for i, (n, changes) in enumerate(ordered):
        issue = in_aggregate(members[changes[0].test])
        try:
            rows = settle(github, repo, issue, changes, run_id, marks.issue["narrowed"].get(n))
        except GitHubError as e:
            if unavailable(e):
                out.unavailable = stop_pass(e, [c.test for _, waiting in ordered[i:] for c in waiting], out.failed,
                                            warn, "aggregate(s)", len(ordered) - i)
                break
            out.failed.update({c.test: str(e) for c in changes})
            warn(f"aggregate #{n}: {e} (left for the next run)")
            continue
        out.rows.extend(rows)
        out.closed.extend([n] if rows and rows[0]["issue_state"] == "closed" else [])
        for r in rows:
            log(f"#{n} ({r['test']}): {r['detail']}")
    if out.rows:
        record(lake, day, out.rows, f"aggregates-{run_id[:8]}")
    return out


def planned_change(n: int | str, url: str, line: str, c: LineChange, after: dict[str, list[str]]) -> str:
    """What `settle` would do to `line` of the aggregate #`n`, in a dry run's words."""
    change = f"drop {line!r} from" if c.keep is None else f"narrow {line!r} to {', '.join(c.keep)} in"
    end = ("no test of it is left on the published list: would close it" if not after
           else f"{len(after)} test(s) of it stay on the published list")
    return (f"would {change} the list of aggregate #{n} ({url}), its issue on the published list: {c.why}; "
            f"said in one comment with the run's other changes to it; {end}")


def plan_aggregates(issues: dict[str, dict], retired: list[Absent],
                    decided: list[tuple[Decision, dict[str, PlatformRuns]]], repo: str, run_id: str,
                    log: Callable[[str], None]) -> AggregateSettling:
    """A dry run's `settle_aggregates`: the line changes retiring and re-enabling ask of the
    published list's aggregates (`issues`: the stand-ins, those of an aggregate's entries naming
    it), logged and returned as `dry_run` rows for run_lifecycle to record with its plan. The list
    shows an aggregate's tests, not the issue: the aggregate is planned closed when none of its
    entries is left."""
    out = AggregateSettling()
    for n, changes in sorted(by_aggregate(issues, changes_of(retired, decided)).items()):
        lines = [i for i in issues.values() if (a := in_aggregate(i)) is not None and a["number"] == n]
        after, by_line = new_list({i["listed_test"]: parse_platforms(i["body"]) for i in lines}, changes)
        for line, c in sorted(by_line.items()):
            detail = planned_change(n, in_aggregate(lines[0])["html_url"], line, c, after)
            log(f"DRY RUN: {detail}")
            out.rows.append(ledger_row(c.test, "dry_run", None, repo, run_id, detail, c.keep or []))
    return out
