"""Flaky, broken or healthy: one verdict per test over a window of days (default 14).

Reads only the daily aggregates of `derived.results` (`test_daily_stats`, `test_sha_outcomes`,
`test_jobs`) for the window, never `test_results`, so a new day costs what that day's
aggregates cost; plus the window's `push` rows (a few hundred a day) for main's commit order.
Infra-suspect jobs are already out of every counter used here (see
`derived.results`): a job that died or where most tests failed at once says nothing about its
tests.

Flake evidence, counted in runs (one per job, so "events" are distinct jobs):
  * rerun pass: the test failed, then passed on rerun in the same job;
  * same-commit pair: a final failure on a commit and configuration where the test also
    passed (another job that day, or a re-attempt of the same run's shard on any day of the
    window: a re-attempt job without a failure row for the test passed it);
  * flip: a final failure on a main commit whose neighbours on the same configuration
    (the previous and next main commits where that shard ran, at most MAX_FLIP_GAP commits
    away in main's order) passed.
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

The flake rate is flake events over runs (runs that executed, not skipped, outside infra
jobs), with a Wilson 95% interval: a rate per run on the configurations that ran the test.
Per-platform evidence (`flaky_test_platforms`) feeds the disabled list's platforms and the
smoke sets.
"""

from __future__ import annotations

from dataclasses import dataclass

from resources.lake import Lake, connect
from torchci_assets.partitions import days_around, days_ending

WINDOW_DAYS = 14
MIN_FLAKE_EVENTS = 3
MIN_RUNS = 20
BROKEN_MIN_COMMITS = 2
MAX_FLIP_GAP = 2
Z = 1.96
VERDICTS = ("flaky", "broken", "healthy", "insufficient_data")

TEST = "file, classname, name"


def wilson_sql(k: str, n: str, sign: str) -> str:
    """Wilson score bound (sign '-' lower, '+' upper) for k successes in n trials; null when n = 0."""
    return (f"CASE WHEN {n} > 0 THEN greatest(0.0, least(1.0, (({k}) / ({n}) + {Z * Z / 2} / ({n}) {sign} {Z} * "
            f"sqrt(({k}) / ({n}) * (1 - ({k}) / ({n})) / ({n}) + {Z * Z / 4} / (({n}) * ({n})))) "
            f"/ (1 + {Z * Z} / ({n})))) END")


# Step by step, each a temp table: the window's jobs, per (test, config, commit) outcomes with
# their same-commit passes, main-branch sequences for flips and broken ranges, then per
# (test, platform) evidence and per-test verdicts.
_STEPS = [
    ("jobs", """
        SELECT job_id, any_value(workflow_id) AS run_id, any_value(head_sha) AS head_sha,
               any_value(branch_class) AS branch_class, any_value(build_env) AS build_env,
               any_value(test_config) AS test_config, any_value(platform) AS platform,
               any_value(shard) AS shard, bool_or(infra_suspect) AS infra, sum(executed) AS executed,
               min(coalesce(job_started_at, job_completed_at)) AS started
        FROM w_jobs WHERE job_id IS NOT NULL GROUP BY job_id
    """),
    ("sha", f"""
        SELECT {TEST}, build_env, test_config, platform, branch_class, head_sha,
               sum(failed + errors) AS fails, sum(passed) AS passes, sum(rerun_passed) AS rerun_passed,
               sum(rerun_count) AS reruns, list_distinct(flatten(list(coalesce(failing_job_ids, [])))) AS job_ids
        FROM w_outcomes GROUP BY ALL
    """),
    ("sha_jobs", f"""
        SELECT s.*, j.run_id, j.shard
        FROM (SELECT {TEST}, build_env, test_config, branch_class, head_sha, unnest(job_ids) AS job_id FROM sha) s
        JOIN jobs j USING (job_id)
    """),
    # a re-attempt of a failing job's shard (same run, config and shard) that ran tests, was
    # not infra, and has no failure or rerun row for this test on this commit: it passed it
    ("retry_pass", """
        SELECT DISTINCT sj.file, sj.classname, sj.name, sj.build_env, sj.test_config, sj.head_sha
        FROM sha_jobs sj
        JOIN jobs j2 ON j2.run_id = sj.run_id AND j2.build_env = sj.build_env AND j2.test_config = sj.test_config
             AND j2.shard IS NOT DISTINCT FROM sj.shard AND j2.job_id <> sj.job_id
             AND NOT j2.infra AND j2.executed > 0
        ANTI JOIN sha_jobs other ON other.file = sj.file AND other.classname = sj.classname AND other.name = sj.name
             AND other.head_sha = sj.head_sha AND other.job_id = j2.job_id
    """),
    # configurations that rerun failing tests (any rerun in the window)
    ("rerun_configs", """
        SELECT build_env, test_config FROM w_stats GROUP BY ALL HAVING sum(rerun_count) > 0
    """),
    ("sha_status", f"""
        SELECT s.file, s.classname, s.name, s.build_env, s.test_config, s.platform, s.branch_class, s.head_sha,
               s.fails, s.passes, s.rerun_passed,
               s.passes > 0 OR r.file IS NOT NULL AS has_pass,
               s.fails > 0 AND has_pass AS pair,
               s.fails > 0 AND NOT has_pass AS failed_commit,
               s.reruns > 0 OR rc.build_env IS NULL AS credible
        FROM sha s LEFT JOIN retry_pass r USING ({TEST}, build_env, test_config, head_sha)
        LEFT JOIN rerun_configs rc USING (build_env, test_config)
    """),
    # main's commit order: when it was pushed to main (test jobs start in a different order:
    # builds and queues vary), or when its first test job started if its push is missing
    ("commit_rank", """
        WITH pushed AS (
            SELECT after AS head_sha, min(received_at) AS t FROM w_push WHERE ref = 'refs/heads/main' GROUP BY 1
        ),
        ran AS (SELECT head_sha, min(started) AS t FROM jobs WHERE branch_class = 'main' AND head_sha IS NOT NULL
                GROUP BY 1)
        SELECT head_sha, row_number() OVER (ORDER BY coalesce(p.t, r.t), head_sha) AS rank
        FROM ran r LEFT JOIN pushed p USING (head_sha)
    """),
    # for each test and config with a main failure: every main commit where that shard ran
    ("seq", f"""
        WITH shards AS (
            SELECT DISTINCT {TEST}, build_env, test_config, shard FROM sha_jobs WHERE branch_class = 'main'
        ),
        covered AS (
            SELECT DISTINCT build_env, test_config, platform, shard, head_sha FROM jobs
            WHERE branch_class = 'main' AND NOT infra AND executed > 0
        ),
        tested AS (
            SELECT DISTINCT {TEST}, build_env, test_config, platform, head_sha
            FROM shards JOIN covered USING (build_env, test_config, shard)
        )
        SELECT t.*, c.rank,
               coalesce(st.failed_commit, false) AS f, coalesce(st.fails, 0) AS fails,
               coalesce(st.credible, false) AS credible
        FROM tested t JOIN commit_rank c USING (head_sha)
        LEFT JOIN (SELECT * EXCLUDE (platform) FROM sha_status WHERE branch_class = 'main') st
             USING ({TEST}, build_env, test_config, head_sha)
    """),
    ("seq_n", f"""
        SELECT *, lag(f) OVER w AS prev_f, lead(f) OVER w AS next_f,
               lag(rank) OVER w AS prev_rank, lead(rank) OVER w AS next_rank,
               row_number() OVER w - row_number() OVER (PARTITION BY {TEST}, build_env, test_config, f ORDER BY rank)
                   AS island
        FROM seq
        WINDOW w AS (PARTITION BY {TEST}, build_env, test_config ORDER BY rank)
    """),
    # consecutive failed commits on one config: [first_rank, last_rank], fixed at the next covered commit
    ("broken_ranges", f"""
        SELECT {TEST}, build_env, test_config, count(*) AS commits, sum(fails) AS failures,
               min(rank) AS first_rank, max(rank) AS last_rank,
               arg_min(head_sha, rank) AS from_sha,
               CASE WHEN count(next_rank) = count(*) THEN max(next_rank) END AS fixed_rank  -- null: still failing
        FROM seq_n WHERE f GROUP BY {TEST}, build_env, test_config, island
        HAVING count(*) >= {BROKEN_MIN_COMMITS}
    """),
    ("flips", f"""
        SELECT s.* FROM seq_n s
        WHERE s.f AND s.credible AND NOT s.prev_f AND NOT s.next_f
          AND s.rank - s.prev_rank <= {MAX_FLIP_GAP} AND s.next_rank - s.rank <= {MAX_FLIP_GAP}
          AND NOT EXISTS (SELECT 1 FROM broken_ranges b WHERE b.file = s.file AND b.classname = s.classname
                          AND b.name = s.name AND s.rank BETWEEN b.first_rank AND b.last_rank)
    """),
    ("broken", f"""
        SELECT {TEST}, count(*) AS broken_ranges, sum(failures)::BIGINT AS broken_failures,
               arg_max({{'from': from_sha, 'fixed': c.head_sha}}, first_rank) AS latest
        FROM broken_ranges b LEFT JOIN commit_rank c ON c.rank = b.fixed_rank
        GROUP BY ALL
    """),
    # commits where the test failed on one platform only, and some other platform ran tests
    ("exclusive", f"""
        WITH fp AS (SELECT DISTINCT {TEST}, platform, head_sha FROM sha_status WHERE fails > 0),
        ran AS (SELECT DISTINCT head_sha, platform FROM jobs WHERE NOT infra AND executed > 0)
        SELECT {TEST}, platform, count(*) AS exclusive_failing_shas FROM fp
        WHERE NOT EXISTS (SELECT 1 FROM fp o WHERE o.file = fp.file AND o.classname = fp.classname
                          AND o.name = fp.name AND o.head_sha = fp.head_sha AND o.platform <> fp.platform)
          AND EXISTS (SELECT 1 FROM ran r WHERE r.head_sha = fp.head_sha AND r.platform <> fp.platform)
        GROUP BY ALL
    """),
    ("platform_evidence", f"""
        WITH st AS (
            SELECT {TEST}, platform, sum(runs - skipped)::BIGINT AS runs, sum(failed + errors)::BIGINT AS failures,
                   sum(rerun_passed)::BIGINT AS rerun_passes, sum(rerun_failed)::BIGINT AS rerun_failures,
                   sum(infra_runs)::BIGINT AS infra_runs, sum(infra_failures)::BIGINT AS infra_failures,
                   min(first_seen) AS first_seen, max(last_seen) AS last_seen
            FROM w_stats GROUP BY ALL
        ),
        sc AS (
            SELECT {TEST}, platform, count(*) FILTER (WHERE pair) AS same_commit_pairs,
                   coalesce(sum(fails) FILTER (WHERE pair AND credible), 0)::BIGINT AS pair_failures,
                   count(DISTINCT head_sha) FILTER (WHERE fails > 0) AS failing_shas
            FROM sha_status GROUP BY ALL
        ),
        fl AS (SELECT {TEST}, platform, count(*) AS flips, sum(fails)::BIGINT AS flip_failures FROM flips GROUP BY ALL)
        SELECT st.*, coalesce(sc.same_commit_pairs, 0) AS same_commit_pairs,
               coalesce(sc.pair_failures, 0) AS pair_failures, coalesce(fl.flips, 0) AS flips,
               coalesce(fl.flip_failures, 0) AS flip_failures, coalesce(sc.failing_shas, 0) AS failing_shas,
               coalesce(ex.exclusive_failing_shas, 0) AS exclusive_failing_shas,
               st.rerun_passes + coalesce(sc.pair_failures, 0) + coalesce(fl.flip_failures, 0) AS flake_events
        FROM st LEFT JOIN sc USING ({TEST}, platform) LEFT JOIN fl USING ({TEST}, platform)
        LEFT JOIN exclusive ex USING ({TEST}, platform)
    """),
    ("verdicts", f"""
        WITH t AS (
            SELECT {TEST}, sum(runs)::BIGINT AS runs, sum(failures)::BIGINT AS failures,
                   sum(rerun_passes)::BIGINT AS rerun_passes, sum(rerun_failures)::BIGINT AS rerun_failures,
                   sum(same_commit_pairs)::BIGINT AS same_commit_pairs, sum(flips)::BIGINT AS flips,
                   sum(flake_events)::BIGINT AS flake_events,
                   sum(infra_runs)::BIGINT AS infra_runs, sum(infra_failures)::BIGINT AS infra_failures,
                   list(platform ORDER BY platform) FILTER (WHERE runs > 0) AS platforms,
                   coalesce(list(platform ORDER BY platform) FILTER (WHERE flake_events > 0), []) AS flaky_platforms,
                   min(first_seen) AS first_seen, max(last_seen) AS last_seen
            FROM platform_evidence GROUP BY ALL
        )
        SELECT t.*, flake_events / nullif(runs, 0) AS flake_rate,
               {wilson_sql('flake_events', 'runs', '-')} AS flake_rate_low,
               {wilson_sql('flake_events', 'runs', '+')} AS flake_rate_high,
               coalesce(b.broken_ranges, 0) AS broken_ranges, coalesce(b.broken_failures, 0) AS broken_failures,
               b.latest['from'] AS broken_from_sha, b.latest['fixed'] AS broken_fixed_sha,
               CASE WHEN flake_events >= {MIN_FLAKE_EVENTS} THEN 'flaky'
                    WHEN b.broken_ranges > 0 THEN 'broken'
                    WHEN runs < {MIN_RUNS} OR flake_events > 0 THEN 'insufficient_data'
                    ELSE 'healthy' END AS verdict
        FROM t LEFT JOIN broken b USING ({TEST})
        ORDER BY verdict, flake_rate DESC NULLS LAST, {TEST}
    """),
]


_NO_PUSHES = "SELECT NULL::VARCHAR AS ref, NULL::VARCHAR AS after, NULL::TIMESTAMPTZ AS received_at WHERE false"


@dataclass
class FlakyReport:
    day: str
    window_days: int
    days_read: int
    tests: int
    verdicts: dict[str, int]


def register_window(con, lake: Lake, day: str, window_days: int) -> int:
    """Views w_stats, w_outcomes, w_jobs over the window's aggregates, and w_push over its pushes
    (and the day before: commits pushed then ran in the window), for main's commit order;
    returns the days with stats.

    The window's last day must exist (it is what this partition is about); earlier days may be
    missing (the lake's first days)."""
    days = days_ending(day, window_days)
    for table in ("test_daily_stats", "test_sha_outcomes", "test_jobs"):
        if not lake.files(table, [day]):
            raise FileNotFoundError(f"{table} has no partition for {day} in {lake.store.display(table)}: "
                                    "materialize it first")
    lake.register(con, "test_daily_stats", days, name="w_stats")
    lake.register(con, "test_sha_outcomes", days, name="w_outcomes")
    lake.register(con, "test_jobs", days, name="w_jobs")
    if lake.register(con, "push", days_around(day, window_days), name="w_push") == 0:
        con.execute(f"CREATE OR REPLACE TEMP VIEW w_push AS {_NO_PUSHES}")
    return len(lake.files("test_daily_stats", days))


def compute(con) -> None:
    """Create the step tables (see _STEPS) in `con`, whose w_* views are registered."""
    for name, sql in _STEPS:
        con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS {sql}")


def build_flaky_tests(lake: Lake, day: str, window_days: int = WINDOW_DAYS) -> FlakyReport:
    """Write `flaky_tests` (one row per test) and `flaky_test_platforms` (per test and platform)
    for the window ending on `day`."""
    con = connect()
    try:
        days_read = register_window(con, lake, day, window_days)
        compute(con)
        days = days_ending(day, window_days)
        span = f"DATE '{days[0]}' AS window_start, DATE '{days[-1]}' AS window_end"
        tests = lake.write("flaky_tests", day, con.sql(f"SELECT *, {span} FROM verdicts").to_arrow_table())
        lake.write("flaky_test_platforms", day, con.sql(
            f"SELECT *, {span} FROM platform_evidence ORDER BY {TEST}, platform").to_arrow_table())
        verdicts = dict(con.execute("SELECT verdict, count(*) FROM verdicts GROUP BY ALL").fetchall())
    finally:
        con.close()
    return FlakyReport(day, window_days, days_read, tests, {v: int(verdicts.get(v, 0)) for v in VERDICTS})
