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

import orjson
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


# ---- ci-results: callbacks staged in bounded batches, reduced from Parquet ------------------------

# The peak is the process's VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the parent
# across fork and exec, so a child started by a large test process would start at the parent's peak.
CI_RESULTS_PEAK = """
import re, sys
from resources.lake import Lake
from resources.storage import Store
from torchci_assets.ingest.ci_results import ingest_ci_results_day
def peak_kib():
    with open("/proc/self/status") as f:
        return int(re.search(r"VmHWM:\\s+(\\d+) kB", f.read()).group(1))
before = peak_kib()
report = ingest_ci_results_day(Store(sys.argv[1]), Lake.at(sys.argv[2]), sys.argv[3], now_ms=1795000000000,
                               incremental=sys.argv[4] == "refresh")
print(report.rows, len(report.rejects), (peak_kib() - before) // 1024, report.rejects[0].reason if report.rejects else "")
"""


def _callback(i: int, chars: int, job_chars: int | None = None) -> bytes:
    """A valid callback but for its size: every text the lake keeps (ten of them) `chars` long, the
    job name `job_chars` if given; a job of its own (the same `i`, the same job)."""
    def text(tag: str) -> str:
        return f"{tag}{i}-".ljust(chars, tag[0])

    workflow = {"status": "completed", "conclusion": text("conclusion"), "run_id": i, "run_attempt": 1,
                "name": text("workflow"), "job_name": text("job") if job_chars is None else "j" * job_chars,
                "check_run_id": text("check"), "url": text("url"), "artifact_url": text("artifact"),
                "completed_at": "2026-11-01T10:00:00Z"}
    return orjson.dumps({
        "trusted": {"verified_repo": "org/backend", "downstream_repo_level": text("level")},
        "received_at": "2026-11-01T10:00:00Z",
        "untrusted": {"callback_payload": {"event_type": text("event"), "delivery_id": text("delivery"),
                                           "payload": {"head_sha": text("sha")}, "workflow": workflow}}})


def _ci_results_peak(root: Path, lines: list[bytes], mode: str = "rebuild") -> tuple[int, int, int, str]:
    """(rows, rejects, MiB of peak RSS over the start, first reject's reason) of ingesting `lines` as
    one more file of the day, in a fresh process, with a 2 MiB line cap."""
    rel = f"ci-results/day={DAY}/relay-{mode}.jsonl.gz"
    (root / "archive" / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / "archive" / rel).write_bytes(gzip.compress(b"\n".join(lines) + b"\n", compresslevel=1))
    env = {**os.environ, "TORCHCI_MAX_LINE_BYTES": str(2 * MiB)}
    env.pop("TORCHCI_DUCKDB_MEMORY", None)  # the default, 512 MB
    done = subprocess.run([sys.executable, "-c", CI_RESULTS_PEAK, str(root / "archive"), str(root / "lake"), DAY, mode],
                          capture_output=True, text=True, env=env, cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    rows, rejects, peak, reason = done.stdout.rstrip("\n").split(" ", 3)
    return int(rows), int(rejects), int(peak), reason


def test_ci_results_memory_is_bounded_by_the_caps_not_by_the_day(tmp_path):
    """r6 D2: every parsed callback of the day was held in Python, as dicts then Arrow tables, a
    refresh read the earlier increments' whole, and no callback text was capped.
    - A 1 MiB job name (under the line cap) is a reject naming the field: 150 such lines cost what
      10 do (they cost ~5 MiB of peak each).
    - A day of callbacks whose ten kept texts are each just under the 4,096-character cap (~40 KB a
      line, 120 MB for 3,000) is staged in batches bounded by text and reduced by DuckDB from the
      Parquet files: the peak is DuckDB's working memory (under TORCHCI_DUCKDB_MEMORY, past which
      it fails rather than grows) and one batch, about half what it was, and a refresh over the
      3,000 staged callbacks costs no more."""
    few = _ci_results_peak(tmp_path / "few", [_callback(i, 10, job_chars=MiB) for i in range(10)])
    many = _ci_results_peak(tmp_path / "many", [_callback(i, 10, job_chars=MiB) for i in range(150)])
    print(f"\nci-results, 1 MiB job names: 10 lines {few[:3]}, 150 lines {many[:3]} (rows, rejects, MiB over the start)")
    assert (few[:2], many[:2]) == ((0, 10), (0, 150))
    assert many[3] == "too long: untrusted.callback_payload.workflow.job_name is 1048576 characters, more than 4096"
    assert many[2] - few[2] < 64, f"peak grew by {many[2] - few[2]} MiB for 140 more lines of 1 MiB"

    day = _ci_results_peak(tmp_path / "day", [_callback(i, 4000) for i in range(3000)])
    refresh = _ci_results_peak(tmp_path / "day", [_callback(i, 4000) for i in range(100)], mode="refresh")
    print(f"ci-results, ~40 KB callbacks: 3,000 lines {day[:3]}, then a refresh of 100 {refresh[:3]}")
    assert (day[:2], refresh[:2]) == ((3000, 0), (3000, 0))  # the refresh's are redeliveries: one row a job
    assert day[2] < 640, f"3,000 callbacks of ~40 KB peaked {day[2]} MiB over the start"
    assert refresh[2] < 640, f"a refresh over 3,000 staged callbacks of ~40 KB peaked {refresh[2]} MiB"


def test_ci_results_reduction_fits_a_duckdb_limit_far_below_the_days_callbacks(tmp_path, monkeypatch):
    """A day of 3,000 callbacks of ~40 KB (the ten kept texts just under the cap; 120 MB of texts),
    1,000 of its 2,000 jobs reported twice, reduced on one DuckDB thread under a 96 MB limit.
    Choosing each job's callback with a window over the full rows, then sorting them, held every
    callback's texts at once and failed with DuckDB's out-of-memory error; the rows kept are now
    chosen from fixed-width columns and read back, and sorted in bounded runs."""
    import pyarrow.parquet as pq

    from resources import lake as lake_module
    from torchci_assets.ingest.ci_results import ingest_ci_results_day

    lines = [_callback(i, 4000) for i in range(2000)] + [_callback(i, 4000) for i in range(0, 2000, 2)]
    rel = f"ci-results/day={DAY}/relay.jsonl.gz"
    (tmp_path / "archive" / rel).parent.mkdir(parents=True)
    (tmp_path / "archive" / rel).write_bytes(gzip.compress(b"\n".join(lines) + b"\n", compresslevel=1))
    monkeypatch.setenv("TORCHCI_DUCKDB_MEMORY", "96MB")
    monkeypatch.setattr(lake_module, "_RUN_THREADS", 1)
    report = ingest_ci_results_day(Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "lake")), DAY,
                                   now_ms=1795000000000)
    assert (report.callbacks, report.rows, report.rejects) == (3000, 2000, [])
    written = pq.read_table(tmp_path / "lake" / "ci_result" / f"day={DAY}" / "data.parquet",
                            columns=["run_id", "callbacks"])
    got = list(zip(*(written.column(c).to_pylist() for c in ("run_id", "callbacks"))))  # in the file's order
    assert got == sorted([(i, 1 + (i % 2 == 0)) for i in range(2000)], key=lambda r: f"delivery{r[0]}-")
