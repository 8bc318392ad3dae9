"""Where the archive, the lake and the published outputs live: plain storage classes
(`storage.Store`, `lake.Lake`), and the Dagster resources built on them in `resources.configured`.

The Dagster resources are imported from `resources.configured` where they are used, not here: a
process that only reads and writes files, such as a webhook scan worker, then starts without
importing Dagster (~0.5 s). `Lake` and `Store` load pyarrow and DuckDB on first use of the name,
so a module that needs only a light one (`resources.names`, `resources.credentials`) loads neither:
a command's preflight and `--help` answer in a moment.
"""

from __future__ import annotations

import importlib

__all__ = ["Lake", "Store"]

_HOMES = {"Lake": "resources.lake", "Store": "resources.storage"}


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'resources' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)
