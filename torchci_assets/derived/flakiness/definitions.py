"""The flakiness domain: flaky and broken verdicts, the disabled and slow lists, smoke sets."""

import dagster as dg

from torchci_assets.derived.flakiness.assets import FLAKINESS_ASSETS

defs = dg.Definitions(assets=FLAKINESS_ASSETS)
