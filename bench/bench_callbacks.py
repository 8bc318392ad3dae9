"""`make bench-callbacks`: a day of downstream CI callbacks, `ingest_ci_results_day` in a fresh process.

Two days, each ingested in a fresh process per run (median of --runs):
- hostile: N callbacks of ~40 KB (every text the lake keeps near the 4,096-character cap: the
  test generator's `_callback`), a job each, at each DuckDB memory limit of --limits: the peak RSS
  (the kernel's VmHWM of that process) and whether it fitted; it must not grow with N;
- realistic: --jobs jobs, each sending queued/in_progress/completed callbacks of ~1 KB (some
  twice), as a relay's backends do: the CPU seconds and peak RSS of the ingest.

Usage: python bench/bench_callbacks.py [--hostile 6000] [--limits 512MB 128MB] [--jobs 20000] [--runs 3]
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from test_bounded_memory import DAY, _callback  # noqa: E402  (the test's callback: one definition)

BENCH = Path(os.environ.get("TORCHCI_BENCH_DIR", ROOT / "var" / "bench-callbacks"))

CHILD = r"""
import re, resource, sys
from resources.lake import Lake
from resources.storage import Store
from torchci_assets.ingest.ci_results import ingest_ci_results_day
archive, lake, day = sys.argv[1:4]
try:
    report = ingest_ci_results_day(Store(archive), Lake.at(lake), day, now_ms=1795000000000)
    outcome = f"{report.rows} rows"
except Exception as exc:  # DuckDB's OutOfMemoryException is what a limit too small gives
    outcome = type(exc).__name__
usage = resource.getrusage(resource.RUSAGE_SELF)
peak = int(re.search(r"VmHWM:\s+(\d+) kB", open("/proc/self/status").read()).group(1)) // 1024
print(f"{outcome}\t{peak}\t{usage.ru_utime + usage.ru_stime:.2f}")
"""


def realistic_line(job: int, state: str, copy: int) -> bytes:
    """One callback of a backend's job as the relay forwards it (about 1 KB)."""
    workflow = {"status": state, "conclusion": "success" if state == "completed" else None, "run_id": 900_000 + job // 8,
                "run_attempt": 1, "name": "xpu-ci", "job_name": f"test (default, {job % 8 + 1}, 8, linux.xpu)",
                "check_run_id": str(70_000_000 + job), "url": f"https://github.com/org/backend/actions/runs/{job}",
                "started_at": "2026-11-01T10:00:00Z" if state != "queued" else None,
                "completed_at": "2026-11-01T10:40:00Z" if state == "completed" else None}
    return orjson.dumps({
        "trusted": {"verified_repo": f"org/backend-{job % 4}", "downstream_repo_level": "L3"},
        "received_at": f"2026-11-01T1{job % 10}:{copy:02d}:00Z",
        "untrusted": {"callback_payload": {"event_type": "pytorch-ci", "delivery_id": f"d-{job // 8}",
                                           "payload": {"head_sha": f"{job // 8:040x}", "note": "x" * 400},
                                           "workflow": workflow}}})


def write_day(folder: Path, lines) -> int:
    path = folder / "archive" / f"ci-results/day={DAY}/relay.jsonl.gz"
    shutil.rmtree(folder, ignore_errors=True)
    path.parent.mkdir(parents=True)
    data = b"\n".join(lines) + b"\n"
    path.write_bytes(gzip.compress(data, compresslevel=1))
    return len(data)


def ingest(folder: Path, limit: str | None) -> tuple[str, int, float]:
    shutil.rmtree(folder / "lake", ignore_errors=True)
    env = {**os.environ, "TORCHCI_MAX_LINE_BYTES": str(2 << 20), "PYTHONPATH": str(ROOT)}
    if limit:
        env["TORCHCI_DUCKDB_MEMORY"] = limit
    done = subprocess.run([sys.executable, "-c", CHILD, str(folder / "archive"), str(folder / "lake"), DAY],
                          capture_output=True, text=True, env=env, cwd=ROOT)
    if done.returncode:
        return f"exit {done.returncode}: {done.stderr.strip()[-200:]}", 0, 0.0
    outcome, peak, cpu = done.stdout.strip().splitlines()[-1].split("\t")
    return outcome, int(peak), float(cpu)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hostile", type=int, default=6000)
    p.add_argument("--limits", nargs="+", default=["512MB", "128MB"])
    p.add_argument("--jobs", type=int, default=20000)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    size = write_day(BENCH / "hostile", (_callback(i, 4000) for i in range(args.hostile)))
    print(f"hostile day: {args.hostile} callbacks of ~40 KB ({size / 1e6:.0f} MB of JSON)")
    for limit in args.limits:
        runs = [ingest(BENCH / "hostile", limit) for _ in range(args.runs)]
        print(f"  TORCHCI_DUCKDB_MEMORY={limit:6} {runs[0][0]:22} peak RSS median "
              f"{statistics.median(r[1] for r in runs)} MiB, CPU {statistics.median(r[2] for r in runs):.1f} s")
    lines = [realistic_line(j, s, c) for j in range(args.jobs) for s in ("queued", "in_progress", "completed")
             for c in range(1 + (j % 5 == 0))]
    size = write_day(BENCH / "realistic", lines)
    runs = [ingest(BENCH / "realistic", None) for _ in range(args.runs)]
    print(f"realistic day: {args.jobs} jobs, {len(lines)} callbacks of ~1 KB ({size / 1e6:.0f} MB): {runs[0][0]}, "
          f"CPU median {statistics.median(r[2] for r in runs):.2f} s, peak RSS median "
          f"{statistics.median(r[1] for r in runs)} MiB")
    shutil.rmtree(BENCH, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
