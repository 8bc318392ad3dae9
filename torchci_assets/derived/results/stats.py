"""test_run + workflow_job -> `test_results` and `test_jobs`; test_results -> the daily aggregates.

Everything is DuckDB SQL over the lake's Parquet, one day partition at a time, so a new day
costs O(that day) and window derivations (test times, flaky tests, smoke sets) read the small
daily tables below, never the raw rows again.

Late and split arrivals. A job's webhooks and its test reports land on the day they arrive:
a job queued before midnight has `queued` on D-1 and `completed` on D; its reports, uploaded
when it ends, usually land on D but can land on D+1 while its `completed` webhook made it
into D. So `test_results` for day D joins D's test rows with the `workflow_job` partitions
D-JOB_LOOKBACK_DAYS .. D+JOB_LOOKAHEAD_DAYS (those that exist), keeping for each job id its
latest state across them: the highest of queued < waiting < in_progress < completed, then the
latest delivery, each column taken from the latest row that has it (old payloads lack some).
The asset's partition mapping declares the same window, so Dagster marks day D stale when a
job partition inside it changes and a re-run picks the late record up. Test rows whose job is
in none of those partitions are kept (`job_found` false, job columns null, branch_class
`unknown`): nothing is dropped, and the metadata counts them.

Branch class: `main` when the job ran on the main branch for a push (a fork's pull request
can come from a branch named main too, so runs whose workflow_run event is a pull request
are `other`), `other` for every other branch, `unknown` without a job.

Infra suspects (`test_jobs.infra_suspect`, copied onto every test row): a job whose failures
say nothing about its tests, which flaky detection must not count. The rule, in order, with
the first that applies recorded in `infra_reason`:
  1. `job-died`: the job's conclusion is cancelled, timed_out or startup_failure (GitHub
     reports a job timeout as cancelled): what ran before the cut is partial;
  2. `log-infra`: the job's log (`job_failure`, from the same window of days as its jobs)
     matched a rule configured as infrastructure (runner lost, CUDA device error, disk
     full...): whatever failed after that says nothing about the tests. `failure_rule` keeps
     the log's rule, infrastructure or not;
  3. `failed-outside-tests`: the job failed but none of its tests failed or errored: the
     runner was lost, the process was killed, setup or a report upload broke;
  4. `mass-failure`: at least INFRA_MIN_FAILURES tests failed or errored and they are at
     least INFRA_FAILING_SHARE of the tests that ran (not skipped);
  5. `shared-message`: at least INFRA_MIN_FAILURES failing tests share one first message
     line: a device error (CUDA illegal memory access, NCCL abort) poisons every test after
     it with the same error, whatever share of the job that is.
A real regression that breaks ten or more tests with one message also matches rule 5; it is
then not counted as a test failure, which can hide a breakage but never makes a broken test
look flaky.
"""

from __future__ import annotations

from dataclasses import dataclass

from resources.lake import Lake, connect
from torchci_assets.partitions import days_around

JOB_LOOKBACK_DAYS = 2
JOB_LOOKAHEAD_DAYS = 1
MAIN_BRANCHES = ("main",)
PULL_REQUEST_EVENTS = ("pull_request", "pull_request_target")
INFRA_MIN_FAILURES = 10
INFRA_FAILING_SHARE = 0.5
DIED_CONCLUSIONS = ("cancelled", "timed_out", "startup_failure")
BATCH_ROWS = 50_000

TEST_KEY = ["file", "classname", "name"]
CONFIG_KEY = ["build_env", "test_config", "platform", "branch_class"]

_JOB_RANK = ("CASE status WHEN 'completed' THEN 4 WHEN 'in_progress' THEN 3 WHEN 'waiting' THEN 2 "
             "WHEN 'queued' THEN 1 WHEN 'pending' THEN 1 ELSE 0 END")
_JOB_COLUMNS = ["run_id", "name", "head_sha", "head_branch", "status", "conclusion", "build_env",
                "test_config", "shard", "num_shards", "platform", "started_at", "completed_at"]
_EMPTY_JOBS = ("SELECT NULL::BIGINT AS id, NULL::BIGINT AS run_id, NULL::VARCHAR AS name, "
               "NULL::VARCHAR AS head_sha, NULL::VARCHAR AS head_branch, NULL::VARCHAR AS status, "
               "NULL::VARCHAR AS conclusion, NULL::VARCHAR AS build_env, NULL::VARCHAR AS test_config, "
               "NULL::INTEGER AS shard, NULL::INTEGER AS num_shards, NULL::VARCHAR AS platform, "
               "NULL::TIMESTAMPTZ AS started_at, NULL::TIMESTAMPTZ AS completed_at, "
               "NULL::TIMESTAMPTZ AS received_at, NULL::DATE AS day WHERE false")
_EMPTY_FAILURES = "SELECT NULL::BIGINT AS job_id, NULL::VARCHAR AS rule, NULL::BOOLEAN AS infra, NULL::DATE AS day WHERE false"
_EMPTY_RUNS = ("SELECT NULL::BIGINT AS id, NULL::VARCHAR AS event, NULL::TIMESTAMPTZ AS updated_at, "
               "NULL::DATE AS day WHERE false")


def _sql_list(values: tuple[str, ...]) -> str:
    return "(" + ", ".join("'" + v.replace("'", "''") + "'" for v in values) + ")"


def _latest(columns: list[str], order: str) -> str:
    return ",\n".join(f"arg_max({c}, {order}) FILTER (WHERE {c} IS NOT NULL) AS {c}" for c in columns)


_TEST_JOBS_SQL = f"""
    WITH job AS (
        SELECT id, {_latest(_JOB_COLUMNS, f'({_JOB_RANK}, received_at, day)')}
        FROM job_window GROUP BY id
    ),
    run AS (
        SELECT id, arg_max(event, (updated_at, day)) FILTER (WHERE event IS NOT NULL) AS event
        FROM run_window GROUP BY id
    ),
    tests AS (
        SELECT workflow_id, workflow_run_attempt, job_id,
               count(*) AS tests,
               count(*) FILTER (WHERE status <> 'skipped') AS executed,
               count(*) FILTER (WHERE status = 'failed') AS failed,
               count(*) FILTER (WHERE status = 'error') AS errors,
               count(*) FILTER (WHERE status = 'skipped') AS skipped,
               count(*) FILTER (WHERE status = 'passed' AND rerun_count > 0) AS rerun_passed,
               sum(time) AS time
        FROM test_run GROUP BY ALL
    ),
    failure AS (  -- a log archived twice (a re-upload on a later day): the latest copy
        SELECT job_id, arg_max(rule, day) AS failure_rule, arg_max(infra, day) AS failure_infra
        FROM failure_window GROUP BY job_id
    ),
    messages AS (
        SELECT job_id, workflow_run_attempt, max(n) AS top_message_failures
        FROM (SELECT job_id, workflow_run_attempt, message, count(*) AS n FROM test_run
              WHERE status IN ('failed', 'error') AND message IS NOT NULL GROUP BY ALL)
        GROUP BY ALL
    ),
    joined AS (
        SELECT t.*, coalesce(m.top_message_failures, 0) AS top_message_failures,
               job.id IS NOT NULL AS job_found, job.name AS job_name, job.head_sha, job.head_branch,
               CASE WHEN job.id IS NULL THEN 'unknown'
                    WHEN job.head_branch IN {_sql_list(MAIN_BRANCHES)}
                         AND coalesce(run.event, '') NOT IN {_sql_list(PULL_REQUEST_EVENTS)}
                    THEN 'main' ELSE 'other' END AS branch_class,
               job.build_env, job.test_config, job.shard, job.num_shards, job.platform,
               job.status AS job_status, job.conclusion AS job_conclusion,
               job.started_at AS job_started_at, job.completed_at AS job_completed_at,
               f.failure_rule, coalesce(f.failure_infra, false) AS failure_infra
        FROM tests t
        LEFT JOIN messages m USING (job_id, workflow_run_attempt)
        LEFT JOIN failure f USING (job_id)
        LEFT JOIN job ON job.id = t.job_id
        LEFT JOIN run ON run.id = job.run_id
    )
    SELECT *,
        CASE WHEN job_conclusion IN {_sql_list(DIED_CONCLUSIONS)} THEN 'job-died'
             WHEN failure_infra THEN 'log-infra'
             WHEN job_conclusion = 'failure' AND failed + errors = 0 THEN 'failed-outside-tests'
             WHEN failed + errors >= {INFRA_MIN_FAILURES}
                  AND failed + errors >= {INFRA_FAILING_SHARE} * executed THEN 'mass-failure'
             WHEN top_message_failures >= {INFRA_MIN_FAILURES} THEN 'shared-message'
        END AS infra_reason,
        infra_reason IS NOT NULL AS infra_suspect
    FROM joined
    ORDER BY job_id, workflow_run_attempt
"""

_TEST_RESULTS_SQL = """
    SELECT t.workflow_id, t.workflow_run_attempt, t.job_id,
           replace(t.invoking_file, '.', '/') AS invoking_file,
           t.file, t.classname, t.name, t.time, t.status, t.rerun_count, t.message,
           j.head_sha, j.head_branch, j.branch_class, j.build_env, j.test_config, j.shard, j.num_shards,
           j.platform, j.job_name, j.job_conclusion, j.job_completed_at, j.job_found, j.infra_suspect
    FROM test_run t JOIN test_jobs j USING (workflow_id, workflow_run_attempt, job_id)
    ORDER BY j.build_env, j.test_config, t.file, t.classname, t.name, t.job_id
"""


@dataclass
class ResultsReport:
    day: str
    rows: int
    jobs: int
    jobs_not_found: int
    rows_without_job: int
    infra_jobs: dict[str, int]
    job_partitions: int


def _register_or(con, lake: Lake, table: str, days: list[str], empty_sql: str, name: str) -> int:
    n = lake.register(con, table, days, name=name)
    if n == 0:
        con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS {empty_sql}")
    return n


def _require(con, lake: Lake, table: str, days: list[str]) -> None:
    if lake.register(con, table, days) == 0:
        raise FileNotFoundError(f"{table} has no partition for {', '.join(days)} in {lake.store.display(table)}: "
                                "materialize it first")


def build_test_results(lake: Lake, day: str) -> ResultsReport:
    """Write `test_jobs` (one row per job attempt with test rows) and `test_results` (test rows
    with their job) for `day`; see the module docstring for the job look-back and infra rule."""
    con = connect()
    try:
        _require(con, lake, "test_run", [day])
        window = days_around(day, JOB_LOOKBACK_DAYS, JOB_LOOKAHEAD_DAYS)
        job_partitions = _register_or(con, lake, "workflow_job", window, _EMPTY_JOBS, "job_window")
        _register_or(con, lake, "workflow_run", window, _EMPTY_RUNS, "run_window")
        _register_or(con, lake, "job_failure", window, _EMPTY_FAILURES, "failure_window")
        con.execute(f"CREATE TEMP TABLE test_jobs AS {_TEST_JOBS_SQL}")
        lake.write("test_jobs", day, con.sql("SELECT * FROM test_jobs").to_arrow_reader(BATCH_ROWS))
        rows = lake.write("test_results", day, con.sql(_TEST_RESULTS_SQL).to_arrow_reader(BATCH_ROWS))
        jobs, not_found, rows_without_job = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE NOT job_found), "
            "coalesce(sum(tests) FILTER (WHERE NOT job_found), 0) FROM test_jobs").fetchone()
        infra = dict(con.execute(
            "SELECT infra_reason, count(*) FROM test_jobs WHERE infra_suspect GROUP BY ALL").fetchall())
    finally:
        con.close()
    return ResultsReport(day, rows, jobs, not_found, int(rows_without_job), infra, job_partitions)


# ---- daily aggregates ----------------------------------------------------------------------

_FAILING = "status IN ('failed', 'error')"

# Per test and configuration. Infra-suspect rows are left out of every counter but the two
# infra ones. Times are over clean passes (passed at the first attempt), so a flaky test's
# retries do not inflate its time.
_DAILY_STATS_SQL = f"""
    SELECT file, classname, name, build_env, test_config, platform, branch_class,
        count(*) FILTER (WHERE NOT infra_suspect) AS runs,
        count(*) FILTER (WHERE NOT infra_suspect AND status = 'passed') AS passed,
        count(*) FILTER (WHERE NOT infra_suspect AND status = 'failed') AS failed,
        count(*) FILTER (WHERE NOT infra_suspect AND status = 'error') AS errors,
        count(*) FILTER (WHERE NOT infra_suspect AND status = 'skipped') AS skipped,
        coalesce(sum(rerun_count) FILTER (WHERE NOT infra_suspect), 0)::BIGINT AS rerun_count,
        count(*) FILTER (WHERE NOT infra_suspect AND status = 'passed' AND rerun_count > 0) AS rerun_passed,
        count(*) FILTER (WHERE NOT infra_suspect AND {_FAILING} AND rerun_count > 0) AS rerun_failed,
        count(*) FILTER (WHERE NOT infra_suspect AND status = 'passed' AND rerun_count = 0) AS clean_passes,
        coalesce(sum(time) FILTER (WHERE NOT infra_suspect AND status = 'passed' AND rerun_count = 0), 0)
            AS pass_time,
        pass_time / nullif(clean_passes, 0) AS avg_pass_time,
        max(time) FILTER (WHERE NOT infra_suspect AND status = 'passed' AND rerun_count = 0) AS max_pass_time,
        count(DISTINCT head_sha) FILTER (WHERE NOT infra_suspect) AS shas,
        count(DISTINCT head_sha) FILTER (WHERE NOT infra_suspect AND {_FAILING}) AS failing_shas,
        count(DISTINCT job_id) FILTER (WHERE NOT infra_suspect) AS jobs,
        count(*) FILTER (WHERE infra_suspect) AS infra_runs,
        count(*) FILTER (WHERE infra_suspect AND {_FAILING}) AS infra_failures,
        min(job_completed_at) AS first_seen,
        max(job_completed_at) AS last_seen
    FROM test_results
    GROUP BY ALL
    ORDER BY build_env, test_config, platform, branch_class, file, classname, name
"""

# Per test, configuration and commit, only where the test failed, errored or needed a rerun
# (non-infra jobs): O(failures), not O(runs). Its passes on that commit the same day are
# counted next to the failures, which gives same-commit pass/fail pairs within a day. A retry
# that lands on a later day has no row here when it passed, but it is in that day's
# `test_jobs` (same run_id, build_env, test_config and shard, higher attempt; a retried shard
# runs the same tests): a non-infra retry job without a failure row for the test is a pass.
# A flip on consecutive main commits is a failure row at one commit and none at its
# neighbours where the configuration ran (`test_jobs`, not infra) and the test runs
# (`test_daily_stats`). So a window of these rows plus test_jobs answers both questions.
# Only the groups with a failure or a rerun are aggregated: most (test, configuration, commit)
# groups of a day only passed, and the distinct counts over millions of them cost ~20x the rest.
# The hash picks the groups that had one (a collision only lets a passing group through to the
# HAVING, which drops it; it never drops a failing group's rows).
_SHA_GROUP = "file, classname, name, build_env, test_config, platform, branch_class, head_sha"
_SHA_OUTCOMES_SQL = f"""
    WITH base AS (
        SELECT *, hash({_SHA_GROUP}) AS group_hash
        FROM test_results WHERE NOT infra_suspect AND head_sha IS NOT NULL
    )
    SELECT {_SHA_GROUP},
        count(*) AS runs,
        count(*) FILTER (WHERE status = 'passed') AS passed,
        count(*) FILTER (WHERE status = 'failed') AS failed,
        count(*) FILTER (WHERE status = 'error') AS errors,
        count(*) FILTER (WHERE status = 'skipped') AS skipped,
        count(*) FILTER (WHERE status = 'passed' AND rerun_count > 0) AS rerun_passed,
        sum(rerun_count)::BIGINT AS rerun_count,
        count(DISTINCT job_id) AS jobs,
        list(DISTINCT job_id ORDER BY job_id) FILTER (WHERE {_FAILING} OR rerun_count > 0) AS failing_job_ids,
        min(job_completed_at) AS first_at,
        max(job_completed_at) AS last_at
    FROM base
    WHERE group_hash IN (SELECT group_hash FROM base WHERE {_FAILING} OR rerun_count > 0)
    GROUP BY {_SHA_GROUP}
    HAVING failed + errors > 0 OR sum(rerun_count) > 0
    ORDER BY build_env, test_config, platform, file, classname, name, head_sha
"""

# Test time per invoking file (classname NULL) and per class, PyTorch's way: per workflow run
# attempt the sum of the file's test times across the shards that ran it, over main-branch
# runs where every job that ran the file succeeded and none is an infra suspect. `runs`
# counts those run attempts, so a window's average is sum(time) / sum(runs).
_GOOD_RUNS_CTE = """
    WITH r AS (
        SELECT workflow_id, workflow_run_attempt, build_env, coalesce(test_config, '') AS test_config,
               invoking_file, classname, time, job_conclusion, infra_suspect, head_sha, job_completed_at
        FROM test_results
        WHERE branch_class = 'main' AND build_env IS NOT NULL AND file <> ''
    ),
    good AS (
        SELECT workflow_id, workflow_run_attempt, build_env, test_config, invoking_file
        FROM r GROUP BY ALL
        HAVING bool_and(job_conclusion = 'success' AND NOT infra_suspect)
    )"""

_TIME_DAILY_SQL = _GOOD_RUNS_CTE + """,
    per_run AS (
        SELECT build_env, test_config, invoking_file, classname, workflow_id, workflow_run_attempt,
               sum(time) AS time
        FROM r JOIN good USING (workflow_id, workflow_run_attempt, build_env, test_config, invoking_file)
        GROUP BY GROUPING SETS ((build_env, test_config, invoking_file, workflow_id, workflow_run_attempt),
                                (build_env, test_config, invoking_file, classname, workflow_id, workflow_run_attempt))
    )
    SELECT build_env, test_config, invoking_file AS file, classname, count(*) AS runs, sum(time) AS time
    FROM per_run
    GROUP BY ALL
    ORDER BY build_env, test_config, file, classname NULLS FIRST
"""

# The same runs per invoking file and commit: what test_time_regressions needs to see a file's
# time move and name the first commit seen slow, without reading raw rows over its window.
# `first_at`, when the commit's first such run finished, orders commits within a day.
_TIME_SHA_DAILY_SQL = _GOOD_RUNS_CTE + """,
    per_run AS (
        SELECT build_env, test_config, invoking_file, workflow_id, workflow_run_attempt,
               any_value(head_sha) AS head_sha, sum(time) AS time, max(job_completed_at) AS completed_at
        FROM r JOIN good USING (workflow_id, workflow_run_attempt, build_env, test_config, invoking_file)
        WHERE head_sha IS NOT NULL
        GROUP BY ALL
    )
    SELECT build_env, test_config, invoking_file AS file, head_sha, count(*) AS runs, sum(time) AS time,
           min(completed_at) AS first_at
    FROM per_run
    GROUP BY ALL
    ORDER BY build_env, test_config, file, first_at, head_sha
"""

DAILY_TABLES = {
    "test_daily_stats": _DAILY_STATS_SQL,
    "test_sha_outcomes": _SHA_OUTCOMES_SQL,
    "test_time_daily": _TIME_DAILY_SQL,
    "test_time_sha_daily": _TIME_SHA_DAILY_SQL,
}


def build_test_daily_stats(lake: Lake, day: str) -> dict[str, int]:
    """Write the day's aggregates of `test_results` (the tables of DAILY_TABLES); returns rows per table."""
    con = connect()
    try:
        _require(con, lake, "test_results", [day])
        return {table: lake.write(table, day, con.sql(sql).to_arrow_reader(BATCH_ROWS))
                for table, sql in DAILY_TABLES.items()}
    finally:
        con.close()


def daily_stats_totals(lake: Lake, day: str) -> tuple[int, int]:
    """(test_results rows, runs + infra_runs summed over test_daily_stats) for `day`: every row
    must be counted exactly once by the aggregate, so the two must be equal."""
    con = connect()
    try:
        _require(con, lake, "test_results", [day])
        _require(con, lake, "test_daily_stats", [day])
        return con.execute(
            "SELECT (SELECT count(*) FROM test_results), "
            "(SELECT coalesce(sum(runs + infra_runs), 0)::BIGINT FROM test_daily_stats)").fetchone()
    finally:
        con.close()
