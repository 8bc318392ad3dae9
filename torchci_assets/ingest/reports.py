"""Archive day -> the lake's `test_run` table, from JUnit XML reports and PyTorch's JSONL rows.

Both inputs of a day are read file by file: each XML report (or JSONL file) is parsed whole
by its reader (`junit.parse_junit`, `runs_jsonl.parse_test_runs_jsonl`), which either
yields all of its rows or rejects it with a reason, and its rows go to a local staging
Parquet file in batches of STAGE_BATCH_ROWS. So Python holds one report's (or JSONL file's)
tests plus one batch, whatever the day's size.

The staging rows are then folded in DuckDB (which spills to disk under its memory limit)
into one row per test per job attempt, and written as the day's partition in one atomic
step: a crash leaves the previous partition visible, a re-run replaces it exactly.

Why a fold across files: the readers already merge the attempts of a test within one file,
but one job can record the same test in several files. PyTorch's run_test re-runs a failing
test in a fresh process, which writes a new report next to the first, and a JSONL upload can
be cut into parts between two lines of the same test. Across files these entries are
attempts of the test, and since a test is only re-run after it failed, a pass in any of them
is the final outcome (`CROSS_FILE_STATUS` below): the test failed only if every attempt did.
`rerun_count` adds one failed attempt per extra entry, `time` adds up (what the job paid),
and `message` is the first one in archive path order.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

from resources.lake import Lake, connect
from resources.listing_cache import ListingCache
from resources.sql import Literals, SqlFiles, compose
from resources.storage import RefusedPath, Store
from torchci_assets.ingest.commit import PartitionCommit
from torchci_assets.ingest.compaction import merge_appended
from torchci_assets.ingest.fields import RowGuard
from torchci_assets.ingest.increments import (APPEND, ARCHIVE_LISTING, Manifest, Ownership, fresh_manifest, log_mode,
                                              next_manifest, part_name, plan_increment, write_manifests)
from torchci_assets.ingest.junit import (
    TEST_RUN_SCHEMA,
    ParsedBatch,
    ReportRejected,
    parse_junit,
    parse_report_path,
)
from torchci_assets.ingest.rejects import Reject, rejects_table
from torchci_assets.ingest.report_zips import ZIP_SUFFIX, zip_members
from torchci_assets.ingest.runs_jsonl import parse_test_runs_jsonl

TABLE = "test_run"
REPORTS_SOURCE = "test-reports"
RUNS_SOURCE = "test-runs"
REPORT_SUFFIXES = (".xml", ".xml.gz", ZIP_SUFFIX)
RUNS_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz")
PROGRESS_EVERY = 1000  # files between two progress log lines
OUTPUT_BATCH_ROWS = 50_000
STAGE_BATCH_ROWS = 20_000

# Key of a test run: one test in one job attempt (a test module imported by two invoking
# files runs twice in a job, so the invoking file is part of it).
KEY_COLUMNS = ["workflow_id", "workflow_run_attempt", "job_id", "invoking_file", "file", "classname", "name"]
REQUIRED_COLUMNS = [*KEY_COLUMNS[:3], "file", "classname", "name", "time", "status", "rerun_count"]

OWNERSHIP = Ownership([TABLE], [REPORTS_SOURCE, RUNS_SOURCE])

_STAGE_SCHEMA = TEST_RUN_SCHEMA.append(pa.field("seq", pa.int64()))
_GUARD = RowGuard(_STAGE_SCHEMA)

SQL = SqlFiles(__file__)
# The staged rows of the day as a view (a view takes no parameter: the path is a quoted literal).
_STAGE_VIEW = "CREATE TEMP VIEW stage AS SELECT * FROM read_parquet({{path}})"


@dataclass
class IngestReport:
    day: str
    report_files: int = 0
    runs_files: int = 0
    bytes_read: int = 0
    records: int = 0  # tests and bad test cases or lines, + rejected files: the denominator of the reject rate
    staged_rows: int = 0
    rows: int = 0
    rejects: dict[str, list[Reject]] = field(default_factory=lambda: {REPORTS_SOURCE: [], RUNS_SOURCE: []})
    mode: str = "rebuild"  # or "increment": only the files the manifest did not list were read
    rebuild_reason: str | None = None  # why a refresh rebuilt the day instead
    new_files: int = 0  # files read by an increment
    rows_added: int = 0  # rows this run wrote (the whole partition's, for a rebuild)
    day_records: int = 0  # records and rejects of the whole day, for its reject rate
    day_rejects: int = 0
    parts_added: list[str] | None = None  # an increment's new parts of test_run; None: the partition was rewritten
    folders_read: int = 0  # archive folders listed by reading them
    folders_reused: int = 0  # and those taken from the last walk, unchanged since (`listing_cache`)
    folders_unseen: int = 0  # and those not stat-ed, below the top of a subtree quiet since

    @property
    def files(self) -> int:
        return self.report_files + self.runs_files

    @property
    def reject_count(self) -> int:
        return sum(len(r) for r in self.rejects.values())


class _Stage:
    """Rows appended to a local Parquet file, buffered up to STAGE_BATCH_ROWS (one row group each).

    A row Arrow refuses (a value the readers let through that does not fit its column) goes to
    `reject(row, problem)` instead of failing the batch (`RowGuard.convert`)."""

    def __init__(self, path: str, reject: Callable[[dict, str], None]):
        self.path = path
        self.writer = pq.ParquetWriter(path, _STAGE_SCHEMA, compression="lz4")
        self.buffer: list[dict] = []
        self.rows = 0
        self.reject = reject

    def add(self, rows: list[dict], seq: int) -> None:
        for row in rows:
            row["seq"] = seq
        self.buffer += rows
        self.rows += len(rows)
        if len(self.buffer) >= STAGE_BATCH_ROWS:
            self._flush()

    def _flush(self) -> None:
        if self.buffer:
            batch = _GUARD.convert(self.buffer, self._batch, self._refused)
            self.writer.write_batch(batch)
            self.buffer = []

    @staticmethod
    def _batch(rows: list[dict]) -> pa.RecordBatch:
        return pa.RecordBatch.from_pylist(rows, schema=_STAGE_SCHEMA)

    def _refused(self, row: dict, problem: str) -> None:
        self.rows -= 1
        self.reject(row, problem)

    def close(self) -> None:
        self._flush()
        self.writer.close()


def _reject(source: str, path: str, exc: ReportRejected) -> Reject:
    return Reject(source, exc.as_reject(path)["location"], str(exc), None)


def _open(archive: Store, path: str) -> pa.NativeFile:
    """The file's (gunzipped) stream; a file that cannot even be opened is rejected like a bad one."""
    try:
        return archive.open_input(path)
    except RefusedPath as exc:
        raise ReportRejected("refused", str(exc)) from None
    except OSError as exc:
        raise ReportRejected("unreadable", f"opening the file failed: {exc}") from None


def _stage_batch(batch: ParsedBatch, source: str, seq: int, stage: _Stage, report: IngestReport) -> None:
    """Stage a parser's rows, and record its rejects."""
    report.records += len(batch.rows) + len(batch.rejects)
    report.rejects[source] += [Reject(source, r["location"], r["reason"], r["sample"]) for r in batch.rejects]
    if batch.rows:
        stage.add(batch.rows, seq)


def _stage_report(archive: Store, path: str, seq: int, stage: _Stage, report: IngestReport) -> None:
    """Parse one report into the stage, all or nothing (ReportRejected leaves the stage untouched)."""
    with _open(archive, path) as stream:
        workflow_id, attempt, job_id, invoking_file = parse_report_path(path)
        batches = list(parse_junit(stream, workflow_id=workflow_id, run_attempt=attempt, job_id=job_id,
                                   invoking_file_hint=invoking_file, source_name=path))
    for batch in batches:
        _stage_batch(batch, REPORTS_SOURCE, seq, stage, report)


def _stage_zip(archive: Store, path: str, seq: int, stage: _Stage, report: IngestReport) -> None:
    """Each report in an artifact zip, all or nothing per member; a refused member is a reject
    located at `<zip path>/<member>` and the zip's other members are still read."""
    for member, stream in zip_members(archive, path):
        try:
            if member.problem is not None:
                raise member.problem
            workflow_id, attempt, job_id, invoking_file = parse_report_path(member.path)
            batches = list(parse_junit(stream, workflow_id=workflow_id, run_attempt=attempt, job_id=job_id,
                                       invoking_file_hint=invoking_file, source_name=member.path))
        except ReportRejected as exc:
            report.records += 1
            report.rejects[REPORTS_SOURCE].append(_reject(REPORTS_SOURCE, member.path, exc))
            continue
        for batch in batches:
            _stage_batch(batch, REPORTS_SOURCE, seq, stage, report)


def _stage_runs_file(archive: Store, path: str, seq: int, stage: _Stage, report: IngestReport) -> None:
    with _open(archive, path) as stream:
        batches = list(parse_test_runs_jsonl(stream, path))
    for batch in batches:
        _stage_batch(batch, RUNS_SOURCE, seq, stage, report)


def ingest_test_run_day(archive: Store, lake: Lake, day: str, log: Callable[[str], None] = lambda s: None,
                        progress_every: int = PROGRESS_EVERY, incremental: bool = False) -> IngestReport:
    """Ingest `test-reports/day=<day>/` and `test-runs/day=<day>/` into `test_run` for that day,
    unreadable reports, files and lines into the `test-reports` and `test-runs` parts of `rejects`.

    `incremental` (the intra-day refresh): read only the files the partition's manifest does not
    list yet and add their rows as a new part. A test of a job whose new report repeats a test
    that job already has (a test re-run in a report landing later) would need its rows re-folded:
    the day is then rebuilt, as it is when a file read before changed size or vanished.
    """
    report = IngestReport(day)
    cache = _listing_cache(archive, lake, day, incremental)
    listing = (archive.list_files(f"test-reports/day={day}", REPORT_SUFFIXES, cache)
               + archive.list_files(f"test-runs/day={day}", RUNS_SUFFIXES))
    _ingest(archive, lake, day, listing, report, log, progress_every, incremental)
    if cache is not None:  # after the ingest: a rebuild clears the partition's folder
        lake.store.write_bytes(_listing_path(day), cache.to_bytes())
        report.folders_read, report.folders_reused = cache.folders_read, cache.folders_reused
        report.folders_unseen = cache.folders_unseen
    return report


def _listing_path(day: str) -> str:
    return f"{TABLE}/day={day}/{ARCHIVE_LISTING}"


def _listing_cache(archive: Store, lake: Lake, day: str, incremental: bool) -> ListingCache | None:
    """In a refresh, the last refresh's walk of the day's report folders: only the folders that
    changed since are read again, and of the subtrees quiet for minutes (finished jobs and runs)
    only the top levels are stat-ed (every folder every half hour). Other runs walk every folder and keep no walk (their rebuild
    removes the refreshes' one: a day no refresh follows any more holds none)."""
    if not (archive.is_local and incremental):
        return None
    return ListingCache.from_bytes(lake.read_record(_listing_path(day), bytes), archive.full(""), REPORT_SUFFIXES,
                                  seal=True)


def _ingest(archive: Store, lake: Lake, day: str, listing: list, report: IngestReport, log: Callable[[str], None],
            progress_every: int, incremental: bool) -> None:
    if incremental:
        manifest, new, report.rebuild_reason = plan_increment(lake, day, TABLE, OWNERSHIP, listing)
        if manifest is not None:
            report.mode = "increment"
            log_mode(log, TABLE, day, new, None)
            if _add_increment(archive, lake, day, manifest, new, report, log, progress_every):
                return
            report.mode = "rebuild"
        log_mode(log, TABLE, day, None, report.rebuild_reason)
    _rebuild(archive, lake, day, listing, report, log, progress_every)


def _rebuild(archive: Store, lake: Lake, day: str, listing: list, report: IngestReport,
             log: Callable[[str], None], progress_every: int) -> None:
    """The whole day from scratch: one `data` part, every earlier part removed, a fresh manifest."""
    _reset(report)
    with tempfile.TemporaryDirectory(prefix=f"torchci-test-run-{day}-") as tmp:
        stage = _stage_files(archive, listing, tmp, report, log, progress_every)
        with PartitionCommit(lake) as out:
            report.rows = report.rows_added = _write_fold(out, day, stage.path, "data")
            for source, rejects in report.rejects.items():
                out.write("rejects", day, rejects_table(rejects), part=source)
                out.replace_matching("rejects", day, lambda n, s=source: n.startswith(f"{s}-inc-"))
            out.replace_matching(TABLE, day, lambda n: n != "data.parquet")
    manifest = fresh_manifest(listing, {TABLE: ["data.parquet"]})
    manifest.counts = {"rows": report.rows, "records": report.records, "rejects": report.reject_count}
    report.day_records, report.day_rejects = report.records, report.reject_count
    write_manifests(lake, day, TABLE, manifest, OWNERSHIP)


def _add_increment(archive: Store, lake: Lake, day: str, manifest: Manifest, new: list, report: IngestReport,
                   log: Callable[[str], None], progress_every: int) -> bool:
    """Add the rows of the `new` files as part `inc-<seq>`, merging older parts when a level is
    full (`compaction`); False (nothing written) when one of their tests is already in the
    partition for the same job, which needs a rebuild."""
    report.new_files, report.parts_added = len(new), []
    counts = manifest.counts
    if not new:
        report.rows, report.day_records, report.day_rejects = counts["rows"], counts["records"], counts["rejects"]
        return True
    seq = manifest.seq + 1
    with tempfile.TemporaryDirectory(prefix=f"torchci-test-run-{day}-") as tmp:
        stage = _stage_files(archive, new, tmp, report, log, progress_every)
        repeated = _repeated_tests(lake, day, stage.path) if stage.rows else 0
        if repeated:
            report.rebuild_reason = (f"{repeated} test(s) of the new files are already in the partition for "
                                     "the same job: their rows are folded again from the whole day")
            return False
        with PartitionCommit(lake) as out:
            part = part_name("", seq)
            report.rows_added = _write_fold(out, day, stage.path, part) if stage.rows else 0
            report.parts_added = [f"{part}.parquet"] if stage.rows else []
            merged = merge_appended(out, lake, TABLE, day, seq, manifest.tables[TABLE]["parts"], report.parts_added)
            for source, rejects in report.rejects.items():
                if rejects:
                    out.write("rejects", day, rejects_table(rejects), part=part_name(source, seq))
    after = next_manifest(manifest, new, {TABLE: (APPEND, report.parts_added)}, {TABLE: merged} if merged else None)
    after.counts = {"rows": counts["rows"] + report.rows_added, "records": counts["records"] + report.records,
                    "rejects": counts["rejects"] + report.reject_count}
    report.rows, report.day_records, report.day_rejects = (after.counts[k] for k in ("rows", "records", "rejects"))
    write_manifests(lake, day, TABLE, after, OWNERSHIP)
    return True


def _reset(report: IngestReport) -> None:
    """Forget what an abandoned increment counted: the rebuild counts the whole day again."""
    report.report_files = report.runs_files = report.bytes_read = report.records = report.staged_rows = 0
    report.new_files, report.parts_added = 0, None
    report.rejects = {REPORTS_SOURCE: [], RUNS_SOURCE: []}


def _stage_files(archive: Store, listing: list, tmp: str, report: IngestReport, log: Callable[[str], None],
                 progress_every: int) -> _Stage:
    """Parse every file of `listing` (reports and test-runs files, in that order) into a local stage."""
    sources = [(REPORTS_SOURCE if e.path.startswith(f"{REPORTS_SOURCE}/") else RUNS_SOURCE, e) for e in listing]
    report.report_files = sum(1 for s, _ in sources if s == REPORTS_SOURCE)
    report.runs_files = len(sources) - report.report_files
    total = len(sources)

    def refused(row: dict, problem: str) -> None:
        source, entry = sources[row["seq"]]
        reason = f"test {str(row.get('name'))[:200]!r}: {problem}"
        report.rejects[source].append(Reject(source, entry.path, reason, None))

    stage = _Stage(os.path.join(tmp, "stage.parquet"), refused)
    try:
        for seq, (source, entry) in enumerate(sources):
            report.bytes_read += entry.size
            try:
                if source == REPORTS_SOURCE and entry.path.endswith(ZIP_SUFFIX):
                    _stage_zip(archive, entry.path, seq, stage, report)
                elif source == REPORTS_SOURCE:
                    _stage_report(archive, entry.path, seq, stage, report)
                else:
                    _stage_runs_file(archive, entry.path, seq, stage, report)
            except ReportRejected as exc:
                report.records += 1
                report.rejects[source].append(_reject(source, entry.path, exc))
            if (seq + 1) % progress_every == 0 or seq + 1 == total:
                log(f"test_run day={report.day}: file {seq + 1}/{total}, {stage.rows} rows staged, "
                    f"{report.reject_count} rejects")
    finally:
        stage.close()
    report.staged_rows = stage.rows
    return stage


def _write_fold(out: PartitionCommit, day: str, stage_path: str, part: str) -> int:
    """The staged rows folded to one row per test run, written as `part` of the partition."""
    con = connect()
    try:
        con.execute(compose(_STAGE_VIEW, path=Literals([stage_path])))
        reader = con.sql(SQL["test_run_fold"]).to_arrow_reader(OUTPUT_BATCH_ROWS)
        return out.write(TABLE, day, _as_schema(reader, TEST_RUN_SCHEMA), part=part)
    finally:
        con.close()


def _repeated_tests(lake: Lake, day: str, stage_path: str) -> int:
    """How many tests staged are already in the partition for the same job attempt."""
    con = connect()
    try:
        con.execute(compose(_STAGE_VIEW, path=Literals([stage_path])))
        if not lake.register(con, TABLE, [day], name="existing"):
            return 0
        return con.execute(SQL["test_run_repeated"]).fetchall()[0][0]
    finally:
        con.close()


def _as_schema(reader: pa.RecordBatchReader, schema: pa.Schema) -> pa.RecordBatchReader:
    """The reader's batches cast to the table's declared schema (DuckDB widens sums)."""
    def batches():
        for batch in reader:
            yield pa.RecordBatch.from_arrays(
                [batch.column(f.name).cast(f.type) for f in schema], schema=schema)
    return pa.RecordBatchReader.from_batches(schema, batches())
