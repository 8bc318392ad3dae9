"""Whether a derived table's inputs changed since it was last written: an intra-day refresh
whose new files moved none of a table's inputs (webhooks only, say) leaves the table as it is.

The digest covers every Parquet file of the input partitions: its name and its footer (row
counts, column statistics, byte offsets, and the id of the write that made it, which every
rewrite changes even when a small change leaves all the rest as it was), read without scanning
data. It is recorded beside the table's parts (`<table>/day=D/_inputs.json`, a leading
`_`: no reader globs it), removed before the table is rewritten and written after, so a run
killed in between leaves no record and the next run recomputes. Only refreshes skip: any other
run (the daily run, a backfill) recomputes whatever the record says.
"""

from __future__ import annotations

import json

from resources.lake import Lake

RECORD = "_inputs.json"


def inputs_digest(lake: Lake, inputs: dict[str, list[str]], settings: dict | None = None) -> str:
    """A digest of the files of `inputs` (table -> days) and of `settings` (what else the table is
    computed from: a window length, thresholds)."""
    files = [path for table, days in sorted(inputs.items()) for path in sorted(lake.files(table, days))]
    return lake.files_digest(files, settings)


def _path(table: str, day: str) -> str:
    return f"{table}/day={day}/{RECORD}"


def recorded(lake: Lake, table: str, day: str) -> str | None:
    """The digest of the inputs `table`'s partition `day` was last written from, or None."""
    try:
        return json.loads(lake.store.read_bytes(_path(table, day))).get("digest")
    except (OSError, ValueError, AttributeError):
        return None


def forget(lake: Lake, table: str, day: str) -> None:
    """Before rewriting the partition: a run killed midway must not leave the old record."""
    if lake.store.exists(_path(table, day)):
        lake.store.delete(_path(table, day))


def remember(lake: Lake, table: str, day: str, digest: str) -> None:
    lake.store.write_bytes(_path(table, day), json.dumps({"digest": digest}).encode())
