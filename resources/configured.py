"""Dagster resources: where the archive, the lake and the published outputs live.

Imported from here (`from resources.configured import LakeResource`): `resources` itself does not
import Dagster (see __init__.py).

Each is a small typed resource holding a URI (a local path or `s3://bucket/prefix`); the
storage logic itself is in `storage.py` and `lake.py`, plain classes that tests use directly.
"""

from __future__ import annotations

import os

import dagster as dg

from resources.lake import Lake, set_run_threads
from resources.storage import Store
from resources.uris import DEFAULT_URIS


def env_or_default(name: str, default: str | None = None):
    """`EnvVar(name)` when the variable is set (the UI then shows where the value comes from),
    else the embedded default, so the demo needs no configuration."""
    if os.environ.get(name):
        return dg.EnvVar(name)
    return DEFAULT_URIS.get(name, default)


class ArchiveResource(dg.ConfigurableResource):
    """The raw, append-only archive of webhooks, test reports and downstream results."""

    uri: str

    def store(self) -> Store:
        return Store(self.uri)


# A run tagged with it runs its DuckDB queries on that many threads (the refresh: 1).
DUCKDB_THREADS_TAG = "torchci/duckdb_threads"


def duckdb_threads(tags) -> int | None:
    """The threads a run's tags ask for, None when they do not say."""
    text = (tags or {}).get(DUCKDB_THREADS_TAG)
    if text is None:
        return None
    if not text.strip().isdigit() or int(text) < 1:
        raise ValueError(f"tag {DUCKDB_THREADS_TAG}={text!r}: expected a number of threads, 1 or more "
                         "(remove the tag for DuckDB's default, one per core)")
    return int(text)


class LakeResource(dg.ConfigurableResource):
    """The Parquet lake, one folder per table and one `day=` folder per partition."""

    uri: str

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """The run's DuckDB threads, from its tags (set once per process that runs steps)."""
        set_run_threads(duckdb_threads(context.run.tags if context.run else {}))

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        set_run_threads(None)

    def lake(self, owner: str | None = None, keep_listings: bool = False) -> Lake:
        """The lake; files it stages are named for `owner` (the run writing them), see `Lake`;
        `keep_listings` for a step that reads its tables many times (see `Lake._day_files`)."""
        return Lake(Store(self.uri), owner, keep_listings)


class OutputsResource(dg.ConfigurableResource):
    """Where the files CI consumes are published (test times, disabled tests, shard plans...)."""

    uri: str

    def store(self) -> Store:
        return Store(self.uri)


def _secret(name: str):
    """A credential as `EnvVar` (Dagster stores the variable's name, never its value), or None."""
    return dg.EnvVar(name) if os.environ.get(name) else None


def default_resources() -> dict:
    from resources.github import GitHubResource

    return {
        "archive": ArchiveResource(uri=env_or_default("TORCHCI_ARCHIVE_URI")),
        "lake": LakeResource(uri=env_or_default("TORCHCI_LAKE_URI")),
        "outputs": OutputsResource(uri=env_or_default("TORCHCI_OUTPUTS_URI")),
        # No credentials: dry run (what would be sent is logged and recorded, nothing is sent).
        "github": GitHubResource(
            api_url=env_or_default("GITHUB_API_URL"),
            token=_secret("GITHUB_TOKEN"),
            app_id=_secret("GITHUB_APP_ID"),
            app_private_key=_secret("GITHUB_APP_PRIVATE_KEY"),
            app_installation_id=_secret("GITHUB_APP_INSTALLATION_ID"),
        ),
    }
