"""Following test_run's parts: in an intra-day refresh, test_daily_stats and test_sha_outcomes add
the rows of the test_run parts they have not counted yet to their previous result, instead of
aggregating the whole day again.

The ingest's contract: a table's day partition is a set of immutable Parquet parts; a refresh
only adds parts (rows for keys no earlier part holds) or rewrites the partition. The aggregates
keep a record of what they counted (`test_daily_stats/day=D/_parts.json`: each test_run part's
name and size, and a digest of the test_jobs rows of the jobs counted). The next refresh is an
append when every part counted is still there with its size and none of those jobs changed
(its commit, configuration, branch class, infra verdict, completion time or number of test
rows: a late `completed` webhook, a log classified as infrastructure, a job whose reports came
in two parts). Anything else is recomputed from the whole day, and so is every run that is not
an intra-day refresh (the daily run, a backfill): a recompute is the reference an append must
equal.

Why an append is exact: every column of test_daily_stats decomposes over the day's rows split
by commit (counts and sums add; distinct commits are counted commit by commit; a job runs on one
commit, so distinct jobs too), and test_sha_outcomes has one row per commit. So with S the
commits the new jobs ran on, A all of the day's rows on S and B the same without the new jobs'
rows, the new test_daily_stats is previous - agg(B) + agg(A) (first/last seen and the longest
pass: previous combined with agg(A)), and test_sha_outcomes keeps its rows outside S and
recomputes those on S from A. The cost follows the commits that moved, not the day.

A refresh killed midway leaves the previous tables readable; the record is removed before the
tables are replaced and written after, so a half-written state is never taken as a base.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from resources.lake import Lake
from torchci_assets.ingest.increments import partition_parts

RECORD_NAME = "_parts.json"  # a leading '_': listings of the lake's Parquet parts skip it
RECORD_TABLE = "test_daily_stats"
SOURCE_TABLE = "test_run"
JOB_KEY = ["workflow_id", "workflow_run_attempt", "job_id"]


@dataclass(frozen=True)
class Record:
    """What the aggregates of a day counted: test_run parts (name -> bytes), the partition's
    generation (the ingest's manifest changes it at every rewrite; None without one) and the
    jobs' digest."""

    parts: dict[str, int]
    jobs_digest: str
    generation: str | None = None

    def to_json(self) -> bytes:
        return json.dumps({"parts": self.parts, "jobs_digest": self.jobs_digest, "generation": self.generation},
                          sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> "Record":
        raw = json.loads(data)
        return cls({str(k): int(v) for k, v in raw["parts"].items()}, str(raw["jobs_digest"]), raw.get("generation"))


@dataclass(frozen=True)
class Plan:
    """How to bring the aggregates up to date: `mode` is "append", "unchanged" or "recompute"."""

    mode: str
    reason: str
    new_parts: list[str]


def record_path(day: str) -> str:
    return f"{RECORD_TABLE}/day={day}/{RECORD_NAME}"


def source_parts(lake: Lake, day: str) -> tuple[dict[str, int], str | None]:
    """The day's test_run parts (path in the lake -> size in bytes) and their generation."""
    entries = lake.store.list_files(f"{SOURCE_TABLE}/day={day}", (".parquet",))
    return {e.path: e.size for e in entries if not e.refused}, partition_parts(lake, SOURCE_TABLE, day).generation


def read_record(lake: Lake, day: str) -> Record | None:
    if not lake.store.exists(record_path(day)):
        return None
    try:
        return Record.from_json(lake.store.read_bytes(record_path(day)))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None  # unreadable: recompute, which writes a fresh one


def write_record(lake: Lake, day: str, record: Record) -> None:
    lake.store.write_bytes(record_path(day), record.to_json())


def drop_record(lake: Lake, day: str) -> None:
    lake.store.delete(record_path(day))


def plan(previous: Record | None, parts: dict[str, int], incremental: bool, generation: str | None = None) -> Plan:
    """Append, nothing to do, or recompute, from the parts alone (the jobs' digest is checked after)."""
    if not incremental:
        return Plan("recompute", "not an intra-day refresh: the whole day is aggregated", [])
    if previous is None:
        return Plan("recompute", "no record of what the previous result counted", [])
    if previous.generation != generation:
        return Plan("recompute", "the test_run partition was rewritten since (a new generation)", [])
    gone = sorted(p for p, size in previous.parts.items() if parts.get(p) != size)
    if gone:
        return Plan("recompute", f"{len(gone)} test_run part(s) counted before were rewritten or removed "
                                 f"(first: {gone[0]})", [])
    new = sorted(p for p in parts if p not in previous.parts)
    if not new:
        return Plan("unchanged", "no test_run part since the previous result", [])
    return Plan("append", f"{len(new)} new test_run part(s) added to {len(previous.parts)} counted", new)


def new_jobs(lake: Lake, parts: list[str]) -> pa.Table:
    """The job attempts with rows in the given parts (read through the store: local or S3)."""
    tables = [pq.read_table(lake.store.full(p), columns=JOB_KEY, filesystem=lake.store.fs) for p in parts]
    return pa.concat_tables(tables, promote_options="permissive") if tables else pa.table(
        {k: pa.array([], pa.int64()) for k in JOB_KEY})
