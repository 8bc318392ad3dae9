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
from resources.storage import RefusedPath, Store
from torchci_assets.ingest.fields import RowGuard
from torchci_assets.ingest.junit import (
    TEST_RUN_SCHEMA,
    ParsedBatch,
    ReportRejected,
    parse_junit,
    parse_report_path,
)
from torchci_assets.ingest.rejects import Reject, write_rejects
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

_STAGE_SCHEMA = TEST_RUN_SCHEMA.append(pa.field("seq", pa.int64()))
_GUARD = RowGuard(_STAGE_SCHEMA)

# Final status of entries of one test found in several files (see the module docstring).
CROSS_FILE_STATUS = """
    CASE WHEN bool_or(status = 'passed') THEN 'passed'
         WHEN bool_or(status = 'skipped') THEN 'skipped'
         WHEN bool_or(status = 'failed') THEN 'failed'
         ELSE 'error' END
"""

_FOLD_SQL = f"""
    SELECT workflow_id, workflow_run_attempt, job_id, invoking_file, file, classname, name,
           sum(time) AS time,
           {CROSS_FILE_STATUS} AS status,
           sum(rerun_count) + count(*) - 1 AS rerun_count,
           arg_min(message, seq) FILTER (WHERE message IS NOT NULL) AS message
    FROM stage
    GROUP BY ALL
    ORDER BY job_id, workflow_run_attempt, invoking_file, file, classname, name
"""


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
                        progress_every: int = PROGRESS_EVERY) -> IngestReport:
    """Ingest `test-reports/day=<day>/` and `test-runs/day=<day>/` into `test_run` for that day,
    unreadable reports, files and lines into the `test-reports` and `test-runs` parts of `rejects`."""
    report = IngestReport(day)
    reports = archive.list_files(f"test-reports/day={day}", REPORT_SUFFIXES)
    runs_files = archive.list_files(f"test-runs/day={day}", RUNS_SUFFIXES)
    report.report_files, report.runs_files = len(reports), len(runs_files)
    total = len(reports) + len(runs_files)
    with tempfile.TemporaryDirectory(prefix=f"torchci-test-run-{day}-") as tmp:
        sources = [(REPORTS_SOURCE, e) for e in reports] + [(RUNS_SOURCE, e) for e in runs_files]

        def refused(row: dict, problem: str) -> None:
            source, entry = sources[row["seq"]]
            report.rejects[source].append(Reject(source, entry.path, f"test {str(row.get('name'))[:200]!r}: {problem}", None))

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
                    log(f"test_run day={day}: file {seq + 1}/{total}, {stage.rows} rows staged, "
                        f"{report.reject_count} rejects")
        finally:
            stage.close()
        report.staged_rows = stage.rows
        con = connect()
        try:
            con.execute("SET enable_progress_bar = false")
            con.execute(f"CREATE TEMP VIEW stage AS SELECT * FROM read_parquet('{stage.path}')")
            reader = con.sql(_FOLD_SQL).to_arrow_reader(OUTPUT_BATCH_ROWS)
            report.rows = lake.write(TABLE, day, _as_schema(reader, TEST_RUN_SCHEMA))
        finally:
            con.close()
    for source, rejects in report.rejects.items():
        write_rejects(lake, day, source, rejects)
    return report


def _as_schema(reader: pa.RecordBatchReader, schema: pa.Schema) -> pa.RecordBatchReader:
    """The reader's batches cast to the table's declared schema (DuckDB widens sums)."""
    def batches():
        for batch in reader:
            yield pa.RecordBatch.from_arrays(
                [batch.column(f.name).cast(f.type) for f in schema], schema=schema)
    return pa.RecordBatchReader.from_batches(schema, batches())
