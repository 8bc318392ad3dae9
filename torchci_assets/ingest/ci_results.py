"""Downstream backend results (`ci-results/day=D/*.jsonl[.gz]`) -> `ci_result` and
`ci_callback_minutes`.

Each line is a callback as the cross-repo relay forwards it to HUD (pytorch/test-infra
`aws/lambda/cross_repo_ci_relay/utils/hud.py`), plus the receiver's `received_at`:

    {"trusted": {"verified_repo", "downstream_repo_level", "ci_metrics": {"queue_time", "execution_time"}},
     "untrusted": {"callback_payload": <body>}, "received_at"}

a `trusted` part the relay vouches for (the repository it verified, the level it gave it,
queue and execution times it measured) and an `untrusted` body the downstream repository
wrote with `report_callback.py` (`.github/actions/cross-repo-ci-relay-callback/`): the dispatch's
client_payload (`event_type`, `delivery_id`, `payload`) plus a `workflow` object. That script
builds the workflow object from environment variables, so `run_id`, `run_attempt`,
`schema_version` and `check_run_id` are strings; a whole number may come as a JSON number or
as its decimal string (as the relay's own `int(...)` reads it). It sends `in_progress` with
`started_at` and `completed` with `completed_at` only; the relay measures `queue_time` on the
first and `execution_time` on the second. `test_results` and `artifact_url` are optional.
Nightly and periodic self-reports (`event_type` `nightly`/`periodic`) are a single completed
callback whose `delivery_id` is the upstream sha tested, with `started_at` = `completed_at`
(the instant it was sent) and no relay timings. Only
`trusted.verified_repo` identifies the backend: the untrusted payload may name any
repository, and believing it would let one backend spoil (or polish) another's record. The
other keys (delivery, run, job) come from the untrusted part, but they only ever group rows
within the verified repository, so a backend that lies there can only muddle its own results.

A job reports several times (in_progress, then completed; some backends re-send the same
callback hundreds of times), so `ci_result` keeps one row per (delivery, repo, run_id,
run_attempt, job_name): the highest state in the lattice queued < waiting < in_progress <
completed, then the latest callback, then the last line read. Fields the kept callback
leaves out come from the job's other callbacks of the day: `started_at` from its
`in_progress` callback, else (a completed callback alone) from the relay's measure,
`completed_at - execution_time`; the queue time from the `in_progress` callback. Every
callback still counts towards the callback rate, kept per repo and minute in
`ci_callback_minutes` so a window's peak is a sum over daily aggregates.

Callback time: the receiver's top-level `received_at`; a line without one (an older archive)
is placed at the workflow's own `completed_at`, else `started_at`. A burst of re-sent
completed callbacks then lands in a single minute, which overstates a burst spread over more
than a minute but never hides one.

Failure kinds (`failure_kind`), decided as of a given instant (the end of the day ingested,
or of a health window's last day; now, while that day is not over):
- `infrastructure`: a timeout; a completed job with a failing conclusion and no tests run;
  a job that did not complete within 6 h of its start (completing later or never);
- `test`: any other failing conclusion (tests failed, or the backend's own steps failed
  after tests ran);
- `none`: success, neutral or skipped, within 6 h;
- `pending`: not completed and started less than 6 h before that instant: not judged yet.
A day's partition can only judge what it saw: a job still in progress at the end of day D
is `infrastructure` there if it started before D 18:00, and the health windows re-judge
every job from its merged state across the window's days. A refresh that finds no new file
judges the day again only when a job it left pending has since passed 6 h (the manifest keeps
when the earliest pending job started): nothing else in the day can change without new callbacks.
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from resources.lake import Lake, connect
from resources.sql import Literals, SqlFiles, compose, relation, run_steps
from resources.names import repo_name_problem
from resources.storage import Store
from torchci_assets.ingest.commit import PartitionCommit, hidden_files
from torchci_assets.ingest.fields import INT64_MAX, RowGuard, checked
from torchci_assets.ingest.increments import (REWRITE, Manifest, Ownership, fresh_manifest, log_mode, next_manifest,
                                              part_name, plan_increment, write_manifests)
from torchci_assets.ingest.lines import iter_lines
from torchci_assets.ingest.payloads import bounded
from torchci_assets.ingest.rejects import Reject, rejects_table
from torchci_assets.ingest.staging import StagingFile, row_groups, sorted_batches

SOURCE = "ci-results"
LOST_AFTER_MS = 6 * 3600 * 1000
STAGE_BATCH_ROWS = 10_000
# Rows per batch of ci_result written: a row holds up to a dozen texts of up to MAX_TEXT_CHARS, so
# a batch holds at most ~50 MB of them whatever the day's size.
RESULT_BATCH_ROWS = 1024
# Rows per batch DuckDB hands the sort of ci_result's rows: the sort holds a run of such batches
# (`staging.RUN_BYTES`) and one more, so a batch of the longest rows is kept to ~12 MB.
SORT_INPUT_ROWS = 256
TS = pa.timestamp("ms", tz="UTC")
STATE_RANK = {"requested": 0, "pending": 0, "queued": 0, "waiting": 1, "in_progress": 2, "completed": 3}
SUCCESS_CONCLUSIONS = ("success", "neutral", "skipped")
# Self-reports the relay forwards without a dispatch or timings (its _NIGHTLY_EVENT_TYPES).
SELF_REPORT_EVENTS = ("nightly", "periodic")

STAGE_SCHEMA = pa.schema([
    ("repo", pa.string()), ("level", pa.string()), ("event_type", pa.string()), ("delivery_id", pa.string()),
    ("head_sha", pa.string()), ("workflow_name", pa.string()), ("run_id", pa.int64()), ("run_attempt", pa.int64()),
    ("job_name", pa.string()), ("check_run_id", pa.string()), ("status", pa.string()), ("conclusion", pa.string()),
    ("started_at", TS), ("completed_at", TS), ("received_at", TS),
    ("queue_s", pa.float64()), ("execution_s", pa.float64()),
    ("passed", pa.int64()), ("failed", pa.int64()), ("skipped", pa.int64()),
    ("workflow_url", pa.string()), ("artifact_url", pa.string()),
    ("location", pa.string()),
])

CI_RESULT_SCHEMA = pa.schema([
    *STAGE_SCHEMA,
    ("callback_at", TS), ("callbacks", pa.int64()), ("failure_kind", pa.string()),
])

CALLBACK_MINUTES_SCHEMA = pa.schema([("repo", pa.string()), ("minute", TS), ("callbacks", pa.int64())])

KEY = ("delivery_id", "repo", "run_id", "run_attempt", "job_name")
# The order of ci_result's rows: by backend, then its jobs.
RESULT_ORDER = ("repo", "delivery_id", "run_id", "run_attempt", "job_name")
# The net under parse_record: a value that does not fit its column rejects the line, not the day.
_GUARD = RowGuard(STAGE_SCHEMA, skip=("location",))


class RecordError(ValueError):
    """A callback line that cannot become a row; the message is the reject reason."""


def _field(obj: dict, key: str, kind: type | tuple[type, ...], where: str, required: bool = False,
           minimum: int | None = None):
    value = obj.get(key)
    if value is None and required:
        raise RecordError(f"missing {where}.{key}")
    return checked(value, kind, f"{where}.{key}", RecordError, minimum=minimum)


def _text(obj: dict, key: str, where: str, required: bool = False) -> str | None:
    """A text the lake keeps: over MAX_TEXT_CHARS (the webhooks' cap, `payloads.bounded`) it is a
    reject naming the field, so no callback brings megabyte names into the staged rows or `ci_result`."""
    return bounded(_field(obj, key, str, where, required), f"{where}.{key}", RecordError)


def _object(obj: dict, key: str, where: str, required: bool) -> dict:
    return _field(obj, key, dict, where, required) or {}


def _timestamp_ms(obj: dict, key: str, where: str) -> int | None:
    """An ISO-8601 instant as epoch milliseconds; a time without zone is taken as UTC."""
    text = _field(obj, key, str, where)
    if text is None:
        return None
    try:
        t = dt.datetime.fromisoformat(text)
    except ValueError:
        raise RecordError(f"bad timestamp: {where}.{key} = {text[:40]!r}") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return int(t.timestamp() * 1000)


def _whole(obj: dict, key: str, where: str, required: bool = False) -> int | None:
    """A whole number from a JSON number or its decimal string (report_callback.py takes them
    from environment variables); anything else, or beyond int64, is a RecordError."""
    value = _field(obj, key, (int, str), where, required, minimum=0)
    text = value.strip() if isinstance(value, str) else str(value)
    if isinstance(value, str) and not (text.isascii() and text.isdigit()):
        raise RecordError(f"not a whole number: {where}.{key} = {value[:40]!r}")
    digits = text.lstrip("0") or "0"
    if len(digits) > 40:  # int() refuses strings over 4300 digits with a bare ValueError; none fits int64
        raise RecordError(f"out of range: {where}.{key} = a number of {len(digits)} digits, expected 0..{INT64_MAX}")
    return None if value is None else checked(int(digits), int, f"{where}.{key}", RecordError, minimum=0)


def _id_text(obj: dict, key: str, where: str) -> str | None:
    """An identifier that is a string in the relay's format (check_run_id) but a number to GitHub."""
    value = bounded(_field(obj, key, (str, int), where), f"{where}.{key}", RecordError)
    return None if value is None else str(value)


def _head_sha(callback: dict, where: str) -> str | None:
    """The upstream commit a callback is about, wherever its dispatch payload carries it: a pull
    request's head, a self-report's `head_sha`, a push's `after`, or this project's dispatch `sha`."""
    payload = callback.get("payload") if isinstance(callback.get("payload"), dict) else {}
    pr = payload.get("pull_request") if isinstance(payload.get("pull_request"), dict) else {}
    head = pr.get("head") if isinstance(pr.get("head"), dict) else {}
    for value, name in ((head.get("sha"), "payload.pull_request.head.sha"), (payload.get("head_sha"), "payload.head_sha"),
                        (payload.get("after"), "payload.after"), (callback.get("sha"), "sha")):
        if isinstance(value, str) and value:
            return bounded(value, f"{where}.{name}", RecordError)
    return None


def _seconds(obj: dict, key: str, where: str) -> float | None:
    value = _field(obj, key, (int, float), where)
    return None if value is None else float(value)


def parse_record(line: bytes) -> dict:
    """The staging row of one callback line (without `location`); RecordError if unusable."""
    try:
        rec = orjson.loads(line)
    except orjson.JSONDecodeError as e:
        raise RecordError(f"bad JSON: {e}") from None
    if not isinstance(rec, dict):
        raise RecordError(f"not an object: {type(rec).__name__}")
    trusted = _object(rec, "trusted", "record", required=True)
    repo = _text(trusted, "verified_repo", "trusted", required=True)
    problem = repo_name_problem(repo)
    if problem:
        raise RecordError(f"bad trusted.verified_repo: {problem}")
    metrics = _object(trusted, "ci_metrics", "trusted", required=False)
    callback = _object(_object(rec, "untrusted", "record", required=True), "callback_payload", "untrusted",
                       required=True)
    where = "untrusted.callback_payload"
    workflow = _object(callback, "workflow", where, required=True)
    wf = f"{where}.workflow"
    status = _field(workflow, "status", str, wf, required=True)
    if status not in STATE_RANK:
        raise RecordError(f"unknown status: {wf}.status = {status[:40]!r}")
    run_attempt = _whole(workflow, "run_attempt", wf)
    if run_attempt is not None and run_attempt < 1:
        raise RecordError(f"bad {wf}.run_attempt: {run_attempt}")
    schema_version = _whole(workflow, "schema_version", wf)
    if schema_version is not None and schema_version < 1:
        raise RecordError(f"bad {wf}.schema_version: {schema_version}")
    tests = _object(workflow, "test_results", wf, required=False)
    return {
        "repo": repo,
        "level": _text(trusted, "downstream_repo_level", "trusted"),
        "event_type": _text(callback, "event_type", where),
        "delivery_id": _text(callback, "delivery_id", where, required=True),
        "head_sha": _head_sha(callback, where),
        "workflow_name": _text(workflow, "name", wf),
        "run_id": _whole(workflow, "run_id", wf, required=True),
        # Older relays omit run_attempt: a callback without one is about the first attempt.
        "run_attempt": 1 if run_attempt is None else run_attempt,
        "job_name": _text(workflow, "job_name", wf, required=True),
        "check_run_id": _id_text(workflow, "check_run_id", wf),
        "status": status,
        "conclusion": _text(workflow, "conclusion", wf),
        "started_at": _timestamp_ms(workflow, "started_at", wf),
        "completed_at": _timestamp_ms(workflow, "completed_at", wf),
        "received_at": _timestamp_ms(rec, "received_at", "record"),
        "queue_s": _seconds(metrics, "queue_time", "trusted.ci_metrics"),
        "execution_s": _seconds(metrics, "execution_time", "trusted.ci_metrics"),
        "passed": _whole(tests, "passed", f"{wf}.test_results"),
        "failed": _whole(tests, "failed", f"{wf}.test_results"),
        "skipped": _whole(tests, "skipped", f"{wf}.test_results"),
        "workflow_url": _text(workflow, "url", wf),
        "artifact_url": _text(workflow, "artifact_url", wf),
    }


SQL = SqlFiles(__file__)
# Split into steps once: the ingest and the HUD's assets run them on a connection each
_MACROS = SQL.steps("callback_macros")
_STEPS = dict(SQL.steps("ci_result"))


def define_callback_macros(con) -> None:
    """The SQL macros that judge a downstream job (callback_macros.sql), in `con`."""
    run_steps(con, _MACROS)


def judgement(as_of_ms: int) -> dict:
    """The parameters `failure_kind` is called with: what a job is judged against."""
    return {"as_of_ms": int(as_of_ms), "lost_after_ms": LOST_AFTER_MS,
            "success_conclusions": list(SUCCESS_CONCLUSIONS)}


def judged_as_of_ms(day: str, now_ms: int | None = None) -> int:
    """The instant a day's jobs are judged at: the end of the day, or now while the day is not over
    (today's partition is materialized before midnight; its jobs have not all had 6 h yet)."""
    start = dt.datetime.fromisoformat(day).replace(tzinfo=dt.timezone.utc)
    end = int((start + dt.timedelta(days=1)).timestamp() * 1000)
    now = int(dt.datetime.now(dt.timezone.utc).timestamp() * 1000) if now_ms is None else now_ms
    return min(end, now)


def reduce_callbacks(out: PartitionCommit, lake: Lake, day: str, staged: str, earlier: list[str], as_of_ms: int,
                     report: CiResultReport) -> tuple[int, int]:
    """Write the day's `ci_result` and `ci_callback_minutes` to `out`, reduced in DuckDB from every
    callback of the day: those this run staged (the local Parquet file `staged`) and those the
    day's earlier increments kept in the partition (`earlier`, its `_stage*` files). Both are read
    where they lie; each job's callback is chosen from fixed-width columns, the rows come out
    unordered and are sorted in bounded runs beside `staged` (`sorted_batches`), so memory is
    bounded by DuckDB's limit and the caps, not by the day. Returns the rows of each; tallies
    `failure_kind` in `report.kinds` and keeps the earliest start of a pending job in
    `report.pending_since_ms` (see `rejudge_due`)."""
    columns = [f.name for f in CI_RESULT_SCHEMA if f.name not in ("callbacks", "failure_kind")]
    con = connect()
    try:
        _stage_view(con, lake, staged, earlier)
        jobs = relation(con, compose(_STEPS["jobs"], columns=columns), judgement(as_of_ms))
        ordered = sorted_batches(jobs.to_arrow_reader(SORT_INPUT_ROWS).cast(CI_RESULT_SCHEMA), CI_RESULT_SCHEMA,
                                 list(RESULT_ORDER), os.path.dirname(staged), RESULT_BATCH_ROWS)
        rows = out.write("ci_result", day,
                         pa.RecordBatchReader.from_batches(CI_RESULT_SCHEMA, _tallied(ordered, report)))
        minutes = out.write("ci_callback_minutes", day,
                            con.sql(_STEPS["minutes"]).to_arrow_reader(RESULT_BATCH_ROWS).cast(CALLBACK_MINUTES_SCHEMA))
    finally:
        con.close()
    return rows, minutes


def _stage_view(con, lake: Lake, staged: str, earlier: list[str]) -> None:
    """View `stage`: the callbacks of `staged` (this run's, a local file) and `earlier` (the day's
    earlier increments', in the lake), with the archive order the reduction breaks its last ties
    by; view `keyed`: the same with the fixed-width columns a job's callback is chosen by. Defines
    the callback macros in `con`."""
    define_callback_macros(con)
    con.execute(compose(_STEPS["staged"], files=Literals([staged])))
    if lake.register_files(con, earlier, "earlier_stage"):
        con.execute(compose(_STEPS["callbacks"], columns=STAGE_SCHEMA.names))
    else:
        con.execute(compose(_STEPS["callbacks_without_earlier"], columns=STAGE_SCHEMA.names))
    con.execute(_STEPS["stage"])
    con.execute(_STEPS["files"])
    con.execute(_STEPS["keyed"])


def _tallied(batches: pa.RecordBatchReader, report: CiResultReport) -> Iterator[pa.RecordBatch]:
    """The batches as they are, counting their rows by `failure_kind` into `report.kinds` and
    noting when the earliest pending job started (the instant the lost rule counts from) on the way."""
    for batch in batches:
        counted = dict(zip(*(c.to_pylist() for c in pc.value_counts(batch.column("failure_kind")).flatten())))
        for kind, n in counted.items():
            report.kinds[kind] = report.kinds.get(kind, 0) + n
        if "pending" in counted:
            report.pending_since_ms = _earliest(report.pending_since_ms, _pending_since_ms(batch))
        yield batch


def _pending_since_ms(batch: pa.RecordBatch) -> int | None:
    """When the batch's earliest pending job started, as `failure_kind` counts it (its start, else
    its callback); None if no pending job has either."""
    pending = batch.filter(pc.equal(batch.column("failure_kind"), "pending"))
    start = pc.min(pc.coalesce(pending.column("started_at"), pending.column("callback_at")).cast(pa.int64()))
    return start.as_py()


def _earliest(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def rejudge_due(counts: dict, as_of_ms: int) -> bool:
    """Whether a refresh that found no new callback must judge the day again at `as_of_ms`: only
    when a job still pending at the last judgement has since run past the lost rule, so a day
    with nothing that can change costs no reduction. A manifest written before the earliest
    pending start was recorded cannot tell, and is judged again once."""
    if PENDING_SINCE not in counts:
        return True
    since = counts[PENDING_SINCE]
    return since is not None and since + LOST_AFTER_MS <= as_of_ms


@dataclass
class CiResultReport:
    files: int = 0
    lines: int = 0
    callbacks: int = 0
    rows: int = 0
    rows_added: int = 0  # rows the day gained: a job's new callbacks mostly update its row
    minutes: int = 0
    repos: dict[str, int] = field(default_factory=dict)  # repo -> callbacks
    kinds: dict[str, int] = field(default_factory=dict)  # failure_kind -> rows
    rejects: list[Reject] = field(default_factory=list)
    mode: str = "rebuild"  # or "increment": only the files the manifest did not list were read
    rebuild_reason: str | None = None  # why a refresh rebuilt the day instead
    day_lines: int = 0  # the day's totals, for its reject rate
    day_rejects: int = 0
    pending_since_ms: int | None = None  # when the earliest job judged pending started (see rejudge_due)


TABLES = ("ci_result", "ci_callback_minutes")
OWNERSHIP = Ownership(TABLES, [SOURCE])
STAGE_PART = "stage"  # every callback of the day, parsed, kept hidden in the partition (`_stage*.pq`)
PENDING_SINCE = "pending_since_ms"  # the manifest's count: when the earliest pending job started, or None


def ingest_ci_results_day(store: Store, lake: Lake, day: str, now_ms: int | None = None,
                          incremental: bool = False, log=lambda s: None) -> CiResultReport:
    """Read `ci-results/day=<day>/` and write the day's `ci_result`, `ci_callback_minutes` and the
    `ci-results` part of `rejects`.

    The day's callbacks are staged in a local Parquet file in batches bounded by rows and text,
    reduced by DuckDB from the staged files and kept in the partition (hidden `_stage*` files), so
    memory follows the caps, not the day: `incremental` (the intra-day refresh) parses only the
    files the manifest does not list yet and reduces the day again from all the staged ones.
    """
    report = CiResultReport()
    listing = store.list_files(f"{SOURCE}/day={day}", (".jsonl", ".jsonl.gz"))
    if incremental:
        manifest, new, report.rebuild_reason = plan_increment(lake, day, TABLES[0], OWNERSHIP, listing)
        log_mode(log, TABLES[0], day, new if manifest else None, report.rebuild_reason)
        if manifest is not None:
            report.mode = "increment"
            if new or rejudge_due(manifest.counts, judged_as_of_ms(day, now_ms)):
                if not new:
                    log(f"{TABLES[0]} day={day}: no new archive file, but a pending job may have run past "
                        f"the {LOST_AFTER_MS // 3_600_000} h lost rule: judging the day's jobs again")
                _write_day(store, lake, day, new, now_ms, report, manifest)
            else:
                report.rows, report.minutes = manifest.counts["rows"], manifest.counts["minutes"]
                report.day_lines, report.day_rejects = manifest.counts["lines"], manifest.counts["rejects"]
            return report
    _write_day(store, lake, day, listing, now_ms, report, None)
    return report


def _write_day(store: Store, lake: Lake, day: str, files: list, now_ms: int | None, report: CiResultReport,
               manifest: Manifest | None) -> None:
    """Parse `files`; with the staged callbacks of `manifest`'s increments (a rebuild: none), reduce
    the day and write it, then the manifest."""
    seq = 0 if manifest is None else manifest.seq + 1
    earlier = [] if manifest is None else hidden_files(lake, TABLES[0], day, STAGE_PART)
    with (tempfile.TemporaryDirectory(prefix=f"torchci-ci-results-{day}-") as tmp, PartitionCommit(lake) as out):
        staged = os.path.join(tmp, "stage.parquet")
        _parse_files(store, files, report, staged)
        if files or not seq:  # a re-judgement (no new file) stages nothing
            out.write(TABLES[0], day, pa.RecordBatchReader.from_batches(STAGE_SCHEMA, row_groups(staged)),
                      part=part_name(STAGE_PART, seq) if seq else STAGE_PART, hidden=True)
        report.rows, report.minutes = reduce_callbacks(out, lake, day, staged, earlier, judged_as_of_ms(day, now_ms),
                                                       report)
        rejects_part = part_name(SOURCE, seq) if seq else SOURCE
        if report.rejects or not seq:
            out.write("rejects", day, rejects_table(report.rejects), part=rejects_part)
        if not seq:
            for table in TABLES:
                out.replace_matching(table, day, lambda name: True)
            out.replace_matching("rejects", day, lambda name: name.startswith(f"{SOURCE}-inc-"))
    before = {} if manifest is None else manifest.counts
    report.rows_added = report.rows - before.get("rows", 0)
    report.day_lines = before.get("lines", 0) + report.lines
    report.day_rejects = before.get("rejects", 0) + len(report.rejects)
    changes = {t: (REWRITE, ["data.parquet"]) for t in TABLES}
    after = (fresh_manifest(files, {t: ["data.parquet"] for t in TABLES}) if manifest is None
             else next_manifest(manifest, files, changes))
    after.counts = {"rows": report.rows, "minutes": report.minutes, "lines": report.day_lines,
                    "rejects": report.day_rejects, PENDING_SINCE: report.pending_since_ms}
    write_manifests(lake, day, TABLES[0], after, OWNERSHIP)


# The columns parse_record fills, in the staging schema's order; the ingest adds `location`.
_PARSED = STAGE_SCHEMA.names[:-1]


def _parse_files(store: Store, files: list, report: CiResultReport, path: str) -> None:
    """Stage every readable callback in `files` to the local Parquet file `path`, in batches bounded
    by rows and text (`StagingFile`), so a day of any size holds one batch; the rest into
    `report.rejects`."""
    # Rows are checked against the schema as they are parsed (each misfit is a reject with its
    # sample), so the staging file's own net never catches one.
    stage = StagingFile(path, STAGE_SCHEMA, _GUARD, lambda row, problem: report.rejects.append(
        Reject(SOURCE, row[-1], problem, None)), max_rows=STAGE_BATCH_ROWS)
    for entry in files:
        report.files += 1
        for lineno, line in iter_lines(store, entry.path, SOURCE, report.rejects):
            report.lines += 1
            try:
                row = parse_record(line)
                if problem := _GUARD.problem(row):
                    raise RecordError(problem)
            except RecordError as e:
                report.rejects.append(Reject(SOURCE, f"{entry.path}:{lineno}", str(e), Reject.sample_of(line)))
                continue
            stage.add(tuple(row[name] for name in _PARSED) + (f"{entry.path}:{lineno}",))
            report.callbacks += 1
            report.repos[row["repo"]] = report.repos.get(row["repo"], 0) + 1
    stage.close()
