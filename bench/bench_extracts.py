"""What naming a window's per-file extracts costs a refresh (`resources.lake_extracts`), on the
local disk and on a local S3 server (moto, on 127.0.0.1), with and without the index that keeps
each settled source file's extract name by its listed version.

A 14-day window of `test_results` (20 files a day, as a day's compacted parts) is read through the
disabled tests' rerun extract, as `disabled_issues` reads it at every refresh. "footers read" is
the code before the index (every source file's footer is opened to name its extract: the index is
kept empty by treating no file as settled); "index" is the code now. Each figure is the median of
three passes after a first pass that made the extracts.

    python bench/bench_extracts.py [--days 14] [--files 20] [--rows 5000]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import pyarrow as pa

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from resources import lake_extracts  # noqa: E402
from resources.lake import Lake  # noqa: E402
from torchci_assets.derived.flakiness.reenable import RERUN_RESULTS  # noqa: E402

BUCKET = "bench-extracts"


def part(day_index: int, file_index: int, rows: int) -> pa.Table:
    """Rows shaped as test_results', a few of them from rerun_disabled_tests jobs."""
    n = range(rows)
    return pa.table({
        "name": [f"test_{day_index}_{file_index}_{i}" for i in n],
        "classname": ["TestThing"] * rows,
        "platform": ["linux"] * rows,
        "job_id": [day_index * 10_000_000 + file_index * 100_000 + i for i in n],
        "job_completed_at": [dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)] * rows,
        "job_name": ["linux / test (rerun_disabled_tests, 1, 1)" if i % 500 == 0 else "linux / test (default, 1, 3)" for i in n],
        "infra_suspect": [False] * rows,
        "status": ["failed" if i % 7 == 0 else "passed" for i in n],
        "message": [""] * rows,
    })


def build(lake: Lake, days: list[str], files: int, rows: int) -> None:
    for d, day in enumerate(days):
        for f in range(files):
            lake.write("test_results", day, part(d, f, rows), part=f"data-b{f:03d}")


def passes(lake: Lake, days: list[str], settled_s: int) -> tuple[float, float]:
    """(median CPU-s, median wall s) of naming the window's extracts, three passes."""
    lake_extracts.SETTLED_S = settled_s
    cpu, wall = [], []
    for _ in range(3):
        c0, w0 = time.process_time(), time.perf_counter()
        for day in days:
            lake_extracts.day_extracts(lake, RERUN_RESULTS, day)
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return statistics.median(cpu), statistics.median(wall)


def measure(label: str, lake: Lake, days: list[str], args) -> None:
    t0 = time.perf_counter()
    build(lake, days, args.files, args.rows)
    time.sleep(2)  # every file older than the 1 s settle time used below
    lake_extracts.SETTLED_S = 1
    for day in days:
        lake_extracts.day_extracts(lake, RERUN_RESULTS, day)  # makes the extracts, and the index
    print(f"{label}: {len(days)} days x {args.files} files built and extracted in {time.perf_counter() - t0:.0f} s", flush=True)
    before = passes(lake, days, 10**9)  # nothing settled: the index vouches for nothing
    after = passes(lake, days, 1)
    print(f"  footers read (before): {before[0]:.3f} CPU-s  {before[1]:.3f} s", flush=True)
    print(f"  index (now):           {after[0]:.3f} CPU-s  {after[1]:.3f} s", flush=True)


def moto() -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    os.environ.update({"TORCHCI_S3_ENDPOINT": endpoint, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                       "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"})
    for _ in range(100):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.1)
    import pyarrow.fs as pafs

    from resources.storage import s3_options
    pafs.S3FileSystem(**s3_options(), allow_bucket_creation=True).create_dir(BUCKET)
    return proc, endpoint


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--days", type=int, default=14)
    ap.add_argument("--files", type=int, default=20)
    ap.add_argument("--rows", type=int, default=5000)
    args = ap.parse_args()
    days = [(dt.date(2026, 11, 14) - dt.timedelta(days=i)).isoformat() for i in range(args.days)]
    with tempfile.TemporaryDirectory(prefix="bench-extracts-") as tmp:
        measure("local disk", Lake.at(os.path.join(tmp, "lake")), days, args)
    proc, endpoint = moto()
    try:
        measure(f"S3 (moto at {endpoint})", Lake.at(f"s3://{BUCKET}/lake"), days, args)
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
