"""The ingest domain: every archive source read into its raw lake tables, with rejects."""

import dagster as dg

from torchci_assets.ingest.archive import archive_specs
from torchci_assets.ingest.assets import INGEST_ASSETS

defs = dg.Definitions(assets=[*archive_specs(), *INGEST_ASSETS])
