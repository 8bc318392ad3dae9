"""Dagster assets for test reports: ingest (`test_run`), joins and daily aggregates, test times.

Thin wrappers: the work is in `ingest.test_reports`, `derived.test_stats` and
`derived.test_times`, plain functions the tests call directly.
"""

import warnings

import dagster as dg

from resources import ArchiveResource, LakeResource, OutputsResource
from torchci_assets.checks import not_null_check, reject_rate_check, unique_key_check
from torchci_assets.derived.shard_plans import build_shard_plans
from torchci_assets.derived.test_stats import (JOB_LOOKAHEAD_DAYS, JOB_LOOKBACK_DAYS, build_test_daily_stats,
                                               build_test_results, daily_stats_totals)
from torchci_assets.derived.test_times import (MAX_LOSS, TEST_CLASS_TIMES_PATH, TEST_TIMES_PATH, WINDOW_DAYS,
                                               PublishRefused, publish_test_times)
from torchci_assets.ingest.rejects import rejects_markdown
from torchci_assets.ingest.test_reports import KEY_COLUMNS, REQUIRED_COLUMNS, ingest_test_run_day
from torchci_assets.partitions import daily_partitions

TEST_RUN_REJECTS = dg.AssetKey(["rejects", "test_run"])
# Share of test rows whose job is in no workflow_job partition of the look-back window above
# which test_results is flagged (webhooks missing or late beyond the window).
MAX_ROWS_WITHOUT_JOB = 0.01

# Windows reach past the first and last partitions (D+1 of today does not exist yet); the
# parameter that allows it is marked beta, which is not worth a warning on every import.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", dg.BetaWarning)
    _JOB_WINDOW = dg.TimeWindowPartitionMapping(start_offset=-JOB_LOOKBACK_DAYS, end_offset=JOB_LOOKAHEAD_DAYS,
                                                allow_nonexistent_upstream_partitions=True)
    # Lineage only: the window read is the run's `window_days`.
    _TIMES_WINDOW = dg.TimeWindowPartitionMapping(start_offset=-(WINDOW_DAYS - 1),
                                                  allow_nonexistent_upstream_partitions=True)


@dg.multi_asset(
    specs=[
        dg.AssetSpec("test_run", group_name="ingest", kinds={"parquet"},
                     description="One row per test per job attempt from the day's JUnit XML reports "
                                 "(test-reports/) and PyTorch's JSONL rows (test-runs/): final status, failed "
                                 "attempts before it (rerun_count), summed time, first failure line."),
        dg.AssetSpec(TEST_RUN_REJECTS, group_name="ingest", kinds={"parquet"},
                     description="Test reports, JSONL files and lines that could not be read, with location and "
                                 "reason (parts `test-reports` and `test-runs` of the `rejects` table)."),
    ],
    check_specs=[
        dg.AssetCheckSpec("unique_test_per_job", asset="test_run"),
        dg.AssetCheckSpec("required_columns_not_null", asset="test_run"),
        dg.AssetCheckSpec("reject_rate_below_threshold", asset="test_run"),
    ],
    partitions_def=daily_partitions,
    can_subset=False,
)
def test_run_asset(context: dg.AssetExecutionContext, archive: ArchiveResource, lake: LakeResource):
    """Reads the day's test reports and test-runs files and writes `test_run` and its rejects."""
    day = context.partition_key
    lk = lake.lake()
    report = ingest_test_run_day(archive.store(), lk, day, log=context.log.info)
    if report.files == 0:
        context.log.warning(f"no test reports or test-runs files for day={day} under "
                            f"{archive.store().display()}; wrote an empty partition")
    rejects = [r for source in report.rejects.values() for r in source]
    for r in rejects[:20]:
        context.log.warning(f"rejected {r.location}: {r.reason}")
    yield dg.MaterializeResult(asset_key="test_run", metadata={
        "rows": report.rows, "files": report.files, "report_files": report.report_files,
        "test_runs_files": report.runs_files, "rejects": report.reject_count,
        "bytes": dg.MetadataValue.int(report.bytes_read),
        "entries_folded_across_files": report.staged_rows - report.rows,
        "path": lk.store.display(lk.partition_path("test_run", day)),
    })
    yield dg.MaterializeResult(asset_key=TEST_RUN_REJECTS, metadata={
        "rows": report.reject_count,
        "by_source": dg.MetadataValue.json({s: len(r) for s, r in report.rejects.items()}),
        "preview": dg.MetadataValue.md(rejects_markdown(rejects)),
    })
    unique = unique_key_check(lk, "test_run", day, KEY_COLUMNS)
    yield dg.AssetCheckResult(asset_key="test_run", check_name="unique_test_per_job", passed=unique.passed,
                              metadata=unique.metadata)
    yield not_null_check(lk, "test_run", day, REQUIRED_COLUMNS)
    yield reject_rate_check("test_run", report.reject_count, report.records)


@dg.multi_asset(
    specs=[
        dg.AssetSpec("test_results", group_name="tests", kinds={"parquet"},
                     deps=["test_run", dg.AssetDep("workflow_job", partition_mapping=_JOB_WINDOW),
                           dg.AssetDep("workflow_run", partition_mapping=_JOB_WINDOW)],
                     description=f"test_run rows of the day with their job (sha, branch, branch_class main/other/"
                                 f"unknown, build_env, test_config, shard, platform, conclusion) from workflow_job "
                                 f"days D-{JOB_LOOKBACK_DAYS}..D+{JOB_LOOKAHEAD_DAYS}, and the job's infra_suspect "
                                 "flag."),
        dg.AssetSpec("test_jobs", group_name="tests", kinds={"parquet"}, deps=["test_run"],
                     description="One row per job attempt with test rows that day: test counts, job context, "
                                 "and infra_reason (job-died, failed-outside-tests, mass-failure, shared-message)."),
    ],
    check_specs=[dg.AssetCheckSpec("rows_have_their_job", asset="test_results")],
    partitions_def=daily_partitions,
    can_subset=False,
)
def test_results_asset(context: dg.AssetExecutionContext, lake: LakeResource):
    """Joins the day's test rows with their jobs and flags infra-suspect jobs."""
    day = context.partition_key
    lk = lake.lake()
    report = build_test_results(lk, day)
    if report.job_partitions == 0:
        context.log.warning(f"no workflow_job partition within D-{JOB_LOOKBACK_DAYS}..D+{JOB_LOOKAHEAD_DAYS}: "
                            "every test row is without its job")
    yield dg.MaterializeResult(asset_key="test_results", metadata={
        "rows": report.rows, "rows_without_job": report.rows_without_job,
        "job_partitions_read": report.job_partitions,
        "path": lk.store.display(lk.partition_path("test_results", day)),
    })
    yield dg.MaterializeResult(asset_key="test_jobs", metadata={
        "rows": report.jobs, "jobs_not_found": report.jobs_not_found,
        "infra_suspect_jobs": sum(report.infra_jobs.values()),
        "infra_reasons": dg.MetadataValue.json(report.infra_jobs),
    })
    share = report.rows_without_job / report.rows if report.rows else 0.0
    yield dg.AssetCheckResult(
        asset_key="test_results", check_name="rows_have_their_job", passed=share <= MAX_ROWS_WITHOUT_JOB,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={"rows_without_job": report.rows_without_job, "share": round(share, 6),
                  "threshold": MAX_ROWS_WITHOUT_JOB})


@dg.multi_asset(
    specs=[
        dg.AssetSpec("test_daily_stats", group_name="tests", kinds={"parquet"}, deps=["test_results"],
                     description="Per day, test and (build_env, test_config, platform, branch_class): runs, "
                                 "outcomes, reruns, failed-then-passed, clean-pass time, distinct shas and jobs, "
                                 "infra-suspect runs counted apart."),
        dg.AssetSpec("test_sha_outcomes", group_name="tests", kinds={"parquet"}, deps=["test_results"],
                     description="Per day, test, configuration and commit where the test failed or needed a "
                                 "rerun (non-infra jobs): its outcomes on that commit and the failing job ids. "
                                 "With test_jobs, enough for same-commit pairs and flips over any window."),
        dg.AssetSpec("test_time_daily", group_name="tests", kinds={"parquet"}, deps=["test_results"],
                     description="Per day, build_env, test_config and invoking file (classname null) or class: "
                                 "successful main-branch run attempts and their summed test time."),
    ],
    check_specs=[dg.AssetCheckSpec("every_test_row_counted_once", asset="test_daily_stats")],
    partitions_def=daily_partitions,
    can_subset=False,
)
def test_daily_stats_asset(context: dg.AssetExecutionContext, lake: LakeResource):
    """Aggregates the day's test_results so that windows never re-read raw rows."""
    day = context.partition_key
    lk = lake.lake()
    rows = build_test_daily_stats(lk, day)
    for table, n in rows.items():
        yield dg.MaterializeResult(asset_key=table, metadata={
            "rows": n, "path": lk.store.display(lk.partition_path(table, day))})
    results, counted = daily_stats_totals(lk, day)
    yield dg.AssetCheckResult(asset_key="test_daily_stats", check_name="every_test_row_counted_once",
                              passed=results == counted,
                              metadata={"test_results_rows": results, "counted_runs": counted})


class TimesConfig(dg.Config):
    window_days: int = WINDOW_DAYS
    keep_old_entries: bool = True
    max_loss: float = MAX_LOSS


@dg.asset(
    name="test_times",
    pool="torchci_outputs",
    group_name="tests",
    kinds={"parquet", "json"},
    deps=[dg.AssetDep("test_time_daily", partition_mapping=_TIMES_WINDOW)],
    partitions_def=daily_partitions,
    description="test-times.json and test-class-times.json (PyTorch's formats, with the \"default\" averages) "
                "for the window ending on the day, merged with the published files and published to "
                f"outputs {TEST_TIMES_PATH} and {TEST_CLASS_TIMES_PATH}; lake tables test_times, test_class_times.",
)
def test_times_asset(context: dg.AssetExecutionContext, config: TimesConfig, lake: LakeResource,
                     outputs: OutputsResource) -> dg.MaterializeResult:
    day = context.partition_key
    store = outputs.store()
    try:
        report = publish_test_times(lake.lake(), store, day, config.window_days, config.keep_old_entries,
                                    config.max_loss)
    except PublishRefused as exc:
        raise dg.Failure(description=str(exc), metadata={"published": store.display(TEST_TIMES_PATH)}) from None
    return dg.MaterializeResult(metadata={
        "window_days": config.window_days, "window_files": report.window_files,
        "window_classes": report.window_classes, "entries": report.entries,
        "class_entries": report.class_entries, "previous_entries": report.previous_entries,
        "previous_class_entries": report.previous_class_entries,
        "test_times": store.display(TEST_TIMES_PATH), "test_class_times": store.display(TEST_CLASS_TIMES_PATH),
    })


@dg.asset(
    name="shard_plans",
    pool="torchci_outputs",
    group_name="tests",
    kinds={"parquet", "json"},
    deps=["test_times", dg.AssetDep("workflow_job", partition_mapping=_TIMES_WINDOW)],
    partitions_def=daily_partitions,
    description="A shard plan for every build_env/test_config from the day's test times, published to "
                "outputs shard-plans/<build_env>/<test_config>.json; lake table shard_plans.",
)
def shard_plans_asset(context: dg.AssetExecutionContext, config: TimesConfig, lake: LakeResource,
                      outputs: OutputsResource) -> dg.MaterializeResult:
    store = outputs.store()
    report = build_shard_plans(lake.lake(), store, context.partition_key, config.window_days)
    return dg.MaterializeResult(metadata={
        "configs": report.configs, "files": report.files, "shards": report.shards,
        "longest_shard_expected_s": round(report.longest_expected_s, 1),
        "published": store.display("shard-plans/"),
    })


TEST_ASSETS = [test_run_asset, test_results_asset, test_daily_stats_asset, test_times_asset, shard_plans_asset]

