"""The failures domain: failed jobs' logs classified with PyTorch's log-classifier rules."""

import dagster as dg

from torchci_assets.derived.failures.assets import FAILURE_ASSETS

defs = dg.Definitions(assets=FAILURE_ASSETS)
