"""Per-file extracts of a lake table (resources/lake_extracts.py): what makes one stale."""

import pyarrow as pa

from resources import lake_extracts
from resources.lake import Lake, connect
from resources.sql import SqlFiles

DAY = "2026-11-02"


def _extract_of(tmp_path, folder: str, query: str) -> lake_extracts.Extract:
    """The extract `picked` of test_results with this query, its SQL in its own folder."""
    sql = tmp_path / folder / "sql"
    sql.mkdir(parents=True)
    (sql / "picked.sql").write_text(query)
    return lake_extracts.Extract("picked", "test_results", "readers", SqlFiles(str(tmp_path / folder / "module.py")))


def test_another_version_of_the_query_extracts_again_and_never_reads_the_old_extracts(tmp_path, extracts_made):
    """A deployment that changes an extract's query must not read what the previous version
    extracted from the same, unchanged source files."""
    lake = Lake.at(str(tmp_path / "lake"))
    lake.write("test_results", DAY, pa.Table.from_pylist(
        [{"name": f"test_{i}", "status": ("passed", "failed")[i % 2], "job_id": i} for i in range(10)]))

    def view(extract) -> list[tuple]:
        con = connect()
        try:
            lake_extracts.register_extract(con, lake, extract, [DAY], "v")
            return sorted(con.execute("SELECT * EXCLUDE (day) FROM v").fetchall())
        finally:
            con.close()

    failed = _extract_of(tmp_path, "v1", "SELECT name FROM src WHERE status = 'failed'")
    assert view(failed) == [(f"test_{i}",) for i in (1, 3, 5, 7, 9)] and len(extracts_made) == 1
    assert view(failed) == [(f"test_{i}",) for i in (1, 3, 5, 7, 9)] and len(extracts_made) == 1  # kept
    with_job = _extract_of(tmp_path, "v2", "SELECT name, job_id FROM src WHERE status = 'failed'")
    assert view(with_job) == [(f"test_{i}", i) for i in (1, 3, 5, 7, 9)] and len(extracts_made) == 2
    kept = sorted(p.name for p in (tmp_path / "lake" / "readers" / f"day={DAY}").glob("_picked-*.pq"))
    assert len(kept) == 1  # the first version's extract is gone
