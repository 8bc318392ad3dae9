"""Typed fields: an id of 2**63 (valid JSON), a negative id, a float, a numeric string, a null where
a value is required, each becomes a reject of its record with file, line and reason, and the
rest of the day goes on. The shared checks first, then every reader on a real archive."""

import gzip
import json

import dagster as dg
import pyarrow as pa
import pytest

from conftest import envelope, write_lines
from resources.configured import ArchiveResource, LakeResource
from resources.lake import Lake, connect
from resources.storage import Store
from torchci_assets.ingest.assets import webhook_assets
from torchci_assets.ingest.ci_results import ingest_ci_results_day
from torchci_assets.ingest.fields import INT64_MAX, RowGuard, checked
from torchci_assets.ingest.reports import ingest_test_run_day
from torchci_assets.ingest.webhooks import ingest_webhook_day

DAY = "2026-11-01"


class Bad(ValueError):
    pass


# ---- the shared checks -----------------------------------------------------------------------

@pytest.mark.parametrize("value, kind, minimum, message", [
    (2**63, int, None, "out of range: f = 9223372036854775808, expected -9223372036854775808..9223372036854775807"),
    (-(2**63) - 1, int, None, "out of range"),
    (-1, int, 0, "out of range: f = -1, expected 0..9223372036854775807"),
    (0, int, 1, "out of range: f = 0, expected 1.."),
    (1.0, int, None, "wrong type: f is float, expected int"),
    ("123", int, None, "wrong type: f is str, expected int"),
    (True, int, None, "wrong type: f is bool, expected int"),
    (float("inf"), (int, float), None, "out of range: f = inf"),
    (10**400, (int, float), None, "out of range: f = 1000000000000000000000000000000000000..."),
    pytest.param(10**5000, int, None, "out of range: f = an integer of about 5000 digits", id="5000-digits"),
    ([1], str, None, "wrong type: f is list, expected str"),
])
def test_checked_rejects_what_does_not_fit_the_lake(value, kind, minimum, message):
    with pytest.raises(Bad) as info:
        checked(value, kind, "f", Bad, minimum=minimum)
    assert str(info.value).startswith(message)


def test_checked_passes_what_fits():
    assert checked(INT64_MAX, int, "f", Bad, minimum=0) == INT64_MAX
    assert checked(None, int, "f", Bad, minimum=1) is None  # absence is the caller's business
    assert checked(2**63, (int, float), "f", Bad) == 2**63  # a number column: a double holds it
    assert checked(False, bool, "f", Bad) is False


def test_row_guard_checks_every_value_against_its_column():
    schema = pa.schema([("id", pa.int64()), ("shard", pa.int32()), ("name", pa.string()), ("ok", pa.bool_()),
                        ("labels", pa.list_(pa.string())), ("t", pa.timestamp("ms", tz="UTC")),
                        ("x", pa.float64()), ("where", pa.string())])
    guard = RowGuard(schema, skip=("where",))
    good = (1, 2, "n", True, ["a", None], 5, 1.5, 99)  # `where` is skipped: the ingest fills it
    assert guard.problem(good) is None
    for i, bad in [(0, 2**63), (1, 2**31), (2, 5), (3, 1), (4, [1]), (4, "ab"), (5, "2026"), (6, "1.5")]:
        row = list(good)
        row[i] = bad
        assert guard.problem(tuple(row)).startswith(f"wrong type: column {schema[i].name} is"), (i, bad)
    assert guard.problem({"id": 2**63}) == (
        "wrong type: column id is 9223372036854775808 out of range -9223372036854775808..9223372036854775807")
    # A row Arrow accepts is a row the guard accepts: it is a net, not a second contract.
    pa.record_batch([pa.array([v], type=f.type) for v, f in zip(good[:-1], schema)], names=schema.names[:-1])


# ---- webhooks --------------------------------------------------------------------------------

def job(job_id, **fields):
    body = {"id": job_id, "run_id": 77, "run_attempt": 1, "status": "completed", "conclusion": "success",
            "name": "linux-jammy-py3.10-gcc11 / test (default, 1, 2, linux.2xlarge)", **fields}
    return {"action": "completed", "workflow_job": body, "repository": {"full_name": "pytorch/pytorch"}}


def test_a_job_id_of_two_to_the_63_is_a_reject_not_a_failed_day(tmp_path):
    archive, lake_uri = tmp_path / "archive", str(tmp_path / "lake")
    write_lines(archive / "webhooks" / f"day={DAY}" / "a.jsonl", [
        envelope("workflow_job", "ok-1", job(1)),
        envelope("workflow_job", "huge", job(2**63)),  # valid JSON, one past int64
        envelope("workflow_job", "negative", job(-5)),
        envelope("workflow_job", "float", job(3.0)),
        envelope("workflow_job", "string", job("4")),
        envelope("workflow_job", "null", job(None)),
        envelope("workflow_job", "run-id", job(6, run_id=2**64)),  # orjson reads it as a float
        envelope("workflow_job", "attempt", job(7, run_attempt=0)),
        envelope("workflow_job", "shard", job(8, name="x / test (default, 99999999999, 2, linux)")),
        envelope("workflow_job", "label", job(9, labels=[{"name": 5}])),
        envelope("pull_request", "pr", {"number": -1, "pull_request": {}}),
        envelope("push", "forced", {"ref": "refs/heads/main", "forced": "false"}),
        envelope("workflow_job", "repo", job(10, **{}) | {"repository": {"full_name": 12}}),
        envelope("workflow_job", "ok-2", job(INT64_MAX)),
    ])
    result = dg.materialize([webhook_assets], partition_key=DAY, resources={
        "archive": ArchiveResource(uri=str(archive)), "lake": LakeResource(uri=lake_uri)})
    assert result.success
    con = connect()
    Lake.at(lake_uri).register(con, "workflow_job", [DAY], name="j")
    Lake.at(lake_uri).register(con, "rejects", [DAY], name="r")
    Lake.at(lake_uri).register(con, "webhook_events", [DAY], name="e")
    # a giant shard number is not PyTorch's naming: the job is kept, without shard fields
    assert con.execute("SELECT id, shard FROM j ORDER BY id").fetchall() == [(1, 1), (8, None), (INT64_MAX, 1)]
    # every delivery is kept verbatim; the push, the pull request and the mistyped name have no repo
    assert con.execute("SELECT count(*), count(repo) FROM e").fetchone() == (14, 11)
    rejects = dict(con.execute("SELECT location, reason FROM r").fetchall())
    where = f"webhooks/day={DAY}/a.jsonl"
    assert rejects == {
        f"{where}:2": "workflow_job: out of range: workflow_job.id = 9223372036854775808, expected 0..9223372036854775807",
        f"{where}:3": "workflow_job: out of range: workflow_job.id = -5, expected 0..9223372036854775807",
        f"{where}:4": "workflow_job: wrong type: workflow_job.id is float, expected int",
        f"{where}:5": "workflow_job: wrong type: workflow_job.id is str, expected int",
        f"{where}:6": "workflow_job: missing field: workflow_job.id",
        f"{where}:7": "workflow_job: wrong type: workflow_job.run_id is float, expected int",
        f"{where}:8": "workflow_job: out of range: workflow_job.run_attempt = 0, expected 1..9223372036854775807",
        f"{where}:10": "workflow_job: wrong type: workflow_job.labels[0].name is int, expected str",
        f"{where}:11": "pull_request: out of range: payload.number = -1, expected 0..9223372036854775807",
        f"{where}:12": "push: wrong type: push.forced is str, expected bool",
        f"{where}:13": "workflow_job: wrong type: repository.full_name is int, expected str",
    }


def test_a_received_at_beyond_datetime_range_is_a_reject(tmp_path):
    archive = Store(str(tmp_path / "archive"))
    write_lines(tmp_path / "archive" / "webhooks" / f"day={DAY}" / "a.jsonl", [
        envelope("push", "early", {"ref": "x"}, received_at="0001-01-01T00:00:00+05:00"),
        envelope("push", "ok", {"ref": "x"}, received_at="2026-11-01T12:00:00"),  # no zone: UTC
    ])
    report = ingest_webhook_day(archive, Lake.at(str(tmp_path / "lake")), DAY)
    assert [r.reason for r in report.rejects] == [
        "wrong type: received_at '0001-01-01T00:00:00+05:00' is not an ISO 8601 timestamp"]
    assert report.deliveries == 1



def test_typed_texts_beyond_any_github_value_are_rejected_and_batches_are_bounded_by_text(tmp_path, monkeypatch):
    """A few 1 MB job names made the day's reduction run out of memory: a typed text is bounded, and
    a batch of staged rows is flushed by its text as well as by its count."""
    from torchci_assets.ingest import jobnames, webhook_scan

    flushes = []
    real_flush = webhook_scan._Typed.flush
    monkeypatch.setattr(webhook_scan._Typed, "flush", lambda self: flushes.append(len(self.rows)) or real_flush(self))
    monkeypatch.setattr(webhook_scan, "BATCH_TEXT_CHARS", 20_000, raising=False)
    long_ok = "linux / test (default, 1, 2, linux.2xlarge)" + " " * 3000  # 3,000 is not too long
    write_lines(tmp_path / "archive" / "webhooks" / f"day={DAY}" / "a.jsonl", [
        envelope("workflow_job", "name", job(1, name="n" * (1 << 20))),
        envelope("workflow_job", "branch", job(2, head_branch="b" * 5000)),
        envelope("workflow_job", "labels", job(3, labels=["linux"] * 300)),
        envelope("workflow_job", "label", job(4, labels=["l" * 5000])),
        *[envelope("workflow_job", f"ok-{i}", job(10 + i, name=long_ok)) for i in range(20)],
    ])
    jobnames.parse_job_name.cache_clear()
    report = ingest_webhook_day(Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "lake")), DAY)
    assert report.deliveries == 24 and report.rows["workflow_job"] == 20
    assert [(r.location.rsplit(":", 1)[-1], r.reason) for r in report.rejects] == [
        ("1", "workflow_job: too long: workflow_job.name is 1048576 characters, more than 4096"),
        ("2", "workflow_job: too long: workflow_job.head_branch is 5000 characters, more than 4096"),
        ("3", "workflow_job: too long: workflow_job.labels has 300 labels, more than 256"),
        ("4", "workflow_job: too long: workflow_job.labels[0] is 5000 characters, more than 4096"),
    ]
    assert max(flushes) <= 7  # 20 rows of ~3,000 characters each, in batches of 20,000 characters
    assert jobnames.parse_job_name.cache_info().currsize == 1  # the short name only: long ones are not kept


# ---- test-runs JSONL and JUnit XML -----------------------------------------------------------

def test_test_rows_with_ids_beyond_int64_are_rejected_one_by_one(tmp_path):
    runs = tmp_path / "archive" / "test-runs" / f"day={DAY}"
    runs.mkdir(parents=True)
    row = {"name": "test_a", "classname": "TestX", "file": "test_x.py", "time": 1.0, "job_id": 1, "workflow_id": 2,
           "workflow_run_attempt": 1}
    lines = [row, {**row, "name": "test_b", "job_id": 2**63}, {**row, "name": "test_c", "workflow_id": -1},
             {**row, "name": "test_d", "workflow_run_attempt": 0}, {**row, "name": "test_e", "job_id": "1"},
             {**row, "name": "test_f", "time": 2**64}]
    (runs / "a.jsonl.gz").write_bytes(gzip.compress(b"".join(json.dumps(x).encode() + b"\n" for x in lines)))
    # and a report whose path carries a run id beyond int64
    big = tmp_path / "archive" / "test-reports" / f"day={DAY}" / str(2**63) / "1" / "5" / "r.xml"
    big.parent.mkdir(parents=True)
    big.write_bytes(b'<testsuite><testcase classname="t" name="test_x" time="1"/></testsuite>')
    report = ingest_test_run_day(Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "lake")), DAY)
    assert report.rows == 1
    reasons = {r.location.rsplit(":", 1)[-1]: r.reason for r in report.rejects["test-runs"]}
    assert reasons == {
        "2": "out of range: job_id = 9223372036854775808, expected 0..9223372036854775807",
        "3": "out of range: workflow_id = -1, expected 0..9223372036854775807",
        "4": "out of range: workflow_run_attempt = 0, expected 1..9223372036854775807",
        "5": "wrong type: job_id is str, expected int",
        "6": "time 1.8446744073709552e+19 is more than 1000000000 seconds",
    }
    [bad_path] = report.rejects["test-reports"]
    assert bad_path.location.endswith("/r.xml") and bad_path.reason.startswith("bad-path: run id and job id must be")


# ---- ci-results ------------------------------------------------------------------------------

def callback(delivery, **workflow):
    wf = {"status": "completed", "conclusion": "success", "run_id": 7, "run_attempt": 1, "job_name": "test",
          "started_at": "2026-11-01T10:00:00Z", "completed_at": "2026-11-01T10:30:00Z", **workflow}
    return {"trusted": {"verified_repo": "acme-ai/torch-npu", "ci_metrics": {"queue_time": 2**63}},
            "untrusted": {"callback_payload": {"delivery_id": delivery, "workflow": wf}}}


def test_callbacks_with_numbers_beyond_int64_are_rejected_one_by_one(tmp_path):
    write_lines(tmp_path / "archive" / "ci-results" / f"day={DAY}" / "r.jsonl", [
        callback("ok"), callback("huge", run_id=2**63), callback("neg", run_id=-1),
        callback("count", test_results={"passed": 2**63}), callback("float", run_attempt=1.0),
    ])
    report = ingest_ci_results_day(Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "lake")), DAY)
    assert report.rows == 1  # the ok one; a queue time of 2**63 seconds is a number a double holds
    w = "untrusted.callback_payload.workflow"
    assert [(r.location.rsplit(":", 1)[-1], r.reason) for r in report.rejects] == [
        ("2", f"out of range: {w}.run_id = 9223372036854775808, expected 0..9223372036854775807"),
        ("3", f"out of range: {w}.run_id = -1, expected 0..9223372036854775807"),
        ("4", f"out of range: {w}.test_results.passed = 9223372036854775808, expected 0..9223372036854775807"),
        ("5", f"wrong type: {w}.run_attempt is float, expected int/str"),
    ]



def test_a_count_as_a_decimal_string_of_thousands_of_digits_is_a_reject_not_a_failed_day(tmp_path):
    """Python's int() refuses a string of over 4300 digits with a plain ValueError: it must not escape."""
    write_lines(tmp_path / "archive" / "ci-results" / f"day={DAY}" / "r.jsonl", [
        callback("ok"), callback("long", test_results={"passed": "9" * 5000}),
        callback("padded", run_id="0" * 5000 + "7"), callback("twenty", run_id="1" * 20),
    ])
    report = ingest_ci_results_day(Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "lake")), DAY)
    assert report.rows == 2  # ok, and padded: leading zeros are not digits that count
    w = "untrusted.callback_payload.workflow"
    assert [(r.location.rsplit(":", 1)[-1], r.reason) for r in report.rejects] == [
        ("2", f"out of range: {w}.test_results.passed = a number of 5000 digits, expected 0..{INT64_MAX}"),
        ("4", f"out of range: {w}.run_id = 11111111111111111111, expected 0..{INT64_MAX}"),  # short: shown
    ]


# ---- the net under the readers ---------------------------------------------------------------

def test_guard_convert_keeps_what_fits_and_rejects_the_rest():
    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    guard, refused = RowGuard(schema), []

    def build(rows):
        return pa.RecordBatch.from_pylist(rows, schema=schema)

    batch = guard.convert([{"id": 1, "name": "a"}, {"id": 2**63, "name": "b"}, {"id": 3, "name": 4}], build,
                          lambda row, why: refused.append((row["name"], why)))
    assert batch.to_pylist() == [{"id": 1, "name": "a"}]
    assert [name for name, _ in refused] == ["b", 4]


def test_a_value_an_extractor_let_through_is_a_reject_of_its_record_not_a_failed_day(tmp_path, monkeypatch):
    """Should a reader ever forget a check, the staging batch does not fail: its misfit is a reject."""
    from torchci_assets.ingest import reports, webhook_scan

    real_row = webhook_scan.workflow_job_row
    monkeypatch.setattr(webhook_scan, "workflow_job_row",
                        lambda p: (p["workflow_job"]["id"],) + real_row({**p, "workflow_job": {**p["workflow_job"], "id": 1}})[1:])
    write_lines(tmp_path / "archive" / "webhooks" / f"day={DAY}" / "a.jsonl",
                [envelope("workflow_job", "ok", job(1)), envelope("workflow_job", "huge", job(2**63))])
    report = ingest_webhook_day(Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "lake")), DAY)
    assert report.rows["workflow_job"] == 1
    assert [(r.location, r.reason) for r in report.rejects] == [
        (f"webhooks/day={DAY}/a.jsonl:2", "workflow_job: wrong type: column id is 9223372036854775808 out of range "
                                          "-9223372036854775808..9223372036854775807")]

    real_parse = reports.parse_junit

    def unchecked(*args, **kwargs):
        for batch in real_parse(*args, **kwargs):
            yield batch._replace(rows=[{**r, "rerun_count": 2**70} if r["name"] == "test_bad" else r for r in batch.rows])
    monkeypatch.setattr(reports, "parse_junit", unchecked)
    path = tmp_path / "archive" / "test-reports" / f"day={DAY}" / "1" / "1" / "1" / "r.xml"
    path.parent.mkdir(parents=True)
    path.write_bytes(b'<testsuite><testcase classname="t" name="test_ok"/><testcase classname="t" name="test_bad"/></testsuite>')
    runs = ingest_test_run_day(Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "lake")), DAY)
    assert runs.rows == 1
    [bad] = runs.rejects["test-reports"]
    assert bad.location.endswith("/r.xml") and bad.reason.startswith("test 'test_bad': wrong type: column rerun_count")
