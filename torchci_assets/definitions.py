"""The code location: every asset, check, job, schedule, sensor and resource, in one place."""

import dagster as dg

from jobs import all_assets_job, daily_schedule, dispatch_job, upstream_commit_sensor
from resources import default_resources
from torchci_assets.derived.backend_assets import backend_health, backend_levels, ci_result_tables
from torchci_assets.derived.flaky_assets import FLAKY_ASSETS
from torchci_assets.derived.test_assets import TEST_ASSETS
from torchci_assets.ingest.assets import webhook_tables

# The dispatch ledger is written by dispatch_job (an op, since it acts on the world rather
# than computing from the lake); declaring it shows it in the asset graph with its history.
dispatches = dg.AssetSpec("dispatches", group_name="relay", kinds={"parquet"},
                          description="Ledger of every repository_dispatch attempt: sha, downstream repo, "
                                      "status code, outcome (ok/refused/failed/dry_run). Written by dispatch_job.")

defs = dg.Definitions(
    assets=[webhook_tables, *TEST_ASSETS, *FLAKY_ASSETS, ci_result_tables, backend_health, backend_levels, dispatches],
    jobs=[all_assets_job, dispatch_job],
    schedules=[daily_schedule],
    sensors=[upstream_commit_sensor],
    resources=default_resources(),
)
