"""Balance test files over CI shards from historical test times.

The cost model is the one PyTorch's CI actually pays: a shard runs its entries one
after another, and every entry (a whole test file, or one `--shard-id`-style part of
a split file) costs its share of the file's time plus a fixed process start-up
overhead. Splitting a long file therefore shortens the longest entry but adds
overhead, so the planner decides per file how many parts are worth it instead of
applying a fixed "cut above 600 s" rule.

Everything here is pure (no I/O) and deterministic: inputs are sorted by name and
every tie is broken by name, so every CI node that computes a plan gets the same one.
"""

from __future__ import annotations

import bisect
import heapq
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from operator import itemgetter
from typing import NamedTuple

DEFAULT_OVERHEAD_SECONDS = 15.0

# Used for files without history only when the selected table has no times at all;
# every file then costs the same, so the plan balances file counts, which is the best
# one can do without data.
FALLBACK_ESTIMATE_SECONDS = 60.0

# Assumed independent relative day-to-day variation of a file's time (one standard
# deviation). Plans are made from yesterday's times, and a shard whose load rests on
# one big file swings with it, so the planner pays some overhead to spread big files.
# Consecutive PyTorch snapshots differ by ~6-7% per file, but much of that is shared
# by whole groups of files (all of inductor/ getting faster), which moves shards
# together rather than apart; hence a smaller figure. bench/bench_shards.py scores are
# flat (within 0.3%) for values from 0.02 to 0.05.
DEFAULT_TIME_NOISE = 0.03

# PyTorch's run_test cuts files longer than this into ceil(t / 600) parts.
PYTORCH_SPLIT_SECONDS = 600.0

# Upper bound on the coarser caps tried per plan; keeps planning time flat when a
# config has many long files (only reached with very many shards).
_MAX_COARSER_CAPS = 40


class PlannedTest(NamedTuple):
    """One entry of a shard: a whole file (part 1 of 1) or one part of a split file."""

    file: str
    part: int
    parts: int
    seconds: float  # expected cost of this entry, start-up overhead included


class Shard(NamedTuple):
    index: int  # 1-based, as CI job names number shards
    expected_seconds: float
    tests: tuple[PlannedTest, ...]


class ShardPlan(NamedTuple):
    shards: tuple[Shard, ...]
    overhead: float
    unknown_files: tuple[str, ...]  # listed files with no history in the times given
    unknown_estimate: float  # for unknown files without an estimate of their own
    unknown_seconds: tuple[tuple[str, float], ...] = ()  # (file, seconds planned) per unknown file


class Score(NamedTuple):
    makespan: float
    lower_bound: float  # the bound: max((T + o*files)/N, longest entry of this plan)
    ideal_bound: float  # plan-independent: max((T + o*files)/N, longest file/N + o)

    @property
    def ratio(self) -> float:
        return self.makespan / self.lower_bound if self.lower_bound > 0 else 1.0


def select_times(
    test_times: Mapping[str, Mapping[str, Mapping[str, float]]], build_env: str, test_config: str
) -> tuple[Mapping[str, float], str]:
    """Pick the per-file times table the way PyTorch's run_test does.

    run_test uses build_env/test_config when present, else the "default" build env's
    entry for the same config, else "default"/"default". Returns the table and the
    "build_env/test_config" key it came from ("" when nothing matched at all).
    """
    if test_config in test_times.get(build_env, {}):
        return test_times[build_env][test_config], f"{build_env}/{test_config}"
    defaults = test_times.get("default", {})
    if test_config in defaults:
        return defaults[test_config], f"default/{test_config}"
    if "default" in defaults:
        return defaults["default"], "default/default"
    return {}, ""


def estimate_unknown_seconds(times: Mapping[str, float]) -> float:
    """Estimate for a file with no history: the median of the known files in the table.

    A new test file is most likely an ordinary one, and the median, unlike the mean,
    is not dragged up by the few huge files every config has.
    """
    if not times:
        return FALLBACK_ESTIMATE_SECONDS
    return float(statistics.median(times.values()))


def plan_shards(
    times: Mapping[str, float],
    tests: Iterable[str],
    num_shards: int,
    overhead: float = DEFAULT_OVERHEAD_SECONDS,
    unknown_estimate: float | None = None,
    time_noise: float = DEFAULT_TIME_NOISE,
    estimates: Mapping[str, float] | None = None,
) -> ShardPlan:
    """Plan `tests` over `num_shards` shards, minimising the longest shard it expects.

    The plan is chosen among several ways of cutting files into parts (see
    `_candidate_parts`): each is packed longest first, polished by moves and swaps
    off the longest shard, and scored as its longest shard plus the imbalance that
    tomorrow's drift of `time_noise` per file is expected to add to it. The lowest
    score wins, fewer entries breaking ties. With `time_noise=0` the planner
    minimises exactly the longest shard under the given times.

    Listed files missing from `times` are planned at `estimates[file]` when given (see
    `estimates.Estimator`: the same file in other configs, scaled), else at
    `unknown_estimate` (default: the median of `times`).
    """
    _check_args(num_shards, overhead)
    if not time_noise >= 0:
        raise ValueError(f"time noise must be a non-negative number, got {time_noise}")
    items, unknown, estimate = _durations(times, tests, unknown_estimate, estimates)
    durations = [t for _, t in items]
    spread = time_noise * _expected_max_of_normals(num_shards)
    packed = []
    for parts, bins, loads in _packings(items, num_shards, overhead):
        risk = spread * _drift_spread(durations, parts, num_shards)
        # polishing evens out loads, so no polished plan scores below the average load
        hope = (sum(loads) / num_shards + risk, sum(parts))
        packed.append(((max(loads) + risk, sum(parts)), len(packed), hope, risk, bins, loads))
    packed.sort(key=lambda c: c[:2])
    best = None
    for _, _, hope, risk, bins, loads in packed:
        if best is not None and hope >= best[0]:
            continue
        _improve(bins, loads)
        key = (max(loads) + risk, hope[1])
        if best is None or key < best[0]:
            best = (key, bins)
    return _build_plan(best[1], overhead, unknown, estimate, items)


def plan_candidates(
    times: Mapping[str, float],
    tests: Iterable[str],
    num_shards: int,
    overhead: float = DEFAULT_OVERHEAD_SECONDS,
    unknown_estimate: float | None = None,
    estimates: Mapping[str, float] | None = None,
) -> list[ShardPlan]:
    """Every plan `plan_shards` chooses among (one per way of cutting the files), each packed
    and polished.

    For measuring the choice, not for CI: scored under the times that came true, the best of
    them is the most any rule for choosing could have got out of these cuttings, so the gap
    between it and `plan_shards`' pick is what the choice lost and the rest is what the
    cuttings themselves lack (bench/bench_shards.py prints both).
    """
    _check_args(num_shards, overhead)
    items, unknown, estimate = _durations(times, tests, unknown_estimate, estimates)
    plans = []
    for _, bins, loads in _packings(items, num_shards, overhead):
        _improve(bins, loads)
        plans.append(_build_plan(bins, overhead, unknown, estimate, items))
    return plans


def plan_round_robin(
    times: Mapping[str, float],
    tests: Iterable[str],
    num_shards: int,
    overhead: float = DEFAULT_OVERHEAD_SECONDS,
    unknown_estimate: float | None = None,
    estimates: Mapping[str, float] | None = None,
) -> ShardPlan:
    """Baseline: whole files dealt out in name order, ignoring times."""
    _check_args(num_shards, overhead)
    items, unknown, estimate = _durations(times, tests, unknown_estimate, estimates)
    bins: list[list[tuple]] = [[] for _ in range(num_shards)]
    for i, (name, t) in enumerate(items):
        bins[i % num_shards].append((t + overhead, name, 1, 1))
    return _build_plan(bins, overhead, unknown, estimate, items)


def plan_longest_first(
    times: Mapping[str, float],
    tests: Iterable[str],
    num_shards: int,
    overhead: float = DEFAULT_OVERHEAD_SECONDS,
    unknown_estimate: float | None = None,
    split_above: float | None = None,
    count_overhead: bool = True,
    estimates: Mapping[str, float] | None = None,
) -> ShardPlan:
    """Baseline: longest-first greedy onto the least loaded shard.

    With `split_above`, files longer than it are first cut into
    ceil(t / split_above) equal parts. PyTorch's run_test does exactly that with
    `PYTORCH_SPLIT_SECONDS` and balances test time alone (`count_overhead=False`);
    the plan's expected seconds include the overhead either way.
    """
    _check_args(num_shards, overhead)
    items, unknown, estimate = _durations(times, tests, unknown_estimate, estimates)
    parts = [
        math.ceil(t / split_above) if split_above and t > split_above else 1 for _, t in items
    ]
    balanced_on = overhead if count_overhead else 0.0
    bins, _ = _longest_first(
        _entries(items, parts, balanced_on), [[] for _ in range(num_shards)], [0.0] * num_shards
    )
    shift = overhead - balanced_on
    bins = [[(cost + shift, *rest) for cost, *rest in entries] for entries in bins]
    return _build_plan(bins, overhead, unknown, estimate, items)


def score_plan(plan: ShardPlan, actual: Mapping[str, float]) -> Score:
    """Score a plan against the times the files actually took.

    Every planned file must have an actual time. The bound follows the issue: total
    time plus one overhead per file spread over the shards, or the plan's own longest
    entry if that is larger.
    """
    overhead, num_shards = plan.overhead, len(plan.shards)
    files: set[str] = set()
    makespan = longest_entry = 0.0
    for shard in plan.shards:
        load = 0.0
        for test in shard.tests:
            cost = actual[test.file] / test.parts + overhead
            load += cost
            longest_entry = max(longest_entry, cost)
            files.add(test.file)
        makespan = max(makespan, load)
    total = sum(actual[f] for f in files)
    average = (total + overhead * len(files)) / num_shards
    longest_file = max((actual[f] for f in files), default=0.0)
    ideal = max(average, longest_file / num_shards + overhead) if files else 0.0
    return Score(makespan, max(average, longest_entry), ideal)


def plan_to_dict(plan: ShardPlan) -> dict:
    """The JSON shape CI reads: shards with their entries and expected seconds."""
    return {
        "shards": [
            {
                "index": shard.index,
                "expected_seconds": round(shard.expected_seconds, 3),
                "tests": [
                    {"file": t.file, "part": t.part, "parts": t.parts} for t in shard.tests
                ],
            }
            for shard in plan.shards
        ],
        "process_overhead_seconds": plan.overhead,
        "unknown_files": list(plan.unknown_files),
        "unknown_estimate_seconds": round(plan.unknown_estimate, 3),
        "unknown_seconds": {name: round(seconds, 3) for name, seconds in plan.unknown_seconds},
    }


def _check_args(num_shards: int, overhead: float) -> None:
    if num_shards < 1:
        raise ValueError(f"number of shards must be at least 1, got {num_shards}")
    if not overhead >= 0:
        raise ValueError(f"process overhead must be a non-negative number, got {overhead}")


def _durations(
    times: Mapping[str, float], tests: Iterable[str], unknown_estimate: float | None,
    estimates: Mapping[str, float] | None,
) -> tuple[list[tuple[str, float]], tuple[str, ...], float]:
    """Name-sorted unique (file, seconds), the files without history, and the estimate for
    those that `estimates` (per-file estimates, see `estimates.Estimator`) does not cover."""
    estimate = estimate_unknown_seconds(times) if unknown_estimate is None else unknown_estimate
    estimates = estimates or {}
    names = sorted(set(tests))
    unknown = tuple(n for n in names if n not in times)
    items = [(n, float(times[n]) if n in times else float(estimates.get(n, estimate))) for n in names]
    return items, unknown, estimate


def _parts_under_cap(durations: Sequence[float], overhead: float, cap: float) -> list[int]:
    """Fewest equal parts per file so that each part plus overhead fits under `cap`.

    A part is never cut shorter than the overhead: such a part would be mostly
    process start-up, paid for a saving smaller than what it costs.
    """
    room = cap - overhead
    parts = []
    for t in durations:
        if t + overhead <= cap:
            parts.append(1)
        else:
            # the epsilon keeps a cap computed as t/k + o from rounding up to k+1
            k = math.ceil(t / room * (1 - 1e-12)) if room > 0 else math.inf
            if overhead > 0:
                k = min(k, max(1, math.floor(t / overhead)))
            parts.append(k)
    return parts


def _balance_cap(durations: Sequence[float], num_shards: int, overhead: float) -> tuple[float, float]:
    """The smallest cap whose average shard load fits under it, and the cap that splits nothing.

    Below the balance cap the overhead of the extra parts pushes the average shard
    above the cap itself.
    """
    longest = max(durations)
    whole_average = (sum(durations) + overhead * len(durations)) / num_shards
    lo = max(whole_average, longest / num_shards + overhead)
    hi = max(whole_average, longest + overhead)
    # files that fit under the smallest cap searched never split: count them once
    long = [t for t in durations if t + overhead > lo]
    base = sum(durations) + overhead * (len(durations) - len(long))

    def average(cap: float) -> float:
        return (base + overhead * sum(_parts_under_cap(long, overhead, cap))) / num_shards

    if average(lo) > lo:
        a, b = lo, hi  # invariant: average(a) > a, average(b) <= b
        while b - a > 1e-9 * b:
            mid = (a + b) / 2
            if average(mid) > mid:
                a = mid
            else:
                b = mid
        lo = b
    return lo, hi


def _candidate_parts(durations: Sequence[float], num_shards: int, overhead: float) -> list[list[int]]:
    """Part counts per file worth packing, the balance cap's first.

    From caps on the entry cost: the balance cap; finer caps in steps of sqrt(2) down
    to an eighth of it (finer pieces pack better and spread a big file's drift, for
    some overhead), kept above twice the overhead; and each coarser cap where a file
    needs one part fewer, up to the cap that splits nothing. From striping: the 1, 2,
    4, ... longest files cut into one part per shard (every shard then carries the
    same share of them, whatever they do tomorrow) and the rest cut at their own
    balance cap; only files whose per-shard part is at least one overhead long.
    """
    if not durations:
        return [[]]
    lo, hi = _balance_cap(durations, num_shards, overhead)
    finer = [lo * 2 ** (-j / 2) for j in range(1, 7)]
    finer = [c for c in finer if c > 2 * overhead and c < max(durations) + overhead]
    at_lo = _parts_under_cap(durations, overhead, lo)
    coarser = sorted(
        {
            t / k + overhead
            for t, kmax in zip(durations, at_lo)
            for k in range(1, kmax)
            if lo < t / k + overhead <= hi
        }
    )
    if len(coarser) > _MAX_COARSER_CAPS:
        step = len(coarser) / _MAX_COARSER_CAPS
        coarser = [coarser[int(i * step)] for i in range(_MAX_COARSER_CAPS)]
    candidates = [at_lo] + [_parts_under_cap(durations, overhead, c) for c in [*finer, *coarser]]

    by_size = sorted(range(len(durations)), key=lambda i: -durations[i])  # stable: name order on ties
    stripable = sum(1 for t in durations if t >= num_shards * overhead) if num_shards > 1 else 0
    count = 1
    while count <= stripable and count < len(durations):
        rest = by_size[count:]
        rest_cap, _ = _balance_cap([durations[i] for i in rest], num_shards, overhead)
        parts = [num_shards] * len(durations)
        for i, k in zip(rest, _parts_under_cap([durations[i] for i in rest], overhead, rest_cap)):
            parts[i] = k
        candidates.append(parts)
        count *= 2
    seen: set[tuple[int, ...]] = set()
    return [p for p in candidates if not (tuple(p) in seen or seen.add(tuple(p)))]


def _packings(items: Sequence[tuple[str, float]], num_shards: int, overhead: float) -> list[tuple]:
    """(parts per file, shards, loads) for each candidate cutting, packed but not yet polished."""
    return [(parts, *_pack(_entries(items, parts, overhead), num_shards))
            for parts in _candidate_parts([t for _, t in items], num_shards, overhead)]


def _expected_max_of_normals(n: int) -> float:
    """E[max of n standard normals] (Blom's approximation); 0 for a single shard."""
    return statistics.NormalDist().inv_cdf((n - 0.375) / (n + 0.25))


def _drift_spread(durations: Sequence[float], parts: Sequence[int], num_shards: int) -> float:
    """Typical size (one standard deviation, per unit of relative noise) of the imbalance
    between shards when every file's time drifts independently tomorrow.

    A file of time t cut into k parts on k different shards adds t/k to each of them
    when it drifts, against t/N on the average shard; the squared deviations over the
    N shards sum to t^2 (1/k - 1/N). A whole file (k = 1) thus counts almost fully,
    a file with a part on every shard not at all.
    """
    total = 0.0
    for t, k in zip(durations, parts):
        if k < num_shards:
            total += t * t * (1 / k - 1 / num_shards)
    return math.sqrt(total / num_shards)


def _entries(items: Sequence[tuple[str, float]], parts: Sequence[int], overhead: float) -> list[tuple]:
    return [
        (t / k + overhead, name, p, k)
        for (name, t), k in zip(items, parts)
        for p in range(1, k + 1)
    ]


def _pack(entries: list[tuple], num_shards: int) -> tuple[list[list[tuple]], list[float]]:
    """Stripe files cut into a multiple of N parts evenly, then the rest longest first."""
    striped = [e for e in entries if e[3] % num_shards == 0]
    bins: list[list[tuple]] = [[] for _ in range(num_shards)]
    loads = [0.0] * num_shards
    for e in striped:
        bins[(e[2] - 1) % num_shards].append(e)
        loads[(e[2] - 1) % num_shards] += e[0]
    rest = [e for e in entries if e[3] % num_shards]
    return _longest_first(rest, bins, loads)


def _longest_first(
    entries: list[tuple], bins: list[list[tuple]], loads: list[float]
) -> tuple[list[list[tuple]], list[float]]:
    """Longest entry first onto the least loaded shard (lowest index on ties)."""
    heap = [(load, i) for i, load in enumerate(loads)]
    heapq.heapify(heap)
    # entries come in (name, part) order and the sort is stable, so equal costs stay
    # in name order
    for entry in sorted(entries, key=itemgetter(0), reverse=True):
        load, i = heap[0]
        bins[i].append(entry)
        loads[i] = load + entry[0]
        heapq.heapreplace(heap, (loads[i], i))
    return bins, loads


def _improve(bins: list[list[tuple]], loads: list[float]) -> None:
    """Shorten the longest shard by moving or swapping entries with a lighter shard.

    Each step moves the amount closest to half the load gap from the longest shard to
    the lightest shard that admits a strictly improving move; it stops when none does.
    Bins are kept sorted by cost so that each search is a bisection.
    """
    num_shards = len(loads)
    if num_shards < 2:
        return
    for entries in bins:
        entries.sort()
    costs = [[e[0] for e in entries] for entries in bins]
    eps = 1e-9 * max(sum(loads), 1.0)
    for _ in range(20 * num_shards + 200):
        src = min(range(num_shards), key=lambda i: (-loads[i], i))
        for dst in sorted(range(num_shards), key=lambda i: (loads[i], i)):
            gap = loads[src] - loads[dst]
            if gap <= 2 * eps:
                return  # every other shard is as long as the longest
            move = _best_exchange(bins[src], bins[dst], costs[dst], gap, eps)
            if move is None:
                continue
            out, back = move
            _remove(bins[src], costs[src], out)
            _insert(bins[dst], costs[dst], out)
            delta = out[0]
            if back is not None:
                _remove(bins[dst], costs[dst], back)
                _insert(bins[src], costs[src], back)
                delta -= back[0]
            loads[src] -= delta
            loads[dst] += delta
            break
        else:
            return


def _remove(entries: list[tuple], costs: list[float], entry: tuple) -> None:
    i = bisect.bisect_left(entries, entry)
    del entries[i], costs[i]


def _insert(entries: list[tuple], costs: list[float], entry: tuple) -> None:
    i = bisect.bisect_left(entries, entry)
    entries.insert(i, entry)
    costs.insert(i, entry[0])


def _best_exchange(
    src: list[tuple], dst: list[tuple], dst_costs: list[float], gap: float, eps: float
) -> tuple[tuple, tuple | None] | None:
    """The move (out, None) or swap (out, back) whose net transfer is closest to gap/2.

    Any net transfer strictly between 0 and the gap lowers the larger of the two loads.
    """
    half = gap / 2
    best, best_dist = None, gap
    reach = gap + (dst_costs[-1] if dst_costs else 0.0)
    for out in src:
        cost = out[0]
        if cost >= reach:
            break  # src is sorted: no later entry can move or swap within the gap
        if eps < cost < gap - eps and abs(cost - half) < best_dist - eps:
            best, best_dist = (out, None), abs(cost - half)
        j = bisect.bisect_left(dst_costs, cost - half)
        for i in (j - 1, j):
            if 0 <= i < len(dst):
                d = cost - dst_costs[i]
                if eps < d < gap - eps and abs(d - half) < best_dist - eps:
                    best, best_dist = (out, dst[i]), abs(d - half)
    return best


def _build_plan(
    bins: list[list[tuple]], overhead: float, unknown: tuple[str, ...], estimate: float,
    items: list[tuple[str, float]],
) -> ShardPlan:
    shards = []
    for i, entries in enumerate(bins, start=1):
        ordered = sorted(entries, key=lambda e: (e[1], e[2]))
        tests = tuple(PlannedTest(name, p, k, cost) for cost, name, p, k in ordered)
        shards.append(Shard(i, sum(t.seconds for t in tests), tests))
    unknown_set = set(unknown)
    planned = tuple((name, t) for name, t in items if name in unknown_set)
    return ShardPlan(tuple(shards), overhead, unknown, estimate, planned)
