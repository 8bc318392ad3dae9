import gzip
import json
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


def envelope(event: str, delivery_id: str, payload, received_at: str = "2026-11-01T12:00:00.000Z") -> dict:
    return {"event": event, "delivery_id": delivery_id, "received_at": received_at, "payload": payload}


def write_lines(path: Path, lines: list, gz: bool | None = None) -> Path:
    """Write JSONL (dicts are serialized, bytes/str written as-is), gzipped if the name ends in .gz."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = b"".join(
        (json.dumps(x).encode() if isinstance(x, (dict, list)) else x if isinstance(x, bytes) else x.encode()) + b"\n"
        for x in lines
    )
    if gz if gz is not None else path.name.endswith(".gz"):
        data = gzip.compress(data)
    path.write_bytes(data)
    return path


@pytest.fixture
def octokit() -> dict:
    return json.loads((DATA / "octokit" / "examples.json").read_text())
