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
import re
import time
from dataclasses import dataclass, field

import pyarrow.parquet as pq

from resources.lake import Lake, connect
from resources.sql import SqlFiles, relation
from resources.storage import FileEntry

# a file's listed size and version name one write once it is this old (a minute of clock skew and more)
SETTLED_S = 120
# an extract's files in its home's day folder: `_<name>-<digest>.pq` and its index `_<name>-index.json`
_EXTRACT_FILE = re.compile(r"^_(?P<name>[A-Za-z0-9_]+)-(?:[0-9a-f]{32}\.pq|index\.json)$")


@dataclass(frozen=True)
class Extract:
    name: str        # its `<name>.sql` in `sql` (a query over view `src`, one source file), and its files' prefix
    table: str       # the table it is extracted from
    home: str        # the table beside whose partitions its files are kept: its reader's
    sql: SqlFiles

    @property
    def query(self) -> str:
        return self.sql[self.name]


@dataclass
class ExtractPass:
    """What one pass of a reader of extracts (a Dr. CI build) found, shared by its reads: on S3
    each day of an extract costs a listing of its source's folder and of its home's, and its new
    files' footers.

    `days`: (extract, day) -> its files: a reader of one extract over overlapping windows brings
    each day up to date once, and reads one state of it. `folders`: home day folder -> (this
    process's count of changes there, `Store.writes`, the names there as of that count): a reader
    of several extracts kept in one home lists each of its folders once, keeps the listing up to
    date with its own writes, and lists the folder again after any other change this process made
    there, as a step's `Lake(keep_listings=True)` does. Another process's changes are not seen
    until the next pass: a file listed but gone fails the read, one made but not listed is made
    again. `sources`: source day folder -> its Parquet files, listed once a pass for every extract
    of that source (Dr. CI reads two of `webhook_events`). `retired`: the names of extracts the
    reader no longer reads: their files go from the folders the pass lists."""

    days: dict[tuple[Extract, str], list[str]] = field(default_factory=dict)
    folders: dict[str, tuple[int, frozenset[str]]] = field(default_factory=dict)
    sources: dict[str, list[FileEntry]] = field(default_factory=dict)
    retired: frozenset[str] = frozenset()


def register_extract(con, lake: Lake, extract: Extract, days: list[str], name: str,
                     seen: ExtractPass | None = None) -> int:
    """View `name` over the extract of `extract.table`'s files of `days` (extracting the files
    not extracted yet); returns the number of files (0: no view, as `Lake.register`). `seen`: what
    earlier calls of the same pass found (none: this call is a pass of its own)."""
    if seen is None:
        seen = ExtractPass()
    todo = [day for day in days if (extract, day) not in seen.days]
    source_files(lake, extract.table, todo, seen)  # the window's folders at once: see `Lake.window`
    skip_missing_homes(lake, extract.home, todo, seen)
    for day in todo:
        seen.days[(extract, day)] = day_extracts(lake, extract, day, seen)
    return lake.register_files(con, [f for day in days for f in seen.days[(extract, day)]], name)


def source_files(lake: Lake, table: str, days: list[str], seen: ExtractPass) -> dict[str, list[FileEntry]]:
    """The Parquet files of the source `table`'s folders of `days`, by day: each folder listed once
    a pass, those not listed yet as one window (`Lake.window`: a window reaching back past the
    table's first day lists the table's days, not each of them)."""
    todo = [day for day in days if f"{table}/day={day}" not in seen.sources]
    for day, entries in lake.window(table, todo).items():
        seen.sources[f"{table}/day={day}"] = entries
    return {day: seen.sources[f"{table}/day={day}"] for day in days}


def skip_missing_homes(lake: Lake, home: str, days: list[str], seen: ExtractPass) -> None:
    """Note as empty, without listing them, the `home` day folders of `days` that are not there, as
    `Lake.window` does on S3 for a window reaching back past the table's first day: when the oldest
    day's folder holds nothing, the home's day folders are listed and the others left as listed.
    A folder this process changes after the home's listing is listed when read, as any other."""
    unknown = [day for day in days[1:] if f"{home}/day={day}" not in seen.folders]
    if not unknown or lake.store.is_local or folder_names(lake, f"{home}/day={days[0]}", seen):
        return
    writes = {day: lake.store.writes(f"{home}/day={day}") for day in unknown}  # before the listing
    present = set(lake.store.list_days(home))
    for day in unknown:
        if day not in present:
            seen.folders[f"{home}/day={day}"] = (writes[day], frozenset())


def folder_names(lake: Lake, folder: str, seen: ExtractPass) -> frozenset[str]:
    """The names of the files in a home day `folder`, listed once a pass and again only when this
    process changed the folder otherwise than the pass itself (`changed`); the retired extracts'
    files the listing shows are removed (`ExtractPass`)."""
    writes, names = seen.folders.get(folder, (None, frozenset()))
    if writes == lake.store.writes(folder):
        return names
    names = frozenset(e.path.rsplit("/", 1)[-1] for e in lake.store.list_folder(folder))
    seen.folders[folder] = (lake.store.writes(folder), names)
    gone = retire(lake, folder, names, seen.retired)
    changed(lake, seen, folder, frozenset(), gone, len(gone))
    return seen.folders[folder][1]


def changed(lake: Lake, seen: ExtractPass, folder: str, added: frozenset[str], removed: frozenset[str],
            changes: int) -> None:
    """The pass wrote `added` and deleted `removed` in `folder`, in `changes` writes and deletes: its
    listing is kept as they left it while they were the folder's only changes in this process since
    the listing; after any other (another Store's, another thread's), the folder is listed again."""
    writes, names = seen.folders[folder]
    if lake.store.writes(folder) == writes + changes:
        writes += changes
    seen.folders[folder] = (writes, (names - removed) | added)


def retire(lake: Lake, folder: str, names: frozenset[str], retired: frozenset[str]) -> frozenset[str]:
    """Delete the files among `names` in `folder` that are a `retired` extract's (its extracts and
    its index, named as `day_extracts` names them, nothing else); their names."""
    gone = frozenset(n for n in names if (m := _EXTRACT_FILE.match(n)) and m["name"] in retired)
    for name in sorted(gone):
        lake.store.delete(f"{folder}/{name}")
    return gone


def day_extracts(lake: Lake, extract: Extract, day: str, seen: ExtractPass | None = None) -> list[str]:
    """The full paths of the extracts of the source files of `day`, up to date (`seen`: the pass's)."""
    if seen is None:
        seen = ExtractPass()
    folder = f"{extract.home}/day={day}"
    prefix = f"_{extract.name}-"
    index_path = f"{folder}/{prefix}index.json"
    query = hashlib.sha256(extract.query.encode()).hexdigest()[:16]
    present = folder_names(lake, folder, seen)
    # An index is opened once listed: on S3, opening a missing file is a request to learn it is missing.
    listed = f"{prefix}index.json" in present
    known = (lake.read_record(index_path, lambda b: _parse_index(b, query)) if listed else None) or {}
    settled_before_ns = time.time_ns() - SETTLED_S * 1_000_000_000
    wanted: dict[str, str] = {}  # extract name -> its source's full path
    index: dict[str, list[str]] = {}
    for entry in source_files(lake, extract.table, [day], seen)[day]:
        if entry.refused:
            continue  # a link in the lake is never followed
        src, version = lake.store.full(entry.path), settled_version(entry, settled_before_ns)
        indexed = known.get(entry.path) if version else None
        name = indexed[1] if indexed and indexed[0] == version \
            else f"{prefix}{lake.files_digest([src], {'query': extract.query})[:32]}.pq"
        wanted[name] = src
        if version:
            index[entry.path] = [version, name]
    missing = sorted((n, s) for n, s in wanted.items() if n not in present)
    _make(lake, extract, folder, missing)
    stale = frozenset(n for n in present if n.startswith(prefix) and n.endswith(".pq") and n not in wanted)
    for name in sorted(stale):
        lake.store.delete(f"{folder}/{name}")  # its source was rewritten or removed
    made = frozenset(n for n, _ in missing)
    if index != known:
        lake.store.write_bytes(index_path, json.dumps({"query": query, "files": index}, sort_keys=True).encode())
        made |= {f"{prefix}index.json"}
    changed(lake, seen, folder, made, stale, len(missing) + len(stale) + (index != known))
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
