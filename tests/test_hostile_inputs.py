"""Seeded fuzz of every archive reader: no input raises, and every record ends as a row or a reject.

The inputs and the verdicts come from `hostile.py` (a seed-deterministic generator with the
contract as a rule table): over 10,000 hostile records per run across webhooks, ci-results,
test-runs JSONL and JUnit XML, ingested the way the assets do it, into a real lake. Each
reject must be exactly where the contract says (file and line), each surviving record a row.

Set TORCHCI_FUZZ_SEED to explore another seed; a failure names the seed to reproduce it.
"""

import os
import time
from collections import Counter

import orjson
import pytest

from hostile import ci_results_day, junit_day, reject_key, runs_jsonl_day, webhook_day
from resources.lake import Lake, connect
from resources.storage import Store
from torchci_assets.ingest.ci_results import ingest_ci_results_day
from torchci_assets.ingest.reports import ingest_test_run_day
from torchci_assets.ingest.webhooks import ingest_webhook_day

SEED = int(os.environ.get("TORCHCI_FUZZ_SEED", "20261101"))
DAY = "2026-11-01"
MAX_LINE = 64 << 10  # a small cap, so that lines over it are cheap to generate
SIZES = {"webhooks": 10_000, "ci-results": 5000, "test-runs": 5000, "test-reports": 5000}


def got_rejects(rejects) -> Counter:
    return Counter(reject_key(r.location, r.reason) for r in rejects)


def check(day, rejects, rows: dict | None) -> None:
    got = got_rejects(rejects)
    missing, unexpected = day.expected_rejects - got, got - day.expected_rejects
    assert not missing and not unexpected, (
        f"seed {SEED}, {day.source}: rejects expected but absent {dict(list(missing.items())[:5])}; "
        f"rejects not expected {[(r.location, r.reason) for r in rejects if reject_key(r.location, r.reason) in unexpected][:5]}")
    for table, n in day.expected_rows.items() if rows is not None else ():
        assert rows[table] == n, f"seed {SEED}, {day.source}: {table} has {rows[table]} rows, expected {n}"


@pytest.fixture
def capped(monkeypatch):
    monkeypatch.setenv("TORCHCI_MAX_LINE_BYTES", str(MAX_LINE))


def test_no_hostile_record_stops_a_day_and_each_ends_as_a_row_or_a_reject(tmp_path, capped):
    started = time.monotonic()
    archive, lake = Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "lake"))
    days = {
        "webhooks": webhook_day(SEED, SIZES["webhooks"], MAX_LINE),
        "ci-results": ci_results_day(SEED + 1, SIZES["ci-results"], MAX_LINE),
        "test-runs": runs_jsonl_day(SEED + 2, SIZES["test-runs"], MAX_LINE),
        "test-reports": junit_day(SEED + 3, SIZES["test-reports"], MAX_LINE),
    }
    for day in days.values():
        day.write(archive.root)

    hooks = ingest_webhook_day(archive, lake, DAY, workers=1)
    web = days["webhooks"]
    check(web, hooks.rejects, {**hooks.rows, "webhook_events": hooks.deliveries})
    assert hooks.duplicates == web.duplicates
    # every line: a delivery, a duplicate, or an envelope reject (typed rejects are on top of a delivery)
    envelope_rejects = sum(1 for r in hooks.rejects if not r.reason.startswith(tuple(_typed_prefixes())))
    assert hooks.deliveries + hooks.duplicates + envelope_rejects == web.records

    ci = ingest_ci_results_day(archive, lake, DAY)
    check(days["ci-results"], ci.rejects, {"ci_result": ci.rows})
    assert ci.rows + len(ci.rejects) == days["ci-results"].records

    runs = ingest_test_run_day(archive, lake, DAY)
    reports, jsonl = days["test-reports"], days["test-runs"]
    check(jsonl, runs.rejects["test-runs"], None)  # one table for both: rows are counted together below
    check(reports, runs.rejects["test-reports"], None)
    assert runs.rows == jsonl.expected_rows["test_run"] + reports.expected_rows["test_run"], f"seed {SEED}"

    hostile = sum(d.hostile for d in days.values())
    assert hostile >= 10_000, hostile
    elapsed = time.monotonic() - started
    print(f"\nfuzz seed {SEED}: {sum(d.records for d in days.values())} records, {hostile} hostile, "
          f"{sum(sum(d.expected_rejects.values()) for d in days.values())} rejects, {elapsed:.1f}s")


def _typed_prefixes():
    return ("workflow_job:", "workflow_run:", "push:", "pull_request:")


def test_the_generator_is_deterministic_and_its_verdicts_are_not_all_alike():
    a, b = webhook_day(3, 500, MAX_LINE), webhook_day(3, 500, MAX_LINE)
    assert a.files == b.files and a.expected_rejects == b.expected_rejects
    assert webhook_day(4, 500, MAX_LINE).files != a.files
    for day in (a, ci_results_day(3, 500, MAX_LINE), runs_jsonl_day(3, 500, MAX_LINE), junit_day(3, 500, MAX_LINE)):
        rejected = sum(day.expected_rejects.values())
        assert 0.2 * day.records < rejected < 0.8 * day.records, (day.source, rejected, day.records)


def test_the_two_process_webhook_scan_accounts_for_hostile_lines_alike(tmp_path, capped):
    """Large days are scanned in runs of consecutive files, one process each: every verdict must
    be the contract's still, a redelivery in a later run of a delivery an earlier one kept included."""
    day = webhook_day(SEED + 4, 3000, MAX_LINE)
    archive = Store(str(tmp_path / "archive"))
    day.write(archive.root)
    report = ingest_webhook_day(archive, Lake.at(str(tmp_path / "lake")), DAY, workers=2)
    check(day, report.rejects, {**report.rows, "webhook_events": report.deliveries})


@pytest.mark.parametrize("encoding, why", [
    (b"Shift_JIS", "multi-byte encodings are not supported"), (b"UTF-7", "multi-byte encodings are not supported"),
    (b"UTF-32", "multi-byte encodings are not supported"), (b"x-klingon", "unknown encoding: x-klingon"),
    (b"rot13", "'rot13' is not a text encoding"),
])
def test_a_report_declaring_an_encoding_expat_cannot_use_is_a_malformed_reject(tmp_path, encoding, why):
    """expat hands an encoding it lacks to Python's codecs, whose refusal is not an ExpatError."""
    reports = tmp_path / "archive" / "test-reports" / f"day={DAY}" / "100" / "1"
    for job, data in (("200", b'<?xml version="1.0" encoding="' + encoding + b'"?><testsuite/>'),
                      ("201", b'<testsuite><testcase classname="TestA" name="test_ok" time="1"/></testsuite>')):
        (reports / job).mkdir(parents=True)
        (reports / job / "r.xml").write_bytes(data)
    report = ingest_test_run_day(Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "lake")), DAY)
    assert report.rows == 1
    [reject] = report.rejects["test-reports"]
    assert reject.location == f"test-reports/day={DAY}/100/1/200/r.xml:1:31"  # at the encoding's name
    assert reject.reason.startswith(f"malformed: declared encoding cannot be read: {why}")


def test_an_envelope_naming_payload_twice_keeps_json_in_bronze_the_payload_the_typed_rows_used(tmp_path):
    """orjson keeps the last key of a name; the bronze text is sliced from the archived line, which
    must not start at the first "payload" and run over the second."""
    head = b'{"event":"push","delivery_id":"%s","received_at":"2026-11-01T10:00:00Z",'
    lines = [
        head % b"twice" + b'"payload":{"ref":"decoy"},"payload":{"ref":"refs/heads/main"}}',
        head % b"nested" + b'"payload": {"ref":"refs/heads/main", "deployment":{"payload":{}}}}',  # one key
    ]
    folder = tmp_path / "archive" / "webhooks" / f"day={DAY}"
    folder.mkdir(parents=True)
    (folder / "a.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    lake = Lake.at(str(tmp_path / "lake"))
    report = ingest_webhook_day(Store(str(tmp_path / "archive")), lake, DAY, workers=1)
    assert report.deliveries == 2 and report.rows["push"] == 2
    con = connect()
    lake.register(con, "webhook_events", [DAY], name="e")
    stored = dict(con.execute("SELECT delivery_id, payload FROM e").fetchall())
    assert {d: orjson.loads(text)["ref"] for d, text in stored.items()} == dict.fromkeys(stored, "refs/heads/main")
    assert stored["nested"] == '{"ref":"refs/heads/main", "deployment":{"payload":{}}}'  # verbatim, not re-serialized
