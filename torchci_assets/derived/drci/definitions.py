"""The Dr. CI domain: the comment on each pull request's head."""

import dagster as dg

from torchci_assets.derived.drci.assets import DRCI_ASSETS

defs = dg.Definitions(assets=DRCI_ASSETS)
