"""Score the trunk guardians on planted breakages (torchci_assets/simulate/trunk.py).

For each seed a world of 48 main commits (one every 10 min) runs for their CI and 7 hours more
(in half the worlds, the even seeds, its last three commits are a landrace whose only green
started after the reds: the shape in which the infrastructure check re-runs the first red; in the
other half its last commit breaks a test no newer commit runs: the shape in which a pinned culprit
is re-run while fewer than 3 failures stand, and is never proposed, as no second red commit comes);
every 5 simulated minutes (the schedule's cadence) the autorevert pass and the recurrently-failing
alert run on that minute's commit_health rows, in dry run, exactly as the job runs them (ledger
in a lake under --work); each restart the ledger records is then executed by the world (a new
attempt of the run's jobs, finishing a job's duration later).

Before each pass the world's job tables as of that minute are written to the lake
(`write_job_tables`), so the autorevert reads every attempt and its start through
`main_attempt_rows` (the HUD's SQL) and the flaky verdicts through `known_flaky_tests`, as in
production: the timestamp infrastructure check and the flaky rule for tests are scored too. The
commit_health rows are the world's own rather than built from those tables each pass (that
would double the eval's time); tests/test_simulate_trunk.py checks the two agree.

Scored: revert proposals against the planted culprits (precision, recall, and proposals against
flaky-only, infra-only and pre-existing failures, which must be zero, and against a held culprit,
the last commit's, which must be zero too); minutes from the culprit's
push to the proposal and restarts spent per breakage; alerts: minutes from a job group's second
consecutive failure (checked every simulated minute) to the issue naming it, and from its
recovery to the issue dropping it.

Run as `make eval-guardians` (python bench/eval_guardians.py [--seeds 1 2 ...] [--work DIR]
[--flaky-rate P], the per-attempt failure rate of the test not known to be flaky, default 0.05).
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import shutil
import statistics
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from resources.github import GitHubResource
from resources.lake import Lake
from torchci_assets.derived.guardians.alert_conditions import recurrently_failing
from torchci_assets.derived.guardians.alert_issues import AlertIssues, firing_in
from torchci_assets.derived.guardians.culprits import judge_all
from torchci_assets.derived.guardians.passes import autorevert_pass, judged
from torchci_assets.guardian_config import AutorevertConfig
from torchci_assets.simulate.trunk import (CULPRIT_KINDS, FLAKY_RATE, HELD_KINDS, INNOCENT_KINDS, T0, TrunkWorld,
                                           blames, write_job_tables)

REPO = "pytorch/pytorch"
CADENCE_MIN = 5
TAIL_MIN = 420
TARGETS = {"precision": 0.95, "recall": 0.90, "innocent_proposals": 0, "alert_open_max_min": 10}


def episodes(world: TrunkWorld, end: int) -> list[tuple[str, int, int | None]]:
    """(job group, first minute, first minute clear again or None) of each run of the alert's
    condition for that group, checked every simulated minute."""
    out, since = [], {}
    for minute in range(end + 1):
        firing = set(recurrently_failing(world.rows(minute), REPO, 2).lines)
        for group in firing - since.keys():
            since[group] = minute
        for group in since.keys() - firing:
            out.append((group, since.pop(group), minute))
    return out + [(g, m, None) for g, m in since.items()]


def names(timeline: list[tuple[float, dict]], group: str, t: float) -> bool:
    """Whether the issue names `group` at minute `t`: its latest change by then does."""
    last = next((r for at, r in reversed(timeline) if at <= t), None)
    return last is not None and last["action"] != "closed" and group in firing_in(last["body"])


def alert_latencies(world: TrunkWorld, changes: list[dict], end: int) -> dict:
    """Minutes from an episode's start to the issue naming its group and from its end to the issue
    dropping it. An episode that starts again before a check saw it end finds its group still
    named: 0 minutes. Episodes shorter than the cadence may fall between two checks: counted apart."""
    timeline = [((r["at"] - T0).total_seconds() // 60, r) for r in changes]
    opened, cleared, missed, short, short_seen = [], [], 0, 0, 0
    for group, start, stop in episodes(world, end):
        hit = next((t for t in [start, *(t for t, _ in timeline if t >= start)] if names(timeline, group, t)), None)
        if stop is not None and stop - start < CADENCE_MIN:
            short += 1
            short_seen += hit is not None and hit < stop
            continue
        if hit is None or (stop is not None and hit >= stop):
            missed += 1
        else:
            opened.append(int(hit - start))
        if stop is not None:
            gone = next((t for t in [stop, *(t for t, _ in timeline if t >= stop)]
                         if not names(timeline, group, t)), None)
            cleared.append(int(gone - stop)) if gone is not None else None
    actions = [r["action"] for r in changes]
    double_open, is_open = 0, False
    for a in actions:
        double_open += a == "opened" and is_open
        is_open = a != "closed"
    return {"alert_open_min": opened, "alert_clear_min": cleared, "alert_missed": missed, "alert_short": short,
            "alert_short_seen": short_seen, "alert_double_open": double_open,
            "alert_changes": Counter(actions)}


def run_world(seed: int, work: Path, flaky_rate: float = FLAKY_RATE) -> dict:
    folder = work / f"seed-{seed}"
    shutil.rmtree(folder, ignore_errors=True)
    lake = Lake.at(str(folder / "lake"))
    world, github, cfg = TrunkWorld(seed, flaky_rate=flaky_rate), GitHubResource(), AutorevertConfig()
    end = world.pushed_min(len(world.shas) - 1) + TAIL_MIN
    proposals: dict[str, tuple[int, list[str]]] = {}
    restarts: list[dict] = []
    changes: list[dict] = []
    reasons: Counter = Counter()
    for now in range(0, end + 1, CADENCE_MIN):
        at = T0 + dt.timedelta(minutes=now)
        rows = world.rows(now)
        write_job_tables(world, lake, now)
        summary = autorevert_pass(github, lake, REPO, cfg, at, rows=rows)
        for r in summary.taken:
            if r["action"] == "restart":
                restarts.append(r)
                world.restart(r["workflow"], r["commit_sha"], r["notes"], now)
            else:
                proposals.setdefault(r["commit_sha"], (now, r["source_signal_keys"]))
        taken = [r for r in summary.taken if r["action"] == "restart"]
        reasons += restart_reasons(lake, cfg, at, rows, taken) if taken else Counter()
        issues = AlertIssues(github, lake, REPO, ("pytorch-alert",), False, at)
        changes += issues.sync([recurrently_failing(rows, REPO, 2)])
    return (score(world, proposals, restarts) | alert_latencies(world, changes, end)
            | {"reasons": reasons, "flaky_by_tries": flaky_by_tries(lake, cfg, at, rows)})


def flaky_by_tries(lake: Lake, cfg: AutorevertConfig, at: dt.datetime, rows: list[dict]) -> list[tuple[str, str]]:
    """(signal, its verdict at the end) of each test that failed and passed on a commit where its
    job group failed on every attempt: only the attempts' own failing tests (the job tables) show
    that, commit_health's latest attempt alone cannot; upstream's rule calls such a test flaky."""
    history, verdicts = judged(lake, cfg, at, True, rows)
    groups = {s.key: s for s in history.signals if s.test is None}
    out = []
    for v in verdicts:
        mixed = [c for c, ev in v.signal.events.items() if ev.mixed]
        if v.signal.test is not None and mixed and not any(groups[v.signal.job_group].events[c].mixed for c in mixed):
            out.append((v.signal.key, f"{v.kind}: {v.reason.split(':')[0]}"))
    return out


def restart_reasons(lake: Lake, cfg: AutorevertConfig, at: dt.datetime, rows: list[dict],
                    taken: list[dict]) -> Counter:
    """What each restart a pass just took re-ran, to show which rules spend the restarts: the
    first red (its verdict's reason, numbers dropped: confirming it, fewer than 3 failures from
    it on, or the infrastructure check wanting it to fail after a success; inside a gap too), a
    commit between green and red (bisection), or the last green (fewer than two successes below
    the first red, the infrastructure check: no success started after the first failure, or a
    check nothing in flight can settle). The pass does not return its verdicts, so the signals
    are judged again after it, as it judged them but without the restarts in flight (else the
    bisection would look elsewhere already)."""
    history, _ = judged(lake, cfg, at, True, rows)
    verdicts = judge_all(history, cfg)
    out: Counter = Counter()
    for r in taken:
        sha = r["commit_sha"]
        mine = [v for v in verdicts if v.signal.key in r["source_signal_keys"]]
        v = next((v for v in mine if sha in v.restarts), mine[0] if mine else None)
        if v is None:
            out["(signal gone)"] += 1
        elif sha == v.culprit:
            out["first red: " + re.sub(r"\d+", "N", v.reason.split(":")[0])] += 1
        elif sha in v.signal.events and v.signal.events[sha].outcome == "fail":
            out["first red inside a gap: " + ("infrastructure check" if "every failure started before" in v.reason
                                              else "fewer than 3 failures")] += 1
        elif sha in v.suspects:
            out["bisection"] += 1
        else:
            out["last green" + (": nothing in flight settles the infrastructure check"
                                if "nothing in flight can settle" in v.reason else "")] += 1
    return out


def blamed_restarts(p, restarts: list[dict]) -> int:
    return sum(any(blames(s, p) for s in r["source_signal_keys"]) for r in restarts)


def score(world: TrunkWorld, proposals: dict, restarts: list[dict]) -> dict:
    culprits = world.culprits()
    held = [p for p in world.plantings if p.kind in HELD_KINDS]
    found, false = [], []
    for commit_sha, (minute, signals) in proposals.items():
        i = world.index[commit_sha]
        planted = culprits.get(i)
        if any(p.commit == i and any(blames(s, p) for s in signals) for p in held):
            false.append({"commit": i, "signals": signals, "innocent": [], "held": True})
        elif planted and any(blames(s, planted) for s in signals):
            found.append({"kind": planted.kind, "minutes": minute - world.pushed_min(i),
                          "restarts": blamed_restarts(planted, restarts)})
        else:
            false.append({"commit": i, "signals": signals,
                          "innocent": [p.kind for p in world.plantings
                                       if p.kind not in CULPRIT_KINDS and any(blames(s, p) for s in signals)]})
    return {"seed": world.seed, "planted": [p.kind for p in culprits.values()], "found": found, "false": false,
            "restarts": len(restarts), "held": [blamed_restarts(p, restarts) for p in held]}


def _median(values) -> str:
    return f"{statistics.median(values):.0f}" if values else "-"


def report(results: list[dict], seconds: float) -> bool:
    planted = Counter(k for r in results for k in r["planted"])
    found = [f for r in results for f in r["found"]]
    false = [f for r in results for f in r["false"]]
    innocent = [f for f in false if f["innocent"] or f.get("held")]
    proposals = len(found) + len(false)
    precision = len(found) / proposals if proposals else 1.0
    recall = len(found) / sum(planted.values())
    print(f"{len(results)} worlds, {sum(planted.values())} planted culprits, {len(INNOCENT_KINDS) * len(results)} "
          f"planted innocent failures ({', '.join(INNOCENT_KINDS)}) plus a known-flaky test everywhere; every "
          f"attempt's start and outcome in the lake's job tables; {seconds:.0f} s")
    print(f"{'kind':<18}{'planted':>8}{'proposed':>9}{'median min to proposal':>24}{'median restarts':>17}")
    for kind in CULPRIT_KINDS:
        mine = [f for f in found if f["kind"] == kind]
        print(f"{kind:<18}{planted[kind]:>8}{len(mine):>9}{_median([f['minutes'] for f in mine]):>24}"
              f"{_median([f['restarts'] for f in mine]):>17}")
    print(f"precision {precision:.3f}  recall {recall:.3f}  false proposals {len(false)} "
          f"(against flaky/infra/pre-existing or a held culprit: {len(innocent)})")
    held = [n for r in results for n in r["held"]]
    print(f"held culprits (the last commit breaks a test, no newer commit runs it): {len(held)}, proposed "
          f"{sum(bool(f.get('held')) for f in false)}, restarts on them median {_median(held)}")
    print(f"restarts in all: {sum(r['restarts'] for r in results)}; all minutes to proposal: "
          f"median {_median([f['minutes'] for f in found])}, max {max((f['minutes'] for f in found), default=0)}")
    reasons = sum((r["reasons"] for r in results), Counter())
    print("restarts by what they re-ran: " + "; ".join(f"{n} {why}" for why, n in reasons.most_common()))
    flaky = [k for r in results for k in r["flaky_by_tries"]]
    print(f"test signals that failed and passed on a commit whose job failed on every attempt (only the attempts "
          f"show it): {len(flaky)} in {sum(bool(r['flaky_by_tries']) for r in results)} worlds, judged: "
          f"{dict(Counter(why for _, why in flaky))}")
    opened = [m for r in results for m in r["alert_open_min"]]
    cleared = [m for r in results for m in r["alert_clear_min"]]
    missed = sum(r["alert_missed"] for r in results)
    short, short_seen = sum(r["alert_short"] for r in results), sum(r["alert_short_seen"] for r in results)
    double = sum(r["alert_double_open"] for r in results)
    changes = sum((r["alert_changes"] for r in results), Counter())
    print(f"alerts: {len(opened)} failing-job episodes of {CADENCE_MIN}+ min: the issue named the group after median "
          f"{_median(opened)} min, max {max(opened, default=0)} min, missed {missed}; dropped after recovery: "
          f"median {_median(cleared)} min, max {max(cleared, default=0)} min; {short} episodes shorter than the "
          f"cadence ({short_seen} seen); issues opened while one was open: {double}; state changes {dict(changes)}")
    for f in false:
        print(f"  false proposal: commit {f['commit']} from {f['signals']}")
    return (precision >= TARGETS["precision"] and recall >= TARGETS["recall"] and not innocent
            and max(opened, default=0) <= TARGETS["alert_open_max_min"] and not missed and not double)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(1, 11)))
    parser.add_argument("--work", type=Path, default=Path("var/eval-guardians"))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--flaky-rate", type=float, default=FLAKY_RATE,
                        help="per-attempt failure rate of the test not known to be flaky")
    args = parser.parse_args(argv)
    start = time.monotonic()
    n = len(args.seeds)
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(pool.map(run_world, args.seeds, [args.work] * n, [args.flaky_rate] * n))
    ok = report(results, time.monotonic() - start)
    print("targets met" if ok else "TARGETS NOT MET")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
