"""A large day of webhooks scanned by several processes, each line read once.

The day's files are cut into runs of consecutive files (`file_runs`); run 0 is scanned in this
process, each later run in a spawned one (parsing holds the GIL: two cores need two processes).
A delivery is kept where it is first seen in file order, so a later run cannot know which of its
deliveries an earlier run kept until both are scanned: it holds its bronze rows in local Arrow
files (lz4, cheap to write), and `HeldFiles` writes each one to the lake without those copies as
soon as the earlier runs are scanned, while the later runs' scans or the reduction go on. Any
number of runs gives the same tables. `scan_day` is the whole of it.
"""

from __future__ import annotations

import glob
import multiprocessing
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import pyarrow as pa
import pyarrow.compute as pc

from resources.lake import Lake
from resources.storage import Store
from torchci_assets.ingest.commit import PartitionCommit
from torchci_assets.ingest.heap import large_blocks_kept
from torchci_assets.ingest.webhook_scan import BRONZE_OPTIONS, WEBHOOK_EVENTS_SCHEMA, RunScan, scan_run


SCAN_PROCESSES = 2


PARALLEL_MIN_BYTES = 64 << 20


def file_runs(files: list, workers: int) -> list[list]:
    """`files` cut into at most `workers` non-empty runs of consecutive files of about equal size."""
    total = sum(f.size for f in files) or 1
    runs: list[list] = [[]]
    done = 0
    for f in files:
        if runs[-1] and len(runs) < workers and done >= total * len(runs) / workers:
            runs.append([])
        runs[-1].append(f)
        done += f.size
    return runs


class Progress:
    """Logs how far the scans of a day got, every few seconds and at the end."""

    def __init__(self, log: Callable[[str], None], day: str, total: int):
        self.log, self.day, self.total, self.last = log, day, total, time.monotonic()

    def update(self, files_done: int, deliveries: int) -> None:
        if files_done == self.total or time.monotonic() - self.last > 5:
            self.last = time.monotonic()
            self.log(f"webhooks day={self.day}: {files_done}/{self.total} files, {deliveries:,} deliveries so far")


def drop_later_copies(scans: list[RunScan]) -> None:
    """Drop from each scan the deliveries an earlier scan (earlier files) kept, as if one scan had
    read every file in order: from its counts here; from its held bronze rows and its typed
    staging rows (`RunScan.copies`) when they are written and reduced."""
    kept: set[str] = set()
    for scan in scans:
        copies = kept.intersection(scan.ids)
        kept.update(scan.ids)
        if not copies:
            continue
        for delivery_id in copies:
            event = scan.ids.pop(delivery_id)
            scan.events[event] -= 1
        scan.deliveries -= len(copies)
        scan.duplicates += len(copies)
        scan.typed_rejects = [(d, r) for d, r in scan.typed_rejects if d not in copies]
        scan.copies = pa.array(sorted(copies), pa.string())


class HeldFiles:
    """Writes the later runs' held bronze files to the lake, on threads (Parquet and zstd release
    the GIL). A file of run K can be written once it is complete and runs 0..K-1 are scanned: its
    copies are then known, the rows whose delivery id an earlier run kept. So run 1's files are
    written while it is still being scanned, as soon as run 0 is done, not after every scan."""

    def __init__(self, out: PartitionCommit, day: str, tmp: str):
        self.out, self.day, self.tmp = out, day, tmp
        self.pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 1)
        self.writing: dict[str, Future] = {}

    def __enter__(self) -> "HeldFiles":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.pool.shutdown(cancel_futures=exc_type is not None)  # a failed ingest writes no more

    def write_ready(self, scans: list[RunScan], runs: int) -> None:
        """Start writing the complete held files of each run whose earlier runs are all in `scans`."""
        done = {scan.index: scan for scan in scans}
        for k in range(1, runs):
            if any(j not in done for j in range(k)):
                return
            earlier = [done[j].ids for j in range(k)]
            for path in sorted(glob.glob(os.path.join(self.tmp, f"run-{k}", "bronze-*.arrow"))):
                if path not in self.writing:
                    part = f"part-{k}-{os.path.basename(path)[len('bronze-'):-len('.arrow')]}"
                    self.writing[path] = self.pool.submit(_write_held, self.out, self.day, path, part, earlier)

    def wait(self, scans: list[RunScan]) -> None:
        missing = [path for scan in scans for path in scan.held if path not in self.writing]
        if missing:
            raise RuntimeError(f"held bronze files never written: {missing}")
        for done in self.writing.values():
            done.result()


def _write_held(out: PartitionCommit, day: str, path: str, part: str, earlier: list[dict[str, str]]) -> None:
    """A held bronze file, a batch at a time, into the lake's `part`, without the deliveries
    an earlier run kept (`earlier`: their ids, by run)."""
    with pa.OSFile(path) as source, out.writer("webhook_events", day, WEBHOOK_EVENTS_SCHEMA, part=part,
                                               options=BRONZE_OPTIONS) as w:
        reader = pa.ipc.open_file(source)
        for i in range(reader.num_record_batches):
            batch = reader.get_batch(i)
            ids = batch.column("delivery_id")
            copies = [d for d in ids.to_pylist() if any(d in kept for kept in earlier)]
            if copies:
                batch = batch.filter(pc.invert(pc.is_in(ids, value_set=pa.array(copies, pa.string()))))
            w.write_batch(batch)
    os.remove(path)


def can_spawn() -> bool:
    """A spawned worker first runs the parent's main module again, by its name or its file: it
    cannot when that file is gone or was never one (a script read from stdin). A main without
    either (`python -c`, a REPL, or Dagster's step processes, themselves spawned) is not re-run."""
    main = sys.modules.get("__main__")
    if getattr(main, "__spec__", None) is not None:
        return True
    path = getattr(main, "__file__", None)
    return path is None or os.path.exists(path)


def _scan_worker(args: tuple, files_done, deliveries, results) -> None:
    def progress(n: int, d: int) -> None:
        files_done.value, deliveries.value = n, d
    try:
        with large_blocks_kept():
            results.put(scan_run(*args, progress))
    except BaseException as exc:  # reported by the parent, with the worker's traceback
        import traceback
        results.put(RuntimeError(f"webhook scan of run {args[5]} failed:\n{traceback.format_exc()}"))
        raise SystemExit(1) from exc


def scan_in_processes(args: list[tuple], day: str, total_files: int, log: Callable[[str], None],
                       held: HeldFiles) -> list[RunScan]:
    """Run 0 in this process while runs 1.. each run in a spawned one; then, while waiting for
    them, their held bronze files that can be written are."""
    ctx = multiprocessing.get_context("spawn")  # no fork: the parent may hold threads and locks
    results = ctx.Queue()
    counters = [(ctx.Value("q", 0), ctx.Value("q", 0)) for _ in args[1:]]
    procs = [ctx.Process(target=_scan_worker, daemon=True, args=(a, *c, results)) for a, c in zip(args[1:], counters)]
    for p in procs:
        p.start()
    progress = Progress(log, day, total_files)
    first_run_files = len(args[0][4])

    def update(files_done: int, deliveries: int) -> None:
        progress.update(files_done + sum(c[0].value for c in counters), deliveries + sum(c[1].value for c in counters))

    try:
        scans = [scan_run(*args[0], update)]
        while len(scans) < len(args):
            held.write_ready(scans, len(args))
            returned = {scan.index for scan in scans}
            got = next_result(results, [p for k, p in enumerate(procs, 1) if k not in returned])
            if got is None:
                update(first_run_files, scans[0].deliveries)
                continue
            if isinstance(got, BaseException):
                raise got
            scans.append(got)
    except BaseException:
        _end(procs)
        raise
    # A worker takes a few tenths of a second to exit once it has sent its scan (freeing its
    # heap, its interpreter's teardown): the ingest goes on meanwhile, a thread reaps it.
    threading.Thread(target=_end, args=(procs, 60), daemon=True, name="webhook-scan-reaper").start()
    return sorted(scans, key=lambda s: s.index)


def _end(procs: list, timeout: float = 5) -> None:
    for p in procs:
        p.join(timeout=timeout)
        if p.is_alive():
            p.kill()
            p.join()


def next_result(results, awaited: list) -> object:
    """What a worker sent next, or None after a short wait while every `awaited` worker runs.

    A worker exits once what it sent is in the pipe, possibly right after the wait timed out:
    so a worker found gone is first waited for again, and only a silent one is a failure."""
    try:
        return results.get(timeout=0.05)
    except queue.Empty:
        if all(p.is_alive() for p in awaited):
            return None
    try:
        return results.get(timeout=5)
    except queue.Empty:
        raise RuntimeError("a webhook scan worker exited without a result (killed, out of memory, "
                           "or unable to start: see its output above)") from None



def scan_day(archive: Store, lake: Lake, day: str, runs: list[list], tmp: str, held: HeldFiles,
             log: Callable[[str], None]) -> list[RunScan]:
    """Scan each run of files under `tmp/run-K/` (several runs side by side, in processes), drop
    from the later runs the deliveries an earlier run kept, and start writing their held files."""
    args = [(archive.uri, lake.store.uri, lake.owner, day, run, k, tmp) for k, run in enumerate(runs)]
    total = sum(len(run) for run in runs)
    if len(args) > 1:
        scans = scan_in_processes(args, day, total, log, held)
    else:
        progress = Progress(log, day, total)
        scans = [scan_run(*a, progress.update) for a in args]
    drop_later_copies(scans)
    held.write_ready(scans, len(scans))
    return scans
