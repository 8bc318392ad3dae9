"""test_results and test_jobs following test_run's parts: in an intra-day refresh, the rows of the
test_run parts that landed since the previous run are joined with their jobs and added as new
files, instead of joining, sorting and writing the whole day again.

Layout. test_results' day partition holds, for each test_run part `<p>.parquet`, the files
`<p>-b<k>.parquet`: the part's rows joined with their jobs and sorted by configuration (build
environment, test config) and test, as one sorted file of the part would be, cut where the
configuration changes once a file has BUCKET_ROWS rows. The folder's hidden `_job_parts.pq` says
which file holds each job's rows: a job has one configuration, so one file per part. Why by
configuration: every row of a test and configuration sits in one file, in order, which the day's
aggregation needs to stay as fast as from one file (splitting by job made it 30% slower).

Why: a job's fields on its test rows change after the rows are written. Its reports usually land
before its `completed` webhook, and its log can be classified as infrastructure later, so the
conclusion, completion time and infra verdict of rows already written move in most refreshes.
Rewriting only the files holding the jobs that changed costs about those files (a configuration's
rows of one part each, ~100 k rows on a PyTorch-sized day), not the day. A file is rewritten from itself: its test columns never
change, its job columns are joined again from the new test_jobs.

test_jobs (one row per job attempt, ~60 k a day) is rewritten whole: its test counts are the
previous ones plus those of the new parts' jobs; only the join with the jobs' webhooks and logs
over the window runs again, which is what picks up a later webhook or log verdict. A refresh with
no new part, no changed file and test_jobs joined to the same rows writes nothing (`unchanged`):
a file rewritten with the same rows has a new footer, and results kept while their inputs' files
are as they were (`flaky_tests`) would be computed again.

When the ingest merges test_run parts (`ingest.compaction`), the merged part's files are written
from it as a new part's are and the files of the parts it replaced go: the files stay one set per
test_run part, and no job is counted twice (its counts were taken with the parts it came from).

What is not an append rebuilds the day from test_run (every file replaced), as every run that is
not an intra-day refresh does: no record of the previous layout, a new generation of test_run
(the ingest rewrote it), a part counted before that changed or vanished, a job whose rows
are spread over an old and a new part (its counts and infra verdict need all its rows), and files
written before a job field was added to test_results (`columns.JOB_COLUMNS_ADDED`). The
record (`_parts.json`) is removed before anything is written and written after the commit, so a
refresh killed midway leaves the previous files readable and the next one rebuilds.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from resources.lake import Lake
from resources.sql import SqlFiles, execute, relation
from torchci_assets.derived.results import increments
from torchci_assets.derived.results.columns import JOB_COLUMNS_ADDED, columns_of
from torchci_assets.ingest.commit import PartitionCommit, hidden_files

TABLE = "test_results"
RECORD_NAME = "_parts.json"  # a leading '_': listings of the lake's Parquet parts skip it
JOB_PARTS = "job_parts"  # the hidden `_job_parts.pq`: job attempt -> (test_run part stem, file number)
JOB_KEY = ["workflow_id", "workflow_run_attempt", "job_id"]
JOB_PARTS_SCHEMA = pa.schema([*((k, pa.int64()) for k in JOB_KEY), ("src", pa.string()), ("bucket", pa.int64())])
BUCKET_ROWS = 100_000
BATCH_ROWS = 50_000

SQL = SqlFiles(__file__)
_STEPS = dict(SQL.steps("result_parts"))
_JOBS = dict(SQL.steps("test_jobs"))


@dataclass(frozen=True)
class Layout:
    """What test_results of a day was built from: test_run parts (store path -> size), their
    generation, and how many files each part's rows were split into (part stem -> n)."""

    sources: dict[str, int]
    buckets: dict[str, int]  # part stem -> files written for it
    generation: str | None = None

    def to_json(self) -> bytes:
        return json.dumps({"sources": self.sources, "buckets": self.buckets, "generation": self.generation},
                          sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> "Layout":
        raw = json.loads(data)
        return cls({str(k): int(v) for k, v in raw["sources"].items()},
                   {str(k): int(v) for k, v in raw["buckets"].items()}, raw.get("generation"))


@dataclass
class Written:
    """What a build wrote: `mode` rebuild, append or unchanged (nothing written), why, test_run
    parts added, files rewritten for changed jobs, and test_results rows written."""

    mode: str
    reason: str
    parts_added: int = 0
    files_rewritten: int = 0
    rows_written: int = 0


def stem(path: str) -> str:
    return path.rsplit("/", 1)[-1].removesuffix(".parquet")


def file_part(src: str, bucket: int) -> str:
    return f"{src}-b{bucket:03d}"


def source_of(path: str) -> str:
    """The test_run part stem a test_results file (`file_part`'s name, path or file name) was written for."""
    return stem(path).rsplit("-b", 1)[0]


def record_path(day: str) -> str:
    return f"{TABLE}/day={day}/{RECORD_NAME}"


def read_layout(lake: Lake, day: str) -> Layout | None:
    return lake.read_record(record_path(day), Layout.from_json)  # None: rebuild, which writes a fresh one


def plan(lake: Lake, day: str, incremental: bool) -> tuple[Layout | None, increments.Plan, increments.Sources]:
    """(previous layout, append / unchanged / recompute, test_run's parts)."""
    sources = increments.source_parts(lake, day)
    layout = read_layout(lake, day)
    counted = None if layout is None else increments.Record(layout.sources, layout.generation)
    return layout, increments.plan(counted, sources, incremental), sources


class _Files:
    """Rows sorted by configuration and test, cut into files of at least BUCKET_ROWS rows where the
    configuration (build env, test config) changes (all in file `only` when given), and the job
    attempts each file holds."""

    def __init__(self, out: PartitionCommit, day: str, src: str, schema: pa.Schema, only: int | None):
        self.out, self.day, self.src, self.schema, self.only = out, day, src, schema, only
        self.stack = contextlib.ExitStack()
        self.writer, self.current, self.rows, self.files, self.in_file = None, -1, 0, 0, 0
        self.last: str | None = None  # the configuration of the last row written
        self.keys: list[pa.Table] = []
        self.jobs: list[pa.Table] = []

    def __enter__(self) -> "_Files":
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is not None:
            self.stack.__exit__(*exc)  # the file being written is dropped
            return
        if self.writer is None:  # no row: the (empty) first file, so the partition has the schema
            self._open()
        self._close_file()

    def add(self, batch: pa.RecordBatch) -> None:
        config = pc.binary_join_element_wise(pc.fill_null(batch.column("build_env"), ""),
                                             pc.fill_null(batch.column("test_config"), ""), "\x00")
        starts = np.flatnonzero(pc.not_equal(config[1:], config[:-1]).to_numpy(zero_copy_only=False)) + 1
        lo = 0
        if self.writer is None or self.last != config[0].as_py():
            starts = np.concatenate([[0], starts])
        for cut in [*starts.tolist(), len(config)]:
            if cut > lo:
                self._write(batch.slice(lo, cut - lo))
                lo = cut
            if cut < len(config) and (self.writer is None or (self.only is None and self.in_file >= BUCKET_ROWS)):
                self._open()
        self.last = config[len(config) - 1].as_py()

    def _write(self, rows: pa.RecordBatch) -> None:
        self.writer.write_batch(rows)
        # the slice's distinct job attempts (a copy: holding the batch's columns would hold the file)
        self.keys.append(pa.Table.from_batches([rows.select(JOB_KEY)]).group_by(JOB_KEY).aggregate([]))
        self.rows += rows.num_rows
        self.in_file += rows.num_rows

    def _open(self) -> None:
        self._close_file()
        self.current = self.only if self.only is not None else self.current + 1
        self.writer = self.stack.enter_context(self.out.writer(TABLE, self.day, self.schema,
                                                               file_part(self.src, self.current)))
        self.files, self.in_file = self.files + 1, 0

    def _close_file(self) -> None:
        self.stack.close()
        if self.keys:
            keys = pa.concat_tables(self.keys).group_by(JOB_KEY).aggregate([])
            self.jobs.append(keys.append_column("src", pa.array([self.src] * keys.num_rows, pa.string()))
                             .append_column("bucket", pa.array([self.current] * keys.num_rows, pa.int64())))
        self.keys = []


def _write_rows(con, out: PartitionCommit, day: str, src: str,
                only: int | None = None) -> tuple[int, int, list[pa.Table]]:
    """The rows of view test_run with their job, as `src`'s files, cut where the configuration
    changes (or all into file `only`): (rows, files, the job attempts each file holds)."""
    reader = relation(con, SQL["test_results"]).to_arrow_reader(BATCH_ROWS)
    with _Files(out, day, src, reader.schema, only) as files:
        for batch in reader:
            if batch.num_rows:
                files.add(batch)
    return files.rows, files.files, files.jobs


def _add_sources(con, lake: Lake, out: PartitionCommit, day: str, sources: Iterable[str]) -> tuple[dict, list, int]:
    """Each test_run part's rows into its files: (part stem -> files, job -> file tables, rows)."""
    counts, maps, rows = {}, [], 0
    for path in sources:
        src = stem(path)
        lake.register_files(con, [lake.store.full(path)], "test_run")
        n, counts[src], jobs = _write_rows(con, out, day, src)
        rows += n
        maps += jobs
    return counts, maps, rows


def _finish(con, lake: Lake, out: PartitionCommit, day: str, maps: list[pa.Table]) -> None:
    out.write("test_jobs", day, relation(con, _STEPS["all_jobs"]).to_arrow_reader(BATCH_ROWS))
    held = [m.select(JOB_PARTS_SCHEMA.names).cast(JOB_PARTS_SCHEMA) for m in maps]  # none on a quiet day
    out.write(TABLE, day, pa.concat_tables(held or [JOB_PARTS_SCHEMA.empty_table()]), part=JOB_PARTS, hidden=True)


def rebuild(con, lake: Lake, day: str, sources: dict[str, int], generation: str | None, job_parameters: dict,
            reason: str) -> Written:
    """The whole day from test_run (view test_run over the day): every file replaced."""
    lake.store.delete(record_path(day))
    run_job_sql(con, job_parameters)
    with PartitionCommit(lake) as out:
        buckets, maps, rows = _add_sources(con, lake, out, day, sorted(sources))
        _finish(con, lake, out, day, maps)
        out.replace_matching(TABLE, day, lambda name: name.endswith(".parquet"))
    lake.store.write_bytes(record_path(day), Layout(sources, buckets, generation).to_json())
    return Written("rebuild", reason, len(sources), 0, rows)


def run_job_sql(con, job_parameters: dict) -> None:
    """test_jobs from view test_run's job counts and the jobs' webhooks and logs over the window."""
    execute(con, _JOBS["job_tests"])
    execute(con, _JOBS["test_jobs"], job_parameters)


def append(con, lake: Lake, day: str, layout: Layout, plan: increments.Plan, sources: dict[str, int],
           job_parameters: dict) -> Written | str:
    """The new parts' rows added, the files of changed jobs rewritten, and the files of test_run
    parts merged since (`plan.carried`) merged the same way; or why the day must be rebuilt.

    A merged part's files are written from it as a new part's are; its jobs were counted before,
    with its sources, so they are not counted again, and its sources' files go."""
    why = _jobs_after(con, lake, day, plan.new_parts, job_parameters)
    if why:
        return why
    merged_away = {stem(p) for held in plan.carried.values() for p in held}
    changed = [(src, b) for src, b in execute(con, _STEPS["changed_files"]).fetchall() if src not in merged_away]
    if not (plan.new_parts or plan.carried or changed) and _same_jobs(con):
        return Written("unchanged", "no new test_run part and no job changed since the previous run: nothing "
                                    "written")
    lake.store.delete(record_path(day))  # a run killed from here on leaves no layout to add to
    with PartitionCommit(lake) as out:
        buckets, maps, rows = _add_sources(con, lake, out, day, [*plan.new_parts, *plan.carried])
        for src, bucket in changed:
            path = lake.store.full(lake.partition_path(TABLE, day, file_part(src, bucket)))
            lake.register_files(con, [path], "test_run")
            rows += _write_rows(con, out, day, src, only=bucket)[0]
        before = relation(con, _STEPS["all_job_parts"]).to_arrow_table()
        if merged_away:
            before = before.filter(pc.invert(pc.is_in(before["src"], pa.array(sorted(merged_away)))))
            out.replace_matching(TABLE, day, lambda name: source_of(name) in merged_away)
        _finish(con, lake, out, day, [before, *maps])
    kept = {src: n for src, n in layout.buckets.items() if src not in merged_away}
    after = Layout(sources, {**kept, **buckets}, layout.generation)
    lake.store.write_bytes(record_path(day), after.to_json())
    merges = f"; {len(merged_away)} part(s)' files merged into {len(plan.carried)}" if plan.carried else ""
    return Written("append", f"{len(plan.new_parts)} new test_run part(s); {len(changed)} file(s) of changed jobs "
                             f"rewritten{merges}", len(plan.new_parts), len(changed), rows)


def _same_jobs(con) -> bool:
    """Whether test_jobs, joined again, holds the rows the previous run wrote. Rewriting it with
    the same rows would still give its file a new footer, which `flaky_tests` (and any result kept
    while its inputs' files stay as they were) takes for a change."""
    previous = [c for c in con.table("previous_jobs").columns if c != "day"]  # the view's Hive column
    if previous != con.table("test_jobs").columns:  # written by another version of test_jobs.sql
        return False
    return execute(con, _STEPS["jobs_moved"]).fetchone()[0] == 0


def _jobs_after(con, lake: Lake, day: str, new_parts: list[str], job_parameters: dict) -> str | None:
    """test_jobs with the new parts' jobs (previous_jobs: as the previous run wrote it, job_parts:
    which part holds each job), or why the day must be rebuilt instead."""
    if not lake.register(con, "test_jobs", [day], name="previous_jobs"):
        return "no previous test_jobs"
    older = sorted(set(JOB_COLUMNS_ADDED) - columns_of(con, "previous_jobs"))
    if older:  # written by an earlier version: its files' rows lack the job fields added since
        return f"test_jobs was written without {', '.join(older)}"
    maps_before = hidden_files(lake, TABLE, day, JOB_PARTS)
    if not maps_before:
        return "no record of which part holds each job"
    lake.register_rows(con, maps_before, "job_parts_rows")
    execute(con, _STEPS["job_parts"])
    if lake.register_files(con, [lake.store.full(p) for p in new_parts], "test_run"):
        execute(con, _JOBS["job_tests"])
    else:
        execute(con, _STEPS["no_new_jobs"])
    split = execute(con, _STEPS["split_jobs"]).fetchall()[0][0]
    if split:
        return f"{split} job(s) of the new parts have rows in an earlier part too"
    execute(con, _STEPS["add_previous_jobs"])
    execute(con, _JOBS["test_jobs"], job_parameters)
    return None


def files_of_jobs(con, lake: Lake, day: str) -> list[str]:
    """Full paths of test_results' files holding rows of the jobs in table key_jobs (every file of
    the day when they were not written by `rebuild` or `append`: no layout, or other files)."""
    everything = lake.files(TABLE, [day])
    layout, maps = read_layout(lake, day), hidden_files(lake, TABLE, day, JOB_PARTS)
    if layout is None or not maps or any(source_of(f) not in layout.buckets for f in everything):
        return everything
    lake.register_rows(con, maps, "job_parts_rows")
    execute(con, _STEPS["job_parts"])
    wanted = {lake.store.full(lake.partition_path(TABLE, day, file_part(src, bucket)))
              for src, bucket in execute(con, _STEPS["files_of_jobs"]).fetchall()}
    return [f for f in everything if f in wanted]
