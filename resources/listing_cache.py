"""What a walk of a local folder tree saw, folder by folder, so that the next walk reads again only
the folders that changed, and stats only the top of the subtrees that have been quiet.

A refresh of a PyTorch-sized day lists the day's test reports: ~60,000 files in ~140,000 folders
(one per run, attempt, job and test module, as CI uploads them). Reading every folder and stat-ing
every file costs seconds, and even a stat of each folder ~1 CPU-s, a fifth of a busy refresh. A
folder's own modification and change times and inode change whenever an entry is added to it,
removed or renamed, which is how the archive's writers publish files (a new name, or a rename over
an old one). So a folder whose times and inode are those of the last walk holds the same entries,
and the walk takes them from here after one stat of the folder, instead of reading it and stat-ing
its files.

A subtree whose folders have all been unchanged for SEAL_S (a finished job's reports, a finished
run) is kept whole, sealed: the next walk stats its folder and the folders CHECK_DEPTH levels
below it (a new attempt, a new job, a new entry in a job's folder changes one of them) and takes
every file below from here. What such a walk cannot see is a file added deeper in a sealed subtree
(a report written into a module folder of a job whose reports landed minutes ago), which the
archive's writers do not do: a job's reports land together. A walk every VERIFY_S stats every
folder again and lists such a file, and a full listing (the daily run, a backfill, any run without
a cache) reads every folder. Also unseen is a file rewritten in place (opened and written, not
replaced) in a folder where nothing else changed, until a full listing. A folder changed less than
SETTLE_NS before the walk is not kept (its times may not move again for a change within the same
clock tick), nor one whose times are in the future.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict

import orjson

SETTLE_NS = 2_000_000_000
SEAL_S = 120
CHECK_DEPTH = 3
VERIFY_S = 1800
_VERSION = 2


class ListingCache:
    """`previous`: folder (relative to the store's root) -> what the last walk saw in it, as one
    string (one per folder: loading tens of thousands is quick, and only folders unchanged since
    are parsed): its mtime, ctime and inode, then its sub-folders' names, then its wanted files'
    names, sizes and stamps. `sealed`: the top folder of a sealed subtree -> its record
    (`seal_record`). `current` and `now_sealed`: the same for this walk, what `to_bytes` saves.
    Valid only for the same root and suffixes: anything else starts empty. A folder holding
    anything refused (a link, a special file) is not kept: it is read every time. With `seal` off,
    no subtree is sealed: every folder is stat-ed at every walk."""

    def __init__(self, root: str, suffixes: tuple[str, ...], previous: dict[str, str] | None = None,
                 sealed: dict[str, str] | None = None, verified_at: float | None = None,
                 seal: bool = False, clock=time.time):
        self.root, self.suffixes, self.seal = root, tuple(suffixes), seal
        self.previous: dict[str, str] = previous or {}
        self.sealed: dict[str, str] = sealed or {}
        self.current: dict[str, str] = {}
        self.now_sealed: dict[str, str] = {}
        now = clock()
        self.settled_before = int(now * 1e9) - SETTLE_NS
        self.sealed_before = int((now - SEAL_S) * 1e9)
        # a walk that stats every folder, sealed or not: the first, then one every VERIFY_S
        self.verifies = verified_at is None or not 0 <= now - verified_at < VERIFY_S
        self.verified_at = now if self.verifies else verified_at
        self.folders_read = self.folders_reused = self.folders_unseen = 0

    @classmethod
    def from_bytes(cls, data: bytes | None, root: str, suffixes: tuple[str, ...], seal: bool = False,
                   clock=time.time) -> "ListingCache":
        """The cache saved by `to_bytes`; an empty one when `data` is None, unreadable, or was made
        for another root or other suffixes."""
        try:
            raw = orjson.loads(data) if data else None
        except orjson.JSONDecodeError:
            raw = None
        if not isinstance(raw, dict) or raw.get("version") != _VERSION or raw.get("root") != root \
                or raw.get("suffixes") != list(suffixes) or not isinstance(raw.get("folders"), dict) \
                or not isinstance(raw.get("sealed"), dict) or not isinstance(raw.get("verified_at"), (int, float)):
            return cls(root, suffixes, seal=seal, clock=clock)
        return cls(root, suffixes, raw["folders"], raw["sealed"] if seal else None, raw["verified_at"], seal, clock)

    def to_bytes(self) -> bytes:
        return orjson.dumps({"version": _VERSION, "root": self.root, "suffixes": list(self.suffixes),
                             "folders": self.current, "sealed": self.now_sealed, "verified_at": self.verified_at})

    def reuse(self, folder: str, st) -> tuple[list[str], list[tuple[str, int, str]]] | None:
        """(sub-folders, files as (name, size, stamp)) of `folder` as the last walk saw it, when
        its stat `st` says its entries are the same (same modification and change times, inode)."""
        hit = self.previous.get(folder)
        if hit is None or not _same_folder(hit, st):
            return None
        self.folders_reused += 1
        _, subs, files = hit.split(_FIELD)
        entries = []
        for item in files.split(_ITEM) if files else ():
            name, size, stamp = item.split(_PART)
            entries.append((name, int(size), stamp))
        return (subs.split(_ITEM) if subs else []), entries

    def keepable(self, st, names: list[str], refused: bool) -> bool:
        """Whether a folder read with stat `st` (before the read) may be kept: it has settled (see
        the module), holds nothing `refused` and no name holding a separator of the saved form."""
        return not refused and max(st.st_mtime_ns, st.st_ctime_ns) < self.settled_before and \
            not any(c in name for name in names for c in (_FIELD, _ITEM, _PART))

    def keep(self, folder: str, st, subfolders: list[str], files: list[tuple[str, int, str]]) -> None:
        """Remember what a read of `folder` (stat `st` before the read) found; `keepable` first."""
        listed = _ITEM.join(f"{n}{_PART}{size}{_PART}{stamp}" for n, size, stamp in files)
        self.current[folder] = _FIELD.join([_key(st), _ITEM.join(subfolders), listed])

    def reuse_sealed(self, folder: str, st, root: str) -> list[str] | None:
        """The record of the sealed subtree at `folder` (stat `st`), when it and the folders
        CHECK_DEPTH levels below it (every level when this walk verifies) have the times and inode
        it holds; `root`: what the record's paths are relative to, with its trailing '/'."""
        record = self.sealed.get(folder)
        if record is None:
            return None
        fields = record.split(_FIELD)
        if fields[0] != _key(st):
            return None
        checked = fields[3:] if self.verifies else fields[3:3 + CHECK_DEPTH]
        lstat, checks = os.lstat, 0
        try:
            for level in checked:
                for item in level.split(_ITEM) if level else ():
                    path, key = item.split(_PART)
                    sub = lstat(root + path)
                    if f"{sub.st_mtime_ns} {sub.st_ctime_ns} {sub.st_ino}" != key:
                        return None
                    checks += 1
        except OSError:
            return None
        self.folders_reused += 1 + checks
        self.folders_unseen += sum(level.count(_ITEM) + 1 for level in fields[3 + len(checked):] if level)
        return fields

    def seal_record(self, st, newest_ns: int, files: list[tuple[str, int, str]],
                    children: list[tuple[str, list[str]]]) -> list[str] | None:
        """The record of a folder (stat `st`) whose sub-folders are all sealable (`children`: path
        and record), if its subtree has been quiet for SEAL_S: [its key, the subtree's newest change
        time, every file below as path, size and stamp, then per level below it the folders' paths
        and keys]. None when sealing is off or something in it changed since."""
        if not self.seal or newest_ns >= self.sealed_before:
            return None
        listed = [f"{p}{_PART}{size}{_PART}{stamp}" for p, size, stamp in files]
        listed += [record[2] for _, record in children if record[2]]
        levels = [_ITEM.join(f"{path}{_PART}{record[0]}" for path, record in children)] if children else []
        for depth in range(4, max((len(r) for _, r in children), default=0) + 1):  # a child's level k is ours k+1
            levels.append(_ITEM.join(r[depth - 1] for _, r in children if len(r) >= depth and r[depth - 1]))
        return [_key(st), str(newest_ns), _ITEM.join(listed), *levels]

    def keep_sealed(self, folder: str, record: list[str]) -> None:
        self.now_sealed[folder] = _FIELD.join(record)


def sealed_files(record: list[str]) -> list[tuple[str, int, str]]:
    """The files of a sealed subtree's record: (path relative to the root, size, stamp)."""
    out = []
    for item in record[2].split(_ITEM) if record[2] else ():
        path, size, stamp = item.split(_PART)
        out.append((path, int(size), stamp))
    return out


def _key(st) -> str:
    return f"{st.st_mtime_ns} {st.st_ctime_ns} {st.st_ino}"


def _same_folder(kept: str, st) -> bool:
    """Whether a folder whose stat is `st` still holds the entries `kept` (a walk's saved form)
    lists: same modification and change times, same inode."""
    return kept.startswith(_key(st) + _FIELD)


# Separators no file name holds (names are bytes other than '/' and NUL; these are control
# characters no uploader writes, and a folder with such a name is simply not kept).
_FIELD, _ITEM, _PART = "\x1d", "\x1e", "\x1f"


class KeptListings:
    """The last walk of each prefix listed by this process, for processes that list the same
    folders again every second or so (the relay's sensors, listening to the archive while a tick
    lasts, in the code server between ticks). Stat-ing each file of a day's ~2,900 receiver
    segments costs ~20 ms a listing, several times a second; when no folder of the last walk
    changed (one stat each), its entries are returned as they were, and otherwise only the
    folders that changed are read (see ListingCache).

    What a kept walk cannot see is a file appended to in place (a collector still writing it)
    in a folder nothing else changed in, so every prefix is walked in full again at least every
    `relist_s`: such a file is seen that much later at most. At most `limit` prefixes are kept
    (the least recently listed are dropped), and nothing outlives the process."""

    def __init__(self, relist_s: float, limit: int = 16, clock=time.time):
        self.relist_s, self.limit, self.clock = relist_s, limit, clock
        # prefix key -> (the walk's folders as ListingCache keeps them, when it was last walked in
        # full, its entries when every folder walked was kept, else None)
        self._kept: OrderedDict[tuple, tuple[dict[str, str], float, list | None]] = OrderedDict()
        self._lock = threading.Lock()

    def list_files(self, store, prefix: str, suffixes: tuple[str, ...]) -> list:
        """`store.list_files(prefix, suffixes)`, from the last walk when it is recent enough
        (local stores only: elsewhere there are no folder times to go by)."""
        if not store.is_local:
            return store.list_files(prefix, suffixes)
        key, now = (store.root, prefix, tuple(suffixes)), self.clock()
        with self._lock:
            kept = self._kept.get(key)
        fresh = kept is not None and 0 <= now - kept[1] < self.relist_s
        if fresh and kept[2] is not None and _unchanged(store, kept[0]):
            return list(kept[2])
        cache = ListingCache(store.full(""), tuple(suffixes), kept[0] if fresh else None)
        entries = store.list_files(prefix, suffixes, cache)
        every_folder_kept = 0 < len(cache.current) == cache.folders_read + cache.folders_reused
        with self._lock:
            self._kept[key] = (cache.current, kept[1] if fresh else now, list(entries) if every_folder_kept else None)
            self._kept.move_to_end(key)
            while len(self._kept) > self.limit:
                self._kept.popitem(last=False)
        return entries


def _unchanged(store, folders: dict[str, str]) -> bool:
    """Whether every folder of a kept walk still has the times and inode it had then."""
    for folder, seen in folders.items():
        try:
            st = os.lstat(store.full(folder))
        except OSError:
            return False
        if not _same_folder(seen, st):
            return False
    return True
