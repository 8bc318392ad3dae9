"""The local spool: a delivery is acknowledged only once it is on disk, then rolled into the archive.

Layout: `<spool>/<stream>/<host>-<start>.jsonl.open` is the segment being appended to,
`<host>-<start>.jsonl` a sealed one waiting for the archive (`<start>` is the first record's
receipt, `20261101T120000123456Z`). Each stream (`webhooks`, `ci-results`) has one writer
thread doing group commit: it takes every record queued since its last write, appends them in
one `write`, calls `fdatasync` once, and only then answers the requests, so the cost of an
fsync is shared by everything that arrived while the previous one ran.

A segment holds one UTC day of receipt: a record of another day seals it and starts another,
so the roll needs no parsing to know where the records go. A segment is sealed after
`roll_interval_s`, at `roll_bytes`, or sooner when a record asks (an upstream push, which the
relay sensor is waiting for). The roller publishes each sealed segment whole as
`<stream>/day=D/<host>-<start>.jsonl.gz` (gzip; atomically; fsynced when local) and deletes
it. Publishing again under the same name is harmless, so a crash between publish and delete
costs nothing; a crash while appending leaves at most a torn last line, which was never
acknowledged and is dropped by the roll's check that every line is JSON. Two segments can get one
name only if their first records share a receipt microsecond (a coarse clock, or one stepped back,
even across a restart): the archive file of the first is then told apart by its first line, and
the second is published a microsecond later instead of replacing it.

On start, `.open` segments left by a crash are sealed and everything sealed is rolled before
the server accepts requests. One process owns a spool (an flock on `<spool>/.lock`).

A segment published into a day older than yesterday (UTC, by this machine's clock: after an archive
outage, or a receiver down over a weekend) lands where nothing looks any more: the refresh sensor
watches today and yesterday, and the day's daily run is over. Its deliveries were acknowledged, so
GitHub will not send them again. The roller therefore leaves a marker, `_late/<day>` in the archive
(written atomically, after the file and before the spool copy goes, so a crash between them
rolls the segment again and rewrites the marker), logs a warning and counts it; the sensor
refreshes a marked day until a run has succeeded on what its folders hold, then deletes the marker
(`jobs.refresh.forget_marker`, which relies on the file being published before its marker).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import fcntl
import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
from isal import isal_zlib

from resources.storage import Store
from torchci_assets.receiver.metrics import Metrics
from torchci_assets.receiver.throttled_log import ThrottledLog

log = logging.getLogger("torchci.receiver")
# A full or failing disk fails every write: one line a minute with the count, not one per request.
WRITE_ERRORS = ThrottledLog(log)

STREAMS = ("webhooks", "ci-results")
OPEN_SUFFIX = ".jsonl.open"
SEALED_SUFFIX = ".jsonl"
STAMP_FORMAT = "%Y%m%dT%H%M%S%fZ"
READ_CHUNK = 4 << 20
LATE_FOLDER = "_late"  # the archive's markers of days that received a segment after the sensor stopped watching them
GZIP_LEVEL = 1  # ISA-L level 1: several hundred MB/s, so a roll never competes with the requests for long


class SpoolError(OSError):
    """A record could not be made durable; the request must not be acknowledged."""


def is_json(line: bytes) -> bool:
    """Whether `line` is one JSON value (what every spool line must be)."""
    try:
        orjson.loads(line)
    except orjson.JSONDecodeError:
        return False
    return True


def stamp(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).strftime(STAMP_FORMAT)


def segment_name_day(name: str) -> str:
    """The UTC day of a `<host>-<start>` segment name."""
    start = name.rsplit("-", 1)[1]
    return f"{start[0:4]}-{start[4:6]}-{start[6:8]}"


def archive_path(stream: str, name: str) -> str:
    return f"{stream}/day={segment_name_day(name)}/{name}.jsonl.gz"


def archive_path_day(rel: str) -> str:
    """The day of a published `<stream>/day=<day>/<name>` path."""
    return rel.split("/", 2)[1].removeprefix("day=")


def is_late(day: str, now: float) -> bool:
    """Whether `day` is older than yesterday (UTC) at `now`: past what the refresh sensor watches."""
    yesterday = dt.datetime.fromtimestamp(now, dt.timezone.utc).date() - dt.timedelta(days=1)
    return day < yesterday.isoformat()


def late_marker_path(day: str) -> str:
    return f"{LATE_FOLDER}/{day}"


def mark_late(store: Store, rel: str, now: float) -> str | None:
    """Leave the marker of `rel`'s day when the file came late (see the module docstring); the
    marker's path, or None for a file in time. Its content names the file and when, and differs
    at each write, so that even a listing of second-resolution stamps (S3) sees a new marker."""
    day = archive_path_day(rel)
    if not is_late(day, now):
        return None
    return write_late_marker(store, day, now, file=rel)


def write_late_marker(store: Store, day: str, now: float, path: str | None = None, **fields: str) -> str:
    """Write `day`'s marker (what it says: `fields`, and when), at `path` or its own; its path."""
    marker = path or late_marker_path(day)
    at = dt.datetime.fromtimestamp(now, dt.timezone.utc).isoformat()
    store.write_bytes(marker, orjson.dumps({"day": day, **fields, "marked_at": at}) + b"\n")
    return marker


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def probe_write(folder: Path) -> str | None:
    """Why `folder` cannot take a durable write (a small file written, fsynced, removed), or None.

    The file is this process's and thread's own: a receiver starting on a spool another one owns
    probes it while the owner's readiness check probes it too, and with one shared name either
    could remove the other's file and report the spool unwritable."""
    path = folder / f".write-probe-{os.getpid()}-{threading.get_ident()}"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, b"ok\n")
            os.fdatasync(fd)
        finally:
            os.close(fd)
        os.unlink(path)
    except OSError as exc:
        return f"the spool {folder} cannot be written: {exc.strerror or exc}"
    return None


def check_spool_dir(root: Path) -> None:
    """Raise SpoolError, naming TORCHCI_SPOOL_DIR, when `root` cannot hold the spool (a file, a
    read-only or full disk): found before the server listens rather than as a 503 per delivery."""
    try:
        for folder in (root, *(root / s for s in STREAMS)):
            folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        what = "is a file or below one" if isinstance(exc, (FileExistsError, NotADirectoryError)) else exc.strerror
        raise SpoolError(f"TORCHCI_SPOOL_DIR={str(root)!r}: {what}; expected a writable folder") from None
    if problem := probe_write(root):
        raise SpoolError(f"TORCHCI_SPOOL_DIR={str(root)!r}: {problem}") from None


@contextlib.contextmanager
def spool_lock(root: Path) -> Iterator[None]:
    """Exclusive ownership of the spool folder for this process's lifetime."""
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SpoolError(f"the spool {root} is in use by another receiver process; give each its own "
                             "TORCHCI_SPOOL_DIR") from None
        yield
    finally:
        os.close(fd)


@dataclass
class _Record:
    line: bytes
    received: dt.datetime
    seal_within_s: float | None
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future


@dataclass
class _Segment:
    name: str
    day: str
    path: Path
    fd: int
    opened: float  # monotonic
    size: int = 0
    records: int = 0


def _resolve(batch: list[_Record], error: BaseException | None) -> None:
    for rec in batch:
        if not rec.future.done():
            if error is None:
                rec.future.set_result(None)
            else:
                rec.future.set_exception(error)


class SpoolWriter:
    """Appends one stream's records to its active segment; `append` returns once fsynced."""

    def __init__(self, root: Path, stream: str, host: str, metrics: Metrics, roll_interval_s: float = 60.0,
                 roll_bytes: int = 64 << 20, on_sealed: Callable[[Path, bool], None] = lambda path, check: None,
                 clock: Callable[[], float] = time.monotonic):
        self.dir = root / stream
        self.dir.mkdir(parents=True, exist_ok=True)
        self.stream, self.host, self.metrics = stream, host, metrics
        self.roll_interval_s, self.roll_bytes = roll_interval_s, roll_bytes
        self.on_sealed, self._clock = on_sealed, clock
        self._cond = threading.Condition()
        self._pending: list[_Record] = []
        self._stopping = False
        self._active: _Segment | None = None
        self._seal_at: float | None = None
        self._thread = threading.Thread(target=self._run, name=f"spool-{stream}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        """Write what is queued, seal the active segment and stop the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread.ident is not None:
            self._thread.join()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    async def append(self, line: bytes, received: dt.datetime, seal_within_s: float | None = None) -> None:
        """Queue `line` (one JSON line, newline-terminated) and wait until it is fsynced.

        `seal_within_s` asks for the segment holding this record to be sealed (and so rolled)
        at most that long after the record is written.
        """
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self._cond:
            if self._stopping:
                raise SpoolError("the receiver is shutting down")
            self._pending.append(_Record(line, received, seal_within_s, loop, future))
            self._cond.notify()
        await future

    # ---- the writer thread ----------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._stopping and not self._seal_due():
                    self._cond.wait(self._wait_s())
                batch, self._pending = self._pending, []
                stopping = self._stopping
            try:
                if batch:
                    self._write(batch)
                if self._seal_due() or (stopping and not batch):
                    self._seal()
            except Exception as exc:  # the writer must outlive any error: requests wait on it
                log.exception("spool %s: unexpected error; its requests get 503", self.stream)
                self._notify(batch, SpoolError(f"spool write failed: {exc}"))
                self._active = None  # an open segment left here is recovered at the next start
            if stopping and not batch:
                return

    def _seal_due(self) -> bool:
        active = self._active
        if active is None:
            return False
        now = self._clock()
        return (active.size >= self.roll_bytes or now - active.opened >= self.roll_interval_s
                or (self._seal_at is not None and now >= self._seal_at))

    def _wait_s(self) -> float | None:
        if self._active is None:
            return None
        due = self._active.opened + self.roll_interval_s
        if self._seal_at is not None:
            due = min(due, self._seal_at)
        return max(0.0, due - self._clock()) + 0.001

    def _runs(self, batch: list[_Record]) -> Iterator[list[_Record]]:
        """Consecutive records of the batch that belong in the same segment (one day each)."""
        run: list[_Record] = []
        for rec in batch:
            if run and rec.received.date() != run[0].received.date():
                yield run
                run = []
            run.append(rec)
        if run:
            yield run

    def _write(self, batch: list[_Record]) -> None:
        for run in self._runs(batch):
            error: BaseException | None = None
            try:
                segment = self._segment_for(run[0].received)
                self._append(segment, b"".join(r.line for r in run))
            except OSError as exc:
                error = SpoolError(f"spool write failed: {exc}")
                WRITE_ERRORS.log(f"write:{self.stream}", logging.ERROR,
                                 f"spool {self.stream}: {exc}; the {len(run)} request(s) get 503")
                self.metrics.inc("torchci_receiver_write_errors_total", len(run), stream=self.stream)
                self._abandon_active()
            else:
                segment.records += len(run)
                self.metrics.inc("torchci_receiver_written_total", len(run), stream=self.stream)
                now = self._clock()
                for rec in run:
                    if rec.seal_within_s is not None:
                        at = now + rec.seal_within_s
                        self._seal_at = at if self._seal_at is None else min(self._seal_at, at)
            self._notify(run, error)
            if self._active is not None and self._active.size >= self.roll_bytes:
                self._seal()

    @staticmethod
    def _notify(records: list[_Record], error: BaseException | None) -> None:
        """Answer the waiting requests (once each: a later call for the same records is a no-op)."""
        by_loop: dict[asyncio.AbstractEventLoop, list[_Record]] = {}
        for rec in records:
            by_loop.setdefault(rec.loop, []).append(rec)
        for loop, recs in by_loop.items():
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody is waiting
                loop.call_soon_threadsafe(_resolve, recs, error)

    def _append(self, segment: _Segment, data: bytes) -> None:
        t0 = time.perf_counter()
        view, before = memoryview(data), segment.size
        try:
            while view:
                view = view[os.write(segment.fd, view):]
            os.fdatasync(segment.fd)
        except OSError:
            # Cut the partial write off so later records never follow a torn line.
            with contextlib.suppress(OSError):
                os.ftruncate(segment.fd, before)
            raise
        segment.size += len(data)
        self.metrics.observe("torchci_receiver_fsync_seconds", time.perf_counter() - t0)
        self.metrics.observe("torchci_receiver_fsync_batch_records", data.count(b"\n"))

    def _segment_for(self, received: dt.datetime) -> _Segment:
        day = received.astimezone(dt.timezone.utc).strftime("%Y-%m-%d")
        if self._active is not None and self._active.day != day:
            self._seal()
        if self._active is None:
            self._active = self._open(received)
        return self._active

    def _open(self, received: dt.datetime) -> _Segment:
        start = received.astimezone(dt.timezone.utc)
        while True:
            name = f"{self.host}-{stamp(start)}"
            path = self.dir / f"{name}{OPEN_SUFFIX}"
            if not (self.dir / f"{name}{SEALED_SUFFIX}").exists():
                try:
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o644)
                    break
                except FileExistsError:
                    pass
            start += dt.timedelta(microseconds=1)  # same microsecond as another segment
        fsync_dir(self.dir)  # the new name itself must survive a crash before anything in it is acknowledged
        return _Segment(name, start.strftime("%Y-%m-%d"), path, fd, self._clock())

    def _seal(self, needs_check: bool = False) -> None:
        segment, self._active, self._seal_at = self._active, None, None
        if segment is None:
            return
        os.close(segment.fd)
        if segment.size == 0:
            os.remove(segment.path)
            fsync_dir(self.dir)
            return
        sealed = self.dir / f"{segment.name}{SEALED_SUFFIX}"
        os.rename(segment.path, sealed)
        fsync_dir(self.dir)
        self.on_sealed(sealed, needs_check)

    def _abandon_active(self) -> None:
        """After a failed write: seal what is there (its roll checks every line) and start afresh."""
        with contextlib.suppress(OSError):
            self._seal(needs_check=True)


def recover(root: Path) -> list[Path]:
    """Seal the segments a crashed process left open; returns them."""
    found = []
    for stream in STREAMS:
        folder = root / stream
        for path in sorted(folder.glob(f"*{OPEN_SUFFIX}")) if folder.is_dir() else []:
            sealed = path.with_name(path.name[: -len(OPEN_SUFFIX)] + SEALED_SUFFIX)
            if path.stat().st_size == 0:
                path.unlink()
            else:
                os.rename(path, sealed)
                found.append(sealed)
        if found:
            fsync_dir(folder)
    return found


def sealed_segments(root: Path) -> list[tuple[str, Path]]:
    """(stream, path) of every sealed segment, oldest start first."""
    out = []
    for stream in STREAMS:
        folder = root / stream
        if folder.is_dir():
            out += [(stream, p) for p in folder.glob(f"*{SEALED_SUFFIX}")]
    return sorted(out, key=lambda sp: (sp[1].name.rsplit("-", 1)[-1], sp[0], sp[1].name))


def spool_depth(root: Path) -> dict[str, tuple[int, int, float]]:
    """stream -> (segments, bytes, age in seconds of the oldest sealed one) of what is not archived yet."""
    now = time.time()
    out = {}
    for stream in STREAMS:
        folder = root / stream
        segments = nbytes = 0
        oldest = 0.0
        for path in folder.iterdir() if folder.is_dir() else []:
            if path.name.endswith((SEALED_SUFFIX, OPEN_SUFFIX)):
                with contextlib.suppress(FileNotFoundError):
                    st = path.stat()
                    segments, nbytes = segments + 1, nbytes + st.st_size
                    if path.name.endswith(SEALED_SUFFIX):
                        oldest = max(oldest, now - st.st_mtime)
        out[stream] = (segments, nbytes, oldest)
    return out


@dataclass
class RollResult:
    archive_path: str
    lines: int
    dropped: int


def roll_segment(store: Store, stream: str, path: Path, check: bool = True,
                 on_published: Callable[[str], None] = lambda rel: None) -> RollResult:
    """Publish one sealed segment to the archive, then delete it; `on_published(archive path)`
    runs in between (a failure there keeps the segment, to be rolled again).

    With `check`, every line is parsed and a torn one dropped: for segments a crash or a failed
    write left behind. A segment this process sealed after complete writes is streamed as it is,
    because parsing 64 MB in Python would hold the GIL for a few hundred milliseconds, and
    every request waiting on the event loop would wait with it.
    """
    rel = _archive_path_for(store, stream, path)
    if not check:
        return _roll_verbatim(store, rel, path, on_published)
    lines = dropped = 0
    compressor = isal_zlib.compressobj(GZIP_LEVEL, isal_zlib.DEFLATED, 31)
    with store.atomic_output(rel) as out, open(path, "rb") as src:
        tail = b""
        while chunk := src.read(READ_CHUNK):
            parts = (tail + chunk).split(b"\n")
            tail = parts.pop()
            keep = []
            for line in parts:
                if not line.strip():
                    continue
                if is_json(line):
                    keep.append(line)
                else:
                    dropped += 1
            if keep:
                lines += len(keep)
                out.write(compressor.compress(b"\n".join(keep) + b"\n"))
        if tail.strip():
            # A last line without its newline was cut by a crash; it was never acknowledged,
            # but it is kept when it happens to be whole.
            if is_json(tail):
                lines += 1
                out.write(compressor.compress(tail + b"\n"))
            else:
                dropped += 1
        out.write(compressor.flush())
    if dropped:
        log.warning("roll %s: %d torn line(s) dropped (never acknowledged)", path, dropped)
    return _published(store, rel, path, lines, dropped, on_published)


def _archive_path_for(store: Store, stream: str, path: Path) -> str:
    """Where the sealed segment `path` goes: its own name, unless the archive already holds another
    segment's file there (the same first record means the same segment, published again after a
    crash before its deletion); then the first free name a microsecond later."""
    name = path.name[: -len(SEALED_SUFFIX)]
    rel = archive_path(stream, name)
    if not store.exists(rel):
        return rel
    first = _first_line_digest(open(path, "rb"))
    while store.exists(rel) and _first_line_digest(store.open_input(rel)) != first:
        host, start = name.rsplit("-", 1)
        later = dt.datetime.strptime(start, STAMP_FORMAT).replace(tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=1)
        name = f"{host}-{stamp(later)}"
        rel = archive_path(stream, name)
    if name != path.name[: -len(SEALED_SUFFIX)]:
        log.warning("roll %s: the archive holds another segment's file under its name; published as %s", path, rel)
    return rel


def _first_line_digest(stream) -> bytes:
    """A digest of a file's first non-empty line, read a chunk at a time (a line can be megabytes)."""
    digest, started = hashlib.blake2b(digest_size=16), False
    with stream as f:
        while chunk := f.read(READ_CHUNK):
            if not started:
                chunk = chunk.lstrip(b"\n")
                started = bool(chunk)
            end = chunk.find(b"\n")
            digest.update(chunk if end < 0 else chunk[:end])
            if end >= 0:
                break
    return digest.digest()


def _roll_verbatim(store: Store, rel: str, path: Path, on_published: Callable[[str], None]) -> RollResult:
    compressor = isal_zlib.compressobj(GZIP_LEVEL, isal_zlib.DEFLATED, 31)
    lines, last = 0, b"\n"
    with store.atomic_output(rel) as out, open(path, "rb") as src:
        while chunk := src.read(READ_CHUNK):
            lines += chunk.count(b"\n")
            last = chunk[-1:]
            out.write(compressor.compress(chunk))
        if last != b"\n":  # cannot happen after complete writes; never end a file mid-line
            lines += 1
            out.write(compressor.compress(b"\n"))
        out.write(compressor.flush())
    return _published(store, rel, path, lines, 0, on_published)


def _published(store: Store, rel: str, segment: Path, lines: int, dropped: int,
               on_published: Callable[[str], None]) -> RollResult:
    """Once the archive file and its name are on disk (and `on_published` is done), the spool copy goes."""
    if store.is_local:
        final = Path(store.full(rel))
        fd = os.open(final, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(final.parent)
        for stale in final.parent.glob(f".{final.name}.tmp-*"):  # left by a crash during an earlier roll
            stale.unlink(missing_ok=True)
    on_published(rel)
    os.remove(segment)
    fsync_dir(segment.parent)
    return RollResult(rel, lines, dropped)


class Roller:
    """Publishes sealed segments to the archive from a background thread, retrying failures."""

    def __init__(self, root: Path, store: Store, metrics: Metrics,
                 on_rolled: Callable[[str, RollResult], None] = lambda stream, result: None,
                 retry_max_s: float = 60.0, clock: Callable[[], float] = time.time):
        self.root, self.store, self.metrics, self.on_rolled = root, store, metrics, on_rolled
        self.retry_max_s, self.clock = retry_max_s, clock
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._check: set[str] = set()  # segments a failed write left: their lines are checked
        self._thread = threading.Thread(target=self._run, name="spool-roller", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def sealed(self, path: Path, needs_check: bool) -> None:
        """A writer sealed `path`: roll it now."""
        if needs_check:
            self._check.add(path.name)
        self._wake.set()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.ident is not None:
            self._thread.join()

    def roll_pending(self, check_all: bool = False) -> tuple[int, int]:
        """Roll every sealed segment, oldest first; (rolled, failed). `check_all` at start: what a
        crash left is checked line by line."""
        rolled = failed = 0
        for stream, path in sealed_segments(self.root):
            try:
                result = roll_segment(self.store, stream, path, check=check_all or path.name in self._check,
                                      on_published=lambda rel, stream=stream: self._mark_if_late(stream, rel))
                self._check.discard(path.name)
            except FileNotFoundError:
                continue  # rolled by a previous pass that died before its cleanup was seen
            except Exception as exc:  # S3 down, disk error: keep the segment and retry later
                failed += 1
                self.metrics.inc("torchci_receiver_roll_failures_total", stream=stream)
                log.error("rolling %s into %s failed (kept, will retry): %s", path, self.store.display(), exc)
                continue
            rolled += 1
            self.metrics.inc("torchci_receiver_rolled_total", stream=stream)
            self.metrics.inc("torchci_receiver_rolled_records_total", result.lines, stream=stream)
            self.metrics.inc("torchci_receiver_roll_dropped_lines_total", result.dropped, stream=stream)
            self.on_rolled(stream, result)
        return rolled, failed

    def _mark_if_late(self, stream: str, rel: str) -> None:
        marker = mark_late(self.store, rel, self.clock())
        if marker is None:
            return
        self.metrics.inc("torchci_receiver_late_segments_total", stream=stream)
        log.warning("rolled %s more than a day late: its day is no longer watched by the refresh sensor; marked "
                    "%s, so the sensor refreshes that day (with the refresh off, run the day's partition again)",
                    rel, self.store.display(marker))

    def _run(self) -> None:
        backoff = 1.0
        while not self._stop.is_set():
            self._wake.wait(backoff if backoff > 1.0 else 5.0)
            self._wake.clear()
            try:
                _, failed = self.roll_pending()
            except Exception:  # e.g. the spool folder unreadable: keep trying, never die silently
                log.exception("rolling the spool failed; retrying")
                failed = 1
            backoff = min(backoff * 2, self.retry_max_s) if failed else 1.0
