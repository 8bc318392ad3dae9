"""Dagster assets for test times and shard plans, published in PyTorch's formats.

Thin wrappers: the work is in `derived.sharding.times` and `.plans`, plain functions the tests
call directly.
"""

import dagster as dg

from resources import LakeResource, OutputsResource
from torchci_assets.derived.sharding.plans import build_shard_plans
from torchci_assets.derived.sharding.times import (MAX_LOSS, TEST_CLASS_TIMES_PATH, TEST_TIMES_PATH, WINDOW_DAYS,
                                                   PublishRefused, publish_test_times)
from torchci_assets.partitions import daily_partitions, window_mapping
from torchci_assets.publishing import nothing_new

# Lineage only: the window read is the run's `window_days`.
_TIMES_WINDOW = window_mapping(WINDOW_DAYS - 1)


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
        "published_now": dg.MetadataValue.json(report.published),
        **(nothing_new(context, report.nothing_new) if report.nothing_new else {}),
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
        **(nothing_new(context, report.nothing_new) if report.nothing_new else {}),
    })


SHARDING_ASSETS = [test_times_asset, shard_plans_asset]
