"""Per-file extracts of a lake table (resources/lake_extracts.py): what makes one stale."""

import os

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


def _failed_names(lake: Lake, extract) -> list[str]:
    con = connect()
    try:
        lake_extracts.register_extract(con, lake, extract, [DAY], "v")
        return sorted(r[0] for r in con.execute("SELECT name FROM v").fetchall())
    finally:
        con.close()


def _footers_read(monkeypatch) -> list[str]:
    """The lake files whose footers are read to name their extracts."""
    read: list[str] = []
    real = Lake.file_digest

    def watched(self, path):
        read.append(path.rsplit("/", 1)[-1])
        return real(self, path)
    monkeypatch.setattr(Lake, "file_digest", watched)
    return read


def test_a_settled_file_the_index_vouches_for_is_not_opened_again(roots, tmp_path, monkeypatch, extracts_made):
    """Naming an extract reads its source's footer: two requests a file on S3, hundreds a window
    at every refresh. Once the index keeps a settled file's listed version, neither is read again;
    a file written since (a new version) is."""
    monkeypatch.setattr(lake_extracts, "SETTLED_S", 0)  # every file listed is older than now
    lake = Lake.at(roots.lake_uri)
    rows = [{"name": f"test_{i}", "status": ("passed", "failed")[i % 2], "job_id": i} for i in range(10)]
    lake.write("test_results", DAY, pa.Table.from_pylist(rows[:5]), part="a")
    lake.write("test_results", DAY, pa.Table.from_pylist(rows[5:]), part="b")
    failed = _extract_of(tmp_path, "v1", "SELECT name FROM src WHERE status = 'failed'")
    read = _footers_read(monkeypatch)
    assert _failed_names(lake, failed) == ["test_1", "test_3", "test_5", "test_7", "test_9"]
    assert len(read) == 2 and len(extracts_made) == 2
    assert _failed_names(lake, failed) == ["test_1", "test_3", "test_5", "test_7", "test_9"]
    assert len(read) == 2 and len(extracts_made) == 2  # nothing opened: the index named both
    lake.write("test_results", DAY, pa.Table.from_pylist([dict(r, status="failed") for r in rows[5:]]), part="b")
    assert _failed_names(lake, failed) == ["test_1", "test_3", "test_5", "test_6", "test_7", "test_8", "test_9"]
    assert read[2:] == ["b.parquet"] and extracts_made[2:] == [f"day={DAY}/b.parquet"]


def test_a_file_rewritten_within_its_version_s_tick_is_never_vouched_for(tmp_path, monkeypatch, extracts_made):
    """S3 keeps the second of a write: a rewrite of the same size within it lists as the same
    version. A file is vouched for only once older than SETTLED_S, so such a rewrite (played here
    on a local file by putting its size, time and inode back) is seen through its footer."""
    lake = Lake.at(str(tmp_path / "lake"))
    rows = [{"name": f"test_{i}", "status": "failed" if i == 1 else "passed"} for i in range(4)]
    lake.write("test_results", DAY, pa.Table.from_pylist(rows), part="a")
    path = tmp_path / "lake" / "test_results" / f"day={DAY}" / "a.parquet"
    failed = _extract_of(tmp_path, "v1", "SELECT name FROM src WHERE status = 'failed'")
    assert _failed_names(lake, failed) == ["test_1"]
    before, stat = path.read_bytes(), path.stat()
    other = Lake.at(str(tmp_path / "other"))  # the same rows but test_2 failed: the same size
    other.write("test_results", DAY, pa.Table.from_pylist(
        [dict(r, status="failed" if r["name"] == "test_2" else "passed") for r in rows]), part="a")
    swapped = (tmp_path / "other" / "test_results" / f"day={DAY}" / "a.parquet").read_bytes()
    assert swapped != before and len(swapped) == len(before)
    with open(path, "r+b") as f:  # in place: the same inode
        f.write(swapped)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_ino == stat.st_ino and path.stat().st_mtime_ns == stat.st_mtime_ns
    assert _failed_names(lake, failed) == ["test_2"]


def test_a_lost_or_garbled_index_only_costs_footer_reads(tmp_path, monkeypatch, extracts_made):
    monkeypatch.setattr(lake_extracts, "SETTLED_S", 0)
    lake = Lake.at(str(tmp_path / "lake"))
    lake.write("test_results", DAY, pa.Table.from_pylist([{"name": "test_1", "status": "failed"}]), part="a")
    failed = _extract_of(tmp_path, "v1", "SELECT name FROM src WHERE status = 'failed'")
    assert _failed_names(lake, failed) == ["test_1"]
    index = tmp_path / "lake" / "readers" / f"day={DAY}" / "_picked-index.json"
    read = _footers_read(monkeypatch)
    for garbage in (b"{not json", b'{"query": 1, "files": []}', b'[]'):
        index.write_bytes(garbage)
        read.clear()
        assert _failed_names(lake, failed) == ["test_1"] and read == ["a.parquet"]
    assert len(extracts_made) == 1  # the extract itself was never made again


def test_a_pass_keeps_its_folder_listing_through_its_own_writes_and_not_through_another_change(tmp_path, monkeypatch):
    """Two extracts kept in one home, read in one pass: the first one's writes there are kept in
    the pass's listing, without listing the folder again; a change another Store of the process
    made there meanwhile (a thread deleting a file) is not hidden by them: the second extract finds
    its file gone and makes it again."""
    (tmp_path / "sql").mkdir()
    (tmp_path / "sql" / "failed.sql").write_text("SELECT name FROM src WHERE status = 'failed'")
    (tmp_path / "sql" / "passed.sql").write_text("SELECT name FROM src WHERE status = 'passed'")
    sql = SqlFiles(str(tmp_path / "module.py"))
    failed, passed = (lake_extracts.Extract(n, "test_results", "readers", sql) for n in ("failed", "passed"))
    lake = Lake.at(str(tmp_path / "lake"))
    lake.write("test_results", DAY, pa.Table.from_pylist(
        [{"name": f"test_{i}", "status": ("passed", "failed")[i % 2]} for i in range(4)]))
    listings = []
    real_list = lake.store.list_folder
    monkeypatch.setattr(lake.store, "list_folder", lambda folder: listings.append(folder) or real_list(folder))

    def names(extract, name: str, seen) -> list[str]:
        con = connect()
        try:
            lake_extracts.register_extract(con, lake, extract, [DAY], name, seen)
            return sorted(r[0] for r in con.execute(f"SELECT name FROM {name}").fetchall())
        finally:
            con.close()

    folder = tmp_path / "lake" / "readers" / f"day={DAY}"
    seen = lake_extracts.ExtractPass()
    assert names(passed, "p", seen) == ["test_0", "test_2"] and names(failed, "f", seen) == ["test_1", "test_3"]
    assert len(listings) == 1  # the passed tests' extract, written, kept in the listing
    [made] = folder.glob("_passed-*.pq")
    real_extract = lake_extracts._extract

    def extract_while_another_store_deletes(*args):
        real_extract(*args)
        Lake.at(str(tmp_path / "lake")).store.delete(f"readers/day={DAY}/{made.name}")

    monkeypatch.setattr(lake_extracts, "_extract", extract_while_another_store_deletes)
    for f in folder.glob("_failed-*.pq"):
        f.unlink()  # made again by the next pass, while the other Store deletes
    seen = lake_extracts.ExtractPass()
    assert names(failed, "f", seen) == ["test_1", "test_3"] and not made.exists()
    monkeypatch.setattr(lake_extracts, "_extract", real_extract)
    assert names(passed, "p", seen) == ["test_0", "test_2"] and made.exists() and len(listings) == 3
