"""Dagster assets for test results: the day's tests joined with their jobs, and the daily aggregates
every window (flakiness, test times, the HUD) reads instead of raw rows.

Thin wrappers: the work is in `derived.results.stats`, plain functions the tests call directly.
"""

import dagster as dg

from resources.configured import LakeResource
from torchci_assets.checks import check_spec
from torchci_assets.config import load_config
from torchci_assets.derived.results.stats import (JOB_LOOKAHEAD_DAYS, JOB_LOOKBACK_DAYS, build_test_daily_stats,
                                                  build_test_results, build_test_time_daily, daily_stats_totals)
from torchci_assets.ingest.increments import is_refresh
from torchci_assets.lake_metadata import lake_metadata, table_metadata
from torchci_assets.partitions import daily_partitions, window_mapping
from torchci_assets.shown import readable
from torchci_assets.staging import sweep_staging

# Share of test rows whose job is in no workflow_job partition of the look-back window above
# which test_results is flagged (webhooks missing or late beyond the window).
MAX_ROWS_WITHOUT_JOB = 0.01
_JOB_WINDOW = window_mapping(JOB_LOOKBACK_DAYS, JOB_LOOKAHEAD_DAYS)
# The aggregates read the day's test rows, its jobs (which jobs count, and as infrastructure), and
# test_run's list of parts, to add only the parts not counted yet in an intra-day refresh.
_DAILY_STATS_READS = ["test_results", "test_jobs", "test_run"]


@dg.multi_asset(
    specs=[
        dg.AssetSpec("test_results", group_name="results", kinds={"parquet"},
                     deps=["test_run", dg.AssetDep("workflow_job", partition_mapping=_JOB_WINDOW),
                           dg.AssetDep("workflow_run", partition_mapping=_JOB_WINDOW),
                           dg.AssetDep("job_failure", partition_mapping=_JOB_WINDOW)],
                     description=f"test_run rows of the day with their job (sha, branch, branch_class main/other/"
                                 f"unknown, build_env, test_config, shard, platform, conclusion) from workflow_job "
                                 f"days D-{JOB_LOOKBACK_DAYS}..D+{JOB_LOOKAHEAD_DAYS}, and the job's infra_suspect "
                                 "flag."),
        dg.AssetSpec("test_jobs", group_name="results", kinds={"parquet"},
                     deps=["test_run", dg.AssetDep("workflow_job", partition_mapping=_JOB_WINDOW),
                           dg.AssetDep("workflow_run", partition_mapping=_JOB_WINDOW),
                           dg.AssetDep("job_failure", partition_mapping=_JOB_WINDOW)],
                     description="One row per job attempt with test rows that day: test counts, job context, "
                                 "the log's failure_rule, and infra_reason (job-died, log-infra, "
                                 "failed-outside-tests, mass-failure, shared-message)."),
    ],
    check_specs=[check_spec("rows_have_their_job", "test_results")],
    partitions_def=daily_partitions,
    can_subset=False,
)
@lake_metadata
def test_results_assets(context: dg.AssetExecutionContext, lake: LakeResource):
    """Joins the day's test rows with their jobs (main's: those of the configured main branch) and
    flags infra-suspect jobs. In an intra-day refresh it adds the test_run parts it has not joined
    yet and rewrites the files of the jobs that changed since (`derived.results.parts`)."""
    day = context.partition_key
    lk = lake.lake(keep_listings=True)  # its folders are its own: see `ingest.assets`
    report = build_test_results(lk, day, incremental=is_refresh(context.run.tags),
                                main_branch=load_config().main_branch)
    written = report.written
    swept = sweep_staging(context, lk, ["test_results", "test_jobs"], day)  # a killed run's files
    if report.job_partitions == 0:
        context.log.warning(f"no workflow_job partition within D-{JOB_LOOKBACK_DAYS}..D+{JOB_LOOKAHEAD_DAYS}: "
                            "every test row is without its job")
    yield dg.MaterializeResult(asset_key="test_results", metadata={
        "rows": report.rows, "rows_without_job": report.rows_without_job,
        "job_partitions_read": report.job_partitions,
        "path": lk.store.display(f"test_results/day={day}"),
        "mode": written.mode, "mode_reason": written.reason, "test_run_parts_added": written.parts_added,
        "files_rewritten": written.files_rewritten, "rows_written": written.rows_written,
        "stale_staging_files_removed": swept, **table_metadata(lk, "test_results", day),
    })
    yield dg.MaterializeResult(asset_key="test_jobs", metadata={
        "rows": report.jobs, "jobs_not_found": report.jobs_not_found,
        "infra_suspect_jobs": sum(report.infra_jobs.values()),
        "infra_reasons": dg.MetadataValue.json(report.infra_jobs), **table_metadata(lk, "test_jobs", day),
    })
    share = report.rows_without_job / report.rows if report.rows else 0.0
    yield dg.AssetCheckResult(
        asset_key="test_results", check_name="rows_have_their_job", passed=share <= MAX_ROWS_WITHOUT_JOB,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={"rows_without_job": report.rows_without_job, "share": readable(share, 6),
                  "threshold": MAX_ROWS_WITHOUT_JOB})


@dg.multi_asset(
    specs=[
        dg.AssetSpec("test_daily_stats", group_name="results", kinds={"parquet"}, deps=_DAILY_STATS_READS,
                     description="Per day, test and (build_env, test_config, platform, branch_class): runs, "
                                 "outcomes, reruns, failed-then-passed, clean-pass time, distinct shas and jobs, "
                                 "infra-suspect runs counted apart."),
        dg.AssetSpec("test_sha_outcomes", group_name="results", kinds={"parquet"}, deps=_DAILY_STATS_READS,
                     description="Per day, test, configuration and commit where the test failed or needed a "
                                 "rerun (non-infra jobs): its outcomes on that commit and the failing job ids. "
                                 "With test_jobs, enough for same-commit pairs and flips over any window."),
    ],
    check_specs=[check_spec("every_test_row_counted_once", "test_daily_stats")],
    partitions_def=daily_partitions,
    can_subset=False,
)
@lake_metadata
def test_daily_stats_assets(context: dg.AssetExecutionContext, lake: LakeResource):
    """Aggregates the day's test_results so that windows never re-read raw rows. In an intra-day
    refresh it adds what moved since its previous result (new jobs, jobs whose fields changed),
    reading only the rows of the commits and configurations they touch (`derived.results.increments`)."""
    day = context.partition_key
    lk = lake.lake(keep_listings=True)  # its folders are its own: see `ingest.assets`
    built = build_test_daily_stats(lk, day, incremental=is_refresh(context.run.tags))
    for table, n in built.rows.items():
        yield dg.MaterializeResult(asset_key=table, metadata={
            "rows": n, "path": lk.store.display(lk.partition_path(table, day)),
            "mode": built.mode, "mode_reason": built.reason, "test_run_parts_added": built.parts_added,
            **table_metadata(lk, table, day)})
    results, counted = daily_stats_totals(lk, day)
    yield dg.AssetCheckResult(asset_key="test_daily_stats", check_name="every_test_row_counted_once",
                              passed=results == counted,
                              metadata={"test_results_rows": results, "counted_runs": counted})


@dg.multi_asset(
    specs=[
        dg.AssetSpec("test_time_daily", group_name="results", kinds={"parquet"}, deps=["test_results"],
                     description="Per day, build_env, test_config and invoking file (classname null) or class: "
                                 "the successful main-branch runs summed that day (each once, each shard at its "
                                 "latest clean attempt) and their summed test time; a marker row per run "
                                 "summed, and per shard attempt the rows of runs split over days."),
        dg.AssetSpec("test_time_sha_daily", group_name="results", kinds={"parquet"}, deps=["test_results"],
                     description="Per day, build_env, test_config, invoking file and commit (head_sha): the "
                                 "same runs test_time_daily sums that day and their summed test time, with "
                                 "when the commit's first run finished (first_at)."),
    ],
    partitions_def=daily_partitions,
    can_subset=False,
)
@lake_metadata
def test_time_daily_assets(context: dg.AssetExecutionContext, lake: LakeResource):
    """The day's test times from test_results: only test times and shard plans read them, which
    the daily run refreshes, so the intra-day refresh leaves them out."""
    day = context.partition_key
    lk = lake.lake()
    for table, n in build_test_time_daily(lk, day).items():
        yield dg.MaterializeResult(asset_key=table, metadata={
            "rows": n, "path": lk.store.display(lk.partition_path(table, day))})


RESULTS_ASSETS = [test_results_assets, test_daily_stats_assets, test_time_daily_assets]
