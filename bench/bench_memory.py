"""`make bench-memory`: peak RSS of `torchci run` on an archive of memory bombs.

Each source holds one record of GIB gibibytes (default 2) between good records: a .jsonl.gz whose
"line" is that many NUL bytes (webhooks, ci-results, test-runs) and a JUnit report with an
attribute that long (`tests/hostile.py: bomb_archive`; a few MB of gzip on disk, built in about
a second). `torchci run` processes the day in a fresh process, several times (median reported),
and the peak RSS is the kernel's figure for that process (wait4). Target (issue 9): < 1.5 GB.

Usage: python bench/bench_memory.py [--gib 2] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from hostile import bomb_archive  # noqa: E402  (the test generator: one definition of a bomb)

BENCH = Path(os.environ.get("TORCHCI_BENCH_DIR", ROOT / "var" / "bench-memory"))
TARGET_MB = 1500


def run_once(env: dict) -> tuple[float, float, int]:
    shutil.rmtree(BENCH / "lake", ignore_errors=True)
    shutil.rmtree(BENCH / "outputs", ignore_errors=True)
    t = time.perf_counter()
    proc = subprocess.Popen([str(Path(sys.executable).parent / "torchci"), "run"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    return usage.ru_maxrss / 1024, time.perf_counter() - t, os.waitstatus_to_exitcode(status)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gib", type=float, default=2.0)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    size = int(args.gib * (1 << 30))
    shutil.rmtree(BENCH, ignore_errors=True)
    bomb_archive(BENCH / "archive", size)
    on_disk = sum(f.stat().st_size for f in (BENCH / "archive").rglob("*") if f.is_file())
    print(f"archive: one {args.gib:g} GiB record in each of 4 sources, {on_disk / 1e6:.1f} MB on disk")
    env = {**os.environ, "TORCHCI_ARCHIVE_URI": str(BENCH / "archive"), "TORCHCI_LAKE_URI": str(BENCH / "lake"),
           "TORCHCI_OUTPUTS_URI": str(BENCH / "outputs"), "DAGSTER_HOME": str(BENCH / "dagster")}
    (BENCH / "dagster").mkdir(parents=True, exist_ok=True)
    rss, wall = [], []
    for i in range(args.runs):
        peak, seconds, code = run_once(env)
        rss.append(peak)
        wall.append(seconds)
        print(f"  run {i + 1}: peak RSS {peak:.0f} MiB, {seconds:.1f} s (exit {code})")
    median = statistics.median(rss)
    print(f"torchci run, {args.gib:g} GiB records: peak RSS median {median:.0f} MiB "
          f"(target < {TARGET_MB} MB), wall median {statistics.median(wall):.1f} s")
    shutil.rmtree(BENCH, ignore_errors=True)
    return 0 if median < TARGET_MB else 1


if __name__ == "__main__":
    sys.exit(main())
