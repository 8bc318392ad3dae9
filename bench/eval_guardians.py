"""Score the trunk guardians on planted breakages (torchci_assets/simulate/trunk.py).

For each seed a world of 48 main commits (one every 10 min) runs for their CI and 7 hours more;
every 5 simulated minutes (the schedule's cadence) the autorevert pass and the recurrently-failing
alert run on that minute's commit_health rows, in dry run, exactly as the job runs them (ledger
in a lake under --work); each restart the ledger records is then executed by the world (a new
attempt of the run's jobs, finishing a job's duration later).

Scored: revert proposals against the planted culprits (precision, recall, and proposals against
flaky-only, infra-only and pre-existing failures, which must be zero); minutes from the culprit's
push to the proposal and restarts spent per breakage; alerts: minutes from a job group's second
consecutive failure (checked every simulated minute) to the issue naming it, and from its
recovery to the issue dropping it.

Run as `make eval-guardians` (python bench/eval_guardians.py [--seeds 1 2 ...] [--work DIR]
[--flaky-rate P], the per-attempt failure rate of the test not known to be flaky, default 0.05).
"""

from __future__ import annotations

import argparse
import datetime as dt
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
from torchci_assets.derived.guardians.passes import autorevert_pass
from torchci_assets.guardian_config import AutorevertConfig
from torchci_assets.simulate.trunk import CULPRIT_KINDS, FLAKY_RATE, T0, TrunkWorld

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


def alert_latencies(world: TrunkWorld, changes: list[dict], end: int) -> dict:
    """Minutes from an episode's start to the issue naming its group and from its end to the issue
    dropping it. Episodes shorter than the cadence may fall between two checks: counted apart."""
    timeline = [((r["at"] - T0).total_seconds() // 60, r) for r in changes]
    opened, cleared, missed, short, short_seen = [], [], 0, 0, 0
    for group, start, stop in episodes(world, end):
        hit = next((t for t, r in timeline if t >= start and r["action"] != "closed"
                    and group in firing_in(r["body"])), None)
        if stop is not None and stop - start < CADENCE_MIN:
            short += 1
            short_seen += hit is not None and hit < stop
            continue
        if hit is None or (stop is not None and hit >= stop):
            missed += 1
        else:
            opened.append(int(hit - start))
        if stop is not None:
            gone = next((t for t, r in timeline if t >= stop and (r["action"] == "closed"
                         or group not in firing_in(r["body"]))), None)
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
    for now in range(0, end + 1, CADENCE_MIN):
        at = T0 + dt.timedelta(minutes=now)
        rows = world.rows(now)
        summary = autorevert_pass(github, lake, REPO, cfg, at, rows=rows)
        for r in summary.taken:
            if r["action"] == "restart":
                restarts.append(r)
                world.restart(r["workflow"], r["commit_sha"], r["notes"], now)
            else:
                proposals.setdefault(r["commit_sha"], (now, r["source_signal_keys"]))
        issues = AlertIssues(github, lake, REPO, ("pytorch-alert",), False, at)
        changes += issues.sync([recurrently_failing(rows, REPO, 2)])
    return score(world, proposals, restarts) | alert_latencies(world, changes, end)


def score(world: TrunkWorld, proposals: dict, restarts: list[dict]) -> dict:
    culprits = world.culprits()
    found, false = [], []
    for commit_sha, (minute, signals) in proposals.items():
        i = world.index[commit_sha]
        planted = culprits.get(i)
        if planted and any(s.startswith(planted.group) for s in signals):
            found.append({"kind": planted.kind, "minutes": minute - world.pushed_min(i),
                          "restarts": sum(any(s.startswith(planted.group) for s in r["source_signal_keys"])
                                          for r in restarts)})
        else:
            false.append({"commit": i, "signals": signals,
                          "innocent": [p.kind for p in world.plantings
                                       if p.kind not in CULPRIT_KINDS and any(s.startswith(p.group) for s in signals)]})
    return {"seed": world.seed, "planted": [p.kind for p in culprits.values()], "found": found, "false": false,
            "restarts": len(restarts)}


def _median(values) -> str:
    return f"{statistics.median(values):.0f}" if values else "-"


def report(results: list[dict], seconds: float) -> bool:
    planted = Counter(k for r in results for k in r["planted"])
    found = [f for r in results for f in r["found"]]
    false = [f for r in results for f in r["false"]]
    innocent = [f for f in false if f["innocent"]]
    proposals = len(found) + len(false)
    precision = len(found) / proposals if proposals else 1.0
    recall = len(found) / sum(planted.values())
    print(f"{len(results)} worlds, {sum(planted.values())} planted culprits, {3 * len(results)} planted innocent "
          f"failures (flaky-only, infra-only, pre-existing) plus a known-flaky test everywhere; {seconds:.0f} s")
    print(f"{'kind':<18}{'planted':>8}{'proposed':>9}{'median min to proposal':>24}{'median restarts':>17}")
    for kind in CULPRIT_KINDS:
        mine = [f for f in found if f["kind"] == kind]
        print(f"{kind:<18}{planted[kind]:>8}{len(mine):>9}{_median([f['minutes'] for f in mine]):>24}"
              f"{_median([f['restarts'] for f in mine]):>17}")
    print(f"precision {precision:.3f}  recall {recall:.3f}  false proposals {len(false)} "
          f"(against flaky/infra/pre-existing: {len(innocent)})")
    print(f"restarts in all: {sum(r['restarts'] for r in results)}; all minutes to proposal: "
          f"median {_median([f['minutes'] for f in found])}, max {max((f['minutes'] for f in found), default=0)}")
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
