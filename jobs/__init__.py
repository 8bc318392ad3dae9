"""Jobs, schedules and sensors: how and when assets are materialized and the world is acted on."""

from jobs.daily import all_assets_job, daily_schedule

__all__ = ["all_assets_job", "daily_schedule"]
