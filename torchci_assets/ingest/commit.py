"""Writing a day's partitions of several tables so they appear together.

One ingest pass writes several tables (and several files of one table). Each file is first
written under a hidden name beside its final place (readers skip names starting with '.'),
and only when everything is written are they all renamed into place, one rename each. A run
killed before that leaves every table's previous partition intact; the commit itself is a
handful of renames, and a re-run replaces the same file names, so nothing is ever duplicated.

The hidden name carries the lake's owner (`.<name>.pending-<run id>-<nonce>`): a run killed
with SIGKILL leaves its files behind, and the next successful run of the partition removes
those whose run is no longer alive (`Lake.sweep_staging`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from resources.lake import PARQUET_OPTIONS, Lake, written_schema
from resources.storage import staging_name


HIDDEN_SUFFIX = ".pq"


def hidden_path(lake: Lake, table: str, day: str, name: str) -> str:
    """A Parquet file in the partition's folder that readers never see: its name starts with '_'
    (pyarrow's and Hive's hidden files) and does not end in `.parquet` (DuckDB's `*.parquet` glob,
    `Lake.files`)."""
    return f"{table}/day={day}/_{name}{HIDDEN_SUFFIX}"


def hidden_files(lake: Lake, table: str, day: str, name: str) -> list[str]:
    """Full paths of the partition's hidden files `_<name>*.pq`, in name order."""
    return [lake.store.full(e.path) for e in lake.store.list_folder(f"{table}/day={day}")
            if e.path.rsplit("/", 1)[-1].startswith(f"_{name}") and e.path.endswith(HIDDEN_SUFFIX)]


class PartitionCommit:
    def __init__(self, lake: Lake):
        self.lake = lake
        self.pending: list[tuple[str, str]] = []  # (hidden temporary path, final path), store-relative
        # (table, day, which names), see replace_matching
        self.replaced: list[tuple[str, str, Callable[[str], bool]]] = []

    @contextlib.contextmanager
    def writer(self, table: str, day: str, schema: pa.Schema, part: str = "data",
               options: dict | None = None, hidden: bool = False) -> Iterator[pq.ParquetWriter]:
        """A writer of the part's file, committed with the others; `options` override PARQUET_OPTIONS.
        `hidden`: a file the ingest keeps for itself, which no reader of the table sees (`hidden_path`)."""
        final = hidden_path(self.lake, table, day, part) if hidden else self.lake.partition_path(table, day, part)
        folder, name = final.rsplit("/", 1)
        tmp = f"{folder}/{staging_name(name, 'pending', self.lake.owner)}"
        store = self.lake.store
        store.fs.create_dir(store.full(folder), recursive=True)
        try:
            with (store.fs.open_output_stream(store.full(tmp)) as out,
                  pq.ParquetWriter(out, written_schema(schema), **(PARQUET_OPTIONS | (options or {}))) as w):
                yield w
        except BaseException:
            store.delete(tmp)
            raise
        self.pending.append((tmp, final))

    def write(self, table: str, day: str, data: pa.Table | pa.RecordBatchReader, part: str = "data",
              hidden: bool = False) -> int:
        rows = 0
        with self.writer(table, day, data.schema, part, hidden=hidden) as w:
            for batch in data.to_batches() if isinstance(data, pa.Table) else data:
                if batch.num_rows:
                    w.write_batch(batch)
                    rows += batch.num_rows
        return rows

    def adopt(self, pending: list[tuple[str, str]]) -> None:
        """Take over files another process wrote for this commit."""
        self.pending += pending

    def replace_parts(self, table: str, day: str, prefix: str) -> None:
        """At commit, also delete the partition's Parquet files named `prefix*` that this commit
        does not write: a table written as a varying number of files leaves none of an earlier run's."""
        self.replace_matching(table, day, lambda name: name.startswith(prefix) and name.endswith(".parquet"))

    def replace_matching(self, table: str, day: str, match: Callable[[str], bool]) -> None:
        """At commit, also delete the files of the partition's folder (hidden `_` ones included,
        staging files not) whose name passes `match` and that this commit does not write."""
        self.replaced.append((table, day, match))

    def commit(self) -> None:
        """Stale files go first (what is left is an earlier state, never one with duplicates), then
        the files under new names, then those replacing a file: a commit that adds a part and is
        killed before its replacements shows a name its manifest does not list (see `increments`)."""
        store = self.lake.store
        written = {final for _, final in self.pending}
        for table, day, match in self.replaced:
            folder = self.lake.partition_path(table, day).rsplit("/", 1)[0]
            for entry in store.list_folder(folder):
                if match(entry.path.rsplit("/", 1)[-1]) and entry.path not in written:
                    store.delete(entry.path)
        fresh = [(tmp, final) for tmp, final in self.pending if not store.exists(final)]
        for tmp, final in fresh + [p for p in self.pending if p not in fresh]:
            store.fs.move(store.full(tmp), store.full(final))
        self.pending, self.replaced = [], []

    def abort(self) -> None:
        for tmp, _ in self.pending:
            self.lake.store.delete(tmp)
        self.pending = []

    def __enter__(self) -> "PartitionCommit":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()
