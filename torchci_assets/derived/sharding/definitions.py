"""The sharding domain: test times and the shard plans balanced on them."""

import dagster as dg

from torchci_assets.derived.sharding.assets import SHARDING_ASSETS

defs = dg.Definitions(assets=SHARDING_ASSETS)
