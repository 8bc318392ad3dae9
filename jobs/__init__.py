"""Jobs, schedules and sensors: how and when assets are materialized and the world is acted on."""

from jobs.daily import all_assets_job, daily_schedule
from jobs.guardians import trunk_guardians_job, trunk_guardians_schedule
from jobs.refresh import archive_refresh_job, archive_refresh_sensor
from jobs.relay import dispatch_job, upstream_commit_sensor

__all__ = ["all_assets_job", "archive_refresh_job", "archive_refresh_sensor", "daily_schedule", "dispatch_job",
           "upstream_commit_sensor", "trunk_guardians_job", "trunk_guardians_schedule"]
