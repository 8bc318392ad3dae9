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
are `other`), `other` for every other branch, `unknown` without a job. The main branch is the
configured one (`config.main_branch`: `main`, or `master` for a repository whose commits land
there), passed in by the assets: test times, slow tests and flaky detection read main's jobs
only, so a repository on `master` read as `main` would get none of them.

Workflow (`workflow_name`): the job's workflow run's name, as PyTorch's queries read it, else the
name the job's own webhooks carry; test_daily_stats counts the clean passes of PERIODIC_WORKFLOW's
jobs apart, for the slow-test list, which leaves that workflow out as PyTorch's does.

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

import functools
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from resources.lake import Lake, connect
from resources.sql import Columns, SqlFiles, compose, execute, relation, run_steps, statements_only
from torchci_assets.derived.results import increments, parts
from torchci_assets.derived.results.columns import (JOB_COLUMNS_ADDED, WEBHOOK_COLUMNS_READ, columns_of,
                                                    register_current)
from torchci_assets.partitions import days_around

JOB_LOOKBACK_DAYS = 2
JOB_LOOKAHEAD_DAYS = 1
# The main branch when none is configured (upstream.branches defaults to it), as config names it.
DEFAULT_MAIN_BRANCH = "refs/heads/main"
PULL_REQUEST_EVENTS = ("pull_request", "pull_request_target")
INFRA_MIN_FAILURES = 10
INFRA_FAILING_SHARE = 0.5
DIED_CONCLUSIONS = ("cancelled", "timed_out", "startup_failure")
# The workflow PyTorch's slow-test list leaves out (pytorch/pytorch tools/testing/update_slow_tests.py:
# `w.name != 'periodic'`): test_daily_stats counts its clean passes apart.
PERIODIC_WORKFLOW = "periodic"
BATCH_ROWS = 50_000

TEST_KEY = ["file", "classname", "name"]
CONFIG_KEY = ["build_env", "test_config", "platform", "branch_class"]

SQL = SqlFiles(__file__)
_EMPTY = dict(SQL.steps("empty_views"))
_INCREMENT = dict(SQL.steps("increments"))
_STATS_PARAMETERS = {"periodic_workflow": PERIODIC_WORKFLOW}


def job_parameters(main_branch: str = DEFAULT_MAIN_BRANCH) -> dict:
    """What test_jobs.sql needs to know: which jobs are main's and which ones count as infrastructure.
    `main_branch` is a ref as the config names it; jobs carry the bare branch name."""
    return {"main_branches": [main_branch.removeprefix("refs/heads/")],
            "pull_request_events": list(PULL_REQUEST_EVENTS), "died_conclusions": list(DIED_CONCLUSIONS),
            "infra_min_failures": INFRA_MIN_FAILURES, "infra_failing_share": INFRA_FAILING_SHARE}


@dataclass
class ResultsReport:
    day: str
    rows: int
    jobs: int
    jobs_not_found: int
    rows_without_job: int
    infra_jobs: dict[str, int]
    job_partitions: int
    written: parts.Written | None = None


def _register_or_empty(con, lake: Lake, table: str, days: list[str], name: str) -> int:
    n = register_current(con, lake, table, days, name, WEBHOOK_COLUMNS_READ.get(table, Columns()))
    if n == 0:
        con.execute(compose(_EMPTY[table], view=name))
    return n


def _require(con, lake: Lake, table: str, days: list[str], name: str | None = None) -> None:
    if _register(con, lake, table, days, name or table) == 0:
        raise FileNotFoundError(f"{table} has no partition for {', '.join(days)} in {lake.store.display(table)}: "
                                "materialize it first")


def _register(con, lake: Lake, table: str, days: list[str], name: str) -> int:
    """Like `lake.register`; test_jobs and test_results written before JOB_COLUMNS_ADDED read them as NULL."""
    if table in ("test_jobs", "test_results"):
        return register_current(con, lake, table, days, name, JOB_COLUMNS_ADDED)
    return lake.register(con, table, days, name=name)


def build_test_results(lake: Lake, day: str, incremental: bool = False,
                       main_branch: str = DEFAULT_MAIN_BRANCH) -> ResultsReport:
    """Write `test_jobs` (one row per job attempt with test rows) and `test_results` (test rows
    with their job) for `day`; see the module docstring for the job look-back, the branch class
    (`main_branch`) and the infra rule. In an intra-day refresh (`incremental`) by adding the
    test_run parts not joined yet (`parts`)."""
    layout, plan, sources = parts.plan(lake, day, incremental)
    job_sql = job_parameters(main_branch)
    con = connect()
    try:
        define_seconds_sum(con)
        _require(con, lake, "test_run", [day])
        window = days_around(day, JOB_LOOKBACK_DAYS, JOB_LOOKAHEAD_DAYS)
        job_partitions = _register_or_empty(con, lake, "workflow_job", window, "job_window")
        _register_or_empty(con, lake, "workflow_run", window, "run_window")
        _register_or_empty(con, lake, "job_failure", window, "failure_window")
        written = plan.reason
        if plan.mode != "recompute":
            written = parts.append(con, lake, day, layout, plan, sources.parts, job_sql)
        if isinstance(written, str):
            _require(con, lake, "test_run", [day])
            written = parts.rebuild(con, lake, day, sources.parts, sources.generation, job_sql, written)
        jobs, not_found, rows, rows_without_job = execute(con, _INCREMENT["job_totals"]).fetchall()[0]
        infra = dict(execute(con, _INCREMENT["infra_reasons"]).fetchall())
    finally:
        con.close()
    return ResultsReport(day, int(rows), jobs, not_found, int(rows_without_job), infra, job_partitions, written)


# ---- daily aggregates ----------------------------------------------------------------------

# The day's aggregates of test_results, each in its .sql file (which says what a row is): those
# the intra-day refresh keeps up to date (following test_run's parts, `increments`), and the
# test times, which only the daily run's test times and shard plans read.
DAILY_TABLES = ("test_daily_stats", "test_sha_outcomes")
TIME_TABLES = ("test_time_daily", "test_time_sha_daily")


@dataclass
class DailyStats:
    rows: dict[str, int]
    mode: str  # recompute, append or unchanged (see `increments`)
    reason: str
    parts_added: int = 0  # test_run parts whose rows this run counted: the new ones, or all in a recompute
    counted_rows: int = 0  # runs + infra_runs over test_daily_stats: every test_results row once


def build_test_daily_stats(lake: Lake, day: str, incremental: bool = False) -> DailyStats:
    """Write the day's test_daily_stats and test_sha_outcomes; in an intra-day refresh
    (`incremental`) by adding what moved since the previous result, when that is exact."""
    sources = increments.source_parts(lake, day)
    plan = increments.plan(increments.read_record(lake, day), sources, incremental)
    con = connect()
    try:
        define_seconds_sum(con)
        _require(con, lake, "test_results", [day], name="all_results")
        if _register(con, lake, "test_jobs", [day], "test_jobs") == 0:  # test_results written by hand (a test)
            return _write(con, lake, day, _recomputed(con), None, "recompute", "no test_jobs partition",
                          len(sources.parts))
        execute(con, _INCREMENT["counted_jobs"])
        if plan.mode != "recompute":
            plan = _moved(con, lake, day, plan)
        if plan.mode == "unchanged":
            return DailyStats(_stats_rows(con, lake, day), plan.mode, plan.reason)
        tables = _appended(con, lake, day) if plan.mode == "append" else None
        if tables is None and plan.mode == "append":
            plan = increments.Plan("recompute", "the longest pass or first/last seen of a test came from a job "
                                                "that changed since", [])
        tables = tables or _recomputed(con)
        record = increments.Record(sources.parts, sources.generation)
        added = plan.new_parts if plan.mode == "append" else sources.parts  # a recompute counts every part
        return _write(con, lake, day, tables, record, plan.mode, plan.reason, len(added))
    finally:
        con.close()


def _moved(con, lake: Lake, day: str, plan: increments.Plan) -> increments.Plan:
    """The plan once the jobs are compared with those counted: new ones, changed ones (a later
    webhook or log verdict), or a recompute when a counted job has more rows now."""
    counted = increments.counted_jobs_files(lake, day)
    if not counted:
        return increments.Plan("recompute", "no record of the jobs counted", [])
    lake.register_rows(con, counted, "counted_files")
    execute(con, _INCREMENT["counted"])
    older = sorted(set(JOB_COLUMNS_ADDED) - columns_of(con, "counted"))
    if older:  # counted by an earlier version: those fields cannot be compared
        return increments.Plan("recompute", f"the jobs counted were recorded without {', '.join(older)}", [])
    execute(con, _INCREMENT["moved_jobs"])
    new, changed, grown = execute(con, _INCREMENT["moved_counts"]).fetchall()[0]
    if grown:
        return increments.Plan("recompute", f"{grown} job(s) counted before have more test rows now (reports "
                                            "in two parts)", [])
    if new + changed == 0:
        return increments.Plan("unchanged", "no job new or changed since the previous result", [])
    return increments.Plan("append", f"{new} new and {changed} changed job(s) ({len(plan.new_parts)} new "
                                     "test_run part(s))", plan.new_parts)


def _write(con, lake: Lake, day: str, tables: dict[str, pa.Table], record: increments.Record | None, mode: str,
           reason: str, parts_added: int = 0) -> DailyStats:
    increments.drop_record(lake, day)  # a run killed from here on leaves no base to add to
    rows = {t: lake.write(t, day, tables[t]) for t in DAILY_TABLES}
    if record is not None:
        increments.write_counted_jobs(lake, day, relation(con, _INCREMENT["counted_now_rows"]).to_arrow_table())
        increments.write_record(lake, day, record)
    counted = sum(pc.sum(tables["test_daily_stats"][c]).as_py() or 0 for c in ("runs", "infra_runs"))
    return DailyStats(rows, mode, reason, parts_added, counted)


def _recomputed(con) -> dict[str, pa.Table]:
    con.execute(_INCREMENT["all_rows"])
    return {t: relation(con, SQL[t], _STATS_PARAMETERS).to_arrow_table() for t in DAILY_TABLES}


def _aggregate(con, step: str, sql: str) -> pa.Table:
    execute(con, _INCREMENT[step])
    return relation(con, SQL[sql], _STATS_PARAMETERS).to_arrow_table()


def _appended(con, lake: Lake, day: str) -> dict[str, pa.Table] | None:
    """The previous aggregates with the rows of the (commit, configuration) keys that moved
    recomputed (`increments` says why it is exact); None when a changed job may have held an
    extreme of a test that other rows of the day share (only the whole day can say)."""
    _require(con, lake, "test_daily_stats", [day], name="previous_stats")
    _require(con, lake, "test_sha_outcomes", [day], name="previous_outcomes")
    for step in ("touched_keys", "jobs_a", "jobs_b", "key_jobs"):
        execute(con, _INCREMENT[step])
    files = parts.files_of_jobs(con, lake, day)
    lake.register_files(con, files, "results_files")
    for step in ("key_rows", "rows_now", "rows_counted", "moved_groups"):
        execute(con, _INCREMENT[step])
    con.register("extremes_b", _aggregate(con, "changed_rows_b", "test_daily_stats"))
    con.register("extremes_a", _aggregate(con, "changed_rows_a", "test_daily_stats"))
    con.register("agg_b", _aggregate(con, "rows_b", "test_daily_stats"))
    con.register("agg_a", _aggregate(con, "rows_a", "test_daily_stats"))
    execute(con, _INCREMENT["outside_groups"])
    if execute(con, _INCREMENT["lost_extremes"]).fetchall()[0][0]:
        return None
    con.register("outcomes_a", relation(con, SQL["test_sha_outcomes"], _STATS_PARAMETERS).to_arrow_table())
    return {"test_daily_stats": con.sql(SQL["test_daily_stats_append"]).to_arrow_table(),
            "test_sha_outcomes": con.sql(SQL["test_sha_outcomes_append"]).to_arrow_table()}


def _stats_rows(con, lake: Lake, day: str) -> dict[str, int]:
    """Rows per table of the previous result, when there is nothing to add."""
    return {table: lake.rows_in(lake.files(table, [day])) for table in DAILY_TABLES}


def define_seconds_sum(con) -> None:
    """The macro seconds_sum (sql/seconds_sum.sql), in `con`: every table that sums times in
    seconds sums them the same way, whole microseconds, so none drifts from another in the last bits."""
    run_steps(con, SQL.steps("seconds_sum"))


def define_run_times(con) -> None:
    """The table macro run_times (sql/run_times.sql), in `con`, with the seconds_sum it uses: how a
    run's shards join into its test times, one definition for a day's runs (test_time_daily) and
    for the window's runs whose shards landed on different days (sharding's window_times), so the
    two cannot drift apart."""
    define_seconds_sum(con)
    run_steps(con, SQL.steps("run_times"))


def build_test_time_daily(lake: Lake, day: str) -> dict[str, int]:
    """Write the day's test times (the tables of TIME_TABLES), stamped with `time_rows_version`;
    returns rows per table."""
    stamp = {TIME_ROWS_VERSION_KEY: time_rows_version().encode()}
    con = connect()
    try:
        _require(con, lake, "test_results", [day])
        define_run_times(con)
        run_steps(con, SQL.steps("time_runs"))
        written = {}
        for table in TIME_TABLES:
            rows = con.sql(SQL[table]).to_arrow_reader(BATCH_ROWS)
            written[table] = lake.write(table, day, pa.RecordBatchReader.from_batches(
                rows.schema.with_metadata(stamp), rows))
        return written
    finally:
        con.close()


# ---- days of test times written by other SQL -------------------------------------------------

# The key of the time tables' Parquet footers that names the SQL which wrote them.
TIME_ROWS_VERSION_KEY = b"torchci.time_rows"
# What a day of TIME_TABLES holds is what these files say: a change to any of them may change it.
_TIME_ROWS_SQL = ("seconds_sum", "run_times", "time_runs", *TIME_TABLES)


@functools.cache
def time_rows_version() -> str:
    """A digest of the SQL that writes the time tables. Why: a window reads up to 16 days of
    them, written by whichever version ran on each day; rows of older SQL (runs counted per
    attempt, summed runs without their marker rows) count some runs twice beside today's, so such
    a day is rebuilt from its test_results rather than read (`rebuild_outdated_time_days`). Any
    change of the statements does so once for the window's days (rows that add up times otherwise
    would not equal today's bit for bit); a comment reworded rebuilds nothing."""
    return hashlib.sha256("\0".join(statements_only(SQL[name]) for name in _TIME_ROWS_SQL).encode()).hexdigest()[:16]


def _written_by(lake: Lake, path: str) -> str | None:
    metadata = lake.footer(path).metadata or {}
    version = metadata.get(TIME_ROWS_VERSION_KEY)
    return version.decode() if version is not None else None


def outdated_time_days(lake: Lake, reads: Mapping[str, Iterable[str]]) -> list[str]:
    """The days whose partition of a time table that `reads` names (table: the days read of it)
    other SQL than today's wrote; from the files' footers only."""
    version = time_rows_version()
    return sorted({d for table, days in reads.items() for d in days
                   if any(_written_by(lake, f) != version for f in lake.files(table, [d]))})


@dataclass
class TimeDays:
    rebuilt: list[str]  # outdated days rebuilt from their test_results
    kept: list[str]  # outdated days without test_results, read as they are


def rebuild_outdated_time_days(lake: Lake, reads: Mapping[str, Iterable[str]]) -> TimeDays:
    """Rebuild both time tables of the days other SQL wrote of those `reads` names (table: the days
    read of it; `outdated_time_days`) from their test_results, as the daily run would today; a day
    whose test_results is gone is read as it is. Each such day costs one day's build, once: rebuilt,
    it carries today's stamp."""
    out = TimeDays([], [])
    for d in outdated_time_days(lake, reads):
        if lake.files("test_results", [d]):
            build_test_time_daily(lake, d)
            out.rebuilt.append(d)
        else:
            out.kept.append(d)
    return out


def daily_stats_totals(lake: Lake, day: str) -> tuple[int, int]:
    """(test_results rows, runs + infra_runs summed over test_daily_stats) for `day`: every row
    must be counted exactly once by the aggregate, so the two must be equal. The rows from the
    files' footers, the sum from the aggregate (a few hundred thousand rows, two columns)."""
    results, stats = lake.files("test_results", [day]), lake.files("test_daily_stats", [day])
    for table, found in (("test_results", results), ("test_daily_stats", stats)):
        if not found:
            raise FileNotFoundError(f"{table} has no partition for {day} in {lake.store.display(table)}: "
                                    "materialize it first")
    rows = lake.rows_in(results)
    counted = 0
    for f in stats:
        table = lake.read_files([f], columns=["runs", "infra_runs"])
        counted += sum(pc.sum(table[c]).as_py() or 0 for c in ("runs", "infra_runs"))
    return rows, counted
