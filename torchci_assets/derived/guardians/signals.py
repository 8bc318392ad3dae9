"""Signals on main: what the autorevert watches, read from `commit_health`.

A signal is a job group of one workflow (`trunk / linux-jammy-py3.10 / test (default, ...)`) or
one test inside such a group. Its events are its outcome on each main commit, oldest first:
  fail     the group failed on every attempt (the test among its failing tests), for a reason
           that is the commit's own: infrastructure and known-flaky failures are not counted;
  pass     it succeeded, or failed and then passed on a rerun (flaky is not broken);
  pending  it is still running;
  unknown  it ran but says nothing about the code: infrastructure, a known flaky test, a
           cancellation (every failing job cancelled, as upstream's autorevert treats a
           cancelled attempt as missing: cancelling trunk runs during an incident must not pin a
           culprit), or (for a test signal) a group that failed before reaching the test;
and no event where it did not run (the workflow skipped the commit, or the job was skipped).

Only failures the commit itself may have caused are evidence, as in PyTorch's autorevert:
anything else would make a revert of an innocent commit possible.

`commit_health` keeps each commit's latest word per group. When the lake's job tables are at hand
(`attempt_rows`, read with the HUD's own classification of each attempt) every event also carries
its tries: the outcome of each attempt with its start time. They let the culprit finder ask what
upstream asks of its events: whether a failure lies between two successes in time (the
infrastructure check), and whether a test failed and passed on one commit (a flaky test, which
the latest attempt alone cannot show when a rerun of its group failed for another reason).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

# failure classes of commit_health that say nothing about the commit's code
NOT_EVIDENCE = ("infra", "known_flaky")
TEST_SEPARATOR = " :: "


@dataclass(frozen=True)
class Try:
    """One attempt of a signal on a commit (a run's attempt of its group): what it said, and when it
    started (the earliest over its jobs of each job's start, or creation if later)."""

    outcome: str  # fail, pass, pending, unknown, skipped
    started_at: dt.datetime
    run_id: int | None = None
    run_attempt: int | None = None


@dataclass(frozen=True)
class Event:
    outcome: str  # fail, pass, pending, unknown, skipped
    run_id: int | None = None
    run_attempt: int | None = None
    job_id: int | None = None
    attempts: int = 1
    mixed: bool = False  # it failed and passed on this commit (a rerun recovered it)
    tries: tuple[Try, ...] = ()  # every attempt, oldest first, when the job tables were read

    def count(self, outcome: str) -> int:
        """Attempts that said `outcome` (the event's own, when there are no tries, counts them all)."""
        if self.tries:
            return sum(t.outcome == outcome for t in self.tries)
        return self.attempts if self.outcome == outcome else 0


@dataclass(frozen=True)
class Signal:
    key: str
    workflow: str
    job_group: str
    test: str | None
    events: dict  # sha -> Event


@dataclass(frozen=True)
class MainHistory:
    """Main's commits oldest first, the signals seen on them, per (workflow, sha) the latest
    run there is to restart, per run its latest attempt seen (a job group rerun later than
    another in the same run shows the run's newer attempt), and the runs with a job group still
    running (a job not created yet may still run there)."""

    commits: tuple[str, ...]
    signals: tuple[Signal, ...]
    runs: dict  # (workflow, sha) -> (run_id, run_attempt)
    attempts: dict = field(default_factory=dict)  # run_id -> run_attempt
    timed: bool = False  # the events carry their tries (the job tables were read)
    running: frozenset = frozenset()  # run ids with a group pending


def _outcome(state: str, failure_class: str | None, cancelled: bool = False) -> str:
    if state == "failure":
        return "unknown" if cancelled or failure_class in NOT_EVIDENCE else "fail"
    return {"success": "pass", "flaky": "pass", "pending": "pending", "skipped": "skipped"}.get(state, "unknown")


def _group_event(row: dict) -> Event:
    """A group that recovered from cancellations alone is no flaky group: nothing failed there."""
    state, cancelled = row["state"], bool(row.get("cancelled"))
    return Event(_outcome(state, row.get("failure_class"), cancelled), row.get("run_id"), row.get("run_attempt"),
                 row.get("job_id"), int(row.get("attempts") or 1), state == "flaky" and not cancelled)


def _test_outcome(group: str, listed: list[str], failing_count: int | None, test: str) -> str:
    """A test's outcome where its group said `group`: a group that failed without listing the test
    passed it only when the listed tests are all of its failures and there are some (else the
    group stopped before the test: a build or an unlisted failure)."""
    if group != "fail" or test in listed:
        return group
    return "pass" if 0 < len(listed) == int(failing_count or 0) else "unknown"


def _test_event(row: dict, test: str, group: Event) -> Event:
    if group.outcome != "fail":
        # a group that recovered on a rerun does not say which test failed first: only the
        # tries can tell (build_history), not mixed here
        return replace(group, mixed=False)
    if row["state"] == "pending":
        # a red group being re-run (its tries settled it red): the running attempt lists no
        # failing test yet, so the test's own tries must settle it, not that empty list
        return replace(group, outcome="pending", mixed=False)
    outcome = _test_outcome("fail", row.get("failing_tests") or [], row.get("failing_test_count"), test)
    return group if outcome == "fail" else Event(outcome, group.run_id, group.run_attempt, group.job_id,
                                                  group.attempts)


def _attempt_outcome(a: dict) -> str:
    """An attempt row's word for its group: a failure as classified (infra, known flaky and a
    cancellation say nothing), else pending while a job runs."""
    if a["has_failure"]:
        return _outcome("failure", a.get("failure_class"), bool(a.get("cancelled")))
    return "pending" if a["has_pending"] else "skipped" if a["all_skipped"] else "pass"


def _attempt_test_outcome(a: dict, test: str) -> str:
    listed = a.get("failing_tests") or []
    outcome = _test_outcome(_attempt_outcome(a), listed, a.get("failing_test_count"), test)
    # the group's jobs still running may yet fail the test
    return "pending" if a["has_pending"] and outcome != "fail" and test not in listed else outcome


def _with_tries(event: Event, attempts: list[dict], outcome) -> Event:
    """`event` with one try per attempt row (oldest first); a test that failed and passed there
    is mixed, as upstream's flaky rule reads its events. A commit with a rerun in flight keeps
    the word its finished attempts gave, as upstream partitions commits: a green being re-run is
    still the last green (else the walk would pass over it to an older green, re-run that one
    in turn, and so on down the line), a red being re-run still the first red. A red none of whose
    attempts is evidence (an infrastructure failure, then a cancelled re-run: the group's latest word
    is the cancelled attempt's class) says nothing either."""
    tries = tuple(Try(outcome(a), a["started_at"], a.get("run_id"), a.get("run_attempt")) for a in attempts)
    seen = {t.outcome for t in tries}
    settled = event.outcome
    if settled == "pending" and len(seen & {"fail", "pass"}) == 1:
        settled = next(iter(seen & {"fail", "pass"}))
    elif settled == "fail" and tries and not seen & {"fail", "pass", "pending"}:
        settled = "unknown"
    return replace(event, outcome=settled, tries=tries, mixed=event.mixed or {"fail", "pass"} <= seen)


def build_history(rows: Iterable[dict], workflows: tuple[str, ...] = (),
                  known_flaky: frozenset[str] = frozenset(), attempt_rows: Iterable[dict] | None = None) -> MainHistory:
    """Signals from commit_health rows (one per sha and job group, each commit's latest word).

    `workflows` limits the job groups watched (empty: all of them). Tests in `known_flaky` (the
    flaky verdicts) get no signal of their own: in a group red for another reason their flakes
    would otherwise look like a new failure that the next commit fixed. `attempt_rows` (one per
    attempt of a group on a commit, `inputs.main_attempt_rows`), when given, add the tries."""
    rows = list(rows)
    tried: dict[tuple[str, str], list[dict]] = {}
    for a in sorted(attempt_rows or [], key=lambda a: (a["started_at"], a["run_id"] or 0, a["run_attempt"] or 0)):
        tried.setdefault((a["sha"], a["job_group"]), []).append(a)
    # every commit that ran anything is on main's line, whether or not it ran a watched workflow
    order = sorted({(r["pushed_at"], r["sha"]) for r in rows})
    commits = tuple(dict.fromkeys(sha for _, sha in order))
    # a commit pushed moments ago has a row with no job group yet: on the line, but no signal
    rows = [r for r in rows if r.get("job_group") is not None and (not workflows or r["workflow"] in workflows)]
    groups: dict[str, dict[str, Event]] = {}
    meta: dict[str, str] = {}
    failing_tests: dict[str, set[str]] = {}
    runs: dict[tuple[str, str], tuple[int, int]] = {}
    attempts: dict[int, int] = {}
    running: set[int] = set()
    group_rows: dict[str, dict[str, dict]] = {}
    for r in rows:
        ev = _group_event(r)
        if (r["sha"], r["job_group"]) in tried:
            ev = _with_tries(ev, tried[r["sha"], r["job_group"]], _attempt_outcome)
        groups.setdefault(r["job_group"], {})[r["sha"]] = ev
        group_rows.setdefault(r["job_group"], {})[r["sha"]] = r
        meta[r["job_group"]] = r["workflow"]
        if ev.outcome == "fail":
            failing_tests.setdefault(r["job_group"], set()).update(
                t for t in r.get("failing_tests") or [] if t not in known_flaky)
        if r.get("run_id") is not None:
            key = (r["workflow"], r["sha"])
            runs[key] = max(runs.get(key, (0, 0)), (r["run_id"], r.get("run_attempt") or 1))
            attempts[r["run_id"]] = max(attempts.get(r["run_id"], 0), r.get("run_attempt") or 1)
            if r["state"] == "pending":
                running.add(r["run_id"])
    signals = [Signal(g, meta[g], g, None, ev) for g, ev in sorted(groups.items())]
    for g, tests in sorted(failing_tests.items()):
        for test in sorted(tests):
            events = {sha: _test_event(r, test, groups[g][sha]) for sha, r in group_rows[g].items()}
            events = {sha: _with_tries(ev, tried[sha, g], lambda a, t=test: _attempt_test_outcome(a, t))
                      if (sha, g) in tried else ev for sha, ev in events.items()}
            signals.append(Signal(g + TEST_SEPARATOR + test, meta[g], g, test, events))
    return MainHistory(commits, tuple(signals), runs, attempts, attempt_rows is not None, frozenset(running))
