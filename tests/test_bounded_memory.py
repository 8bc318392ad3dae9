"""Memory is bounded by the caps, not by the input: a line, a gzip member or an XML token of
gigabytes is skipped as it streams by and rejected, never held.

The unit tests measure Python's own allocations (tracemalloc, deterministic); the last one runs
`torchci run` on an archive with a 1 GiB record in every source and measures the peak RSS of
that process as the kernel reports it. Memory is not a timing: a bound in a test is fine.
"""

import gzip
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from hostile import bomb_archive, _repeated_gzip
from resources.lake import Lake, connect
from resources.storage import Store
from torchci_assets.ingest.junit import ReportRejected
from torchci_assets.ingest.lines import CHUNK, inflate, iter_lines, max_line_bytes
from torchci_assets.ingest.reports import ingest_test_run_day

DAY = "2026-11-01"
MiB = 1 << 20


def test_inflate_never_returns_more_than_a_chunk_at_once():
    size = 300 * MiB  # 300 KB of gzip
    compressed = _repeated_gzip(b"", b"\0", size)
    assert len(compressed) < 1 * MiB
    total = 0
    for out in inflate([compressed]):  # all of it in one input chunk: the worst case
        assert 0 < len(out) <= CHUNK
        total += len(out)
    assert total == size


def test_inflate_reads_members_and_reports_a_cut():
    data = gzip.compress(b"a\n") + gzip.compress(b"b\n" * 1000)
    assert b"".join(inflate([data[i:i + 7] for i in range(0, len(data), 7)])) == b"a\n" + b"b\n" * 1000
    with pytest.raises(OSError, match="ends before"):
        list(inflate([data[:-10]]))


@pytest.mark.parametrize("seed", range(20))
def test_inflate_gives_back_exactly_the_bytes_whatever_the_chunking(monkeypatch, seed):
    """With a tiny output chunk, every path of the loop runs: output left inside the inflater,
    input left over, a member ending mid-chunk."""
    import random

    from torchci_assets.ingest import lines

    monkeypatch.setattr(lines, "CHUNK", 997)
    rng = random.Random(seed)
    members = [rng.choice([b"\0" * rng.randrange(50_000), rng.randbytes(rng.randrange(5000)), b"ab\n" * 3000])
               for _ in range(rng.randrange(1, 5))]
    data = b"".join(gzip.compress(m, compresslevel=rng.choice([1, 9])) for m in members)
    pieces, i = [], 0
    while i < len(data):
        step = rng.choice([1, 7, 100, 4096, len(data)])
        pieces.append(data[i:i + step])
        i += step
    out = list(lines.inflate(pieces))
    assert b"".join(out) == b"".join(members)
    assert all(len(o) <= 997 for o in out)


def test_a_line_over_the_cap_is_rejected_without_ever_being_held(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHCI_MAX_LINE_BYTES", str(1 * MiB))
    rel = f"webhooks/day={DAY}/bomb.jsonl.gz"
    (tmp_path / rel).parent.mkdir(parents=True)
    (tmp_path / rel).write_bytes(_repeated_gzip(b'{"first": 1}\n', b"\0", 256 * MiB, b'\n{"after": 2}\n'))
    rejects = []
    tracemalloc.start()
    try:
        lines = list(iter_lines(Store(str(tmp_path)), rel, "webhooks", rejects))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert lines == [(1, b'{"first": 1}'), (3, b'{"after": 2}')]
    assert [(r.location, r.sample) for r in rejects] == [(f"{rel}:2", None)]
    assert rejects[0].reason.startswith("line longer than 1048576 bytes (TORCHCI_MAX_LINE_BYTES)")
    # A few decompressed chunks in flight (the read-ahead queue), never the 256 MiB line.
    assert peak < 6 * CHUNK, f"peak {peak / MiB:.0f} MiB"


def test_the_line_cap_is_configurable_and_checked(monkeypatch):
    assert max_line_bytes() == 32 * MiB  # above GitHub's 25 MB payload cap, with the envelope
    monkeypatch.setenv("TORCHCI_MAX_LINE_BYTES", "100")
    with pytest.raises(ValueError, match="too small"):
        max_line_bytes()
    monkeypatch.setenv("TORCHCI_MAX_LINE_BYTES", "lots")
    with pytest.raises(ValueError, match="not a number"):
        max_line_bytes()


def test_a_report_cap_counts_decompressed_bytes_through_the_archive(tmp_path, monkeypatch):
    """A 600 MiB report in under a MiB of gzip, read the way the ingest reads it (the store's gzip
    stream): rejected once 64 MiB of XML were read, whatever the compressed size."""
    monkeypatch.setenv("TORCHCI_MAX_REPORT_BYTES", str(64 * MiB))
    rel = f"test-reports/day={DAY}/1/1/1/r.xml.gz"
    (tmp_path / rel).parent.mkdir(parents=True)
    (tmp_path / rel).write_bytes(_repeated_gzip(b'<testsuite><testcase name="t"><system-out>', b" ", 600 * MiB,
                                                b"</system-out></testcase></testsuite>"))
    assert (tmp_path / rel).stat().st_size < 1 * MiB
    report = ingest_test_run_day(Store(str(tmp_path)), Lake.at(str(tmp_path / "lake")), DAY)
    [reject] = report.rejects["test-reports"]
    assert reject.reason == "too-large: more than 67108864 bytes decompressed (TORCHCI_MAX_REPORT_BYTES)"


def test_one_xml_token_over_the_cap_rejects_the_report_at_the_cap(monkeypatch):
    """Expat must hold a tag whole: a 64 MiB attribute is refused once the cap is passed."""
    import io

    from torchci_assets.ingest.junit import parse_junit

    monkeypatch.setenv("TORCHCI_MAX_LINE_BYTES", str(4 * MiB))

    class Stream(io.RawIOBase):
        def __init__(self, head, size):
            self.head, self.left, self.read_bytes = head, size, 0

        def read(self, n=-1):
            if self.head:
                out, self.head = self.head, b""
            else:
                out = b"A" * min(n, self.left)
                self.left -= len(out)
            self.read_bytes += len(out)
            return out

    stream = Stream(b'<testsuite><testcase name="', 64 * MiB)
    with pytest.raises(ReportRejected) as info:
        list(parse_junit(stream, workflow_id=1, run_attempt=1, job_id=1))
    assert info.value.code == "too-large" and "one XML token" in info.value.detail
    assert stream.read_bytes <= 4 * MiB + 2 * MiB  # stopped at the cap, plus at most one read
    # a big but legal token passes
    ok = b'<testsuite><testcase name="t" time="1"><failure message="' + b"m" * (2 * MiB) + b'"/></testcase></testsuite>'
    [batch] = list(parse_junit(io.BytesIO(ok), workflow_id=1, run_attempt=1, job_id=1))
    assert [r["status"] for r in batch.rows] == ["failed"]


def test_torchci_run_on_gigabyte_records_stays_under_1_5_gb_peak_rss(tmp_path):
    """The issue's case: a .jsonl.gz of NUL bytes compressed as one "line" (here 1 GiB in every
    source: webhooks, ci-results, test-runs, and a 1 GiB attribute in a JUnit report). The whole
    `torchci run` process, Dagster included, must stay under 1.5 GB; `bench/bench_memory.py`
    measures the 2 GiB case."""
    bombs = bomb_archive(tmp_path / "archive", 1 << 30)
    env = {**os.environ, "TORCHCI_ARCHIVE_URI": str(tmp_path / "archive"), "TORCHCI_LAKE_URI": str(tmp_path / "lake"),
           "TORCHCI_OUTPUTS_URI": str(tmp_path / "outputs"), "DAGSTER_HOME": str(tmp_path / "dagster")}
    env.pop("TORCHCI_MAX_LINE_BYTES", None)  # the defaults
    env.pop("TORCHCI_MAX_REPORT_BYTES", None)
    (tmp_path / "dagster").mkdir()
    proc = subprocess.Popen([str(Path(sys.executable).parent / "torchci"), "run"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output = proc.stdout.read().decode()
    _, _, usage = os.wait4(proc.pid, 0)
    peak_mb = usage.ru_maxrss / 1024  # KiB on Linux
    print(f"\ntorchci run, 1 GiB records in 4 sources: peak RSS {peak_mb:.0f} MiB")
    assert peak_mb < 1500, output[-3000:]
    # Each bomb is one reject; the records around them are kept.
    con = connect()
    lake = Lake.at(str(tmp_path / "lake"))
    for table in ("rejects", "push", "ci_result", "test_run"):
        assert lake.register(con, table, [DAY]), (table, output[-3000:])
    rejects = dict(con.execute("SELECT location, reason FROM rejects").fetchall())
    assert rejects[f"{bombs['webhooks']}:2"].startswith("line longer than 33554432 bytes")
    assert rejects[f"{bombs['ci-results']}:2"].startswith("line longer than 33554432 bytes")
    assert rejects[bombs["test-runs"]].startswith("too-large: more than 536870912 bytes decompressed")
    assert "one XML token" in next(r for loc, r in rejects.items() if loc.startswith(bombs["test-reports"]))
    assert con.execute("SELECT count(*) FROM push").fetchone() == (2,)  # before and after the bomb
    assert con.execute("SELECT count(*) FROM ci_result").fetchone() == (1,)
    assert con.execute("SELECT name FROM test_run").fetchall() == [("test_fine",)]
