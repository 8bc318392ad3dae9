"""Signals on main: what the autorevert watches, read from `commit_health`.

A signal is a job group of one workflow (`trunk / linux-jammy-py3.10 / test (default, ...)`) or
one test inside such a group. Its events are its outcome on each main commit, oldest first:
  fail     the group failed on every attempt (the test among its failing tests), for a reason
           that is the commit's own: infrastructure and known-flaky failures are not counted;
  pass     it succeeded, or failed and then passed on a rerun (flaky is not broken);
  pending  it is still running;
  unknown  it ran but says nothing about the code: infrastructure, a known flaky test, or (for a
           test signal) a group that failed before reaching the test;
and no event where it did not run (the workflow skipped the commit, or the job was skipped).

Only failures the commit itself may have caused are evidence, as in PyTorch's autorevert:
anything else would make a revert of an innocent commit possible.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

# failure classes of commit_health that say nothing about the commit's code
NOT_EVIDENCE = ("infra", "known_flaky")
TEST_SEPARATOR = " :: "


@dataclass(frozen=True)
class Event:
    outcome: str  # fail, pass, pending, unknown, skipped
    run_id: int | None = None
    run_attempt: int | None = None
    job_id: int | None = None
    attempts: int = 1
    mixed: bool = False  # it failed and passed on this commit (a rerun recovered it)


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
    run there is to restart, and per run its latest attempt seen (a job group rerun later than
    another in the same run shows the run's newer attempt)."""

    commits: tuple[str, ...]
    signals: tuple[Signal, ...]
    runs: dict  # (workflow, sha) -> (run_id, run_attempt)
    attempts: dict = field(default_factory=dict)  # run_id -> run_attempt


def _group_event(row: dict) -> Event:
    state = row["state"]
    outcome = {"success": "pass", "flaky": "pass", "pending": "pending", "skipped": "skipped"}.get(state)
    if state == "failure":
        outcome = "unknown" if row.get("failure_class") in NOT_EVIDENCE else "fail"
    return Event(outcome or "unknown", row.get("run_id"), row.get("run_attempt"), row.get("job_id"),
                 int(row.get("attempts") or 1), state == "flaky")


def _test_event(row: dict, test: str, group: Event) -> Event:
    """A test's outcome where its group ran: a group that failed without listing the test passed
    it only when the listed tests are all of its failures and there are some (else the group
    stopped before the test: a build or an unlisted failure)."""
    if group.outcome != "fail":
        # a group that recovered on a rerun does not say which test failed first: not mixed here
        return replace(group, mixed=False)
    listed = row.get("failing_tests") or []
    if test in listed:
        return group
    complete = 0 < len(listed) == int(row.get("failing_test_count") or 0)
    return Event("pass" if complete else "unknown", group.run_id, group.run_attempt, group.job_id, group.attempts)


def build_history(rows: Iterable[dict], workflows: tuple[str, ...] = (),
                  known_flaky: frozenset[str] = frozenset()) -> MainHistory:
    """Signals from commit_health rows (one per sha and job group, each commit's latest word).

    `workflows` limits the job groups watched (empty: all of them). Tests in `known_flaky` (the
    flaky verdicts) get no signal of their own: in a group red for another reason their flakes
    would otherwise look like a new failure that the next commit fixed."""
    rows = list(rows)
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
    group_rows: dict[str, dict[str, dict]] = {}
    for r in rows:
        ev = _group_event(r)
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
    signals = [Signal(g, meta[g], g, None, ev) for g, ev in sorted(groups.items())]
    for g, tests in sorted(failing_tests.items()):
        for test in sorted(tests):
            events = {sha: _test_event(r, test, groups[g][sha]) for sha, r in group_rows[g].items()}
            signals.append(Signal(g + TEST_SEPARATOR + test, meta[g], g, test, events))
    return MainHistory(commits, tuple(signals), runs, attempts)
