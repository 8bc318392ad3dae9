"""The day's job logs (`logs/day=D/`) -> `job_failure`: for each failed job, the line that
explains the failure, as PyTorch's log classifier finds it.

Which jobs. A log lands after its job ends, so day D's logs belong to jobs whose webhooks are
in `workflow_job` D-JOB_LOOKBACK_DAYS..D. A log whose job is known to have succeeded there
(conclusion success, skipped or neutral) is skipped and counted; every other log is classified,
a job not found (webhooks lost, or its `completed` arriving after its log) included, with
run_attempt and conclusion left null.

Late logs. A log is partitioned by the day it arrived, like every archive record. test_jobs and
test_results for day D read `job_failure` over the same window as their jobs
(D-2..D+1), so a log arriving the day after its job's test report is still joined, and Dagster
marks day D stale when that later partition changes.

Infrastructure. A row's `infra` is true when its rule's name is in the configured
`log_classifier.infra_rules` (TORCHCI_CONFIG): the job failed for a reason outside its tests
(runner lost, GPU error, full disk), and test_jobs then flags it `infra_suspect`.

Context. `context` is upstream's: the shell commands (`+` lines) that led to the failure, newest
first (see classifier.py). `log_invalid_utf8` marks a log with bytes that are not UTF-8, matched
as U+FFFD: a binary log that no rule matches shows as such rather than as a silent "no rule".
The column came later than the others; older partitions are read with it null (the lake reads
partitions by column name).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import multiprocessing
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa

from resources.lake import Lake, connect
from resources.sql import SqlFiles
from resources.storage import Store
from torchci_assets.derived.failures.classifier import Classifier
from torchci_assets.derived.failures.rules import Ruleset, parse_ruleset
from torchci_assets.ingest.commit import PartitionCommit, hidden_path
from torchci_assets.ingest.logs import SOURCE, JobLog, LogBlocks, list_job_logs
from torchci_assets.ingest.rejects import Reject, rejects_table
from torchci_assets.partitions import days_around

JOB_LOOKBACK_DAYS = 2
SUCCESS_CONCLUSIONS = ("success", "skipped", "neutral")
STORED_LINE_CHARS = 4096  # a matched or context line longer than this is stored cut, with "…"
PARALLEL_MIN_BYTES = 32 << 20  # below this a day's logs are classified in this process
MAX_WORKERS = 4

JOB_FAILURE_SCHEMA = pa.schema([
    ("job_id", pa.int64()), ("run_attempt", pa.int64()), ("job_name", pa.string()), ("conclusion", pa.string()),
    ("rule", pa.string()), ("line_number", pa.int64()), ("line", pa.string()),
    ("captures", pa.list_(pa.string())), ("context", pa.list_(pa.string())), ("infra", pa.bool_()),
    ("log_path", pa.string()), ("log_lines", pa.int64()), ("log_bytes", pa.int64()), ("log_complete", pa.bool_()),
    ("log_invalid_utf8", pa.bool_()),
])

# Each classified log's result, kept hidden in the partition so a refresh reads only new logs.
CLASSIFIED_PART = "classified"  # hidden: `_classified.pq`
CLASSIFIED_SCHEMA = pa.schema([
    ("log_path", pa.string()), ("log_size", pa.int64()), ("log_stamp", pa.string()), ("rules_digest", pa.string()),
    ("rule", pa.string()), ("line_number", pa.int64()), ("line", pa.string()), ("captures", pa.list_(pa.string())),
    ("context", pa.list_(pa.string())), ("lines", pa.int64()), ("bytes_read", pa.int64()),
    ("long_lines", pa.int64()), ("error", pa.string()), ("invalid_utf8", pa.bool_()),
])

SQL = SqlFiles(__file__)


@dataclass
class LogResult:
    """One log's classification, small enough to send back from a worker process."""

    rule: str | None
    line_number: int | None
    line: str | None
    captures: list[str]
    context: list[str]
    lines: int
    bytes_read: int
    long_lines: int
    error: str | None
    invalid_utf8: bool = False


def classify_log(store: Store, path: str, ruleset: Ruleset) -> LogResult:
    """Stream one log through the classifier."""
    blocks = LogBlocks(store, path)
    c = Classifier(ruleset)
    for block in blocks:
        c.feed(block)
    r = c.result()
    return LogResult(r.rule, r.line_number, r.line, r.captures, r.context, r.lines, blocks.bytes_read,
                     blocks.long_lines, blocks.error, r.invalid_utf8)


@dataclass
class JobFailureReport:
    files: int = 0  # files in the day's logs folder
    logs: int = 0  # of which job logs (one per job)
    rows: int = 0
    classified: int = 0
    infra: int = 0
    skipped_successful: int = 0
    jobs_not_found: int = 0
    bytes_read: int = 0
    long_lines: int = 0
    invalid_utf8: int = 0  # logs with bytes that are not UTF-8 (matched as U+FFFD)
    workers: int = 1
    reused: int = 0  # logs whose classification was kept from an earlier run of the day
    rules: dict[str, int] = field(default_factory=dict)
    rejects: list[Reject] = field(default_factory=list)


def _jobs(lake: Lake, day: str, job_ids: list[int]) -> dict[int, tuple]:
    """job id -> (run_attempt, name, conclusion) at the job's highest state in the look-back window."""
    con = connect()
    try:
        if not job_ids or not lake.register(con, "workflow_job", days_around(day, JOB_LOOKBACK_DAYS), name="j"):
            return {}
        con.register("wanted", pa.table({"id": pa.array(job_ids, pa.int64())}))
        rows = con.execute(SQL["failed_jobs"]).fetchall()
    finally:
        con.close()
    return {r[0]: r[1:] for r in rows}


def _cut(text: str | None) -> str | None:
    return text if text is None or len(text) <= STORED_LINE_CHARS else text[:STORED_LINE_CHARS - 1] + "…"


_worker_rules: Ruleset | None = None


def _init_worker(rules_data: bytes, rules_source: str) -> None:
    global _worker_rules
    _worker_rules = parse_ruleset(rules_data, rules_source)


def _classify_in_worker(archive_uri: str, path: str) -> LogResult:
    return classify_log(Store(archive_uri), path, _worker_rules)


def _classify_all(archive: Store, logs: list[JobLog], ruleset: Ruleset, rules_data: bytes, workers: int,
                  log: Callable[[str], None]) -> list[LogResult]:
    if workers <= 1:
        return [classify_log(archive, j.path, ruleset) for j in logs]
    ctx = multiprocessing.get_context("spawn")  # no fork: the parent may hold threads and locks
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker,
                                                initargs=(rules_data, ruleset.source)) as pool:
        futures = [pool.submit(_classify_in_worker, archive.uri, j.path) for j in logs]
        results = []
        for i, f in enumerate(futures, 1):
            results.append(f.result())
            if i % 500 == 0:
                log(f"classified {i:,} of {len(logs):,} logs ({workers} processes)")
        return results


def build_job_failure(archive: Store, lake: Lake, day: str, ruleset: Ruleset, rules_data: bytes,
                      infra_rules: tuple[str, ...], workers: int | None = None,
                      log: Callable[[str], None] = lambda _: None, reuse: bool = False) -> JobFailureReport:
    """Classify the day's logs of failed jobs and write `job_failure` and the `logs` rejects together.

    `rules_data` is the rules file's bytes (worker processes parse their own copy). Each log's
    classification is kept in the partition (hidden `_classified.pq`): with `reuse` (the
    intra-day refresh) a log already classified with the same rules, and the same size, is not
    read again. Which logs count, and their jobs, are decided again each time, so the table is
    the one a full run gives.
    """
    report = JobFailureReport()
    logs, report.rejects = list_job_logs(archive, day)
    report.logs, report.files = len(logs), len(logs) + len(report.rejects)
    jobs = _jobs(lake, day, [j.job_id for j in logs])
    todo = []
    for j in logs:
        attempt, name, conclusion = jobs.get(j.job_id, (None, None, None))
        if conclusion in SUCCESS_CONCLUSIONS:
            report.skipped_successful += 1
        else:
            report.jobs_not_found += j.job_id not in jobs
            todo.append(j)
    results = _results(archive, lake, day, todo, ruleset, rules_data, workers, log, reuse, report)
    infra = set(infra_rules)
    rows = []
    for j, r in zip(todo, results):
        report.bytes_read += r.bytes_read
        report.long_lines += r.long_lines
        report.invalid_utf8 += bool(r.invalid_utf8)
        if r.error:
            kept = f"classified its first {r.lines:,} lines" if r.lines else "nothing could be read"
            report.rejects.append(Reject(SOURCE, j.path, f"log cut short or unreadable ({r.error}): {kept}", None))
            if not r.lines:
                continue
        attempt, name, conclusion = jobs.get(j.job_id, (None, None, None))
        rows.append({
            "job_id": j.job_id, "run_attempt": attempt, "job_name": name, "conclusion": conclusion,
            "rule": r.rule, "line_number": r.line_number, "line": _cut(r.line), "captures": r.captures,
            "context": [_cut(c) for c in r.context], "infra": r.rule in infra, "log_path": j.path,
            "log_lines": r.lines, "log_bytes": r.bytes_read, "log_complete": r.error is None,
            "log_invalid_utf8": bool(r.invalid_utf8),
        })
        if r.rule is not None:
            report.classified += 1
            report.infra += r.rule in infra
            report.rules[r.rule] = report.rules.get(r.rule, 0) + 1
    report.rows = len(rows)
    with PartitionCommit(lake) as commit:
        commit.write("job_failure", day, pa.Table.from_pylist(rows, schema=JOB_FAILURE_SCHEMA))
        commit.write("rejects", day, rejects_table(report.rejects), part=SOURCE)
        commit.write("job_failure", day, _classified_table(todo, results, ruleset.digest), part=CLASSIFIED_PART,
                     hidden=True)
    return report


def _results(archive: Store, lake: Lake, day: str, todo: list[JobLog], ruleset: Ruleset, rules_data: bytes,
             workers: int | None, log: Callable[[str], None], reuse: bool, report: JobFailureReport) -> list[LogResult]:
    """Each log's classification, in `todo`'s order: kept ones (`reuse`) or read now."""
    kept = _classified_before(lake, day, ruleset.digest) if reuse else {}
    fresh = [j for j in todo if (j.path, j.size, j.stamp) not in kept]
    report.reused = len(todo) - len(fresh)
    total = sum(j.size for j in fresh)
    if workers is None:
        workers = min(MAX_WORKERS, os.cpu_count() or 1, len(fresh)) if total >= PARALLEL_MIN_BYTES else 1
    report.workers = max(1, workers)
    log(f"classifying {len(fresh):,} logs ({total / 1e6:.1f} MB stored) with {len(ruleset)} rules from "
        f"{ruleset.source}" + (f" in {report.workers} processes" if report.workers > 1 else "")
        + (f"; {report.reused:,} classified before" if report.reused else ""))
    done = dict(zip([j.path for j in fresh], _classify_all(archive, fresh, ruleset, rules_data, report.workers, log)))
    return [done[j.path] if j.path in done else kept[(j.path, j.size, j.stamp)] for j in todo]


def _classified_table(logs: list[JobLog], results: list[LogResult], digest: str) -> pa.Table:
    # vars(), not dataclasses.asdict: the whole day's results (~1,300 on a PyTorch-sized day) are
    # written again at every refresh, and asdict deep-copies each of them for nothing.
    rows = [{"log_path": j.path, "log_size": j.size, "log_stamp": j.stamp, "rules_digest": digest,
             **vars(r), "line": _cut(r.line), "context": [_cut(c) for c in r.context]}
            for j, r in zip(logs, results)]
    return pa.Table.from_pylist(rows, schema=CLASSIFIED_SCHEMA)


def _classified_before(lake: Lake, day: str, digest: str) -> dict[tuple[str, int, str | None], LogResult]:
    """(log path, size, stamp) -> its classification with the rules of `digest`, as the partition
    kept it (a log replaced, even by one of the same size, has another stamp: read again). Kept
    results without `invalid_utf8` come from an older classifier, whose context was another one
    and which matched invalid UTF-8 unreplaced: they are classified again."""
    try:  # opened, not first asked for: on S3 each is a request
        table = lake.read_files([lake.store.full(hidden_path(lake, "job_failure", day, CLASSIFIED_PART))])
    except FileNotFoundError:
        return {}
    if "invalid_utf8" not in table.column_names:
        return {}
    fields = [f.name for f in dataclasses.fields(LogResult)]
    return {(row["log_path"], row["log_size"], row.get("log_stamp")): LogResult(**{k: row[k] for k in fields})
            for row in table.to_pylist() if row["rules_digest"] == digest}
