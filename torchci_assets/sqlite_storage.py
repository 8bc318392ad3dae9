"""Dagster's SQLite run storage and event log, with each database's connection kept open.

Why: Dagster's `SqliteEventLogStorage` and `SqliteRunStorage` build a new SQLAlchemy engine and
open and close a SQLite connection for every read and write. Each new engine compiles every
statement again, and each close of a WAL database's last connection checkpoints it. A run writes
~200 events (a refresh of a day: 13 steps, 25 assets, 25 checks) and each step reads its inputs'
latest materializations: a refresh opened 740 connections, ~1.2 CPU-s of its ~8.4.

These classes keep one engine and one open connection per database (`runs.db`; the event log's
index and the last few runs' databases) and are otherwise Dagster's: the same files, tables and
layout, so an instance can move to or from them at any time. What Dagster's behaviour gave for
free is kept on purpose:
- A run's database is checkpointed after every commit (`wal_autocheckpoint=1`): the webserver
  follows a live run by watching that file change, and with an open connection the writes would
  otherwise stay in the write-ahead log until the run ends.
- A forked child never uses its parent's connections.
- A thread that needs a connection while the kept one is in use gets one of its own, opened and
  closed as Dagster's were.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator

import sqlalchemy as sa
from dagster._config import StringSource
from dagster._core.storage.event_log.sqlite.sqlite_event_log import INDEX_SHARD_NAME, SqliteEventLogStorage
from dagster._core.storage.runs.sqlite.sqlite_run_storage import SqliteRunStorage
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
from sqlalchemy.engine import Connection, Engine

# Open databases per process: the index, the runless shard, the run being executed, and the runs a
# webserver is showing. The least recently used beyond that is closed.
MAX_OPEN = 8


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
        self._tables: set[str] = set()
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
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            with engine.connect() as conn, conn.begin():
                yield conn

    def has_table(self, table_name: str) -> bool:
        # Dagster asks for every asset and check event, opening a new engine each time (it may be
        # inside a transaction on the index, so it cannot take the kept connection). A table,
        # once there, stays: Dagster's migrations add tables and never drop them.
        if table_name not in self._tables and super().has_table(table_name):
            self._tables.add(table_name)
        return table_name in self._tables

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


class OpenSqliteRunStorage(_InstanceDirConfig, SqliteRunStorage):
    """Configured in dagster.yaml as `run_storage` with `instance_dir`: `runs.db` is where Dagster's
    default SQLite storage keeps it, `<instance_dir>/history`. The daemon's sensors and run queue
    and every run read and write it (a refresh run ~20 times).
    """

    def __init__(self, conn_string: str, inst_data=None):
        self._kept = KeptEngines(1)
        super().__init__(conn_string, inst_data=inst_data)

    @classmethod
    def from_config_value(cls, inst_data, config_value):
        return cls.from_local(os.path.join(config_value["instance_dir"], "history"), inst_data=inst_data)

    @contextlib.contextmanager
    def connect(self) -> Iterator[Connection]:
        # Dagster's own takes no lock here: threads that connect at once each get a connection
        with self._kept.get(self._conn_string).connect() as conn, conn.begin():
            yield conn

    def dispose(self) -> None:
        self._kept.close_all()
        super().dispose()


def _checkpoint_every_commit(dbapi_connection, _record) -> None:
    dbapi_connection.execute("PRAGMA wal_autocheckpoint=1")
