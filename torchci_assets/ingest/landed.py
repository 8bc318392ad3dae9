"""What has landed in the archive for one day: a cheap fingerprint of its files.

The intra-day refresh (`jobs.refresh`) re-materializes a day's partitions when new files have
landed in its `day=` folders. Reading the files to find out would cost what the refresh costs;
listing them costs one directory walk locally and one paged listing per source on S3. The
archive is append-only and its writers publish files whole (the receiver rolls a spool segment
into a new file, uploaders put an object once), so a file's path and size say whether it is
new: a new name is new data, a size that changed is a file still being appended to. A file
replaced by another of the same size is not seen; no writer of this archive does that.

Every visible file below the day folders counts, whatever its name: the readers decide what
they read, and a file they would reject is still new input (its reject must show up). Hidden
files (the receiver's and the Store's staging names start with '.') and refused entries are
listed by `Store.list_files` as the readers see them: a refused symbolic link counts as an
entry of size 0, so it triggers the refresh that rejects it, once.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from resources.storage import Store
from torchci_assets.partitions import ARCHIVE_SOURCES


@dataclass(frozen=True)
class DayFingerprint:
    """The archive's files of one day, summarized: `digest` changes when any file appears or
    changes size; `files` and `bytes` are for the log line."""

    day: str
    files: int
    bytes: int
    digest: str

    @property
    def short(self) -> str:
        """Sixteen hex digits: enough to tell two states of one day apart, short enough for a run key."""
        return self.digest[:16]


def day_fingerprint(store: Store, day: str, sources: tuple[str, ...] = ARCHIVE_SOURCES) -> DayFingerprint:
    """The fingerprint of `day` over every source's `day=` folder (a missing folder is empty)."""
    h = hashlib.sha256()
    files = size = 0
    for source in sources:
        for entry in store.list_files(f"{source}/day={day}", ("",)):
            h.update(f"{entry.path}\0{entry.size}\n".encode())
            files += 1
            size += entry.size
    return DayFingerprint(day, files, size, h.hexdigest())
