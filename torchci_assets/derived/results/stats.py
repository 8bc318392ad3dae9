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
from resources.sql import SqlFiles, compose, execute
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

SQL = SqlFiles(__file__)
_EMPTY = dict(SQL.steps("empty_views"))
# what test_jobs.sql needs to know: which jobs are main's and which ones count as infrastructure
_JOB_PARAMETERS = {"main_branches": list(MAIN_BRANCHES), "pull_request_events": list(PULL_REQUEST_EVENTS),
                   "died_conclusions": list(DIED_CONCLUSIONS), "infra_min_failures": INFRA_MIN_FAILURES,
                   "infra_failing_share": INFRA_FAILING_SHARE}


@dataclass
class ResultsReport:
    day: str
    rows: int
    jobs: int
    jobs_not_found: int
    rows_without_job: int
    infra_jobs: dict[str, int]
    job_partitions: int


def _register_or_empty(con, lake: Lake, table: str, days: list[str], name: str) -> int:
    n = lake.register(con, table, days, name=name)
    if n == 0:
        con.execute(compose(_EMPTY[table], view=name))
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
        job_partitions = _register_or_empty(con, lake, "workflow_job", window, "job_window")
        _register_or_empty(con, lake, "workflow_run", window, "run_window")
        _register_or_empty(con, lake, "job_failure", window, "failure_window")
        execute(con, SQL["test_jobs"], _JOB_PARAMETERS)
        lake.write("test_jobs", day, con.sql("SELECT * FROM test_jobs").to_arrow_reader(BATCH_ROWS))
        rows = lake.write("test_results", day, con.sql(SQL["test_results"]).to_arrow_reader(BATCH_ROWS))
        jobs, not_found, rows_without_job = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE NOT job_found), "
            "coalesce(sum(tests) FILTER (WHERE NOT job_found), 0) FROM test_jobs").fetchone()
        infra = dict(con.execute(
            "SELECT infra_reason, count(*) FROM test_jobs WHERE infra_suspect GROUP BY ALL").fetchall())
    finally:
        con.close()
    return ResultsReport(day, rows, jobs, not_found, int(rows_without_job), infra, job_partitions)


# ---- daily aggregates ----------------------------------------------------------------------

# The day's aggregates of test_results, each in its .sql file (which says what a row is).
DAILY_TABLES = ("test_daily_stats", "test_sha_outcomes", "test_time_daily", "test_time_sha_daily")


def build_test_daily_stats(lake: Lake, day: str) -> dict[str, int]:
    """Write the day's aggregates of `test_results` (the tables of DAILY_TABLES); returns rows per table."""
    con = connect()
    try:
        _require(con, lake, "test_results", [day])
        return {table: lake.write(table, day, con.sql(SQL[table]).to_arrow_reader(BATCH_ROWS))
                for table in DAILY_TABLES}
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
