"""The daily materialization of every asset, for yesterday's partition once it is complete."""

import datetime as dt

import dagster as dg

from resources.configured import ArchiveResource
from torchci_assets.ingest.landed import day_fingerprint
from torchci_assets.partitions import FIRST_DAY_VAR, daily_partitions, last_partition

# The state of the day's archive a run was requested for (`ingest.landed`): the intra-day
# refresh sensor compares it with what the archive holds now (see `jobs.refresh`).
FINGERPRINT_TAG = "torchci/archive_fingerprint"

all_assets_job = dg.define_asset_job(
    "all_assets_daily",
    selection=dg.AssetSelection.all(),
    description="Every asset for one day partition, in dependency order.",
)


@dg.schedule(cron_schedule="30 0 * * *", job=all_assets_job, execution_timezone="UTC",
             default_status=dg.DefaultScheduleStatus.RUNNING,
             description="At 00:30 UTC, every asset for yesterday's partition (all_assets_daily), once its "
                         "archive is complete. The run is tagged with the fingerprint of that day's archive, so the "
                         "intra-day refresh does not repeat it. A day outside the partitions (before the first, or "
                         "after the archive ended) is skipped, the tick saying why.")
def daily_schedule(context: dg.ScheduleEvaluationContext, archive: ArchiveResource):
    """At 00:30 UTC, yesterday's archive is complete (late files land within minutes). A day
    before the first partition (a fresh install's first night) has nothing to process.

    The run is tagged with the fingerprint of the day's archive files, so the intra-day refresh
    does not repeat it and refreshes the day again only if files land after it. A listing that
    fails leaves the tag out (the refresh then runs once more); it never holds up the daily run.
    """
    day = (context.scheduled_execution_time - dt.timedelta(days=1)).strftime("%Y-%m-%d")
    first = daily_partitions.start.strftime("%Y-%m-%d")
    if day < first:
        return dg.SkipReason(f"{day} is before the first daily partition {first} ({FIRST_DAY_VAR})")
    if day > last_partition():
        return dg.SkipReason(f"{day} is after the last daily partition {last_partition()}: the archive ended "
                             "before it (the code location extends its partitions when it reloads)")
    try:
        tags = {FINGERPRINT_TAG: day_fingerprint(archive.store(), day).short}
    except OSError as exc:  # pyarrow's S3 and local errors are OSErrors
        context.log.warning(f"listing the archive of {day} failed ({exc}); the run is not tagged with its fingerprint")
        tags = {}
    return dg.RunRequest(run_key=day, partition_key=day, tags=tags)
