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

Staging names carry their writer: `.<name>.tmp-<owner>-<nonce>` (and `.pending-` for the ingest's
multi-file commits, see `torchci_assets.ingest.commit`), where the owner is the run that writes
them. A writer killed with SIGKILL cannot remove its staging files; `sweep_staging` removes those
of a folder whose owner is no longer alive, as the caller (who knows which runs are) decides.

Confinement: a local store never reads outside its root. Listing does not follow symbolic links
(a link, to a file or a folder, is listed as refused), and opening walks the path one folder at a
time with O_NOFOLLOW, so a link swapped in after the listing is refused too. On S3 there are no
links; a key is a key. A local name that is not valid UTF-8 (a file, or a folder and all below it)
is listed as refused too, under a readable name: it could not be stored as a path anywhere.
"""

from __future__ import annotations

import collections
import contextlib
import datetime as dt
import errno
import json
import logging
import mimetypes
import os
import re
import stat
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs

from resources.listing_cache import ListingCache, sealed_files

DAY_RE = re.compile(r"^day=([0-9]{4}-[0-9]{2}-[0-9]{2})$")
UPLOAD_CHUNK = 16 << 20
# `.<final name>.<kind>-[<owner>-]<32 hex nonce>`; files written before owners existed have none.
STAGING_RE = re.compile(r"^\.(?P<name>.+)\.(?P<kind>tmp|pending)-(?:(?P<owner>[A-Za-z0-9_-]+)-)?[0-9a-f]{32}$")
_OWNER_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
# The journal of a commit of several files (`Store.commit_files`), a copy in each folder it changes:
# `_<...>` like the writers' own hidden files, so no reader of the Parquet parts lists it.
JOURNAL_RE = re.compile(r"^_commit-(?:(?P<owner>[A-Za-z0-9_-]+)-)?[0-9a-f]{32}\.json$")
# What this process wrote, deleted or renamed in each folder (and below it) of each store root, counted:
# a listing a reader keeps (`Lake(keep_listings=True)`) is taken again once its folder's count moved.
# Folders down to two levels only (a lake table's day folder): a few entries a day for a process that
# writes for months (the receiver), where the archive's report folders would be thousands. A change is
# counted once it landed: a listing taken while it was under way (another thread) then reads as older.
_WRITES: collections.Counter = collections.Counter()
# Sizes of the S3 objects a store listed (`Store.listed_sizes`), forgotten all at once past this many.
MAX_LISTED_SIZES = 100_000
_CACHED_DEPTH = 32  # a cached walk recurses: below this depth it walks without the cache
UNSTARTED, COMMITTING, DONE = "unstarted", "committing", "done"  # a journaled commit found left: `journal_state`


class RefusedPath(OSError):
    """A path a local store will not read: a symbolic link (to anywhere), or not a regular file.

    The message names the path, never the content or the link's target.
    """


def staging_name(name: str, kind: str, owner: str | None) -> str:
    """The hidden name a file is written under, beside its final `name`, by `owner` (a run id)."""
    tag = _OWNER_UNSAFE.sub("_", owner)[:64] + "-" if owner else ""
    return f".{name}.{kind}-{tag}{uuid.uuid4().hex}"


def journal_name(owner: str | None) -> str:
    """The name of the journal of a commit by `owner` (a run id), as `staging_name` tags it."""
    tag = _OWNER_UNSAFE.sub("_", owner)[:64] + "-" if owner else ""
    return f"_commit-{tag}{uuid.uuid4().hex}.json"


def staging_owner(base_name: str) -> tuple[bool, str | None]:
    """(is this a staging file name, its owner or None)."""
    m = STAGING_RE.match(base_name)
    return (m is not None, m.group("owner") if m else None)


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
        # allow_delayed_open: a file under a part (10 MB) goes up as one PutObject, with its metadata,
        # not as a multipart upload of three requests.
        return pafs.S3FileSystem(**s3_options(), allow_delayed_open=True), uri[len("s3://"):].rstrip("/")
    path = uri[len("file://"):] if uri.startswith("file://") else uri
    return pafs.LocalFileSystem(), os.path.abspath(path)


@dataclass(frozen=True)
class FileEntry:
    """A file under a store's root: `path` is relative to the root, with '/' separators.

    `refused` says why the store will not read it (a symbolic link, not a regular file); opening
    it raises `RefusedPath` with that reason, so a reader that turns open errors into rejects
    reports it like any unreadable file, by path.
    """

    path: str
    size: int
    refused: str | None = None
    stamp: str | None = None  # which version of the file: see `file_stamp`


@dataclass(frozen=True)
class Journal:
    """A commit's journal as found at `path` (one of its `copies`, one a folder it changes): the
    paths it deletes, then the (staged path, final path) renames, in the order they are done."""

    path: str
    owner: str | None
    deletes: tuple[str, ...]
    moves: tuple[tuple[str, str], ...]
    copies: tuple[str, ...]

    def paths(self) -> set[str]:
        """Every path the commit deletes or writes."""
        return {*self.deletes, *(final for _, final in self.moves)}


def _parent(rel: str) -> str:
    return rel.rsplit("/", 1)[0] if "/" in rel else ""


def file_stamp(st: os.stat_result) -> str:
    """A local file's version beyond its size: its modification time and inode, so a file replaced
    by another of the same size (a new inode, or a new time) reads as changed."""
    return f"{st.st_mtime_ns}.{st.st_ino}"


def content_metadata(path: str) -> dict[str, str]:
    """The object metadata of `path` on S3: its content type from its name (HTML and JSON as UTF-8)."""
    kind, encoding = mimetypes.guess_type(path)
    if kind is None or encoding is not None:  # a .gz is served as the bytes it is
        return {"Content-Type": "application/octet-stream"}
    return {"Content-Type": kind + ("; charset=utf-8" if kind.startswith("text/") or kind == "application/json" else "")}


# The settings that name a local store's folder.
FOLDER_SETTINGS = ("TORCHCI_ARCHIVE_URI", "TORCHCI_LAKE_URI", "TORCHCI_OUTPUTS_URI")
# The OS's refusals of a write: of the folder (its mode, its owner, a read-only mount), or of room.
WRITE_REFUSED = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})
NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
# A folder on the way that is not one (a file where `stats/` or a table's folder must be: see
# `file_in_the_way`), or a folder where the file must be.
NOT_A_FOLDER = frozenset({errno.EEXIST, errno.ENOTDIR, errno.EISDIR})


class WriteFailed(OSError):
    """A file of a local store the OS would not write, with what to do: an OSError still, for the
    callers that tell a storage failure from a bug. `blocker`: what is in the way, which the OS names
    no better than 'File exists', 'Not a directory' or 'Is a directory': a file where one of its
    folders must be, or a folder where the file itself must be (`is_folder`)."""

    def __init__(self, code: int, path: str, root: str, setting: str | None, blocker: str | None = None,
                 is_folder: bool = False):
        super().__init__(code, os.strerror(code), path)
        self.blocker = blocker
        elsewhere = f"point {setting} at" if setting else "use"
        if blocker is not None:
            what = "a folder where a file" if is_folder else "a file where a folder"
            self.advice = (f"{blocker} is {what} must be: move it away or "
                           + (f"point {setting} elsewhere" if setting else "use another folder"))
        elif code in NO_ROOM:
            self.advice = f"free space under {root} (or {elsewhere} a disk with room)"
        else:
            self.advice = f"make {root} writable for this user (or {elsewhere} a writable folder)"

    def __str__(self) -> str:
        cause = "" if self.blocker else f"{self.strerror}; "  # the advice names what is in the way
        return f"cannot write {self.filename}: {cause}{self.advice}, then run again (the file's previous version is kept)"


class Store:
    """A root folder on some filesystem, addressed with relative '/'-separated paths."""

    def __init__(self, uri: str):
        self.uri = uri
        self.fs, self.root = _filesystem(uri)
        self.is_local = isinstance(self.fs, pafs.LocalFileSystem)
        # Full path -> size of each S3 object as this store last listed or wrote it: pyarrow opens
        # an object by path with a HeadObject for its size, which a reader given the size spares.
        self.listed_sizes: dict[str, int] = {}
        # folder -> (this process's count of changes there when listed, its entries): see `keep_listings`
        self._kept: dict[str, tuple[int, list[pafs.FileInfo]]] | None = None

    def keep_listings(self) -> None:
        """From now on, on S3, list a folder once and again only after this process wrote, deleted
        or renamed something in it (`writes`), for every listing of it: its Parquet files, its
        hidden files, its journals, its staging files, its days. For a step, which reads the
        same folders again and again (an ingest checks, commits, records and sweeps each of its
        folders; the HUD reads its tables for every page): another process's changes are not seen
        until then, so no long-lived reader nor a ledger's writer keeps listings. Only folders
        at most two levels below the root (a lake table's day folder) are kept: deeper changes
        are not counted."""
        if not self.is_local and self._kept is None:
            self._kept = {}

    def _entries(self, folder: str) -> list[pafs.FileInfo]:
        """What is directly in `folder` (files and folders), or on S3 the listing kept since this
        process last changed anything there (`keep_listings`)."""
        if not self._keeps(folder):
            return self._list_now(folder)
        writes, kept = self._kept.get(folder, (None, None))
        if writes != self.writes(folder):
            writes, kept = self.writes(folder), self._list_now(folder)  # counted first: see _WRITES
            self._kept[folder] = (writes, kept)
        return kept

    def _keeps(self, folder: str) -> bool:
        return self._kept is not None and len([p for p in folder.split("/") if p]) <= 2

    def _list_now(self, folder: str, recursive: bool = False) -> list[pafs.FileInfo]:
        return self.fs.get_file_info(pafs.FileSelector(self.full(folder), recursive=recursive, allow_not_found=True))

    def __repr__(self) -> str:
        return f"Store({self.uri!r})"

    def writes(self, folder: str) -> int:
        """How many writes, deletes and renames this process made in `folder` or below, by any Store
        (`folder` at most two levels below the root: see _WRITES)."""
        return _WRITES[(self.root, folder)]

    def _wrote(self, rel: str) -> None:
        self.listed_sizes.pop(self.full(rel), None)
        parts = rel.split("/")[:-1][:2]
        for i in range(len(parts) + 1):
            _WRITES[(self.root, "/".join(parts[:i]))] += 1

    def full(self, rel: str) -> str:
        """The path of `rel` as the underlying filesystem (or DuckDB, when local) sees it."""
        return f"{self.root}/{rel}" if rel else self.root

    def display(self, rel: str = "") -> str:
        """The path of `rel` as a user would type it (s3://... or an absolute local path)."""
        return ("s3://" if not self.is_local else "") + self.full(rel)

    # ---- reading -------------------------------------------------------------------

    def _listed(self, info: pafs.FileInfo) -> FileEntry:
        """The entry of an S3 object as listed, its size kept in `listed_sizes`."""
        self._keep_size(info.path, info.size)
        return FileEntry(info.path[len(self.root) + 1:], info.size, stamp=str(info.mtime_ns))

    def _keep_size(self, path: str, size: int) -> None:
        if len(self.listed_sizes) >= MAX_LISTED_SIZES:
            self.listed_sizes.clear()
        self.listed_sizes[path] = size

    def exists(self, rel: str) -> bool:
        return self.fs.get_file_info(self.full(rel)).type != pafs.FileType.NotFound

    def list_days(self, prefix: str) -> list[str]:
        """The `day=YYYY-MM-DD` folders under `prefix`, as sorted day strings.

        A folder only shaped like a day (`day=2026-02-30`) is skipped with a warning: the daily
        partitions start at the first day listed, and one stray folder must not stop them loading."""
        days, strays = [], []
        for name in self._folder_names(prefix):
            m = DAY_RE.match(name)
            if m:
                (days if _is_date(m.group(1)) else strays).append(m.group(1))
        if strays:
            logging.getLogger(__name__).warning(
                f"{self.display(prefix)}: skipped folder(s) named like a day that is not one: "
                + ", ".join(f"day={s}" for s in sorted(strays)[:20]))
        return sorted(days)

    def _folder_names(self, prefix: str) -> list[str]:
        """The names of the folders directly under `prefix`. Locally through os.scandir: pyarrow
        raises on a name that is not UTF-8, which one stray folder must not make of every listing."""
        if not self.is_local:
            return [i.base_name for i in self._entries(prefix) if i.type == pafs.FileType.Directory]
        try:
            with os.scandir(self.full(prefix)) as entries:
                return [e.name for e in entries if e.is_dir()]
        except (FileNotFoundError, NotADirectoryError):
            return []

    def list_dirs(self, prefix: str) -> list[str]:
        """Names of the visible folders directly under `prefix`."""
        return sorted(n for n in self._folder_names(prefix) if n[:1] not in (".", "_"))

    def list_files(self, prefix: str, suffixes: tuple[str, ...], cache: ListingCache | None = None) -> list[FileEntry]:
        """Files below `prefix` (recursively) ending in one of `suffixes`, sorted by path.

        Hidden files (leading '.' or '_', as temporary and marker files are named) are skipped.
        On a local store, symbolic links are not followed: a link named like a wanted file, a
        link to a folder, a special file (FIFO, device) named like a wanted file, or a `prefix`
        that passes through a link, is listed with `refused` set. With a `cache` (local stores
        only: see `listing_cache`), folders unchanged since the cache's walk are not read again.
        """
        if self.is_local:
            return self._list_local(prefix, suffixes, cache)
        out = []
        for info in self._entries_below(prefix):
            if info.type != pafs.FileType.File or info.base_name[:1] in (".", "_"):
                continue
            if info.base_name.endswith(suffixes):
                out.append(self._listed(info))
        out.sort(key=lambda e: e.path)
        return out

    def _entries_below(self, prefix: str) -> list[pafs.FileInfo]:
        """What S3 lists below `prefix`, at any depth: with `keep_listings`, a folder without
        folders in it is its kept listing (`_entries`), one with some is listed whole."""
        if not self._keeps(prefix):
            return self._list_now(prefix, recursive=True)
        entries = self._entries(prefix)
        if any(i.type == pafs.FileType.Directory for i in entries):
            return self._list_now(prefix, recursive=True)
        return entries

    def list_folder(self, folder: str) -> list[FileEntry]:
        """The regular files directly in `folder`, sorted, with the writer's own hidden ones (a
        leading '_', such as a manifest) but not staging files (a leading '.') nor links."""
        out = []
        for info in self._entries(folder):
            if info.type == pafs.FileType.File and not info.base_name.startswith("."):
                if self.is_local and os.path.islink(info.path):
                    continue
                if not self.is_local:
                    self._keep_size(info.path, info.size)
                out.append(FileEntry(f"{folder}/{info.base_name}", info.size))
        return sorted(out, key=lambda e: e.path)

    def list_named(self, folder: str, name_prefix: str, suffixes: tuple[str, ...]) -> list[FileEntry]:
        """The files directly in `folder` whose names start with `name_prefix` and end in one of
        `suffixes`, sorted, as `list_files` lists them (links and names that are not UTF-8 refused).

        For a folder of many files of which a caller wants the few named so (a ledger's parts of one
        commit): locally only those are looked at beyond the folder's names, where `list_files`
        stats every file. S3 cannot list by part of a name through pyarrow: the folder is listed and
        its names filtered."""
        def wanted(name: str) -> bool:
            return name.startswith(name_prefix) and name[:1] not in (".", "_") and name.endswith(suffixes)

        if not self.is_local:
            return sorted((self._listed(i) for i in self._entries(folder)
                           if i.type == pafs.FileType.File and wanted(i.base_name)), key=lambda e: e.path)
        link = self._link_on_path(folder)
        if link is not None:
            return [FileEntry(folder, 0, _refusal(link, "a symbolic link"))]
        try:
            with os.scandir(self.full(folder)) as entries:
                named = [e for e in entries if wanted(e.name)]
        except (FileNotFoundError, NotADirectoryError):
            return []
        out = []
        for entry in named:
            rel, shown = f"{folder}/{entry.name}", unclean_name(entry.name)
            if shown is not None:
                out.append(FileEntry(f"{folder}/{shown}", 0, _refusal(f"{folder}/{shown}", NOT_UTF8)))
            elif entry.is_symlink():
                out.append(FileEntry(rel, 0, _refusal(rel, "a symbolic link")))
            elif not entry.is_dir(follow_symlinks=False):
                st = entry.stat(follow_symlinks=False)
                refused = None if stat.S_ISREG(st.st_mode) else _refusal(rel, "not a regular file")
                out.append(FileEntry(rel, st.st_size if refused is None else 0, refused,
                                     file_stamp(st) if refused is None else None))
        return sorted(out, key=lambda e: e.path)

    def _list_local(self, prefix: str, suffixes: tuple[str, ...], cache: ListingCache | None) -> list[FileEntry]:
        link = self._link_on_path(prefix)
        if link is not None:
            return [FileEntry(prefix, 0, _refusal(link, "a symbolic link"))]
        if cache is not None and cache.suffixes != tuple(suffixes):
            raise ValueError(f"a listing cache for {cache.suffixes} cannot list {suffixes}")
        out: list[FileEntry] = []
        if cache is None:
            self._walk(prefix, suffixes, out)
        else:
            self._walk_cached(prefix, suffixes, cache, out, 0)
        out.sort(key=lambda e: e.path)
        return out

    def _walk(self, prefix: str, suffixes: tuple[str, ...], out: list[FileEntry]) -> None:
        """Every folder below `prefix` read, its wanted files added to `out`."""
        folders = [prefix]
        while folders:
            read = self._read_folder(folders.pop(), suffixes)
            if read is not None:
                folders += read[0]
                out += read[1]

    def _walk_cached(self, folder: str, suffixes: tuple[str, ...], cache: ListingCache, out: list[FileEntry],
                     depth: int) -> list[str] | None:
        """`_walk` through `cache` (see `listing_cache`): the folders unchanged since its walk are not
        read, the sealed subtrees that are unchanged not walked. The record of `folder`'s subtree when
        it can be sealed whole (its parent decides whether it is kept as such); otherwise `folder`
        and what it holds are kept by themselves, and None."""
        try:
            st = os.lstat(self.full(folder))
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not stat.S_ISDIR(st.st_mode):  # a folder that is no longer one was replaced: its parent lists it
            return None
        record = cache.reuse_sealed(folder, st, f"{self.root}/")
        if record is not None:
            out += [FileEntry(path, size, None, stamp) for path, size, stamp in sealed_files(record)]
            return record
        if depth >= _CACHED_DEPTH:  # deeper than any archive's layout: walked, not kept
            self._walk(folder, suffixes, out)
            return None
        base = f"{folder}/" if folder else ""
        seen = cache.reuse(folder, st)
        if seen is not None:
            names, files, keepable = seen[0], [FileEntry(base + n, size, None, stamp) for n, size, stamp in seen[1]], True
        else:
            read = self._read_folder(folder, suffixes)
            if read is None:
                return None
            cache.folders_read += 1
            names = [path.rsplit("/", 1)[-1] for path in read[0]]
            files, keepable = read[1], cache.keepable(st, names + [f.path.rsplit("/", 1)[-1] for f in read[1]],
                                                       any(f.refused for f in read[1]))
        out += files
        newest, children, whole = max(st.st_mtime_ns, st.st_ctime_ns), [], keepable
        for name in names:
            child = self._walk_cached(base + name, suffixes, cache, out, depth + 1)
            if child is None:
                whole = False
            else:
                children.append((base + name, child))
                newest = max(newest, int(child[1]))
        # the listed folder itself is never sealed: a file landing anywhere would have it read whole again
        sealable = whole and depth > 0
        record = cache.seal_record(st, newest, [(f.path, f.size, f.stamp) for f in files], children) if sealable else None
        if record is not None:
            return record
        for path, child in children:
            cache.keep_sealed(path, child)
        if keepable:
            cache.keep(folder, st, names, [(f.path[len(base):], f.size, f.stamp) for f in files])
        return None

    def _read_folder(self, folder: str, suffixes: tuple[str, ...]) -> tuple[list[str], list[FileEntry]] | None:
        """(sub-folders, wanted files) of `folder`, both as paths from the root; None when it is gone."""
        try:
            entries = list(os.scandir(self.full(folder)))
        except (FileNotFoundError, NotADirectoryError):
            return None
        subfolders, files = [], []
        for entry in entries:
            rel = f"{folder}/{entry.name}" if folder else entry.name
            wanted = entry.name[:1] not in (".", "_") and entry.name.endswith(suffixes)
            shown = unclean_name(entry.name)
            if shown is not None:
                if wanted or entry.is_dir():  # a folder: refused whole, as a link to one is
                    rel = f"{folder}/{shown}" if folder else shown
                    files.append(FileEntry(rel, 0, _refusal(rel, NOT_UTF8)))
            elif entry.is_symlink():
                if wanted or entry.is_dir():  # is_dir follows the link: only its type is read
                    files.append(FileEntry(rel, 0, _refusal(rel, "a symbolic link")))
            elif entry.is_dir(follow_symlinks=False):
                subfolders.append(rel)
            elif wanted:
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(st.st_mode):
                    files.append(FileEntry(rel, st.st_size, stamp=file_stamp(st)))
                else:
                    files.append(FileEntry(rel, 0, _refusal(rel, "not a regular file")))
        return subfolders, files

    def _link_on_path(self, rel: str) -> str | None:
        """The first component of `rel` (below the root) that is a symbolic link, if any."""
        parts = [p for p in rel.split("/") if p]
        for i in range(len(parts)):
            sub = "/".join(parts[: i + 1])
            try:
                if stat.S_ISLNK(os.lstat(self.full(sub)).st_mode):
                    return sub
            except (FileNotFoundError, NotADirectoryError):  # below a file: nothing there to list
                return None
        return None

    def open_raw(self, rel: str) -> pa.NativeFile:
        """A sequential stream of the file's bytes as stored (no decompression).

        Locally the path is opened one folder at a time below the root with O_NOFOLLOW, and
        must end at a regular file: anything else raises `RefusedPath`, so a link (even one
        swapped in after the listing) never makes a reader leave the root.
        """
        if not self.is_local:
            return self.fs.open_input_stream(self.full(rel), compression=None)
        return pa.PythonFile(os.fdopen(self._open_beneath(rel), "rb", buffering=0), mode="r")

    def _open_beneath(self, rel: str) -> int:
        parts = rel.split("/")
        if any(p in ("", ".", "..") for p in parts):
            raise RefusedPath(_refusal(rel, "not a plain path below the root"))
        if unclean_name(rel) is not None:
            raise RefusedPath(_refusal(rel, NOT_UTF8))
        folder = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        done = ""
        try:
            for part in parts:
                done = f"{done}/{part}" if done else part
                last = done == rel
                flags = os.O_RDONLY | os.O_NOFOLLOW | (os.O_NONBLOCK if last else os.O_DIRECTORY)
                try:
                    fd = os.open(part, flags, dir_fd=folder)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(folder, part):
                        raise RefusedPath(_refusal(done, "a symbolic link")) from None
                    raise
                os.close(folder)
                folder = fd
            if not stat.S_ISREG(os.fstat(folder).st_mode):
                raise RefusedPath(_refusal(rel, "not a regular file"))
            fd, folder = folder, -1
            return fd
        finally:
            if folder >= 0:
                os.close(folder)

    def open_input(self, rel: str) -> pa.NativeFile:
        """A sequential stream of the file's bytes, gunzipped when the name ends in .gz."""
        raw = self.open_raw(rel)
        return pa.CompressedInputStream(raw, "gzip") if rel.endswith(".gz") else raw

    def read_bytes(self, rel: str) -> bytes:
        with self.open_raw(rel) as f:
            return f.read()

    def read_bytes_if_exists(self, rel: str) -> bytes | None:
        """The file's bytes, or None when there is none. Not `exists` then `read_bytes`: on S3 the
        open asks whether it exists anyway, and `exists` of a missing key costs a listing too."""
        try:
            return self.read_bytes(rel)
        except (FileNotFoundError, NotADirectoryError):
            return None

    # ---- writing -------------------------------------------------------------------

    @contextlib.contextmanager
    def atomic_output(self, rel: str, owner: str | None = None) -> Iterator[pa.NativeFile]:
        """A stream whose content appears at `rel` only if the block completes.

        Locally it is staged beside `rel` under a hidden name that carries `owner` (see
        `sweep_staging`).
        """
        final = self.full(rel)
        parent, name = final.rsplit("/", 1)
        if self.is_local:
            with self.write_failures(final):
                self.fs.create_dir(parent, recursive=True)
            tmp = f"{parent}/{staging_name(name, 'tmp', owner)}"
        else:
            # S3 folders are virtual; the content is staged on local disk, see _upload.
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".part")
            os.close(fd)
        uploaded = None
        try:
            with self.write_failures(final):
                out = pa.OSFile(tmp, "wb")
            with self.write_failures(final, NO_ROOM), out:
                yield out
            with self.write_failures(final):
                self._commit(tmp, final)
            uploaded = None if self.is_local else os.path.getsize(tmp)
        finally:
            self._wrote(rel)
            with contextlib.suppress(OSError):  # never made (a read-only folder refuses even this), or renamed
                os.remove(tmp)
        if uploaded is not None:  # read back (its footer, a kept file) without asking S3 for the size
            self._keep_size(final, uploaded)

    def _commit(self, tmp: str, final: str) -> None:
        if self.is_local:
            os.replace(tmp, final)
        else:
            self._upload(tmp, final)

    def setting(self) -> str | None:
        """The variable that names this store's folder, for the messages of its failures."""
        here = os.path.realpath(self.root)
        return next((name for name in FOLDER_SETTINGS if (value := os.environ.get(name, "").strip())
                     and "://" not in value and os.path.realpath(os.path.expanduser(value)) == here), None)

    @contextlib.contextmanager
    def write_failures(self, final: str,
                       errnos: frozenset[int] = WRITE_REFUSED | NO_ROOM | NOT_A_FOLDER) -> Iterator[None]:
        """The OS refusing a local write of `final` (a full path; an errno of `errnos`) as a `WriteFailed`:
        pyarrow's message names neither the file nor the folder, nor the file where one of its folders
        must be (`file_in_the_way`), and says nothing of what to do. (On S3
        these are the local staging file's: the store's folder is not the one to free or fix.) Around a
        block that also reads, `NO_ROOM` alone: a read refused is the reader's to report."""
        try:
            yield
        except OSError as exc:
            if exc.errno not in errnos or not self.is_local or isinstance(exc, WriteFailed):
                raise
            if exc.errno not in NOT_A_FOLDER:
                raise WriteFailed(exc.errno, final, self.display(), self.setting()) from exc
            if os.path.isdir(final):  # the final rename met a folder where the file must be
                raise WriteFailed(errno.EISDIR, final, self.display(), self.setting(), final, is_folder=True) from exc
            blocker = file_in_the_way(final)
            if blocker is None:
                raise
            raise WriteFailed(errno.ENOTDIR, final, self.display(), self.setting(), blocker) from exc

    def _upload(self, local: str, final: str) -> None:
        """Copy a complete local file to the object `final`.

        pyarrow cannot abort an S3 upload from Python: closing the stream, which the `with`
        does even when the block raises, publishes whatever was written. So nothing is sent
        until the content is complete on local disk. The upload itself is one PutObject for
        files under a part (see `_filesystem`) and a multipart upload for larger ones; S3
        exposes neither until it completes, so a process killed mid-upload leaves the previous
        object in place.
        """
        # compression=None: pyarrow would otherwise gzip again a name ending in .gz. The content
        # type is the one S3 serves the object with: the HUD's pages from a website bucket must
        # come as text/html, or browsers download them.
        with pa.OSFile(local, "rb") as src, self.fs.open_output_stream(final, compression=None,
                                                                     metadata=content_metadata(final)) as out:
            while chunk := src.read(UPLOAD_CHUNK):
                out.write(chunk)

    def write_bytes(self, rel: str, data: bytes) -> None:
        with self.atomic_output(rel) as out:
            out.write(data)

    def delete(self, rel: str) -> None:
        try:
            with contextlib.suppress(FileNotFoundError):
                self.fs.delete_file(self.full(rel))
        finally:  # counted once done: a listing taken before it lands must not pass for one after
            self._wrote(rel)

    def sweep_staging(self, folder: str, is_live: Callable[[str], bool], min_age_s: float = 0.0) -> list[str]:
        """Delete the staging files directly in `folder` whose owner is not live; their paths.

        `is_live(owner)` is asked only after the folder was listed, so a writer that starts
        after the listing is never swept; files without an owner (written before owners
        existed, or by a caller that gave none) are stale by definition. With `min_age_s`, a file
        changed more recently than that is kept whoever owns it: for writers no run list knows
        (sensor ticks), age is what tells a dead writer's file from a live one's.
        """
        cutoff_ns = (dt.datetime.now(dt.timezone.utc).timestamp() - min_age_s) * 1e9
        staged = []
        for info in self._entries(folder):
            is_staging, owner = staging_owner(info.base_name)
            if is_staging and info.type == pafs.FileType.File and (not min_age_s or info.mtime_ns < cutoff_ns):
                staged.append((f"{folder}/{info.base_name}", owner))
        removed = []
        for rel, owner in staged:
            if owner is None or not is_live(owner):
                self.delete(rel)
                removed.append(rel)
        return removed

    # ---- commits of several files ---------------------------------------------------

    def commit_files(self, deletes: list[str], moves: list[tuple[str, str]], owner: str | None = None,
                     journal_last: Callable[[str], bool] = lambda folder: False) -> None:
        """Delete `deletes`, then rename each complete staged file of `moves` (staged, final) onto its
        final path: one commit, which a process killed midway leaves to be finished, never half done.

        Why a journal: a reader lists a folder, and no order of several deletes and renames keeps
        what it lists whole (deletes first leave fewer rows, renames first some twice). So a commit
        of more than one change first writes its journal, a copy in each folder it changes, and
        removes them last, in the same order; whoever finds one left finishes the commit
        (`finish_commit`), which is always possible: the staged files are complete before the
        journal names them. A commit killed among its first copies changed nothing yet, and is
        undone instead (`Store.journal_state`). The copies go in folder order, those `journal_last`
        names last."""
        if len(deletes) + len(moves) <= 1:  # a single delete or rename is atomic as it is
            self._apply(deletes, moves)
            return
        name = journal_name(owner)
        folders = sorted({_parent(p) for p in [*deletes, *(final for _, final in moves)]},
                         key=lambda folder: (journal_last(folder), folder))
        copies = [f"{folder}/{name}" if folder else name for folder in folders]
        data = json.dumps({"owner": owner, "deletes": list(deletes), "moves": [list(m) for m in moves],
                           "copies": copies}).encode()
        for path in copies:
            with self.atomic_output(path, owner) as out:
                out.write(data)
        self._apply(deletes, moves)
        for path in copies:
            self.delete(path)

    def _apply(self, deletes: list[str], moves: list[tuple[str, str]]) -> None:
        """The deletes and renames of a commit; a rename whose staged file is gone was done already
        (by whoever finished the commit: a process killed between a copy and a delete on S3 did half)."""
        for path in deletes:
            self.delete(path)
        for staged, final in moves:
            try:
                self.fs.move(self.full(staged), self.full(final))
            except OSError:
                if self.exists(staged):
                    raise
            finally:  # counted once done, as `delete`
                self._wrote(final)

    def journals(self, folder: str) -> list[Journal]:
        """The journals of unfinished commits directly in `folder`, by name (usually none: a commit
        removes its own). Locally only the folder's names are read, not every file's size."""
        if self.is_local:
            try:
                with os.scandir(self.full(folder)) as entries:
                    names = [e.name for e in entries if JOURNAL_RE.match(e.name) and e.is_file(follow_symlinks=False)]
            except (FileNotFoundError, NotADirectoryError):
                names = []
        else:
            names = [i.base_name for i in self._entries(folder)
                     if i.type == pafs.FileType.File and JOURNAL_RE.match(i.base_name)]
        out = []
        for name in sorted(names):
            path = f"{folder}/{name}" if folder else name
            try:
                raw = json.loads(self.read_bytes(path))
                out.append(Journal(path, raw["owner"], tuple(raw["deletes"]),
                                   tuple((s, f) for s, f in raw["moves"]), tuple(raw["copies"])))
            except FileNotFoundError:  # finished since the listing
                continue
            except (ValueError, KeyError, TypeError) as exc:  # never a partial one: it is written whole
                raise ValueError(f"{self.display(path)} is not a commit journal ({exc!r}); "
                                 "remove it if nothing wrote it") from None
        return out

    def journal_state(self, journal: Journal) -> str:
        """UNSTARTED (killed while writing its copies: nothing changed), COMMITTING (every copy
        written: its changes may be midway) or DONE (killed while removing its copies, which go in
        the order they were written)."""
        if not self.exists(journal.copies[0]):
            return DONE
        return COMMITTING if all(self.exists(p) for p in journal.copies[1:]) else UNSTARTED

    def finish_commit(self, journal: Journal) -> str:
        """End a commit found by its journal, killed midway, and remove the journal; its state was.
        COMMITTING: what is left of it is done (deletes and renames done already are skipped), so
        it ends as it would have. UNSTARTED: it is undone, its staged files deleted."""
        state = self.journal_state(journal)
        if state == COMMITTING:
            self._apply(list(journal.deletes), list(journal.moves))
        elif state == UNSTARTED:
            for staged, _ in journal.moves:
                self.delete(staged)
        for path in journal.copies:
            self.delete(path)
        return state

    def finish_commits(self, folder: str, is_live: Callable[[str], bool] = lambda owner: False) -> list[str]:
        """Finish the commits journaled in `folder` whose owner is not live (as `sweep_staging` asks;
        without an owner: not live); the journals' paths. Before a sweep: a killed commit's staged
        files are its only copy of the new state."""
        done = []
        for journal in self.journals(folder):
            if journal.owner is None or not is_live(journal.owner):
                self.finish_commit(journal)
                done.append(journal.path)
        return done


NOT_UTF8 = "a name that is not valid UTF-8 (shown with U+FFFD)"


def file_in_the_way(path: str) -> str | None:
    """The first of `path`'s folders, from / down, that is there but is no folder (a file, a link to
    one or to nothing): what a write of `path` cannot pass."""
    for folder in reversed(Path(path).parents):
        if os.path.lexists(folder) and not os.path.isdir(folder):
            return str(folder)
    return None


def unclean_name(name: str) -> str | None:
    """`name` as it can be shown and stored when it is not clean UTF-8, else None.

    Linux takes any bytes in a name and Python hands those that are not UTF-8 over as lone
    surrogates, which no writer downstream (Arrow, JSON, a hash of the path) accepts. Shown with
    U+FFFD instead, the name no longer opens its file, so it is refused, as is a name holding
    U+FFFD itself: it could be the shown name of another."""
    if "\ufffd" in name:
        return name
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(name).decode("utf-8", "replace")
    return None


def _is_date(text: str) -> bool:
    try:
        dt.date.fromisoformat(text)
    except ValueError:
        return False
    return True


def _refusal(rel: str, what: str) -> str:
    return f"refused {rel}: {what}, not read (nothing outside the store's root is ever read)"


def _is_link(folder_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=folder_fd).st_mode)
    except OSError:
        return False
