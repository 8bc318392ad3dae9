"""Rows sorted in bounded runs on disk and merged come out as DuckDB's ORDER BY puts them: texts by
their bytes, nulls last, rows of equal keys in their input order; whatever the number of runs."""

import random

import pyarrow as pa
import pytest

from resources.lake import connect
from torchci_assets.ingest import staging
from torchci_assets.ingest.staging import sorted_batches

SCHEMA = pa.schema([("repo", pa.string()), ("run", pa.int64()), ("seq", pa.int64()), ("text", pa.string())])


def rows(seed: int, n: int) -> list[dict]:
    """`n` rows whose keys repeat, are prefixes of each other, not ASCII, empty or null; `seq` is
    the input order and `text` a payload of varying length."""
    rnd = random.Random(seed)
    repos = ["a/b", "a/b ", "a/bc", "a/b-c", "A/b", "é/x", "中/x", "", None]
    return [{"repo": rnd.choice(repos), "run": rnd.choice([None, -1, 0, 7, 70, 2**40]), "seq": i,
             "text": "x" * rnd.choice([0, 10, 3000])} for i in range(n)]


def batches(data: list[dict], size: int) -> list[pa.RecordBatch]:
    return [pa.RecordBatch.from_pylist(data[i:i + size], schema=SCHEMA) for i in range(0, len(data), size)]


def duckdb_order(data: list[dict]) -> list[tuple]:
    con = connect()
    try:
        con.register("input_rows", pa.Table.from_pylist(data, schema=SCHEMA))
        return con.execute("SELECT repo, run, seq, text FROM input_rows ORDER BY repo, run, seq").fetchall()
    finally:
        con.close()


@pytest.mark.parametrize("run_bytes, fan_in", [(1 << 30, 16), (20_000, 16), (20_000, 2), (5_000, 3)])
def test_rows_come_out_in_duckdbs_order_whatever_the_runs(tmp_path, monkeypatch, run_bytes, fan_in):
    """One run in memory; several runs merged at once; runs merged in several rounds."""
    monkeypatch.setattr(staging, "RUN_BYTES", run_bytes)
    monkeypatch.setattr(staging, "RUN_BATCH_BYTES", 2_000)
    monkeypatch.setattr(staging, "MERGE_FAN_IN", fan_in)
    data = rows(run_bytes + fan_in, 600)
    out = list(sorted_batches(batches(data, 37), SCHEMA, ["repo", "run"], str(tmp_path), 50))
    assert all(b.schema == SCHEMA and 0 < b.num_rows <= 50 for b in out)
    got = [tuple(r.values()) for b in out for r in b.to_pylist()]
    assert got == duckdb_order(data)  # equal keys: by seq, the input order
    assert list(tmp_path.iterdir()) == []  # the runs' files are gone


def test_runs_are_written_and_merged_when_the_input_exceeds_a_run(tmp_path, monkeypatch):
    monkeypatch.setattr(staging, "RUN_BYTES", 20_000)
    monkeypatch.setattr(staging, "MERGE_FAN_IN", 2)
    written = []
    write_run = staging._write_run
    monkeypatch.setattr(staging, "_write_run", lambda path, *a: written.append(path) or write_run(path, *a))
    data = rows(7, 400)
    got = [tuple(r.values()) for b in sorted_batches(batches(data, 10), SCHEMA, ["repo", "run"], str(tmp_path), 64)
           for r in b.to_pylist()]
    assert got == duckdb_order(data)
    runs = [p for p in written if "/run-" in p]
    assert len(runs) > 4 and any("/merge-2-" in p for p in written)  # two rounds of merges before the last


def test_no_rows_give_no_batches(tmp_path):
    assert list(sorted_batches(iter([]), SCHEMA, ["repo"], str(tmp_path), 10)) == []
