"""Webhook archive day -> `webhook_events` (bronze) and the typed tables, in one streaming pass.

One row per delivery goes to `webhook_events` with its payload as JSON text; the typed
tables (`workflow_job`, `workflow_run`, `push`, `pull_request`) get the fields users query.
A day is read file by file in bounded chunks and written in bounded batches, so memory
does not grow with the day's size; only the delivery ids seen (for deduplication) do, at
about 150 bytes a delivery. A large day is scanned by two processes; the second one's bronze
rows wait in the temporary folder (lz4 Arrow files) until the first one's deliveries are known.

GitHub delivers at least once and in no particular order, so:
- a delivery id seen before (a redelivery, possibly in another file) is dropped;
- a job's state is the highest in the lattice queued < waiting < in_progress < completed,
  not the last one received; fields missing from the winning delivery (older GitHub versions
  omit created_at, run_attempt, workflow_name) are filled from the job's other deliveries.
"""

from __future__ import annotations

import contextlib
import gc
import glob
import multiprocessing
import os
import queue
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from resources.lake import Lake, connect
from resources.sql import Literals, SqlFiles, compose
from resources.storage import Store
from torchci_assets.ingest.commit import PartitionCommit
from torchci_assets.ingest.fields import RowGuard
from torchci_assets.ingest.heap import large_blocks_kept
from torchci_assets.ingest.lines import iter_lines
from torchci_assets.ingest.payloads import (JOB_STAGE, PR_STAGE, PUSH_STAGE, RUN_STAGE, TS, FieldError, parse_envelope,
                                            pull_request_row, push_row, raw_payload, repo_of, workflow_job_row,
                                            workflow_run_row)
from torchci_assets.ingest.rejects import Reject, rejects_table

SOURCE = "webhooks"
BATCH_ROWS = 20_000
EVENT_BATCH_ROWS = 4_000
# Payload text per bronze batch: bounds memory whatever the payloads' size (a line may be up to
# TORCHCI_MAX_LINE_BYTES), keeps int32 string offsets far from overflowing, and keeps each
# batch's buffer under glibc's largest mmap threshold, so buffers are reused, not faulted in anew.
EVENT_BATCH_BYTES = 16 << 20

WEBHOOK_EVENTS_SCHEMA = pa.schema([
    ("event", pa.string()), ("action", pa.string()), ("delivery_id", pa.string()),
    ("received_at", TS), ("repo", pa.string()), ("payload", pa.string()),
])
# Bronze files: no dictionary for the payload text (every value is distinct, building one is
# wasted work) and zstd level 1, ~20% cheaper to write than 3 for ~7% more bytes: bronze is
# written on every refresh of the day and read rarely (the typed tables serve the queries).
BRONZE_OPTIONS = dict(use_dictionary=["event", "action", "repo"], compression_level=1)

@dataclass
class _Typed:
    """A typed table's staging file: rows are buffered, then flushed to local Parquet. Every row
    carries its delivery id, so the copies of deliveries an earlier scan kept can be dropped."""

    table: str
    schema: pa.Schema
    extract: Callable[[dict], tuple]
    path: str
    rejects: list[tuple[str, Reject]]  # the scan's typed rejects: rows Arrow refuses land here too (see RowGuard)
    rows: list = field(default_factory=list)
    count: int = 0
    writer: pq.ParquetWriter | None = None
    guard: RowGuard = field(init=False)

    def __post_init__(self) -> None:
        # The envelope's fields were validated by parse_envelope; the payload's by the extractor.
        self.guard = RowGuard(self.schema, skip=("delivery_id", "received_at", "location"))

    def add(self, row: tuple) -> None:
        self.rows.append(row)
        if len(self.rows) >= BATCH_ROWS:
            self.flush()

    def flush(self) -> None:
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.path, self.schema, compression="lz4")
        if self.rows:
            batch = self.guard.convert(self.rows, self._batch, self._reject)
            self.writer.write_batch(batch)
            self.count += batch.num_rows
            self.rows.clear()

    def _batch(self, rows: list) -> pa.RecordBatch:
        cols = list(zip(*rows)) if rows else [[] for _ in self.schema]
        return pa.record_batch([pa.array(c, type=f.type) for c, f in zip(cols, self.schema)], schema=self.schema)

    def _reject(self, row: tuple, problem: str) -> None:
        # a staging row ends with the delivery id, its receipt and its location
        self.rejects.append((row[-3], Reject(SOURCE, row[-1], f"{self.table}: {problem}", None)))

    def close(self) -> None:
        self.flush()
        self.writer.close()


@dataclass
class WebhookDayReport:
    day: str
    files: int = 0
    bytes_read: int = 0
    lines: int = 0
    deliveries: int = 0
    duplicates: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    rejects: list[Reject] = field(default_factory=list)
    events: dict[str, int] = field(default_factory=dict)

    @property
    def reject_rate(self) -> float:
        return len(self.rejects) / self.lines if self.lines else 0.0


def ingest_webhook_day(archive: Store, lake: Lake, day: str, log: Callable[[str], None] = lambda s: None,
                       workers: int | None = None) -> WebhookDayReport:
    """Ingest `webhooks/day=<day>/` from the archive into the lake's tables for that day,
    its unreadable records into the `webhooks` part of `rejects`.

    A large day's files are cut into `workers` runs of consecutive files, scanned side by side:
    the first in this process, each other one in a spawned process (parsing holds the GIL; two
    cores need two processes). A small day is one run, in this process. Every line is read once.
    A delivery is kept where it is first seen in file order, so a later run cannot know which of
    its deliveries an earlier run kept until both are scanned: it holds its bronze rows in local
    Arrow files (lz4, cheap to write), each written to the lake without those copies as soon as
    the earlier runs are scanned, while the later runs' scans or the reduce go on (`_HeldFiles`).
    Any number of workers gives the same tables.
    """
    report = WebhookDayReport(day)
    files = archive.list_files(f"webhooks/day={day}", (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz"))
    report.files = len(files)
    report.bytes_read = sum(f.size for f in files)
    if workers is None:
        workers = SCAN_PROCESSES if (report.bytes_read >= PARALLEL_MIN_BYTES and (os.cpu_count() or 1) > 1
                                     and _can_spawn()) else 1
    runs = _file_runs(files, workers)
    with (large_blocks_kept(), tempfile.TemporaryDirectory(prefix=f"torchci-webhooks-{day}-") as tmp,
          PartitionCommit(lake) as out, _HeldFiles(out, day, tmp) as held):
        args = [(archive.uri, lake.store.uri, lake.owner, day, run, k, tmp) for k, run in enumerate(runs)]
        if len(args) > 1:
            scans = _scan_in_processes(args, day, len(files), log, held)
        else:
            progress = _Progress(log, day, len(files))
            scans = [_scan(*a, progress.update) for a in args]
        _drop_later_copies(scans)
        held.write_ready(scans, len(scans))
        _collect(scans, out, report)
        _reduce_typed(out, day, scans, report)  # while the held bronze files are written
        held.wait(scans)
        out.replace_parts("webhook_events", day, prefix="part-")
        out.write("rejects", day, rejects_table(report.rejects), part=SOURCE)
    return report


def _collect(scans: list[_Scan], out: PartitionCommit, report: WebhookDayReport) -> None:
    """The scans' files into this commit, their counts and rejects (in archive order) into the report."""
    for scan in scans:
        out.adopt(scan.pending)
        report.lines += scan.lines
        report.deliveries += scan.deliveries
        report.duplicates += scan.duplicates
        report.rejects += scan.rejects + [r for _, r in scan.typed_rejects]
        for event, n in scan.events.items():
            report.events[event] = report.events.get(event, 0) + n
    report.rejects.sort(key=_reject_order)
    report.rows["webhook_events"] = report.deliveries


def _reject_order(r: Reject) -> tuple:
    path, _, line = r.location.rpartition(":")
    return (path, int(line)) if line.isdigit() else (r.location, 0)


SCAN_PROCESSES = 2
PARALLEL_MIN_BYTES = 64 << 20
# Bronze rows per file: a PyTorch-sized day (~200k deliveries) is about a dozen files, and a
# later run's held files are several, written side by side.
SEGMENT_ROWS = 16_000


def _file_runs(files: list, workers: int) -> list[list]:
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


@dataclass
class _Scan:
    """What one scan of a run of files found."""

    index: int = 0
    lines: int = 0
    deliveries: int = 0
    duplicates: int = 0
    rejects: list[Reject] = field(default_factory=list)  # of lines and files: never a delivery's
    typed_rejects: list[tuple[str, Reject]] = field(default_factory=list)  # (delivery id, reject)
    events: dict[str, int] = field(default_factory=dict)
    ids: dict[str, str] = field(default_factory=dict)  # delivery id -> event, of every delivery kept
    pending: list[tuple[str, str]] = field(default_factory=list)  # bronze files to commit
    held: list[str] = field(default_factory=list)  # a later run's bronze files, still to write (`_write_held`)
    staged: str = ""  # the folder of its typed staging files and held bronze files
    copies: pa.Array | None = None  # ids of the deliveries an earlier scan kept: its rows to skip


class _Progress:
    def __init__(self, log: Callable[[str], None], day: str, total: int):
        self.log, self.day, self.total, self.last = log, day, total, time.monotonic()

    def update(self, files_done: int, deliveries: int) -> None:
        if files_done == self.total or time.monotonic() - self.last > 5:
            self.last = time.monotonic()
            self.log(f"webhooks day={self.day}: {files_done}/{self.total} files, {deliveries:,} deliveries so far")


def _stage_tables(stage_dir: str, rejects: list[tuple[str, Reject]]) -> dict[str, "_Typed"]:
    os.makedirs(stage_dir, exist_ok=True)
    return {
        name: _Typed(name, schema, extract, os.path.join(stage_dir, f"{name}.parquet"), rejects)
        for name, schema, extract in (
            ("workflow_job", JOB_STAGE, workflow_job_row), ("workflow_run", RUN_STAGE, workflow_run_row),
            ("push", PUSH_STAGE, push_row), ("pull_request", PR_STAGE, pull_request_row))
    }


def _scan(archive_uri: str, lake_uri: str, owner: str | None, day: str, files: list, index: int, tmp: str,
          progress: Callable[[int, int], None]) -> _Scan:
    """Read a run of files: write its bronze files (run 0) or hold them (later runs), and stage its
    typed rows, under `tmp/run-K/`."""
    archive, files_out = Store(archive_uri), PartitionCommit(Lake(Store(lake_uri), owner))
    scan = _Scan(index=index, staged=os.path.join(tmp, f"run-{index}"))
    # Parsed payloads are acyclic and short-lived, but there are millions of their dicts: the
    # cyclic collector would keep re-walking every live batch row for nothing (~25% of the time).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        _scan_files(archive, files_out, day, files, progress, scan)
    finally:
        if gc_was_enabled:
            gc.enable()
    scan.pending = files_out.pending
    return scan


def _scan_files(archive: Store, files_out: PartitionCommit, day: str, files: list,
                progress: Callable[[int, int], None], scan: _Scan) -> None:
    seen = scan.ids
    batch: list[tuple] = []
    batch_bytes = 0

    def segment(n: int):
        if scan.index == 0:
            return files_out.writer("webhook_events", day, WEBHOOK_EVENTS_SCHEMA, part=f"part-0-{n:03d}",
                                    options=BRONZE_OPTIONS)
        scan.held.append(os.path.join(scan.staged, f"bronze-{n:03d}.arrow"))
        return _held_file(scan.held[-1])

    typed = _stage_tables(scan.staged, scan.typed_rejects)
    with _Background(segment, SEGMENT_ROWS) as out:
        for n, entry in enumerate(files, 1):
            for lineno, line in iter_lines(archive, entry.path, SOURCE, scan.rejects):
                scan.lines += 1
                location = f"{entry.path}:{lineno}"
                try:
                    event, delivery_id, received_at, payload, env = parse_envelope(line)
                except ValueError as exc:
                    scan.rejects.append(Reject(SOURCE, location, str(exc), Reject.sample_of(line)))
                    continue
                if delivery_id in seen:
                    scan.duplicates += 1
                    continue
                seen[delivery_id] = event
                scan.events[event] = scan.events.get(event, 0) + 1
                action = payload.get("action")
                text = raw_payload(line, env)
                batch.append((event, action if isinstance(action, str) else None, delivery_id, received_at,
                              repo_of(payload), text))
                batch_bytes += len(text)
                if len(batch) >= EVENT_BATCH_ROWS or batch_bytes >= EVENT_BATCH_BYTES:
                    out.put(_events_batch(batch))
                    scan.deliveries += len(batch)
                    batch, batch_bytes = [], 0
                t = typed.get(event)
                if t is None:
                    continue
                try:
                    row = t.extract(payload)
                except FieldError as exc:
                    scan.typed_rejects.append(
                        (delivery_id, Reject(SOURCE, location, f"{event}: {exc}", Reject.sample_of(line))))
                    continue
                t.add(row + (delivery_id, received_at, location))
            progress(n, scan.deliveries + len(batch))
        out.put(_events_batch(batch))
        scan.deliveries += len(batch)
        out.drain()
        for t in typed.values():
            t.close()


def _drop_later_copies(scans: list[_Scan]) -> None:
    """Drop from each scan the deliveries an earlier scan (earlier files) kept, as if one scan had
    read every file in order: from its counts here; from its held bronze rows and its typed
    staging rows (`_Scan.copies`) when they are written and reduced."""
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


@contextlib.contextmanager
def _held_file(path: str) -> Iterator[pa.ipc.RecordBatchFileWriter]:
    """A held bronze file, under its name only once complete (`_HeldFiles` may write it then)."""
    with pa.ipc.new_file(path + ".open", WEBHOOK_EVENTS_SCHEMA, options=pa.ipc.IpcWriteOptions(compression="lz4")) as w:
        yield w
    os.rename(path + ".open", path)


class _HeldFiles:
    """Writes the later runs' held bronze files to the lake, on threads (Parquet and zstd release
    the GIL). A file of run K can be written once it is complete and runs 0..K-1 are scanned: its
    copies are then known, the rows whose delivery id an earlier run kept. So run 1's files are
    written while it is still being scanned, as soon as run 0 is done, not after every scan."""

    def __init__(self, out: PartitionCommit, day: str, tmp: str):
        self.out, self.day, self.tmp = out, day, tmp
        self.pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 1)
        self.writing: dict[str, Future] = {}

    def __enter__(self) -> "_HeldFiles":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.pool.shutdown(cancel_futures=exc_type is not None)  # a failed ingest writes no more

    def write_ready(self, scans: list[_Scan], runs: int) -> None:
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

    def wait(self, scans: list[_Scan]) -> None:
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


def _can_spawn() -> bool:
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
            results.put(_scan(*args, progress))
    except BaseException as exc:  # reported by the parent, with the worker's traceback
        import traceback
        results.put(RuntimeError(f"webhook scan of run {args[5]} failed:\n{traceback.format_exc()}"))
        raise SystemExit(1) from exc


def _scan_in_processes(args: list[tuple], day: str, total_files: int, log: Callable[[str], None],
                       held: _HeldFiles) -> list[_Scan]:
    """Run 0 in this process while runs 1.. each run in a spawned one; then, while waiting for
    them, their held bronze files that can be written are."""
    ctx = multiprocessing.get_context("spawn")  # no fork: the parent may hold threads and locks
    results = ctx.Queue()
    counters = [(ctx.Value("q", 0), ctx.Value("q", 0)) for _ in args[1:]]
    procs = [ctx.Process(target=_scan_worker, daemon=True, args=(a, *c, results)) for a, c in zip(args[1:], counters)]
    for p in procs:
        p.start()
    progress = _Progress(log, day, total_files)
    first_run_files = len(args[0][4])

    def update(files_done: int, deliveries: int) -> None:
        progress.update(files_done + sum(c[0].value for c in counters), deliveries + sum(c[1].value for c in counters))

    try:
        scans = [_scan(*args[0], update)]
        while len(scans) < len(args):
            held.write_ready(scans, len(args))
            returned = {scan.index for scan in scans}
            got = _next_result(results, [p for k, p in enumerate(procs, 1) if k not in returned])
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


def _next_result(results, awaited: list) -> object:
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


def _events_batch(rows: list[tuple]) -> pa.RecordBatch:
    cols = list(zip(*rows)) if rows else [[] for _ in WEBHOOK_EVENTS_SCHEMA]
    arrays = [pa.array(c, type=f.type) for c, f in zip(cols[:-1], WEBHOOK_EVENTS_SCHEMA)]
    return pa.record_batch(arrays + [_text_array(cols[-1])], schema=WEBHOOK_EVENTS_SCHEMA)


def _text_array(texts: tuple[bytes, ...]) -> pa.Array:
    """A string array from UTF-8 byte strings in one copy (pa.array on large str is ~5x slower).

    Not validated again: every text is a slice, at ASCII delimiters, of a line the JSON parser
    accepted (which validates UTF-8), or the parser's own output. The int64 offsets are cast to
    the column's int32 ones, which checks they fit.
    """
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)), out=offsets[1:])
    data = pa.py_buffer(b"".join(texts))
    return pa.Array.from_buffers(pa.large_string(), len(texts), [None, pa.py_buffer(offsets), data]).cast(pa.string())


class _Background:
    """Writes batches on a thread (Parquet encoding and zstd release the GIL, parsing does not),
    into files of about `rows_per_file` rows each opened by `open_file(n)`, n = 0, 1, ..."""

    def __init__(self, open_file: Callable[[int], contextlib.AbstractContextManager],
                 rows_per_file: int):
        self.open_file, self.rows_per_file = open_file, rows_per_file
        self.batches: queue.Queue = queue.Queue(maxsize=2)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        files = rows = 0
        current: contextlib.ExitStack | None = None  # holds the open file's writer
        try:
            while (batch := self.batches.get()) is not None:
                if not batch.num_rows:
                    continue
                if current is None:
                    current = contextlib.ExitStack()
                    writer = current.enter_context(self.open_file(files))
                writer.write_batch(batch)
                rows += batch.num_rows
                if rows >= self.rows_per_file:
                    current.close()
                    current, files, rows = None, files + 1, 0
            if current is None and files == 0:  # a run without deliveries still writes its (empty) file
                current = contextlib.ExitStack()
                current.enter_context(self.open_file(files))
            if current is not None:
                current.close()
        except BaseException as exc:  # surfaced on the caller's thread; the open file is discarded
            self.error = exc
            if current is not None:
                current.__exit__(type(exc), exc, exc.__traceback__)
            while self.batches.get() is not None:
                pass

    def put(self, batch: pa.RecordBatch) -> None:
        if self.error:
            raise self.error
        self.batches.put(batch)

    def drain(self) -> None:
        if self.thread.is_alive():
            self.batches.put(None)
            self.thread.join()
        if self.error:
            raise self.error

    def __enter__(self) -> "_Background":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.drain()


# ---- reduction: staging rows -> one row per key, in SQL -----------------------------------

_TS_COLUMNS = {
    "workflow_job": ("created_at", "started_at", "completed_at"),
    "workflow_run": ("created_at", "updated_at"),
    "push": ("head_commit_timestamp",),
    "pull_request": ("updated_at",),
}

SQL = dict(SqlFiles(__file__).steps("webhook_tables"))
TYPED_TABLES = ("workflow_job", "workflow_run", "push", "pull_request")


def _reduce_typed(out: PartitionCommit, day: str, scans: list[_Scan], report: WebhookDayReport) -> None:
    con = connect()
    try:
        for name in TYPED_TABLES:
            files = [os.path.join(scan.staged, name + ".parquet") for scan in scans]
            copies = [(f, d) for scan, f in zip(scans, files)
                      for d in ([] if scan.copies is None else scan.copies.to_pylist())]
            con.register("copies", pa.table({"filename": [f for f, _ in copies], "delivery_id": [d for _, d in copies]},
                                            schema=pa.schema([("filename", pa.string()), ("delivery_id", pa.string())])))
            con.execute(compose(SQL["stage"], files=Literals(files)))
            for col in _TS_COLUMNS[name]:
                bad = con.execute(compose(SQL["bad_timestamps"], column=col)).fetchall()
                report.rejects += [Reject(SOURCE, loc, f"{name}: wrong type: {col} {val[:40]!r} is not a timestamp", None)
                                   for loc, val in bad]
            reader = con.sql(SQL[name]).to_arrow_reader(BATCH_ROWS)
            report.rows[name] = out.write(name, day, reader)
    finally:
        con.close()
