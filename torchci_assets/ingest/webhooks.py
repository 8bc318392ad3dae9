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

from resources.lake import Lake, connect
from resources.sql import Literals, SqlFiles, compose
from resources.storage import Store
from torchci_assets.ingest.commit import PartitionCommit
from torchci_assets.ingest.heap import large_blocks_kept
from torchci_assets.ingest.rejects import Reject, rejects_table
from torchci_assets.ingest.webhook_runs import PARALLEL_MIN_BYTES, SCAN_PROCESSES, HeldFiles, can_spawn, file_runs, scan_day
from torchci_assets.ingest.webhook_scan import BATCH_ROWS, SOURCE, RunScan


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

    @property
    def reject_rate(self) -> float:
        return len(self.rejects) / self.lines if self.lines else 0.0


def ingest_webhook_day(archive: Store, lake: Lake, day: str, log: Callable[[str], None] = lambda s: None,
                       workers: int | None = None) -> WebhookDayReport:
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
    """
    report = WebhookDayReport(day)
    files = archive.list_files(f"webhooks/day={day}", (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz"))
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
        out.replace_parts("webhook_events", day, prefix="part-")
        out.write("rejects", day, rejects_table(report.rejects), part=SOURCE)
    return report


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


def _reduce_typed(out: PartitionCommit, day: str, scans: list[RunScan], report: WebhookDayReport) -> None:
    con = connect()
    try:
        for name in TYPED_TABLES:
            files = [os.path.join(scan.staged, name + ".parquet") for scan in scans]
            copies = [(f, d) for scan, f in zip(scans, files)
                      for d in ([] if scan.copies is None else scan.copies.to_pylist())]
            con.register("copies", pa.table({"filename": [f for f, _ in copies], "delivery_id": [d for _, d in copies]},
                                            schema=pa.schema([("filename", pa.string()), ("delivery_id", pa.string())])))
            con.execute(compose(SQL["stage"], files=Literals(files)))
            for col in _TS_COLUMNS[name]:
                bad = con.execute(compose(SQL["bad_timestamps"], column=col)).fetchall()
                report.rejects += [Reject(SOURCE, loc, f"{name}: wrong type: {col} {val[:40]!r} is not a timestamp", None)
                                   for loc, val in bad]
            reader = con.sql(SQL[name]).to_arrow_reader(BATCH_ROWS)
            report.rows[name] = out.write(name, day, reader)
    finally:
        con.close()
