"""Where the archive, the lake and the published outputs live: plain storage classes
(`storage.Store`, `lake.Lake`) and the Dagster resources built on them (`configured`).

The Dagster resources are imported on first use (PEP 562), so a process that only reads and
writes files, such as a webhook scan worker, starts without importing Dagster (~0.5 s).
"""

from __future__ import annotations

from resources.lake import Lake
from resources.storage import Store

_CONFIGURED = ("DEFAULT_URIS", "resolved_uri", "env_or_default", "ArchiveResource", "LakeResource",
               "OutputsResource", "default_resources")

__all__ = ["Lake", "Store", *_CONFIGURED]


def __getattr__(name: str):
    if name in _CONFIGURED:
        from resources import configured
        return getattr(configured, name)
    raise AttributeError(f"module 'resources' has no attribute {name!r}")
