"""Archive files a backfill writes, and the per-repository cursor that makes it resumable.

A part (a batch of workflow runs, a day of commits, the pull requests) is written as one gzipped
JSON-lines file per day of arrival, all named for the part, and only after the whole part was
read: a crash leaves either the previous files or the new ones, never half a part. The gzip
stream has no timestamp, so the same records give the same bytes, and a part written again after
a crash replaces its earlier copy rather than adding to it. Memory holds one part's lines.

The cursor (`backfill/<owner>/<repo>.json` in the archive) records what is done: the days fully
read, and inside the current day the last workflow run written. It is saved after each part, so
a re-run continues where the last one stopped and never writes a part twice under two names.
"""

from __future__ import annotations

import json
import zlib
from collections import defaultdict

from resources.storage import Store


def gzip_bytes(data: bytes) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, 31)  # header mtime 0: same lines, same bytes
    return c.compress(data) + c.flush()


class Part:
    """The lines of one part, by day, until `commit` writes them."""

    def __init__(self, store: Store, name: str):
        self.store = store
        self.name = name
        self.lines: dict[str, list[bytes]] = defaultdict(list)
        self.blobs: list[tuple[str, bytes]] = []

    def add(self, deliveries: list[tuple[str, bytes]]) -> None:
        for day, line in deliveries:
            self.lines[day].append(line)

    def add_file(self, rel: str, data: bytes) -> None:
        """A test-report zip or a log, written with the part."""
        self.blobs.append((rel, data))

    def commit(self) -> int:
        for rel, data in self.blobs:
            self.store.write_bytes(rel, data)
        for day, lines in sorted(self.lines.items()):
            self.store.write_bytes(f"webhooks/day={day}/{self.name}.jsonl.gz", gzip_bytes(b"".join(lines)))
        return sum(len(v) for v in self.lines.values())


class Cursor:
    """What a repository's backfill has done, kept in the archive beside the data it wrote."""

    def __init__(self, store: Store, repo: str):
        self.store = store
        self.path = f"backfill/{repo}.json"
        self.state: dict = {"repo": repo, "days_done": [], "day": None, "last_run_id": 0,
                            "pulls_done_since": None}
        if store.exists(self.path):
            self.state.update(json.loads(store.read_bytes(self.path)))

    def day_done(self, day: str) -> bool:
        return day in self.state["days_done"]

    def last_run_id(self, day: str) -> int:
        return self.state["last_run_id"] if self.state["day"] == day else 0

    def runs_written(self, day: str, last_run_id: int) -> None:
        self.state.update(day=day, last_run_id=last_run_id)
        self._save()

    def finish_day(self, day: str) -> None:
        self.state["days_done"] = sorted(set(self.state["days_done"]) | {day})
        self.state.update(day=None, last_run_id=0)
        self._save()

    def pulls_done(self, since: str) -> bool:
        done = self.state.get("pulls_done_since")
        return done is not None and done <= since

    def finish_pulls(self, since: str) -> None:
        self.state["pulls_done_since"] = since
        self._save()

    def _save(self) -> None:
        self.store.write_bytes(self.path, json.dumps(self.state, indent=1, sort_keys=True).encode())
