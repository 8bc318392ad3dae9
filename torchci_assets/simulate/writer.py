"""Gzipped JSON-lines files that roll over by hour and size, like a webhook collector's.

The gzip stream is produced with zlib directly (header mtime 0), so the same lines give
the same bytes on every run.
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path

ROLL_BYTES = 32 * 1024 * 1024
_CHUNK = 1024 * 1024


def gzip_bytes(data: bytes, level: int = 6) -> bytes:
    c = zlib.compressobj(level, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


def write_atomic(path: Path, data: bytes) -> None:
    """Readers of the archive never see a half-written file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


class RollingJsonl:
    """Append lines under `folder`; a new file starts for each new `key` (e.g. the hour)
    or once the current file holds ROLL_BYTES of uncompressed JSON."""

    def __init__(self, folder: Path, prefix: str, level: int = 1):
        self.folder = folder
        self.prefix = prefix
        self.level = level
        self.files: list[Path] = []
        self.raw_bytes = 0
        self.gz_bytes = 0
        self.lines = 0
        self._key: str | None = None
        self._part = 0
        self._fh = None
        self._z = None
        self._buf: list[bytes] = []
        self._buf_len = 0
        self._file_raw = 0

    def write(self, key: str, line: bytes) -> None:
        if key != self._key or self._file_raw >= ROLL_BYTES:
            self._part = self._part + 1 if key == self._key else 0
            self._key = key
            self._open()
        self._buf.append(line)
        self._buf_len += len(line)
        self._file_raw += len(line)
        self.lines += 1
        if self._buf_len >= _CHUNK:
            self._flush_buf()

    def _open(self) -> None:
        self._close()
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{self.prefix}-{self._key}-{self._part:03d}.jsonl.gz"
        self.files.append(path)
        self._fh = open(path.with_name(f".{path.name}.tmp"), "wb")
        self._z = zlib.compressobj(self.level, zlib.DEFLATED, 31)
        self._file_raw = 0

    def _flush_buf(self) -> None:
        data = b"".join(self._buf)
        self.raw_bytes += len(data)
        out = self._z.compress(data)
        self.gz_bytes += len(out)
        self._fh.write(out)
        self._buf, self._buf_len = [], 0

    def _close(self) -> None:
        if self._fh is None:
            return
        self._flush_buf()
        tail = self._z.flush()
        self.gz_bytes += len(tail)
        self._fh.write(tail)
        self._fh.close()
        final = self.files[-1]
        os.replace(final.with_name(f".{final.name}.tmp"), final)
        self._fh = None

    def close(self) -> None:
        self._close()
