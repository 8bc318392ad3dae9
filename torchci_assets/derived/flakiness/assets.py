"""Dagster assets for flaky tests, the disabled and slow test lists and the platform smoke sets.

Thin wrappers over `derived.flakiness.flaky`, `.lists` and `.smoke`. Each day's partition is
the window of `window_days` days ending that day, read from the daily aggregates of
`derived.results`.
"""

import dagster as dg

from resources import LakeResource, OutputsResource
from torchci_assets.checks import unique_key_check
from torchci_assets.derived.flakiness.flaky import VERDICTS, WINDOW_DAYS, build_flaky_tests
from torchci_assets.derived.flakiness.lists import (DISABLED_TESTS_PATH, REENABLED_TESTS_PATH, SLOW_TESTS_PATH,
                                                    publish_disabled_tests, publish_slow_tests)
from torchci_assets.derived.flakiness.smoke import SMOKE_DIR, publish_smoke_tests
from torchci_assets.partitions import daily_partitions, window_mapping
from torchci_assets.publishing import nothing_new

# Lineage: the window read is the run's `window_days`.
_WINDOW = window_mapping(WINDOW_DAYS - 1)


class WindowConfig(dg.Config):
    window_days: int = WINDOW_DAYS


@dg.multi_asset(
    specs=[
        dg.AssetSpec("flaky_tests", group_name="tests", kinds={"parquet"},
                     deps=[dg.AssetDep(t, partition_mapping=_WINDOW)
                           for t in ("test_daily_stats", "test_sha_outcomes", "test_jobs", "push")],
                     description="One row per test over the window ending on the day: runs, failures, rerun "
                                 "passes, same-commit pairs, main-branch flips, flake rate with its Wilson "
                                 "interval, the platforms where it flaked, broken range, and the verdict "
                                 "(flaky, broken, healthy, insufficient_data)."),
        dg.AssetSpec("flaky_test_platforms", group_name="tests", kinds={"parquet"},
                     deps=[dg.AssetDep(t, partition_mapping=_WINDOW)
                           for t in ("test_daily_stats", "test_sha_outcomes", "test_jobs", "push")],
                     description="The same evidence per test and platform, with failing and platform-exclusive "
                                 "failing commits (the smoke sets' input)."),
    ],
    check_specs=[dg.AssetCheckSpec("unique_file_classname_name", asset="flaky_tests")],
    partitions_def=daily_partitions,
    can_subset=False,
)
def flaky_tests_asset(context: dg.AssetExecutionContext, config: WindowConfig, lake: LakeResource):
    day = context.partition_key
    lk = lake.lake()
    report = build_flaky_tests(lk, day, config.window_days)
    if report.days_read < config.window_days:
        context.log.warning(f"the window has {report.days_read} of {config.window_days} days of test_daily_stats")
    yield dg.MaterializeResult(asset_key="flaky_tests", metadata={
        "tests": report.tests, "window_days": config.window_days, "days_read": report.days_read,
        **{f"verdict_{v}": report.verdicts[v] for v in VERDICTS},
        "path": lk.store.display(lk.partition_path("flaky_tests", day)),
    })
    yield dg.MaterializeResult(asset_key="flaky_test_platforms", metadata={
        "path": lk.store.display(lk.partition_path("flaky_test_platforms", day))})
    yield unique_key_check(lk, "flaky_tests", day, ["file", "classname", "name"])


@dg.asset(
    name="disabled_tests", group_name="tests", kinds={"parquet", "json"}, deps=["flaky_tests"], pool="torchci_outputs",
    partitions_def=daily_partitions,
    description=f"{DISABLED_TESTS_PATH} in PyTorch's format (flaky tests with evidence in at least 3 jobs, on the "
                f"platforms where they flaked), merged with the published file; tests clean for a whole window "
                f"are dropped and listed in {REENABLED_TESTS_PATH}. Lake table disabled_tests.",
)
def disabled_tests_asset(context: dg.AssetExecutionContext, lake: LakeResource,
                         outputs: OutputsResource) -> dg.MaterializeResult:
    store = outputs.store()
    decision = publish_disabled_tests(lake.lake(), store, context.partition_key)
    return dg.MaterializeResult(metadata={
        "disabled": len(decision.disabled), "newly_disabled": len(decision.new),
        "reenabled": len(decision.reenabled),
        "newly_disabled_tests": dg.MetadataValue.json(decision.new[:50]),
        "reenabled_tests": dg.MetadataValue.json(sorted(decision.reenabled)[:50]),
        "published": store.display(DISABLED_TESTS_PATH),
        **(nothing_new(context, decision.nothing_new) if decision.nothing_new else {}),
    })


@dg.asset(
    name="slow_tests", group_name="tests", kinds={"parquet", "json"}, pool="torchci_outputs",
    deps=[dg.AssetDep("test_daily_stats", partition_mapping=_WINDOW)], partitions_def=daily_partitions,
    description=f"{SLOW_TESTS_PATH} in PyTorch's format: tests averaging over 60 s on clean passes of the main "
                "branch in the window (slowest configuration). Lake table slow_tests.",
)
def slow_tests_asset(context: dg.AssetExecutionContext, config: WindowConfig, lake: LakeResource,
                     outputs: OutputsResource) -> dg.MaterializeResult:
    store = outputs.store()
    n, quiet = publish_slow_tests(lake.lake(), store, context.partition_key, config.window_days)
    return dg.MaterializeResult(metadata={"slow_tests": n, "window_days": config.window_days,
                                          "published": store.display(SLOW_TESTS_PATH),
                                          **(nothing_new(context, quiet) if quiet else {})})


@dg.asset(
    name="smoke_tests", group_name="tests", kinds={"parquet", "json"}, deps=["flaky_test_platforms"], pool="torchci_outputs",
    partitions_def=daily_partitions,
    description=f"{SMOKE_DIR}/<platform>.json: per platform, the tests failing there significantly more than "
                "elsewhere on distinct commits (not flaky elsewhere), ranked, with their evidence. "
                "Lake table smoke_tests.",
)
def smoke_tests_asset(context: dg.AssetExecutionContext, lake: LakeResource,
                      outputs: OutputsResource) -> dg.MaterializeResult:
    report = publish_smoke_tests(lake.lake(), outputs.store(), context.partition_key)
    return dg.MaterializeResult(metadata={
        "tests_per_platform": dg.MetadataValue.json(report.platforms),
        "published": dg.MetadataValue.json([outputs.store().display(p) for p in report.paths]),
        **(nothing_new(context, report.nothing_new) if report.nothing_new else {}),
    })


FLAKINESS_ASSETS = [flaky_tests_asset, disabled_tests_asset, slow_tests_asset, smoke_tests_asset]
