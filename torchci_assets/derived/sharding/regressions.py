"""Test-time regressions: files whose time in a config jumped beyond their own day-to-day noise.

PyTorch publishes test times partly to catch these: on 2026-07-15 one file of the `default`
configs went from ~2,000 s to ~24,500 s and every shard plan was 5-8x its bound. No planner can
foresee such a jump; this table reports it the day it lands, with the commit to bisect from.

Input: `test_time_sha_daily` over the window (per day, config, file and commit: the successful
main-branch runs summed that day and their summed time) and the shard rows of `test_time_daily`
(the runs split over days, with their commit), never raw rows. Each run counts once, as in the
test times: each shard at its latest clean attempt, on the last day one of its reports landed, a
"re-run all jobs" of a run already counted adding nothing (otherwise a failed shard's re-run made
a run of that shard's time alone, and a culprit whose shard was re-run looked fast). A file's
time on a day is the median over that day's commits of the commit's mean time per run, so one odd
run does not make a day. Days of either table written by older SQL are rebuilt from their
test_results first (`results.stats.rebuild_outdated_time_days`).

A (build_env, test_config, file) is a regression on day D when, with `before` the median of
its daily times before the move and `after` the median since the move began:

    after - before >= max(min_jump_s, noise_multiple * noise), and so is D's own time

`noise` is the file's own day-to-day noise: 1.4826 x MAD of its daily times before the move
(a robust standard deviation: the days a file was already odd do not inflate it), when it
has at least `min_baseline_days` of them. With a shorter history (the first days of a lake,
a file newly run) it is the config's noise that day: the robust spread, over all of the
config's files, of the relative change between the day and their earlier median, times the
file's `before`; most files do not regress on a given day, so their spread is the noise and
the median ignores the few that did. A config that ran fewer than MIN_POOLED_FILES files
takes the same spread over every config's files. Either way the noise is at least what the day's median
can be known to from its runs (1.2533 x the runs' robust spread / sqrt(commits)).

Why these defaults. noise_multiple = 5: tens of thousands of (config, file) pairs are tested
each day, so the tail allowed must be about one in a million to keep false alarms to a handful
a month (a normal's two-sided tail beyond 5 sd is 6e-7; a MAD over two weeks is itself
uncertain, which fattens the tail, hence not 4.5). min_jump_s = 60: below a minute (four
process start-ups in the shard planner's cost model) a move changes no plan and no bill, and
very short files have the largest relative noise. min_baseline_days = 3: a MAD over fewer
daily values is one difference, which varies by a factor of several from one file to the
next; the config's spread that day, over hundreds of files, is the steadier guess.

The move's start (`since`): the day that best splits the window's daily times into a level
before and a level since (two medians, least absolute deviations); `before` and the noise are
taken over the days before it. Only files whose time on D is above the window's median by
`min_jump_s` are examined, so a regression stays listed, with the same `since` and commit,
until it is fixed or the window's median has caught up with it (about half the window later).

First commit seen slow: the commits of the day before `since` and after, in main's order
(when they were pushed to the configured main branch, from the `push` table), are split where
the fewest commits fall on the wrong side of the midpoint (slow before the split, or fast after
it); the first commit after the split is `first_slow_sha` (`first_slow_at` its push), the one
before it `last_fast_sha`: the culprit is after the latter, up to and including the former (commits
between them had no successful run of the file). Ties go to the earliest split, so a
bisection never starts after the culprit.

Cost: `cost_share` is the jump over the config's total time per run (the sum of its files'
`before`): the share of a whole config that one file added, which the asset check compares
with `max_cost_share`.

Runs that failed or timed out are not in the input (their times are partial), so a file that
became so slow that its shards hit the job timeout shows up as timed-out jobs, not here.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import pyarrow as pa

from resources.lake import Lake, connect
from resources.sql import SqlFiles, execute
from torchci_assets.derived.results.columns import TIME_DAILY_RUN_COLUMNS, register_current
from torchci_assets.derived.results.stats import (DEFAULT_MAIN_BRANCH, define_run_times, define_seconds_sum,
                                                  rebuild_outdated_time_days)
from torchci_assets.derived.sharding.times import RUN_LOOKBACK_DAYS
from torchci_assets.partitions import days_ending

WINDOW_DAYS = 14
NOISE_MULTIPLE = 5.0
MIN_JUMP_SECONDS = 60.0
MIN_BASELINE_DAYS = 3
MIN_POOLED_FILES = 10
# A config's shards each carry ~1/N of its total (N = 4..16 for PyTorch): one file adding 5%
# of the total is a large part of a shard's slack on the biggest configs, all of it landing
# on the one or two shards that run the file.
MAX_COST_SHARE = 0.05
MAX_COST_SHARE_ENV = "TORCHCI_MAX_REGRESSION_SHARE"
_MAD_TO_SD = 1.4826
_MEDIAN_SE = 1.2533  # sd of a sample median / (sd of one value / sqrt(n)), for normal data

Key = tuple[str, str, str]  # build_env, test_config, file

REGRESSIONS_SCHEMA = pa.schema([
    ("build_env", pa.string()), ("test_config", pa.string()), ("file", pa.string()),
    ("before_s", pa.float64()), ("after_s", pa.float64()), ("jump_s", pa.float64()),
    ("jump_ratio", pa.float64()), ("noise_s", pa.float64()), ("noise_multiple", pa.float64()),
    ("noise_from", pa.string()), ("baseline_days", pa.int32()), ("since", pa.date32()),
    ("slow_days", pa.int32()), ("first_slow_sha", pa.string()), ("last_fast_sha", pa.string()),
    ("first_slow_at", pa.timestamp("us", tz="UTC")), ("slow_runs", pa.int64()),
    ("config_total_s", pa.float64()), ("cost_share", pa.float64()),
])


@dataclass(frozen=True)
class Rules:
    window_days: int = WINDOW_DAYS
    noise_multiple: float = NOISE_MULTIPLE
    min_jump_s: float = MIN_JUMP_SECONDS
    min_baseline_days: int = MIN_BASELINE_DAYS


def max_cost_share() -> float:
    """The check's threshold: $TORCHCI_MAX_REGRESSION_SHARE, else MAX_COST_SHARE."""
    raw = os.environ.get(MAX_COST_SHARE_ENV)
    if raw is None:
        return MAX_COST_SHARE
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0 < value <= 1:
        raise ValueError(f"{MAX_COST_SHARE_ENV} must be a fraction in (0, 1], e.g. 0.05 for 5%; got {raw!r}")
    return value


class DayTime(NamedTuple):
    """A file's time in a config on one day."""

    day: str
    seconds: float  # median over the day's commits of the commit's mean time per run
    commits: int
    run_spread: float  # robust sd of the commits' times that day (0 with one commit)


class Move(NamedTuple):
    """A file whose time rose beyond its noise; the commit fields are filled in later."""

    key: Key
    before_s: float
    after_s: float
    noise_s: float
    noise_from: str  # "file" (its own day-to-day noise) or "config" (the config's, that day)
    baseline_days: int
    since: str


class CommitTime(NamedTuple):
    sha: str
    at: object  # when the commit was pushed to main (else when its first run finished): orders commits
    seconds: float  # mean time per run
    runs: int


def config_noise(levels: Iterable[tuple[Key, float, float]]) -> dict[tuple[str, str] | None, float]:
    """Per config, the robust relative spread of the day's change over its files; under the key
    None, the same over every config's files, for configs with too few files to tell.

    `levels` holds (key, earlier median, the day's time) for every file that ran that day.
    Only groups of at least MIN_POOLED_FILES files get a value.
    """
    logs: dict[tuple[str, str] | None, list[float]] = defaultdict(list)
    for (env, cfg, _), before, today in levels:
        if before > 0 and today > 0:
            logs[(env, cfg)].append(math.log(today / before))
            logs[None].append(logs[(env, cfg)][-1])
    out = {}
    for group, values in logs.items():
        if len(values) >= MIN_POOLED_FILES:
            mid = statistics.median(values)
            out[group] = _MAD_TO_SD * statistics.median(abs(v - mid) for v in values)
    return out


def assess(key: Key, days: Sequence[DayTime], day: str, pooled: float | None, rules: Rules = Rules()) -> Move | None:
    """The move of one file in one config as of `day` (see the module docstring), or None."""
    days = sorted(days)
    if not days or days[-1].day != day or len(days) < 2:
        return None
    today = days[-1]
    if today.seconds - statistics.median(d.seconds for d in days[:-1]) < rules.min_jump_s:
        return None  # not above the window's median: nothing new, or a move the window has absorbed
    start = _move_start([d.seconds for d in days])
    reference, moved = days[:start], days[start:]
    before = statistics.median(d.seconds for d in reference)
    after = statistics.median(d.seconds for d in moved)
    if len(reference) >= rules.min_baseline_days:
        noise, source = _MAD_TO_SD * statistics.median(abs(d.seconds - before) for d in reference), "file"
    elif pooled is not None:
        noise, source = pooled * before, "config"
    else:
        return None
    if today.commits > 0:
        noise = max(noise, _MEDIAN_SE * today.run_spread / math.sqrt(today.commits))
    threshold = max(rules.min_jump_s, rules.noise_multiple * noise)
    if after - before < threshold or today.seconds - before < threshold:
        return None  # not slow overall, or not slow any more
    return Move(key, before, after, noise, source, len(reference), moved[0].day)


def _move_start(values: Sequence[float]) -> int:
    """Where the series splits into a level before and a level since, the latter ending with
    the last value: the split (at least one value on each side) whose two medians leave the
    smallest sum of absolute deviations; the latest among equals."""
    best, best_cost = len(values) - 1, math.inf
    for k in range(1, len(values)):
        head, tail = values[:k], values[k:]
        mid_head, mid_tail = statistics.median(head), statistics.median(tail)
        cost = sum(abs(v - mid_head) for v in head) + sum(abs(v - mid_tail) for v in tail)
        if cost <= best_cost:
            best, best_cost = k, cost
    return best


def first_slow_commit(commits: Sequence[CommitTime], before: float, after: float) -> tuple[int, int]:
    """(index of the first slow commit, index of the last fast one or -1) in `commits`, in
    commit order: the split with the fewest commits on the wrong side of the midpoint,
    the earliest among equals. Slow commits after the split must exist."""
    midpoint = (before + after) / 2
    slow = [c.seconds > midpoint for c in commits]
    wrong = sum(not s for s in slow)  # split at 0: every fast commit is after it
    best, best_wrong = 0, wrong
    for k in range(1, len(commits)):
        wrong += 1 if slow[k - 1] else -1
        if wrong < best_wrong:
            best, best_wrong = k, wrong
    return best, best - 1


# ---- the daily table ------------------------------------------------------------------------

SQL = dict(SqlFiles(__file__).steps("regressions"))


class RegressionsReport(NamedTuple):
    day: str
    window_days_read: int
    files_seen: int  # (config, file) pairs that ran on the day
    rows: list[dict]
    days_rebuilt: list[str] = []  # days of test times older SQL wrote, rebuilt first
    days_outdated_kept: list[str] = []  # such days without their test_results, read as they are


def time_days(day: str, window_days: int) -> list[str]:
    """The days of test times a window reads: its own and the look-back days before it, whose
    shard rows complete the runs straddling its first day."""
    return days_ending(day, window_days + RUN_LOOKBACK_DAYS)


def find_test_time_regressions(lake: Lake, day: str, rules: Rules = Rules(),
                               main_branch: str = DEFAULT_MAIN_BRANCH) -> RegressionsReport:
    """The day's regressions as rows of REGRESSIONS_SCHEMA (largest cost share first); their commits
    in the order of their pushes to `main_branch`, the configured one."""
    con = connect()
    try:
        define_seconds_sum(con)
        window = days_ending(day, rules.window_days)
        read = lake.register(con, "test_time_sha_daily", window, name="sha_daily")
        if read == 0:
            return RegressionsReport(day, 0, 0, [])
        _split_runs(con, lake, day, rules.window_days)
        con.execute(SQL["daily_table"])
        for d in window:
            if lake.register(con, "test_time_sha_daily", [d], name="sha_day"):
                execute(con, SQL["add_day"], {"mad_to_sd": _MAD_TO_SD, "day": d})
        levels = execute(con, SQL["levels"], {"day": day}).fetchall()
        totals: dict[tuple[str, str], float] = defaultdict(float)
        for env, cfg, _, before, _ in levels:
            totals[(env, cfg)] += before
        ran = [((env, cfg, f), before, today) for env, cfg, f, before, today in levels if today is not None]
        pooled = config_noise(ran)
        candidates = [key for key, before, today in ran if today - before >= rules.min_jump_s]
        moves = []
        for key, days in _series(con, candidates).items():
            move = assess(key, days, day, pooled.get(key[:2], pooled.get(None)), rules)
            if move is not None:
                moves.append(move)
        commits = _commits(con, lake, moves, day, rules.window_days, main_branch)
    finally:
        con.close()
    rows = [_row(m, commits.get(m.key, []), totals[m.key[:2]], day) for m in moves]
    rows.sort(key=lambda r: (-r["cost_share"], r["build_env"], r["test_config"], r["file"]))
    return RegressionsReport(day, read, len(ran), rows)


def _split_runs(con, lake: Lake, day: str, window_days: int) -> None:
    """Table split_runs: the window's runs whose reports the days split (or a day summed only
    later attempts of), joined as the test times' window joins them (sql/regressions.sql)."""
    if register_current(con, lake, "test_time_daily", time_days(day, window_days), "time_daily",
                        TIME_DAILY_RUN_COLUMNS) == 0:
        con.execute(SQL["no_split_runs"])
        return
    define_run_times(con)
    execute(con, SQL["split_runs"], {"first_day": days_ending(day, window_days)[0]})


def _series(con, keys: list[Key]) -> dict[Key, list[DayTime]]:
    if not keys:
        return {}
    con.register("wanted", pa.table(list(zip(*keys)), names=["build_env", "test_config", "file"]))
    out: dict[Key, list[DayTime]] = defaultdict(list)
    for env, cfg, f, d, seconds, commits, spread in con.execute(SQL["series"]).fetchall():
        out[(env, cfg, f)].append(DayTime(d, seconds, commits, spread))
    return out


def _commits(con, lake: Lake, moves: list[Move], day: str, window_days: int,
             main_branch: str) -> dict[Key, list[CommitTime]]:
    """Each move's commits from the day before its start to `day`, in main's commit order: when
    the commit was pushed to main (its runs finish in another order: queues vary, and a slow
    commit's runs finish late), or when its first run finished if its push is not in the lake."""
    if not moves:
        return {}
    if lake.register(con, "push", days_ending(day, window_days + 1), name="pushes") == 0:
        con.execute(SQL["no_pushes"])
    con.register("moved", pa.table(list(zip(*[(*m.key, m.since) for m in moves])),
                                   names=["build_env", "test_config", "file", "since"]))
    out: dict[Key, list[CommitTime]] = defaultdict(list)
    found = execute(con, SQL["commits"], {"day": day, "main_ref": main_branch}).fetchall()
    for env, cfg, f, sha, at, seconds, runs in found:
        out[(env, cfg, f)].append(CommitTime(sha, at, seconds, runs))
    return out


def _row(move: Move, commits: list[CommitTime], config_total: float, day: str) -> dict:
    env, cfg, f = move.key
    first = last = first_at = None
    slow_runs = 0
    if commits:
        i, j = first_slow_commit(commits, move.before_s, move.after_s)
        first, first_at = commits[i].sha, commits[i].at
        last = commits[j].sha if j >= 0 else None
        slow_runs = sum(c.runs for c in commits[i:])
    jump = move.after_s - move.before_s
    since = dt.date.fromisoformat(move.since)
    return {
        "build_env": env, "test_config": cfg, "file": f,
        "before_s": move.before_s, "after_s": move.after_s, "jump_s": jump,
        "jump_ratio": move.after_s / move.before_s if move.before_s > 0 else math.inf,
        "noise_s": move.noise_s, "noise_multiple": jump / move.noise_s if move.noise_s > 0 else math.inf,
        "noise_from": move.noise_from, "baseline_days": move.baseline_days, "since": since,
        "slow_days": (dt.date.fromisoformat(day) - since).days + 1, "first_slow_sha": first, "last_fast_sha": last,
        "first_slow_at": first_at, "slow_runs": slow_runs,
        "config_total_s": config_total, "cost_share": jump / config_total if config_total > 0 else math.inf,
    }


def write_test_time_regressions(lake: Lake, day: str, rules: Rules = Rules(),
                                main_branch: str = DEFAULT_MAIN_BRANCH) -> RegressionsReport:
    """Find the day's regressions and write them to the lake table `test_time_regressions`. The
    window's days of test times written by older SQL are rebuilt first (`rebuild_outdated_time_days`)."""
    outdated = rebuild_outdated_time_days(lake, {"test_time_daily": time_days(day, rules.window_days),
                                                 "test_time_sha_daily": days_ending(day, rules.window_days)})
    report = find_test_time_regressions(lake, day, rules, main_branch)
    lake.write("test_time_regressions", day, pa.Table.from_pylist(report.rows, schema=REGRESSIONS_SCHEMA))
    return report._replace(days_rebuilt=outdated.rebuilt, days_outdated_kept=outdated.kept)


def markdown_table(rows: Sequence[Mapping], limit: int = 20,
                   empty: str = "No test file got slower beyond its noise.") -> str:
    """The largest regressions as a Markdown table for the Dagster UI."""
    if not rows:
        return empty
    lines = ["| config | file | before s | after s | x | share of config | since | first slow commit |",
             "|---|---|---:|---:|---:|---:|---|---|"]
    for r in rows[:limit]:
        sha = (r["first_slow_sha"] or "")[:12]
        lines.append(f"| {r['build_env']} / {r['test_config']} | {r['file']} | {r['before_s']:.0f} | "
                     f"{r['after_s']:.0f} | {r['jump_ratio']:.2f} | {r['cost_share']:.1%} | {r['since']} | {sha} |")
    if len(rows) > limit:
        lines.append(f"\n... and {len(rows) - limit} more in the lake table test_time_regressions")
    return "\n".join(lines)
