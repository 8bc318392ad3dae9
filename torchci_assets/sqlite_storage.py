"""Dagster's SQLite run, event log and schedule storage, with each database's connection kept open
and its schema checked once per process.

Why: Dagster's `SqliteEventLogStorage`, `SqliteRunStorage` and `SqliteScheduleStorage` build a new
SQLAlchemy engine and open and close a SQLite connection for every read and write. Each new engine
compiles every statement again, and each close of a WAL database's last connection checkpoints it.
A run writes ~200 events (a refresh of a day: 13 steps, 25 assets, 25 checks) and each step reads
its inputs' latest materializations: a refresh opened 740 connections, ~1.2 CPU-s of its ~8.4. The
daemon's sensor loop writes each tick and its sensor's state to the schedule storage, several
statements per tick, every few seconds all day.

And Dagster builds a new instance, with new storages, for every sensor tick it evaluates in the
code server: each storage checks its database's schema against Dagster's migrations, which loads
every migration script (~30 ms a tick, a third of what an idle code server spends).

These classes keep one engine and one open connection per database (`runs.db`, `schedules.db`, the
event log's index and the last few runs' databases), check a database's schema once per process
(again when its file is replaced) and are otherwise Dagster's: the same files, tables and layout,
so an instance can move to or from them at any time.

And each run's own database starts as a copy of one made by Dagster's schema creation once per
process (`run_database_template`), rather than by that creation again: it checks the schema first,
and creation and check each load Dagster's ~200 migration scripts (~40 ms a run). A process that
forks runs (the warm worker) does the checks and makes the template before forking
(`check_before_forks`): its children inherit both, where each would otherwise repeat them all at
its start (~0.1 CPU-s a run). What Dagster's behaviour gave for free is kept
on purpose:
- A run's database is checkpointed after every commit (`wal_autocheckpoint=1`): the webserver
  follows a live run by watching that file change, and with an open connection the writes would
  otherwise stay in the write-ahead log until the run ends.
- A forked child never uses its parent's connections.
- A thread that needs a connection while the kept one is in use gets one of its own, opened and
  closed as Dagster's were.
"""

from __future__ import annotations

import contextlib
import copy
import os
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator

import sqlalchemy as sa
from dagster._config import StringSource
from dagster._core.storage.event_log.sqlite.sqlite_event_log import INDEX_SHARD_NAME, SqliteEventLogStorage
from dagster._core.storage.runs.sqlite.sqlite_run_storage import SqliteRunStorage
from dagster._core.storage.schedules.sqlite.sqlite_schedule_storage import SqliteScheduleStorage
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS, create_db_conn_string
from sqlalchemy.engine import Connection, Engine

# Open databases per process: the index, the runless shard, the run being executed, and the runs a
# webserver is showing. The least recently used beyond that is closed.
MAX_OPEN = 8
# Database files whose schema this process has checked: the instance's three, and the runs' own,
# which the webserver opens as it shows them. The least recently checked beyond that is forgotten
# (checked again if used again).
MAX_CHECKED = 256


class CheckedDatabases:
    """The database files whose schema this process has checked (or created), each with the
    identity (device, inode) of the file it checked: another file in its place (a restored backup,
    a folder wiped and made again) is a new database and is checked again, as is an empty file
    (what SQLite's connect creates). A forked child inherits the parent's: the files are the same."""

    def __init__(self, limit: int):
        self._limit = limit
        self._files: OrderedDict[str, tuple[int, int]] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def _identity(path: str) -> tuple[int, int] | None:
        try:
            st = os.stat(path)
        except OSError:
            return None
        return (st.st_dev, st.st_ino) if st.st_size else None

    def seen(self, path: str) -> bool:
        found = self._identity(path)
        with self._lock:
            if found is None or self._files.get(path) != found:
                return False
            self._files.move_to_end(path)
            return True

    def add(self, path: str) -> None:
        found = self._identity(path)
        if found is None:
            return
        with self._lock:
            self._files[path] = found
            self._files.move_to_end(path)
            while len(self._files) > self._limit:
                self._files.popitem(last=False)


CHECKED = CheckedDatabases(MAX_CHECKED)


class TablesSeen:
    """The tables a storage has found in its database. Dagster looks a table up before many
    writes; a table, once there, stays (its migrations add tables and never drop them, a wipe
    deletes rows), so only a table not found yet is looked up again."""

    def __init__(self):
        self._names: set[str] = set()

    def has(self, name: str, look: Callable[[str], bool]) -> bool:
        if name not in self._names and look(name):
            self._names.add(name)
        return name in self._names


class KeptEngines:
    """The engines a storage keeps, one per database, each holding one connection open; beyond
    `limit` the least recently used is closed. A forked child starts with none: the parent's
    connections stay the parent's."""

    def __init__(self, limit: int):
        self._limit = limit
        self._engines: OrderedDict[str, Engine] = OrderedDict()
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._engines)

    def get(self, conn_string: str, on_connect: Callable | None = None) -> Engine:
        """The database's engine; `on_connect(dbapi_connection, record)` runs on each new SQLite
        connection of an engine made here."""
        with self._lock:
            if self._pid != os.getpid():
                for engine in self._engines.values():
                    engine.dispose(close=False)
                self._engines.clear()
                self._pid = os.getpid()
            engine = self._engines.get(conn_string)
            if engine is None:
                engine = sa.create_engine(
                    # one connection kept; a thread that needs one while it is in use gets its own,
                    # closed after, as every use had with Dagster's
                    conn_string, poolclass=sa.pool.QueuePool, pool_size=1, max_overflow=-1,
                    # a connection is used by one thread at a time, not always the one that opened it
                    connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS, "check_same_thread": False},
                )
                if on_connect is not None:
                    sa.event.listen(engine, "connect", on_connect)
                self._engines[conn_string] = engine
                while len(self._engines) > self._limit:
                    self._engines.popitem(last=False)[1].dispose()
            self._engines.move_to_end(conn_string)
            return engine

    def close_all(self) -> None:
        with self._lock:
            for engine in self._engines.values():
                engine.dispose()
            self._engines.clear()


class _InstanceDirConfig:
    """Both storages are configured with the instance's folder, as Dagster's default ones are."""

    @classmethod
    def config_type(cls):
        return {"instance_dir": StringSource}


class OpenSqliteEventLogStorage(_InstanceDirConfig, SqliteEventLogStorage):
    """Configured in dagster.yaml as `event_log_storage` with `instance_dir` (the Dagster instance's
    folder, `$DAGSTER_HOME`): the event logs are where Dagster's default SQLite storage keeps them,
    `<instance_dir>/history/runs`.
    """

    def __init__(self, base_dir: str, inst_data=None):
        # before Dagster's __init__, which may create the index database through `_connect`
        self._kept = KeptEngines(MAX_OPEN)
        self._tables = TablesSeen()
        super().__init__(base_dir, inst_data=inst_data)

    @classmethod
    def from_config_value(cls, inst_data, config_value):
        return cls(os.path.join(config_value["instance_dir"], "history", "runs"), inst_data=inst_data)

    @contextlib.contextmanager
    def _connect(self, shard: str) -> Iterator[Connection]:
        with self._db_lock:
            engine = self._kept.get(self.conn_string_for_shard(shard),
                                    None if shard == INDEX_SHARD_NAME else _checkpoint_every_commit)
            if shard not in self._initialized_dbs:
                path = self.path_for_shard(shard)
                if not CHECKED.seen(path):
                    if shard == INDEX_SHARD_NAME or not copy_if_absent(path, lambda: run_database_template(self)):
                        self._initdb(engine)
                    CHECKED.add(path)
                self._initialized_dbs.add(shard)
            with engine.connect() as conn, conn.begin():
                yield conn

    def has_table(self, table_name: str) -> bool:
        # Dagster asks for every asset and check event, opening a new engine each time (it may be
        # inside a transaction on the index, so it cannot take the kept connection)
        return self._tables.has(table_name, super().has_table)

    def _close_kept(self) -> None:
        with self._db_lock:
            self._kept.close_all()

    def wipe(self) -> None:
        # the run shards' files are deleted: no connection may keep writing to them
        self._close_kept()
        super().wipe()

    def upgrade(self) -> None:
        self._close_kept()
        super().upgrade()

    def dispose(self) -> None:
        self._close_kept()
        super().dispose()


class _OneKeptConnection:
    """`connect()` of a storage with one database (runs, schedules), on a kept engine. Dagster's
    own takes no lock there: threads that connect at once each get a connection."""

    def __init__(self, conn_string: str, inst_data=None):
        self._kept = KeptEngines(1)
        super().__init__(conn_string, inst_data=inst_data)

    @contextlib.contextmanager
    def connect(self) -> Iterator[Connection]:
        with self._kept.get(self._conn_string).connect() as conn, conn.begin():
            yield conn

    def dispose(self) -> None:
        self._kept.close_all()
        super().dispose()


class OpenSqliteRunStorage(_InstanceDirConfig, _OneKeptConnection, SqliteRunStorage):
    """Configured in dagster.yaml as `run_storage` with `instance_dir`: `runs.db` is where Dagster's
    default SQLite storage keeps it, `<instance_dir>/history`. The daemon's sensors and run queue
    and every run read and write it (a refresh run ~20 times).
    """

    @classmethod
    def from_config_value(cls, inst_data, config_value):
        return _checked_once(cls, os.path.join(config_value["instance_dir"], "history"), "runs", inst_data)


class OpenSqliteScheduleStorage(_InstanceDirConfig, _OneKeptConnection, SqliteScheduleStorage):
    """Configured in dagster.yaml as `schedule_storage` with `instance_dir`: `schedules.db` is where
    Dagster's default SQLite storage keeps it, `<instance_dir>/schedules`. The daemon writes each
    sensor and schedule tick and their states there; the webserver reads them.
    """

    def __init__(self, conn_string: str, inst_data=None):
        self._tables = TablesSeen()
        super().__init__(conn_string, inst_data=inst_data)

    @classmethod
    def from_config_value(cls, inst_data, config_value):
        return _checked_once(cls, os.path.join(config_value["instance_dir"], "schedules"), "schedules", inst_data)

    def _has_table(self, conn: Connection, name: str) -> bool:
        # Dagster reflects the database's tables before most writes of a tick
        return self._tables.has(name, lambda n: n in sa.inspect(conn).get_table_names())

    def _has_instigators_table(self, conn: Connection) -> bool:
        return self._has_table(conn, "instigators")

    def has_secondary_index_table(self) -> bool:
        with self.connect() as conn:
            return self._has_table(conn, "secondary_indexes")


def _checked_once(cls, base_dir: str, name: str, inst_data):
    """`cls.from_local(base_dir)`, Dagster's check (or creation) of the database's schema, the first
    time this process opens that database file; later, the storage on the checked file."""
    path = os.path.join(os.path.abspath(base_dir), f"{name}.db")
    if CHECKED.seen(path):
        return cls(create_db_conn_string(base_dir, name), inst_data=inst_data)
    storage = cls.from_local(base_dir, inst_data=inst_data)
    CHECKED.add(path)
    return storage


# A new run's database as Dagster's schema creation leaves it: made once per process, inherited by
# forked children.
_template: bytes | None = None


def run_database_template(storage: SqliteEventLogStorage) -> bytes:
    """The bytes of an empty run database, made by Dagster's own schema creation (`_initdb`, its
    tables and its migrations' stamp, in WAL mode) in a folder of its own, the first time a process
    asks."""
    global _template
    if _template is None:
        with tempfile.TemporaryDirectory(prefix="torchci-run-db-") as folder:
            engine = sa.create_engine(create_db_conn_string(folder, "template"), poolclass=sa.pool.NullPool)
            try:
                storage._initdb(engine)
            finally:
                engine.dispose()  # the last connection closed: the write-ahead log is folded in
            with open(os.path.join(folder, "template.db"), "rb") as f:
                _template = f.read()
    return _template


def copy_if_absent(path: str, template: Callable[[], bytes]) -> bool:
    """Write `template()` as the database at `path` unless a file is there: True if it was written.
    Written beside it, synced, then linked in place, which fails if another process (a webserver
    showing the run, another thread) made the database first: theirs is kept. `template` is asked
    only for a database to create: a process that only opens existing ones (a webserver) never
    makes it."""
    if os.path.exists(path):
        return False
    staged = f"{path}.{os.getpid()}-{threading.get_ident()}.tmp"  # not *.db: Dagster's wipe globs those
    try:
        with open(staged, "wb") as f:
            f.write(template())
            f.flush()
            os.fsync(f.fileno())
        os.link(staged, path)
        return True
    except OSError:  # made meanwhile, or links refused by the file system: Dagster's creation, as before
        return False
    finally:
        with contextlib.suppress(OSError):
            os.unlink(staged)


def check_before_forks(instance_ref) -> None:
    """Check the schemas of the instance's databases kept by these classes and make the run database
    template, in a process about to fork runs, so that its children do neither. Every connection
    opened here is closed before it returns: no child shares one. Storages of other classes
    (dagster-postgres) are left alone."""
    for data in (instance_ref.run_storage_data, instance_ref.event_storage_data, instance_ref.schedule_storage_data):
        if data is None or data.module_name != __name__:
            continue
        storage = data.rehydrate(as_type=object)  # runs.db and schedules.db: checked as they are opened
        try:
            if isinstance(storage, OpenSqliteEventLogStorage):
                with storage._connect(INDEX_SHARD_NAME):
                    pass
                run_database_template(storage)
        finally:
            storage.dispose()


def _checkpoint_every_commit(dbapi_connection, _record) -> None:
    dbapi_connection.execute("PRAGMA wal_autocheckpoint=1")


def storage_config(instance_dir: object) -> dict:
    """The `run_storage`, `event_log_storage` and `schedule_storage` settings of an instance on these
    classes, in `instance_dir` (a folder, or `{"env": "DAGSTER_HOME"}` as dagster.yaml says it): what
    `torchci run` writes into a DAGSTER_HOME it creates, and what the tests' instances run on."""
    classes = {"run_storage": OpenSqliteRunStorage, "event_log_storage": OpenSqliteEventLogStorage,
               "schedule_storage": OpenSqliteScheduleStorage}
    return {key: {"module": __name__, "class": cls.__name__, "config": {"instance_dir": copy.deepcopy(instance_dir)}}
            for key, cls in classes.items()}  # a copy each: YAML would write one shared value as an anchor
