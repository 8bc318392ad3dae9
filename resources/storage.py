"""Archive, lake and outputs storage: a root folder on the local disk or on S3.

Everything that touches a path goes through `Store`, so the same ingest and derivation
code runs on `./var/lake` and on `s3://bucket/prefix`. It is built on pyarrow's
filesystems because DuckDB's httpfs extension cannot be installed offline, and pyarrow's
S3 client is the one the Parquet readers and writers already use.

Atomicity: a file becomes visible only when it is complete. Locally it is written under a
hidden temporary name in the same folder and renamed over the final name (rename is
atomic on POSIX); on S3 it is staged on local disk and then uploaded to the final key,
which S3 only exposes when the upload completes. Each lake partition of a table is a fixed set of file names, so
replacing a file replaces that part of the partition exactly, never adding a duplicate.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs

DAY_RE = re.compile(r"^day=(\d{4}-\d{2}-\d{2})$")
UPLOAD_CHUNK = 16 << 20


def s3_options() -> dict:
    """S3FileSystem settings from the environment: an endpoint override (MinIO, moto, Ceph...) and
    the region. Credentials are not read here: the AWS SDK's own chain finds them (AWS_* variables,
    ~/.aws, an instance or pod role), so a Kubernetes service account needs no secret at all."""
    endpoint = os.environ.get("TORCHCI_S3_ENDPOINT") or None
    options = {"region": os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"}
    if endpoint:
        # "http://host:port" or "https://host:port"; a bare "host:port" means https.
        options["scheme"], _, rest = endpoint.rpartition("://")
        options["scheme"] = options["scheme"] or "https"
        options["endpoint_override"] = rest
    return options


def _filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    if uri.startswith("s3://"):
        return pafs.S3FileSystem(**s3_options()), uri[len("s3://"):].rstrip("/")
    path = uri[len("file://"):] if uri.startswith("file://") else uri
    return pafs.LocalFileSystem(), os.path.abspath(path)


@dataclass(frozen=True)
class FileEntry:
    """A file under a store's root: `path` is relative to the root, with '/' separators."""

    path: str
    size: int


class Store:
    """A root folder on some filesystem, addressed with relative '/'-separated paths."""

    def __init__(self, uri: str):
        self.uri = uri
        self.fs, self.root = _filesystem(uri)
        self.is_local = isinstance(self.fs, pafs.LocalFileSystem)

    def __repr__(self) -> str:
        return f"Store({self.uri!r})"

    def full(self, rel: str) -> str:
        """The path of `rel` as the underlying filesystem (or DuckDB, when local) sees it."""
        return f"{self.root}/{rel}" if rel else self.root

    def display(self, rel: str = "") -> str:
        """The path of `rel` as a user would type it (s3://... or an absolute local path)."""
        return ("s3://" if not self.is_local else "") + self.full(rel)

    # ---- reading -------------------------------------------------------------------

    def exists(self, rel: str) -> bool:
        return self.fs.get_file_info(self.full(rel)).type != pafs.FileType.NotFound

    def list_days(self, prefix: str) -> list[str]:
        """The `day=YYYY-MM-DD` folders under `prefix`, as sorted day strings."""
        selector = pafs.FileSelector(self.full(prefix), allow_not_found=True)
        days = []
        for info in self.fs.get_file_info(selector):
            m = DAY_RE.match(info.base_name)
            if m and info.type == pafs.FileType.Directory:
                days.append(m.group(1))
        return sorted(days)

    def list_dirs(self, prefix: str) -> list[str]:
        """Names of the visible folders directly under `prefix`."""
        selector = pafs.FileSelector(self.full(prefix), allow_not_found=True)
        return sorted(i.base_name for i in self.fs.get_file_info(selector)
                      if i.type == pafs.FileType.Directory and i.base_name[:1] not in (".", "_"))

    def list_files(self, prefix: str, suffixes: tuple[str, ...]) -> list[FileEntry]:
        """Files below `prefix` (recursively) ending in one of `suffixes`, sorted by path.

        Hidden files (leading '.' or '_', as temporary and marker files are named) are skipped.
        """
        selector = pafs.FileSelector(self.full(prefix), recursive=True, allow_not_found=True)
        skip = len(self.root) + 1
        out = []
        for info in self.fs.get_file_info(selector):
            if info.type != pafs.FileType.File or info.base_name[:1] in (".", "_"):
                continue
            if info.base_name.endswith(suffixes):
                out.append(FileEntry(info.path[skip:], info.size))
        out.sort(key=lambda e: e.path)
        return out

    def open_input(self, rel: str) -> pa.NativeFile:
        """A sequential stream of the file's bytes, gunzipped when the name ends in .gz."""
        compression = "gzip" if rel.endswith(".gz") else None
        return self.fs.open_input_stream(self.full(rel), compression=compression)

    def read_bytes(self, rel: str) -> bytes:
        with self.fs.open_input_stream(self.full(rel), compression=None) as f:
            return f.read()

    # ---- writing -------------------------------------------------------------------

    @contextlib.contextmanager
    def atomic_output(self, rel: str) -> Iterator[pa.NativeFile]:
        """A stream whose content appears at `rel` only if the block completes."""
        final = self.full(rel)
        parent, name = final.rsplit("/", 1)
        if self.is_local:
            self.fs.create_dir(parent, recursive=True)
            tmp = f"{parent}/.{name}.tmp-{uuid.uuid4().hex}"
        else:
            # S3 folders are virtual; the content is staged on local disk, see _upload.
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".part")
            os.close(fd)
        try:
            with pa.OSFile(tmp, "wb") as out:
                yield out
            if self.is_local:
                os.replace(tmp, final)
            else:
                self._upload(tmp, final)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.remove(tmp)

    def _upload(self, local: str, final: str) -> None:
        """Copy a complete local file to the object `final`.

        pyarrow cannot abort an S3 upload from Python: closing the stream, which the `with`
        does even when the block raises, publishes whatever was written. So nothing is sent
        until the content is complete on local disk. The upload itself is one PutObject for
        small files and a multipart upload for large ones; S3 exposes neither until it
        completes, so a process killed mid-upload leaves the previous object in place.
        """
        # compression=None: pyarrow would otherwise gzip again a name ending in .gz.
        with pa.OSFile(local, "rb") as src, self.fs.open_output_stream(final, compression=None) as out:
            while chunk := src.read(UPLOAD_CHUNK):
                out.write(chunk)

    def write_bytes(self, rel: str, data: bytes) -> None:
        with self.atomic_output(rel) as out:
            out.write(data)

    def delete(self, rel: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.delete_file(self.full(rel))
