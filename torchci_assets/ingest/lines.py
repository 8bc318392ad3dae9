"""Streaming JSON-lines reading with every unreadable part accounted for.

Archives are append-only JSONL files, often gzipped, sometimes cut short (an upload that
died, a disk that filled). Reading keeps every complete line before the damage and reports
the damage itself as one reject, so a bad tail never costs the good head of a file.
"""

from __future__ import annotations

import queue
import zlib

from isal import isal_zlib  # Intel ISA-L inflate: same API as zlib, about twice as fast
import threading
from collections.abc import Iterator

from resources.storage import Store
from torchci_assets.ingest.rejects import Reject

CHUNK = 8 << 20


def _chunks(store: Store, path: str) -> Iterator[bytes]:
    """The file's bytes in chunks, gunzipped for .gz names.

    Decompression is done here (ISA-L's zlib-compatible inflate) rather than by pyarrow's stream, so every byte
    before a cut in a truncated gzip is still returned; concatenated gzip members (what
    appending to a .gz file produces) are read one after another.
    """
    with store.fs.open_input_stream(store.full(path), compression=None) as raw:
        if not path.endswith(".gz"):
            while chunk := raw.read(CHUNK):
                yield chunk
            return
        inflater, fed = isal_zlib.decompressobj(wbits=31), False
        while compressed := raw.read(CHUNK // 8):
            while compressed:
                fed = True
                # At most CHUNK bytes out per call: a highly compressible file (a log of one
                # repeated line) must not inflate a whole read into memory at once.
                if out := inflater.decompress(compressed, CHUNK):
                    yield out
                if inflater.eof:
                    compressed = inflater.unused_data  # the start of the next member, if any
                    inflater, fed = isal_zlib.decompressobj(wbits=31), False
                else:
                    compressed = inflater.unconsumed_tail
        if fed and not inflater.eof:
            if out := inflater.flush():
                yield out
            if not inflater.eof:
                raise OSError("the gzip stream ends before its end-of-stream marker")


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
        chunks.put(OSError(str(exc)))


def iter_lines(store: Store, path: str, source: str, rejects: list[Reject]) -> Iterator[tuple[int, bytes]]:
    """Yield (line number, line bytes) for each non-empty line of `path`.

    A read error (truncated or corrupt gzip, I/O failure) ends the file: the partial line at
    the cut is dropped and one reject says where and why. At most a few chunks are buffered
    ahead, so memory stays bounded whatever the file's size.
    """
    chunks: queue.Queue = queue.Queue(maxsize=3)
    stop = threading.Event()
    reader = threading.Thread(target=_read_ahead, args=(store, path, chunks, stop), daemon=True)
    reader.start()
    lineno = 0
    tail = b""
    try:
        while True:
            chunk = chunks.get()
            if isinstance(chunk, OSError):
                what = "truncated or corrupt gzip" if path.endswith(".gz") else "unreadable file"
                rejects.append(Reject(source, f"{path}:{lineno + 1}",
                                      f"{what}: stopped after line {lineno} ({chunk})", Reject.sample_of(tail)))
                return
            if not chunk:
                break
            lines = (tail + chunk).split(b"\n")
            tail = lines.pop()
            for line in lines:
                lineno += 1
                if line and not line.isspace():
                    yield lineno, line
        if tail and not tail.isspace():
            yield lineno + 1, tail
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
