"""The HUD domain: commit and pull request health and daily CI metrics (the static site is `derived/site`)."""

import dagster as dg

from torchci_assets.derived.hud.assets import HUD_ASSETS

defs = dg.Definitions(assets=HUD_ASSETS)
