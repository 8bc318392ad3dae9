"""test_results and test_jobs following test_run's parts in intra-day refreshes (`derived.results.parts`).

A day whose test rows land in several parts, each followed by a refresh that adds the new part's
rows and rewrites only the files of the jobs that changed, must equal the same day built at once,
table by table (test_results, test_jobs and the aggregates built on them), with what really
happens spread over the increments: jobs whose `completed` webhook lands after their reports, a
log classified as infrastructure later, redelivered webhooks, and a refresh killed midway.
"""

import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import Roots
from test_job_failure import gha, rules_bytes
from test_stats_increments import ENVS, JOBS, SHAS, job_hooks, job_rows, land, rows  # noqa: F401 (fixture)
from test_test_stats import D, job_payload, lake, query, webhooks

from torchci_assets.config import DEFAULT_INFRA_RULES
from torchci_assets.derived.failures.job_failure import build_job_failure
from torchci_assets.derived.failures.rules import DEFAULT_RULES_PATH, load_ruleset
from torchci_assets.derived.results import parts
from torchci_assets.derived.results.stats import DAILY_TABLES, build_test_daily_stats, build_test_results
from torchci_assets.ingest.commit import PartitionCommit
from torchci_assets.simulate.logs import SHUTDOWN

ORDER = {
    "test_results": "workflow_id, workflow_run_attempt, job_id, invoking_file, file, classname, name",
    "test_jobs": "workflow_id, workflow_run_attempt, job_id",
    "test_daily_stats": "build_env, test_config, platform, branch_class, file, classname, name",
    "test_sha_outcomes": "build_env, test_config, platform, branch_class, file, classname, name, head_sha",
}
LATE = (3, 14, 27, 40)  # jobs whose `completed` lands in the increment after their reports


@pytest.fixture(autouse=True)
def small_files(monkeypatch):
    """Buckets of about a hundred rows, so that a day of 48 jobs spans several files per part."""
    monkeypatch.setattr(parts, "BUCKET_ROWS", 100)


def refresh(tmp_path, incremental: bool = True):
    results = build_test_results(lake(tmp_path), D, incremental=incremental)
    return results, build_test_daily_stats(lake(tmp_path), D, incremental=incremental)


def tables(tmp_path) -> dict[str, list[tuple]]:
    """Each table's rows in key order, after its column names as the files hold them."""
    out = {}
    for t, o in ORDER.items():
        rows = query(tmp_path, t, f"SELECT * EXCLUDE (day) FROM t ORDER BY {o}")
        folder = tmp_path / "lake" / t / f"day={D}"
        names = {tuple(pq.read_schema(f).names) for f in folder.glob("*.parquet")}
        out[t] = [*sorted(names), *(tuple(r.values()) for r in rows)]
    return out


def at_once(tmp_path, where) -> dict[str, list[tuple]]:
    """The same lake rebuilt from scratch, in a copy: what a daily run or a backfill writes."""
    shutil.copytree(tmp_path / "lake", where / "lake")
    results, stats = refresh(where, incremental=False)
    assert (results.written.mode, stats.mode) == ("rebuild", "recompute")
    return tables(where)


def hooks(tmp_path, jobs: range, pending: tuple[int, ...] = (), redelivered: tuple[int, ...] = ()) -> None:
    """The webhooks of `jobs` received so far: `pending` ones only `in_progress`, `redelivered`
    ones twice."""
    received = []
    for event, payload in job_hooks(jobs):
        job = payload.get("workflow_job", {}).get("id")
        if job in pending:
            payload = job_payload(job, 1000 + job, SHAS[job % len(SHAS)], status="in_progress",
                                  branch=payload["workflow_job"]["head_branch"], attempt=1 + job % 2,
                                  env=ENVS[job % 2], shard=1 + job % 3, shards=3)
        received += [(event, payload)] * (2 if job in redelivered else 1)
    webhooks(tmp_path, D, received)


def infra_log(tmp_path, job: int) -> None:
    """Job `job`'s log lands: the runner was lost, so its failures say nothing about its tests."""
    roots = Roots(str(tmp_path))
    roots.write_bytes(f"logs/day={D}/{job}.log", gha(SHUTDOWN))
    build_job_failure(roots.archive, lake(tmp_path), D, load_ruleset(DEFAULT_RULES_PATH), rules_bytes(),
                      DEFAULT_INFRA_RULES)


def files(tmp_path) -> dict[str, int]:
    """test_results' files (name -> inode: a rewritten file is a new one)."""
    folder = tmp_path / "lake" / "test_results" / f"day={D}"
    return {p.name: p.stat().st_ino for p in folder.glob("*.parquet")}


def test_a_day_built_from_increments_equals_the_day_built_at_once(tmp_path, rows):
    infra_log(tmp_path, 999)  # the day's job_failure partition, before any job's log
    slices = [range(1, 13), range(13, 25), range(25, 37), range(37, JOBS + 1)]
    written = []
    for k, jobs in enumerate(slices):
        late = tuple(j for j in LATE if j in jobs)
        hooks(tmp_path, range(1, jobs.stop), pending=late, redelivered=tuple(jobs)[:2])
        if k == 2:
            infra_log(tmp_path, 5)  # job 5's log, classified long after its rows were written
        land(tmp_path, f"part-{k}", [r for job in jobs for r in rows[job]])
        results, _ = refresh(tmp_path)
        written.append((results.written.mode, results.written.parts_added, results.written.files_rewritten))
    hooks(tmp_path, range(1, JOBS + 1))  # the last late `completed` lands with no new report
    results, _ = refresh(tmp_path)
    written.append((results.written.mode, results.written.parts_added, results.written.files_rewritten))

    assert [w[:2] for w in written] == [("rebuild", 1), ("append", 1), ("append", 1), ("append", 1), ("append", 0)]
    # each late `completed` (and job 5's verdict) rewrote its job's file alone, never the day
    assert all(1 <= w[2] <= 2 for w in written[1:])
    incremental = tables(tmp_path)
    assert incremental == at_once(tmp_path, tmp_path / "once")
    jobs = {r["job_id"]: r for r in query(tmp_path, "test_jobs", "SELECT * FROM t")}
    assert jobs[5]["infra_reason"] == "log-infra" and jobs[40]["job_conclusion"] == "success"
    assert len(incremental["test_results"]) == 1 + sum(len(r) for r in rows.values())  # its columns, its rows


def test_a_changed_job_rewrites_its_file_and_no_other(tmp_path, rows):
    hooks(tmp_path, range(1, JOBS + 1), pending=(7,))
    land(tmp_path, "part-0", [r for job in range(1, JOBS + 1) for r in rows[job]])
    refresh(tmp_path)
    before = files(tmp_path)
    assert len(before) >= 2  # the part's rows split by configuration into files
    hooks(tmp_path, range(1, JOBS + 1))  # job 7 completes
    results, _ = refresh(tmp_path)
    after = files(tmp_path)
    rewritten = {name for name in before if after[name] != before[name]}
    held = pq.read_table(tmp_path / "lake" / "test_results" / f"day={D}" / "_job_parts.pq").to_pylist()
    assert rewritten == {f"{parts.file_part(m['src'], m['bucket'])}.parquet" for m in held if m["job_id"] == 7}
    assert len(rewritten) == 1
    assert set(after) == set(before) and results.written.files_rewritten == 1
    assert tables(tmp_path) == at_once(tmp_path, tmp_path / "once")


def test_files_written_before_the_workflow_column_rebuild_the_day(tmp_path, rows):
    """test_jobs and test_results written by a version without workflow_name: an append would
    leave the old files' rows without it (and compare the jobs on a column they lack), so the
    next refresh rebuilds the day, which then equals the day built at once."""
    hooks(tmp_path, range(1, JOBS + 1))
    land(tmp_path, "part-0", [r for job in range(1, 25) for r in rows[job]])
    refresh(tmp_path)
    for table in ("test_jobs", "test_results"):
        for f in (tmp_path / "lake" / table / f"day={D}").glob("*.parquet"):
            pq.write_table(pq.read_table(f).drop_columns(["workflow_name"]), f)
    # the day's aggregates counted again from those files: no job known periodic then
    assert build_test_daily_stats(lake(tmp_path), D).mode == "recompute"
    assert query(tmp_path, "test_daily_stats", "SELECT sum(periodic_clean_passes) AS n FROM t") == [{"n": 0}]
    land(tmp_path, "part-1", [r for job in range(25, JOBS + 1) for r in rows[job]])
    results, _ = refresh(tmp_path)
    assert (results.written.mode, results.written.reason) == ("rebuild", "test_jobs was written without workflow_name")
    assert tables(tmp_path) == at_once(tmp_path, tmp_path / "once")


def test_a_job_whose_reports_span_two_parts_rebuilds_the_day(tmp_path, rows):
    hooks(tmp_path, range(1, JOBS + 1))
    land(tmp_path, "part-0", [r for job in range(1, 10) for r in rows[job]] + rows[10][:4])
    refresh(tmp_path)
    land(tmp_path, "part-1", rows[10][4:] + [r for job in range(11, JOBS + 1) for r in rows[job]])
    results, _ = refresh(tmp_path)
    assert results.written.mode == "rebuild" and "earlier part" in results.written.reason
    assert tables(tmp_path) == at_once(tmp_path, tmp_path / "once")


def test_a_refresh_killed_while_committing_leaves_the_previous_day_and_the_next_one_rebuilds(
        tmp_path, rows, monkeypatch):
    hooks(tmp_path, range(1, JOBS + 1), pending=(30,))
    land(tmp_path, "part-0", [r for job in range(1, 25) for r in rows[job]])
    refresh(tmp_path)
    before = tables(tmp_path)
    hooks(tmp_path, range(1, JOBS + 1))
    land(tmp_path, "part-1", [r for job in range(25, 37) for r in rows[job]])

    def killed(self):
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(PartitionCommit, "commit", killed)
    with pytest.raises(KeyboardInterrupt):
        build_test_results(lake(tmp_path), D, incremental=True)
    monkeypatch.undo()
    assert tables(tmp_path)["test_results"] == before["test_results"]  # nothing of the killed run shows
    assert parts.read_layout(lake(tmp_path), D) is None
    land(tmp_path, "part-2", [r for job in range(37, JOBS + 1) for r in rows[job]])
    results, _ = refresh(tmp_path)
    assert results.written.mode == "rebuild" and "no record" in results.written.reason
    assert tables(tmp_path) == at_once(tmp_path, tmp_path / "once")


def test_a_daily_run_rebuilds_the_day_from_its_parts(tmp_path, rows):
    hooks(tmp_path, range(1, JOBS + 1), pending=(40,))
    for k, jobs in enumerate([range(1, 25), range(25, JOBS + 1)]):
        land(tmp_path, f"part-{k}", [r for job in jobs for r in rows[job]])
        refresh(tmp_path)
    incremental = tables(tmp_path)
    hooks(tmp_path, range(1, JOBS + 1))
    results, stats = refresh(tmp_path, incremental=False)
    assert (results.written.mode, stats.mode) == ("rebuild", "recompute")
    assert tables(tmp_path) != incremental  # job 40 completed since
    # the files are those of the parts, each written once: no file of an earlier layout is left
    names = set(files(tmp_path))
    assert {n.rsplit("-b", 1)[0] for n in names} == {"part-0", "part-1"}
    counts = {n: pq.read_metadata(tmp_path / "lake" / "test_results" / f"day={D}" / n).num_rows for n in names}
    assert sum(counts.values()) == sum(len(r) for r in rows.values()) and len(counts) >= 2
    assert tables(tmp_path) == at_once(tmp_path, tmp_path / "once")
    assert set(DAILY_TABLES) <= set(ORDER)


def test_a_quiet_day_without_test_rows_is_built_and_then_refreshed(tmp_path, rows):
    hooks(tmp_path, range(1, JOBS + 1))
    land(tmp_path, "part-0", [])
    results, stats = refresh(tmp_path)
    assert (results.rows, results.written.mode, stats.rows["test_daily_stats"]) == (0, "rebuild", 0)
    assert len(files(tmp_path)) == 1  # an empty file: the partition has the schema
    land(tmp_path, "part-1", [r for job in range(1, 13) for r in rows[job]])
    results, _ = refresh(tmp_path)
    assert results.written.mode == "append" and results.rows == sum(len(rows[j]) for j in range(1, 13))
    assert tables(tmp_path) == at_once(tmp_path, tmp_path / "once")


def test_test_run_parts_merged_by_the_ingest_are_followed_not_rebuilt(tmp_path, monkeypatch):
    """With the real ingest merging test_run's parts (two per level here, sixteen in production),
    test_results merges its files the same way and test_daily_stats takes the merged parts as
    counted: every refresh after the first stays an append, a job completing after its part was
    merged rewrites its merged file, and the day equals the day built at once."""
    from resources.storage import Store
    from torchci_assets.ingest import compaction
    from torchci_assets.ingest.increments import partition_parts
    from torchci_assets.ingest.reports import ingest_test_run_day
    from torchci_assets.simulate.landing import land_flaky_test

    monkeypatch.setattr(compaction, "FANOUT", 2)
    archive = Store(str(tmp_path / "archive"))
    modes, names = [], set()
    for k in range(9):
        jobs = range(1 + 5 * k, 6 + 5 * k)
        hooks(tmp_path, range(1, jobs.stop), pending=(8,) if k < 6 else ())  # completes once its part was merged
        land_flaky_test(archive, D, [(1000 + j, 1 + j % 2, j) for j in jobs], "test_ops", "TestOps", f"test_{k}")
        ingest_test_run_day(archive, lake(tmp_path), D, incremental=True)
        results, stats = refresh(tmp_path)
        modes.append((results.written.mode, stats.mode))
        state = partition_parts(lake(tmp_path), "test_run", D)
        names |= set(state.names)
        # one set of test_results files per test_run part, and the job map names only those
        held = pq.read_table(tmp_path / "lake" / "test_results" / f"day={D}" / "_job_parts.pq")
        assert {n.rsplit("-b", 1)[0] for n in files(tmp_path)} == {n.removesuffix(".parquet") for n in state.names}
        assert set(held["src"].to_pylist()) <= {n.removesuffix(".parquet") for n in state.names}
    assert any(n.startswith("m2-") for n in names)  # merges of merges too
    assert modes == [("rebuild", "recompute")] + [("append", "append")] * 8
    assert tables(tmp_path) == at_once(tmp_path, tmp_path / "once")
    jobs = {r["job_id"]: r for r in query(tmp_path, "test_jobs", "SELECT * FROM t")}
    assert jobs[8]["job_status"] == "completed"


def test_a_second_refresh_of_a_day_on_s3_follows_its_parts_as_on_the_local_disk(tmp_path, rows, s3_server):
    """The refresh's records beside the partitions (which job each part holds, the jobs counted) are
    read back through pyarrow: DuckDB cannot read S3 here. The day's first refresh wrote them; the
    second read them (as DuckDB files it failed, and every refresh after a day's first failed on S3)."""
    import uuid

    import pyarrow.fs as pafs
    from conftest import S3_BUCKET

    from resources.lake import Lake
    from torchci_assets.ingest.junit import TEST_RUN_SCHEMA

    hooks(tmp_path, range(1, JOBS + 1))
    land(tmp_path, "part-0", [r for job in range(1, 25) for r in rows[job]])
    refresh(tmp_path)
    s3 = Lake.at(f"s3://{S3_BUCKET}/refresh-{uuid.uuid4().hex[:8]}/lake")
    pafs.copy_files(str(tmp_path / "lake"), s3.store.full(""), destination_filesystem=s3.store.fs)
    second = pa.Table.from_pylist([r for job in range(25, JOBS + 1) for r in rows[job]], schema=TEST_RUN_SCHEMA)
    for each in (lake(tmp_path), s3):
        each.write("test_run", D, second, part="part-1")
    on_disk = refresh(tmp_path)
    on_s3 = build_test_results(s3, D, incremental=True), build_test_daily_stats(s3, D, incremental=True)
    assert (on_s3[1].mode, on_disk[1].mode) == ("append", "append")
    for table, order in ORDER.items():
        got = [s3.read_files(s3.files(table, [D])), lake(tmp_path).read_files(lake(tmp_path).files(table, [D]))]
        assert got[0].sort_by([(c.strip(), "ascending") for c in order.split(",")]).to_pylist() == \
            got[1].sort_by([(c.strip(), "ascending") for c in order.split(",")]).to_pylist(), table
