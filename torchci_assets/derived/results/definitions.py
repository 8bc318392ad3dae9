"""The results domain: test rows joined with their jobs, and the daily aggregates windows read."""

import dagster as dg

from torchci_assets.derived.results.assets import RESULTS_ASSETS

defs = dg.Definitions(assets=RESULTS_ASSETS)
