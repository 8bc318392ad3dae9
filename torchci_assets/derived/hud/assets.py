"""Dagster assets of the HUD: commit and pull request health, and daily CI metrics.

Thin wrappers over `health` and `metrics`, plain functions the tests call directly. The static
site that shows them is the `site` domain's: it also shows the pages of the domains built on
this one's classification (Dr. CI, the trunk guardians).
"""

import dagster as dg

from resources.configured import LakeResource, OutputsResource
from torchci_assets.checks import check_spec, unique_key_check
from torchci_assets.config import load_config
from torchci_assets.derived.hud.health import LOOKBACK_DAYS, build_commit_health, build_pr_jobs
from torchci_assets.derived.hud.metrics import SETTLE_DAYS, build_ci_metrics
from torchci_assets.derived.hud.unstable import load_unstable_jobs
from torchci_assets.lake_metadata import lake_metadata, table_metadata
from torchci_assets.partitions import daily_partitions, window_mapping
from torchci_assets.shown import readable

_WINDOW = window_mapping(LOOKBACK_DAYS)
# commit_health and pr_jobs mark the jobs of open UNSTABLE issues from stats/unstable-jobs.json, which
# unstable_jobs publishes: they depend on it, so an issue opened reaches them in the run that reads it.
# They read nothing of the disabled lists; ci_metrics_daily counts the disabled tests and depends on
# disabled_tests. A step that fails skips everything after it, so none of the steps that read GitHub's
# issues fails on GitHub's errors: unstable_jobs, disabled_issues and disabled_tests leave what they
# published last, which the HUD reads, and fail their checks instead (tests/test_hud_outage.py).


class CommitHealthConfig(dg.Config):
    """Left out, TORCHCI_CONFIG's `hud` section (PyTorch's for pytorch/pytorch, every workflow else)."""

    blocking_workflows: list[str] | None = None
    min_job_groups: int | None = None


@dg.asset(
    name="commit_health", group_name="hud", kinds={"parquet"}, partitions_def=daily_partitions,
    deps=[*(dg.AssetDep(t, partition_mapping=_WINDOW)
            for t in ("push", "workflow_job", "workflow_run", "test_jobs", "test_sha_outcomes", "job_failure")),
          "flaky_tests", "unstable_jobs"],
    check_specs=[check_spec("unique_sha_job_group", "commit_health")],
    description=f"Per main commit pushed on D-{LOOKBACK_DAYS}..D and job group (job name without shard numbers), "
                "as of the end of D: attempts, state (success/failure/flaky/pending/skipped), failure_class of a "
                "failure (infra/new/broken_on_main/known_flaky) with the failing tests, and the commit's conclusion "
                "(red/flaky/green/pending/no_signal) with PyTorch's master_commit_red semantics; time to signal. "
                "Jobs of the open UNSTABLE issues (stats/unstable-jobs.json, as unstable_jobs publishes it) are "
                "marked unstable and block nothing, as on PyTorch's HUD.",
)
@lake_metadata
def commit_health_asset(context: dg.AssetExecutionContext, config: CommitHealthConfig, lake: LakeResource,
                        outputs: OutputsResource):
    day = context.partition_key
    lk = lake.lake(keep_listings=True)
    relay = load_config()
    unstable = load_unstable_jobs(outputs.store(), context.log.warning)
    hud = relay.hud
    blocking = hud.blocking_workflows if config.blocking_workflows is None else tuple(config.blocking_workflows)
    groups = hud.min_job_groups if config.min_job_groups is None else config.min_job_groups
    report = build_commit_health(lk, day, relay.upstream_repo, relay.branches, blocking, groups,
                                 unstable_jobs=unstable, signal=hud.signal_workflows)
    if report.commits == 0:
        context.log.info(f"no push to {relay.main_branch} of {relay.upstream_repo} on "
                         f"D-{LOOKBACK_DAYS}..{day}: wrote an empty partition")
    yield dg.MaterializeResult(metadata={
        "commits": report.commits, "rows": report.rows,
        **{f"commits_{c}": n for c, n in report.conclusions.items()},
        **{f"failures_{c}": n for c, n in report.failure_classes.items()},
        "group_states": dg.MetadataValue.json(report.states),
        "unstable_jobs": dg.MetadataValue.json(unstable[:100]),
        "files_read": dg.MetadataValue.json(report.inputs),
        "path": lk.store.display(lk.partition_path("commit_health", day)), **table_metadata(lk, "commit_health", day),
    })
    yield unique_key_check(lk, "commit_health", day, ["sha", "job_group"])


@dg.asset(
    name="pr_jobs", group_name="hud", kinds={"parquet"}, partitions_def=daily_partitions,
    deps=[*(dg.AssetDep(t, partition_mapping=_WINDOW)
            for t in ("pull_request", "workflow_job", "workflow_run", "test_jobs", "test_sha_outcomes", "ci_result",
                      "job_failure")),
          "flaky_tests", "unstable_jobs", "commit_health",
          # the previous day's partition: the jobs of a head whose CI ran before the window (pr_jobs.sql, `carried`)
          dg.AssetDep("pr_jobs", partition_mapping=window_mapping(1, -1))],
    description=f"Per pull request active on D-{LOOKBACK_DAYS}..D, every job of its latest head (latest attempt per "
                "job name) with its state and failure_class (known_flaky/broken_on_main/new/infra) and failing "
                "tests, plus the L3/L4 downstream backends' results for that head (source = backend repo; one whose "
                "completed callback never came is an infrastructure failure after zombie_timeout_seconds). "
                "A job of an open UNSTABLE issue is marked unstable, as on main; a head with no job yet has one "
                "row whose job columns are null.",
)
@lake_metadata
def pr_jobs_asset(context: dg.AssetExecutionContext, lake: LakeResource,
                  outputs: OutputsResource) -> dg.MaterializeResult:
    day = context.partition_key
    lk = lake.lake()
    unstable = load_unstable_jobs(outputs.store(), context.log.warning)
    relay = load_config()
    report = build_pr_jobs(lk, day, relay.upstream_repo, unstable_jobs=unstable,
                           zombie_timeout_s=relay.zombie_timeout_seconds)
    return dg.MaterializeResult(metadata={
        "pull_requests": report.pull_requests, "rows": report.rows, "downstream_rows": report.downstream_rows,
        **{f"failures_{c}": n for c, n in report.failure_classes.items()},
        "path": lk.store.display(lk.partition_path("pr_jobs", day)),
    })


# the headline figures Dagster plots over partitions (numeric metadata)
_HEADLINE = ("main_commits", "commits", "red_pct", "flaky_pct", "tts_p50_s", "tts_p90_s", "jobs", "failed_jobs",
             "infra_failure_pct", "queue_p50_s", "queue_p90_s", "queue_max_s", "flaky_tests", "broken_tests",
             "disabled_tests")


@dg.asset(
    name="ci_metrics_daily", group_name="hud", kinds={"parquet"}, partitions_def=daily_partitions,
    deps=["commit_health", dg.AssetDep("workflow_job", partition_mapping=window_mapping(1)),
          dg.AssetDep("workflow_run", partition_mapping=window_mapping(1)),
          dg.AssetDep("test_jobs", partition_mapping=window_mapping(1)),
          dg.AssetDep("job_failure", partition_mapping=window_mapping(1)),
          "flaky_tests", "disabled_tests", "ci_result", "ci_callback_minutes", "push"],
    description=f"One row per day and dimension (day, platform, runner, job_group, backend): red and flaky % and "
                f"time to signal p50/p90 of the main commits pushed {SETTLE_DAYS} day before (settled), queue time "
                "p50/p90/max per platform and runner label, job duration p50/p90 per job group on main, flaky, "
                "broken and disabled tests, main commits, share of failed jobs that are infrastructure, downstream "
                "success rate and callbacks. The headline figures are numeric metadata, plotted over partitions.",
)
@lake_metadata
def ci_metrics_daily_asset(context: dg.AssetExecutionContext, lake: LakeResource) -> dg.MaterializeResult:
    day = context.partition_key
    lk = lake.lake()
    relay = load_config()
    report = build_ci_metrics(lk, day, relay.upstream_repo, relay.branches,
                              zombie_timeout_s=relay.zombie_timeout_seconds)
    return dg.MaterializeResult(metadata={
        **headline_metadata(report), "commits_day": report.commits_day, "rows": report.rows,
        "path": lk.store.display(lk.partition_path("ci_metrics_daily", day)),
    })


def headline_metadata(report) -> dict:
    """The headline figures as numeric metadata (Dagster plots them over partitions): integers for
    counts, and a percentage or a time to one decimal, as the UI prints every digit it is given."""
    h = report.headline
    metadata = {k: (readable(h[k]) if isinstance(h[k], float) else int(h[k]))
                for k in _HEADLINE if h[k] is not None}
    metadata.update({f"queue_p90_s_{p}": readable(v) for p, v in sorted(report.queue_p90_by_platform.items())})
    return metadata


HUD_ASSETS = [commit_health_asset, pr_jobs_asset, ci_metrics_daily_asset]
