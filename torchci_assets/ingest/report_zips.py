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
- an encrypted member, or one compressed with a method zipfile lacks (Deflate64), is rejected unread;
- a zip whose central directory cannot be read, or declares more than MAX_ENTRIES entries or
  MAX_DIRECTORY_BYTES bytes (zipfile would hold all of it), rejects the whole file, named in the reject.
Every other member of a zip with a bad one is still read.
"""

from __future__ import annotations

import gzip
import os
import re
import struct
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from resources.storage import RefusedPath, Store
from torchci_assets.ingest.junit import ReportRejected, max_report_bytes

ZIP_SUFFIX = ".zip"
MAX_RATIO = 200  # XML compresses 10-30x; 200x is a bomb, not a report
MAX_MEMBERS = 20_000
# The central directory zipfile reads whole and turns into ~300 bytes of objects per entry, every
# entry (folders, logs) and not only reports: 20,000 reports with long names take ~4 MB of it.
MAX_ENTRIES = 100_000
MAX_DIRECTORY_BYTES = 8 << 20

_EOCD = struct.Struct("<4s4H2LH")  # signature, disks, entries here, entries, directory size, offset, comment
_ZIP64_LOCATOR = struct.Struct("<4sLQL")  # signature, disk, offset of the zip64 record, disks
_ZIP64_EOCD = struct.Struct("<4sQ2H2L4Q")  # signature, size, versions, disks, entries here, entries, size, offset


def max_zip_bytes() -> int:
    """The most bytes one zip may decompress to, from TORCHCI_MAX_ZIP_BYTES (default 4 GiB)."""
    text = os.environ.get("TORCHCI_MAX_ZIP_BYTES", "").strip()
    return int(text) if text else 4 << 30


_DRIVE = re.compile(r"^[A-Za-z]:")
# The compression methods zipfile decompresses; the others raise NotImplementedError on open.
_METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA)


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
    if info.flag_bits & 0x1:  # zipfile would ask for a password (RuntimeError)
        return ReportRejected("encrypted", f"member {info.filename[:200]!r} is encrypted")
    if info.compress_type not in _METHODS:  # e.g. Deflate64 (9), what Windows writes for large files
        return ReportRejected("unsupported-method", f"member {info.filename[:200]!r} is compressed with method "
                              f"{info.compress_type}, which Python's zipfile cannot read")
    if info.file_size > MAX_RATIO * max(info.compress_size, 1) and info.file_size > 1 << 20:
        return ReportRejected("zip-bomb", f"member {info.filename[:200]!r} declares {info.file_size} bytes from "
                              f"{info.compress_size} compressed (more than {MAX_RATIO}x)")
    if info.file_size > max_report_bytes():
        return ReportRejected("too-large", f"member {info.filename[:200]!r} declares {info.file_size} bytes, more "
                              "than TORCHCI_MAX_REPORT_BYTES")
    return None


def directory_extent(raw) -> tuple[int, int] | None:
    """(entries, central directory bytes) as the zip's end records declare them, found where zipfile
    looks for them (the zip64 record, when there is one, just before its locator), or None when
    there is no end record (zipfile then says why the zip is unreadable).

    zipfile reads the whole directory and builds every entry before its caller sees one, so this
    is the only place a zip's directory can be bounded before it costs memory."""
    size = raw.seek(0, 2)
    searched = min(size, _EOCD.size + 0xFFFF)  # the record, then a comment of up to 64 KiB
    start = max(size - searched - _ZIP64_LOCATOR.size - _ZIP64_EOCD.size, 0)
    raw.seek(start)
    tail = raw.read(size - start)
    i = len(tail) - _EOCD.size
    if not (tail[i:i + 4] == b"PK\x05\x06" and tail.endswith(b"\0\0")):
        i = tail.rfind(b"PK\x05\x06", len(tail) - searched, len(tail) - _EOCD.size + 1)
        if i < 0:
            return None
    _, _, _, _, entries, directory, _, _ = _EOCD.unpack_from(tail, i)
    locator, record = i - _ZIP64_LOCATOR.size, i - _ZIP64_LOCATOR.size - _ZIP64_EOCD.size
    if record >= 0 and tail[locator:locator + 4] == b"PK\x06\x07" and tail[record:record + 4] == b"PK\x06\x06":
        *_, entries, directory, _ = _ZIP64_EOCD.unpack_from(tail, record)
    return entries, directory


def _check_directory(raw) -> None:
    """Refuse a zip whose directory is too large to list, before zipfile lists it."""
    extent = directory_extent(raw)
    if extent is None:
        return
    entries, directory = extent
    if entries > MAX_ENTRIES or directory > MAX_DIRECTORY_BYTES:
        raise ReportRejected("zip-too-many", f"the zip's directory declares {entries} entries in {directory} bytes, "
                             f"more than {MAX_ENTRIES} entries or {MAX_DIRECTORY_BYTES} bytes")


def zip_members(archive: Store, path: str) -> Iterator[tuple[Member, BinaryIO | None]]:
    """The zip's XML reports, each with its open decompressed stream (None when refused).

    Raises ReportRejected for the whole zip when it cannot be read as one; a stream raises it
    for its member when the zip's total budget runs out while reading."""
    with _open_random(archive, path) as raw:
        try:
            _check_directory(raw)
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
                stream = _open_member(zf, member)
                if stream is None:
                    yield member, None
                    continue
                with stream:
                    counted = _Counted(stream, budget)
                    yield member, (gzip.GzipFile(fileobj=counted) if info.filename.endswith(".gz") else counted)


def _open_member(zf: zipfile.ZipFile, member: Member) -> BinaryIO | None:
    """The member's decompressing stream, or None with `member.problem` set."""
    name = member.info.filename[:200]
    try:
        return zf.open(member.info)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        member.problem = ReportRejected("corrupt-zip", f"member {name!r}: {exc}")
    except (RuntimeError, NotImplementedError) as exc:
        # What _check cannot foresee: strong encryption, patched data, a codec this Python was built without.
        member.problem = ReportRejected("unsupported-method", f"member {name!r}: {exc}")
    return None
