"""Small extracts of a lake table's big files, made once per file and kept beside their reader's
partitions, so that a query over a window of days scans only the files that are new or rewritten.

Why: some readers want a few thousand rows of a big table over a window of days, at every refresh:
Dr. CI the failures of `test_results` (millions of rows a day), the disabled tests' lifecycle the
rows of PyTorch's rerun_disabled_tests jobs and when each test last reported (`test_daily_stats`,
over five weeks). Scanning the window costs what the window holds, at every refresh, though only
today's files changed.

An extract's file of one source file is `<home>/day=<the source's day>/_<name>-<digest>.pq`: under
the reading asset's own table (`home`), hidden from that table's readers (a leading `_` and not
`.parquet`), named by a digest of the source file and of the extract's query (`Lake.files_digest`:
the file's place and Parquet footer, which every rewrite changes; a new version of the query makes
its own extracts, never reads an older one's). A file already extracted is not read again, a
rewritten or new one is, and extracts whose source is gone are removed. A reader of the extracts
gets what it would get from the sources: an extract holds the rows its reader wants (a filter), or
their per-key maxima when those are all it takes of them.

Naming an extract reads its source's footer, and a reader's window holds hundreds of files: on S3
that is two requests a file, ~2 s a reader at every refresh for a 14-day window of `test_results`
on a local S3 server (bench/README.md). So the names are also kept in a small index per day folder
(`_<name>-index.json`), by each source file's size and version as the listing shows them, and a
file the index vouches for is not opened. A version says which write made a file only once the
file is older than SETTLED_S (S3 keeps the second of a write: a rewrite of the same size within
that second would look unchanged), so a file written since is named from its footer. The index is
a cache: lost, stale or written by a racing run, it costs footer reads, never a wrong extract.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass

import pyarrow.parquet as pq

from resources.lake import Lake, connect
from resources.sql import SqlFiles, relation
from resources.storage import FileEntry

# a file's listed size and version name one write once it is this old (a minute of clock skew and more)
SETTLED_S = 120


@dataclass(frozen=True)
class Extract:
    name: str        # its `<name>.sql` in `sql` (a query over view `src`, one source file), and its files' prefix
    table: str       # the table it is extracted from
    home: str        # the table beside whose partitions its files are kept: its reader's
    sql: SqlFiles

    @property
    def query(self) -> str:
        return self.sql[self.name]


def register_extract(con, lake: Lake, extract: Extract, days: list[str], name: str,
                     seen: dict[tuple[Extract, str], list[str]] | None = None) -> int:
    """View `name` over the extract of `extract.table`'s files of `days` (extracting the files
    not extracted yet); returns the number of files (0: no view, as `Lake.register`).

    `seen`: (extract, day) -> its files, as an earlier call of the same pass found them. A reader
    of one extract over overlapping windows in one pass (Dr. CI) brings each day up to date once,
    and reads one state of it: on S3 each day costs two listings and its new files' footers."""
    if seen is None:
        seen = {}
    for day in days:
        if (extract, day) not in seen:
            seen[(extract, day)] = day_extracts(lake, extract, day)
    return lake.register_files(con, [f for day in days for f in seen[(extract, day)]], name)


def day_extracts(lake: Lake, extract: Extract, day: str) -> list[str]:
    """The full paths of the extracts of the source files of `day`, up to date."""
    folder = f"{extract.home}/day={day}"
    prefix = f"_{extract.name}-"
    index_path = f"{folder}/{prefix}index.json"
    query = hashlib.sha256(extract.query.encode()).hexdigest()[:16]
    present = {e.path.rsplit("/", 1)[-1] for e in lake.store.list_folder(folder)}
    # An index is opened once listed: on S3, opening a missing file is a request to learn it is missing.
    listed = f"{prefix}index.json" in present
    known = (lake.read_record(index_path, lambda b: _parse_index(b, query)) if listed else None) or {}
    settled_before_ns = time.time_ns() - SETTLED_S * 1_000_000_000
    wanted: dict[str, str] = {}  # extract name -> its source's full path
    index: dict[str, list[str]] = {}
    for entry in lake.store.list_files(f"{extract.table}/day={day}", (".parquet",)):
        if entry.refused:
            continue  # a link in the lake is never followed
        src, version = lake.store.full(entry.path), settled_version(entry, settled_before_ns)
        seen = known.get(entry.path) if version else None
        name = seen[1] if seen and seen[0] == version \
            else f"{prefix}{lake.files_digest([src], {'query': extract.query})[:32]}.pq"
        wanted[name] = src
        if version:
            index[entry.path] = [version, name]
    _make(lake, extract, folder, sorted((n, s) for n, s in wanted.items() if n not in present))
    for name in sorted(present):
        if name.startswith(prefix) and name.endswith(".pq") and name not in wanted:
            lake.store.delete(f"{folder}/{name}")  # its source was rewritten or removed
    if index != known:
        lake.store.write_bytes(index_path, json.dumps({"query": query, "files": index}, sort_keys=True).encode())
    return [lake.store.full(f"{folder}/{name}") for name in sorted(wanted)]


def settled_version(entry: FileEntry, settled_before_ns: int) -> str | None:
    """The listed file's size and version, or None while they may not yet name one write: a file
    without a version, or modified after `settled_before_ns` (its version starts with its
    modification time in nanoseconds, on either store)."""
    try:
        written_ns = int((entry.stamp or "").split(".", 1)[0])
    except ValueError:
        return None
    return f"{entry.size}/{entry.stamp}" if written_ns < settled_before_ns else None


def _parse_index(data: bytes, query: str) -> dict[str, list[str]]:
    """An index's entries (source path -> (version, extract name)) when made for this query;
    nothing for another query's or anything unexpected (then every footer is read again)."""
    raw = json.loads(data)
    if raw.get("query") != query:
        return {}
    return {str(path): [str(v[0]), str(v[1])] for path, v in raw["files"].items()}


def _make(lake: Lake, extract: Extract, folder: str, missing: list[tuple[str, str]]) -> None:
    """Extract each (name, source) of `missing` into `folder`."""
    if not missing:
        return
    con = connect()  # one connection for the day's files: a full run extracts them all
    try:
        for name, src in missing:
            _extract(con, lake, extract, src, f"{folder}/{name}")
    finally:
        con.close()


def _extract(con, lake: Lake, extract: Extract, source: str, rel: str) -> None:
    lake.register_files(con, [source], "src")
    table = relation(con, extract.query).to_arrow_table()
    with lake.store.atomic_output(rel, lake.owner) as out:
        pq.write_table(table, out)
