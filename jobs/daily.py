"""The daily materialization of every asset, for yesterday's partition once it is complete."""

import datetime as dt

import dagster as dg

from torchci_assets.partitions import FIRST_DAY_VAR, daily_partitions

all_assets_job = dg.define_asset_job(
    "all_assets_daily",
    selection=dg.AssetSelection.all(),
    description="Every asset for one day partition, in dependency order.",
)


@dg.schedule(cron_schedule="30 0 * * *", job=all_assets_job, execution_timezone="UTC",
             default_status=dg.DefaultScheduleStatus.RUNNING)
def daily_schedule(context: dg.ScheduleEvaluationContext):
    """At 00:30 UTC, yesterday's archive is complete (late files land within minutes). A day
    before the first partition (a fresh install's first night) has nothing to process."""
    day = (context.scheduled_execution_time - dt.timedelta(days=1)).strftime("%Y-%m-%d")
    first = daily_partitions.start.strftime("%Y-%m-%d")
    if day < first:
        return dg.SkipReason(f"{day} is before the first daily partition {first} ({FIRST_DAY_VAR})")
    return dg.RunRequest(run_key=day, partition_key=day)
