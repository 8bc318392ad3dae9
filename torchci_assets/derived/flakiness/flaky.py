"""Flaky, broken or healthy: one verdict per test over a window of days (default 14).

Reads the daily aggregates of `derived.results` (`test_daily_stats`, `test_sha_outcomes`,
`test_jobs`) for the window, so a new day costs what that day's aggregates cost; plus the
window's `push` rows (a few hundred a day) for main's commit order, and of `test_results` only
which main jobs reported a test skipped (`MAIN_SKIPS`, extracted once per file): the aggregates
keep no commit where the test did not fail, so they cannot tell a skip from a pass.
Infra-suspect jobs are already out of every counter used here (see
`derived.results`): a job that died or where most tests failed at once says nothing about its
tests.

Flake evidence, counted in runs (one per job, so "events" are distinct jobs):
  * rerun pass: the test failed, then passed on rerun in the same job;
  * same-commit pair: a final failure on a commit and configuration where the test also
    passed (another job that day, or a re-attempt of the same run's shard on any day of the
    window: a re-attempt job without a failure row for the test passed it);
  * flip: a final failure on a main commit whose neighbours on the same configuration
    (the previous and next main commits where that shard ran the test, at most MAX_FLIP_GAP
    commits away in main's order) passed, unless every configuration that ran the test on that
    commit, two or more, failed it: the commit broke it and was reverted or fixed at once, where
    a flake fails one configuration at a time. A commit where the shard ran but reported the test
    skipped (disabled after the failure, say) did not run it: it is neither a pass nor a
    failure, and the neighbours are the commits around it where the test ran.
A final failure counts for a pair or a flip only if it is credible as a test failure: on a
configuration that reruns failing tests (any rerun in the window), the failure must have
been rerun. A failure that was never retried there means the process died under the test
(a CUDA error that poisoned the few tests left in the shard, too few for the job to be
flagged as infra), which says nothing about the test.

Broken: on one configuration, consecutive main commits (BROKEN_MIN_COMMITS or more) where
every run of the test failed, with no pass at those commits. Reruns failing too is what
broken looks like, so rerun failures are never flake evidence, and flips inside a broken
range (as seen by sparse configurations such as periodic ones) are not counted.

Verdict, first rule that applies:
  flaky              flake events in at least MIN_FLAKE_EVENTS jobs;
  broken             a broken range in the window (`broken_from_sha`, `broken_fixed_sha`,
                     null while it still fails);
  insufficient_data  fewer than MIN_RUNS runs, or some flake evidence but too little;
  healthy            otherwise.

Main-branch evidence is counted apart (`main_flake_events`, `main_flaky_platforms`, and
`last_main_flake_at`, when it last flaked on main; per platform also its runs, failures, rerun
passes and same-commit pairs on main, which a new DISABLED issue reports; and the platforms of its
main flakes as PyTorch's flaky bot tells jobs apart, `main_flaky_os_platforms` of the jobs that are
neither dynamo nor inductor jobs and `main_flaky_configs` of those that are): the verdict is over
every branch, which is what Dr. CI wants (a test flaky anywhere may explain a pull request's
failure), but only main's evidence disables a test, reopens its closed DISABLED issue or widens
its platforms. PyTorch's flaky bot reads main's jobs only: a pull request that makes its own
test flaky, or breaks it, must not get it disabled for everyone.

The flake rate is flake events over runs (runs that executed, not skipped, outside infra
jobs), with a Wilson 95% interval: a rate per run on the configurations that ran the test.
Per-platform evidence (`flaky_test_platforms`) feeds the disabled list's platforms and the
smoke sets.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from resources.lake import Lake, connect
from resources.lake_extracts import Extract, register_extract
from resources.sql import Columns, SqlFiles, relation, run_steps
from torchci_assets.derived.flakiness import window_stats
from torchci_assets.derived.flakiness.unchanged import forget, inputs_digest, recorded, remember
from torchci_assets.derived.results.stats import DEFAULT_MAIN_BRANCH
from torchci_assets.partitions import days_around, days_ending

WINDOW_DAYS = 14
MIN_FLAKE_EVENTS = 3
MIN_RUNS = 20
BROKEN_MIN_COMMITS = 2
MAX_FLIP_GAP = 2
Z = 1.96
VERDICTS = ("flaky", "broken", "healthy", "insufficient_data")
# Columns added to flaky_tests and flaky_test_platforms after partitions were written: a reader of
# an older partition (`results.columns.register_current`) gets them as NULL, "not counted then".
FLAKY_COLUMNS_ADDED = Columns({"main_flake_events": "BIGINT", "main_flaky_platforms": "VARCHAR[]",
                               "last_main_flake_at": "TIMESTAMPTZ", "main_flaky_os_platforms": "VARCHAR[]",
                               "main_flaky_configs": "VARCHAR[]"})
PLATFORM_COLUMNS_ADDED = Columns({"main_rerun_passes": "BIGINT", "main_flake_events": "BIGINT",
                                  "last_main_flake_at": "TIMESTAMPTZ", "main_runs": "BIGINT",
                                  "main_failures": "BIGINT", "main_same_commit_pairs": "BIGINT"})

SQL = SqlFiles(__file__)
# Per test, the main jobs that reported it skipped, extracted once per test_results file beside
# flaky_tests' partitions (resources.lake_extracts): what tells flips a skip from a pass.
MAIN_SKIPS = Extract("main_skips", "test_results", "flaky_tests", SQL)
# the thresholds the steps of flaky_tests.sql read
PARAMETERS = {"broken_min_commits": BROKEN_MIN_COMMITS, "max_flip_gap": MAX_FLIP_GAP,
              "min_flake_events": MIN_FLAKE_EVENTS, "min_runs": MIN_RUNS, "z": Z}


@dataclass
class FlakyReport:
    day: str
    window_days: int
    days_read: int
    tests: int
    verdicts: dict[str, int]
    unchanged: bool = False  # left as written: no input changed since


def register_window(con, lake: Lake, day: str, window_days: int, keep_past_sums: bool = False) -> int:
    """Tables w_test_stats and w_config_reruns of the window's daily stats (`window_stats`; with
    `keep_past_sums`, an intra-day refresh, the earlier days' sums are kept between refreshes),
    views w_outcomes and w_jobs over its other aggregates, w_skips over its main jobs' skips
    (`MAIN_SKIPS`), and w_push over its pushes (and the day before: commits pushed then ran in
    the window), for main's commit order; returns the days with stats.

    The window's last day must exist (it is what this partition is about); earlier days may be
    missing (the lake's first days)."""
    days = days_ending(day, window_days)
    for table in ("test_daily_stats", "test_sha_outcomes", "test_jobs"):
        if not lake.files(table, [day]):
            raise FileNotFoundError(f"{table} has no partition for {day} in {lake.store.display(table)}: "
                                    "materialize it first")
    window_stats.register(con, lake, day, days[:-1], keep_past_sums)
    lake.register(con, "test_sha_outcomes", days, name="w_outcomes_files")
    lake.register(con, "test_jobs", days, name="w_jobs_files")
    run_steps(con, SQL.steps("window_views"))
    if lake.register(con, "push", days_around(day, window_days), name="w_push") == 0:
        con.execute(SQL["no_pushes"])
    if register_extract(con, lake, MAIN_SKIPS, days, "w_skips") == 0:
        con.execute(SQL["no_skips"])
    return len(lake.files("test_daily_stats", days))


def compute(con, main_branch: str = DEFAULT_MAIN_BRANCH) -> None:
    """Create the step tables of flaky_tests.sql in `con`, whose w_* tables and views are registered.
    `main_branch` (the configured one, as a ref) orders main's commits by their pushes to it."""
    con.execute(SQL["wilson"])
    run_steps(con, SQL.steps("test_configs"))
    run_steps(con, SQL.steps("flaky_tests"), {**PARAMETERS, "main_ref": main_branch})


def window_inputs(day: str, window_days: int) -> dict[str, list[str]]:
    """The partitions `flaky_tests` of `day` reads, table -> days (as register_window reads them).
    `test_results` (its skips) is left out: test_daily_stats, built from it, changes whenever it
    does, and its files' footers are the dearest to read."""
    days = days_ending(day, window_days)
    return {"test_daily_stats": days, "test_sha_outcomes": days, "test_jobs": days,
            "push": days_around(day, window_days)}


def build_flaky_tests(lake: Lake, day: str, window_days: int = WINDOW_DAYS,
                      skip_if_unchanged: bool = False, main_branch: str = DEFAULT_MAIN_BRANCH) -> FlakyReport:
    """Write `flaky_tests` (one row per test) and `flaky_test_platforms` (per test and platform)
    for the window ending on `day`, main's commits being the pushes to `main_branch` (the
    configured one). `skip_if_unchanged` (an intra-day refresh): leave both as they are when no
    input partition changed since they were written (`unchanged`), and keep the sums of the
    window's earlier days for the next refresh (`window_stats`)."""
    # the SQL and the branch too: a partition written by another version of them is rebuilt, not kept
    digest = inputs_digest(lake, window_inputs(day, window_days),
                           {"window_days": window_days, **PARAMETERS, "main_ref": main_branch,
                            "sql": SQL["flaky_tests"]})
    written = lake.files("flaky_tests", [day]) and lake.files("flaky_test_platforms", [day])
    if skip_if_unchanged and written and recorded(lake, "flaky_tests", day) == digest:
        return _report_of_written(lake, day, window_days)
    forget(lake, "flaky_tests", day)
    con = connect()
    try:
        days_read = register_window(con, lake, day, window_days, keep_past_sums=skip_if_unchanged)
        compute(con, main_branch)
        days = days_ending(day, window_days)
        span = {"window_start": dt.date.fromisoformat(days[0]), "window_end": dt.date.fromisoformat(days[-1])}
        tests = lake.write("flaky_tests", day, relation(con, SQL["flaky_tests_rows"], span).to_arrow_table())
        lake.write("flaky_test_platforms", day,
                   relation(con, SQL["flaky_test_platforms_rows"], span).to_arrow_table())
        verdicts = dict(con.execute("SELECT verdict, count(*) FROM verdicts GROUP BY ALL").fetchall())
    finally:
        con.close()
    remember(lake, "flaky_tests", day, digest)
    return FlakyReport(day, window_days, days_read, tests, {v: int(verdicts.get(v, 0)) for v in VERDICTS})


def _report_of_written(lake: Lake, day: str, window_days: int) -> FlakyReport:
    """The report of the partition as it was written (its inputs have not changed since)."""
    con = connect()
    try:
        lake.register(con, "flaky_tests", [day], name="f")
        verdicts = dict(con.execute("SELECT verdict, count(*) FROM f GROUP BY ALL").fetchall())
    finally:
        con.close()
    days_read = len(lake.files("test_daily_stats", days_ending(day, window_days)))
    return FlakyReport(day, window_days, days_read, sum(verdicts.values()),
                       {v: int(verdicts.get(v, 0)) for v in VERDICTS}, unchanged=True)
