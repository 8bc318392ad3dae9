"""Archive files a backfill writes, and the per-repository cursor that makes it resumable.

A part (a batch of workflow runs, a day of commits, the pull requests) is written as one gzipped
JSON-lines file per day of arrival, all named for the part, and only after the whole part was
read (its lines wait in local temporary files, so memory does not grow with a part). A crash
leaves each file either absent or whole; the gzip stream has no timestamp, so the same records
give the same bytes, and a part read again after a crash replaces its earlier files rather than
adding to them.

The cursor (`backfill/<owner>/<repo>.json` in the archive) records what is done: the days fully
read, inside the current day the last workflow run written, and the runs that were still going
when read. It is saved after each part, so a re-run continues where the last one stopped and never
writes a part twice under two names; the unfinished runs are read again (into a part named for
that reading) until they complete, and only then is their day done.

What a day holds depends on the options (`--branch`, `--prs`), so each combination has a cursor
and part names of its own (`scope`): a day read without `--prs` is read again with it, for its pull
requests' runs, and two branches' parts never overwrite each other.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import zlib

from resources.storage import Store


class _DayFile:
    """One day's lines of a part, gzipped into a local temporary file as they come."""

    def __init__(self, folder: str, day: str):
        self.path = os.path.join(folder, f"{day}.jsonl.gz")
        self.fh = open(self.path, "wb")
        self.z = zlib.compressobj(6, zlib.DEFLATED, 31)  # header mtime 0: same lines, same bytes
        self.lines = 0

    def write(self, line: bytes) -> None:
        self.fh.write(self.z.compress(line))
        self.lines += 1

    def close(self) -> None:
        self.fh.write(self.z.flush())
        self.fh.close()


class Part:
    """The lines of one part, by day, spooled to local disk until `commit` puts them in the archive.

    Test-report zips and logs are written to the store directly, as they download (`RestReader.
    download`): each is its own file, keyed by its path, so a copy written before a crash is
    replaced by the same bytes when the part is read again.
    """

    def __init__(self, store: Store, name: str):
        self.store = store
        self.name = name
        self._tmp = tempfile.TemporaryDirectory(prefix="torchci-backfill-")
        self.days: dict[str, _DayFile] = {}

    def add(self, deliveries: list[tuple[str, bytes]]) -> None:
        for day, line in deliveries:
            if day not in self.days:
                self.days[day] = _DayFile(self._tmp.name, day)
            self.days[day].write(line)

    def commit(self) -> int:
        """Put the part's day files in the archive; returns the number of lines."""
        try:
            for day in sorted(self.days):
                self.days[day].close()
                self.write_day(day)
            return sum(f.lines for f in self.days.values())
        finally:
            self._tmp.cleanup()

    def write_day(self, day: str) -> None:
        with open(self.days[day].path, "rb") as src, \
                self.store.atomic_output(f"webhooks/day={day}/{self.name}.jsonl.gz") as out:
            while chunk := src.read(1 << 20):
                out.write(chunk)


def branch_scope(branch: str) -> str:
    """'' for main, else `@<branch>` with every character a file name or a repository name could
    not carry as such escaped (`release/2.5` -> `@release~2f2.5`), so two branches never share one."""
    if branch == "main":
        return ""
    return "@" + re.sub(r"[^A-Za-z0-9._-]", lambda m: "".join(f"~{b:02x}" for b in m[0].encode()), branch)


def scope(branch: str, prs: bool) -> str:
    """The suffix of a backfill's cursor and part names for its options: '' for the default (main,
    without pull requests), as before options were told apart; `+prs` with pull requests."""
    return branch_scope(branch) + ("+prs" if prs else "")


class Cursor:
    """What a repository's backfill, with the given options, has done, kept in the archive beside
    the data it wrote."""

    def __init__(self, store: Store, repo: str, branch: str = "main", prs: bool = False, part: str = ""):
        self.store = store
        self.path = f"backfill/{repo}{scope(branch, prs)}{part}.json"  # `part`: '+ciflow', never a branch's
        self.state: dict = {"repo": repo, "days_done": [], "last_run_ids": {}, "unfinished": {},
                            "attempts": {}, "pulls_done_since": None, "ciflow_read": True}
        if store.exists(self.path):
            saved = json.loads(store.read_bytes(self.path))
            if prs and "ciflow_read" not in saved:
                # written before ciflow tag runs were read: the days it finished, and the one it was
                # reading (its runs above last_run_ids are read on; those below are not again), lack them
                saved["ciflow_days_missing"] = sorted(set(saved.get("days_done", []))
                                                      | set(saved.get("last_run_ids", {})))
            self.state.update(saved)
            self.state["ciflow_read"] = True

    def ciflow_missing(self, day: str) -> bool:
        """The day was finished by a backfill that did not read its ciflow tag runs yet."""
        return day in self.state.get("ciflow_days_missing", [])

    def ciflow_done(self, day: str) -> None:
        self.state["ciflow_days_missing"] = [d for d in self.state.get("ciflow_days_missing", []) if d != day]
        self._save()

    def day_done(self, day: str) -> bool:
        return day in self.state["days_done"]

    def last_run_id(self, day: str) -> int:
        return self.state["last_run_ids"].get(day, 0)

    def unfinished(self, day: str) -> set[int]:
        """Runs of the day that were still going when read: read again until they complete."""
        return set(self.state["unfinished"].get(day, []))

    def attempts(self, day: str) -> dict[int, int]:
        """The latest attempt read of each run of the day written so far: a run GitHub lists with
        a later one was re-run since, and is read again."""
        return {int(run): attempt for run, attempt in self.state.setdefault("attempts", {}).get(day, {}).items()}

    def runs_written(self, day: str, runs: list[dict], last_run_id: int | None = None) -> None:
        """Record `runs` as written (`last_run_id`: the day's listing is done up to there)."""
        unfinished = self.unfinished(day) - {r["id"] for r in runs}
        unfinished |= {r["id"] for r in runs if r.get("status") != "completed"}
        self.state["unfinished"][day] = sorted(unfinished)
        if not self.state["unfinished"][day]:
            del self.state["unfinished"][day]
        self.state.setdefault("attempts", {}).setdefault(day, {}).update(
            {str(r["id"]): r.get("run_attempt") or 1 for r in runs})
        if last_run_id is not None:
            self.state["last_run_ids"][day] = last_run_id
        self._save()

    def finish_day(self, day: str) -> None:
        self.state["days_done"] = sorted(set(self.state["days_done"]) | {day})
        self.state["last_run_ids"].pop(day, None)
        self.state.setdefault("attempts", {}).pop(day, None)
        self._save()

    def pulls_done(self, since: str) -> bool:
        done = self.state.get("pulls_done_since")
        return done is not None and done <= since

    def finish_pulls(self, since: str) -> None:
        self.state["pulls_done_since"] = since
        self._save()

    def _save(self) -> None:
        self.store.write_bytes(self.path, json.dumps(self.state, indent=1, sort_keys=True).encode())
