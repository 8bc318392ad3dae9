"""Webhook archive day -> `webhook_events` (bronze) and the typed tables, in one streaming pass.

One row per delivery goes to `webhook_events` with its payload as JSON text; the typed
tables (`workflow_job`, `workflow_run`, `push`, `pull_request`) get the fields users query.
A day is read file by file in bounded chunks and written in bounded batches, so memory
does not grow with the day's size; only the set of delivery ids seen (for deduplication)
does, at about 100 bytes a delivery.

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
import re
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from resources.lake import Lake, connect
from resources.storage import Store
from torchci_assets.ingest.commit import PartitionCommit
from torchci_assets.ingest.fields import RowGuard
from torchci_assets.ingest.lines import iter_lines
from torchci_assets.ingest.payloads import (JOB_STAGE, PR_STAGE, PUSH_STAGE, RUN_STAGE, TS, FieldError, parse_envelope,
                                            pull_request_row, push_row, raw_payload, repo_of, workflow_job_row,
                                            workflow_run_row)
from torchci_assets.ingest.rejects import Reject, rejects_table

SOURCE = "webhooks"
BATCH_ROWS = 20_000
EVENT_BATCH_ROWS = 4_000  # ~40 MB of payload text per batch

WEBHOOK_EVENTS_SCHEMA = pa.schema([
    ("event", pa.string()), ("action", pa.string()), ("delivery_id", pa.string()),
    ("received_at", TS), ("repo", pa.string()), ("payload", pa.string()),
])

@dataclass
class _Typed:
    """A typed table's staging file: rows are buffered, then flushed to local Parquet."""

    table: str
    schema: pa.Schema
    extract: Callable[[dict], tuple]
    per_delivery: bool  # push and pull_request keep one row per delivery (with its id)
    path: str
    rejects: list[Reject]  # the scan's: rows Arrow refuses become rejects here (see RowGuard)
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
        self.rejects.append(Reject(SOURCE, row[-1], f"{self.table}: {problem}", None))  # row[-1]: its location

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

    The bronze table is written as PARTS files, each holding the deliveries whose id hashes to
    it, so deduplication never crosses parts. A large day is scanned by one process per part
    (JSON parsing holds the GIL; two cores need two processes); a small one in this process.
    Both give the same files.
    """
    report = WebhookDayReport(day)
    files = archive.list_files(f"webhooks/day={day}", (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz"))
    report.files = len(files)
    report.bytes_read = sum(f.size for f in files)
    if workers is None:
        workers = PARTS if (report.bytes_read >= PARALLEL_MIN_BYTES and (os.cpu_count() or 1) > 1
                            and _can_spawn()) else 1
    with tempfile.TemporaryDirectory(prefix=f"torchci-webhooks-{day}-") as tmp, PartitionCommit(lake) as out:
        if workers > 1:
            scans = _scan_in_processes(archive.uri, lake.store.uri, lake.owner, day, files, tmp, log)
        else:
            progress = _Progress(log, day, len(files))
            scans = [_scan(archive.uri, lake.store.uri, lake.owner, day, files, tuple(range(PARTS)), tmp,
                           progress.update)]
        for scan in scans:
            out.adopt(scan.pending)
            report.lines += scan.lines
            report.deliveries += scan.deliveries
            report.duplicates += scan.duplicates
            report.rejects += scan.rejects
            for event, n in scan.events.items():
                report.events[event] = report.events.get(event, 0) + n
        report.rejects.sort(key=_reject_order)
        report.rows["webhook_events"] = report.deliveries
        _reduce_typed(out, day, tmp, report)
        out.write("rejects", day, rejects_table(report.rejects), part=SOURCE)
    return report


def _reject_order(r: Reject) -> tuple:
    path, _, line = r.location.rpartition(":")
    return (path, int(line)) if line.isdigit() else (r.location, 0)


PARTS = 2
PARALLEL_MIN_BYTES = 64 << 20
_DELIVERY_ID = re.compile(rb'"delivery_id"\s*:\s*"((?:[^"\\]|\\.)*)"')


def _part_of(line: bytes) -> int:
    """The bronze part a line belongs to, from its delivery id, without parsing the JSON.

    Inside a JSON string every quote is escaped, so the first `"delivery_id": "..."` is a
    key. Two deliveries with the same id land in the same part, which is all deduplication
    needs; a line with no id goes to part 0 (which rejects it).
    """
    m = _DELIVERY_ID.search(line)
    return zlib.crc32(m.group(1)) % PARTS if m else 0


@dataclass
class _Scan:
    """What one scan of a day's files found for its parts."""

    lines: int = 0
    deliveries: int = 0
    duplicates: int = 0
    rejects: list[Reject] = field(default_factory=list)
    events: dict[str, int] = field(default_factory=dict)
    pending: list[tuple[str, str]] = field(default_factory=list)  # bronze files to commit


class _Progress:
    def __init__(self, log: Callable[[str], None], day: str, total: int):
        self.log, self.day, self.total, self.last = log, day, total, time.monotonic()

    def update(self, files_done: int, deliveries: int) -> None:
        if files_done == self.total or time.monotonic() - self.last > 5:
            self.last = time.monotonic()
            self.log(f"webhooks day={self.day}: {files_done}/{self.total} files, {deliveries:,} deliveries so far")


def _stage_tables(stage_dir: str, rejects: list[Reject]) -> dict[str, "_Typed"]:
    os.makedirs(stage_dir, exist_ok=True)
    return {
        name: _Typed(name, schema, extract, per_delivery, os.path.join(stage_dir, f"{name}.parquet"), rejects)
        for name, schema, extract, per_delivery in (
            ("workflow_job", JOB_STAGE, workflow_job_row, False), ("workflow_run", RUN_STAGE, workflow_run_row, False),
            ("push", PUSH_STAGE, push_row, True), ("pull_request", PR_STAGE, pull_request_row, True))
    }


def _scan(archive_uri: str, lake_uri: str, owner: str | None, day: str, files: list, parts: tuple[int, ...],
          tmp: str, progress: Callable[[int, int], None]) -> _Scan:
    """Read every file of the day; for the lines of `parts`, write the bronze part files and
    stage the typed rows under `tmp/part-K/`. File-level damage is reported by part 0's scan."""
    archive, files_out = Store(archive_uri), PartitionCommit(Lake(Store(lake_uri), owner))
    scan = _Scan()
    # Parsed payloads are acyclic and short-lived, but there are millions of their dicts: the
    # cyclic collector would keep re-walking every live batch row for nothing (~25% of the time).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        _scan_files(archive, files_out, day, files, parts, tmp, progress, scan)
    finally:
        if gc_was_enabled:
            gc.enable()
    scan.pending = files_out.pending
    return scan


def _scan_files(archive: Store, files_out: PartitionCommit, day: str, files: list, parts: tuple[int, ...],
                tmp: str, progress: Callable[[int, int], None], scan: _Scan) -> None:
    seen: list[set[str]] = [set() for _ in range(PARTS)]
    batches: list[list[tuple]] = [[] for _ in range(PARTS)]
    with contextlib.ExitStack() as stack:
        outs, typed = {}, {}
        for k in parts:
            writer = stack.enter_context(files_out.writer("webhook_events", day, WEBHOOK_EVENTS_SCHEMA, part=f"part-{k}"))
            outs[k] = stack.enter_context(_Background(writer))
            typed[k] = _stage_tables(os.path.join(tmp, f"part-{k}"), scan.rejects)
        for n, entry in enumerate(files, 1):
            file_rejects: list[Reject] = []
            for lineno, line in iter_lines(archive, entry.path, SOURCE, file_rejects):
                k = _part_of(line)
                if k not in outs:
                    continue
                scan.lines += 1
                location = f"{entry.path}:{lineno}"
                try:
                    event, delivery_id, received_at, payload, env = parse_envelope(line)
                except ValueError as exc:
                    scan.rejects.append(Reject(SOURCE, location, str(exc), Reject.sample_of(line)))
                    continue
                if delivery_id in seen[k]:
                    scan.duplicates += 1
                    continue
                seen[k].add(delivery_id)
                scan.events[event] = scan.events.get(event, 0) + 1
                action = payload.get("action")
                batch = batches[k]
                batch.append((event, action if isinstance(action, str) else None, delivery_id, received_at,
                              repo_of(payload), raw_payload(line, env)))
                if len(batch) >= EVENT_BATCH_ROWS:
                    outs[k].put(_events_batch(batch))
                    scan.deliveries += len(batch)
                    batches[k] = []
                t = typed[k].get(event)
                if t is None:
                    continue
                try:
                    row = t.extract(payload)
                except FieldError as exc:
                    scan.rejects.append(Reject(SOURCE, location, f"{event}: {exc}", Reject.sample_of(line)))
                    continue
                if t.per_delivery:
                    row += (delivery_id,)
                t.add(row + (received_at, location))
            if 0 in outs:
                scan.rejects += file_rejects
            progress(n, scan.deliveries + sum(len(b) for b in batches))
        for k in parts:
            outs[k].put(_events_batch(batches[k]))
            scan.deliveries += len(batches[k])
            outs[k].drain()
            for t in typed[k].values():
                t.close()


def _can_spawn() -> bool:
    """Spawned workers re-import the parent's main module: impossible from stdin or a REPL."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    return getattr(main, "__spec__", None) is not None or (path is not None and os.path.exists(path))


def _scan_worker(args: tuple, files_done, deliveries, results) -> None:
    def progress(n: int, d: int) -> None:
        files_done.value, deliveries.value = n, d
    try:
        results.put(_scan(*args, progress))
    except BaseException as exc:  # reported by the parent, with the worker's traceback
        import traceback
        results.put(RuntimeError(f"webhook scan of parts {args[5]} failed:\n{traceback.format_exc()}"))
        raise SystemExit(1) from exc


def _scan_in_processes(archive_uri: str, lake_uri: str, owner: str | None, day: str, files: list, tmp: str,
                       log: Callable[[str], None]) -> list[_Scan]:
    ctx = multiprocessing.get_context("spawn")  # no fork: the parent may hold threads and locks
    results = ctx.Queue()
    counters = [(ctx.Value("q", 0), ctx.Value("q", 0)) for _ in range(PARTS)]
    procs = [ctx.Process(target=_scan_worker, daemon=True,
                         args=((archive_uri, lake_uri, owner, day, files, (k,), tmp), *counters[k], results))
             for k in range(PARTS)]
    for p in procs:
        p.start()
    scans: list[_Scan] = []
    try:
        while len(scans) < PARTS:
            try:
                got = results.get(timeout=5)
            except queue.Empty:
                if not all(p.is_alive() for p in procs):
                    raise RuntimeError("a webhook scan worker exited without a result (killed, out of memory, "
                                       "or unable to start: see its output above)") from None
                done = min(c[0].value for c in counters)
                log(f"webhooks day={day}: {done}/{len(files)} files, "
                    f"{sum(c[1].value for c in counters):,} deliveries so far ({PARTS} processes)")
                continue
            if isinstance(got, BaseException):
                raise got
            scans.append(got)
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
    log(f"webhooks day={day}: {len(files)}/{len(files)} files, {sum(s.deliveries for s in scans):,} deliveries")
    return scans


def _events_batch(rows: list[tuple]) -> pa.RecordBatch:
    cols = list(zip(*rows)) if rows else [[] for _ in WEBHOOK_EVENTS_SCHEMA]
    arrays = [pa.array(c, type=f.type) for c, f in zip(cols[:-1], WEBHOOK_EVENTS_SCHEMA)]
    return pa.record_batch(arrays + [_text_array(cols[-1])], schema=WEBHOOK_EVENTS_SCHEMA)


def _text_array(texts: tuple[bytes, ...]) -> pa.Array:
    """A string array from UTF-8 byte strings in one copy (pa.array on large str is ~5x slower)."""
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)), out=offsets[1:])
    data = pa.py_buffer(b"".join(texts))
    binary = pa.Array.from_buffers(pa.large_binary(), len(texts), [None, pa.py_buffer(offsets), data])
    return binary.cast(pa.string())  # validates UTF-8 and the 2 GB offset limit


class _Background:
    """Writes batches on a thread: Parquet encoding and zstd release the GIL, parsing does not."""

    def __init__(self, writer: pq.ParquetWriter):
        self.writer = writer
        self.batches: queue.Queue = queue.Queue(maxsize=2)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while (batch := self.batches.get()) is not None:
            if self.error is None:
                try:
                    if batch.num_rows:
                        self.writer.write_batch(batch)
                except BaseException as exc:  # surfaced on the caller's thread
                    self.error = exc

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

_JOB_RANK = "CASE status WHEN 'completed' THEN 4 WHEN 'in_progress' THEN 3 WHEN 'waiting' THEN 2 WHEN 'queued' THEN 1 WHEN 'pending' THEN 1 ELSE 0 END"
_RUN_RANK = "CASE status WHEN 'completed' THEN 4 WHEN 'in_progress' THEN 3 WHEN 'waiting' THEN 2 ELSE 1 END"


def _latest(cols: list[str], order: str) -> str:
    """For each column: its value on the highest-ranked delivery that has it (the ordering
    breaks exact ties on the archive location, so the result never depends on scan order)."""
    return ",\n".join(f"arg_max({c}, {order}) FILTER (WHERE {c} IS NOT NULL) AS {c}" for c in cols)


REDUCE_SQL = {
    "workflow_job": f"""
        WITH ranked AS (SELECT *, {_JOB_RANK} AS rank FROM stage),
        -- one HUGEINT ordering key (state, then arrival, then a hash of the archive location
        -- for exact ties): arg_max on it is several times faster than on a struct
        obs AS (SELECT *, (rank::HUGEINT << 110) + (epoch_ms(received_at)::HUGEINT << 64)
                          + hash(location)::HUGEINT AS key FROM ranked),
        job AS (
            SELECT id, run_attempt,
                {_latest(['run_id', 'repo', 'workflow_name', 'name', 'head_sha', 'head_branch',
                          'status', 'conclusion', 'created_at', 'started_at', 'completed_at', 'labels',
                          'runner_name', 'build_env', 'test_config', 'shard', 'num_shards', 'platform'],
                         'key')},
                min(received_at) FILTER (WHERE rank = 1) AS first_queued_at,
                max(received_at) AS received_at
            FROM obs GROUP BY id, run_attempt
        )
        SELECT id, run_id, run_attempt, repo, workflow_name, name, head_sha, head_branch, status,
               conclusion, created_at, started_at, completed_at, labels, runner_name,
               epoch(started_at) - epoch(coalesce(created_at, first_queued_at)) AS queue_s,
               epoch(completed_at) - epoch(started_at) AS duration_s,
               build_env, test_config, shard, num_shards, platform, received_at
        FROM (SELECT * REPLACE (TRY_CAST(created_at AS TIMESTAMPTZ) AS created_at,
                                TRY_CAST(started_at AS TIMESTAMPTZ) AS started_at,
                                TRY_CAST(completed_at AS TIMESTAMPTZ) AS completed_at) FROM job)
        ORDER BY run_id, id, run_attempt
    """,
    "workflow_run": f"""
        SELECT id, run_attempt,
            {_latest(['repo', 'name', 'event', 'head_sha', 'head_branch', 'status', 'conclusion'],
                     f'({_RUN_RANK}, updated_at, received_at, location)')},
            min(TRY_CAST(created_at AS TIMESTAMPTZ)) AS created_at,
            max(TRY_CAST(updated_at AS TIMESTAMPTZ)) AS updated_at
        FROM stage GROUP BY id, run_attempt ORDER BY id, run_attempt
    """,
    "push": """
        SELECT repo, ref, before, after, forced, created, deleted, head_commit_id,
               TRY_CAST(head_commit_timestamp AS TIMESTAMPTZ) AS head_commit_timestamp, commit_count,
               received_at, delivery_id
        FROM stage ORDER BY received_at, delivery_id
    """,
    "pull_request": """
        SELECT repo, number, action, state, head_sha, head_ref, base_ref, labels, merged,
               TRY_CAST(updated_at AS TIMESTAMPTZ) AS updated_at, received_at, delivery_id
        FROM stage ORDER BY received_at, delivery_id
    """,
}


def _reduce_typed(out: PartitionCommit, day: str, tmp: str, report: WebhookDayReport) -> None:
    con = connect()
    try:
        for name in REDUCE_SQL:
            staged = sorted(glob.glob(os.path.join(tmp, "part-*", f"{name}.parquet")))
            con.execute(f"CREATE OR REPLACE TEMP VIEW stage AS SELECT * FROM read_parquet({staged!r})")
            for col in _TS_COLUMNS[name]:
                bad = con.execute(
                    f"SELECT location, {col} FROM stage WHERE {col} IS NOT NULL AND TRY_CAST({col} AS TIMESTAMPTZ) IS NULL"
                ).fetchall()
                report.rejects += [Reject(SOURCE, loc, f"{name}: wrong type: {col} {val[:40]!r} is not a timestamp", None)
                                   for loc, val in bad]
            reader = con.sql(REDUCE_SQL[name]).to_arrow_reader(BATCH_ROWS)
            report.rows[name] = out.write(name, day, reader)
    finally:
        con.close()
