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
from collections.abc import Iterator

import sqlalchemy as sa
from dagster._config import StringSource
from dagster._core.storage.event_log.sqlite.sqlite_event_log import INDEX_SHARD_NAME, SqliteEventLogStorage
from dagster._core.storage.runs.sqlite.sqlite_run_storage import SqliteRunStorage
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
from sqlalchemy.engine import Connection, Engine

# Open databases per process: the index, the runless shard, the run being executed, and the runs a
# webserver is showing. The least recently used beyond that is closed.
MAX_OPEN = 8


class OpenSqliteEventLogStorage(SqliteEventLogStorage):
    """Configured in dagster.yaml as `event_log_storage` with `instance_dir` (the Dagster instance's
    folder, `$DAGSTER_HOME`): the event logs are where Dagster's default SQLite storage keeps them,
    `<instance_dir>/history/runs`.
    """

    def __init__(self, base_dir: str, inst_data=None):
        # before Dagster's __init__, which may create the index database through `_connect`
        self._engines: OrderedDict[str, Engine] = OrderedDict()
        self._pid = os.getpid()
        self._tables: set[str] = set()
        super().__init__(base_dir, inst_data=inst_data)

    @classmethod
    def config_type(cls):
        return {"instance_dir": StringSource}

    @classmethod
    def from_config_value(cls, inst_data, config_value):
        return cls(os.path.join(config_value["instance_dir"], "history", "runs"), inst_data=inst_data)

    @contextlib.contextmanager
    def _connect(self, shard: str) -> Iterator[Connection]:
        with self._db_lock:
            engine = self._engine(shard)
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            with engine.connect() as conn, conn.begin():
                yield conn

    def _engine(self, shard: str) -> Engine:
        """The shard's engine, opened once; called with `_db_lock` held."""
        if self._pid != os.getpid():  # a forked child: the parent's connections are the parent's
            for engine in self._engines.values():
                engine.dispose(close=False)
            self._engines.clear()
            self._pid = os.getpid()
        engine = self._engines.get(shard)
        if engine is None:
            engine = kept_engine(self.conn_string_for_shard(shard))
            if shard != INDEX_SHARD_NAME:
                sa.event.listen(engine, "connect", _checkpoint_every_commit)
            self._engines[shard] = engine
            while len(self._engines) > MAX_OPEN:
                self._engines.popitem(last=False)[1].dispose()
        self._engines.move_to_end(shard)
        return engine

    def has_table(self, table_name: str) -> bool:
        # Dagster asks for every asset and check event, opening a new engine each time (it may be
        # inside a transaction on the index, so it cannot take the kept connection). A table,
        # once there, stays: Dagster's migrations add tables and never drop them.
        if table_name not in self._tables and super().has_table(table_name):
            self._tables.add(table_name)
        return table_name in self._tables

    def _close_all(self) -> None:
        with self._db_lock:
            for engine in self._engines.values():
                engine.dispose()
            self._engines.clear()

    def wipe(self) -> None:
        # the run shards' files are deleted: no connection may keep writing to them
        self._close_all()
        super().wipe()

    def upgrade(self) -> None:
        self._close_all()
        super().upgrade()

    def dispose(self) -> None:
        self._close_all()
        super().dispose()


class OpenSqliteRunStorage(SqliteRunStorage):
    """Configured in dagster.yaml as `run_storage` with `instance_dir`: `runs.db` is where Dagster's
    default SQLite storage keeps it, `<instance_dir>/history`. The daemon's sensors and run queue
    and every run read and write it (a refresh run ~20 times).
    """

    def __init__(self, conn_string: str, inst_data=None):
        self._engine: Engine | None = None
        self._pid = os.getpid()
        self._lock = threading.Lock()
        super().__init__(conn_string, inst_data=inst_data)

    @classmethod
    def config_type(cls):
        return {"instance_dir": StringSource}

    @classmethod
    def from_config_value(cls, inst_data, config_value):
        return cls.from_local(os.path.join(config_value["instance_dir"], "history"), inst_data=inst_data)

    @contextlib.contextmanager
    def connect(self) -> Iterator[Connection]:
        with self._lock:
            if self._engine is None or self._pid != os.getpid():
                if self._engine is not None:  # a forked child: the parent's connection is the parent's
                    self._engine.dispose(close=False)
                self._engine, self._pid = kept_engine(self._conn_string), os.getpid()
            engine = self._engine
        # Dagster's own takes no lock here: threads that connect at once each get a connection
        with engine.connect() as conn, conn.begin():
            yield conn

    def dispose(self) -> None:
        with self._lock:
            if self._engine is not None:
                self._engine.dispose()
                self._engine = None
        super().dispose()


def kept_engine(conn_string: str) -> Engine:
    """An engine keeping one connection open; more are opened while it is in use, closed after."""
    return sa.create_engine(
        conn_string, poolclass=sa.pool.QueuePool, pool_size=1, max_overflow=-1,
        # a connection is used by one thread at a time, but not always the thread that opened it
        connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS, "check_same_thread": False},
    )


def _checkpoint_every_commit(dbapi_connection, _record) -> None:
    dbapi_connection.execute("PRAGMA wal_autocheckpoint=1")
