"""What has landed in the archive for one day: a cheap fingerprint of its files.

The intra-day refresh (`jobs.refresh`) re-materializes a day's partitions when new files have
landed in its `day=` folders. Reading the files to find out would cost what the refresh costs;
listing them costs one directory walk locally and one paged listing per source on S3. The
archive is append-only and its writers publish files whole (the receiver rolls a spool segment
into a new file, uploaders put an object once), so a file's path, size and stamp (modification
time, and inode locally) say whether it is new: a new name is new data, a size that changed is a
file still being appended to, a new stamp is a file replaced, even by one of the same size.

Every visible file below the day folders counts, whatever its name: the readers decide what
they read, and a file they would reject is still new input (its reject must show up). Hidden
files (the receiver's and the Store's staging names start with '.') and refused entries are
listed by `Store.list_files` as the readers see them: a refused symbolic link (or name that is not
UTF-8) counts as an entry of size 0, so it triggers the refresh that rejects it, once.

The sensor asks once per refresh interval and day (on its 30 s ticks, skipping those within an
interval), and a PyTorch-sized day holds ~25,000 reports in ~40,000 folders: walking them all costs
~0.6 CPU-s, ~1,700 CPU-s a day at the default 1.5 minutes. On a local archive the walk skips quiet
subtrees instead (`LandedCache`): a folder whose subtree has not changed for SEAL_S (by the
change times of its folders and files, which nobody can set back) is summarized once, and later
only it and its sub-folders CHECK_DEPTH levels down are stat-ed (a new run, attempt or job folder,
a file added where one of them changes); its summary stands while their stamps are the same.
The digest is a sum of per-file hashes, so a summary adds in and a walk that skips gives the
digest a full walk gives. What a skip can miss is a file written deeper in a quiet subtree,
where none of those folders changes. It is not lost: every VERIFY_S the sensor walks the day in
full again, the refresh's listing of reports (`listing_cache`, which skips such subtrees the same
way) stats every folder at the same interval, and the daily run lists every file. Folders
changed in the future (a clock ahead) are never quiet; a filesystem clock behind this machine's
by more than SEAL_S only makes the quick check trust folders sooner. On S3 (no folder times)
every fingerprint is a full listing.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
import time
from dataclasses import dataclass

import orjson

from resources.listing_cache import CHECK_DEPTH, SEAL_S, VERIFY_S
from resources.storage import Store, file_stamp, unclean_name
from torchci_assets.archive_days import ARCHIVE_SOURCES

_MOD = 1 << 256
_VERSION = 1


@dataclass(frozen=True)
class DayFingerprint:
    """The archive's files of one day, summarized: `digest` changes when any file appears or
    changes size or stamp; `files` and `bytes` are for the log line."""

    day: str
    files: int
    bytes: int
    digest: str

    @property
    def short(self) -> str:
        """Sixteen hex digits: enough to tell two states of one day apart, short enough for a run key."""
        return self.digest[:16]


def entry_hash(path: str, size: int, stamp: str | None) -> int:
    return int.from_bytes(hashlib.sha256(f"{path}\0{size}\0{stamp or ''}".encode()).digest(), "big")


@dataclass
class Summary:
    """Files, bytes and the sum of their hashes (mod 2^256) of a set of files: sums add up."""

    files: int = 0
    bytes: int = 0
    total: int = 0

    def add(self, path: str, size: int, stamp: str | None) -> None:
        self.files, self.bytes = self.files + 1, self.bytes + size
        self.total = (self.total + entry_hash(path, size, stamp)) % _MOD

    def merge(self, other: "Summary") -> None:
        self.files, self.bytes = self.files + other.files, self.bytes + other.bytes
        self.total = (self.total + other.total) % _MOD


def day_fingerprint(store: Store, day: str, sources: tuple[str, ...] = ARCHIVE_SOURCES,
                    cache: "LandedCache | None" = None) -> DayFingerprint:
    """The fingerprint of `day` over every source's `day=` folder (a missing folder is empty);
    on a local store, through `cache` (default: the one in the temporary folder)."""
    cache = cache if cache is not None else default_cache()
    day_sum = Summary()
    for source in sources:
        prefix = f"{source}/day={day}"
        if store.is_local and store._link_on_path(prefix) is None:
            day_sum.merge(cache.summarize(store, prefix))
        else:
            for entry in store.list_files(prefix, ("",)):
                day_sum.add(entry.path, entry.size, entry.stamp)
    digest = hashlib.sha256(f"{day_sum.files}:{day_sum.bytes}:{day_sum.total:064x}".encode()).hexdigest()
    return DayFingerprint(day, day_sum.files, day_sum.bytes, digest)


class LandedCache:
    """The quiet subtrees of each listed prefix of a local store, one small JSON file per prefix
    (`folder`, default under the temporary folder): see `_Walk`. A file that cannot be read or
    written is no cache: a full walk."""

    def __init__(self, folder: str | None = None, clock=time.time):
        self.folder = folder or os.path.join(tempfile.gettempdir(), f"torchci-landed-{os.getuid()}")
        self.clock = clock

    def _path(self, store: Store, prefix: str) -> str:
        key = hashlib.sha256(f"{store.root}\0{prefix}".encode()).hexdigest()[:32]
        return os.path.join(self.folder, f"{key}.json")

    def summarize(self, store: Store, prefix: str) -> Summary:
        now = self.clock()
        known, verified_at = self._load(store, prefix, now)
        if not os.path.isdir(store.full(prefix)):
            return Summary()
        total, _, value = _Walk(store, int((now - SEAL_S) * 1e9)).subtree(prefix, known)
        if value != known or value is None:
            self._save(store, prefix, value, verified_at)
        return total

    def _load(self, store: Store, prefix: str, now: float) -> tuple[list | None, float]:
        try:
            with open(self._path(store, prefix), "rb") as f:
                raw = orjson.loads(f.read())
            if raw["version"] == _VERSION and raw["root"] == store.root and 0 <= now - raw["verified_at"] < VERIFY_S:
                return raw["folder"], raw["verified_at"]
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return None, now

    def _save(self, store: Store, prefix: str, value: list, verified_at: float) -> None:
        body = orjson.dumps({"version": _VERSION, "root": store.root, "verified_at": verified_at, "folder": value})
        try:
            os.makedirs(self.folder, mode=0o700, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".landed-", dir=self.folder)
            with os.fdopen(fd, "wb") as f:
                f.write(body)
            os.replace(tmp, self._path(store, prefix))
        except OSError:
            pass


_DEFAULT: list[LandedCache] = []


def default_cache() -> LandedCache:
    if not _DEFAULT:
        _DEFAULT.append(LandedCache())
    return _DEFAULT[0]


def _kept(value: list, depth: int) -> list:
    """A quiet folder's value with its sub-folders' kept `depth` levels down."""
    return [*value[:6], {n: _kept(v, depth - 1) for n, v in value[6].items()} if depth > 0 else {}]


class _Walk:
    """One walk of a local prefix. A folder's cache value is [ino, mtime, ctime, files, bytes, total
    hex, {child name: value}]: a quiet folder's summary stands for its subtree while its stamp and
    those of its sub-folders CHECK_DEPTH levels down are the same (it keeps their values); a
    folder that is not quiet has no summary (None) and keeps every sub-folder's value."""

    def __init__(self, store: Store, quiet_before_ns: int):
        self.store, self.quiet_before_ns = store, quiet_before_ns

    def subtree(self, rel: str, known: list | None) -> tuple[Summary, int, list | None]:
        """(the summary of `rel`'s files, the newest change time in it, its value for the cache:
        None when nothing in it is quiet)."""
        st = os.stat(self.store.full(rel), follow_symlinks=False)
        stamp = [st.st_ino, st.st_mtime_ns, st.st_ctime_ns]
        if known is not None and known[3] is not None and known[:3] == stamp and self._unchanged(rel, known[6]):
            return Summary(known[3], known[4], int(known[5], 16)), st.st_ctime_ns, known
        out, newest, children = Summary(), st.st_ctime_ns, []
        with os.scandir(self.store.full(rel)) as entries:
            for entry in entries:
                newest = max(newest, self._entry(rel, entry, out, children))
        known_children = known[6] if known is not None else {}
        values = {}
        for name in children:
            try:
                sub, sub_newest, values[name] = self.subtree(f"{rel}/{name}", known_children.get(name))
            except (FileNotFoundError, NotADirectoryError):
                continue
            out.merge(sub)
            newest = max(newest, sub_newest)
        if newest < self.quiet_before_ns:  # quiet: its summary stands for its subtree from now on
            kept = {n: _kept(v, CHECK_DEPTH - 1) for n, v in values.items()}
            return out, newest, [*stamp, out.files, out.bytes, f"{out.total:x}", kept]
        kept = {n: v for n, v in values.items() if v is not None}
        return out, newest, [*stamp, None, None, None, kept] if kept else None

    def _unchanged(self, rel: str, kept: dict) -> bool:
        """Whether the kept sub-folders of a quiet folder still have their stamps."""
        for name, value in kept.items():
            try:
                st = os.stat(self.store.full(f"{rel}/{name}"), follow_symlinks=False)
            except OSError:
                return False
            if value[:3] != [st.st_ino, st.st_mtime_ns, st.st_ctime_ns]:
                return False
            if not self._unchanged(f"{rel}/{name}", value[6]):
                return False
        return True

    def _entry(self, rel: str, entry: os.DirEntry, out: Summary, children: list[str]) -> int:
        """Count one entry as `Store.list_files(prefix, ("",))` lists it; its change time."""
        path = f"{rel}/{entry.name}"
        shown = unclean_name(entry.name)
        if shown is not None:  # refused whole, under its readable name
            if entry.name[:1] not in (".", "_") or entry.is_dir():
                out.add(f"{rel}/{shown}", 0, None)
            return 0
        if entry.is_symlink():
            if entry.name[:1] not in (".", "_") or entry.is_dir():
                out.add(path, 0, None)
            return 0
        if entry.is_dir(follow_symlinks=False):
            children.append(entry.name)
            return 0
        if entry.name[:1] in (".", "_"):
            return 0
        st = entry.stat(follow_symlinks=False)
        if stat.S_ISREG(st.st_mode):
            out.add(path, st.st_size, file_stamp(st))
        else:
            out.add(path, 0, None)
        return st.st_ctime_ns
