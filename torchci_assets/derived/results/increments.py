"""Following test_run's parts: in an intra-day refresh, test_daily_stats and test_sha_outcomes add
what moved since their previous result (the jobs of new test_run parts, and jobs counted before
whose fields changed) instead of aggregating the whole day again.

The ingest's contract: a table's day partition is a set of immutable Parquet parts; a refresh
only adds parts (rows for keys no earlier part holds) or rewrites the partition. The aggregates
keep a record of what they counted (`test_daily_stats/day=D/_parts.json`: each test_run part's
name and size, and the partition's generation) and the jobs as they counted them
(`_counted_jobs.pq`: each job's commit, configuration, branch class, workflow, completion time,
infra verdict and number of test rows). The next refresh is an append when every part counted is
still there with its size, or was merged by the ingest with other counted parts (`held_parts`); a
job counted before that now has more rows (its reports came in two parts), a rewritten test_run
partition, or no record (or one written before a job field was recorded) mean a recompute from the
whole day, and so does every run that is not an intra-day refresh (the daily run, a backfill): a
recompute is the reference an append must equal.

Why an append is exact: every column of test_daily_stats decomposes over the day's rows split by
commit within a test and configuration (counts and sums add; distinct commits are counted commit
by commit; a job runs on one commit, so distinct jobs too), and test_sha_outcomes has one row per
test, configuration and commit. Let K be the (commit, configuration) keys of the jobs that moved,
before and after the move; only rows of jobs with a key in K can differ. With A those rows now and
B the same keys' rows as counted (the counted jobs' fields on their unchanged test columns), the
new test_daily_stats is previous - agg(B) + agg(A), and test_sha_outcomes keeps its rows outside
K and recomputes those in K from A. The extremes (longest clean pass, first and last seen) are the
previous ones combined with A, which is exact unless a changed job's row held one and no longer
does the same (it became infra, its completion time moved) while rows outside K remain in its
group: then the day is recomputed. A group none of whose counted rows lies outside K is A's rows
alone now, and so are its extremes (the usual case on a day of PyTorch's pull requests: a job's
reports land before its webhooks, and its rows leave the unknown configuration when they come). The rows
read are those of the jobs with a key in K (the other shards and retries of the same
configuration on the same commits), found through test_results' files by job
(`parts.files_of_jobs`): the cost follows what moved, not the day.

A refresh killed midway leaves the previous tables readable; the record is removed before the
tables are replaced and written after, so a half-written state is never taken as a base.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

from resources.lake import Lake
from torchci_assets.ingest.increments import held_parts, partition_parts

RECORD_NAME = "_parts.json"  # a leading '_': listings of the lake's Parquet parts skip it
COUNTED_JOBS = "_counted_jobs.pq"  # neither a '.parquet' name nor a visible one: readers skip it
RECORD_TABLE = "test_daily_stats"
SOURCE_TABLE = "test_run"


@dataclass(frozen=True)
class Record:
    """What the aggregates of a day counted: test_run parts (name -> bytes) and the partition's
    generation (the ingest's manifest changes it at every rewrite; None without one)."""

    parts: dict[str, int]
    generation: str | None = None

    def to_json(self) -> bytes:
        return json.dumps({"parts": self.parts, "generation": self.generation}, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> "Record":
        raw = json.loads(data)
        return cls({str(k): int(v) for k, v in raw["parts"].items()}, raw.get("generation"))


@dataclass(frozen=True)
class Plan:
    """How to bring the aggregates up to date: `mode` is "append", "unchanged" or "recompute";
    `carried`: parts that merged parts counted before (merged part -> the counted parts it holds)."""

    mode: str
    reason: str
    new_parts: list[str]
    carried: dict[str, list[str]] = field(default_factory=dict)


def record_path(day: str) -> str:
    return f"{RECORD_TABLE}/day={day}/{RECORD_NAME}"


@dataclass(frozen=True)
class Sources:
    """The day's test_run parts (path in the lake -> size in bytes), their generation and the
    merges of that generation (merged part's path -> the paths of the parts it replaced)."""

    parts: dict[str, int]
    generation: str | None
    merged: dict[str, tuple[str, ...]]


def source_parts(lake: Lake, day: str) -> Sources:
    entries = lake.store.list_files(f"{SOURCE_TABLE}/day={day}", (".parquet",))
    state = partition_parts(lake, SOURCE_TABLE, day)
    folder = f"{SOURCE_TABLE}/day={day}"
    merged = {f"{folder}/{name}": tuple(f"{folder}/{s}" for s in sources) for name, sources in state.merged.items()}
    return Sources({e.path: e.size for e in entries if not e.refused}, state.generation, merged)


def read_record(lake: Lake, day: str) -> Record | None:
    return lake.read_record(record_path(day), Record.from_json)  # None: recompute, which writes a fresh one


def write_record(lake: Lake, day: str, record: Record) -> None:
    lake.store.write_bytes(record_path(day), record.to_json())


def drop_record(lake: Lake, day: str) -> None:
    lake.store.delete(record_path(day))


def plan(previous: Record | None, sources: Sources, incremental: bool) -> Plan:
    """Append, nothing to do, or recompute, from the parts alone (the jobs are compared after). A
    part that merged parts counted before is counted (`carried`); one that merged counted and
    uncounted parts cannot be split: recompute."""
    if not incremental:
        return Plan("recompute", "not an intra-day refresh: the whole day is aggregated", [])
    if previous is None:
        return Plan("recompute", "no record of what the previous result counted", [])
    if previous.generation != sources.generation:
        return Plan("recompute", "the test_run partition was rewritten since (a new generation)", [])
    parts = sources.parts
    covered = {p for p, size in previous.parts.items() if parts.get(p) == size}
    new, carried = [], {}
    for p in sorted(set(parts) - set(previous.parts)):
        inside, outside = held_parts(p, previous.parts, sources.merged)
        if inside and outside:
            return Plan("recompute", f"test_run part {p} merged parts counted before and parts not counted", [])
        if inside:
            carried[p] = sorted(inside)
            covered |= inside
        else:
            new.append(p)
    gone = sorted(set(previous.parts) - covered)
    if gone:
        return Plan("recompute", f"{len(gone)} test_run part(s) counted before were rewritten or removed "
                                 f"(first: {gone[0]})", [])
    merged = f"; {sum(map(len, carried.values()))} counted merged into {len(carried)}" if carried else ""
    if not new:
        return Plan("unchanged", f"no test_run part since the previous result{merged}", [], carried)
    return Plan("append", f"{len(new)} new test_run part(s) added to {len(previous.parts)} counted{merged}", new,
                carried)


def counted_jobs_path(day: str) -> str:
    return f"{RECORD_TABLE}/day={day}/{COUNTED_JOBS}"


def counted_jobs_files(lake: Lake, day: str) -> list[str]:
    """The jobs as the previous result counted them (full paths: none, or the one file)."""
    path = counted_jobs_path(day)
    return [lake.store.full(path)] if lake.store.exists(path) else []


def write_counted_jobs(lake: Lake, day: str, jobs: pa.Table) -> None:
    with lake.store.atomic_output(counted_jobs_path(day), lake.owner) as out:
        pq.write_table(jobs, out, compression="zstd")
