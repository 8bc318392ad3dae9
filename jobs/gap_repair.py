"""Gap repair on a schedule: lost webhook deliveries looked up through the REST API.

Every REPAIR_EVERY_MIN minutes, `repair_lost_deliveries` finds the jobs whose latest known
state is not `completed` and older than the limit less that interval, and the run attempts with
no job at all, and writes what GitHub says as `rest` records (`torchci_assets.backfill.gaps`);
the archive refresh sensor then re-ingests the days they land in. A lost delivery is so repaired
within the limit (TORCHCI_GAP_REPAIR_MINUTES, default 30) of when it was due.

The schedule runs by default where GitHub credentials are configured; without them (the demo's
simulated repository, which GitHub does not know) it is off and can be started in the UI.

No `from __future__ import annotations` here: Dagster reads the op's annotations at definition time.
"""

import datetime as dt
import os

import dagster as dg

from resources.configured import ArchiveResource, LakeResource
from resources.github import GitHubResource
from torchci_assets.backfill.gaps import DEFAULT_LIMIT, repair_gaps

REPAIR_EVERY_MIN = 5
LIMIT_VAR = "TORCHCI_GAP_REPAIR_MINUTES"


def repair_limit() -> dt.timedelta:
    """How long a state may stay unconfirmed: the limit, less one schedule interval."""
    text = os.environ.get(LIMIT_VAR, "").strip()
    minutes = float(text) if text else DEFAULT_LIMIT.total_seconds() / 60
    if minutes <= REPAIR_EVERY_MIN:
        raise ValueError(f"{LIMIT_VAR}={text}: must be more than the {REPAIR_EVERY_MIN}-minute schedule interval")
    return dt.timedelta(minutes=minutes - REPAIR_EVERY_MIN)


@dg.op(description="Look up stale jobs and run attempts without jobs in GitHub's REST API; write them as "
                   "`rest` records into the archive.")
def repair_lost_deliveries(context: dg.OpExecutionContext, github: GitHubResource, archive: ArchiveResource,
                           lake: LakeResource) -> dg.Output:
    now = dt.datetime.now(dt.timezone.utc)
    report = repair_gaps(github, archive.store(), lake.lake(), now, repair_limit(), log=context.log.info)
    for failure in report.failed:
        context.log.warning(f"gap repair: {failure} (retried on the next pass)")
    return dg.Output(None, metadata={
        "stale_jobs": report.stale_jobs, "jobless_runs": report.jobless_runs,
        "failed_runs_without_a_failing_job": report.unexplained_runs, "looked_up": report.looked_up,
        "jobs_found_completed": report.repaired_jobs, "records_written": report.deliveries,
        "failed": len(report.failed)})


@dg.job(description="Repair what lost webhook deliveries left incomplete (see torchci_assets.backfill.gaps).")
def gap_repair_job():
    repair_lost_deliveries()


def _has_credentials() -> bool:
    return any(os.environ.get(v) for v in ("GITHUB_TOKEN", "GITHUB_APP_ID"))


gap_repair_schedule = dg.ScheduleDefinition(
    job=gap_repair_job, cron_schedule=f"*/{REPAIR_EVERY_MIN} * * * *", execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING if _has_credentials() else dg.DefaultScheduleStatus.STOPPED)
