"""Dagster asset of Dr. CI: thin over `build` (the comments) and `publish` (where they go)."""

import datetime as dt
import os

import dagster as dg

from resources.configured import ArchiveResource, LakeResource, OutputsResource
from resources.github import GitHubResource
from torchci_assets.cadence import refresh_interval_s, updates_every
from torchci_assets.config import load_config
from torchci_assets.derived.drci.build import TABLE, build_comments
from torchci_assets.derived.drci.inputs import EARLIER_PR_JOBS, JOB_DAYS, LANDED_DAYS, TRUNK_DAYS, WINDOW_DAYS
from torchci_assets.derived.drci.merge_base import LOOKBACK_DAYS as MERGE_BASE_DAYS, TABLE as MERGE_BASES
from torchci_assets.derived.flakiness.job_issues import load_unstable
from torchci_assets.derived.drci.publish import (LEDGER as POSTS, LEDGER_LOOKBACK_DAYS as POSTS_DAYS, publish,
                                                 publish_metadata)
from torchci_assets.derived.drci.refresh import RefreshLimits
from torchci_assets.lake_metadata import lake_metadata
from torchci_assets.partitions import daily_partitions, window_mapping
from torchci_assets.shown import said

HUD_URL_VAR = "TORCHCI_HUD_URL"  # where hud/ is served, for the link in the comment (optional)


@dg.asset(
    name=TABLE, group_name="drci", kinds={"parquet", "github"}, partitions_def=daily_partitions, pool="drci",
    deps=["flaky_tests", "unstable_jobs",
          # the day's pull requests, and those closed earlier whose failures are evidence (EARLIER_PR_JOBS)
          dg.AssetDep("pr_jobs", partition_mapping=window_mapping(max(EARLIER_PR_JOBS))),
          # the tests DISABLED issues disable, and those re-enabled over the window
          dg.AssetDep("disabled_tests", partition_mapping=window_mapping(WINDOW_DAYS - 1)),
          dg.AssetDep("commit_health", partition_mapping=window_mapping(TRUNK_DAYS - 1)),
          dg.AssetDep("test_sha_outcomes", partition_mapping=window_mapping(TRUNK_DAYS - 1)),
          # the failing tests of the merge bases' neighbours, over the trunk days, and of the earlier pull requests
          dg.AssetDep("test_results", partition_mapping=window_mapping(max(TRUNK_DAYS, LANDED_DAYS) - 1)),
          # the heads' base shas, and the main commits that landed a pull request (over the trunk days and
          # the earlier pull requests'); when posting, the comments deleted on GitHub over the posts' lookback
          dg.AssetDep("webhook_events",
                      partition_mapping=window_mapping(max(TRUNK_DAYS - 1, LANDED_DAYS - 1, POSTS_DAYS))),
          # the conclusions of main's failed jobs (a cancelled one is the same failure only as another)
          dg.AssetDep("workflow_job", partition_mapping=window_mapping(JOB_DAYS - 1)),
          # the log classifier's captures of the heads' failing jobs (flaky rules match them)
          dg.AssetDep("job_failure", partition_mapping=window_mapping(WINDOW_DAYS - 1)),
          # the heads' workflow runs waiting for a maintainer's approval
          dg.AssetDep("workflow_run", partition_mapping=window_mapping(WINDOW_DAYS - 1)),
          # open pull requests whose head has no job yet; the authors and the issues closed, over the earlier days too
          dg.AssetDep("pull_request", partition_mapping=window_mapping(LANDED_DAYS - 1))],
    description="Dr. CI: one row per pull request head of the day's pr_jobs that has a job (a head without any, "
                "even after the REST API's read below, gets no row yet): pr, head_sha, merge_base, body, counts "
                "per class NEW/BROKEN TRUNK/FLAKY/UNSTABLE/INFRA/CANCELLED/UNCLASSIFIED, workflow runs awaiting approval, "
                "pending. Jobs marked by stats/unstable-jobs.json "
                "(published by unstable_jobs from the open UNSTABLE issues) are UNSTABLE; a job whose failing tests the "
                "day's disabled_tests disable through open DISABLED issues, or whose issues closed after its merge base "
                "(a rebase runs the fixed tests), is FLAKY, unless its pull request says it closes one of them; a "
                "failure another author's landed pull request met first is FLAKY. A head stuck or "
                "without jobs is read "
                "from GitHub's REST API, and the jobs it changed are written into the archive as `rest` records, as gap "
                "repair writes them, for the next refresh to ingest. Bodies of open pull requests are "
                "written to drci/<pr>.md and, with credentials and drci.enabled, posted as one comment per pull "
                "request, edited only when the body changed. Only today's and yesterday's partitions post or write "
                "drci/<pr>.md: a re-run of a day older than yesterday recomputes its rows and posts nothing. "
                "Yesterday's partition reads the newest drci_comments and pr_jobs partitions after its day, and the "
                "pull_request webhooks received since, only to leave to them the pull requests they cover (the head "
                "pushed again or the pull request closed since, or the same head, whose newer comment is the one "
                "to show): it never posts from them. It keeps two lake tables of its own, which no other "
                f"asset reads and so are not assets: {MERGE_BASES} (the compare API's merge bases per head sha, "
                f"read back over {MERGE_BASE_DAYS} days, so a head costs one request) and {POSTS} (the ledger of its "
                "posts: an unchanged body costs no request).",
)
@lake_metadata
def drci_comments_asset(context: dg.AssetExecutionContext, lake: LakeResource, outputs: OutputsResource,
                        github: GitHubResource, archive: ArchiveResource) -> dg.MaterializeResult:
    """Runs in the `drci` pool (one step at a time across runs), so two runs never post at once. Jobs
    read from the REST API are written into the archive, which the next refresh ingests."""
    day = context.partition_key
    lk = lake.lake()
    relay = load_config()
    limits = RefreshLimits(dt.timedelta(minutes=relay.drci.missing_after_minutes),
                           dt.timedelta(minutes=relay.drci.stuck_after_minutes))
    unstable = load_unstable(outputs.store(), context.log.warning)
    built = build_comments(lk, github, day, relay.upstream_repo, hud_url=os.environ.get(HUD_URL_VAR) or None,
                           limits=limits, log=context.log.info, unstable=unstable,
                           updates=updates_every(refresh_interval_s()),
                           main_branch=relay.main_branch_name,
                           flaky_rules=relay.drci.flaky_rules, warn=context.log.error, archive=archive.store())
    posted = publish(lk, outputs.store(), github, day, relay.upstream_repo, built.rows, relay.drci.enabled,
                     log=context.log.info, author=relay.drci.author)
    if posted.stopped:
        context.log.error(f"Dr. CI posting stopped for this run: {posted.stopped}")
    totals = {c: sum(r[c] for r in built.rows)
              for c in ("new", "broken_trunk", "flaky", "unstable", "infra", "cancelled", "unclassified",
                        "awaiting_approval", "pending")}
    return dg.MaterializeResult(metadata=said({
        "pull_requests": len(built.rows), **{f"jobs_{c}": n for c, n in totals.items()},
        "unstable_jobs_listed": len(unstable),
        "dry_run": posted.dry_run, "dry_run_reason": posted.dry_run_reason, **publish_metadata(posted),
        "post_failures": len(posted.failed), "posting_stopped": posted.stopped, "files": posted.files, "files_unchanged": posted.unchanged_files,
        "merge_bases_estimated": built.estimated_merge_bases,
        "merge_base_note": "estimated from the pull request's base sha (no credentials for the compare API)"
        if built.estimated_merge_bases and github.dry_run else "",
        "compare_requests": built.compare_requests, "refresh_requests": built.refresh_requests,
        "refreshed_heads": built.refreshed_heads,
        "path": lk.store.display(lk.partition_path(TABLE, day)),
    }))


DRCI_ASSETS = [drci_comments_asset]
