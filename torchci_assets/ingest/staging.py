"""Staging rows in a local Parquet file, in batches bounded by their count and by their text.

An ingest parses a day's records into staging rows and reduces them in SQL. Held in a Python
list until the day's end, they would make memory grow with the input; flushed every so many rows
only, a batch of rows each holding the longest text a column takes (MAX_TEXT_CHARS, several
columns a row) would still hold gigabytes. So a batch is flushed at BATCH_ROWS rows or
BATCH_TEXT_CHARS characters of text, whichever comes first, and memory stays bounded by the caps.

A reduction's rows are put in order the same way (`sorted_batches`): DuckDB's sort holds its input
in memory and fails past its limit when the rows carry long texts, so rows are sorted a bounded run
at a time, each run written to a local file, and the runs merged.
"""

from __future__ import annotations

import heapq
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from operator import itemgetter

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from torchci_assets.ingest.fields import RowGuard

BATCH_ROWS = 20_000
# Text per batch: rows are counted by characters too, so long (if bounded) names and label lists
# cannot make a batch of BATCH_ROWS hold gigabytes.
BATCH_TEXT_CHARS = 16 << 20
# Bytes of rows sorted in memory at once: a larger input is sorted in runs of this size.
RUN_BYTES = 16 << 20
# Bytes per batch of a run's file: a merge holds one batch of each of its runs.
RUN_BATCH_BYTES = 1 << 20
# Runs merged at once, so a merge holds at most MERGE_FAN_IN * RUN_BATCH_BYTES whatever the input.
MERGE_FAN_IN = 16


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


def sorted_batches(batches: Iterable[pa.RecordBatch], schema: pa.Schema, keys: list[str], folder: str,
                   out_rows: int) -> Iterator[pa.RecordBatch]:
    """The rows of `batches` ordered by the columns `keys` (ascending, bytewise for texts, nulls
    last: as DuckDB's ORDER BY), at most `out_rows` (and about RUN_BYTES) a batch, holding a bounded
    part of them whatever their number: runs of RUN_BYTES are sorted in memory and written to local
    Arrow files under `folder`, then merged MERGE_FAN_IN at a time. Rows with equal keys keep their
    input order. Input that fits one run never touches the disk."""
    with tempfile.TemporaryDirectory(dir=folder, prefix="sort-") as tmp:
        runs, rest = _sorted_runs(batches, schema, keys, tmp)
        if not runs:
            yield from rest.to_batches(max_chunksize=out_rows)
            return
        if rest.num_rows:
            runs.append(_write_run(os.path.join(tmp, f"run-{len(runs)}.arrow"), schema,
                                   rest.to_batches(max_chunksize=_rows_per_batch(rest))))
        del rest
        level = 0
        while len(runs) > MERGE_FAN_IN:
            level += 1
            runs = [_write_run(os.path.join(tmp, f"merge-{level}-{i}.arrow"), schema,
                               _merged(runs[i:i + MERGE_FAN_IN], schema, keys, out_rows, RUN_BATCH_BYTES))
                    for i in range(0, len(runs), MERGE_FAN_IN)]
        yield from _merged(runs, schema, keys, out_rows, RUN_BYTES)


def _sorted_runs(batches: Iterable[pa.RecordBatch], schema: pa.Schema, keys: list[str],
                 folder: str) -> tuple[list[str], pa.Table]:
    """(the files of the sorted runs written, the sorted rows after the last one): every RUN_BYTES
    of input is sorted and written as a run."""
    runs, held, size = [], [], 0
    for batch in batches:
        held.append(batch)
        size += batch.get_total_buffer_size()
        if size >= RUN_BYTES:
            run = _sort(pa.Table.from_batches(held, schema), keys)
            held, size = [], 0
            runs.append(_write_run(os.path.join(folder, f"run-{len(runs)}.arrow"), schema,
                                   run.to_batches(max_chunksize=_rows_per_batch(run))))
            del run
    return runs, _sort(pa.Table.from_batches(held, schema), keys)


def _sort(table: pa.Table, keys: list[str]) -> pa.Table:
    order = pc.sort_indices(table, sort_keys=[(k, "ascending", "at_end") for k in keys])
    return table.take(order)


def _rows_per_batch(table: pa.Table) -> int:
    """Rows per batch of a run's file so that a batch holds about RUN_BATCH_BYTES."""
    return max(1, RUN_BATCH_BYTES * table.num_rows // max(1, table.get_total_buffer_size()))


def _write_run(path: str, schema: pa.Schema, batches: Iterable[pa.RecordBatch]) -> str:
    options = pa.ipc.IpcWriteOptions(compression="lz4")
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, schema, options=options) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return path


def _run_rows(path: str, keys: list[str]) -> Iterator[tuple[tuple, pa.RecordBatch, int, float]]:
    """(sort key, batch, row, the batch's bytes a row) of each row of a run's file, one batch read
    at a time."""
    with pa.OSFile(path, "rb") as source:
        reader = pa.ipc.open_file(source)
        for b in range(reader.num_record_batches):
            batch = reader.get_batch(b)
            row_bytes = batch.get_total_buffer_size() / max(1, batch.num_rows)
            columns = [batch.column(k).to_pylist() for k in keys]
            for i, values in enumerate(zip(*columns)):
                yield tuple((v is None, v) for v in values), batch, i, row_bytes


def _merged(runs: list[str], schema: pa.Schema, keys: list[str], out_rows: int,
            out_bytes: int) -> Iterator[pa.RecordBatch]:
    """The rows of sorted runs in order (of equal keys, the earlier run's first), in batches of at
    most `out_rows` rows and about `out_bytes` (a row counted at its batch's average)."""
    picked: list[tuple[pa.RecordBatch, int]] = []
    size = 0.0
    for _, batch, i, row_bytes in heapq.merge(*(_run_rows(run, keys) for run in runs), key=itemgetter(0)):
        picked.append((batch, i))
        size += row_bytes
        if len(picked) == out_rows or size >= out_bytes:
            yield _gathered(picked, schema)
            picked, size = [], 0.0
    if picked:
        yield _gathered(picked, schema)


def _gathered(picked: list[tuple[pa.RecordBatch, int]], schema: pa.Schema) -> pa.RecordBatch:
    """One batch of the picked rows, in their order, taken at once from the batches they lie in."""
    offsets: dict[int, int] = {}
    sources, indices, total = [], [], 0
    for batch, i in picked:
        if id(batch) not in offsets:
            offsets[id(batch)] = total
            total += batch.num_rows
            sources.append(batch)
        indices.append(offsets[id(batch)] + i)
    table = pa.Table.from_batches(sources, schema).take(pa.array(indices, pa.int64()))
    return table.combine_chunks().to_batches()[0]
