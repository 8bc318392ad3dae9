"""Writing a day's partitions of several tables so they appear together.

One ingest pass writes several tables (and several files of one table). Each file is first
written under a hidden name beside its final place (readers skip names starting with '.'),
and only when everything is written are they all renamed into place, one rename each, after the
stale files are deleted. A run killed before that leaves every table's previous partition intact,
and a re-run replaces the same file names, so nothing is ever duplicated.

A run killed during those deletes and renames would leave a partition that never was (the stale
parts gone, the new ones not in place): so the commit first writes its journal, which names them
all, in each folder it changes (`Store.commit_files`), and removes it last. The next commit that
writes or deletes one of the paths a journal names finishes that commit before its own (see
`PartitionCommit.commit`), and so does a sweep of a dead run's staging files
(`Lake.sweep_staging`), since they may be the only copy of its new state.

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
from resources.storage import JOURNAL_RE, NO_ROOM, Store, staging_name


HIDDEN_SUFFIX = ".pq"
# Tables several ingests write, each its own parts. A commit's journal goes there last: a run killed
# among its copies leaves them in the ingest's own tables, where its next run finds them (`increments`:
# a file its manifest does not list means a rebuild, whose commit clears them).
SHARED_TABLES = ("rejects",)


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
        with store.write_failures(store.full(final)):
            store.fs.create_dir(store.full(folder), recursive=True)
            out = store.fs.open_output_stream(store.full(tmp))
        try:
            with (store.write_failures(store.full(final), NO_ROOM), out,
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
        killed before its replacements shows a name its manifest does not list (see `increments`).
        All of it under one journal (`Store.commit_files`), after finishing the killed commits this
        one would otherwise undo or be undone by (`finish_killed_commits`)."""
        store = self.lake.store
        finish_killed_commits(store, self._folders(), self._touches)
        written = {final for _, final in self.pending}
        stale = [path for path in self._replaced_paths() if path not in written]
        there = self._there(written)
        fresh = [(tmp, final) for tmp, final in self.pending if final not in there]
        store.commit_files(stale, fresh + [p for p in self.pending if p not in fresh], self.lake.owner,
                           journal_last=lambda folder: folder.split("/", 1)[0] in SHARED_TABLES)
        self.pending, self.replaced = [], []

    def _there(self, paths: set[str]) -> set[str]:
        """Those of `paths` that are there now: from their folders' listings (which the journals'
        look-up took already, when the store keeps listings), not a HeadObject each and a
        listing more for each one missing, as asking S3 for a path costs."""
        folders = {path.rsplit("/", 1)[0] for path in paths}
        return {e.path for folder in sorted(folders) for e in self.lake.store.list_folder(folder)} & paths

    def _replaced_folder(self, table: str, day: str) -> str:
        return self.lake.partition_path(table, day).rsplit("/", 1)[0]

    def _folders(self) -> list[str]:
        """The folders this commit changes."""
        return sorted({final.rsplit("/", 1)[0] for _, final in self.pending}
                      | {self._replaced_folder(table, day) for table, day, _ in self.replaced})

    def _touches(self, path: str) -> bool:
        """Whether this commit writes `path`, or deletes it when it is there."""
        folder, name = path.rsplit("/", 1)
        return (any(final == path for _, final in self.pending)
                or any(folder == self._replaced_folder(t, d) and match(name) for t, d, match in self.replaced))

    def _replaced_paths(self) -> list[str]:
        """The files of the replaced folders whose names pass their `match`, once each; never a
        journal, which only its commit's finishing removes."""
        out: dict[str, None] = {}
        for table, day, match in self.replaced:
            for entry in self.lake.store.list_folder(self._replaced_folder(table, day)):
                name = entry.path.rsplit("/", 1)[-1]
                if match(name) and not JOURNAL_RE.match(name):
                    out[entry.path] = None
        return list(out)

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


def finish_killed_commits(store: Store, folders: list[str], touches: Callable[[str], bool]) -> list[str]:
    """Finish (or undo, when they had not started: `Store.finish_commit`) the commits journaled in
    `folders` that name a path `touches` says the caller writes or deletes; their journals. Such a
    commit is an earlier run's of the same ingest, killed midway: two live commits never write the
    same path (one run of a partition at a time; in a folder several ingests share, `rejects`, each
    writes its own parts), so a journal naming only other paths is left alone, its commit perhaps
    still at work. Finished first, it cannot undo this commit later."""
    done = []
    for folder in folders:
        for journal in store.journals(folder):
            if any(touches(path) for path in journal.paths()):
                store.finish_commit(journal)
                done.append(journal.path)
    return done
