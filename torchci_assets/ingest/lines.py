"""Streaming JSON-lines reading with every unreadable part accounted for.

Archives are append-only JSONL files, often gzipped, sometimes cut short (an upload that
died, a disk that filled). Reading keeps every complete line before the damage and reports
the damage itself as one reject, so a bad tail never costs the good head of a file.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

from resources.storage import Store
from torchci_assets.ingest.rejects import Reject

CHUNK = 8 << 20


def _read_ahead(store: Store, path: str, chunks: queue.Queue, stop: threading.Event) -> None:
    """Read and decompress in a thread: pyarrow releases the GIL, so this overlaps parsing."""
    try:
        with store.open_input(path) as stream:
            while not stop.is_set():
                chunk = stream.read(CHUNK)
                chunks.put(chunk)
                if not chunk:
                    return
    except OSError as exc:
        chunks.put(exc)


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
                if line.strip():
                    yield lineno, line
        if tail.strip():
            yield lineno + 1, tail
    finally:
        stop.set()
        while reader.is_alive():  # unblock a reader waiting on a full queue
            try:
                chunks.get_nowait()
            except queue.Empty:
                reader.join(0.01)
