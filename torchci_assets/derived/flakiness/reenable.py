"""Disabled tests come back on evidence: PyTorch's rerun_disabled_tests jobs show them fixed.

A disabled test is skipped in ordinary CI, so nothing ordinary says when it is fixed. PyTorch's
scheduled `rerun_disabled_tests` jobs run exactly the disabled tests, each many times in one go
(a test that failed some of those reruns is reported skipped with `{"num_red": .., "num_green":
..}`), and `tools/stats/check_disabled_tests.py` counts them; its flaky bot then closes issues
of tests with no red and 150 greens over the last 7 days. Users' complaint is the other side:
tests re-enabled that fail again at once. So the rule here is stricter, per platform the issue
disables:

- clean: no red in any rerun since the issue was filed, and greens from at least MIN_JOBS rerun
  jobs on at least MIN_DAYS different days within the last WINDOW_DAYS (PyTorch's two weeks),
  counted from the issue's latest (re)opening or widening (`greens_since`: the test failed in CI
  after the greens before those, which is why the issue was reopened or widened). A rerun green
  stands for up to 50 passing runs. With PyTorch's daily reruns that is a clean week (PyTorch's
  own window), not just three clean jobs: a test still failing 0.5% of its runs passes
  50 reruns 78% of the time, so three clean jobs in a row (the first defaults, which the eval
  caught re-enabling a test filed days before) 47% of the time, seven 18%; one failing 2%, 5% and
  0.1%. A test with an older issue is clean only when the whole window is, so a fix made on day F
  is re-enabled on day F + WINDOW_DAYS - 1 whatever these two say;
- a platform of the issue is read as PyTorch's runner reads it (`issue_text.runs_on`): `mac` and
  `macos` are one, `linux` also holds on ROCm and XPU jobs, `dynamo` in the jobs whose names say
  dynamo or inductor and `inductor` in those saying inductor (a rerun job counts for its platform and
  for those: sql/test_configs.sql), slow and asan on any platform. The rerun jobs run a disabled
  test only where its issue disables it, so each platform of the issue is clean when every platform
  it holds on that reran the test is clean (at least one did): a test disabled under dynamo is
  never re-enabled on plain Linux jobs' runs;
- every disabled platform clean: the issue is closed with the evidence (a comment, once);
- some clean: those are dropped from the issue's `Platforms:` line, the others stay;
- an issue for every platform (an empty line) closes only when every platform that reran the
  test is clean (it cannot be narrowed without listing the others);
- still red somewhere: the evidence is appended as a comment, at most once a day.

Greens from jobs suspected of infrastructure trouble do not count; reds always do.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field

from resources.github import GitHubError, GitHubResource, unavailable
from resources.lake import Lake, connect
from resources.lake_extracts import Extract, register_extract
from resources.sql import SqlFiles, execute, run_steps
from torchci_assets.derived.flakiness.aggregates import ON_AGGREGATE, entry_name, in_aggregate, unsure_of_aggregate
from torchci_assets.derived.flakiness.comments import comment_once
from torchci_assets.derived.flakiness.issue_text import (
    parse_platforms,
    pytorch_platforms,
    runs_on,
    titled_as,
    with_platforms,
)
from torchci_assets.derived.flakiness.issues import EDITS, NARROWED, Marks, ledger_marks, ledger_row, record, stop_pass
from torchci_assets.derived.flakiness.lists import define_pytorch_key

WINDOW_DAYS = 14
MIN_JOBS = 7
MIN_DAYS = 7
REENABLED_MARKER = "<!-- torchci-dagster: re-enabled on rerun evidence -->"
SQL = SqlFiles(__file__)
# The rerun jobs' rows of test_results, extracted once per file beside the ledger's partitions: each
# refresh reads a window of 14 days of ~3.5 M rows for a few hundred (resources.lake_extracts).
RERUN_RESULTS = Extract("rerun_results", "test_results", "disabled_issues", SQL)


@dataclass
class PlatformRuns:
    green: int = 0
    red: int = 0
    jobs: int = 0
    days: int = 0

    @property
    def clean(self) -> bool:
        return self.red == 0 and self.jobs >= MIN_JOBS and self.days >= MIN_DAYS

    def add(self, green: int, red: int, jobs: int, days: int) -> None:
        self.green, self.red = self.green + green, self.red + red
        self.jobs, self.days = self.jobs + jobs, max(self.days, days)


@dataclass(frozen=True)
class Decision:
    """`close`, `narrow` (to `keep`), `evidence` (a comment) or `wait`."""

    test: str
    action: str
    keep: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)


def rerun_evidence(lake: Lake, day: str, since: dict[str, dt.datetime],
                   green_since: dict[str, dt.datetime] | None = None) -> dict[str, dict[str, PlatformRuns]]:
    """Per test and PyTorch platform, the rerun jobs' counts over the WINDOW_DAYS days ending on
    `day` (the days of test_results that exist): reds from the test's `since` on (its filing), its
    greens and the jobs and days that gave them from its `green_since` on when that is later (its
    latest reopening)."""
    end = dt.date.fromisoformat(day)
    days = [d for d in lake.days("test_results") if (end - dt.timedelta(days=WINDOW_DAYS - 1)).isoformat() <= d <= day]
    if not since or not days:
        return {}
    later = {t: s for t, s in (green_since or {}).items() if t in since and s > since[t]}
    con = connect()
    try:
        if register_extract(con, lake, RERUN_RESULTS, days, "r_results") == 0:
            return {}
        run_steps(con, SQL.steps("test_configs"))
        define_pytorch_key(con)
        out = _by_platform(_evidence_rows(con, since))
        greens = _by_platform(_evidence_rows(con, later)) if later else {}
    finally:
        con.close()
    for test in later:
        reds, clean = out.pop(test, {}), greens.get(test, {})
        merged = {p: PlatformRuns(g.green, reds[p].red if p in reds else 0, g.jobs, g.days) for p, g in clean.items()}
        merged.update({p: PlatformRuns(red=r.red) for p, r in reds.items() if p not in clean and r.red})
        if merged:
            out[test] = merged
    return out


def _evidence_rows(con, since: dict[str, dt.datetime]) -> list[tuple]:
    tests = sorted(since)
    return execute(con, SQL["rerun_evidence"], {"tests": tests, "since": [since[t] for t in tests]}).fetchall()


def _by_platform(rows: list[tuple]) -> dict[str, dict[str, PlatformRuns]]:
    out: dict[str, dict[str, PlatformRuns]] = {}
    for test, platform, green, red, jobs, n_days, _first, _last in rows:
        for name in pytorch_platforms([platform]) or [platform]:
            out.setdefault(test, {}).setdefault(name, PlatformRuns()).add(green or 0, red or 0, jobs, n_days)
    return out


def covered(platform: str, runs: dict[str, PlatformRuns]) -> dict[str, PlatformRuns]:
    """The rerun counts of the platforms where the issue platform `platform` disables the test."""
    where = runs_on(platform)
    return {p: r for p, r in runs.items() if where is None or p in where}


def decide(test: str, disabled_on: list[str], runs: dict[str, PlatformRuns]) -> Decision:
    """What the evidence says of one open issue disabling `test` on `disabled_on` ([]: everywhere),
    its platforms in PyTorch's names, each judged on every platform where it disables the test."""
    red = sorted(p for p, r in runs.items() if r.red)
    if not disabled_on:
        everywhere_clean = bool(runs) and all(r.clean for r in runs.values())
        return Decision(test, "close" if everywhere_clean else "evidence" if red else "wait")
    names = list(dict.fromkeys(disabled_on))
    clean = [p for p in names if covered(p, runs) and all(r.clean for r in covered(p, runs).values())]
    if clean and len(clean) == len(names):
        return Decision(test, "close", dropped=clean)
    if clean:
        return Decision(test, "narrow", keep=[p for p in names if p not in clean], dropped=clean)
    red_where_disabled = any(r.red for p in names for r in covered(p, runs).values())
    return Decision(test, "evidence" if red_where_disabled else "wait")


def evidence_table(runs: dict[str, PlatformRuns]) -> str:
    rows = [f"| {p} | {r.jobs} | {r.days} | {r.green} | {r.red} |" for p, r in sorted(runs.items())]
    return "\n".join(["| platform | rerun jobs | days | green | red |", "|---|---:|---:|---:|---:|", *rows])


def dry_run_plan(d: Decision, runs: dict[str, PlatformRuns], name: str) -> str:
    """What `act` would do for `d`, in words: each write it would make, on the issue of the test
    its list writes as `name` (`entry_name`: a dotted suite too)."""
    issue = f"the DISABLED issue of {name}"
    if d.action == "close":
        return f"would comment its rerun evidence on {issue} and close it (clean on {', '.join(d.dropped) or 'every platform that reran it'})"
    if d.action == "narrow":
        return (f"would comment its rerun evidence on {issue} and narrow its Platforms line to {', '.join(d.keep)} "
                f"(clean on {', '.join(d.dropped)})")
    red = sorted(p for p, r in runs.items() if r.red)
    return f"would comment its rerun evidence on {issue} (still failing reruns on {', '.join(red)}), once a day"


@dataclass
class Reenabling:
    decisions: list[Decision] = field(default_factory=list)
    rows: list[dict] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    # tests of aggregates to drop (`close`) or narrow, with their evidence: done with the run's
    # other changes to the same aggregate (aggregate_lifecycle.py)
    listed: list[tuple[Decision, dict[str, PlatformRuns]]] = field(default_factory=list)
    unavailable: str = ""  # GitHub was down: the re-enabling stopped there, and how many wait (`issues.stop_pass`)


def act(github: GitHubResource, repo: str, issue: dict, d: Decision, runs: dict[str, PlatformRuns],
        day: str, narrowed_at: dt.datetime | None = None) -> str | None:
    """Carry out one decision on GitHub; the ledger's detail, or None when nothing was to be done.
    The comment names the test as the issue's title does (a dotted suite too), not as its runs do.
    A narrowing's marker names the ledger's last narrowing of the issue (`narrowed_at`): platforms
    a human put back since, which no comment or event of GitHub shows, are re-enabled with a
    comment again, and a run stopped between that comment and the edit still says it once."""
    n, table, test = issue["number"], evidence_table(runs), titled_as(issue.get("title"), d.test)
    window = f"over the last {WINDOW_DAYS} days"
    if d.action == "close":
        comment_once(github, repo, n, REENABLED_MARKER, f"Re-enabling `{test}`: every rerun of it in PyTorch's "
                     f"rerun_disabled_tests jobs {window} passed, on every platform it was disabled for "
                     f"(at least {MIN_JOBS} jobs on {MIN_DAYS} days each).\n\n{table}", undone_by="reopened")
        github.request("PATCH", f"/repos/{repo}/issues/{n}", json_body={"state": "closed", "state_reason": "completed"})
        return "closed: clean reruns on every disabled platform"
    if d.action == "narrow":
        marker = f"{NARROWED}{','.join(d.dropped)}{f' after {narrowed_at.isoformat()}' if narrowed_at else ''} -->"
        comment_once(github, repo, n, marker, f"Re-enabling `{test}` on {', '.join(d.dropped)}: every rerun "
                     f"there {window} passed. It stays disabled on {', '.join(d.keep)}.\n\n{table}",
                     newest_of=EDITS)
        github.request("PATCH", f"/repos/{repo}/issues/{n}", json_body={"body": after(issue, d)["body"]})
        return f"narrowed to {', '.join(d.keep)}: clean on {', '.join(d.dropped)}"
    if d.action == "evidence":
        marker = f"<!-- torchci-dagster: rerun evidence {day} -->"
        if comment_once(github, repo, n, marker, f"Still flaky in PyTorch's rerun_disabled_tests jobs {window}:"
                        f"\n\n{table}"):
            return "evidence appended: still failing reruns"
    return None


def after(issue: dict, d: Decision) -> dict:
    """`issue` as `act` left it for `d`: the ledger records the line it left, which a later
    filing compares with the issue to tell a human's narrowing from this project's."""
    return {**issue, "body": with_platforms(issue.get("body"), d.keep)} if d.action == "narrow" else issue


def reenable_disabled_tests(github: GitHubResource, lake: Lake, day: str, run_id: str, repo: str,
                            issues: dict[str, dict], live: bool, may_act: Callable[[dict], bool],
                            log: Callable[[str], None] = lambda s: None,
                            warn: Callable[[str], None] = lambda s: None) -> Reenabling:
    """Decide for every open single-test issue (`issues`, by test) and act (live: only on those
    `may_act` allows, see lifecycle.py) or log what would be done (dry run); rows go to the
    `disabled_issues` ledger (a dry run's through run_lifecycle, which says its plan once). A test
    of an aggregate (`aggregates.stand_in`) is decided alike and only listed in `listed` when clean
    somewhere; a still-failing one gets no comment (an aggregate of fifty tests would get fifty a
    day)."""
    since = {t: _created(i) for t, i in issues.items()}
    marks = ledger_marks(lake, day) if any(i.get("number") is not None for i in issues.values()) else None
    evidence = rerun_evidence(lake, day, since, greens_since(issues, marks))
    out = Reenabling()
    decided = [(test, runs, decide(test, pytorch_platforms(parse_platforms(issues[test].get("body"))), runs))
               for test, runs in sorted(evidence.items())]
    acting = [(t, runs, d) for t, runs, d in decided if d.action != "wait" and (not live or may_act(issues[t]))]
    for i, (test, runs, d) in enumerate(acting):
        if in_aggregate(issues[test]) is not None:
            out.listed.extend([(d, runs)] if d.action in ("close", "narrow") else [])
            continue
        out.decisions.append(d)
        if not live:
            plan = dry_run_plan(d, runs, entry_name(issues[test], test)) + unsure_of_aggregate(
                issues[test], ON_AGGREGATE[d.action])
            log(f"DRY RUN: {plan}")
            out.rows.append(ledger_row(test, "dry_run", None, repo, run_id, plan))
            continue
        try:
            narrowed_at = marks.of("narrowed", issues[test], test) if marks else None
            detail = act(github, repo, issues[test], d, runs, day, narrowed_at)
        except GitHubError as e:
            if unavailable(e):
                waiting = [t for t, _, _ in acting[i:] if in_aggregate(issues[t]) is None]
                out.unavailable = stop_pass(e, waiting, out.failed, warn, "issue(s)")
                break
            out.failed[test] = str(e)
            warn(f"{d.action} for {test}: {e} (left for the next run)")
            continue
        if detail:
            log(f"#{issues[test]['number']} ({test}): {detail}")
            action = {"close": "reenabled", "narrow": "narrowed"}.get(d.action, d.action)
            out.rows.append(ledger_row(test, action, after(issues[test], d), repo, run_id, detail))
    if out.rows and live:  # a dry run's plan is recorded by run_lifecycle, once
        record(lake, day, out.rows, f"reenable-{run_id[:8]}")
    return out


def _time(text: str | None) -> dt.datetime | None:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def _created(issue: dict) -> dt.datetime:
    return _time(issue.get("created_at")) or dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def greens_since(issues: dict[str, dict], marks: Marks | None) -> dict[str, dt.datetime]:
    """Per test, when its issue was last (re)opened (`opened_at`) or widened by this project
    (platforms added on a new flake; in an aggregate, to the test's own line): greens from before
    either are what the test failed after. No `marks` (the ledger's): a dry run's stand-ins."""
    if marks is None:
        return {t: _created(i) for t, i in issues.items()}
    out = {}
    for test, issue in issues.items():
        n = issue.get("number")
        opened = opened_at(issue, marks.issue["reopened"].get(n), marks.issue["closed"].get(n))
        out[test] = max(opened, marks.of("widened", issue, test) or opened)
    return out


def opened_at(issue: dict, bot_reopened: dt.datetime | None, closed_seen: dt.datetime | None) -> dt.datetime:
    """When the open `issue` was last (re)opened: the reruns before it passed, and the test failed
    again after them (why it is open again), so their greens say nothing of it now.

    GitHub's issue has no reopen time. An issue closed before (its state_reason "reopened", a
    closed_at, or a close the ledger saw: `closed_seen`) was reopened after its last known close:
    at this project's own reopen, recorded in the ledger (`bot_reopened`), when that is later than
    the close; else (a human, or another bot, reopened it) no later than its last change,
    `updated_at`, which is taken: any later change (a comment) delays re-enabling, never hastens it."""
    created = _created(issue)
    closes = [t for t in (_time(issue.get("closed_at")), closed_seen) if t is not None and t >= created]
    if issue.get("state_reason") != "reopened" and not closes:
        return created
    if bot_reopened is not None and bot_reopened >= max(closes, default=created):
        return max(bot_reopened, created)
    return max([created, *closes, *filter(None, [_time(issue.get("updated_at"))])])
