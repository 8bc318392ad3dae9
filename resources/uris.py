"""Where the archive, the lake and the outputs live when their variables are not set: the demo's
folders under ./var. Apart from `configured` (the Dagster resources), so that a command can find
its stores before it loads Dagster."""

from __future__ import annotations

import os

DEFAULT_URIS = {
    "TORCHCI_ARCHIVE_URI": "./var/archive",
    "TORCHCI_LAKE_URI": "./var/lake",
    "TORCHCI_OUTPUTS_URI": "./var/outputs",
    "GITHUB_API_URL": "https://api.github.com",
}


def resolved_uri(name: str, environ=os.environ) -> str:
    """The URI a resource configured by `configured.env_or_default(name)` will use at run time."""
    return environ.get(name) or DEFAULT_URIS[name]
