"""Gap repair on a schedule: lost webhook deliveries looked up through the REST API.

Every REPAIR_EVERY_MIN minutes, `repair_lost_deliveries` finds the jobs whose latest known
state is not `completed` and older than the limit less that interval, and the run attempts with
no job at all, and writes what GitHub says as `rest` records (`torchci_assets.backfill.gaps`);
the archive refresh sensor then re-ingests the days they land in. A lost delivery is so repaired
within the limit (TORCHCI_GAP_REPAIR_MINUTES, default 30) of when it was due, except the
completion of a job GitHub already showed running in a run still running, and the jobs of a run
GitHub showed waiting without any: those within a quarter of the run attempt's age (see
`gaps.BACKOFF`). The first pass of
each hour also looks for pull requests GitHub closed whose `closed` delivery was lost
(`torchci_assets.backfill.pr_closes`).

A pass whose lookups GitHub refuses (credentials it does not accept, a repository they cannot
read) or leaves all unanswered fails, so the run shows what to fix instead of a green run that
repaired nothing; a few lookups failing among answers are warnings, asked again on the next pass.

The schedule runs by default where GitHub credentials are configured; without them (the demo's
simulated repository, which GitHub does not know) it is off and can be started in the UI.

No `from __future__ import annotations` here: Dagster reads the op's annotations at definition time.
"""

import datetime as dt
import os

import dagster as dg

from resources.configured import ArchiveResource, LakeResource
from resources.credentials import has_credentials
from resources.github import GitHubResource
from torchci_assets.backfill.gaps import DEFAULT_LIMIT, repair_gaps, repair_reserve
from torchci_assets.config import load_config

REPAIR_EVERY_MIN = 5
LIMIT_VAR = "TORCHCI_GAP_REPAIR_MINUTES"


def repair_limit() -> dt.timedelta:
    """How long a state may stay unconfirmed: the limit, less one schedule interval."""
    text = os.environ.get(LIMIT_VAR, "").strip()
    minutes = float(text) if text else DEFAULT_LIMIT.total_seconds() / 60
    if minutes <= REPAIR_EVERY_MIN:
        raise ValueError(f"{LIMIT_VAR}={text}: must be more than the {REPAIR_EVERY_MIN}-minute schedule interval")
    return dt.timedelta(minutes=minutes - REPAIR_EVERY_MIN)


def utcnow() -> dt.datetime:
    """The pass's clock, one name for tests to set: the lake's days are found from it."""
    return dt.datetime.now(dt.timezone.utc)


@dg.op(description="Look up stale jobs and run attempts without jobs in GitHub's REST API; write them as "
                   "`rest` records into the archive. Fails when GitHub refuses the credentials or access, or "
                   "answers no lookup at all: then no lost delivery is repaired until that is fixed.")
def repair_lost_deliveries(context: dg.OpExecutionContext, github: GitHubResource, archive: ArchiveResource,
                           lake: LakeResource) -> dg.Output:
    now = utcnow()
    pulls_of = load_config().upstream_repo if now.minute < REPAIR_EVERY_MIN else None  # the hour's first pass
    report = repair_gaps(github, archive.store(), lake.lake(), now, repair_limit(), log=context.log.info,
                         pulls_of=pulls_of, every=dt.timedelta(minutes=REPAIR_EVERY_MIN), reserve=repair_reserve())
    metadata = {
        "stale_jobs": report.stale_jobs, "stale_jobs_waiting": report.waiting, "jobless_runs": report.jobless_runs,
        "failed_runs_without_a_failing_job": report.unexplained_runs, "looked_up": report.looked_up,
        "jobs_found_completed": report.repaired_jobs, "records_written": report.deliveries,
        "failed": len(report.failed), "not_asked": report.not_asked, "runs_gone": report.runs_gone,
        "runs_known_gone": report.known_gone, "runs_suspected_gone": len(report.suspected),
        "runs_suspected_waiting": report.suspected_waiting, "runs_left_to_another_pass": report.claimed_elsewhere,
        "kept_for_writers": report.kept_for_writers}
    if pulls_of:
        metadata["pull_requests_found_closed"] = report.closes.found_closed
        metadata["pull_requests_gone"] = len(report.closes.gone)
        metadata["pull_requests_suspected_gone"] = len(report.closes.suspected)
        metadata["pull_requests_known_gone"] = len(report.closes.known_gone)
        metadata["pull_requests_suspected_waiting"] = len(report.closes.suspected_waiting)
    for failure in report.failed:
        context.log.warning(f"gap repair: {failure} (retried on the next pass)")
    if (problem := report.problem) is not None:
        raise dg.Failure(description=f"gap repair: {problem}", metadata=metadata, allow_retries=False)
    return dg.Output(None, metadata=metadata)


@dg.job(description="Repair what lost webhook deliveries left incomplete: GitHub's current state of the jobs and "
                    "run attempts the lake holds unfinished, written into the archive for the refresh to ingest.")
def gap_repair_job():
    repair_lost_deliveries()


gap_repair_schedule = dg.ScheduleDefinition(
    job=gap_repair_job, cron_schedule=f"*/{REPAIR_EVERY_MIN} * * * *", execution_timezone="UTC",
    description=f"Every {REPAIR_EVERY_MIN} minutes, asks GitHub's REST API about the jobs and run attempts whose "
                f"webhooks were lost (a state unconfirmed for {LIMIT_VAR}, default "
                f"{DEFAULT_LIMIT.total_seconds() / 60:.0f}, minutes) and writes GitHub's answer into the "
                "archive; the first pass of each hour also writes the closes of pull requests whose close "
                "webhook was lost. Starts by itself only where GitHub credentials are set (GITHUB_TOKEN or "
                "GITHUB_APP_ID); without them it is off and can be started in the UI.",
    default_status=dg.DefaultScheduleStatus.RUNNING if has_credentials() else dg.DefaultScheduleStatus.STOPPED)
