"""The Parquet lake: `<LAKE>/<table>/day=YYYY-MM-DD/<part>.parquet`, Hive-style, zstd.

A table's day partition is a fixed set of named parts (usually one, `data.parquet`; the shared
`rejects` table has one part per source), each replaced atomically, so re-materializing a
partition replaces it exactly. Every materialized partition has its file, even when empty, so
readers always find the schema and can tell "no rows" from "not materialized".

DuckDB is the query engine: an in-memory connection of its own per use reading Parquet, so
parallel runs never share a database file or a lock.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import re
import tempfile
import threading
import uuid
import weakref
from collections.abc import Iterable, Iterator

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from resources.sql import Literals, SqlFiles, compose
from resources.storage import Store

PARQUET_OPTIONS = dict(compression="zstd", compression_level=3, use_dictionary=True)
# A key of every lake file's footer: a fresh id per write (see `written_schema`).
WRITE_ID = b"torchci.write"
# What `file_digest` reads of a file's end at once: pyarrow's own first read of a footer.
FOOTER_READ = 64 * 1024
DAY_PARTITION = pa.schema([("day", pa.date32())])
HIVE_DAY = re.compile(r"/day=([0-9]{4}-[0-9]{2}-[0-9]{2})/")
# A view per table and set of days (file paths go in as quoted literals: a view takes no parameter).
_PARQUET_VIEW = ("CREATE OR REPLACE TEMP VIEW {{name}} AS "
                 "SELECT * FROM read_parquet([{{files}}], hive_partitioning = true, union_by_name = true)")
_ARROW_VIEW = "CREATE OR REPLACE TEMP VIEW {{name}} AS SELECT * FROM {{source}}"


def written_schema(schema: pa.Schema) -> pa.Schema:
    """`schema` with a fresh random id of this write among its metadata, which Parquet keeps in the
    file's footer. Why: `Lake.file_digest` tells a changed file by its footer alone, and a rewrite
    can leave every size and statistic of the footer as it was (one more rerun counted in a day's
    aggregates did); the id makes every rewrite a change."""
    return schema.with_metadata({**(schema.metadata or {}), WRITE_ID: uuid.uuid4().hex.encode()})


class Lake:
    """The lake at `store`; files it writes are staged under names carrying `owner` (a run id),
    so a later run can tell a dead writer's leftovers from a live one's (`sweep_staging`)."""

    def __init__(self, store: Store, owner: str | None = None, keep_listings: bool = False):
        self.store = store
        self.owner = owner
        if keep_listings:  # see `_day_files`
            store.keep_listings()

    @classmethod
    def at(cls, uri: str, owner: str | None = None, keep_listings: bool = False) -> "Lake":
        return cls(Store(uri), owner, keep_listings)

    def __repr__(self) -> str:
        return f"Lake({self.store.uri!r})"

    def partition_path(self, table: str, day: str, part: str = "data") -> str:
        return f"{table}/day={day}/{part}.parquet"

    @contextlib.contextmanager
    def writer(self, table: str, day: str, schema: pa.Schema, part: str = "data") -> Iterator[pq.ParquetWriter]:
        """A Parquet writer whose file replaces the partition's part only if the block completes."""
        with self.store.atomic_output(self.partition_path(table, day, part), self.owner) as out:
            with pq.ParquetWriter(out, written_schema(schema), **PARQUET_OPTIONS) as w:
                yield w

    def write(self, table: str, day: str, data: pa.Table | pa.RecordBatchReader, part: str = "data") -> int:
        """Write a whole table or a stream of batches as one part; returns the row count."""
        rows = 0
        batches: Iterable[pa.RecordBatch]
        batches = data.to_batches() if isinstance(data, pa.Table) else data
        with self.writer(table, day, data.schema, part) as w:
            for batch in batches:
                if batch.num_rows:
                    w.write_batch(batch)
                    rows += batch.num_rows
        return rows

    def file_digest(self, path: str) -> str:
        """A digest of a Parquet file of the lake (a full path, as `files` gives it): its place
        (table/day=D/name) and its footer (row counts, statistics, offsets, and the id of the
        write that made it, `written_schema`), which any rewrite changes; no data is read."""
        h = hashlib.sha256("/".join(path.rsplit("/", 3)[-3:]).encode())
        with self.store.fs.open_input_file(path) as f:
            h.update(_footer_bytes(f))
        return h.hexdigest()

    def files_digest(self, files: list[str], settings: dict | None = None) -> str:
        """A digest of these lake files (full paths, in this order, each by `file_digest`) and of
        `settings` (what else a result made from them depends on: a query, a window length): what
        a kept result is valid for."""
        h = hashlib.sha256(json.dumps(settings or {}, sort_keys=True).encode())
        for path in files:
            h.update(self.file_digest(path).encode())
        return h.hexdigest()

    def read_record(self, path: str, parse):
        """`parse` of the bytes at `path` (relative to the lake), or None when the file is missing
        or unreadable: a record of what a previous run wrote, which the caller then rebuilds."""
        data = self.store.read_bytes_if_exists(path)
        if data is None:
            return None
        try:
            return parse(data)
        except (ValueError, KeyError, TypeError, AttributeError):
            return None

    def sweep_staging(self, table: str, day: str, is_live) -> list[str]:
        """Remove staging files in the table's day folder that no live writer owns (see
        `Store.sweep_staging`); returns their paths. A dead run's commit journaled there is finished
        first (`Store.finish_commits`): its staged files may be the only copy of its new state."""
        self.store.finish_commits(f"{table}/day={day}", is_live)
        return self.store.sweep_staging(f"{table}/day={day}", is_live)

    def tables(self) -> list[str]:
        return self.store.list_dirs("")

    def days(self, table: str) -> list[str]:
        return self.store.list_days(table)

    def files(self, table: str, days: Iterable[str] | None = None) -> list[str]:
        """Full paths of the table's Parquet files, for the given days (default: all). Only the
        days' folders are listed: a table's history grows, what a step reads of it does not."""
        if days is None:
            entries = self.store.list_files(table, (".parquet",))
        else:
            entries = [e for listed in self.window(table, days).values() for e in listed]
        # A link in the lake is never followed.
        return [self.store.full(e.path) for e in entries if not e.refused]

    def window(self, table: str, days: Iterable[str]) -> dict[str, list]:
        """The listed Parquet files (`FileEntry`, refused ones too) of the table's folders of `days`,
        by day in order, none for a day the table lacks. On S3 each folder is a listing, and a window
        reaching back past the table's first day (a young archive or table) would list folders that
        are not there: when the oldest day's folder lists no file, the table's day folders are
        listed (one request) and then only the window's days among them. A table that has the
        oldest day costs a listing a day as ever; locally a missing folder costs next to nothing,
        and every day is listed."""
        days = sorted(set(days))
        if not days:
            return {}
        out = {days[0]: self._day_files(f"{table}/day={days[0]}")}
        rest = days[1:]
        if rest and not out[days[0]] and not self.store.is_local:
            present = set(self.store.list_days(table))
            rest = [d for d in rest if d in present]
        out.update({d: self._day_files(f"{table}/day={d}") for d in rest})
        return {d: out.get(d, []) for d in days}

    def _day_files(self, folder: str) -> list:
        """The Parquet files of a day folder. On S3 each listing is a request, and a step that
        reads its tables again and again (the HUD's pages, the flaky verdicts' windows, an
        ingest's commit, manifest, sweep and checks) would list the same folders dozens of times:
        with `keep_listings` a folder is listed once, and again after this process wrote, deleted
        or renamed anything in it (`Store.keep_listings`). For steps only: another process's
        writes are not seen until then, so no long-lived reader nor a ledger's writer keeps
        listings."""
        return self.store.list_files(folder, (".parquet",))

    def rows_in(self, files: list[str]) -> int:
        """Rows of these Parquet files of the lake, from their footers (no data is read)."""
        return sum(self.footer(f).num_rows for f in files)

    def footer(self, path: str) -> pq.FileMetaData:
        """The footer of the lake file at `path` (a full path). On S3 through `fragment`, without
        the HeadObject of an open by path; locally as a file's (pyarrow.dataset imports pandas)."""
        if self.store.is_local:
            return pq.read_metadata(path, filesystem=self.store.fs)
        return self.fragment(path).metadata

    def fragment(self, path: str, partition: pc.Expression | None = None):
        """The lake file at `path` (a full path) as a pyarrow dataset fragment, its footer read.

        Why a fragment: pyarrow opens a file by path with a HeadObject for its size, a request on
        S3 that the listing which named the file answered already (`Store.listed_sizes`); and the
        footer kept in the fragment is not read again when its rows are. A file replaced since
        its listing by one of another size fails the read at the old size: it is read again at its
        size now."""
        import pyarrow.dataset as pads  # here only: it imports pandas, which every process would pay for

        size = self.store.listed_sizes.get(path)
        try:
            return _with_footer(pads.ParquetFileFormat().make_fragment(path, self.store.fs, partition, file_size=size))
        except (OSError, pa.ArrowInvalid):
            if size is None:
                raise
        self.store.listed_sizes.pop(path, None)
        return _with_footer(pads.ParquetFileFormat().make_fragment(path, self.store.fs, partition))

    def read_files(self, files: list[str], columns: list[str] | None = None) -> pa.Table:
        """The rows of these Parquet files of the lake (full paths, as `files` gives them), one
        file after the other, as one table; none: an empty table without columns. A column some files
        lack (written before it was added) is NULL in their rows."""
        tables = [self._read_file(path, columns) for path in files]
        return pa.concat_tables(tables, promote_options="permissive") if tables else pa.table({})

    def _read_file(self, path: str, columns: list[str] | None) -> pa.Table:
        """One file's rows, those of `columns` it has. On S3 through `fragment` (no HeadObject);
        locally a fragment's scan would only cost more CPU (~0.4 ms a file, bench/README.md)."""
        if self.store.is_local:
            with self.store.fs.open_input_file(path) as f:
                return pq.ParquetFile(f).read(columns=columns)
        fragment = self.fragment(path)
        names = fragment.physical_schema.names
        return fragment.to_table(columns=columns and [c for c in columns if c in names])

    def register_rows(self, con: duckdb.DuckDBPyConnection, files: list[str], name: str) -> None:
        """Expose the rows of these Parquet files of the lake (full paths: the small hidden files a
        writer keeps beside its partitions) to `con` as relation `name`, read through pyarrow: DuckDB
        cannot read S3 here, and these files have no `day` of their own to add."""
        con.register(name, self.read_files(files))

    def register(self, con: duckdb.DuckDBPyConnection, table: str, days: Iterable[str] | None = None,
                 name: str | None = None) -> int:
        """Expose the table's partitions for `days` to `con` as view `name` (default: the table's name).

        The `day` column comes from the Hive folder. Returns the number of files; with none the
        view is not created and a query against it fails loudly rather than reading nothing.
        """
        return self.register_files(con, self.files(table, days), name or table)

    def register_files(self, con: duckdb.DuckDBPyConnection, files: list[str], name: str) -> int:
        """Expose the given Parquet files of the lake (full paths, as `files` returns them) as view
        `name`, like `register`; returns their number (none: no view)."""
        if not files:
            return 0
        if self.store.is_local:
            con.execute(compose(_PARQUET_VIEW, name=name, files=Literals(files)))
        else:
            # DuckDB cannot read s3:// here (no httpfs offline), so S3 goes through a pyarrow
            # dataset, made to look like the local view: footers unified by name and the
            # Hive `day` typed as DATE, as DuckDB's hive_partitioning infers it.
            import pyarrow.dataset as pads  # here only: it imports pandas, which every process would pay for

            fragments = [self.fragment(f, _hive_day(f)) for f in files]
            schema = pa.unify_schemas([f.physical_schema for f in fragments] + [DAY_PARTITION],
                                      promote_options="permissive")
            dataset = pads.FileSystemDataset(fragments, schema, pads.ParquetFileFormat(), self.store.fs)
            con.register(f"{name}__arrow", dataset)
            con.execute(compose(_ARROW_VIEW, name=name, source=f"{name}__arrow"))
        return len(files)


def _footer_bytes(f: pa.NativeFile) -> bytes:
    """The file's bytes from its footer on (the footer, its length and the magic; a file too short
    to have one: all of it). One read of the file's end, which holds the footer of all but the
    widest tables: on S3 each read is a request."""
    size = f.size()
    first = max(0, size - FOOTER_READ)
    tail = f.read_at(size - first, first)
    if size < 12:  # the last 8 bytes give the footer's length
        return tail
    start = max(0, size - 8 - int.from_bytes(tail[-8:-4], "little"))
    return tail[start - first:] if start >= first else f.read_at(size - start, start)


def _with_footer(fragment):
    fragment.ensure_complete_metadata()
    return fragment


def _hive_day(path: str) -> pc.Expression | None:
    """`day` = the date of the path's last `day=` folder, as Hive partitioning reads it (none: NULL)."""
    days = HIVE_DAY.findall(path)
    return pc.field("day") == pa.scalar(dt.date.fromisoformat(days[-1]), pa.date32()) if days else None


# DuckDB's threads per connection for the rest of this run, set by `LakeResource` from the run's
# `torchci/duckdb_threads` tag (None: DuckDB's default, one per core).
_RUN_THREADS: int | None = None


def set_run_threads(threads: int | None) -> None:
    """The number of threads each new connection's queries use until set again (None or 0:
    DuckDB's default, one per core).

    A refresh's queries read a few minutes of rows: on two threads DuckDB spends ~15% more CPU
    on them than on one, for no gain in wall time (bench/README.md). A full day's queries do
    gain from every core."""
    global _RUN_THREADS
    _RUN_THREADS = threads or None


def connect(memory_limit: str | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with bounded memory that spills to a temp folder.

    Opening a DuckDB database costs ~15 ms of CPU, and a refresh opens dozens; so each connection
    is a cursor on a database no other live connection uses, taken from the idle ones this process
    opened with the same settings. A connection keeps what it creates to itself (the lake's views
    are TEMP, and temp objects belong to the cursor), its memory limit is its own as with a fresh
    database, and its database becomes idle again once the connection is gone. An idle database
    keeps what DuckDB's allocator holds from its last connection's queries (up to its memory
    limit) until it is used again, so at most MAX_IDLE of them are kept per settings: the others
    are closed, which gives their memory back. Its threads are the run's (`set_run_threads`)."""
    # Settings go in as configuration, not as SQL text: the memory limit comes from the environment.
    config = {
        "memory_limit": memory_limit or os.environ.get("TORCHCI_DUCKDB_MEMORY", "512MB"),
        "preserve_insertion_order": False,
        # Spill under the system temp folder, not `.tmp/` in whatever directory the process runs in.
        "temp_directory": os.path.join(tempfile.gettempdir(), "torchci-duckdb"),
    }
    if _RUN_THREADS:
        config["threads"] = _RUN_THREADS
    key = tuple(sorted(config.items()))
    database = _IDLE.take(key) or _new_database(config)
    con = database.cursor()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET enable_progress_bar = false")  # it would write to stdout of the host process
    weakref.finalize(con, _IDLE.give, key, database)
    return con


# The macros every lake connection has (`lake_sql/`): rules that queries of several domains apply,
# each written once.
_MACROS = SqlFiles(__file__, "lake_sql")
LAKE_MACROS = ("status_rank",)


def _new_database(config: dict) -> duckdb.DuckDBPyConnection:
    """An in-memory database with LAKE_MACROS in its catalog, which its cursors all see."""
    database = duckdb.connect(":memory:", config=config)
    for name in LAKE_MACROS:
        database.execute(_MACROS[name])
    return database


# A step holds one or two connections at once: more idle databases would only hold memory.
MAX_IDLE = 2


class _IdleDatabases:
    """In-memory databases whose last connection is gone, by settings. A forked child starts
    with none: it must not share its parent's databases."""

    def __init__(self):
        # Reentrant: `give` runs from a finalizer, which the garbage collector may call in this
        # thread while `take` holds the lock.
        self._lock = threading.RLock()
        self._pid = os.getpid()
        self._idle: dict[tuple, list[duckdb.DuckDBPyConnection]] = {}

    def take(self, key: tuple) -> duckdb.DuckDBPyConnection | None:
        with self._lock:
            if self._pid != os.getpid():
                self._pid, self._idle = os.getpid(), {}
            idle = self._idle.get(key)
            return idle.pop() if idle else None

    def give(self, key: tuple, database: duckdb.DuckDBPyConnection) -> None:
        """Keep `database` for the next connection, unless MAX_IDLE are kept already: then it is
        dropped here and closes once nothing refers to it."""
        with self._lock:
            if self._pid != os.getpid():  # a forked child's: the parent's database stays the parent's
                return
            idle = self._idle.setdefault(key, [])
            if len(idle) < MAX_IDLE:
                idle.append(database)


_IDLE = _IdleDatabases()
