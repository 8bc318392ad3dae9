"""Benchmark the shard planner on real PyTorch test times: plan with day D, score with D+1.

For every build_env/test_config of the D+1 snapshot, the plan uses day D's times (picked
with PyTorch's fallback rules) and D+1's list of files, and is scored under D+1's times.
This is what CI lives with: plans are made from yesterday's stats.

Configs: all of them, including the "default" build env (PyTorch's averages, which
run_test falls back to) and the empty test-config keys (jobs whose config the stats job
could not parse); both are real timing tables with real shapes, and leaving them out
would only shrink the sample.

Run as `make bench-shards`. Data directory: $TORCHCI_SHARED_DATA, default
<repo>/../shared/data.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

from torchci_assets.derived.sharding.planner import (
    DEFAULT_OVERHEAD_SECONDS,
    PYTORCH_SPLIT_SECONDS,
    plan_longest_first,
    plan_round_robin,
    plan_shards,
    score_plan,
    select_times,
)

DAY = "2026-08-19"
NEXT_DAY = "2026-08-20"
SECONDS_PER_SHARD = 2400.0
MAX_SHARDS = 16

PLANNERS = {
    "planner": lambda times, tests, n: plan_shards(times, tests, n),
    "round-robin": lambda times, tests, n: plan_round_robin(times, tests, n),
    "longest-first": lambda times, tests, n: plan_longest_first(times, tests, n),
    "PyTorch: 600 s cut": lambda times, tests, n: plan_longest_first(
        times, tests, n, split_above=PYTORCH_SPLIT_SECONDS, count_overhead=False
    ),
    "600 s cut, overhead-aware": lambda times, tests, n: plan_longest_first(
        times, tests, n, split_above=PYTORCH_SPLIT_SECONDS
    ),
}
BASELINES = ("PyTorch: 600 s cut", "600 s cut, overhead-aware")


def data_dir() -> Path:
    default = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
    return Path(os.environ.get("TORCHCI_SHARED_DATA", default))


def num_shards(total_seconds: float) -> int:
    return min(MAX_SHARDS, max(1, math.ceil(total_seconds / SECONDS_PER_SHARD)))


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile: the smallest value with at least q of the data at or below it."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def main() -> int:
    stats = data_dir() / "pytorch-generated-stats"
    try:
        day = json.loads((stats / f"test-times.{DAY}.json").read_text())
        next_day = json.loads((stats / f"test-times.{NEXT_DAY}.json").read_text())
    except (OSError, ValueError) as exc:
        print(f"bench_shards: cannot read the snapshots in {stats}: {exc}", file=sys.stderr)
        return 2

    configs = [
        (env, cfg, files)
        for env, per_config in sorted(next_day.items())
        for cfg, files in sorted(per_config.items())
        if files
    ]
    ratios = {name: [] for name in PLANNERS}
    makespans = {name: [] for name in PLANNERS}
    ideal_ratios = {name: [] for name in PLANNERS}
    planned = {name: [] for name in PLANNERS}  # makespan under the planning day's own times
    plan_seconds = plan_cpu_seconds = 0.0
    for env, cfg, actual in configs:
        times, _ = select_times(day, env, cfg)
        tests = list(actual)
        n = num_shards(sum(actual.values()))
        for name, plan in PLANNERS.items():
            started, started_cpu = time.perf_counter(), time.process_time()
            result = plan(times, tests, n)
            if name == "planner":
                plan_seconds += time.perf_counter() - started
                plan_cpu_seconds += time.process_time() - started_cpu
            score = score_plan(result, actual)
            planned[name].append(score_plan(result, times).makespan)
            ratios[name].append(score.ratio)
            makespans[name].append(score.makespan)
            ideal_ratios[name].append(score.makespan / score.ideal_bound)

    print(f"Shard plans from test-times {DAY}, scored with {NEXT_DAY}: {len(configs)} configs")
    print(f"(every build_env/test_config with files in {NEXT_DAY}, 'default' and '' keys included),")
    print(f"N = clamp(ceil(total/{SECONDS_PER_SHARD:.0f} s), 1, {MAX_SHARDS}), "
          f"overhead {DEFAULT_OVERHEAD_SECONDS:.0f} s per entry.")
    print("ratio = makespan / max((total + overhead x files)/N, longest entry of the plan), "
          "the issue's formula, all under the next day's times.")
    print("ideal = makespan / max((total + overhead x files)/N, longest file/N + overhead), "
          "a bound no plan can beat whatever it splits.\n")
    header = (
        f"{'planner':<26}{'mean':>7}{'p90':>7}{'max':>7}   {'ideal mean':>10}{'p90':>7}{'max':>7}"
        f"   {'sum of makespans (h)':>20}"
    )
    print(header)
    print("-" * len(header))
    for name in PLANNERS:
        r, i = ratios[name], ideal_ratios[name]
        print(
            f"{name:<26}{statistics.fmean(r):>7.3f}{percentile(r, 0.9):>7.3f}{max(r):>7.3f}"
            f"   {statistics.fmean(i):>10.3f}{percentile(i, 0.9):>7.3f}{max(i):>7.3f}"
            f"   {sum(makespans[name]) / 3600:>20.1f}"
        )
    real_jobs = [i for i, (env, cfg, _) in enumerate(configs) if env != "default" and cfg != ""]
    print(f"\nratio over the {len(real_jobs)} configs left without the 'default' build env "
          "(PyTorch's averages) and the '' configs:")
    for name in PLANNERS:
        r = [ratios[name][i] for i in real_jobs]
        print(f"{name:<26}{statistics.fmean(r):>7.3f}{percentile(r, 0.9):>7.3f}{max(r):>7.3f}")
    print()
    tol = 1e-9
    for baseline in BASELINES:
        worse_ratio = sum(a > b + tol for a, b in zip(ratios["planner"], ratios[baseline]))
        worse_time = sum(a > b * (1 + tol) for a, b in zip(makespans["planner"], makespans[baseline]))
        worse_planned = sum(a > b * (1 + tol) for a, b in zip(planned["planner"], planned[baseline]))
        margin = max(a / b for a, b in zip(ratios["planner"], ratios[baseline]))
        print(f"configs where the planner is worse than '{baseline}': "
              f"{worse_ratio} by ratio (at most x{margin:.3f}), {worse_time} by makespan; "
              f"{worse_planned} on {DAY}'s own times")
    print(f"wall time to plan all {len(configs)} configs with the planner: {plan_seconds:.3f} s "
          f"({plan_cpu_seconds:.3f} s of CPU)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
