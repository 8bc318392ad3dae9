"""The backends domain: downstream backends' health and the relay level each has earned."""

import dagster as dg

from torchci_assets.derived.backends.assets import BACKEND_ASSETS

defs = dg.Definitions(assets=BACKEND_ASSETS)
