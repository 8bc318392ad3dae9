"""Streaming JSON-lines reading with every unreadable part accounted for, in bounded memory.

Archives are append-only JSONL files, often gzipped, sometimes cut short (an upload that
died, a disk that filled). Reading keeps every complete line before the damage and reports
the damage itself as one reject, so a bad tail never costs the good head of a file.

Memory is bounded by the line cap, not by the input: gzip is inflated at most CHUNK bytes at
a time (a few KB of gzip can inflate to gigabytes), and a line longer than the cap is skipped
as it streams by, never held whole, and reported as one reject. The cap,
`TORCHCI_MAX_LINE_BYTES`, defaults to 32 MiB: GitHub caps a webhook payload at 25 MB, and the
archive envelope adds a few hundred bytes.
"""

from __future__ import annotations

import os
import queue
import threading
import zlib
from collections.abc import Iterable, Iterator

from isal import isal_zlib  # Intel ISA-L inflate: same API as zlib, about twice as fast

from resources.storage import RefusedPath, Store
from torchci_assets.ingest.rejects import Reject

CHUNK = 8 << 20
DEFAULT_MAX_LINE_BYTES = 32 << 20


def max_line_bytes() -> int:
    """The line cap in bytes, from TORCHCI_MAX_LINE_BYTES (read at each call, so a run can set it)."""
    text = os.environ.get("TORCHCI_MAX_LINE_BYTES", "").strip()
    if not text:
        return DEFAULT_MAX_LINE_BYTES
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"TORCHCI_MAX_LINE_BYTES={text!r} is not a number of bytes") from None
    if value < 1024:
        raise ValueError(f"TORCHCI_MAX_LINE_BYTES={value} is too small (at least 1024 bytes)")
    return value


def too_long(limit: int) -> str:
    return f"line longer than {limit} bytes (TORCHCI_MAX_LINE_BYTES): skipped without reading it whole"


def inflate(compressed: Iterable[bytes]) -> Iterator[bytes]:
    """Gunzip a stream of compressed chunks, at most CHUNK bytes out at a time.

    ISA-L's zlib-compatible inflate rather than pyarrow's stream, so every byte before a cut in
    a truncated gzip is still returned; concatenated gzip members (what appending to a .gz file
    produces) are read one after another. Raises OSError when the stream stops mid-member.
    """
    inflater, fed = isal_zlib.decompressobj(wbits=31), False
    for data in compressed:
        while data:
            fed = True
            out = inflater.decompress(data, CHUNK)
            if out:
                yield out
            if inflater.eof:
                data = inflater.unused_data  # the start of the next member, if any
                inflater, fed = isal_zlib.decompressobj(wbits=31), False
            elif inflater.unconsumed_tail:
                data = inflater.unconsumed_tail
            elif len(out) == CHUNK:
                data = b""
                while len(out) == CHUNK and not inflater.eof:  # output still pending, no input left
                    out = inflater.decompress(b"", CHUNK)
                    if out:
                        yield out
                if inflater.eof:
                    data = inflater.unused_data
                    inflater, fed = isal_zlib.decompressobj(wbits=31), False
            else:
                data = b""
    if fed and not inflater.eof:
        raise OSError("the gzip stream ends before its end-of-stream marker")


def _chunks(store: Store, path: str) -> Iterator[bytes]:
    """The file's bytes in chunks of at most CHUNK, gunzipped for .gz names."""
    with store.open_raw(path) as raw:
        def compressed() -> Iterator[bytes]:
            while chunk := raw.read(CHUNK // 8 if path.endswith(".gz") else CHUNK):
                yield chunk
        yield from inflate(compressed()) if path.endswith(".gz") else compressed()


def _read_ahead(store: Store, path: str, chunks: queue.Queue, stop: threading.Event) -> None:
    """Read and decompress in a thread (zlib and file reads release the GIL), overlapping parsing."""
    try:
        for chunk in _chunks(store, path):
            if stop.is_set():
                return
            if chunk:
                chunks.put(chunk)
        chunks.put(b"")
    except (OSError, zlib.error, isal_zlib.error) as exc:
        chunks.put(exc if isinstance(exc, OSError) else OSError(str(exc)))


def split_lines(chunks: Iterable[bytes], limit: int) -> Iterator[tuple[int, bytes | None]]:
    """(line number, line) for every line of a stream of chunks, blank ones included.

    A line longer than `limit` bytes comes out as (number, None): its bytes are dropped as
    they arrive, so memory is `limit` plus one chunk whatever the line's length.
    """
    lineno = 0
    tail = b""
    skipping = False  # inside a line already known to be too long
    for chunk in chunks:
        if skipping:
            newline = chunk.find(b"\n")
            if newline < 0:
                continue
            lineno += 1
            yield lineno, None
            skipping, chunk = False, chunk[newline + 1:]
        lines = chunk.split(b"\n")  # the tail is joined to the first line only: no copy of the chunk
        if tail:
            lines[0] = tail + lines[0]
        tail = lines.pop()
        for line in lines:
            lineno += 1
            yield lineno, (line if len(line) <= limit else None)
        if len(tail) > limit:
            skipping, tail = True, b""
    if skipping:
        yield lineno + 1, None
    elif tail:
        yield lineno + 1, tail


def iter_lines(store: Store, path: str, source: str, rejects: list[Reject],
               limit: int | None = None) -> Iterator[tuple[int, bytes]]:
    """Yield (line number, line bytes) for each non-empty line of `path`.

    A read error (truncated or corrupt gzip, I/O failure) ends the file: the partial line at
    the cut is dropped and one reject says where and why. A file the store refuses to open (a
    symbolic link, see `Store.open_raw`) is one reject naming the path, never its content. A
    line longer than `limit` (default `max_line_bytes()`) is one reject. At most a few chunks
    are buffered ahead, so memory stays bounded whatever the file's size.
    """
    limit = max_line_bytes() if limit is None else limit
    chunks: queue.Queue = queue.Queue(maxsize=3)
    stop = threading.Event()
    reader = threading.Thread(target=_read_ahead, args=(store, path, chunks, stop), daemon=True)
    reader.start()
    last = 0
    cut: bytes | None = None  # the incomplete line at a read error
    failure: list[OSError] = []

    def received() -> Iterator[bytes]:
        while True:
            chunk = chunks.get()
            if isinstance(chunk, OSError):
                failure.append(chunk)
                return
            if not chunk:
                return
            yield chunk

    try:
        for lineno, line in split_lines(received(), limit):
            if failure:  # the line at the cut is incomplete: dropped, the reject says where
                cut = line
                break
            if line is None:
                rejects.append(Reject(source, f"{path}:{lineno}", too_long(limit), None))
            elif line and not line.isspace():
                yield lineno, line
            last = lineno
        if failure:
            exc = failure[0]
            if isinstance(exc, RefusedPath):
                rejects.append(Reject(source, path, str(exc), None))
            else:
                what = "truncated or corrupt gzip" if path.endswith(".gz") else "unreadable file"
                rejects.append(Reject(source, f"{path}:{last + 1}",
                                      f"{what}: stopped after line {last} ({exc})", Reject.sample_of(cut)))
    finally:
        stop.set()
        while reader.is_alive():  # unblock a reader waiting on a full queue
            try:
                chunks.get_nowait()
            except queue.Empty:
                reader.join(0.01)


def iter_chunks(store: Store, path: str) -> Iterator[bytes]:
    """The file's bytes in chunks of at most a few MB (gunzipped for .gz names), for readers that
    split records themselves. Damage (a truncated or corrupt gzip, an I/O failure) raises OSError
    after every byte before it has been yielded."""
    try:
        yield from _chunks(store, path)
    except (zlib.error, isal_zlib.error) as exc:
        raise OSError(str(exc)) from None
