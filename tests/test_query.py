"""`torchci query` and reading the lake from other engines (DuckDB globs, pyarrow datasets)."""

import csv
import datetime as dt
import io
import json

import duckdb
import pyarrow.dataset as pads

from conftest import Roots, envelope
from resources.lake import Lake
from resources.storage import Store
from torchci_assets import query
from torchci_assets.ingest.webhooks import ingest_webhook_day

DAYS = ["2026-11-01", "2026-11-02", "2026-11-03"]


def job(job_id: int, day: str, conclusion: str, name: str) -> dict:
    return envelope("workflow_job", f"{day}-{job_id}", {
        "action": "completed", "repository": {"full_name": "pytorch/pytorch"},
        "workflow_job": {"id": job_id, "run_id": 5, "run_attempt": 1, "status": "completed", "name": name,
                         "conclusion": conclusion, "head_sha": "abc", "labels": ["linux.2xlarge"],
                         "started_at": f"{day}T10:00:00Z", "completed_at": f"{day}T10:10:00Z"}},
        received_at=f"{day}T10:10:01Z")


def build_lake(roots: Roots) -> Lake:
    """Three days of jobs: day i has i+1 jobs, the last of each day a failure on windows."""
    for i, day in enumerate(DAYS):
        lines = [job(100 * i + k, day, "success", "linux-jammy-py3.10-gcc11 / test (default, 1, 2, linux.2xlarge)")
                 for k in range(i)]
        lines.append(job(100 * i + 99, day, "failure", "win-vs2022-cpu-py3 / test (default, 1, 1, windows.4xlarge)"))
        roots.write(f"webhooks/day={day}/a.jsonl.gz", lines)
        ingest_webhook_day(roots.archive, Lake.at(roots.lake_uri), day)
    return Lake.at(roots.lake_uri)


def run(capsys, *argv) -> tuple[int, str, str]:
    code = query.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


SQL = ("SELECT day, platform, conclusion, count(*) AS jobs, sum(duration_s) AS seconds "
       "FROM workflow_job GROUP BY ALL ORDER BY day, platform")
EXPECTED = [
    {"day": "2026-11-01", "platform": "win", "conclusion": "failure", "jobs": 1, "seconds": 600.0},
    {"day": "2026-11-02", "platform": "linux", "conclusion": "success", "jobs": 1, "seconds": 600.0},
    {"day": "2026-11-02", "platform": "win", "conclusion": "failure", "jobs": 1, "seconds": 600.0},
    {"day": "2026-11-03", "platform": "linux", "conclusion": "success", "jobs": 2, "seconds": 1200.0},
    {"day": "2026-11-03", "platform": "win", "conclusion": "failure", "jobs": 1, "seconds": 600.0},
]


def test_query_over_the_lake_gives_the_same_rows_locally_and_on_s3(roots, capsys):
    build_lake(roots)
    code, out, _ = run(capsys, SQL, "--lake", roots.lake_uri, "--format", "json")
    assert code == 0
    assert [json.loads(line) for line in out.splitlines()] == EXPECTED


def test_every_table_is_a_view_and_the_days_can_be_limited(tmp_path, capsys, monkeypatch):
    build_lake(Roots(str(tmp_path)))
    monkeypatch.setenv("TORCHCI_LAKE_URI", str(tmp_path / "lake"))  # the default lake
    code, out, _ = run(capsys, "SELECT view_name FROM duckdb_views() WHERE NOT internal ORDER BY 1", "--format", "csv")
    assert code == 0
    assert out.splitlines() == ["view_name", "pull_request", "push", "rejects", "webhook_events",
                                "workflow_job", "workflow_run"]
    code, out, _ = run(capsys, "SELECT day, count(*) AS n FROM workflow_job GROUP BY day ORDER BY day",
                       "--format", "csv", "--from", "2026-11-02", "--to", "2026-11-02")
    assert list(csv.reader(io.StringIO(out))) == [["day", "n"], ["2026-11-02", "2"]]


def test_table_format_aligns_cuts_long_cells_and_says_when_rows_are_left_out(tmp_path, capsys):
    build_lake(Roots(str(tmp_path)))
    code, out, _ = run(capsys, "SELECT id, name, completed_at, conclusion FROM workflow_job ORDER BY id",
                       "--lake", str(tmp_path / "lake"), "--max-rows", "3")
    lines = out.splitlines()
    assert code == 0 and lines[0].split(" | ")[0].strip() == "id"
    assert [c.strip() for c in lines[2].split(" | ")] == [
        "99", "win-vs2022-cpu-py3 / test (default, 1, 1, windows.4xlarge)", "2026-11-01 10:10:00+00:00", "failure"]
    assert lines[3].startswith("100 | ")  # numbers right-aligned
    assert len(lines) == 2 + 3 + 1 and "more not printed" in lines[-1]
    long = "x" * 200
    text = query.format_table(["a", "b"], [(long, None), ("y", 1.5)])
    assert "NULL" in text and "x" * (query.MAX_CELL - 1) + "…" in text and long not in text
    assert text.splitlines()[-1] == "(2 rows)"


def test_a_bad_query_fails_with_the_tables_there_are(tmp_path, capsys):
    build_lake(Roots(str(tmp_path)))
    code, out, err = run(capsys, "SELECT * FROM workflow_jobs", "--lake", str(tmp_path / "lake"))
    assert code == 1 and out == ""
    assert "workflow_jobs" in err and "workflow_job, workflow_run" in err


def test_a_mistyped_day_or_lake_is_said_not_taken_for_an_empty_lake(tmp_path, capsys):
    import pytest

    build_lake(Roots(str(tmp_path)))
    lake = str(tmp_path / "lake")
    for day in ("28-11-2026", "20261102", "2026-02-30"):
        with pytest.raises(SystemExit) as usage:
            query.main(["SELECT 1", "--lake", lake, "--from", day])
        assert usage.value.code == 2 and f"{day!r} is not a day: use YYYY-MM-DD" in capsys.readouterr().err
    code, out, err = run(capsys, "SELECT 1", "--lake", str(tmp_path / "no-lake"))
    assert (code, out) == (2, "") and f"no lake at {tmp_path / 'no-lake'}" in err
    code, _, err = run(capsys, "SELECT * FROM workflow_job", "--lake", lake, "--from", "2027-01-01")
    assert code == 1 and "with a partition from 2027-01-01: none" in err


def test_the_lake_reads_with_hive_partitioning_in_duckdb_and_pyarrow(roots):
    lake = build_lake(roots)
    store = lake.store
    # pyarrow: discover the table folder, `day` from the folder names (local or S3 alike)
    dataset = pads.dataset(store.full("workflow_job"), filesystem=store.fs, format="parquet", partitioning="hive")
    got = sorted((str(r["day"]), r["id"]) for r in dataset.to_table(columns=["day", "id"]).to_pylist())
    expected = [(d, 100 * i + k) for i, d in enumerate(DAYS) for k in [*range(i), 99]]
    assert got == sorted(expected)
    if store.is_local:
        # DuckDB with a plain glob, as docs/ingest.md shows
        rows = duckdb.sql(f"SELECT day, count(*) FROM read_parquet('{store.full('workflow_job')}/*/*.parquet', "
                          "hive_partitioning = true) GROUP BY day ORDER BY day").fetchall()
        assert rows == [(dt.date.fromisoformat(d), i + 1) for i, d in enumerate(DAYS)]


def test_views_are_quoted_so_any_table_folder_name_works(tmp_path):
    import pyarrow as pa

    lake = Lake(Store(str(tmp_path)))
    lake.write("odd-name", DAYS[0], pa.table({"v": [1, 2]}))
    con = duckdb.connect()
    assert query.register_lake(con, lake) == ["odd-name"]
    assert con.execute('SELECT sum(v), min(day) FROM "odd-name"').fetchone() == (3, dt.date(2026, 11, 1))



def test_a_query_naming_tables_views_only_those(roots, capsys, monkeypatch):
    """A view reads its files' footers (on S3, requests): a query of one table must not pay for the
    lake's every table. A query naming none (`SHOW TABLES`) still sees every table."""
    build_lake(roots)
    viewed: list[str] = []
    real = Lake.register

    def watched(self, con, table, days=None, name=None):
        viewed.append(table)
        return real(self, con, table, days, name)
    monkeypatch.setattr(Lake, "register", watched)
    code, out, _ = run(capsys, "SELECT count(*) AS n FROM Workflow_Job", "--lake", roots.lake_uri, "--format", "csv")
    assert (code, out.splitlines(), viewed) == (0, ["n", "6"], ["workflow_job"])
    viewed.clear()
    code, out, _ = run(capsys, "SHOW TABLES", "--lake", roots.lake_uri, "--format", "csv")
    assert code == 0 and "workflow_run" in out.splitlines() and len(viewed) == 6
