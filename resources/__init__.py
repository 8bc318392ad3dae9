"""Where the archive, the lake and the published outputs live: plain storage classes
(`storage.Store`, `lake.Lake`), and the Dagster resources built on them in `resources.configured`.

The Dagster resources are imported from `resources.configured` where they are used, not here: a
process that only reads and writes files, such as a webhook scan worker, then starts without
importing Dagster (~0.5 s).
"""

from __future__ import annotations

from resources.lake import Lake
from resources.storage import Store

__all__ = ["Lake", "Store"]
