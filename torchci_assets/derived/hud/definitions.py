"""The HUD domain: commit and pull request health, daily CI metrics, and the static site."""

import dagster as dg

from torchci_assets.derived.hud.assets import HUD_ASSETS

defs = dg.Definitions(assets=HUD_ASSETS)
