"""Scanning one run of a day's webhook files: each line read once, parsed once, its delivery
kept the first time its id is seen; the bronze rows (`webhook_events`, the payload as JSON text)
written to the lake or held in local Arrow files, the typed rows staged in local Parquet files for
the reduction in SQL (`webhooks.py`). A large day is several runs, scanned side by side
(`webhook_runs.py`).

Memory stays bounded: files are read in bounded chunks and written in bounded batches, on a
background thread (Parquet and zstd release the GIL, parsing does not); only the delivery ids seen
grow with the day, at about 150 bytes a delivery.
"""

from __future__ import annotations

import contextlib
import gc
import os
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from resources.lake import Lake
from resources.storage import Store
from torchci_assets.ingest.commit import PartitionCommit
from torchci_assets.ingest.fields import RowGuard
from torchci_assets.ingest.lines import iter_lines
from torchci_assets.ingest.payloads import (JOB_STAGE, PR_STAGE, PUSH_STAGE, RUN_STAGE, TS, FieldError, parse_envelope,
                                            pull_request_row, push_row, raw_payload, repo_of, workflow_job_row,
                                            workflow_run_row)
from torchci_assets.ingest.rejects import Reject
from torchci_assets.ingest.staging import BATCH_ROWS, BATCH_TEXT_CHARS, StagingFile

SOURCE = "webhooks"


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


# Bronze rows per file: a PyTorch-sized day (~200k deliveries) is about a dozen files, and a
# later run's held files are several, written side by side.
SEGMENT_ROWS = 16_000


class _Typed(StagingFile):
    """A typed table's staging file (`StagingFile`). Every row carries its delivery id, so the
    copies of deliveries an earlier scan kept can be dropped."""

    def __init__(self, table: str, schema: pa.Schema, extract: Callable[[dict], tuple], path: str,
                 rejects: list[tuple[str, Reject]]):
        # The envelope's fields were validated by parse_envelope; the payload's by the extractor.
        super().__init__(path, schema, RowGuard(schema, skip=("delivery_id", "received_at", "location")),
                         self._reject, BATCH_ROWS, BATCH_TEXT_CHARS)
        self.table, self.extract = table, extract
        self.rejects = rejects  # the scan's typed rejects: rows Arrow refuses land here too (see RowGuard)

    def _reject(self, row: tuple, problem: str) -> None:
        # a staging row ends with the delivery id, its receipt and its location
        self.rejects.append((row[-3], Reject(SOURCE, row[-1], f"{self.table}: {problem}", None)))


@dataclass
class RunScan:
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
    held: list[str] = field(default_factory=list)  # a later run's bronze files, still to write (`webhook_runs.HeldFiles`)
    staged: str = ""  # the folder of its typed staging files and held bronze files
    copies: pa.Array | None = None  # ids of the deliveries an earlier scan kept: its rows to skip
    bronze_prefix: str = "part-0"  # the names of run 0's bronze files in the lake


def _stage_tables(stage_dir: str, rejects: list[tuple[str, Reject]]) -> dict[str, "_Typed"]:
    os.makedirs(stage_dir, exist_ok=True)
    return {
        name: _Typed(name, schema, extract, os.path.join(stage_dir, f"{name}.parquet"), rejects)
        for name, schema, extract in (
            ("workflow_job", JOB_STAGE, workflow_job_row), ("workflow_run", RUN_STAGE, workflow_run_row),
            ("push", PUSH_STAGE, push_row), ("pull_request", PR_STAGE, pull_request_row))
    }


def scan_run(archive_uri: str, lake_uri: str, owner: str | None, day: str, files: list, index: int, tmp: str,
             progress: Callable[[int, int], None], seen: dict[str, str] | None = None,
             bronze_prefix: str = "part-0") -> RunScan:
    """Read a run of files: write its bronze files (run 0, as `<bronze_prefix>-NNN`) or hold them
    (later runs), and stage its typed rows, under `tmp/run-K/`. A delivery id in `seen` (id ->
    event: the day's earlier increments) is a copy, dropped like any redelivery."""
    archive, files_out = Store(archive_uri), PartitionCommit(Lake(Store(lake_uri), owner))
    scan = RunScan(index=index, staged=os.path.join(tmp, f"run-{index}"), ids=dict(seen or {}),
                   bronze_prefix=bronze_prefix)
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
                progress: Callable[[int, int], None], scan: RunScan) -> None:
    seen = scan.ids
    batch: list[tuple] = []
    batch_bytes = 0

    def segment(n: int):
        if scan.index == 0:
            return files_out.writer("webhook_events", day, WEBHOOK_EVENTS_SCHEMA, part=f"{scan.bronze_prefix}-{n:03d}",
                                    options=BRONZE_OPTIONS)
        scan.held.append(os.path.join(scan.staged, f"bronze-{n:03d}.arrow"))
        return held_file(scan.held[-1])

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
                    out.put(events_batch(batch))
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
        out.put(events_batch(batch))
        scan.deliveries += len(batch)
        out.drain()
        for t in typed.values():
            t.close()


@contextlib.contextmanager
def held_file(path: str) -> Iterator[pa.ipc.RecordBatchFileWriter]:
    """A held bronze file, under its name only once complete (`HeldFiles` may write it then)."""
    with pa.ipc.new_file(path + ".open", WEBHOOK_EVENTS_SCHEMA, options=pa.ipc.IpcWriteOptions(compression="lz4")) as w:
        yield w
    os.rename(path + ".open", path)


def events_batch(rows: list[tuple]) -> pa.RecordBatch:
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
            self.error = self._discard(current, exc)
            while self.batches.get() is not None:
                pass

    @staticmethod
    def _discard(current: contextlib.ExitStack | None, exc: BaseException) -> BaseException:
        """Drop the open file; the error to surface: the file's own account of the failure when it
        gives one (a write the disk refused, named with what to do), else `exc`. The thread must
        live on to drain the queue, or the caller's next put would wait forever."""
        if current is None:
            return exc
        try:
            current.__exit__(type(exc), exc, exc.__traceback__)
        except BaseException as closing:
            return closing
        return exc

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
