"""From a signal's events on main to a verdict: nothing to do, restart to learn more, or a culprit.

The pattern is PyTorch's (test-infra `pytorch-auto-revert`, SIGNAL_EXTRACTION.md): walking main
from the newest commit back, the signal must be failing now, fail on every commit that ran it
down to its first red commit, and pass on the commit that ran it before (the last green). No
last green in the window means the failure was there before: not this window's doing, never a
revert. A signal that failed and passed on one commit anywhere in the window is flaky and blames
no one; below the first red it must have passed on MIN_SUCCESSES attempts, else the last green
is re-run first (as upstream's `signal.py` does).

When the attempts' start times are known (the history is `timed`), upstream's infrastructure
check applies as well (`infra_check`): a breakage from outside the code (a runner image, a
dependency, an outage) makes every attempt fail from some moment on, whatever the commit, so a
culprit is blamed only when one of its side's failures started between two successes below it.
While every success predates every failure the last green is re-run; while every failure
predates every success (the green's jobs ran late) the first red is re-run. That re-run fails
after every success, so it cannot fall between two: once nothing in flight can settle the check,
the last green is re-run (upstream waits, for ever). As upstream, while the commits from the
first red on failed fewer than MIN_FAILURES times, the first red is re-run too. All of these
apply inside a gap as well, beside its bisection; only the blame waits for the gap to close.

Between the last green and the first red there may be commits that did not run the signal
(periodic and trunk jobs skip commits) or gave no usable answer (infrastructure, a known flaky
test). Any of them could be the culprit, so their workflow is restarted there: not all at once
but by bisection, the middle of the largest unexplored stretch first (`plan_bisection`, as
`bisection_planner.py` does), so that a gap of n commits is pinned in about log2(n) rounds.
A commit the workflow's whole-run re-run finished on without running the signal's job (an `if:`
skips it there) cannot give the signal: the bisection passes over it, as over a commit without
a run, and it stays a suspect (`_no_signal`). Once the first red directly follows the last
green, the first red is the culprit. A flaky test
can fake that pattern (fail once, pass on the next commit), so it is confirmed only when the
culprit failed on `confirm_attempts` attempts (its failed jobs are restarted until then) and
`min_red_commits` commits from it on are red; a flaky test at rate p passes both with
probability about p**3 per commit.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from torchci_assets.derived.guardians.signals import Event, MainHistory, Signal
from torchci_assets.guardian_config import AutorevertConfig

DEFAULT = AutorevertConfig()
# Pass attempts needed below the first red (upstream's REQUIRE_SUCCESS_EVENTS): one green run
# alone may predate a breakage from outside (a runner image, a dependency), which a re-run of it
# after the failures would show.
MIN_SUCCESSES = 2
# Failed attempts needed from the first red up (upstream's REQUIRE_FAILED_EVENTS): while fewer,
# the first red's failed jobs are re-run, inside a gap too, so that a failure that happens once
# (a flaky test, a bad runner) has had to happen again before anyone is blamed.
MIN_FAILURES = 3


@dataclass(frozen=True)
class Verdict:
    """What one signal says. `kind`: ineligible, restart, confirmed, or suspect (a range that
    cannot be narrowed: its commits have no run to restart, or did not run the job when re-run)."""

    signal: Signal
    kind: str
    reason: str
    culprit: str | None = None
    suspects: tuple[str, ...] = ()
    restarts: tuple[str, ...] = ()  # commits whose run of signal.workflow is to be restarted
    failures: int = 0


def plan_bisection(covered: list[bool], limit: int) -> list[int]:
    """Positions to cover now: the middles of the largest uncovered stretches, until `limit`
    positions (those already covered included) are taken. Ties go to the older stretch, so
    every run plans the same."""
    allowed = max(0, limit - sum(covered))
    heap: list[tuple[int, int, int]] = []
    start = None
    for i, c in enumerate([*covered, True]):
        if not c and start is None:
            start = i
        elif c and start is not None:
            heapq.heappush(heap, (-(i - start), start, i - 1))
            start = None
    chosen = []
    while allowed > 0 and heap:
        _, lo, hi = heapq.heappop(heap)
        mid = (lo + hi) // 2
        chosen.append(mid)
        allowed -= 1
        for a, b in ((lo, mid - 1), (mid + 1, hi)):
            if a <= b:
                heapq.heappush(heap, (-(b - a + 1), a, b))
    return sorted(chosen)


def _walk(signal: Signal, commits: tuple[str, ...]) -> tuple[int | None, list[int], str]:
    """From the newest commit back: (index of the last green, indexes of the red commits newest
    first, reason when the signal is not failing now)."""
    reds: list[int] = []
    for i in range(len(commits) - 1, -1, -1):
        ev = signal.events.get(commits[i])
        if ev is None or ev.outcome in ("skipped", "unknown", "pending"):
            continue
        if ev.outcome == "pass":
            return (i, reds, "") if reds else (None, [], "passing on the newest commit that ran it")
        reds.append(i)
    return None, reds, ("failing since before the window (no green commit ran it)" if reds
                        else "no result on any commit")


def _green_side(signal: Signal, commits: tuple[str, ...], green: int) -> list[Event]:
    """The events from the last green back to the next failure (upstream's successful
    partition)."""
    out = []
    for i in range(green, -1, -1):
        ev = signal.events.get(commits[i])
        if ev is None or ev.outcome in ("skipped", "unknown"):
            continue
        if ev.outcome == "fail":
            break
        out.append(ev)
    return out


def _failures(signal: Signal, commits: tuple[str, ...], reds: list[int]) -> int:
    return sum(signal.events[commits[i]].count("fail") for i in reds)


# infra_check's answers, upstream's InfraCheckResult
CONFIRMED, PENDING, RESTART_GREEN, RESTART_RED = "confirmed", "pending", "restart_green", "restart_red"


def infra_check(red_side: list[Event], green_side: list[Event]) -> str:
    """Upstream's infrastructure check on the start times of the tries: `red_side` the events from
    the newest commit down to the first red, `green_side` those from the last green down.

    CONFIRMED when a failure started strictly between two successes (the green side passed
    after the red side had begun to fail: the failures are the code's); RESTART_GREEN when no
    success (or pending try) on the green side started after the first failure (or pending)
    on the red side; RESTART_RED when every failure started before every success; PENDING while
    the tries in flight may still settle it. "" when a side has an event without tries (the job
    tables do not cover it): nothing to judge by."""
    if not all(ev.tries for ev in red_side if ev.outcome in ("fail", "pass")) or \
            not all(ev.tries for ev in green_side if ev.outcome in ("fail", "pass")):
        return ""
    fail_like = [t.started_at for ev in red_side for t in ev.tries if t.outcome in ("fail", "pending")]
    green_like = [t.started_at for ev in green_side for t in ev.tries if t.outcome in ("pass", "pending")]
    if not green_like or (fail_like and max(green_like) <= min(fail_like)):
        return RESTART_GREEN
    if not fail_like or max(fail_like) <= min(green_like):
        return RESTART_RED
    passes = [t.started_at for ev in green_side for t in ev.tries if t.outcome == "pass"]
    fails = [t.started_at for ev in red_side for t in ev.tries if t.outcome == "fail"]
    if passes and any(min(passes) < f < max(passes) for f in fails):
        return CONFIRMED
    return PENDING


def _in_flight(ev: Event) -> bool:
    return any(t.outcome == "pending" for t in ev.tries)


def _may_settle(red_side: list[Event], green_side: list[Event]) -> bool:
    """Whether a try in flight may still settle a PENDING infrastructure check: a green one (its
    success may come after a failure) or a red one that started between two successes."""
    if any(_in_flight(ev) for ev in green_side):
        return True
    passes = [t.started_at for ev in green_side for t in ev.tries if t.outcome == "pass"]
    return bool(passes) and any(t.outcome == "pending" and min(passes) < t.started_at < max(passes)
                                for ev in red_side for t in ev.tries)


def _green_why(green: Event, successes: int, infra: str, red_side: list[Event], green_side: list[Event]) -> str:
    """Why the last green is to be re-run, the whole run ("" when it need not be, or is running).
    A PENDING check that nothing in flight can settle is one where the first red's re-run
    failed after every success (what a RESTART_RED re-run always does): only a success after
    that failure can bracket it, and upstream, which waits, would wait for ever."""
    if _in_flight(green):
        return ""
    if infra == RESTART_GREEN:
        return "no success below the first red started after its first failure"
    if infra == PENDING and not _may_settle(red_side, green_side):
        return "no failure started between two successes below it, and nothing in flight can settle the " \
               "infrastructure check"
    if successes < MIN_SUCCESSES:
        return f"passed on fewer than {MIN_SUCCESSES} attempts below the first red"
    return ""


def _red_why(attempts: int, failures: int, cfg: AutorevertConfig, infra: str) -> str:
    """Why the first red's failed jobs are to be re-run ("" when they need not be): upstream's
    infrastructure check wanting a failure after a success, the confirmation on the failing run
    itself, or fewer than MIN_FAILURES failures from the first red on."""
    if infra == RESTART_RED:
        return ("every failure started before every success below it: restart its failed jobs to see it fail "
                "after a success")
    if attempts < cfg.confirm_attempts:
        return f"failed on {attempts} attempt(s): restart its failed jobs to confirm"
    if failures < MIN_FAILURES:
        return f"{failures} failure(s) from it on, fewer than {MIN_FAILURES} failures: restart its failed jobs"
    return ""


def _pinned(signal: Signal, culprit: str, reds: list[int], failures: int, cfg: AutorevertConfig,
            recheck: tuple[str, ...], green_why: str, infra: str) -> Verdict:
    """The first red directly follows the last green: confirm it, or restart it (and the green,
    when it is to be `recheck`ed, for `green_why`) to."""
    ev = signal.events[culprit]
    attempts = ev.count("fail")
    if _in_flight(ev):
        return Verdict(signal, "suspect", f"failed on {attempts} attempt(s); waiting for its run in flight",
                       culprit, (culprit,), failures=failures)
    why = _red_why(attempts, failures, cfg, infra)
    if why:
        return Verdict(signal, "restart", why, culprit, (culprit,), (*recheck, culprit), failures)
    if recheck:
        return Verdict(signal, "restart", f"{green_why}: restart the last green to rule out a breakage from outside",
                       culprit, (culprit,), recheck, failures)
    if infra not in ("", CONFIRMED):
        return Verdict(signal, "suspect", f"infrastructure check {infra}: waiting for the runs in flight",
                       culprit, (culprit,), failures=failures)
    if len(reds) < cfg.min_red_commits:
        return Verdict(signal, "suspect", f"failed on {attempts} attempts; waiting for a newer commit to run it",
                       culprit, (culprit,), failures=failures)
    return Verdict(signal, "confirmed", f"failed on {attempts} attempts and on the {len(reds) - 1} newer commit(s) "
                   "that ran it, passed on the one before", culprit, (culprit,), failures=failures)


def _red_recheck(signal: Signal, first_red: str, infra: str, failures: int, in_flight: frozenset) -> str:
    """Inside a gap, why to re-run the first red's failed jobs beside the bisection ("" when not),
    as upstream does: the infrastructure check wanting a failure after a success, or fewer than
    MIN_FAILURES failures from the first red on. The bisection may take several rounds; the
    answer the re-run brings is needed once it ends."""
    if _in_flight(signal.events[first_red]) or (signal.workflow, first_red) in in_flight:
        return ""
    if infra == RESTART_RED:
        return "every failure started before every success below it: restart the first red's failed jobs"
    if failures < MIN_FAILURES:
        return f"fewer than {MIN_FAILURES} failures from the first red on: restart its failed jobs"
    return ""


def _no_signal(signal: Signal, history: MainHistory, sha: str, reruns: frozenset) -> bool:
    """Whether a whole-run re-run of the signal's workflow on `sha` (`reruns`: the autorevert's,
    (workflow, sha, run id, attempt re-run)) ended without running the signal's job: its `if:`
    skipped it again, or the job was not even made. A further re-run would skip it once more, so
    the commit cannot give the signal, and re-running it every `restart_interval_min` up to the
    cap would only hold the bisection's place. Upstream counts such a commit as missing and
    re-runs it until its cap; here, as a commit without a run, it is passed over and stays a
    suspect (it may still be the culprit: nothing can say)."""
    ev = signal.events.get(sha)
    if ev is not None and ev.outcome != "skipped":
        return False
    for workflow, rerun_sha, run_id, attempt in reruns:
        if (workflow, rerun_sha) != (signal.workflow, sha):
            continue
        if ev is not None and ev.run_id == run_id and (ev.run_attempt or 1) > attempt:
            return True  # the job itself skipped in the re-run: settled, whatever else still runs
        if history.attempts.get(run_id, 0) > attempt and run_id not in history.running:
            return True  # the re-run finished, and the job never came
    return False


def _gap_cover(signal: Signal, history: MainHistory, gap: list[str], in_flight: frozenset,
               reruns: frozenset) -> tuple[list[bool], list[bool]]:
    """Per gap commit: whether a run of it is in flight (it holds a bisection place), and whether
    it cannot give the signal (no run of the workflow to restart, or a re-run without the job):
    the bisection passes over those, and their places go to the rest."""
    pending = [(signal.events.get(sha) or Event("none")).outcome == "pending" or (signal.workflow, sha) in in_flight
               for sha in gap]
    idle = [not p and ((signal.workflow, sha) not in history.runs or _no_signal(signal, history, sha, reruns))
            for sha, p in zip(gap, pending)]
    return pending, idle


def _unnarrowable(signal: Signal, history: MainHistory, gap: list[str]) -> str:
    """Why a gap that no restart can narrow stays a range of suspects."""
    no_run = sum((signal.workflow, sha) not in history.runs for sha in gap)
    why = [*([f"{no_run} have no run of {signal.workflow} to restart"] if no_run else []),
           *([f"{len(gap) - no_run} did not run it when re-run"] if no_run < len(gap) else [])]
    return f"{len(gap)} commit(s) between green and red cannot give the signal: {', '.join(why)}"


def judge(signal: Signal, history: MainHistory, cfg: AutorevertConfig = DEFAULT,
          in_flight: frozenset = frozenset(), reruns: frozenset = frozenset()) -> Verdict:
    """The signal's verdict (see the module docstring). `in_flight`: (workflow, sha) restarted
    where commit_health does not show it yet; they hold bisection places as pending runs do.
    `reruns`: the whole-run re-runs made, (workflow, sha, run id, attempt re-run) (`_no_signal`)."""
    commits = history.commits
    green, reds, why = _walk(signal, commits)
    if green is None:
        return Verdict(signal, "ineligible", why)
    mixed = next((c for c in commits if c in signal.events and signal.events[c].mixed), None)
    if mixed is not None:
        return Verdict(signal, "ineligible", f"flaky: failed and passed on {mixed[:10]}, in the window")
    first_red = reds[-1]
    green_side = _green_side(signal, commits, green)
    red_side = [signal.events[c] for c in commits[first_red:] if c in signal.events]
    infra = infra_check(red_side, green_side) if history.timed else ""
    green_why = _green_why(signal.events[commits[green]], sum(ev.count("pass") for ev in green_side), infra,
                           red_side, green_side)
    recheck = (commits[green],) if green_why else ()
    failures = _failures(signal, commits, reds)
    gap = list(commits[green + 1:first_red])
    if not gap:
        return _pinned(signal, commits[first_red], reds, failures, cfg, recheck, green_why, infra)
    suspects = (*gap, commits[first_red])
    pending, idle = _gap_cover(signal, history, gap, in_flight, reruns)
    picks = plan_bisection([p or i for p, i in zip(pending, idle)], cfg.bisection_limit + sum(idle))
    red = _red_recheck(signal, commits[first_red], infra, failures, in_flight)
    if picks or recheck or red:
        why = "; ".join([f"{len(gap)} commit(s) between green and red did not run it: bisect",
                         *([f"{green_why}: restart the last green"] if recheck else []), *([red] if red else [])])
        return Verdict(signal, "restart", why, suspects=suspects, restarts=(
            *recheck, *(gap[i] for i in picks), *((commits[first_red],) if red else ())), failures=failures)
    if any(pending):
        return Verdict(signal, "suspect", "waiting for the runs in flight", suspects=suspects, failures=failures)
    return Verdict(signal, "suspect", _unnarrowable(signal, history, gap), suspects=suspects, failures=failures)


def judge_all(history: MainHistory, cfg: AutorevertConfig = DEFAULT, in_flight: frozenset = frozenset(),
              reruns: frozenset = frozenset()) -> list[Verdict]:
    return [judge(s, history, cfg, in_flight, reruns) for s in history.signals]
