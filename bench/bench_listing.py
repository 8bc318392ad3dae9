"""What a refresh's cached listing of a day's test reports costs, with quiet subtrees trusted whole
(sealed) and without (every folder stat-ed): `python bench/bench_listing.py [--runs N ...]`.

The day is synthetic, shaped as CI uploads reports (run / attempt / job / test / test-reports /
module / file): by default 300 runs of 40 jobs of 5 modules, 60,000 reports in ~96,600 folders,
the size of the 300-pull-request day of `bench_freshness.py`. Every folder is older than SEAL_S
(the clock the walk reads is set past it), as a running day's earlier landings are. Each walk
starts from the last one's saved cache, as a refresh does, and must list what the first listed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from resources import listing_cache  # noqa: E402
from resources.listing_cache import ListingCache  # noqa: E402
from resources.storage import Store  # noqa: E402

SUFFIXES = (".xml",)


def build_day(root: str, runs: int, jobs: int, modules: int) -> None:
    for run in range(runs):
        for job in range(jobs):
            reports = f"{root}/day=D/{1000 + run}/1/{job}/test/test-reports"
            for module in range(modules):
                os.makedirs(f"{reports}/m{module}")
                with open(f"{reports}/m{module}/r.xml", "w") as f:
                    f.write("<testsuites/>")


def cached_walks(store: Store, seal: bool, reps: int) -> tuple[list[float], ListingCache, int]:
    """CPU-s of `reps` cached walks after a first one; the last walk's cache; the files listed."""
    later = time.time() + listing_cache.SEAL_S + 5
    cache = ListingCache.from_bytes(None, store.full(""), SUFFIXES, seal=seal, clock=lambda: later)
    first = store.list_files("day=D", SUFFIXES, cache)
    times = []
    for _ in range(reps):
        cache = ListingCache.from_bytes(cache.to_bytes(), store.full(""), SUFFIXES, seal=seal,
                                        clock=lambda: later + 10)  # within VERIFY_S: not a walk that verifies
        started = time.process_time()
        listed = store.list_files("day=D", SUFFIXES, cache)
        times.append(time.process_time() - started)
        if listed != first:
            raise SystemExit("a cached walk listed other files than the first walk")
    return times, cache, len(first)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--jobs", type=int, default=40, help="jobs per run")
    ap.add_argument("--modules", type=int, default=5, help="test modules (a folder and a report each) per job")
    ap.add_argument("--reps", type=int, default=5, help="cached walks timed per mode (the median is printed)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-listing-") as root:
        build_day(root, args.runs, args.jobs, args.modules)
        store = Store(root)
        for seal in (False, True):
            times, cache, files = cached_walks(store, seal, args.reps)
            print(f"{'sealed' if seal else 'every folder stat-ed'}: {files} files; folders read {cache.folders_read}, "
                  f"stat-ed unchanged {cache.folders_reused}, not stat-ed {cache.folders_unseen}; CPU-s per walk "
                  f"{' '.join(f'{t:.2f}' for t in times)}, median {statistics.median(times):.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
