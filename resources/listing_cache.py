"""What a walk of a local folder tree saw, folder by folder, so that the next walk reads again only
the folders that changed.

A refresh of a PyTorch-sized day lists the day's test reports: ~25,000 files in ~40,000 folders
(one per run, attempt, job and test module, as CI uploads them), which costs ~0.45 CPU-s of
directory reads and file stats every time, a third of a refresh's ingest of reports. A folder's own
modification and change times and inode change whenever an entry is added to it, removed or
renamed, which is how the archive's writers publish files (a new name, or a rename over an old
one). So a folder whose times and inode are those of the last walk holds the same entries, and the
walk takes them from here after one stat of the folder, instead of reading it and stat-ing its
files.

What this cannot see is a file rewritten in place (opened and written, not replaced) in a folder
where nothing else changed: the archive's writers never do that, and a full listing (the daily run,
a backfill, any run without a cache) reads every folder. A folder changed less than SETTLE_NS
before the walk is not kept (its times may not move again for a change within the same clock
tick), nor one whose times are in the future.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict

import orjson

SETTLE_NS = 2_000_000_000
_VERSION = 1


class ListingCache:
    """`previous`: folder (relative to the store's root) -> what the last walk saw in it, as one
    string (one per folder: loading tens of thousands is quick, and only folders unchanged since
    are parsed): its mtime, ctime and inode, then its sub-folders' names, then its wanted files'
    names, sizes and stamps. `current`: the same for this walk, what `to_bytes` saves. Valid only
    for the same root and suffixes: anything else starts empty. A folder holding anything refused
    (a link, a special file) is not kept: it is read every time."""

    def __init__(self, root: str, suffixes: tuple[str, ...], previous: dict[str, str] | None = None):
        self.root, self.suffixes = root, tuple(suffixes)
        self.previous: dict[str, str] = previous or {}
        self.current: dict[str, str] = {}
        self.settled_before = time.time_ns() - SETTLE_NS
        self.folders_read = self.folders_reused = 0

    @classmethod
    def from_bytes(cls, data: bytes | None, root: str, suffixes: tuple[str, ...]) -> "ListingCache":
        """The cache saved by `to_bytes`; an empty one when `data` is None, unreadable, or was made
        for another root or other suffixes."""
        try:
            raw = orjson.loads(data) if data else None
        except orjson.JSONDecodeError:
            raw = None
        if not isinstance(raw, dict) or raw.get("version") != _VERSION or raw.get("root") != root \
                or raw.get("suffixes") != list(suffixes) or not isinstance(raw.get("folders"), dict):
            return cls(root, suffixes)
        return cls(root, suffixes, raw["folders"])

    def to_bytes(self) -> bytes:
        return orjson.dumps({"version": _VERSION, "root": self.root, "suffixes": list(self.suffixes),
                             "folders": self.current})

    def reuse(self, folder: str, st) -> tuple[list[str], list[tuple[str, int, str]]] | None:
        """(sub-folders, files as (name, size, stamp)) of `folder` as the last walk saw it, when
        its stat `st` says its entries are the same (same modification and change times, inode)."""
        hit = self.previous.get(folder)
        if hit is None or not _same_folder(hit, st):
            return None
        self.current[folder] = hit
        self.folders_reused += 1
        _, subs, files = hit.split(_FIELD)
        entries = []
        for item in files.split(_ITEM) if files else ():
            name, size, stamp = item.split(_PART)
            entries.append((name, int(size), stamp))
        return (subs.split(_ITEM) if subs else []), entries

    def keep(self, folder: str, st, subfolders: list[str], files: list[tuple[str, int, str]],
             refused: bool = False) -> None:
        """Remember what a read of `folder` (stat `st` before the read) found, if the folder has
        settled (see the module), holds nothing `refused` and no name holding a separator of the
        saved form."""
        self.folders_read += 1
        names = [*subfolders, *(n for n, _, _ in files)]
        if not refused and max(st.st_mtime_ns, st.st_ctime_ns) < self.settled_before and \
                not any(c in name for name in names for c in (_FIELD, _ITEM, _PART)):
            listed = _ITEM.join(f"{n}{_PART}{size}{_PART}{stamp}" for n, size, stamp in files)
            self.current[folder] = _FIELD.join([_key(st), _ITEM.join(subfolders), listed])


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
