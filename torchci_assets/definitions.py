"""The code location: every asset, check, job, schedule, sensor and resource, in one place."""

import dagster as dg

from jobs import all_assets_job, daily_schedule, dispatch_job, upstream_commit_sensor
from resources import default_resources
from torchci_assets.derived.backend_assets import backend_health, backend_levels, ci_result_tables
from torchci_assets.derived.test_assets import TEST_ASSETS
from torchci_assets.ingest.assets import webhook_tables

defs = dg.Definitions(
    assets=[webhook_tables, *TEST_ASSETS, ci_result_tables, backend_health, backend_levels],
    jobs=[all_assets_job, dispatch_job],
    schedules=[daily_schedule],
    sensors=[upstream_commit_sensor],
    resources=default_resources(),
)
