"""The code location: every asset, check, job, schedule, sensor and resource, in one place."""

import dagster as dg

from jobs import all_assets_job, daily_schedule
from resources import default_resources
from torchci_assets.ingest.assets import webhook_tables

defs = dg.Definitions(
    assets=[webhook_tables],
    jobs=[all_assets_job],
    schedules=[daily_schedule],
    resources=default_resources(),
)
