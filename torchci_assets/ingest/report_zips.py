"""Test reports as GitHub Actions artifact zips (`test-reports/day=D/<run>/<attempt>/<job>/*.zip`).

`actions/upload-artifact` (and PyTorch's own `zip -r test-reports-*.zip test/test-reports`) stores
a job's reports as one zip with nested folders and many XML files. Each member is read like a bare
report under the zip's path (`.../<job>/<name>.zip/test/test-reports/python-pytest/<module>/x.xml`,
so the invoking file comes from the member's folders as it would from a bare file's), one member
at a time and decompressed as a stream: memory holds one report, never the archive.

A zip is untrusted input, so:
- a member whose declared size exceeds MAX_RATIO times its compressed size is a zip bomb and is
  rejected unread; the bytes actually decompressed are counted too (headers can lie), per member
  against the report cap and per zip against MAX_ZIP_BYTES;
- a member whose name climbs out of the zip (`..`, an absolute path, a drive, a backslash) is rejected;
- a zip whose central directory cannot be read rejects the whole file, named in the reject.
Every other member of a zip with a bad one is still read.
"""

from __future__ import annotations

import gzip
import os
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from resources.storage import RefusedPath, Store
from torchci_assets.ingest.junit import ReportRejected, max_report_bytes

ZIP_SUFFIX = ".zip"
MAX_RATIO = 200  # XML compresses 10-30x; 200x is a bomb, not a report
MAX_MEMBERS = 20_000


def max_zip_bytes() -> int:
    """The most bytes one zip may decompress to, from TORCHCI_MAX_ZIP_BYTES (default 4 GiB)."""
    text = os.environ.get("TORCHCI_MAX_ZIP_BYTES", "").strip()
    return int(text) if text else 4 << 30


_DRIVE = re.compile(r"^[A-Za-z]:")


def unsafe_name(name: str) -> str | None:
    """Why a member's name is refused, or None."""
    if "\\" in name or name.startswith("/") or _DRIVE.match(name):
        return "an absolute path or a backslash"
    if any(part == ".." for part in name.split("/")):
        return "a '..' component climbing out of the zip"
    return None


@dataclass
class Member:
    """One report inside a zip: its archive path (zip path + '/' + member name), or why it is refused."""

    path: str
    info: zipfile.ZipInfo
    problem: ReportRejected | None = None


def _open_random(archive: Store, path: str):
    """A seekable handle: a zip's directory is at its end."""
    try:
        if archive.is_local:
            return archive.open_raw(path)
        return archive.fs.open_input_file(archive.full(path))
    except RefusedPath as exc:
        raise ReportRejected("refused", str(exc)) from None
    except OSError as exc:
        raise ReportRejected("unreadable", f"opening the file failed: {exc}") from None


class _Counted:
    """A member's stream that stops at the zip's remaining byte budget."""

    def __init__(self, stream: BinaryIO, budget: list[int]):
        self.stream = stream
        self.budget = budget

    def read(self, n: int = -1) -> bytes:
        try:
            data = self.stream.read(n)
        except zipfile.BadZipFile as exc:  # a CRC or header mismatch found while reading
            raise ReportRejected("corrupt-zip", f"reading the member failed: {exc}") from None
        self.budget[0] -= len(data)
        if self.budget[0] < 0:
            raise ReportRejected("zip-too-large", f"the zip decompresses to more than {max_zip_bytes()} bytes "
                                 "(TORCHCI_MAX_ZIP_BYTES)")
        return data


def _check(info: zipfile.ZipInfo, path: str) -> ReportRejected | None:
    why = unsafe_name(info.filename)
    if why:
        return ReportRejected("unsafe-path", f"member {info.filename[:200]!r} has {why}")
    if info.file_size > MAX_RATIO * max(info.compress_size, 1) and info.file_size > 1 << 20:
        return ReportRejected("zip-bomb", f"member {info.filename[:200]!r} declares {info.file_size} bytes from "
                              f"{info.compress_size} compressed (more than {MAX_RATIO}x)")
    if info.file_size > max_report_bytes():
        return ReportRejected("too-large", f"member {info.filename[:200]!r} declares {info.file_size} bytes, more "
                              "than TORCHCI_MAX_REPORT_BYTES")
    return None


def zip_members(archive: Store, path: str) -> Iterator[tuple[Member, BinaryIO | None]]:
    """The zip's XML reports, each with its open decompressed stream (None when refused).

    Raises ReportRejected for the whole zip when it cannot be read as one; a stream raises it
    for its member when the zip's total budget runs out while reading."""
    with _open_random(archive, path) as raw:
        try:
            zf = zipfile.ZipFile(raw)
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
            raise ReportRejected("corrupt-zip", f"not a readable zip (central directory): {exc}") from None
        with zf:
            infos = [i for i in zf.infolist() if not i.is_dir() and i.filename.endswith((".xml", ".xml.gz"))]
            if len(infos) > MAX_MEMBERS:
                raise ReportRejected("zip-too-many", f"{len(infos)} reports in one zip, more than {MAX_MEMBERS}")
            budget = [max_zip_bytes()]
            for info in infos:
                member = Member(f"{path}/{info.filename}", info, _check(info, path))
                if member.problem is not None:
                    yield member, None
                    continue
                try:
                    with zf.open(info) as stream:
                        counted = _Counted(stream, budget)
                        yield member, (gzip.GzipFile(fileobj=counted) if info.filename.endswith(".gz") else counted)
                except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
                    member.problem = ReportRejected("corrupt-zip", f"member {info.filename[:200]!r}: {exc}")
                    yield member, None
