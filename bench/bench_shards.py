"""Benchmark the shard planner on real PyTorch test times: plan with day D, score with D+1.

Every pair of consecutive days found in the data directory is scored (three today:
2026-01-14/15, 2026-04-20/21, 2026-08-19/20). For every build_env/test_config of the D+1
snapshot, the plan uses day D's snapshot and D+1's list of files, and is scored under D+1's
times. This is what CI lives with: plans are made from yesterday's stats.

Planners. "planner" is what `torchci shard-plan` does with one snapshot: the config's own
times, and files it has no time for estimated from the same file in other configs
(`derived.sharding.estimates`). The baselines pick their times the way PyTorch's run_test
does (the config's table, else `default[config]`, else `default/default`, unknown files at
the table's median), "PyTorch: 600 s cut" being run_test's own rule. "planner, one estimate"
is the planner on those same times, i.e. before the estimates. "foresight" plans with D+1's
own times: no plan made on day D can expect to beat it, so the gap between it and "planner"
is what the day-to-day change of the times cost, not the packing. "best cut, hindsight" is
the best, under D+1's times, of the plans the planner chooses among (`plan_candidates`: one
per way of cutting the files, each made from day D's times): no rule for choosing can do
better with those plans, so it splits the gap into what the choice lost (planner -> it) and
what plans made from day D's times lack (it -> foresight). The planner's ratios are
also shown apart for the configs where a file's time rose beyond that day's noise, by the rules
of test_time_regressions: what no plan could foresee, and what that asset reports.

Configs: all of them, including the "default" build env (PyTorch's averages, which
run_test falls back to) and the empty test-config keys (jobs whose config the stats job
could not parse); both are real timing tables with real shapes, and leaving them out
would only shrink the sample.

Targets (issue 13), on each pair: mean ratio <= 1.02, max <= 1.3, every config planned
in under 2 s.

Run as `make bench-shards`, or `python bench/bench_shards.py --data DIR` with a folder of
`test-times.<day>.json[.gz]` snapshots (PyTorch's `generated-stats` branch). Without --data:
$TORCHCI_SHARED_DATA/pytorch-generated-stats, else a `shared/data/pytorch-generated-stats`
folder above the checkout, else the two pairs the repository carries in tests/data/pytorch.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import math
import os
import re
import statistics
import sys
import time
from pathlib import Path

from torchci_assets.derived.sharding.estimates import Estimator
from torchci_assets.derived.sharding.regressions import DayTime, assess, config_noise
from torchci_assets.derived.sharding.planner import (
    DEFAULT_OVERHEAD_SECONDS,
    PYTORCH_SPLIT_SECONDS,
    plan_candidates,
    plan_longest_first,
    plan_round_robin,
    plan_shards,
    score_plan,
    select_times,
)

SECONDS_PER_SHARD = 2400.0
MAX_SHARDS = 16
TARGET_MEAN, TARGET_MAX, TARGET_SECONDS = 1.02, 1.3, 2.0
SNAPSHOT = re.compile(r"^test-times\.(\d{4}-\d\d-\d\d)\.json(\.gz)?$")

# name -> plan(times as run_test picks them, tests, shards); "planner" and "foresight" are apart
BASELINES = {
    "planner, one estimate": lambda times, tests, n: plan_shards(times, tests, n),
    "round-robin": lambda times, tests, n: plan_round_robin(times, tests, n),
    "longest-first": lambda times, tests, n: plan_longest_first(times, tests, n),
    "PyTorch: 600 s cut": lambda times, tests, n: plan_longest_first(
        times, tests, n, split_above=PYTORCH_SPLIT_SECONDS, count_overhead=False
    ),
    "600 s cut, overhead-aware": lambda times, tests, n: plan_longest_first(
        times, tests, n, split_above=PYTORCH_SPLIT_SECONDS
    ),
}
HINDSIGHT = "best cut, hindsight"
NAMES = ("planner", HINDSIGHT, *BASELINES, "foresight")
COMPARED = ("PyTorch: 600 s cut", "600 s cut, overhead-aware")


def data_dir(given: str | None) -> Path:
    """Where the snapshots are: --data, else $TORCHCI_SHARED_DATA, else a team checkout's
    shared/data above the repository, else the repository's own two pairs."""
    if given:
        return Path(given)
    if "TORCHCI_SHARED_DATA" in os.environ:
        return Path(os.environ["TORCHCI_SHARED_DATA"]) / "pytorch-generated-stats"
    here = Path(__file__).resolve()
    found = [p / "shared" / "data" / "pytorch-generated-stats" for p in here.parents
             if (p / "shared" / "data" / "pytorch-generated-stats").is_dir()]
    return found[0] if found else here.parents[1] / "tests" / "data" / "pytorch"


def load_snapshot(stats: Path, day: str) -> dict:
    plain = stats / f"test-times.{day}.json"
    if plain.exists():
        return json.loads(plain.read_bytes())
    return json.loads(gzip.decompress((stats / f"test-times.{day}.json.gz").read_bytes()))


def day_pairs(stats: Path) -> list[tuple[str, str]]:
    days = sorted({m.group(1) for p in stats.iterdir() if (m := SNAPSHOT.match(p.name))})
    return [(a, b) for a, b in zip(days, days[1:])
            if dt.date.fromisoformat(b) - dt.date.fromisoformat(a) == dt.timedelta(days=1)]


def num_shards(total_seconds: float) -> int:
    return min(MAX_SHARDS, max(1, math.ceil(total_seconds / SECONDS_PER_SHARD)))


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile: the smallest value with at least q of the data at or below it."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def bench_pair(stats: Path, day: str, next_day: str) -> dict:
    before = load_snapshot(stats, day)
    after = load_snapshot(stats, next_day)
    configs = [(env, cfg, files) for env, per_config in sorted(after.items())
               for cfg, files in sorted(per_config.items()) if files]
    ratios = {name: [] for name in NAMES}
    ideal = {name: [] for name in NAMES}
    makespans = {name: [] for name in NAMES}
    rows = []
    started, started_cpu = time.perf_counter(), time.process_time()
    estimator = Estimator(before)
    plans, inputs = [], []  # the planner's plan and its (times, options) per config
    for env, cfg, actual in configs:
        tests = list(actual)
        times = estimator.config_times(env, cfg, tests)
        inputs.append((times.known, dict(unknown_estimate=times.fallback,
                                         estimates={f: e.seconds for f, e in times.estimates.items()})))
        plans.append(plan_shards(inputs[-1][0], tests, num_shards(sum(actual.values())), **inputs[-1][1]))
    wall, cpu = time.perf_counter() - started, time.process_time() - started_cpu
    unknown = 0
    for (env, cfg, actual), plan, (known, options) in zip(configs, plans, inputs):
        tests, n = list(actual), num_shards(sum(actual.values()))
        runtest_times, _ = select_times(before, env, cfg)
        candidates = plan_candidates(known, tests, n, **options)
        results = {"planner": plan, "foresight": plan_shards(actual, tests, n),
                   HINDSIGHT: min(candidates, key=lambda c: score_plan(c, actual).makespan)}
        results.update({name: f(runtest_times, tests, n) for name, f in BASELINES.items()})
        unknown += len(plan.unknown_files)
        for name, result in results.items():
            score = score_plan(result, actual)
            ratios[name].append(score.ratio)
            ideal[name].append(score.makespan / score.ideal_bound)
            makespans[name].append(score.makespan)
        jumps = sorted(((actual[f] - runtest_times.get(f, 0.0)), f) for f in actual)
        rows.append((ratios["planner"][-1], ratios["foresight"][-1], env, cfg, n, jumps[-1]))
    return {"day": day, "next_day": next_day, "configs": configs, "ratios": ratios, "ideal": ideal,
            "makespans": makespans, "wall": wall, "cpu": cpu, "rows": rows, "unknown": unknown,
            "jumped": jumped_configs(before, after, day, next_day), "changes": day_to_day_changes(before, after)}


def day_to_day_changes(before: dict, after: dict) -> dict:
    """How a (config, file) time moves from one snapshot to the next: the share that does not move
    (under 0.1%), the median and 90th percentile of |log change| among those that do, and the share
    of all the change (squared log change, weighted by the file's time) carried by the 1% of entries
    that change most. Says what shape a noise model would need, not how well any plan does."""
    moves = [(abs(math.log(t / was)), was) for env, cfgs in after.items() for cfg, files in cfgs.items()
             if (files_before := before.get(env, {}).get(cfg)) for f, t in files.items()
             if t > 0 and (was := files_before.get(f, 0)) > 0]
    moved = sorted(d for d, _ in moves if d >= 1e-3)
    weights = sorted((was * d * d for d, was in moves), reverse=True)
    total = sum(weights) or 1.0
    return {"entries": len(moves), "unchanged": 1 - len(moved) / len(moves) if moves else 0.0,
            "median": percentile(moved, 0.5) if moved else 0.0, "p90": percentile(moved, 0.9) if moved else 0.0,
            "top1": sum(weights[:max(1, len(weights) // 100)]) / total}


def jumped_configs(before: dict, after: dict, day: str, next_day: str) -> set[tuple[str, str]]:
    """Configs with a file whose time rose beyond the day's noise from one snapshot to the next,
    by test_time_regressions' rules (an entry equal in both was not measured again; with one
    earlier day, the noise is the config's spread of that day's changes). An explanation after
    the fact, not a score: no plan made on `day` could know them."""
    levels = [((env, cfg, f), files_before[f], t) for env, cfgs in after.items() for cfg, files in cfgs.items()
              if (files_before := before.get(env, {}).get(cfg)) for f, t in files.items()
              if f in files_before and files_before[f] != t]
    noise = config_noise(levels)
    return {key[:2] for key, was, now in levels
            if assess(key, [DayTime(day, was, 1, 0.0), DayTime(next_day, now, 1, 0.0)], next_day,
                      noise.get(key[:2], noise.get(None)))}


def report(r: dict) -> list[str]:
    ratios, ideal, makespans = r["ratios"], r["ideal"], r["makespans"]
    out = [f"== plan with {r['day']}, score with {r['next_day']}: {len(r['configs'])} configs, "
           f"{r['unknown']} (config, file) pairs without history on {r['day']}"]
    header = (f"{'planner':<26}{'mean':>7}{'p90':>7}{'max':>7}   {'ideal mean':>10}{'p90':>7}{'max':>7}"
              f"   {'sum of makespans (h)':>20}")
    out += [header, "-" * len(header)]
    for name in NAMES:
        x, i = ratios[name], ideal[name]
        out.append(f"{name:<26}{statistics.fmean(x):>7.3f}{percentile(x, 0.9):>7.3f}{max(x):>7.3f}"
                   f"   {statistics.fmean(i):>10.3f}{percentile(i, 0.9):>7.3f}{max(i):>7.3f}"
                   f"   {sum(makespans[name]) / 3600:>20.1f}")
    real = [k for k, (env, cfg, _) in enumerate(r["configs"]) if env != "default" and cfg != ""]
    out.append(f"without the 'default' build env and the '' configs ({len(real)} configs):")
    for name in ("planner", "PyTorch: 600 s cut", "foresight"):
        x = [ratios[name][k] for k in real]
        out.append(f"{name:<26}{statistics.fmean(x):>7.3f}{percentile(x, 0.9):>7.3f}{max(x):>7.3f}")
    tol = 1e-9
    for baseline in COMPARED:
        worse = sum(a > b + tol for a, b in zip(ratios["planner"], ratios[baseline]))
        margin = max(a / b for a, b in zip(ratios["planner"], ratios[baseline]))
        out.append(f"configs where the planner is worse than '{baseline}': {worse} (at most x{margin:.3f})")
    jumped = [k for k, (env, cfg, _) in enumerate(r["configs"]) if (env, cfg) in r["jumped"]]
    steady = [k for k in range(len(r["configs"])) if k not in set(jumped)]
    for label, group in (("configs where a file jumped beyond the day's noise", jumped), ("other configs", steady)):
        x = [ratios["planner"][k] for k in group]
        if x:
            out.append(f"planner on the {len(x)} {label}: mean {statistics.fmean(x):.3f}, max {max(x):.3f}")
    c = r["changes"]
    out.append(f"day-to-day changes: {c['unchanged']:.0%} of {c['entries']:,} (config, file) times do not move; the "
               f"others by {c['median']:.1%} at the median, {c['p90']:.1%} at p90 (|log change|); the 1% that move "
               f"most carry {c['top1']:.0%} of the change")
    out.append("worst configs (planner, foresight, the file whose time grew most from one day to the next):")
    for ratio, foresight, env, cfg, n, (jump, name) in sorted(r["rows"], reverse=True)[:3]:
        out.append(f"  {ratio:.3f} {foresight:.3f}  {env}/{cfg} ({n} shards): {name} +{jump:.0f} s")
    mean, worst = statistics.fmean(ratios["planner"]), max(ratios["planner"])
    verdict = [f"mean {mean:.3f} {'<=' if mean <= TARGET_MEAN else '>'} {TARGET_MEAN}",
               f"max {worst:.3f} {'<=' if worst <= TARGET_MAX else '>'} {TARGET_MAX}",
               f"planning {r['wall']:.2f} s ({r['cpu']:.2f} s CPU) "
               f"{'<' if r['wall'] < TARGET_SECONDS else '>='} {TARGET_SECONDS:g} s"]
    met = mean <= TARGET_MEAN and worst <= TARGET_MAX and r["wall"] < TARGET_SECONDS
    out.append(f"targets {'met' if met else 'NOT met'}: " + ", ".join(verdict))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description="Shard plans on consecutive days of PyTorch's test times.")
    parser.add_argument("--data", help="folder of test-times.<day>.json[.gz] snapshots")
    stats = data_dir(parser.parse_args().data)
    try:
        pairs = day_pairs(stats)
    except OSError as exc:
        print(f"bench_shards: cannot list the snapshots in {stats}: {exc}\n"
              "  pass --data DIR (or set TORCHCI_SHARED_DATA) with a folder of test-times.<day>.json "
              "files from pytorch/test-infra's generated-stats branch", file=sys.stderr)
        return 2
    if not pairs:
        print(f"bench_shards: no snapshots of consecutive days in {stats}", file=sys.stderr)
        return 2
    print(f"Shard plans on {len(pairs)} real day pairs from {stats}.")
    print(f"N = clamp(ceil(total/{SECONDS_PER_SHARD:.0f} s), 1, {MAX_SHARDS}), "
          f"overhead {DEFAULT_OVERHEAD_SECONDS:.0f} s per entry.")
    print("ratio = makespan / max((total + overhead x files)/N, longest entry of the plan), "
          "the issue's formula, under the next day's times;")
    print("ideal = makespan / max((total + overhead x files)/N, longest file/N + overhead), "
          "a bound no plan can beat whatever it splits.")
    summary = []
    for day, next_day in pairs:
        try:
            result = bench_pair(stats, day, next_day)
        except (OSError, ValueError) as exc:
            print(f"bench_shards: cannot read the {day}/{next_day} snapshots: {exc}", file=sys.stderr)
            return 2
        print()
        print("\n".join(report(result)))
        summary.append(result)
    print(f"\nsummary (planner | PyTorch: 600 s cut | {HINDSIGHT} | foresight), ratio mean / max, "
          "planning wall time:")
    for r in summary:
        cells = [f"{statistics.fmean(r['ratios'][n]):.3f} / {max(r['ratios'][n]):.3f}"
                 for n in ("planner", "PyTorch: 600 s cut", HINDSIGHT, "foresight")]
        print(f"  {r['day']} -> {r['next_day']}:  " + "  |  ".join(cells) + f"   {r['wall']:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
