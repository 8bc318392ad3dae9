"""Dagster asset of the static HUD: thin over `site`, plain functions the tests call directly."""

from pathlib import Path

import dagster as dg

from resources.configured import LakeResource, OutputsResource
from torchci_assets.checks import check_spec
from torchci_assets.config import load_config
from torchci_assets.derived.guardians import alert_issues, ledger
from torchci_assets.derived.guardians.inputs import WINDOW as GUARDIAN_WINDOW
from torchci_assets.derived.hud.backend_pages import DAYS_BACK
from torchci_assets.derived.site.lists_not_read import ListsNotRead, lists_not_read
from torchci_assets.derived.site.site import (GRID_DAYS, MAX_PAGE_BYTES, SITE_DIR, SiteSettings, publish_site,
                                              published_day)
from torchci_assets.guardian_config import GuardianSettings
from torchci_assets.ingest.increments import is_refresh
from torchci_assets.lake_metadata import lake_metadata
from torchci_assets.partitions import daily_partitions, window_mapping
from torchci_assets.publishing import later_day_kept


def _back_from_day_end(days: int) -> dg.TimeWindowPartitionMapping:
    """Lineage of the HUD's guardian sections, which judge as the trunk guardians do at the end of
    the day (D+1 00:00): `days` days back from D+1's folder, as `guardians.inputs.days_back` counts."""
    return window_mapping(days - 1, 1)


def _main_days_read() -> int:
    """How many days back from D+1 the guardian sections read main's commits: the guardians' window as
    configured when the definitions load (a code location loads them again when it restarts)."""
    return (load_config().guardians or GuardianSettings()).window.days_read()


# What hud_site reads besides the outputs of its own day: the grid, the PR list and the metrics'
# windows; the backend pages' longest window; the guardians' autorevert page and commit marks, which
# read main's commits over their window (to D+1) and their attempts from the oldest one's push on.
_MAIN_DAYS = _main_days_read()
_GUARDIAN_INPUTS = _back_from_day_end(max(GUARDIAN_WINDOW.days, _MAIN_DAYS))
_SITE_READS = [
    dg.AssetDep("commit_health", partition_mapping=window_mapping(max(GRID_DAYS - 1, _MAIN_DAYS), 1)),
    dg.AssetDep("pr_jobs", partition_mapping=window_mapping(6)),
    dg.AssetDep("ci_metrics_daily", partition_mapping=window_mapping(89)),
    dg.AssetDep("flaky_tests", partition_mapping=window_mapping(1, 1)),  # tests page: D; marks: D-1..D+1
    *(dg.AssetDep(t, partition_mapping=_GUARDIAN_INPUTS)
      for t in ("workflow_job", "workflow_run", "test_jobs", "test_sha_outcomes", "job_failure")),
    *(dg.AssetDep(t, partition_mapping=window_mapping(DAYS_BACK - 1))
      for t in ("ci_result", "pull_request")),
    dg.AssetDep(ledger.TABLE, partition_mapping=_back_from_day_end(ledger.LOOKBACK_DAYS - 1)),
    dg.AssetDep(alert_issues.TABLE, partition_mapping=_back_from_day_end(alert_issues.LOOKBACK_DAYS)),
    "disabled_tests", "test_time_regressions", "backend_levels", "drci_comments",
]


class SiteConfig(dg.Config):
    commits: int = 50
    metrics_days: int = 90
    pr_days: int = 7


@dg.asset(
    name="hud_site", group_name="hud", kinds={"html"}, partitions_def=daily_partitions, pool="torchci_outputs",
    deps=_SITE_READS,
    check_specs=[check_spec("pages_under_2mb", "hud_site")],
    description=f"The static HUD under {SITE_DIR}/ in the outputs (index.html grid of the last main commits, "
                "metrics.html, pr/<n>.html, backends.html and a backends/<owner>/<repo>.html per downstream, tests.html, "
                f"autorevert.html of the trunk guardians), and {SITE_DIR}/site.json, each page's state: self-contained "
                "pages that open from a folder or a static S3 website, replaced page by page atomically, index.html last.",
)
@lake_metadata
def hud_site_asset(context: dg.AssetExecutionContext, config: SiteConfig, lake: LakeResource,
                   outputs: OutputsResource):
    day = context.partition_key
    store = outputs.store()
    relay = load_config()
    settings = SiteSettings(config.commits, config.metrics_days, config.pr_days,
                            relay.main_branch_name, relay.hud)
    report = publish_site(lake.lake(keep_listings=True), store, day, relay.upstream_repo, settings, log=context.log.info,
                          reuse=is_refresh(context.run.tags), not_read=disabled_lists_not_read(context.instance, day))
    largest, size = report.largest
    yield dg.MaterializeResult(metadata={
        "published": report.published, "pages": len(report.pages), "commits": report.commits,
        "job_groups": report.job_groups, "pull_requests": report.pull_requests,
        "bytes": sum(report.pages.values()), "largest_page": largest, "largest_page_bytes": size,
        "stale_pages_removed": len(report.deleted), "pages_unchanged": len(report.unchanged),
        "pr_pages_not_rendered": len(report.reused),
        "index": dg.MetadataValue.url(Path(store.full(f"{SITE_DIR}/index.html")).as_uri()) if store.is_local
        else store.display(f"{SITE_DIR}/index.html"),
        **({} if report.published else later_day_kept(context, day, published_day(store), "the HUD")),
    })
    over = {p: n for p, n in report.pages.items() if n >= MAX_PAGE_BYTES}
    yield dg.AssetCheckResult(check_name="pages_under_2mb", passed=not over,
                              metadata={"largest_page": largest, "largest_page_bytes": size,
                                        "pages_over": dg.MetadataValue.json(over)})


def disabled_lists_not_read(instance: dg.DagsterInstance, day: str) -> ListsNotRead | None:
    """Whether the latest run of `disabled_tests` for `day` could not read the lists from GitHub: it
    fails its check, not its step, so that this asset runs; the pages then say so (`lists_not_read`)."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("disabled_tests"), asset_partitions=[day]), limit=1).records
    if not records:
        return None
    metadata = {k: v.value for k, v in records[0].asset_materialization.metadata.items()}
    return lists_not_read(metadata, records[0].timestamp)


SITE_ASSETS = [hud_site_asset]
