"""The `rejects` table: every record that could not be read, with where and why.

All ingest sources share one table, `rejects/day=D/<source>.parquet`, one part per source,
so re-ingesting one source replaces exactly its own rejects.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from resources.lake import Lake

SAMPLE_CHARS = 200

REJECTS_SCHEMA = pa.schema([
    ("source", pa.string()), ("location", pa.string()), ("reason", pa.string()), ("sample", pa.string()),
])


@dataclass(frozen=True)
class Reject:
    source: str
    location: str  # archive path, and `:line` where a line is at fault
    reason: str
    sample: str | None  # the start of the offending record, to recognise it

    @staticmethod
    def sample_of(data: bytes | str | None) -> str | None:
        if data is None:
            return None
        if isinstance(data, bytes):
            data = data[: SAMPLE_CHARS * 4].decode("utf-8", "replace")
        return data[:SAMPLE_CHARS]


def rejects_table(rejects: list[Reject]) -> pa.Table:
    return pa.Table.from_pylist([r.__dict__ for r in rejects], schema=REJECTS_SCHEMA)


def write_rejects(lake: Lake, day: str, source: str, rejects: list[Reject]) -> int:
    return lake.write("rejects", day, rejects_table(rejects), part=source)


def rejects_markdown(rejects: list[Reject], limit: int = 10) -> str:
    """The first rejects as a markdown table, for materialization metadata."""
    if not rejects:
        return "No rejects."
    rows = "\n".join(f"| `{r.location}` | {r.reason.replace('|', '/')[:120]} |" for r in rejects[:limit])
    more = f"\n\n…and {len(rejects) - limit} more." if len(rejects) > limit else ""
    return "| location | reason |\n|---|---|\n" + rows + more
