"""`ci_metrics_daily`: the numbers the CI team tracks, one partition per day, from that day's data.

One table, one row per day and dimension (the other dimension columns null):
  `day`        the day's headline figures:
               - main commits pushed that day (`main_commits`);
               - red, flaky, green and pending commits, and `red_pct`/`flaky_pct` (of commits with a
                 signal, pending included, as test-infra's master_commit_red computes them), with
                 time to signal p50/p90 (`tts_p50_s`, `tts_p90_s`) of the commits green at the first
                 attempt. These are about the commits pushed SETTLE_DAYS before (`commits_day`), read
                 from this day's `commit_health` snapshot: a commit's CI and its reruns take hours, so a
                 commit is only judged once it had a day to settle, and each commit is counted once;
               - jobs completed that day, failed ones and the share of failures that are
                 infrastructure (`infra_failure_pct`), queue time p50/p90/max over all of them;
               - flaky, broken and disabled tests as of that day (`flaky_tests`, `disabled_tests`);
  `platform`   per platform: jobs and queue time p50/p90/max;
  `runner`     per platform and runner label: the same;
  `job_group`  per job group on the main branch: successful jobs and their duration p50/p90;
  `backend`    per downstream backend: judged jobs, success rate and callbacks received that day.

Every input is one day's partition (commit_health, workflow_job, test_jobs, flaky_tests,
disabled_tests, ci_result, ci_callback_minutes) plus the day before's job ids, so that a job whose
`completed` delivery was redelivered after midnight is counted once; a new day costs that day.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import pyarrow as pa

from resources.lake import Lake, connect
from torchci_assets.derived.hud.health import FAILING_CONCLUSIONS, sql_list
from torchci_assets.derived.hud.inputs import register

SETTLE_DAYS = 1
DIMENSIONS = ("day", "platform", "runner", "job_group", "backend")

METRICS_SCHEMA = pa.schema([
    ("dimension", pa.string()), ("platform", pa.string()), ("label", pa.string()), ("job_group", pa.string()),
    ("repo", pa.string()), ("commits_day", pa.date32()),
    ("main_commits", pa.int64()), ("commits", pa.int64()), ("red", pa.int64()), ("flaky", pa.int64()),
    ("green", pa.int64()), ("pending", pa.int64()), ("red_pct", pa.float64()), ("flaky_pct", pa.float64()),
    ("tts_p50_s", pa.float64()), ("tts_p90_s", pa.float64()), ("tts_commits", pa.int64()),
    ("jobs", pa.int64()), ("failed_jobs", pa.int64()), ("infra_failed_jobs", pa.int64()),
    ("infra_failure_pct", pa.float64()),
    ("queue_p50_s", pa.float64()), ("queue_p90_s", pa.float64()), ("queue_max_s", pa.float64()),
    ("duration_p50_s", pa.float64()), ("duration_p90_s", pa.float64()),
    ("flaky_tests", pa.int64()), ("broken_tests", pa.int64()), ("disabled_tests", pa.int64()),
    ("success_rate", pa.float64()), ("callbacks", pa.int64()),
])

_RUNNER_LABEL = "coalesce(list_filter(labels, lambda x: x NOT IN ('self-hosted', 'linux', 'x64', 'ARM64'))[1], 'unknown')"
_FAILING = sql_list(FAILING_CONCLUSIONS)


def _sql(commits_day: str, upstream_repo: str, branches: tuple[str, ...]) -> str:
    return f"""
    WITH jobs AS (
        SELECT j.* REPLACE (coalesce(j.platform, 'unknown') AS platform),
               coalesce(j.workflow_name, r.name, 'unknown') AS workflow, {_RUNNER_LABEL} AS label
        FROM (SELECT * FROM jobs_today WHERE status = 'completed' AND coalesce(conclusion, '') <> 'skipped'
              AND (id, run_attempt) NOT IN (SELECT (id, run_attempt) FROM jobs_before WHERE status = 'completed')) j
        LEFT JOIN (SELECT id, any_value(name) AS name FROM runs GROUP BY id) r ON r.id = j.run_id
    ),
    failed AS (
        SELECT j.id, j.run_attempt,
               coalesce(bool_or(tj.infra_suspect), false) OR coalesce(bool_or(jf.infra), false)
                   OR (count(tj.job_id) = 0 AND any_value(j.test_config) IS NOT NULL) AS infra
        FROM jobs j
        LEFT JOIN tjobs tj ON tj.job_id = j.id AND tj.workflow_run_attempt = j.run_attempt
        LEFT JOIN jfail jf ON jf.job_id = j.id AND jf.run_attempt = j.run_attempt
        WHERE j.conclusion IN {_FAILING}
        GROUP BY j.id, j.run_attempt
    ),
    commits AS (
        SELECT DISTINCT sha, conclusion, time_to_signal_s FROM health
        WHERE pushed_day = DATE '{commits_day}' AND conclusion <> 'no_signal'
    ),
    pushed AS (
        SELECT count(DISTINCT after) AS main_commits FROM pushes
        WHERE ref IN {sql_list(branches)} AND (repo IS NULL OR lower(repo) = lower('{upstream_repo}'))
          AND NOT coalesce(deleted, false) AND after <> '{'0' * 40}'
    ),
    c AS (
        SELECT count(*) AS commits, count(*) FILTER (WHERE conclusion = 'red') AS red,
               count(*) FILTER (WHERE conclusion = 'flaky') AS flaky,
               count(*) FILTER (WHERE conclusion = 'green') AS green,
               count(*) FILTER (WHERE conclusion = 'pending') AS pending,
               quantile_cont(time_to_signal_s, 0.5) AS tts_p50_s, quantile_cont(time_to_signal_s, 0.9) AS tts_p90_s,
               count(time_to_signal_s) AS tts_commits
        FROM commits
    ),
    q AS (
        SELECT count(*) AS jobs, quantile_cont(queue_s, 0.5) AS queue_p50_s,
               quantile_cont(queue_s, 0.9) AS queue_p90_s, max(queue_s) AS queue_max_s
        FROM jobs
    ),
    f AS (SELECT count(*) AS failed_jobs, count(*) FILTER (WHERE infra) AS infra_failed_jobs FROM failed),
    t AS (SELECT count(*) FILTER (WHERE verdict = 'flaky') AS flaky_tests,
                 count(*) FILTER (WHERE verdict = 'broken') AS broken_tests FROM flaky),
    d AS (SELECT count(*) FILTER (WHERE status = 'disabled') AS disabled_tests FROM disabled),
    day_row AS (
        SELECT 'day' AS dimension, DATE '{commits_day}' AS commits_day, *,
               100.0 * red / nullif(commits, 0) AS red_pct, 100.0 * flaky / nullif(commits, 0) AS flaky_pct,
               100.0 * infra_failed_jobs / nullif(failed_jobs, 0) AS infra_failure_pct
        FROM pushed, c, q, f, t, d
    ),
    runner_rows AS (
        SELECT CASE WHEN grouping(label) = 1 THEN 'platform' ELSE 'runner' END AS dimension, platform, label,
               count(*) AS jobs, quantile_cont(queue_s, 0.5) AS queue_p50_s, quantile_cont(queue_s, 0.9) AS queue_p90_s,
               max(queue_s) AS queue_max_s
        FROM jobs GROUP BY GROUPING SETS ((platform, label), (platform))
    ),
    group_rows AS (
        SELECT 'job_group' AS dimension, workflow || ' / ' || regexp_replace(name, ', \\d+, \\d+(,|\\))', '\\1')
                   AS job_group,
               count(*) AS jobs, quantile_cont(duration_s, 0.5) AS duration_p50_s,
               quantile_cont(duration_s, 0.9) AS duration_p90_s
        FROM jobs WHERE head_branch IN {sql_list(tuple(b.removeprefix('refs/heads/') for b in branches))}
            AND conclusion = 'success'
        GROUP BY ALL
    ),
    backend_rows AS (
        SELECT 'backend' AS dimension, repo,
               count(*) FILTER (WHERE failure_kind <> 'pending') AS jobs,
               count(*) FILTER (WHERE failure_kind = 'none') / nullif(count(*) FILTER (WHERE failure_kind <> 'pending'), 0)
                   AS success_rate,
               (SELECT coalesce(sum(callbacks), 0) FROM callbacks c WHERE c.repo = r.repo)::BIGINT AS callbacks
        FROM ci r GROUP BY repo
        UNION ALL BY NAME
        SELECT 'backend' AS dimension, repo, 0 AS jobs, NULL AS success_rate, sum(callbacks)::BIGINT AS callbacks
        FROM callbacks WHERE repo NOT IN (SELECT repo FROM ci) GROUP BY repo
    )
    SELECT * FROM day_row
    UNION ALL BY NAME SELECT * FROM runner_rows
    UNION ALL BY NAME SELECT * FROM group_rows
    UNION ALL BY NAME SELECT * FROM backend_rows
    ORDER BY dimension, platform, label, job_group, repo
    """


@dataclass
class MetricsReport:
    day: str
    commits_day: str
    rows: int
    headline: dict  # the `day` row
    queue_p90_by_platform: dict[str, float]


def build_ci_metrics(lake: Lake, day: str, upstream_repo: str, branches: tuple[str, ...]) -> MetricsReport:
    """Write `ci_metrics_daily` for `day` (see the module docstring); returns the headline figures."""
    commits_day = (dt.date.fromisoformat(day) - dt.timedelta(days=SETTLE_DAYS)).isoformat()
    before = (dt.date.fromisoformat(day) - dt.timedelta(days=1)).isoformat()
    con = connect()
    try:
        for table, days, view in (("commit_health", [day], "health"), ("workflow_job", [day], "jobs_today"),
                                  ("workflow_job", [before], "jobs_before"), ("workflow_run", [before, day], "runs"),
                                  ("test_jobs", [before, day], "tjobs"), ("job_failure", [before, day], "jfail"),
                                  ("flaky_tests", [day], "flaky"), ("disabled_tests", [day], "disabled"),
                                  ("ci_result", [day], "ci"), ("ci_callback_minutes", [day], "callbacks"),
                                  ("push", [day], "pushes")):
            register(con, lake, table, days, view)
        table = _with_schema(con.sql(_sql(commits_day, upstream_repo, branches)).to_arrow_table())
    finally:
        con.close()
    rows = lake.write("ci_metrics_daily", day, table)
    records = table.to_pylist()
    headline = next(r for r in records if r["dimension"] == "day")
    queue = {r["platform"]: r["queue_p90_s"] for r in records
             if r["dimension"] == "platform" and r["queue_p90_s"] is not None}
    return MetricsReport(day, commits_day, rows, headline, queue)


def _with_schema(t: pa.Table) -> pa.Table:
    """The query's columns in METRICS_SCHEMA's order and types (missing ones null)."""
    cols = []
    for f in METRICS_SCHEMA:
        cols.append(t.column(f.name).cast(f.type) if f.name in t.column_names else pa.nulls(t.num_rows, f.type))
    return pa.Table.from_arrays(cols, schema=METRICS_SCHEMA)
