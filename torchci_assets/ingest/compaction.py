"""Keeping a day partition's parts few while the intra-day refresh adds some at every increment.

At the default cadence a refresh adds a part to the webhook tables and to `test_run` about every
minute: ~1,400 by the day's end, and every reader of the partition opens each one (the webhook
ingest itself reads the day's delivery ids and staged rows from all of them; `test_results`
writes files per `test_run` part, which Dr. CI and the daily aggregates read), so a refresh at the
end of such a day costs twice what it costs with a few parts (bench/README.md).

So after an increment the ingest merges parts, tiered like a log-structured merge tree. An
increment's part has level 0; when a level holds more than FANOUT parts, its oldest FANOUT become
one part of the next level, in their place. A level never keeps more than FANOUT parts, so N
increments leave at most FANOUT x (1 + log_FANOUT N) parts (~50 for a day), and each row is
rewritten once per level it climbs (twice in a day), which costs a fraction of the reads it saves.

A merge only reads parts that an earlier run committed (the newest part of a level is never among
its oldest FANOUT, and a part merged in this run waits for the next); it writes the merged part and
removes its sources in the same commit as the increment, so a run killed midway leaves files the
manifest does not list and the next refresh rebuilds the day (see `increments`). A merged part
holds exactly its sources' rows, in their order.

In the manifest a merge keeps the table's generation and is recorded with the parts it replaced
(`increments`), so a reader that follows the parts one by one (`test_results` and
`test_daily_stats` follow `test_run`'s) takes a merge of parts it counted as counted, and merges
its own files the same way, instead of starting the day again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from resources.lake import Lake
from torchci_assets.ingest.commit import PartitionCommit

FANOUT = 16
_LEVEL = re.compile(r"(?:inc-\d+|m(\d+)-\d+-\d+)(?:-\d+)?")


@dataclass(frozen=True)
class Merge:
    """One part `name` made of the parts `sources` (names without their suffix), oldest first."""

    name: str
    sources: tuple[str, ...]


def part_level(stem: str, prefix: str = "") -> int | None:
    """0 for an increment's part (`<prefix>inc-<seq>`, `<prefix>inc-<seq>-<n>`), k for a part
    merged to level k (`<prefix>m<k>-<seq>-<n>`), None for any other (a rebuild's: never merged)."""
    if not stem.startswith(prefix):
        return None
    m = _LEVEL.fullmatch(stem[len(prefix):])
    if m is None:
        return None
    return int(m.group(1)) if m.group(1) else 0


def in_age_order(stems: list[str], prefix: str = "") -> list[str]:
    """Parts named as this module names them, oldest rows first (for a folder listed in name
    order): a rebuild's parts, then the highest level's, each level in the order of the
    increments that made its parts."""
    def key(stem: str) -> tuple:
        level = part_level(stem, prefix)
        if level is None:
            return (0, 0, (), stem)
        return (1, -level, tuple(int(n) for n in re.findall(r"\d+", stem[len(prefix):])[int(level > 0):]), stem)
    return sorted(stems, key=key)


def plan_merges(stems: list[str], seq: int, prefix: str = "", fanout: int | None = None,
                committed: set[str] | None = None) -> tuple[list[Merge], list[str]]:
    """The merges to make after increment `seq` of a partition whose parts are `stems` (oldest
    first), and its parts afterwards. Only parts in `committed` (default: all) are merged; a level
    with more than `fanout` parts loses its oldest `fanout` to one part of the next level, until
    no level can."""
    fanout = FANOUT if fanout is None else fanout
    mergeable = set(stems) if committed is None else set(committed)
    order, merges = list(stems), []
    while True:
        levels: dict[int, list[str]] = {}
        for s in order:
            level = part_level(s, prefix)
            if level is not None:
                levels.setdefault(level, []).append(s)
        ready = [(level, names[:fanout]) for level, names in sorted(levels.items())
                 if len(names) > fanout and all(n in mergeable for n in names[:fanout])]
        if not ready:
            return merges, order
        level, sources = ready[0]
        merge = Merge(f"{prefix}m{level + 1}-{seq}-{len(merges)}", tuple(sources))
        gone = set(sources)
        at = order.index(sources[0])
        order = [*order[:at], merge.name, *(s for s in order[at:] if s not in gone)]
        merges.append(merge)


def write_merge(out: PartitionCommit, lake: Lake, table: str, day: str, merge: Merge, paths: dict[str, str],
                hidden: bool = False, options: dict | None = None) -> int:
    """Write `merge`'s part from its sources (stem -> full path) into the commit, one source's
    row groups after the other, and have the commit remove the sources; returns its rows."""
    schema = merged_schema(lake, [paths[stem] for stem in merge.sources])
    rows = 0
    with out.writer(table, day, schema, part=merge.name, options=options, hidden=hidden) as w:
        for stem in merge.sources:
            with lake.store.fs.open_input_file(paths[stem]) as f:
                data = pq.ParquetFile(f).read()
            for name in schema.names:
                if name not in data.column_names:  # a part written before the column was added
                    data = data.append_column(schema.field(name), pa.nulls(data.num_rows, schema.field(name).type))
            w.write_table(data.select(schema.names).cast(schema))
            rows += data.num_rows
    names = {paths[s].rsplit("/", 1)[-1] for s in merge.sources}
    out.replace_matching(table, day, lambda name: name in names)
    return rows


def merged_schema(lake: Lake, sources: list[str]) -> pa.Schema:
    """The schema of a part merged from `sources` (full paths, oldest first): the newest one's,
    with any column only older ones have after it. A day can hold parts of two versions (the day
    a deployment adds a column): taking the oldest's would drop the new column's values."""
    schemas = []
    for path in reversed(sources):
        with lake.store.fs.open_input_file(path) as f:
            schemas.append(pq.ParquetFile(f).schema_arrow)
    return pa.unify_schemas(schemas, promote_options="permissive").with_metadata(schemas[0].metadata)


def merge_appended(out: PartitionCommit, lake: Lake, table: str, day: str, seq: int, parts: list[str],
                   added: list[str], options: dict | None = None) -> tuple[list[str], dict[str, list[str]]] | None:
    """After increment `seq` appended `added` to the partition's committed `parts` (file names, oldest
    first): the merges `plan_merges` asks for, written into `out`; returns the partition's part names
    afterwards and each merged part's sources (for `increments.next_manifest`), or None: no merge."""
    stems = [p.removesuffix(".parquet") for p in [*parts, *added]]
    merges, order = plan_merges(stems, seq, committed={p.removesuffix(".parquet") for p in parts})
    if not merges:
        return None
    paths = {stem: lake.store.full(lake.partition_path(table, day, stem)) for stem in stems}
    for merge in merges:
        write_merge(out, lake, table, day, merge, paths, options=options)
    return ([f"{stem}.parquet" for stem in order],
            {f"{m.name}.parquet": [f"{s}.parquet" for s in m.sources] for m in merges})
