"""Dagster assets for test times and shard plans, published in PyTorch's formats, and the
test-time regressions that make plans miss.

Thin wrappers: the work is in `derived.sharding.times`, `.plans` and `.regressions`, plain
functions the tests call directly.
"""

import dagster as dg

from resources.configured import LakeResource, OutputsResource
from torchci_assets.checks import check_spec
from torchci_assets.config import load_config
from torchci_assets.derived.sharding.plans import build_shard_plans
from torchci_assets.derived.sharding.regressions import (MIN_BASELINE_DAYS, MIN_JUMP_SECONDS, NOISE_MULTIPLE, Rules,
                                                         markdown_table, max_cost_share, write_test_time_regressions)
from torchci_assets.derived.sharding.times import (MAX_LOSS, RETIRED_AFTER_DAYS, RUN_LOOKBACK_DAYS,
                                                   TEST_CLASS_TIMES_PATH, TEST_TIMES_PATH, WINDOW_DAYS, PublishRefused,
                                                   publish_test_times)
from torchci_assets.lake_metadata import lake_metadata
from torchci_assets.partitions import daily_partitions, window_mapping
from torchci_assets.publishing import later_day_kept, nothing_new
from torchci_assets.shown import readable

# Lineage only: the window read is the run's `window_days`.
_TIMES_WINDOW = window_mapping(WINDOW_DAYS - 1)
# and the days before it holding the shards of runs straddling its first day
_DAILY_TIMES_WINDOW = window_mapping(WINDOW_DAYS - 1 + RUN_LOOKBACK_DAYS)
# the month of jobs that tells a retired build_env (no job at all) from a live one
_RETIRED_WINDOW = window_mapping(RETIRED_AFTER_DAYS - 1)


def _outdated(context: dg.AssetExecutionContext, rebuilt: list[str], kept: list[str]) -> dict:
    """Metadata naming the window's days of test times that older SQL wrote, when there were any;
    the days rebuilt are recorded as materializations of both time tables, so their partitions in
    the Dagster UI say when and by what run they were written."""
    for day in rebuilt:
        for table in ("test_time_daily", "test_time_sha_daily"):
            context.log_event(dg.AssetMaterialization(
                asset_key=table, partition=day,
                description=f"rebuilt from test_results by {context.asset_key.to_user_string()}: older SQL wrote it"))
    out = {}
    if rebuilt:
        out["older_days_rebuilt"] = dg.MetadataValue.json(rebuilt)
    if kept:
        out["older_days_read_as_written"] = dg.MetadataValue.json(kept)
    return out


class TimesConfig(dg.Config):
    window_days: int = WINDOW_DAYS
    keep_old_entries: bool = True
    max_loss: float = MAX_LOSS


@dg.asset(
    name="test_times",
    pool="torchci_outputs",
    group_name="sharding",
    kinds={"parquet", "json"},
    deps=[dg.AssetDep("test_time_daily", partition_mapping=_DAILY_TIMES_WINDOW),
          dg.AssetDep("workflow_job", partition_mapping=_RETIRED_WINDOW)],
    partitions_def=daily_partitions,
    description="test-times.json and test-class-times.json (PyTorch's formats, with the \"default\" averages) "
                "for the window ending on the day, merged with the published files and published to "
                f"outputs {TEST_TIMES_PATH} and {TEST_CLASS_TIMES_PATH}; lake tables test_times, test_class_times.",
)
@lake_metadata
def test_times_asset(context: dg.AssetExecutionContext, config: TimesConfig, lake: LakeResource,
                     outputs: OutputsResource) -> dg.MaterializeResult:
    day = context.partition_key
    store = outputs.store()
    try:
        report = publish_test_times(lake.lake(), store, day, config.window_days, config.keep_old_entries,
                                    config.max_loss)
    except PublishRefused as exc:
        raise dg.Failure(description=str(exc), metadata={"published": False,
                                                          "output": store.display(TEST_TIMES_PATH)}) from None
    return dg.MaterializeResult(metadata={
        "window_days": config.window_days, "window_files": report.window_files,
        "window_classes": report.window_classes, "entries": report.entries,
        "class_entries": report.class_entries, "previous_entries": report.previous_entries,
        "previous_class_entries": report.previous_class_entries,
        "output": store.display(TEST_TIMES_PATH), "test_class_times": store.display(TEST_CLASS_TIMES_PATH),
        "published": bool(report.published),
        "files_published": dg.MetadataValue.json([store.display(p) for p in report.published]),
        **_outdated(context, report.days_rebuilt, report.days_outdated_kept),
        **(nothing_new(context, report.nothing_new) if report.nothing_new else {}),
        **(later_day_kept(context, day, report.later_day, TEST_TIMES_PATH) if report.later_day else {}),
    })


@dg.asset(
    name="shard_plans",
    pool="torchci_outputs",
    group_name="sharding",
    kinds={"parquet", "json"},
    deps=["test_times", dg.AssetDep("workflow_job", partition_mapping=_TIMES_WINDOW)],
    partitions_def=daily_partitions,
    description="A shard plan for every build_env/test_config from the day's test times, published to "
                "outputs shard-plans/<build_env>/<test_config>.json; lake table shard_plans.",
)
@lake_metadata
def shard_plans_asset(context: dg.AssetExecutionContext, config: TimesConfig, lake: LakeResource,
                      outputs: OutputsResource) -> dg.MaterializeResult:
    store = outputs.store()
    day = context.partition_key
    report = build_shard_plans(lake.lake(), store, day, config.window_days)
    return dg.MaterializeResult(metadata={
        "configs": report.configs, "test_files": report.files, "shards": report.shards,
        "longest_shard_expected_s": readable(report.longest_expected_s),
        "published": not (report.later_day or report.nothing_new), "output": store.display("shard-plans/"),
        "plans_rewritten": report.written,
        **(nothing_new(context, report.nothing_new) if report.nothing_new else {}),
        **(later_day_kept(context, day, report.later_day, "shard-plans/") if report.later_day else {}),
    })


class RegressionsConfig(dg.Config):
    window_days: int = WINDOW_DAYS
    noise_multiple: float = NOISE_MULTIPLE
    min_jump_s: float = MIN_JUMP_SECONDS
    min_baseline_days: int = MIN_BASELINE_DAYS
    # the check's threshold; unset: $TORCHCI_MAX_REGRESSION_SHARE, else 0.05
    max_cost_share: float | None = None


@dg.asset(
    name="test_time_regressions",
    group_name="sharding",
    kinds={"parquet"},
    deps=[dg.AssetDep("test_time_sha_daily", partition_mapping=_TIMES_WINDOW),
          dg.AssetDep("test_time_daily", partition_mapping=_DAILY_TIMES_WINDOW),
          dg.AssetDep("push", partition_mapping=window_mapping(WINDOW_DAYS))],
    partitions_def=daily_partitions,
    check_specs=[check_spec("regression_cost_below_share", "test_time_regressions")],
    description="Test files whose time in a build_env/test_config rose beyond their own day-to-day noise "
                "(robust: median and MAD of daily times over the window): before/after, the jump, the "
                "noise it beat, since when, the first commit seen slow and the last fast one, and the "
                "share of the config's total it costs; lake table test_time_regressions.",
)
@lake_metadata
def test_time_regressions_asset(context: dg.AssetExecutionContext, config: RegressionsConfig,
                                lake: LakeResource) -> dg.MaterializeResult:
    lk = lake.lake()
    try:
        share = config.max_cost_share if config.max_cost_share is not None else max_cost_share()
    except ValueError as exc:
        raise dg.Failure(description=str(exc)) from None
    if not 0 < share <= 1:
        raise dg.Failure(description=f"max_cost_share must be a fraction in (0, 1], e.g. 0.05; got {share}")
    rules = Rules(config.window_days, config.noise_multiple, config.min_jump_s, config.min_baseline_days)
    report = write_test_time_regressions(lk, context.partition_key, rules, load_config().main_branch)
    rows = report.rows
    if report.window_days_read == 0:
        context.log.warning("no test_time_sha_daily partition in the window, nothing to compare: materialize "
                            "test_daily_stats (which writes it) for the window's days")
    over = [r for r in rows if r["cost_share"] > share]
    worst = max((r["cost_share"] for r in rows), default=0.0)
    check = dg.AssetCheckResult(
        check_name="regression_cost_below_share", passed=not over, severity=dg.AssetCheckSeverity.WARN,
        metadata={"threshold": share, "regressions_over_threshold": len(over), "worst_cost_share": readable(worst, 4),
                  "over_threshold": dg.MetadataValue.md(markdown_table(over, empty="None over the threshold."))})
    return dg.MaterializeResult(metadata={
        "regressions": len(rows), "configs": len({(r["build_env"], r["test_config"]) for r in rows}),
        "files_seen_today": report.files_seen, "window_days_read": report.window_days_read,
        "worst_cost_share": readable(worst, 4), "largest": dg.MetadataValue.md(markdown_table(rows)),
        "path": lk.store.display(lk.partition_path("test_time_regressions", context.partition_key)),
        **_outdated(context, report.days_rebuilt, report.days_outdated_kept),
    }, check_results=[check])


SHARDING_ASSETS = [test_times_asset, shard_plans_asset, test_time_regressions_asset]
