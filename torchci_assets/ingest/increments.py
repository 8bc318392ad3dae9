"""What a day partition of an ingest table holds, part by part: the contract between the
intra-day refresh's ingest and whatever reads the lake incrementally.

A table's day partition is a set of immutable Parquet part files. A run either

- ADDS part files (`inc-<seq>.parquet`, `<source>-inc-<seq>.parquet` in `rejects`) holding rows
  for keys that no earlier part of that day holds: a refresh that found only new archive files
  whose rows are new keys; and may MERGE older parts (`compaction`): a merged part holds exactly
  the rows of the parts it replaces, in their order; or
- REWRITES the partition: any other change. A full rebuild (the daily run, a backfill, `torchci
  run`, a materialization from the UI) replaces every part with a fresh set; a refresh rewrites
  the small tables whose rows merge across increments (`workflow_job`, `workflow_run`,
  `ci_result`, `ci_callback_minutes`).

A part's name is never reused for different content except by a rewrite, and every rewrite
starts a new `generation` of the table; an append and a merge keep it, and the manifest keeps
every merge of the generation (`merged`: part -> the parts it replaced). So a reader that
aggregated parts A of generation G before, and now finds generation G with parts A' + B, where A'
are parts of A or merges of them (`held_parts`), may aggregate B alone and take A' as counted;
any other generation, or a merge of parts it counted and parts it did not, means start again.
`partition_parts` is the one way to ask; the rest of this module is how the ingest
keeps the `_manifest.json` it reads (hidden from readers, who glob `*.parquet`).

The manifest of an ingest (`<primary table>/day=D/_manifest.json`) also records which archive
files (path and size) the partition's state was built from, and every file the ingest owns in
its tables' folders with its size. It is written after the data, so a run killed in between
leaves files the manifest does not list: the next refresh sees that (`differs_from_disk`) and
rebuilds the day, as it does when an archive file it read changed size or vanished.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterable

import orjson

from resources.lake import Lake
from resources.storage import FileEntry

MANIFEST = "_manifest.json"
# Beside the manifest, an ingest may keep its last walk of the archive's folders (a cache: see
# `resources.listing_cache`); like the manifest, it is not part of the partition's files.
ARCHIVE_LISTING = "_archive_listing.json"
VERSION = 2
REFRESH_TAG = "torchci/refresh"
REFRESH_VALUE = "archive"
APPEND, REWRITE = "append", "rewrite"


def is_refresh(tags: dict[str, str]) -> bool:
    """Whether a run may ingest increments: only the intra-day refresh's runs; any other run
    (daily schedule, backfill, `torchci run`, the UI) rebuilds the day from scratch."""
    return tags.get(REFRESH_TAG) == REFRESH_VALUE


def partition_folder(lake: Lake, table: str, day: str) -> str:
    """Where an ingested partition's rows are, as a materialization shows it: its folder, not a
    file, since a refresh adds parts beside the day's first (and the webhook tables' first part is
    not `data.parquet`)."""
    return lake.store.display(f"{table}/day={day}")


@dataclasses.dataclass(frozen=True)
class Parts:
    """A table's day partition as its last ingest left it.

    `names`: its part files, in the order they were added (a rewrite's parts first);
    `generation`: changes at every rewrite, never at an append or a merge; `last_change`: APPEND
    or REWRITE; `appended`: the parts the last change added (all of them after a rewrite);
    `merged`: every merge of the generation, merged part -> the parts it replaced.
    A partition without a manifest (a derived table, one written before manifests) is reported
    as a rewrite of generation None: a reader must take it whole.
    """

    table: str
    day: str
    names: tuple[str, ...]
    generation: str | None
    last_change: str
    appended: tuple[str, ...]
    merged: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)


def held_parts(name: str, counted: Iterable[str], merged: dict[str, Iterable[str]]) -> tuple[set[str], set[str]]:
    """(the parts of `counted` whose rows part `name` holds, the parts it holds rows of that are not
    in `counted`): a part in `counted` holds itself; a merge (`merged`: part -> the parts it
    replaced) holds what the parts it replaced hold, merges of merges included."""
    counted = set(counted)
    inside, outside, todo = set(), set(), [name]
    while todo:
        part = todo.pop()
        if part in counted:
            inside.add(part)
        elif part in merged:
            todo += merged[part]
        else:
            outside.add(part)
    return inside, outside


def partition_parts(lake: Lake, table: str, day: str) -> Parts:
    """The parts of `table`'s partition `day`, in order, and whether the last change appended.

    Rely on it to aggregate only what is new: when `generation` equals the one you aggregated
    and every part you aggregated is still among `names`, the parts after them are new rows of
    new keys (see the module's docstring); otherwise aggregate `names` from scratch.
    """
    raw = _read(lake, table, day)
    if raw is None or table not in raw.get("tables", {}):
        names = tuple(sorted(p.rsplit("/", 1)[-1] for p in lake.files(table, [day])))
        return Parts(table, day, names, None, REWRITE, names)
    state = raw["tables"][table]
    return Parts(table, day, tuple(state["parts"]), state["generation"], state["last_change"],
                 tuple(state["appended"]), {k: tuple(v) for k, v in state.get("merged", {}).items()})


@dataclasses.dataclass
class Manifest:
    """One ingest's record of a day: see the module's docstring. `tables[t]` holds `parts`,
    `generation`, `last_change` and `appended` of table t; `files` maps each owned file
    (`<table>/<name>`) to its size; `sources` each archive file read to its size; `seq` counts the
    increments since the last rebuild; `counts` keeps running totals for the metadata; `stamps` each
    archive file's stamp when it was read (a file replaced by one of the same size has another)."""

    seq: int
    sources: dict[str, int]
    files: dict[str, int]
    tables: dict[str, dict]
    counts: dict[str, int]
    stamps: dict[str, str] = dataclasses.field(default_factory=dict)

    def to_json(self) -> bytes:
        # orjson, and no deep copy: a PyTorch-sized day lists ~25,000 archive files, and a refresh
        # writes this every time.
        return orjson.dumps({"version": VERSION, "seq": self.seq, "sources": self.sources, "files": self.files,
                             "tables": self.tables, "counts": self.counts, "stamps": self.stamps},
                            option=orjson.OPT_SORT_KEYS)

    @classmethod
    def load(cls, lake: Lake, table: str, day: str) -> "Manifest | None":
        raw = _read(lake, table, day)
        if raw is None or raw.get("version") != VERSION or "sources" not in raw:
            return None
        return cls(raw["seq"], raw["sources"], raw["files"], raw["tables"], raw["counts"], raw.get("stamps", {}))


def _read(lake: Lake, table: str, day: str) -> dict | None:
    path = f"{table}/day={day}/{MANIFEST}"
    try:
        return orjson.loads(lake.store.read_bytes(path))
    except (FileNotFoundError, OSError, ValueError):
        return None


class Ownership:
    """Which files of which table folders an ingest writes: whole folders, and in the shared
    `rejects` folder only its sources' parts (other ingests write theirs at the same time)."""

    def __init__(self, tables: Iterable[str], reject_sources: Iterable[str]):
        self.tables = tuple(tables)
        self.reject_sources = tuple(reject_sources)

    def folders(self) -> list[str]:
        return [*self.tables, "rejects"]

    def owns(self, table: str, name: str) -> bool:
        if name in (MANIFEST, ARCHIVE_LISTING):
            return False
        if table != "rejects":
            return table in self.tables
        return any(name == f"{s}.parquet" or name.startswith(f"{s}-inc-") for s in self.reject_sources)

    def on_disk(self, lake: Lake, day: str) -> dict[str, int]:
        """Every owned file of the day as `<table>/<name>` -> size."""
        out = {}
        for table in self.folders():
            for entry in lake.store.list_folder(f"{table}/day={day}"):
                name = entry.path.rsplit("/", 1)[-1]
                if self.owns(table, name):
                    out[f"{table}/{name}"] = entry.size
        return out


def differs_from_disk(manifest: Manifest, ownership: Ownership, lake: Lake, day: str) -> str | None:
    """Why the partition is not what its manifest says (a run killed between its data and its
    manifest, a file removed by hand), or None."""
    disk = ownership.on_disk(lake, day)
    extra = sorted(set(disk) - set(manifest.files))
    missing = sorted(set(manifest.files) - set(disk))
    resized = sorted(f for f in set(disk) & set(manifest.files) if disk[f] != manifest.files[f])
    for what, files in (("files the manifest does not list (a run killed before its manifest)", extra),
                        ("files of the manifest missing", missing), ("files changed since the manifest", resized)):
        if files:
            return f"partition has {what}: {', '.join(files[:3])}" + (" ..." if len(files) > 3 else "")
    return None


def new_sources(manifest: Manifest, listing: list[FileEntry]) -> tuple[list[FileEntry], str | None]:
    """(archive files not read yet, why the day must be rebuilt instead or None): a file read
    before that vanished, changed size or was replaced means what was read is no longer what is there."""
    seen = {e.path: e for e in listing}
    stamps = manifest.stamps
    changed = [p for p, size in manifest.sources.items()
               if (e := seen.get(p)) is None or e.size != size or (p in stamps and e.stamp != stamps[p])]
    if changed:  # the first in path order, so the reason does not depend on the manifest's order
        path = min(changed)
        size, now = manifest.sources[path], seen.get(path)
        if now is None:
            return [], f"archive file {path} read before is gone"
        if now.size != size:
            return [], f"archive file {path} changed size since it was read ({size} -> {now.size} bytes)"
        return [], f"archive file {path} was replaced since it was read (same size, another file)"
    return [e for e in listing if e.path not in manifest.sources], None


def plan_increment(lake: Lake, day: str, primary: str, ownership: Ownership,
                   listing: list[FileEntry]) -> tuple[Manifest | None, list[FileEntry], str | None]:
    """(the manifest to build on, the archive files to add, None) for an increment; or (None, [],
    why the day must be rebuilt)."""
    manifest = Manifest.load(lake, primary, day)
    if manifest is None:
        return None, [], "no manifest: the partition was never ingested by this version"
    why = differs_from_disk(manifest, ownership, lake, day)
    if why is None:
        new, why = new_sources(manifest, listing)
        if why is None:
            return manifest, new, None
    return None, [], why


def _rewritten(names: list[str]) -> dict:
    return {"parts": list(names), "generation": uuid.uuid4().hex, "last_change": REWRITE, "appended": list(names)}


def fresh_manifest(listing: list[FileEntry], parts: dict[str, list[str]]) -> Manifest:
    """The manifest of a rebuild from `listing`: every table (-> its part names) rewritten."""
    return Manifest(0, {e.path: e.size for e in listing}, {}, {t: _rewritten(n) for t, n in parts.items()}, {},
                    _stamps(listing))


def _stamps(listing: list[FileEntry]) -> dict[str, str]:
    return {e.path: e.stamp for e in listing if e.stamp is not None}


def next_manifest(old: Manifest, added: list[FileEntry], changes: dict[str, tuple[str, list[str]]],
                  merges: dict[str, tuple[list[str], dict[str, list[str]]]] | None = None) -> Manifest:
    """The manifest after an increment of `added` files; `changes[table]` = (APPEND, new part
    names) or (REWRITE, all part names); `merges[table]` = (all part names after the append, merged
    part -> the parts it replaced) when the append was followed by merging (`compaction`); a table
    not in `changes` is unchanged (and keeps saying what its last change was)."""
    tables = {t: dict(s) for t, s in old.tables.items()}
    for table, (kind, names) in changes.items():
        if kind == APPEND:
            state = tables[table]
            parts, merged = (merges or {}).get(table, ([*state["parts"], *names], {}))
            tables[table] = {**state, "parts": list(parts), "last_change": APPEND, "appended": names,
                             "merged": {**state.get("merged", {}), **merged}}
        else:
            tables[table] = _rewritten(names)
    sources = {**old.sources, **{e.path: e.size for e in added}}
    return Manifest(old.seq + 1, sources, {}, tables, dict(old.counts), {**old.stamps, **_stamps(added)})


def write_manifests(lake: Lake, day: str, primary: str, manifest: Manifest, ownership: Ownership) -> None:
    """After the data: record what is on disk, each table's manifest, the primary's last (its
    `seq` is the commit point: a table's manifest ahead of the primary's is a killed run)."""
    manifest.files = ownership.on_disk(lake, day)
    data = manifest.to_json()
    for table in [t for t in manifest.tables if t != primary] + [primary]:
        lake.store.write_bytes(f"{table}/day={day}/{MANIFEST}", data)


def part_name(prefix: str, seq: int) -> str:
    """The name (without `.parquet`) of increment `seq`'s part: `inc-3`, `test-reports-inc-3`."""
    return f"{prefix}-inc-{seq}" if prefix else f"inc-{seq}"


def parts_of(names: Iterable[str]) -> list[str]:
    return sorted(n for n in names if n.endswith(".parquet") and not n.startswith(("_", ".")))


def log_mode(log: Callable[[str], None], table: str, day: str, new: list[FileEntry] | None, why: str | None) -> None:
    if why is not None:
        log(f"{table} day={day}: rebuilding the day ({why})")
    elif new is not None:
        log(f"{table} day={day}: increment of {len(new)} new archive file(s)")
