"""The site domain: `hud_site`, the static HUD, in the HUD's group of the asset graph.

It has its own folder because it composes the pages of the domains that read the HUD's
classification (Dr. CI, the trunk guardians): kept in the HUD's folder, the HUD and those
domains would import each other.
"""

import dagster as dg

from torchci_assets.derived.site.assets import SITE_ASSETS

defs = dg.Definitions(assets=SITE_ASSETS)
