"""PyTorch's flattened test rows (upload_test_stats JSONL) read with the JUnit semantics."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import pyarrow as pa
import pytest

from torchci_assets.ingest.junit import TEST_RUN_SCHEMA, ReportRejected, parse_junit
from torchci_assets.ingest.runs_jsonl import parse_test_runs_jsonl

DATA = Path(__file__).parent / "data" / "junit"
SOURCE = "test-runs/day=2026-11-01/part-0.jsonl"


def parse(data: bytes | io.IOBase, **kwargs) -> tuple[list[dict], list[dict]]:
    stream = io.BytesIO(data) if isinstance(data, bytes) else data
    rows, rejects = [], []
    for batch in parse_test_runs_jsonl(stream, SOURCE, **kwargs):
        rows += batch.rows
        rejects += batch.rejects
    return rows, rejects


def line(**fields) -> bytes:
    record = {"classname": "TestNN", "file": "test_nn.py", "invoking_file": "test_nn", "name": "test_x",
              "time": 0.5, "job_id": 1, "workflow_id": 2, "workflow_run_attempt": 1}
    record.update(fields)
    return json.dumps(record).encode() + b"\n"


class TrickleStream:
    """Returns at most a few bytes per read, like a slow network stream."""

    def __init__(self, data: bytes, step: int):
        self._data = data
        self._step = step

    def read(self, n: int) -> bytes:
        out, self._data = self._data[: min(n, self._step)], self._data[min(n, self._step):]
        return out


def test_same_tests_give_the_same_rows_as_the_junit_report():
    rows, rejects = parse((DATA / "pytorch_test_runs.jsonl").read_bytes())
    assert rejects == []
    from_jsonl = [r for r in rows if r["job_id"] == 5001]
    with (DATA / "pytorch_style.xml").open("rb") as stream:
        from_xml = [
            row
            for batch in parse_junit(stream, workflow_id=9001, run_attempt=1, job_id=5001, invoking_file_hint="nn/test_convolution")
            for row in batch.rows
        ]
    assert len(from_xml) == 6
    assert from_jsonl == from_xml


def test_lines_of_one_test_in_one_job_attempt_are_its_attempts():
    rows, _ = parse((DATA / "pytorch_test_runs.jsonl").read_bytes())
    keyed = {(r["job_id"], r["name"]): r for r in rows}
    assert len(rows) == len(keyed) == 9
    stock_rerun = keyed[(5002, "test_stock_rerun")]
    assert (stock_rerun["status"], stock_rerun["rerun_count"], stock_rerun["time"]) == ("passed", 1, 1.0)
    assert (stock_rerun["workflow_run_attempt"], stock_rerun["file"], stock_rerun["classname"]) == (2, "test_nn.py", "TestNN")
    # The same test in another job is another row; a failure without a message keeps its text's first line.
    other_job = keyed[(5003, "test_stock_rerun")]
    assert (other_job["status"], other_job["rerun_count"], other_job["message"]) == (
        "failed", 0, "Traceback (most recent call last):",
    )
    assert [r["name"] for r in rows][:2] == ["test_conv_backcompat", "test_conv_flaky_cuda"]


def test_bad_lines_are_rejected_one_by_one_and_the_rest_is_kept():
    data = b"".join([
        line(name="test_ok_1"),
        b'{"name": "test_cut", "classname": "TestNN", "ti\n',
        b"[1, 2, 3]\n",
        line(name="test_no_job", job_id=None),
        line(name="test_bool_job", job_id=True),
        line(name="test_slow", time="fast"),
        line(name="test_negative", time=-1),
        line(name="test_str_failure", failure="boom"),
        line(name="test_empty_rerun", rerun=[]),
        line(name=""),
        line(name="test_file_int", file=7),
        b"\n",
        line(name="test_ok_2", time=None, skipped={"message": "slow"}),
    ])
    rows, rejects = parse(data)
    assert [(r["name"], r["status"], r["time"], r["message"]) for r in rows] == [
        ("test_ok_1", "passed", 0.5, None),
        ("test_ok_2", "skipped", 0.0, "slow"),
    ]
    reasons = {reject["location"]: reject["reason"] for reject in rejects}
    assert list(reasons) == [f"{SOURCE}:{n}" for n in range(2, 12)]
    assert reasons[f"{SOURCE}:2"].startswith("invalid JSON")
    assert reasons[f"{SOURCE}:3"] == "line is not a JSON object"
    assert reasons[f"{SOURCE}:4"] == "job_id must be an integer, got None"
    assert reasons[f"{SOURCE}:5"] == "wrong type: job_id is bool, expected int"
    assert "'fast' is not a number" in reasons[f"{SOURCE}:6"]
    assert "non-negative" in reasons[f"{SOURCE}:7"]
    assert reasons[f"{SOURCE}:8"] == "failure must be an object or a list of objects"
    assert reasons[f"{SOURCE}:9"] == "rerun must be an object or a list of objects"
    assert reasons[f"{SOURCE}:10"] == "name must be a non-empty string"
    assert reasons[f"{SOURCE}:11"] == "file must be a string"
    assert all(reject["source"] == SOURCE for reject in rejects)
    assert rejects[0]["sample"] == '{"name": "test_cut", "classname": "TestNN", "ti'


def test_plain_pytest_classnames_and_missing_invoking_file_are_normalised():
    rows, _ = parse(line(classname="test.nn.test_convolution.TestNN", file=None, invoking_file=None))
    [row] = rows
    assert (row["invoking_file"], row["file"], row["classname"]) == ("nn/test_convolution", "nn/test_convolution.py", "TestNN")


def test_numeric_messages_from_the_uploader_are_text():
    rows, rejects = parse(line(error={"message": 42, "text": "Error 42"}))
    assert rejects == []
    assert (rows[0]["status"], rows[0]["message"]) == ("error", "42")


def test_surefire_keys_count_as_failed_attempts():
    rows, _ = parse(line(flakyFailure=[{"message": "flaked"}, {"message": "again"}], flakyError={"text": "x"}))
    [row] = rows
    assert (row["status"], row["rerun_count"], row["message"]) == ("passed", 3, "flaked")


def test_line_longer_than_the_limit_is_rejected_without_buffering_it():
    data = line(name="test_before") + line(name="test_huge", text="x" * 5000) + line(name="test_after").rstrip(b"\n")
    rows, rejects = parse(data, max_line_bytes=1000)
    assert [r["name"] for r in rows] == ["test_before", "test_after"]  # the last line has no newline
    [reject] = rejects
    assert (reject["location"], reject["sample"]) == (f"{SOURCE}:2", None)
    assert reject["reason"].startswith("line longer than 1000 bytes")
    # An over-long last line without a newline is rejected too.
    rows, rejects = parse(line(name="test_before") + b"x" * 5000, max_line_bytes=1000)
    assert [r["name"] for r in rows] == ["test_before"]
    assert [r["location"] for r in rejects] == [f"{SOURCE}:2"]


def test_reading_in_tiny_pieces_gives_the_same_result():
    data = (DATA / "pytorch_test_runs.jsonl").read_bytes() + b"not json\n" + line(name="test_tail")
    expected = parse(data)
    assert parse(TrickleStream(data, 7)) == expected
    assert parse(TrickleStream(data, 1), max_line_bytes=2000) == expected
    assert len(expected[1]) == 1


def test_truncated_gzip_rejects_the_whole_file(tmp_path):
    compressed = gzip.compress((DATA / "pytorch_test_runs.jsonl").read_bytes() * 20)
    path = tmp_path / "part-0.jsonl.gz"
    path.write_bytes(compressed[: len(compressed) * 2 // 3])
    batches = parse_test_runs_jsonl(pa.input_stream(str(path), compression="gzip"), SOURCE)
    with pytest.raises(ReportRejected) as info:
        next(batches)
    assert info.value.code == "truncated"


def test_file_over_the_byte_limit_is_rejected():
    data = line() * 1000
    with pytest.raises(ReportRejected) as info:
        parse(data, max_bytes=len(data) - 1)
    assert info.value.code == "too-large"
    assert len(parse(data, max_bytes=len(data))[0]) == 1


def test_batches_and_schema():
    data = b"".join(line(name=f"test_{i}") for i in range(5)) + b"oops\n" * 3
    batches = list(parse_test_runs_jsonl(io.BytesIO(data), SOURCE, batch_size=2))
    assert [(len(b.rows), len(b.rejects)) for b in batches] == [(0, 2), (0, 1), (2, 0), (2, 0), (1, 0)]
    table = pa.Table.from_pylist([r for b in batches for r in b.rows], schema=TEST_RUN_SCHEMA)
    assert table.column("time").to_pylist() == [0.5] * 5
