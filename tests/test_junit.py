"""JUnit XML report parsing: dialects, real pytest output, and hostile or broken reports."""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pyarrow as pa
import pytest

from torchci_assets.ingest.junit import (
    MESSAGE_MAX_CHARS,
    READ_CHUNK_BYTES,
    TEST_RUN_SCHEMA,
    ReportRejected,
    normalise_test_identity,
    parse_junit,
    parse_report_path,
)

DATA = Path(__file__).parent / "data" / "junit"
IDS = {"workflow_id": 9001, "run_attempt": 1, "job_id": 5001}


def parsed(source: bytes | Path | io.IOBase, **kwargs) -> tuple[list[dict], list[dict]]:
    """(rows, rejected test cases) of one report."""
    if isinstance(source, Path):
        source = source.read_bytes()
    stream = io.BytesIO(source) if isinstance(source, bytes) else source
    batches = list(parse_junit(stream, **{**IDS, **kwargs}))
    return [row for b in batches for row in b.rows], [r for b in batches for r in b.rejects]


def rows_of(source: bytes | Path | io.IOBase, **kwargs) -> list[dict]:
    rows, rejects = parsed(source, **kwargs)
    assert rejects == []
    return rows


def by_name(rows: list[dict]) -> dict[str, dict]:
    names = [row["name"] for row in rows]
    assert len(names) == len(set(names)), names
    return {row["name"]: row for row in rows}


def rejected(source: bytes | io.IOBase, **kwargs) -> ReportRejected:
    with pytest.raises(ReportRejected) as info:
        rows_of(source, **kwargs)
    return info.value


def report(*testcases: str) -> bytes:
    body = "".join(testcases)
    return f'<testsuites><testsuite name="pytest">{body}</testsuite></testsuites>'.encode()


class GeneratedStream:
    """A binary stream that produces its bytes on demand, so tests can feed huge reports."""

    def __init__(self, pieces):
        self._pieces = iter(pieces)
        self._buffer = bytearray()
        self.bytes_read = 0

    def read(self, n: int) -> bytes:
        while len(self._buffer) < n:
            piece = next(self._pieces, None)
            if piece is None:
                break
            self._buffer += piece
        out = bytes(self._buffer[:n])
        del self._buffer[:n]
        self.bytes_read += len(out)
        return out


# --- report paths -------------------------------------------------------------------


def test_report_path_gives_ids_and_invoking_file_with_its_subfolder():
    path = (
        "s3://ci-archive/prefix/test-reports/day=2026-11-01/16012345678/2/45123456789/"
        "test/test-reports/python-pytest/nn/test_convolution/nn.test_convolution-1f2e3d.xml.gz"
    )
    assert parse_report_path(path) == (16012345678, 2, 45123456789, "nn/test_convolution")


def test_report_path_without_pytorch_report_folder_has_no_invoking_file():
    assert parse_report_path("test-reports/day=2026-11-01/7/1/8/junit/TEST-org.example.CacheTest.xml") == (
        7, 1, 8, None,
    )
    assert parse_report_path("test-reports/day=2026-11-01/7/1/8/report.xml")[3] is None
    # A report directly under python-pytest/ names no module either.
    assert parse_report_path("test-reports/day=2026-11-01/7/1/8/test-reports/python-pytest/r.xml")[3] is None


def test_report_path_of_older_unittest_reports():
    path = "test-reports/day=2026-11-01/7/1/8/test/test-reports/python-unittest/test_nn/TEST-TestNN-20211101.xml"
    assert parse_report_path(path) == (7, 1, 8, "test_nn")


@pytest.mark.parametrize(
    "path",
    [
        "test-reports/day=2026-11-01/7/1/report.xml",  # no job id
        "test-reports/day=2026-11-01/7/1/8/report.json",
        "test-reports/day=2026-11/7/1/8/report.xml",
        "webhooks/day=2026-11-01/7/1/8/report.xml",
    ],
)
def test_report_path_outside_the_layout_is_rejected(path):
    with pytest.raises(ReportRejected) as info:
        parse_report_path(path)
    assert info.value.code == "bad-path"


# --- identity normalisation -------------------------------------------------------------


@pytest.mark.parametrize(
    "classname, file",
    [
        ("TestNN", "nn/test_convolution.py"),  # PyTorch's reports
        ("TestNN", "test/nn/test_convolution.py"),  # PyTorch style, rooted at the repo
        ("test.nn.test_convolution.TestNN", None),  # plain pytest, rootdir = repo
        ("nn.test_convolution.TestNN", None),  # plain pytest, rootdir = test/
        ("test.nn.test_convolution.TestNN", "test/nn/test_convolution.py"),  # pytest xunit1
        ("nn.test_convolution.TestNN", "nn/test_convolution.py"),
    ],
)
def test_every_dialect_spells_the_same_test_the_same_way(classname, file):
    assert normalise_test_identity(classname, file) == ("nn/test_convolution.py", "TestNN")


def test_identity_of_module_functions_nested_classes_and_unnamed_modules():
    assert normalise_test_identity("test_demo", None) == ("test_demo.py", "")
    assert normalise_test_identity("test_demo", "test_demo.py") == ("test_demo.py", "")
    assert normalise_test_identity("test.test_jit.TestOuter.TestInner", None) == ("test_jit.py", "TestOuter.TestInner")
    assert normalise_test_identity("TestNN", None, "test_nn") == ("test_nn.py", "TestNN")
    assert normalise_test_identity("TestNN", None) == ("", "TestNN")
    # A classname that does not start with the file's module is PyTorch's bare class.
    assert normalise_test_identity("TestJit", "jit/test_dce.py") == ("jit/test_dce.py", "TestJit")


# --- dialects -------------------------------------------------------------------------


def test_pytorch_style_report_with_rerun_elements():
    rows = by_name(rows_of(DATA / "pytorch_style.xml", invoking_file_hint="nn/test_convolution"))
    assert len(rows) == 6
    assert {(r["file"], r["invoking_file"], r["workflow_id"], r["workflow_run_attempt"], r["job_id"]) for r in rows.values()} == {
        ("nn/test_convolution.py", "nn/test_convolution", 9001, 1, 5001)
    }
    outcome = {name: (r["classname"], r["status"], r["rerun_count"], r["time"]) for name, r in rows.items()}
    assert outcome == {
        "test_conv_backcompat": ("TestConvolutionNN", "passed", 0, 0.012),
        "test_conv_flaky_cuda": ("TestConvolutionNN", "passed", 1, 1.5),
        "test_conv_broken_cuda": ("TestConvolutionNN", "failed", 2, 2.0),
        "test_conv_disabled": ("TestConvolutionNN", "skipped", 0, 0.0),
        "test_conv_setup_error": ("TestConvolutionNN", "error", 0, 0.008),
        "test_conv_empty_channel_cpu_float32": ("TestConvolutionNNDeviceTypeCPU", "passed", 0, 2.0),
    }
    assert rows["test_conv_backcompat"]["message"] is None
    # The first failed attempt's message, first line only.
    assert rows["test_conv_flaky_cuda"]["message"] == "AssertionError: Tensor-likes are not close!"
    assert rows["test_conv_broken_cuda"]["message"] == "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert rows["test_conv_setup_error"]["message"] == 'failed on setup with "OSError: [Errno 28] No space left on device"'
    assert rows["test_conv_disabled"]["message"].startswith(
        "Test is disabled because an issue exists disabling it: https://github.com/pytorch/pytorch/issues/12345"
    )


def test_message_is_the_first_nonblank_line_truncated():
    long_line = "E" * (MESSAGE_MAX_CHARS + 100)
    [row] = rows_of(report(f'<testcase classname="t" name="test_x"><failure message="  &#10;{long_line}&#10;second"/></testcase>'))
    assert row["message"] == "E" * MESSAGE_MAX_CHARS


def test_rows_load_into_the_test_run_schema():
    table = pa.Table.from_pylist(rows_of(DATA / "pytorch_style.xml"), schema=TEST_RUN_SCHEMA)
    assert table.num_rows == 6
    # Without a hint the invoking file is the test's own module.
    assert set(table.column("invoking_file").to_pylist()) == {"nn/test_convolution"}


def test_surefire_flaky_and_rerun_elements_and_bare_testsuite_root():
    rows = by_name(rows_of(DATA / "surefire.xml"))
    outcome = {name: (r["status"], r["rerun_count"], r["time"], r["message"]) for name, r in rows.items()}
    assert outcome == {
        "evictsOldest": ("passed", 0, 0.5, None),
        "survivesRestart": ("passed", 2, 3.25, "expected:<1> but was:<2>"),
        "loadsConfig": ("failed", 2, 1234.5, "config missing"),
        # No message attribute: the first non-blank line of its text, not its system-out.
        "connects": ("error", 1, 0.75, "java.net.ConnectException: connection refused"),
    }
    assert {r["classname"] for r in rows.values()} == {"CacheTest"}


def test_nested_suites_are_all_read_and_repeated_entries_become_attempts():
    rows = rows_of(DATA / "nested_suites.xml")
    keyed = {(r["file"], r["classname"], r["name"]): r for r in rows}
    assert len(rows) == len(keyed) == 3
    dce = keyed[("jit/test_dce.py", "TestDCE", "test_setattr_removed")]
    assert (dce["invoking_file"], dce["status"], dce["time"]) == ("jit/test_dce", "passed", 0.25)
    assert keyed[("test_jit.py", "TestScript", "test_direct_child")]["status"] == "skipped"
    # The same test in two suites of one report: two attempts, the last one final.
    twice = keyed[("test_jit.py", "TestScript", "test_pass")]
    assert (twice["status"], twice["rerun_count"], twice["time"]) == ("passed", 1, 1.0)


def test_repeated_entries_merge_wherever_they_are_and_keep_the_last_outcome():
    data = report(
        '<testcase classname="TestA" file="test_a.py" name="test_x" time="1.0"><failure message="boom 1"/></testcase>',
        '<testcase classname="TestA" file="test_a.py" name="test_y" time="0.5"/>',
        '<testcase classname="TestA" file="test_a.py" name="test_x" time="2.0"><skipped message="gave up"/></testcase>',
        '<testcase classname="TestB" file="test_a.py" name="test_x" time="4.0"/>',
    )
    rows = {(r["classname"], r["name"]): r for r in rows_of(data)}
    assert list(rows) == [("TestA", "test_x"), ("TestA", "test_y"), ("TestB", "test_x")]
    merged = rows[("TestA", "test_x")]
    assert (merged["status"], merged["rerun_count"], merged["time"], merged["message"]) == ("skipped", 1, 3.0, "boom 1")
    assert rows[("TestB", "test_x")]["rerun_count"] == 0


def test_failure_followed_by_teardown_error_is_one_attempt():
    failure = '<testcase classname="t" name="test_x" time="0.5"><failure message="AssertionError: body"/></testcase>'
    teardown = (
        '<testcase classname="t" name="test_x" time="0.25">'
        '<error message="failed on teardown with &quot;RuntimeError: td&quot;"/></testcase>'
    )
    [row] = rows_of(report(failure, teardown))
    assert (row["status"], row["rerun_count"], row["time"], row["message"]) == ("failed", 0, 0.75, "AssertionError: body")
    # A setup error after a failed attempt is a new attempt, not part of the old one.
    setup = teardown.replace("teardown", "setup")
    [row] = rows_of(report(failure, setup))
    assert (row["status"], row["rerun_count"]) == ("error", 1)


def test_failure_takes_precedence_over_error_and_skip_in_one_entry():
    [row] = rows_of(report(
        '<testcase classname="t" name="test_x" time="1"><skipped message="s"/><error message="e"/><failure message="f"/></testcase>'
    ))
    assert (row["status"], row["message"]) == ("failed", "f")


def test_batches_respect_batch_size():
    data = report(*(f'<testcase classname="t" name="test_{i}" time="0.1"/>' for i in range(5)))
    batches = list(parse_junit(io.BytesIO(data), **IDS, batch_size=2))
    assert [len(b.rows) for b in batches] == [2, 2, 1]
    assert [r["name"] for b in batches for r in b.rows] == [f"test_{i}" for i in range(5)]


def test_surefire_thousands_separator_only_in_its_own_format():
    ok = report('<testcase classname="t" name="test_x" time="12,345,678.25"/>')
    assert rows_of(ok)[0]["time"] == 12345678.25
    rows, [bad] = parsed(report('<testcase classname="t" name="test_x" time="1,5"/>'))
    assert rows == [] and bad["reason"].startswith("bad-time: test case 'test_x': time '1,5'")


# --- real pytest output ------------------------------------------------------------------

# The source of a tiny suite that real pytest runs in a subprocess; its skip marker is input
# data (pytest must write a <skipped> element for the parser), not a skipped test of ours.
GENERATED_SUITE = '''
import pathlib
import time

import pytest

COUNTER = pathlib.Path(__file__).with_name("flaky-attempts.txt")


def test_passes():
    time.sleep(0.05)


def test_fails():
    assert 1 + 1 == 3, "arithmetic is broken"


@pytest.mark.skip(reason="not on this platform")
def test_skipped():
    pass


@pytest.fixture
def broken_fixture():
    raise RuntimeError("fixture exploded")


def test_fixture_errors(broken_fixture):
    pass


def test_flaky():
    attempts = int(COUNTER.read_text()) if COUNTER.exists() else 0
    COUNTER.write_text(str(attempts + 1))
    time.sleep(0.02)
    assert attempts > 0, "first attempt fails"


@pytest.fixture
def teardown_fails():
    yield
    raise RuntimeError("teardown exploded")


def test_passes_then_teardown_errors(teardown_fails):
    pass


def test_fails_then_teardown_errors(teardown_fails):
    assert False, "body failed"


class TestGroup:
    def test_method(self):
        pass

    @pytest.mark.parametrize("x", [1, 2])
    def test_param(self, x):
        assert x
'''


def run_real_pytest(tmp_path: Path, *options: str) -> Path:
    """Run pytest on the generated suite; return the report where the archive would hold it."""
    (tmp_path / "test" / "nn").mkdir(parents=True)
    (tmp_path / "test" / "nn" / "test_generated.py").write_text(GENERATED_SUITE)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    report_path = (
        tmp_path / "archive" / "test-reports" / "day=2026-11-01" / "123" / "1" / "456"
        / "test" / "test-reports" / "python-pytest" / "nn" / "test_generated" / "nn.test_generated-0a1b.xml"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    result = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
            "--rootdir", str(tmp_path), "-c", str(tmp_path / "pytest.ini"),
            f"--junitxml={report_path}", *options, "test",
        ],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 1, result.stdout + result.stderr  # 1 = some tests failed
    return report_path


def ingest(report_path: Path) -> dict[str, dict]:
    workflow_id, attempt, job_id, invoking = parse_report_path(str(report_path))
    with report_path.open("rb") as stream:
        rows = [
            row
            for batch in parse_junit(stream, workflow_id=workflow_id, run_attempt=attempt, job_id=job_id, invoking_file_hint=invoking)
            for row in batch.rows
        ]
    assert {(r["workflow_id"], r["workflow_run_attempt"], r["job_id"], r["invoking_file"], r["file"]) for r in rows} == {
        (123, 1, 456, "nn/test_generated", "nn/test_generated.py")
    }
    return by_name(rows)


EXPECTED_IDENTITIES = {
    ("", "test_passes"), ("", "test_fails"), ("", "test_skipped"), ("", "test_fixture_errors"),
    ("", "test_flaky"), ("", "test_passes_then_teardown_errors"), ("", "test_fails_then_teardown_errors"),
    ("TestGroup", "test_method"), ("TestGroup", "test_param[1]"), ("TestGroup", "test_param[2]"),
}


def test_real_pytest_with_rerunfailures(tmp_path):
    rows = ingest(run_real_pytest(tmp_path, "-p", "rerunfailures", "--reruns", "2"))
    assert {(r["classname"], r["name"]) for r in rows.values()} == EXPECTED_IDENTITIES
    outcome = {name: (r["status"], r["rerun_count"]) for name, r in rows.items()}
    assert outcome == {
        "test_passes": ("passed", 0),
        "test_fails": ("failed", 2),
        "test_skipped": ("skipped", 0),
        "test_fixture_errors": ("error", 2),  # rerunfailures reruns setup errors too
        "test_flaky": ("passed", 1),
        "test_passes_then_teardown_errors": ("error", 2),
        "test_fails_then_teardown_errors": ("failed", 2),
        "test_method": ("passed", 0),
        "test_param[1]": ("passed", 0),
        "test_param[2]": ("passed", 0),
    }
    assert rows["test_fails"]["message"] == "AssertionError: arithmetic is broken"
    assert rows["test_fails_then_teardown_errors"]["message"] == "AssertionError: body failed"
    assert rows["test_skipped"]["message"] == "not on this platform"
    assert rows["test_fixture_errors"]["message"] == 'failed on setup with "RuntimeError: fixture exploded"'
    assert rows["test_passes_then_teardown_errors"]["message"].startswith("failed on teardown with")
    assert rows["test_passes"]["time"] >= 0.05
    assert rows["test_flaky"]["time"] >= 0.04  # both attempts


def test_real_pytest_xunit1_without_reruns(tmp_path):
    report_path = run_real_pytest(tmp_path, "-o", "junit_family=xunit1")
    assert b'file="test/nn/test_generated.py"' in report_path.read_bytes()
    rows = ingest(report_path)
    assert {(r["classname"], r["name"]) for r in rows.values()} == EXPECTED_IDENTITIES
    flaky = rows["test_flaky"]
    assert (flaky["status"], flaky["rerun_count"], flaky["message"]) == ("failed", 0, "AssertionError: first attempt fails")
    # pytest writes two entries (failure, then teardown error) for one attempt.
    double = rows["test_fails_then_teardown_errors"]
    assert (double["status"], double["rerun_count"], double["message"]) == ("failed", 0, "AssertionError: body failed")
    assert (rows["test_passes_then_teardown_errors"]["status"], rows["test_passes_then_teardown_errors"]["rerun_count"]) == ("error", 0)
    assert rows["test_fails"]["rerun_count"] == 0


# --- hostile and broken reports -------------------------------------------------------------


def test_billion_laughs_is_rejected_not_expanded():
    error = rejected((DATA / "billion_laughs.xml").read_bytes())
    assert error.code == "doctype"
    assert error.location.startswith("2:")


def test_external_entity_is_rejected_without_reading_the_file(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET")
    data = (
        f'<?xml version="1.0"?><!DOCTYPE t [<!ENTITY xxe SYSTEM "file://{secret}">]>'
        '<testsuite><testcase classname="t" name="test_x"><failure message="&xxe;">&xxe;</failure></testcase></testsuite>'
    ).encode()
    error = rejected(data)
    assert error.code == "doctype"
    assert "TOP-SECRET" not in str(error)
    # Even a DOCTYPE that only points at an external DTD is refused.
    assert rejected(b'<!DOCTYPE testsuite SYSTEM "http://127.0.0.1:9/x.dtd"><testsuite/>').code == "doctype"


def test_undeclared_entity_is_malformed():
    error = rejected(report('<testcase classname="t" name="test_x"><failure message="&boom;"/></testcase>'))
    assert error.code == "malformed"
    assert "undefined entity" in error.detail


def test_report_over_the_byte_limit_is_rejected_once_the_limit_is_crossed():
    def endless():
        yield b'<testsuites><testsuite name="pytest">'
        while True:
            yield b'<testcase classname="t" name="test_x" time="0.1"/>\n'

    stream = GeneratedStream(endless())
    error = rejected(stream, max_bytes=64 * 1024)
    assert error.code == "too-large"
    assert stream.bytes_read <= 64 * 1024 + READ_CHUNK_BYTES
    # The same kind of report under the limit is fine.
    small = report(*['<testcase classname="t" name="test_x" time="0.1"/>'] * 100)
    assert len(rows_of(small, max_bytes=64 * 1024)) == 1


def test_byte_limit_counts_decompressed_bytes():
    padded = report(f'<testcase classname="t" name="test_x"><system-out>{" " * 3_000_000}</system-out></testcase>')
    compressed = gzip.compress(padded)
    assert len(compressed) < 64 * 1024
    assert rejected(gzip.GzipFile(fileobj=io.BytesIO(compressed)), max_bytes=1_000_000).code == "too-large"


def test_truncated_xml_is_rejected_whole_at_every_cut():
    data = (DATA / "pytorch_style.xml").read_bytes()
    for cut in range(1, len(data) - 1, 97):
        stream = io.BytesIO(data[:cut])
        batches = parse_junit(stream, **IDS)
        with pytest.raises(ReportRejected) as info:
            next(batches)
        assert info.value.code == "truncated", cut


@pytest.mark.parametrize("opener", ["gzip", "pyarrow"])
def test_truncated_gzip_is_rejected(tmp_path, opener):
    compressed = gzip.compress((DATA / "pytorch_style.xml").read_bytes() * 3)
    path = tmp_path / "report.xml.gz"
    path.write_bytes(compressed[: len(compressed) // 2])
    stream = gzip.open(path) if opener == "gzip" else pa.input_stream(str(path), compression="gzip")
    error = rejected(stream)
    assert error.code == "truncated"


def test_corrupt_gzip_is_unreadable(tmp_path):
    path = tmp_path / "report.xml.gz"
    path.write_bytes(b"\x1f\x8b\x08\x00" + b"garbage" * 20)
    assert rejected(pa.input_stream(str(path), compression="gzip")).code == "unreadable"


@pytest.mark.parametrize(
    "data, code, detail",
    [
        (b"", "empty", "no bytes"),
        (b"<html><body>502 Bad Gateway</body></html>", "bad-root", "<html>"),
        (b"<testsuites><testsuite></testsuites>", "malformed", "mismatched tag"),
        (b"<testsuite/><testsuite/>", "malformed", "junk after document element"),
        (b"\x89PNG\r\n\x1a\n\x00\x00", "malformed", "not well-formed"),
        (report('<testcase classname="t" name="test_x"><testcase name="y"/></testcase>'), "malformed", "inside <testcase>"),
        (b"<testsuites>" + b"<testsuite>" * 100 + b"</testsuite>" * 100 + b"</testsuites>", "too-deep", "64"),
    ],
)
def test_broken_reports_have_clear_reasons(data, code, detail):
    error = rejected(data)
    assert error.code == code
    assert detail in error.detail
    assert error.as_reject("test-reports/day=2026-11-01/1/1/1/r.xml") == {
        "source": "test-reports/day=2026-11-01/1/1/1/r.xml",
        "location": "test-reports/day=2026-11-01/1/1/1/r.xml" + (f":{error.location}" if error.location else ""),
        "reason": f"{code}: {error.detail}",
        "sample": None,
    }


def test_malformed_report_says_where():
    error = rejected(b'<testsuites>\n<testsuite name="pytest">\n<testcase name="a"></testsuite>\n</testsuites>')
    assert (error.code, error.location) == ("malformed", "3:22")


@pytest.mark.parametrize("bad_case, code, detail", [
    ('<testcase classname="t" name="test_nan" time="NaN"/>', "bad-time", "test case 'test_nan': time 'NaN' is not a finite"),
    ('<testcase classname="t" name="test_inf" time="inf"/>', "bad-time", "not a finite"),
    ('<testcase classname="t" name="test_neg" time="-1.0"/>', "bad-time", "non-negative"),
    ('<testcase classname="t" name="test_word" time="fast"/>', "bad-time", "'fast' is not a number"),
    ('<testcase classname="t" name="test_huge" time="1e300"/>', "bad-time", "more than 1000000000 seconds"),
    ('<testcase classname="t" time="1"/>', "bad-testcase", "<testcase> without a name"),
    ('<testcase classname="t" name="" time="1"><failure message="boom"/></testcase>', "bad-testcase", "without a name"),
])
def test_one_bad_test_case_costs_only_its_test(bad_case, code, detail):
    data = ('<testsuites><testsuite name="pytest">\n'
            '<testcase classname="t" name="test_before" time="1.5"/>\n'
            f'{bad_case}\n'
            '<testcase classname="t" name="test_after" time="2"><failure message="real failure"/></testcase>\n'
            '</testsuite></testsuites>').encode()
    rows, [bad] = parsed(data, source_name="test-reports/day=2026-11-01/1/1/1/r.xml")
    assert [(r["name"], r["time"], r["status"]) for r in rows] == [("test_before", 1.5, "passed"),
                                                                  ("test_after", 2.0, "failed")]
    assert bad["reason"].startswith(f"{code}: ") and detail in bad["reason"]
    assert bad["location"].startswith("test-reports/day=2026-11-01/1/1/1/r.xml:3:")  # the bad case's line
    assert bad["sample"].startswith("<testcase ")


def test_a_rejected_attempt_drops_its_whole_test():
    # pytest-rerunfailures writes a failed attempt then the final one: without the final
    # (failing) attempt, the first would read as a pass. So the test goes, with a reject.
    data = report('<testcase classname="t" name="test_flaky" time="1"/>',
                  '<testcase classname="t" name="test_flaky" time="NaN"><failure message="still broken"/></testcase>',
                  '<testcase classname="t" name="test_ok" time="1"/>')
    rows, [bad] = parsed(data)
    assert [r["name"] for r in rows] == ["test_ok"]
    assert "test_flaky" in bad["reason"]


def test_testcase_limit():
    data = report(*(f'<testcase classname="t" name="test_{i}"/>' for i in range(11)))
    assert rejected(data, max_testcases=10).code == "too-many-testcases"
    assert len(rows_of(data, max_testcases=11)) == 11


def test_memory_does_not_grow_with_output_and_traceback_sizes():
    megabyte = b"x" * 1023 + b"\n"
    cases = 4

    def big_report():
        # Each test: a 12 MB traceback with no message attribute, and 4 MB of output.
        yield b'<testsuites><testsuite name="pytest">'
        for i in range(cases):
            yield f'<testcase classname="TestBig" name="test_{i}" time="1"><failure>'.encode()
            yield b"Traceback line one\n"
            yield from (megabyte for _ in range(12 * 1024))
            yield b"</failure><system-out>"
            yield from (megabyte for _ in range(4 * 1024))
            yield b"</system-out></testcase>"
        yield b"</testsuite></testsuites>"

    stream = GeneratedStream(big_report())
    tracemalloc.start()
    try:
        rows = rows_of(stream)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert stream.bytes_read > 64 * 1024 * 1024
    assert peak < 12 * 1024 * 1024, peak  # measured: about 6 MiB
    assert len(rows) == cases
    assert {r["message"] for r in rows} == {"Traceback line one"}
