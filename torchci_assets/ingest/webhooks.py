"""Webhook archive day -> `webhook_events` (bronze) and the typed tables, in one streaming pass.

One row per delivery goes to `webhook_events` with its payload as JSON text; the typed
tables (`workflow_job`, `workflow_run`, `push`, `pull_request`) get the fields users query.
A day is read file by file in bounded chunks and written in bounded batches, so memory
does not grow with the day's size; only the delivery ids seen (for deduplication) do, at
about 150 bytes a delivery. A large day is scanned by two processes; the second one's bronze
rows wait in the temporary folder (lz4 Arrow files) until the first one's deliveries are known.

GitHub delivers at least once and in no particular order, so:
- a delivery id seen before (a redelivery, possibly in another file) is dropped;
- a job's state is the highest in the lattice queued < waiting < in_progress < completed,
  not the last one received; fields missing from the winning delivery (older GitHub versions
  omit created_at, run_attempt, workflow_name) are filled from the job's other deliveries.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from resources.lake import Lake, connect
from resources.sql import Literals, SqlFiles, compose
from resources.storage import Store
from torchci_assets.ingest.commit import HIDDEN_SUFFIX, PartitionCommit, hidden_files
from torchci_assets.ingest.compaction import in_age_order, merge_appended, plan_merges, write_merge
from torchci_assets.ingest.heap import large_blocks_kept
from torchci_assets.ingest.increments import (APPEND, REWRITE, Manifest, Ownership, fresh_manifest, log_mode,
                                              next_manifest, part_name, parts_of, plan_increment, write_manifests)
from torchci_assets.ingest.rejects import Reject, rejects_table
from torchci_assets.ingest.webhook_runs import (PARALLEL_MIN_BYTES, SCAN_PROCESSES, HeldFiles, Progress, can_spawn,
                                                file_runs, scan_day)
from torchci_assets.ingest.webhook_scan import BATCH_ROWS, BRONZE_OPTIONS, SOURCE, RunScan, scan_run


@dataclass
class WebhookDayReport:
    day: str
    files: int = 0
    bytes_read: int = 0
    lines: int = 0
    deliveries: int = 0
    duplicates: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    rejects: list[Reject] = field(default_factory=list)
    events: dict[str, int] = field(default_factory=dict)
    mode: str = "rebuild"  # or "increment": only the files the manifest did not list were read
    rebuild_reason: str | None = None  # why a refresh rebuilt the day instead
    added: dict[str, int] = field(default_factory=dict)  # rows each table gained in this run
    day_lines: int = 0  # the day's totals, for its reject rate
    day_rejects: int = 0
    day_deliveries: int = 0
    parts_added: dict[str, list[str]] | None = None  # an increment's new parts per appended table; None: a rebuild

    @property
    def reject_rate(self) -> float:
        return len(self.rejects) / self.lines if self.lines else 0.0


def ingest_webhook_day(archive: Store, lake: Lake, day: str, log: Callable[[str], None] = lambda s: None,
                       workers: int | None = None, incremental: bool = False) -> WebhookDayReport:
    """Ingest `webhooks/day=<day>/` from the archive into the lake's tables for that day,
    its unreadable records into the `webhooks` part of `rejects`.

    A large day's files are cut into `workers` runs of consecutive files, scanned side by side:
    the first in this process, each other one in a spawned process (parsing holds the GIL; two
    cores need two processes). A small day is one run, in this process. Every line is read once.
    A delivery is kept where it is first seen in file order, so a later run cannot know which of
    its deliveries an earlier run kept until both are scanned: it holds its bronze rows in local
    Arrow files (lz4, cheap to write), each written to the lake without those copies as soon as
    the earlier runs are scanned, while the later runs' scans or the reduce go on (see
    `webhook_runs`). Any number of workers gives the same tables.

    `incremental` (the intra-day refresh): read only the files the manifest does not list yet
    (`_add_increment`), unless the day must be rebuilt (`increments.plan_increment`).
    """
    report = WebhookDayReport(day)
    files = archive.list_files(f"webhooks/day={day}", (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz"))
    if incremental:
        manifest, new, report.rebuild_reason = plan_increment(lake, day, PRIMARY, OWNERSHIP, files)
        log_mode(log, PRIMARY, day, new if manifest else None, report.rebuild_reason)
        if manifest is not None:
            _add_increment(archive, lake, day, manifest, new, report, log)
            return report
    _rebuild(archive, lake, day, files, report, log, workers)
    return report


def _rebuild(archive: Store, lake: Lake, day: str, files: list, report: WebhookDayReport,
             log: Callable[[str], None], workers: int | None) -> None:
    report.files = len(files)
    report.bytes_read = sum(f.size for f in files)
    if workers is None:
        workers = SCAN_PROCESSES if (report.bytes_read >= PARALLEL_MIN_BYTES and (os.cpu_count() or 1) > 1
                                     and can_spawn()) else 1
    with (large_blocks_kept(), tempfile.TemporaryDirectory(prefix=f"torchci-webhooks-{day}-") as tmp,
          PartitionCommit(lake) as out, HeldFiles(out, day, tmp) as held):
        scans = scan_day(archive, lake, day, file_runs(files, workers), tmp, held, log)
        _collect(scans, out, report)
        _reduce_typed(out, day, scans, report)  # while the held bronze files are written
        held.wait(scans)
        for table in OWNERSHIP.tables:
            out.replace_matching(table, day, lambda name: True)
        out.write("rejects", day, rejects_table(report.rejects), part=SOURCE)
        out.replace_matching("rejects", day, lambda name: name.startswith(f"{SOURCE}-inc-"))
    manifest = fresh_manifest(files, {t: parts_of(_names(lake, t, day)) for t in OWNERSHIP.tables})
    manifest.counts = _counts(report, {})
    _day_totals(report, {}, report.rows)
    write_manifests(lake, day, PRIMARY, manifest, OWNERSHIP)


def _add_increment(archive: Store, lake: Lake, day: str, manifest: Manifest, new: list,
                   report: WebhookDayReport, log: Callable[[str], None]) -> None:
    """The `new` files as one more increment: bronze and push/pull_request rows appended as
    `inc-<seq>` parts, workflow_job/workflow_run reduced again from the day's staged rows."""
    report.mode, report.files, report.bytes_read = "increment", len(new), sum(f.size for f in new)
    report.parts_added = {t: [] for t in (PRIMARY, *TYPED_TABLES) if t not in MERGED_TABLES}
    if not new:
        _day_totals(report, manifest.counts, {})
        return
    seq = manifest.seq + 1
    with (large_blocks_kept(), tempfile.TemporaryDirectory(prefix=f"torchci-webhooks-{day}-") as tmp,
          PartitionCommit(lake) as out):
        progress = Progress(log, day, len(new))
        scan = scan_run(archive.uri, lake.store.uri, lake.owner, day, new, 0, tmp, progress.update,
                        seen=_day_deliveries(lake, day), bronze_prefix=part_name("", seq))
        _collect([scan], out, report)
        bronze = [final.rsplit("/", 1)[-1] for _, final in out.pending]
        changes = {PRIMARY: (APPEND, bronze)}
        merged = merge_appended(out, lake, PRIMARY, day, seq, manifest.tables[PRIMARY]["parts"], bronze,
                                options=BRONZE_OPTIONS)
        changes.update(_reduce_increment(out, lake, day, seq, scan, report, manifest.counts))
        if report.rejects:
            out.write("rejects", day, rejects_table(report.rejects), part=part_name(SOURCE, seq))
    after = next_manifest(manifest, new, changes, {PRIMARY: merged} if merged else None)
    # the increment's own parts, whether or not older ones were merged (its checks read those)
    report.parts_added = {t: names for t, (kind, names) in changes.items() if kind == APPEND}
    after.counts = _counts(report, manifest.counts)
    _day_totals(report, manifest.counts, report.rows)
    write_manifests(lake, day, PRIMARY, after, OWNERSHIP)


def _counts(report: WebhookDayReport, before: dict[str, int]) -> dict[str, int]:
    """The day's running totals after this run: `before` (an earlier state's) plus this run's."""
    now = {"lines": report.lines, "deliveries": report.deliveries, "duplicates": report.duplicates,
           "rejects": len(report.rejects), **{f"rows.{t}": n for t, n in report.rows.items()}}
    return {k: before.get(k, 0) + now.get(k, 0) for k in set(before) | set(now)}


def _day_totals(report: WebhookDayReport, before: dict[str, int], added: dict[str, int]) -> None:
    """Set the report's day totals (what the partition holds now) beside this run's own counts."""
    report.added = dict(added)
    report.day_lines = before.get("lines", 0) + report.lines
    report.day_rejects = before.get("rejects", 0) + len(report.rejects)
    report.day_deliveries = before.get("deliveries", 0) + report.deliveries
    report.rows = {t: before.get(f"rows.{t}", 0) + added.get(t, 0) for t in OWNERSHIP.tables}


def _names(lake: Lake, table: str, day: str) -> list[str]:
    return [e.path.rsplit("/", 1)[-1] for e in lake.store.list_folder(f"{table}/day={day}")]


def _day_deliveries(lake: Lake, day: str) -> dict[str, str]:
    """Delivery id -> event of every delivery the day's partition holds (two columns, not the payloads)."""
    files = lake.files(PRIMARY, [day])
    if not files:
        return {}
    table = lake.read_files(files, columns=["delivery_id", "event"])
    return dict(zip(table.column("delivery_id").to_pylist(), table.column("event").to_pylist()))


def _collect(scans: list[RunScan], out: PartitionCommit, report: WebhookDayReport) -> None:
    """The scans' files into this commit, their counts and rejects (in archive order) into the report."""
    for scan in scans:
        out.adopt(scan.pending)
        report.lines += scan.lines
        report.deliveries += scan.deliveries
        report.duplicates += scan.duplicates
        report.rejects += scan.rejects + [r for _, r in scan.typed_rejects]
        for event, n in scan.events.items():
            report.events[event] = report.events.get(event, 0) + n
    report.rejects.sort(key=_reject_order)
    report.rows["webhook_events"] = report.deliveries


def _reject_order(r: Reject) -> tuple:
    path, _, line = r.location.rpartition(":")
    return (path, int(line)) if line.isdigit() else (r.location, 0)


# ---- reduction: staging rows -> one row per key, in SQL -----------------------------------

_TS_COLUMNS = {
    "workflow_job": ("created_at", "started_at", "completed_at"),
    "workflow_run": ("created_at", "updated_at"),
    "push": ("head_commit_timestamp",),
    "pull_request": ("updated_at",),
}

SQL = dict(SqlFiles(__file__).steps("webhook_tables"))
TYPED_TABLES = ("workflow_job", "workflow_run", "push", "pull_request")


PRIMARY = "webhook_events"
OWNERSHIP = Ownership([PRIMARY, *TYPED_TABLES], [SOURCE])
# Reduced to one row per key from every delivery of the day: an increment reduces them again from
# the day's staged rows, kept in the partition as hidden `_stage*.pq` files. The other typed
# tables hold one row per delivery, so an increment's rows are new keys, appended.
MERGED_TABLES = ("workflow_job", "workflow_run")
STAGE_PART = "stage"  # hidden: `_stage.pq`, `_stage-inc-<n>.pq`


def _reduce_typed(out: PartitionCommit, day: str, scans: list[RunScan], report: WebhookDayReport) -> None:
    con = connect()
    try:
        for name in TYPED_TABLES:
            files = [os.path.join(scan.staged, name + ".parquet") for scan in scans]
            copies = [(f, d) for scan, f in zip(scans, files)
                      for d in ([] if scan.copies is None else scan.copies.to_pylist())]
            _stage_view(con, files, copies)
            _reject_bad_timestamps(con, name, report)
            if name in MERGED_TABLES:
                out.write(name, day, con.sql(SQL["staged"]).to_arrow_reader(BATCH_ROWS), part=STAGE_PART, hidden=True)
            reader = con.sql(SQL[name]).to_arrow_reader(BATCH_ROWS)
            report.rows[name] = out.write(name, day, reader)
    finally:
        con.close()


def _stage_view(con, files: list[str], copies: list[tuple[str, str]]) -> None:
    """View `stage`: the staged rows of `files`, without the (file, delivery id) `copies`."""
    if not copies:
        con.execute(compose(SQL["stage_without_copies"], files=Literals(files)))
        return
    con.register("copies", pa.table({"filename": [f for f, _ in copies], "delivery_id": [d for _, d in copies]},
                                    schema=pa.schema([("filename", pa.string()), ("delivery_id", pa.string())])))
    con.execute(compose(SQL["stage"], files=Literals(files)))


def _reject_bad_timestamps(con, name: str, report: WebhookDayReport) -> None:
    """The values of `name`'s timestamp columns that are not timestamps, as rejects: column by
    column, each in the order of the staged rows."""
    columns = _TS_COLUMNS[name]
    rows = con.execute(compose(SQL["bad_timestamps"], columns=columns)).fetchall()
    report.rejects += [Reject(SOURCE, loc, f"{name}: wrong type: {col} {vals[i][:40]!r} is not a timestamp", None)
                       for i, col in enumerate(columns) for loc, vals, bad in rows if bad[i]]


def _reduce_increment(out: PartitionCommit, lake: Lake, day: str, seq: int, scan: RunScan,
                      report: WebhookDayReport, before: dict[str, int]) -> dict[str, tuple[str, list[str]]]:
    """The typed rows of an increment's deliveries: appended, or (MERGED_TABLES) kept as staged rows
    and the table reduced again from all of the day's; returns the changes for the manifest."""
    changes = {}
    con = connect()
    try:
        for name in TYPED_TABLES:
            _stage_view(con, [os.path.join(scan.staged, name + ".parquet")], [])
            _reject_bad_timestamps(con, name, report)
            if not con.execute(SQL["staged_count"]).fetchall()[0][0]:
                report.rows[name] = 0
                continue
            if name in MERGED_TABLES:
                out.write(name, day, con.sql(SQL["staged"]).to_arrow_reader(BATCH_ROWS),
                          part=part_name(STAGE_PART, seq), hidden=True)
                _merge_staged(out, lake, name, day, seq)
                written = out.write(name, day, _merged(con, lake, name, day))
                report.rows[name] = written - before.get(f"rows.{name}", 0)
                changes[name] = (REWRITE, ["data.parquet"])
            else:
                part = part_name("", seq)
                report.rows[name] = out.write(name, day, con.sql(SQL[name]).to_arrow_reader(BATCH_ROWS), part=part)
                changes[name] = (APPEND, [f"{part}.parquet"])
    finally:
        con.close()
    return changes


def _merged(con, lake: Lake, table: str, day: str) -> pa.RecordBatchReader:
    """`table` after the increment (view `stage`): the ids it names reduced again from their staged
    rows, earlier and new; every other row as it was. The cost follows the increment's ids, not
    the day's deliveries (a full table's rows are copied, not reduced)."""
    con.execute(SQL["keep_increment"])
    con.execute(SQL["touched_ids"])
    ids = con.sql(SQL["touched_list"]).to_arrow_table().column("id").combine_chunks()
    con.register("earlier", _staged_earlier(lake, table, day, ids))
    con.execute(SQL["stage_with_earlier"])
    if not lake.register(con, table, [day], name="current"):
        return con.sql(SQL[table]).to_arrow_reader(BATCH_ROWS)
    con.register("reduced", con.sql(SQL[table]).to_arrow_table())
    return con.sql(SQL[f"merged_{table}"]).to_arrow_reader(BATCH_ROWS)


def _merge_staged(out: PartitionCommit, lake: Lake, table: str, day: str, seq: int) -> None:
    """Keep the day's staged files few (see `compaction`): the committed `_stage-*` files merged
    tier by tier. The increment's own file, still pending, is not among them."""
    paths = {p.rsplit("/", 1)[-1][1:].removesuffix(HIDDEN_SUFFIX): p
             for p in hidden_files(lake, table, day, STAGE_PART)}
    prefix = f"{STAGE_PART}-"
    merges, _ = plan_merges([*in_age_order(list(paths), prefix), part_name(STAGE_PART, seq)], seq, prefix=prefix,
                            committed=set(paths))
    for merge in merges:
        write_merge(out, lake, table, day, merge, paths, hidden=True)


def _staged_earlier(lake: Lake, table: str, day: str, ids: pa.Array) -> pa.Table:
    """The staged rows of `ids` the day's earlier ingests kept in the partition (its `_stage*` files)."""
    files = hidden_files(lake, table, day, STAGE_PART)
    table = lake.read_files(files)
    return table.filter(pc.is_in(table.column("id"), value_set=ids.cast(table.schema.field("id").type)))
