"""Staging rows in a local Parquet file, in batches bounded by their count and by their text.

An ingest parses a day's records into staging rows and reduces them in SQL. Held in a Python
list until the day's end, they would make memory grow with the input; flushed every so many rows
only, a batch of rows each holding the longest text a column takes (MAX_TEXT_CHARS, several
columns a row) would still hold gigabytes. So a batch is flushed at BATCH_ROWS rows or
BATCH_TEXT_CHARS characters of text, whichever comes first, and memory stays bounded by the caps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

from torchci_assets.ingest.fields import RowGuard

BATCH_ROWS = 20_000
# Text per batch: rows are counted by characters too, so long (if bounded) names and label lists
# cannot make a batch of BATCH_ROWS hold gigabytes.
BATCH_TEXT_CHARS = 16 << 20


@dataclass
class StagingFile:
    """Rows (tuples in `schema`'s column order) buffered, then flushed to the local Parquet file
    `path`, one row group a batch. A row Arrow refuses (a value the parser let through that does
    not fit its column) goes to `refused(row, problem)` instead of failing the batch (`RowGuard`)."""

    path: str
    schema: pa.Schema
    guard: RowGuard
    refused: Callable[[tuple, str], None]
    max_rows: int = BATCH_ROWS
    max_text: int = BATCH_TEXT_CHARS
    rows: list = field(default_factory=list)
    text: int = 0  # characters of text in `rows`
    count: int = 0  # rows written
    writer: pq.ParquetWriter | None = None

    def add(self, row: tuple) -> None:
        self.rows.append(row)
        self.text += text_size(row)
        if len(self.rows) >= self.max_rows or self.text >= self.max_text:
            self.flush()

    def flush(self) -> None:
        if self.writer is None:  # opened on the first flush, so a file without rows still has its schema
            self.writer = pq.ParquetWriter(self.path, self.schema, compression="lz4")
        if self.rows:
            batch = self.guard.convert(self.rows, self._batch, self.refused)
            self.writer.write_batch(batch)
            self.count += batch.num_rows
            self.rows.clear()
            self.text = 0

    def _batch(self, rows: list) -> pa.RecordBatch:
        cols = list(zip(*rows)) if rows else [[] for _ in self.schema]
        return pa.record_batch([pa.array(c, type=f.type) for c, f in zip(cols, self.schema)], schema=self.schema)

    def close(self) -> None:
        self.flush()
        self.writer.close()


def text_size(row: tuple) -> int:
    """Characters of text in a staging row, its label lists' included."""
    size = 0
    for value in row:
        if type(value) is str:
            size += len(value)
        elif type(value) is list:
            size += sum(len(v) for v in value if type(v) is str)
    return size


def row_groups(path: str):
    """The batches of a local Parquet file one row group at a time: a staging file's row groups are
    its bounded batches, so copying it into the lake holds no more than one of them."""
    source = pq.ParquetFile(path)
    for i in range(source.num_row_groups):
        yield from source.read_row_group(i).to_batches()
