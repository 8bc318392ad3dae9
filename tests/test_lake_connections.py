"""resources.lake.connect: connections reuse idle in-memory databases, yet behave as fresh ones; a
run's tag sets their threads."""

import gc

import dagster as dg
import duckdb
import pytest

from resources.configured import DUCKDB_THREADS_TAG, LakeResource, duckdb_threads
from resources.lake import MAX_IDLE, _IDLE, connect


def _tables_of_its_own(con) -> str:
    # Non-temp tables live in the database, not the cursor: they show which database a cursor is on.
    return con.execute("SELECT count(*) FROM duckdb_tables() WHERE NOT temporary").fetchone()[0]


def test_two_live_connections_never_share_a_database():
    a, b = connect(), connect()
    before_a, before_b = _tables_of_its_own(a), _tables_of_its_own(b)
    a.execute("CREATE TABLE marker AS SELECT 1 AS x")  # in a's database, not a temp object
    assert _tables_of_its_own(a) == before_a + 1
    assert _tables_of_its_own(b) == before_b
    a.execute("DROP TABLE marker")


def test_every_connection_ranks_github_states_the_one_way_a_reused_database_too():
    """status_rank (resources/lake_sql) is in each database's catalog, not a connection's: queries
    of every domain keep a job's furthest state by it, on a new database and on a reused one."""
    order = "SELECT s FROM (VALUES ('in_progress'), (NULL), ('completed'), ('queued'), ('surprise'), ('waiting')) v(s) "
    for reused in (False, True):
        con = connect()
        # a table of the database, not of the connection: the second pass is on the first one's database
        assert bool(con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'reuse_marker'"
                                ).fetchone()[0]) is reused
        con.execute("DROP TABLE IF EXISTS reuse_marker" if reused else "CREATE TABLE reuse_marker (x INT)")
        ranked = con.execute(order + "ORDER BY status_rank(s) DESC, s NULLS LAST").fetchall()
        assert [r[0] for r in ranked] == ["completed", "in_progress", "waiting", "queued", "surprise", None]
        assert con.execute("SELECT DISTINCT status_rank(s) FROM (VALUES ('queued'), ('pending'), "
                           "('requested')) v(s)").fetchall() == [(1,)]
        assert con.execute("SELECT status_rank('surprise') = status_rank(NULL)").fetchone() == (True,)
        con.close()
        del con
        gc.collect()


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


def _threads(con) -> int:
    return int(con.execute("SELECT current_setting('threads')").fetchone()[0])


DEFAULT_THREADS = _threads(duckdb.connect(":memory:"))


@dg.asset
def threads_seen(lake: LakeResource) -> int:
    return _threads(connect())


def _run(tmp_path, tags):
    defs = dg.Definitions(assets=[threads_seen], resources={"lake": LakeResource(uri=str(tmp_path / "lake"))})
    return defs.resolve_implicit_global_asset_job_def().execute_in_process(tags=tags, raise_on_error=False)


def test_a_run_tagged_with_duckdb_threads_queries_on_that_many_and_only_that_run(tmp_path):
    assert DEFAULT_THREADS >= 2  # else the tag could not be seen to change anything here
    tagged = _run(tmp_path, {DUCKDB_THREADS_TAG: "1"})
    assert tagged.output_for_node("threads_seen") == 1
    assert _threads(connect()) == DEFAULT_THREADS  # the setting ended with the run
    assert _run(tmp_path, {}).output_for_node("threads_seen") == DEFAULT_THREADS


def test_a_bad_duckdb_threads_tag_fails_the_run_saying_what_it_expects(tmp_path):
    result = _run(tmp_path, {DUCKDB_THREADS_TAG: "all"})
    assert not result.success
    (failure,) = [e for e in result.all_events if e.is_failure]
    assert "tag torchci/duckdb_threads='all': expected a number of threads, 1 or more" in str(
        failure.event_specific_data.error)


def test_the_intra_day_refresh_runs_on_one_duckdb_thread_and_the_daily_run_on_every_core():
    from jobs.daily import all_assets_job
    from jobs.refresh import archive_refresh_job

    assert duckdb_threads(archive_refresh_job.tags) == 1
    assert duckdb_threads(all_assets_job.tags) is None
