"""Speed of `flaky_tests` over a 14-day window of ~50 million test rows, and the cost of a new day.

What is generated (the simulator writes ~140k rows a simulated day at ~8 s a day, so 50M rows
would take most of an hour; this generates the same tables directly with DuckDB):
  * `test_results` for 14 days, ~3.6M rows a day: TESTS tests in 500 files, each run by about
    6 of 16 configurations (5 platforms) in one of 4 shards, on 24 main commits and 60
    pull-request commits a day (a PR runs a fifth of the files, on the 8 PR configurations),
    3% of jobs re-attempted, 1% infra-suspect jobs; 2.5% of tests flaky (0.5%..30% per try,
    up to two reruns), 40 tests broken for 5 main commits each;
  * `test_jobs` for the same jobs.
The daily aggregates (`test_daily_stats`, `test_sha_outcomes`) are then
built from them by the production code (`derived.results.stats.build_test_daily_stats`), day by day.

What is timed: `build_flaky_tests` for the window ending on the last day (reads the 14 days
of aggregates, writes `flaky_tests` and `flaky_test_platforms`), then what a new day costs:
aggregating that day's rows plus recomputing the window.

Run as `make bench` (python bench/bench_flaky.py [--tests N] [--work DIR]). Data is kept
under --work and reused.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

from resources.lake import Lake, connect
from torchci_assets.derived.flakiness.flaky import build_flaky_tests
from torchci_assets.derived.results.stats import build_test_daily_stats

DAYS = 14
START = dt.date(2026, 10, 1)
MAIN_COMMITS = 24
PR_COMMITS = 60
SHARDS = 4
CONFIGS = [  # build_env, test_config, platform, runs on PRs
    ("linux-jammy-py3.10-gcc11", "default", "linux", True), ("linux-jammy-py3.10-gcc11", "distributed", "linux", True),
    ("linux-jammy-py3.10-clang18", "crossref", "linux", True), ("linux-jammy-py3.10-clang18", "dynamo", "linux", True),
    ("linux-jammy-cuda13.0-py3.10-gcc11", "default", "linux", True),
    ("linux-jammy-cuda13.0-py3.10-gcc11", "distributed", "linux", False),
    ("linux-jammy-py3.10-clang18-asan", "default", "linux", False), ("unit-test / inductor-test", "inductor", "linux", False),
    ("win-vs2022-cpu-py3", "default", "win", True), ("win-vs2022-cuda12.6-py3", "default", "win", False),
    ("macos-py3-arm64", "default", "mac", True), ("macos-py3-arm64-mps", "mps", "mac", False),
    ("linux-noble-rocm-py3.12-mi300", "default", "rocm", False), ("linux-noble-rocm-py3.12-mi300", "distributed", "rocm", True),
    ("linux-noble-xpu-n-py3.10", "default", "xpu", False), ("linux-jammy-aarch64-py3.10", "default", "linux", True),
]


def u(expr: str) -> str:
    """A deterministic uniform in [0, 1) from a hash."""
    return f"(hash({expr}) % 1000003) / 1000003.0"


def generate_day(lake: Lake, d: int, tests: int) -> int:
    day = (START + dt.timedelta(days=d)).isoformat()
    con = connect(memory_limit="2GB")
    try:
        con.execute("SET enable_progress_bar = false")
        values = ", ".join(f"({i}, '{e}', '{c}', '{p}', {str(pr).lower()})" for i, (e, c, p, pr) in enumerate(CONFIGS))
        con.execute(f"CREATE TEMP TABLE cfg AS SELECT * FROM (VALUES {values}) v(cid, build_env, test_config, platform, on_pr)")
        con.execute(f"""
            CREATE TEMP TABLE t AS
            SELECT tid, 'test_f' || (tid % 500) || '.py' AS file, tid % 500 AS fid, 'TestC' || (tid % 2000) AS classname,
                   'test_' || tid AS name,
                   CASE WHEN {u("tid, 'flaky'")} < 0.025 THEN exp(ln(0.005) + {u("tid, 'rate'")} * (ln(0.3) - ln(0.005)))
                        ELSE 0 END AS rate,
                   CASE WHEN tid % {max(1, tests // 40)} = 7 THEN (tid * 7919) % ({DAYS * MAIN_COMMITS} - 5) END AS broken_from
            FROM range({tests}) r(tid)
        """)
        # which configs run a test, in which shard
        con.execute(f"""
            CREATE TEMP TABLE tc AS SELECT t.*, cfg.cid, 1 + hash(tid, cid, 'shard') % {SHARDS} AS shard
            FROM t, cfg WHERE {u("tid, cid")} < 6.0 / 16
        """)
        con.execute(f"""
            CREATE TEMP TABLE jobs AS
            WITH shas AS (
                SELECT 'main' AS branch_class, {d * MAIN_COMMITS} + k AS seq, md5('main' || ({d * MAIN_COMMITS} + k)) AS head_sha
                FROM range({MAIN_COMMITS}) r(k)
                UNION ALL
                SELECT 'other', {d * PR_COMMITS} + k, md5('pr' || ({d * PR_COMMITS} + k)) FROM range({PR_COMMITS}) r(k)
            ),
            first AS (
                SELECT s.*, cfg.*, sh.shard, 1 AS attempt,
                       {d} * 1000000 + row_number() OVER () AS run_key
                FROM shas s, cfg, range(1, {SHARDS + 1}) sh(shard)
                WHERE s.branch_class = 'main' OR cfg.on_pr
            ),
            retried AS (
                SELECT * REPLACE (2 AS attempt) FROM first WHERE {u("run_key, 'retry'")} < 0.03
            )
            SELECT *, run_key * 4 + attempt AS job_id, {d} * 100000 + seq AS workflow_id,
                   {u("run_key, attempt, 'infra'")} < 0.01 AS infra_suspect,
                   TIMESTAMPTZ '{day} 00:00:00+00' + to_minutes(CAST((seq % {MAIN_COMMITS}) * 55 + attempt * 20 AS BIGINT)) AS job_started_at
            FROM (SELECT * FROM first UNION ALL SELECT * FROM retried)
        """)
        con.execute(f"""
            CREATE TEMP TABLE rows AS
            SELECT j.workflow_id, j.attempt AS workflow_run_attempt, j.job_id,
                   replace(replace(tc.file, '.py', ''), '/', '.') AS invoking_file, tc.file, tc.classname, tc.name,
                   0.5 + {u("j.job_id, tc.tid, 'time'")} * 3 AS time,
                   {u("j.job_id, tc.tid, 1")} AS u1, {u("j.job_id, tc.tid, 2")} AS u2, {u("j.job_id, tc.tid, 3")} AS u3,
                   j.branch_class = 'main' AND tc.broken_from IS NOT NULL
                       AND j.seq BETWEEN tc.broken_from AND tc.broken_from + 4 AS broken,
                   j.infra_suspect AND {u("j.job_id, tc.tid, 'infra'")} < 0.3 AS infra_fail,
                   tc.rate, j.head_sha, j.branch_class, j.build_env, j.test_config, j.shard, j.platform,
                   j.job_started_at + INTERVAL 40 MINUTE AS job_completed_at, j.infra_suspect
            FROM jobs j JOIN tc ON tc.cid = j.cid AND tc.shard = j.shard
            WHERE j.branch_class = 'main' OR hash(tc.fid, j.seq, 'td') % 5 = 0
        """)
        con.execute("""
            CREATE TEMP TABLE test_results AS
            SELECT workflow_id, workflow_run_attempt, job_id, invoking_file, file, classname, name, time,
                   CASE WHEN broken OR infra_fail OR (u1 < rate AND u2 < rate AND u3 < rate) THEN 'failed'
                        ELSE 'passed' END AS status,
                   CASE WHEN broken THEN 2 WHEN infra_fail THEN 0 WHEN u1 < rate AND u2 < rate THEN 2
                        WHEN u1 < rate THEN 1 ELSE 0 END AS rerun_count,
                   NULL::VARCHAR AS message, head_sha, branch_class, build_env, test_config, shard, platform,
                   job_completed_at, infra_suspect
            FROM rows
        """)
        con.execute("""
            CREATE TEMP TABLE test_jobs AS
            SELECT j.workflow_id, j.attempt AS workflow_run_attempt, j.job_id, count(r.job_id) AS tests,
                   count(r.job_id) AS executed, count(r.job_id) FILTER (WHERE r.status = 'failed') AS failed,
                   0 AS errors, j.head_sha, j.branch_class, j.build_env, j.test_config, j.shard, 4 AS num_shards,
                   j.platform, j.job_started_at, j.job_started_at + INTERVAL 40 MINUTE AS job_completed_at,
                   CASE WHEN j.infra_suspect THEN 'job-died' END AS infra_reason, j.infra_suspect
            FROM jobs j LEFT JOIN test_results r USING (job_id) GROUP BY ALL
        """)
        con.execute("""
            CREATE TEMP TABLE with_job AS SELECT r.*, CASE WHEN bool_or(status = 'failed') OVER (PARTITION BY job_id)
                THEN 'failure' ELSE 'success' END AS job_conclusion FROM test_results r
        """)
        n = lake.write("test_results", day, con.sql("SELECT * FROM with_job").to_arrow_reader(200_000))
        lake.write("test_jobs", day, con.sql("SELECT * FROM test_jobs").to_arrow_reader(200_000))
    finally:
        con.close()
    return n


def rows(lake: Lake, table: str, days: list[str]) -> int:
    return sum(pq.ParquetFile(f).metadata.num_rows for f in lake.files(table, days))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tests", type=int, default=19_000, help="distinct tests (19,000 gives ~50M rows in 14 days)")
    ap.add_argument("--work", type=Path, default=Path("var/bench-flaky"))
    ap.add_argument("--fresh", action="store_true", help="regenerate the data")
    args = ap.parse_args(argv)
    if args.fresh:
        shutil.rmtree(args.work, ignore_errors=True)
    lake = Lake.at(str(args.work / "lake"))
    days = [(START + dt.timedelta(days=d)).isoformat() for d in range(DAYS + 1)]
    t0 = time.monotonic()
    for d, day in enumerate(days):
        if not lake.files("test_daily_stats", [day]):
            generate_day(lake, d, args.tests)
            build_test_daily_stats(lake, day)
    gen_s = time.monotonic() - t0
    window, new_day = days[:DAYS], days[DAYS]
    total = rows(lake, "test_results", window)
    agg = {t: rows(lake, t, window) for t in ("test_daily_stats", "test_sha_outcomes", "test_jobs")}
    print(f"window {window[0]}..{window[-1]}: {total:,} test_results rows ({args.tests:,} tests, {len(CONFIGS)} "
          f"configs); aggregates read by flaky_tests: " + ", ".join(f"{t} {n:,} rows" for t, n in agg.items()))
    print(f"data generated and aggregated in {gen_s:.0f} s (reused when present)")

    t = time.monotonic()
    report = build_flaky_tests(lake, window[-1])
    window_s = time.monotonic() - t
    print(f"flaky_tests, 14-day window over {total / 1e6:.1f}M test rows: {window_s:.1f} s "
          f"({report.tests:,} tests: {report.verdicts})")

    t = time.monotonic()
    build_test_daily_stats(lake, new_day)
    day_agg_s = time.monotonic() - t
    t = time.monotonic()
    build_flaky_tests(lake, new_day)
    next_s = time.monotonic() - t
    day_rows = rows(lake, "test_results", [new_day])
    print(f"a new day ({day_rows / 1e6:.1f}M rows): its daily aggregates {day_agg_s:.1f} s + the window again "
          f"{next_s:.1f} s; the window never re-reads test_results")
    target = "met" if window_s < 60 else "NOT met"
    print(f"target: flaky_tests over 50M rows in under 60 s: {window_s:.1f} s, {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
