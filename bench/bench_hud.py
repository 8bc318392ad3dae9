"""Speed and size of the HUD for 14 PyTorch-sized days: ~300 main commits and ~60,000 jobs a day.

What is generated (directly with DuckDB, as bench_flaky does: the simulator would take hours for
this volume) for each day, in the lake tables the HUD reads:
  * `push`: 300 main commits; `pull_request`: 400 pull request heads;
  * `workflow_job`: per main commit 150 jobs in 6 workflows (4 lint, 20 builds, 40 test configs of
    1 to 4 shards, a few others; 2% fail, 0.3% cancelled, a third of failing runs re-attempted),
    per pull request head its 48 `pull` jobs: ~60,000 jobs a day; `workflow_run` for their runs;
  * `test_jobs` for the test jobs (1% infra-suspect), `test_sha_outcomes` for the failing ones;
  * `flaky_tests` (20,000 tests, 300 flaky, 40 broken), `disabled_tests`, `ci_result` and
    `ci_callback_minutes` for 4 backends, and `backend-levels.json`.

What is timed: `commit_health`, `pr_jobs` and `ci_metrics_daily` for each of the 14 days, one day
after the other (one new day costs one fourteenth), then again as a backfill runs them: one run per
day partition, --workers at a time (the days are independent; dagster.yaml lets 4 runs go at once),
then `hud_site` for the last day (the whole site: index.html, metrics.html, backends.html,
tests.html and every pr/<n>.html); each page's size.

Run as `make bench` (python bench/bench_hud.py [--work DIR] [--fresh]). Data is kept under --work.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from resources.lake import Lake, connect
from resources.storage import Store
from torchci_assets.derived.hud.health import build_commit_health, build_pr_jobs
from torchci_assets.derived.hud.metrics import build_ci_metrics
from torchci_assets.derived.site.site import MAX_PAGE_BYTES, SiteSettings, publish_site

DAYS = 14
START = dt.date(2026, 10, 1)
COMMITS = 300
PR_HEADS = 400
REPO = "pytorch/pytorch"
BACKENDS = ("acme-ai/torch-npu", "example-org/torch-tpu-backend", "fabrikam/torch-dpu", "contoso-labs/torch-vpu")


def u(expr: str) -> str:
    return f"((hash({expr}) % 1000003) / 1000003.0)"


def generate_day(lake: Lake, d: int) -> int:
    day = (START + dt.timedelta(days=d)).isoformat()
    t0 = f"TIMESTAMPTZ '{day} 00:00:00+00'"
    con = connect(memory_limit="2GB")
    try:
        # job templates of a main commit: (workflow, name, platform, label, test_config, minutes)
        con.execute("""
            CREATE TEMP TABLE tmpl AS
            WITH lint AS (SELECT 'Lint' AS wf, 'lint-' || i || ' / linux-job' AS name, 'linux' AS platform,
                                 'linux.2xlarge' AS label, NULL AS test_config, 8 AS minutes FROM range(4) r(i)),
            builds AS (SELECT CASE WHEN i < 8 THEN 'pull' WHEN i < 14 THEN 'trunk' ELSE 'periodic' END AS wf,
                              'env-' || i || ' / build' AS name,
                              CASE i % 5 WHEN 0 THEN 'win' WHEN 1 THEN 'mac' WHEN 2 THEN 'rocm' ELSE 'linux' END AS platform,
                              'linux.12xlarge' AS label, NULL AS test_config, 40 AS minutes FROM range(20) r(i)),
            tests AS (SELECT CASE WHEN c < 16 THEN 'pull' WHEN c < 28 THEN 'trunk' WHEN c < 34 THEN 'inductor'
                                  ELSE 'rocm' END AS wf,
                             'env-' || (c % 20) || ' / test (cfg' || c || ', ' || s || ', ' || (1 + c % 4) || ', runner-'
                                 || (c % 7) || ')' AS name,
                             CASE c % 5 WHEN 0 THEN 'win' WHEN 1 THEN 'mac' WHEN 2 THEN 'rocm' ELSE 'linux' END AS platform,
                             'runner-' || (c % 7) AS label, 'cfg' || c AS test_config, 25 + c % 30 AS minutes
                      FROM range(40) r(c), range(1, 5) sh(s) WHERE s <= 1 + c % 4),
            other AS (SELECT 'trunk' AS wf, 'label-' || i || ' / runner-determinator' AS name, 'linux' AS platform,
                             'ubuntu-latest' AS label, NULL AS test_config, 1 AS minutes FROM range(6) r(i))
            SELECT row_number() OVER () AS k, * FROM (SELECT * FROM lint UNION ALL SELECT * FROM builds
                                                     UNION ALL SELECT * FROM tests UNION ALL SELECT * FROM other)
        """)
        con.execute(f"""
            CREATE TEMP TABLE heads AS
            SELECT 'main' AS kind, {d * COMMITS} + i AS n, md5('main' || ({d * COMMITS} + i)) AS sha,
                   {t0} + to_seconds(CAST(i * 86400 / {COMMITS} AS BIGINT)) AS pushed
            FROM range({COMMITS}) r(i)
            UNION ALL
            SELECT 'pr', 100000 + {d * PR_HEADS} + i, md5('pr' || ({d * PR_HEADS} + i)),
                   {t0} + to_seconds(CAST(i * 86400 / {PR_HEADS} AS BIGINT))
            FROM range({PR_HEADS}) r(i)
        """)
        con.execute(f"""
            CREATE TEMP TABLE j1 AS
            SELECT h.*, t.*, h.n * 100 + hash(t.wf) % 50 AS run_id,
                   h.n * 1000 + t.k AS id, 1 AS run_attempt,
                   60 + {u("h.n, t.k, 'q'")} ** 3 * 3600 AS queue_s,
                   CASE WHEN {u("h.n, t.k, 'f'")} < 0.02 THEN 'failure'
                        WHEN {u("h.n, t.k, 'f'")} < 0.023 THEN 'cancelled' ELSE 'success' END AS conclusion
            FROM heads h JOIN tmpl t ON h.kind = 'main' OR t.wf = 'pull'
        """)
        con.execute(f"""
            CREATE TEMP TABLE jobs AS
            SELECT * FROM j1
            UNION ALL
            SELECT * REPLACE (id + 500 AS id, 2 AS run_attempt,
                              CASE WHEN {u("n, k, 'r'")} < 0.5 THEN 'success' ELSE 'failure' END AS conclusion)
            FROM j1 WHERE conclusion <> 'success' AND {u("n, k, 'rerun'")} < 0.35
        """)
        lake.write("workflow_job", day, con.sql(f"""
            SELECT id, run_id, run_attempt, '{REPO}' AS repo, wf AS workflow_name, name, sha AS head_sha,
                   CASE kind WHEN 'main' THEN 'main' ELSE 'gh/u/' || n || '/head' END AS head_branch,
                   'completed' AS status, conclusion,
                   pushed + INTERVAL 1 MINUTE + to_minutes(CAST(run_attempt * 90 AS BIGINT)) AS created_at,
                   created_at + to_seconds(CAST(queue_s AS BIGINT)) AS started_at,
                   started_at + to_minutes(CAST(minutes AS BIGINT)) AS completed_at,
                   [label] AS labels, NULL::VARCHAR AS runner_name, queue_s, minutes * 60.0 AS duration_s,
                   split_part(name, ' / ', 1) AS build_env, test_config, NULL::INTEGER AS shard,
                   NULL::INTEGER AS num_shards, platform, completed_at AS received_at
            FROM jobs""").to_arrow_table())
        lake.write("workflow_run", day, con.sql("""
            SELECT run_id AS id, run_attempt, '{REPO}' AS repo, any_value(wf) AS name,
                   CASE any_value(kind) WHEN 'main' THEN 'push' ELSE 'pull_request' END AS event,
                   any_value(sha) AS head_sha, NULL::VARCHAR AS head_branch, 'completed' AS status,
                   CASE WHEN bool_or(conclusion <> 'success') THEN 'failure' ELSE 'success' END AS conclusion,
                   min(pushed) AS created_at, min(pushed) + INTERVAL 3 HOUR AS updated_at
            FROM jobs GROUP BY run_id, run_attempt""").to_arrow_table())
        lake.write("push", day, con.sql(f"""
            SELECT '{REPO}' AS repo, 'refs/heads/main' AS ref, NULL::VARCHAR AS before, sha AS after, false AS forced,
                   false AS created, false AS deleted, sha AS head_commit_id, pushed AS head_commit_timestamp,
                   1 AS commit_count, pushed AS received_at, md5('d' || sha) AS delivery_id
            FROM heads WHERE kind = 'main'""").to_arrow_table())
        lake.write("pull_request", day, con.sql(f"""
            SELECT '{REPO}' AS repo, n AS number, 'synchronize' AS action, 'open' AS state, sha AS head_sha,
                   'gh/u/' || n || '/head' AS head_ref, 'main' AS base_ref, ['ciflow/trunk'] AS labels,
                   NULL::BOOLEAN AS merged, pushed AS updated_at, pushed AS received_at, md5('p' || sha) AS delivery_id
            FROM heads WHERE kind = 'pr'""").to_arrow_table())
        lake.write("test_jobs", day, con.sql(f"""
            SELECT run_id AS workflow_id, run_attempt AS workflow_run_attempt, id AS job_id, 1000 AS tests,
                   990 AS executed, CASE WHEN conclusion = 'failure' THEN 2 ELSE 0 END AS failed, 0 AS errors,
                   {u("id, 'infra'")} < 0.01 AS infra_suspect,
                   CASE WHEN {u("id, 'infra'")} < 0.01 THEN 'job-died' END AS infra_reason
            FROM jobs WHERE test_config IS NOT NULL""").to_arrow_table())
        lake.write("test_sha_outcomes", day, con.sql("""
            SELECT 'test_f' || (hash(id, t) % 500) || '.py' AS file, 'TestC' || (hash(id, t) % 2000) AS classname,
                   'test_' || (hash(id, t) % 20000) AS name, split_part(name, ' / ', 1) AS build_env, test_config,
                   platform, CASE kind WHEN 'main' THEN 'main' ELSE 'other' END AS branch_class, sha AS head_sha,
                   1 AS runs, 0 AS passed, 1 AS failed, 0 AS errors, 0 AS skipped, 0 AS rerun_passed, 2 AS rerun_count,
                   1 AS jobs, [id] AS failing_job_ids
            FROM jobs, range(2) r(t) WHERE test_config IS NOT NULL AND conclusion = 'failure'""").to_arrow_table())
        lake.write("flaky_tests", day, con.sql("""
            SELECT 'test_f' || (i % 500) || '.py' AS file, 'TestC' || (i % 2000) AS classname, 'test_' || i AS name,
                   200 AS runs, 5 AS failures, 3 AS rerun_passes, 0 AS rerun_failures, 1 AS same_commit_pairs,
                   1 AS flips, 5 AS flake_events, 0 AS infra_runs, 0 AS infra_failures, ['linux', 'win'] AS platforms,
                   ['linux'] AS flaky_platforms, 0.025 AS flake_rate, 0.01 AS flake_rate_low, 0.05 AS flake_rate_high,
                   CASE WHEN i % 500 = 7 THEN 1 ELSE 0 END AS broken_ranges, 4 AS broken_failures,
                   md5('main' || i) AS broken_from_sha, NULL::VARCHAR AS broken_fixed_sha,
                   CASE WHEN i % 500 = 7 THEN 'broken' WHEN i % 67 = 3 THEN 'flaky' ELSE 'healthy' END AS verdict
            FROM range(20000) r(i)""").to_arrow_table())
        lake.write("disabled_tests", day, con.sql("""
            SELECT 'test_' || i || ' (__main__.TestC' || (i % 2000) || ')' AS test, 'local-' || i AS id, '' AS url,
                   ['linux'] AS platforms, 'disabled' AS status, 5 AS flake_events, 200 AS runs
            FROM range(20000) r(i) WHERE i % 67 = 3""").to_arrow_table())
        lake.write("ci_result", day, con.sql(f"""
            SELECT b.repo, CASE WHEN b.i = 1 THEN 'L3' ELSE 'L2' END AS level, md5('d' || h.sha) AS delivery_id,
                   h.sha AS head_sha, 'dev-ci' AS workflow_name, h.n * 10 + b.i AS run_id, 1 AS run_attempt,
                   'test (default, ' || s || ', 2)' AS job_name, 'completed' AS status,
                   CASE WHEN {u("h.n, b.i, s")} < 0.9 THEN 'success' ELSE 'failure' END AS conclusion,
                   h.pushed AS started_at, h.pushed + INTERVAL 40 MINUTE AS completed_at, h.pushed AS received_at,
                   60.0 AS queue_s, 2400.0 AS execution_s, 1000 AS passed, 0 AS failed, 10 AS skipped,
                   NULL::VARCHAR AS location, h.pushed AS callback_at, 2 AS callbacks,
                   CASE WHEN {u("h.n, b.i, s")} < 0.9 THEN 'none' ELSE 'test' END AS failure_kind
            FROM heads h, (SELECT unnest({list(BACKENDS)}) AS repo, generate_subscripts({list(BACKENDS)}, 1) AS i) b,
                 range(1, 3) r(s)""").to_arrow_table())
        lake.write("ci_callback_minutes", day, con.sql(f"""
            SELECT unnest({list(BACKENDS)}) AS repo, {t0} + to_minutes(m) AS minute, 3 AS callbacks
            FROM range(0, 1440, 3) r(m)""").to_arrow_table())
        return con.execute("SELECT count(*) FROM jobs").fetchone()[0]
    finally:
        con.close()


def build_day(lake: Lake, day: str, now: dt.datetime) -> dict[str, float]:
    """The three daily HUD tables of `day`, as one day-partition run computes them; seconds per table."""
    took = {}
    for step, fn in (("commit_health", lambda: build_commit_health(lake, day, REPO, ("refs/heads/main",), now=now)),
                     ("pr_jobs", lambda: build_pr_jobs(lake, day, REPO, now=now)),
                     ("ci_metrics_daily", lambda: build_ci_metrics(lake, day, REPO, ("refs/heads/main",)))):
        t = time.monotonic()
        fn()
        took[step] = time.monotonic() - t
    return took


def levels_json() -> bytes:
    crit = [("L2", "min_completed_jobs", "completed_jobs", 7, 150, 20, ">="),
            ("L2", "min_success_rate", "success_rate", 7, 0.9, 0.7, ">="),
            ("L2", "max_commit_time_p95_s", "commit_time_p95_s", 7, 3300.0, 10800.0, "<="),
            ("L2", "max_callbacks_per_minute", "callback_peak_per_minute", 7, 4, 60.0, "<="),
            ("L3", "min_success_rate", "success_rate", 7, 0.9, 0.9, ">="),
            ("L3", "min_infra_availability", "infra_availability", 7, 0.99, 0.95, ">="),
            ("L3", "max_queue_time_p90_s", "queue_p90_s", 7, 60.0, 1800.0, "<="),
            ("L4", "min_success_rate", "success_rate", 28, 0.9, 0.95, ">="),
            ("L4", "maintainer_approved", "maintainer_approved", 28, False, True, "==")]
    return json.dumps({"day": (START + dt.timedelta(days=DAYS - 1)).isoformat(), "backends": [
        {"repo": r, "current_level": "L2", "eligible_level": "L3", "recommended_level": "L3", "change": "promote",
         "device": None, "reasons": ["eligible for L3"],
         "criteria": [dict(zip(("level", "name", "metric", "window_days", "value", "threshold", "op"), c),
                           met=c[0] != "L4") for c in crit]} for r in BACKENDS]}).encode()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=Path("var/bench-hud"))
    ap.add_argument("--fresh", action="store_true", help="regenerate the data")
    ap.add_argument("--workers", type=int, default=2, help="day-partition runs at once in the backfill timing")
    args = ap.parse_args(argv)
    if args.fresh:
        shutil.rmtree(args.work, ignore_errors=True)
    lake = Lake.at(str(args.work / "lake"))
    outputs = Store(str(args.work / "outputs"))
    days = [(START + dt.timedelta(days=d)).isoformat() for d in range(DAYS)]
    t = time.monotonic()
    jobs = 0
    for d, day in enumerate(days):
        if not lake.files("ci_callback_minutes", [day]):
            jobs += generate_day(lake, d)
    outputs.write_bytes("backend-levels.json", levels_json())
    if jobs:
        print(f"generated {DAYS} days, {jobs:,} jobs ({jobs / DAYS:,.0f} a day) in {time.monotonic() - t:.0f} s")
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    now = dt.datetime.fromisoformat(days[-1]).replace(tzinfo=dt.timezone.utc) + dt.timedelta(days=1)
    per_step = {"commit_health": 0.0, "pr_jobs": 0.0, "ci_metrics_daily": 0.0}
    t_all, cpu_all = time.monotonic(), time.process_time()
    for day in days:
        for step, s in build_day(lake, day, now).items():
            per_step[step] += s
    daily_s, daily_cpu = time.monotonic() - t_all, time.process_time() - cpu_all
    t = time.monotonic()
    with ProcessPoolExecutor(args.workers) as pool:
        list(pool.map(build_day, [lake] * len(days), days, [now] * len(days)))
    backfill_s = time.monotonic() - t
    shutil.rmtree(args.work / "outputs" / "hud", ignore_errors=True)
    t, cpu = time.monotonic(), time.process_time()
    report = publish_site(lake, outputs, days[-1], REPO, SiteSettings())
    site_s, site_cpu = time.monotonic() - t, time.process_time() - cpu
    total, total_backfill = daily_s + site_s, backfill_s + site_s
    print(f"{DAYS} days x {COMMITS} main commits and ~{jobs / DAYS if jobs else 60000:,.0f} jobs a day, {cpus} CPUs")
    print("daily HUD tables for all 14 days: " + ", ".join(f"{k} {v:.1f} s" for k, v in per_step.items())
          + f" = {daily_s:.1f} s one day after the other ({daily_s / DAYS:.2f} s for one new day; {daily_cpu:.1f} CPU s);"
          f" {backfill_s:.1f} s as a backfill, {args.workers} day-partition runs at a time")
    largest, size = report.largest
    print(f"hud_site for {days[-1]}: {site_s:.1f} s ({site_cpu:.1f} CPU s), {len(report.pages)} pages ({report.pull_requests} pull requests,"
          f" {report.commits} commits x {report.job_groups} job groups), {sum(report.pages.values()) / 1e6:.1f} MB;"
          f" largest {largest} {size / 1e6:.2f} MB")
    big = {p: n for p, n in report.pages.items() if n >= MAX_PAGE_BYTES}
    print(f"target: the whole site for 14 days in under 10 s: the site {site_s:.1f} s, "
          f"{'met' if site_s < 10 else 'NOT met'}; with the 14 days of HUD tables recomputed too: as a backfill "
          f"{total_backfill:.1f} s, {'met' if total_backfill < 10 else 'NOT met'}, one day after the other {total:.1f} s, "
          f"{'met' if total < 10 else 'NOT met'} (wall time; the machine's load shows in CPU s vs wall s); "
          f"every page under 2 MB: {'met' if not big else f'NOT met {big}'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
