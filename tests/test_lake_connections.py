"""resources.lake.connect: connections reuse idle in-memory databases, yet behave as fresh ones."""

import gc

import duckdb
import pytest

from resources.lake import MAX_IDLE, _IDLE, connect


def _tables_of_its_own(con) -> str:
    # Non-temp tables live in the database, not the cursor: they show which database a cursor is on.
    return con.execute("SELECT count(*) FROM duckdb_tables() WHERE NOT temporary").fetchone()[0]


def test_two_live_connections_never_share_a_database():
    a, b = connect(), connect()
    a.execute("CREATE TABLE marker AS SELECT 1 AS x")  # in a's database, not a temp object
    assert _tables_of_its_own(a) == 1
    assert _tables_of_its_own(b) == 0
    a.execute("DROP TABLE marker")


def test_what_a_connection_creates_is_gone_when_its_database_is_reused():
    con = connect()
    con.execute("CREATE TEMP VIEW v AS SELECT 42 AS answer")
    con.execute("CREATE TEMP TABLE t AS SELECT range AS n FROM range(10)")
    assert con.execute("SELECT answer FROM v").fetchone() == (42,)
    con.close()
    del con
    gc.collect()
    again = connect()  # the idle database the first connection used
    for name in ("v", "t"):
        with pytest.raises(duckdb.CatalogException):
            again.execute(f"SELECT * FROM {name}")


def test_settings_are_each_connections_own():
    small, default = connect(memory_limit="300MB"), connect()
    def limit(con):
        return con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    assert limit(small) != limit(default)
    assert small.execute("SELECT current_setting('TimeZone')").fetchone() == ("UTC",)
    del small
    gc.collect()
    assert limit(connect()) == limit(default)  # a default connection never gets the small database


def test_at_most_max_idle_databases_are_kept_the_others_are_closed():
    """An idle database holds on to the memory its queries left with DuckDB's allocator."""
    live = [connect(memory_limit="123MB") for _ in range(MAX_IDLE + 2)]
    for con in live:
        con.execute("CREATE TEMP TABLE t AS SELECT range AS n FROM range(1000)")
    del con, live
    gc.collect()
    assert [len(v) for k, v in _IDLE._idle.items() if dict(k)["memory_limit"] == "123MB"] == [MAX_IDLE]
