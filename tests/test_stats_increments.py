"""test_daily_stats and test_sha_outcomes following test_run's parts in intra-day refreshes.

A day whose test rows land in several parts, aggregated after each one by adding the new parts to
the previous result, must equal the same day aggregated at once, table by table; whatever is not
an append (a job counted before that changed, a job whose reports came in two parts, a rewritten
partition, a refresh killed midway) is recomputed and equals it too.
"""

import datetime as dt
import random
import shutil

import dagster as dg
import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_test_stats import D, job_payload, lake, query, run_payload, run_row, webhooks

import torchci_assets.derived.results.assets as assets
from jobs.refresh import archive_refresh_job
from resources.configured import LakeResource
from torchci_assets.derived.flakiness.assets import flaky_tests_assets
from torchci_assets.derived.results import increments
from torchci_assets.derived.results import stats as results_stats
from torchci_assets.derived.results.stats import DAILY_TABLES, build_test_daily_stats, build_test_results
from torchci_assets.ingest.junit import TEST_RUN_SCHEMA

SHAS = [c * 40 for c in "abcdefgh"]
ENVS = ["linux-jammy-py3.10-gcc11", "linux-jammy-cuda12.8-py3.10-gcc11"]
TESTS = [(f, c, f"test_{i}") for f, c in (("test_ops.py", "TestOps"), ("nn/test_nn.py", "TestNN")) for i in range(8)]
JOBS = 48
SORT = {"test_daily_stats": "build_env, test_config, platform, branch_class, file, classname, name",
        "test_sha_outcomes": "build_env, test_config, platform, branch_class, file, classname, name, head_sha"}


def job_rows(job: int, rng: random.Random) -> list[dict]:
    """A job's test rows: mostly passes, some failures and reruns; every 11th job fails 12 tests with
    one message (an infra suspect), times in milliseconds as pytest writes them (a float sum of
    those depends on its order: the day's sums must not)."""
    run, attempt = 1000 + job, 1 + job % 2
    rows = []
    for file, cls, name in TESTS[: 10 + job % 7]:
        if job % 11 == 0 and len(rows) < 12:
            status, message = "failed", "RuntimeError: CUDA error: an illegal memory access"
        else:
            status = rng.choices(["passed", "failed", "error", "skipped"], [80, 8, 3, 9])[0]
            message = None
        rows.append(run_row(job, run, name, status, attempt=attempt, time=rng.randint(1, 40_000) / 1000,
                            reruns=rng.choice([0, 0, 0, 1, 2]), message=message, file=file, classname=cls))
    return rows


def job_hooks(jobs: range, conclusions: dict[int, str] | None = None,
              workflows: dict[int, str | None] | None = None) -> list[tuple[str, dict]]:
    """Webhooks of the jobs (every 13th has none: its rows stay without a job) and their runs, of
    workflow pull, or periodic for every 5th (`workflows` overrides; None: no payload names it)."""
    conclusions, workflows = conclusions or {}, workflows or {}
    hooks = []
    for job in jobs:
        if job % 13 == 5:
            continue
        sha = SHAS[job % len(SHAS)]
        branch = "main" if job % 4 else f"gh/dev/{job}/head"
        job_hook = job_payload(job, 1000 + job, sha, branch=branch, attempt=1 + job % 2, env=ENVS[job % 2],
                               conclusion=conclusions.get(job, "success"), shard=1 + job % 3, shards=3)
        run_hook = run_payload(1000 + job, sha, "push" if job % 4 else "pull_request", branch)
        workflow = workflows.get(job, "periodic" if job % 5 == 0 else "pull")
        for hook, key, field in ((job_hook, "workflow_job", "workflow_name"), (run_hook, "workflow_run", "name")):
            if workflow is None:
                del hook[key][field]
            else:
                hook[key][field] = workflow
        hooks += [("workflow_job", job_hook), ("workflow_run", run_hook)]
    return hooks


@pytest.fixture
def rows():
    rng = random.Random(7)
    return {job: job_rows(job, rng) for job in range(1, JOBS + 1)}


def land(tmp_path, name: str, rows: list[dict]) -> None:
    lake(tmp_path).write("test_run", D, pa.Table.from_pylist(rows, schema=TEST_RUN_SCHEMA), part=name)


def refresh(tmp_path, incremental: bool = True):
    build_test_results(lake(tmp_path), D)
    return build_test_daily_stats(lake(tmp_path), D, incremental=incremental)


def tables(tmp_path) -> dict[str, list[tuple]]:
    return {t: [tuple(r.values()) for r in query(tmp_path, t, f"SELECT * EXCLUDE (day) FROM t ORDER BY {SORT[t]}")]
            for t in DAILY_TABLES}


def at_once(tmp_path, where) -> dict[str, list[tuple]]:
    """The same lake aggregated from scratch, in a copy."""
    shutil.copytree(tmp_path / "lake", where / "lake")
    built = refresh(where, incremental=False)
    assert built.mode == "recompute"
    return tables(where)


def first_half_counted(tmp_path, rows) -> None:
    """Every job's webhooks ingested, the first half of the jobs' rows landed and counted."""
    webhooks(tmp_path, D, job_hooks(range(1, JOBS + 1)))
    land(tmp_path, "part-0", [r for job in range(1, 25) for r in rows[job]])
    refresh(tmp_path)


def test_a_day_built_from_increments_equals_the_day_built_at_once(tmp_path, rows):
    webhooks(tmp_path, D, job_hooks(range(1, JOBS + 1)))
    modes = []
    for k in range(4):  # four parts of twelve jobs each; commits recur across parts
        land(tmp_path, f"part-{k}", [r for job in range(1 + 12 * k, 13 + 12 * k) for r in rows[job]])
        built = refresh(tmp_path)
        modes.append((built.mode, built.parts_added))
    assert modes == [("recompute", 1), ("append", 1), ("append", 1), ("append", 1)]  # a recompute counts every part
    incremental = tables(tmp_path)
    assert incremental == at_once(tmp_path, tmp_path / "once")
    assert len(incremental["test_daily_stats"]) > 40 and len(incremental["test_sha_outcomes"]) > 40
    periodic = query(tmp_path, "test_daily_stats", "SELECT sum(periodic_clean_passes) AS n FROM t")[0]["n"]
    assert 0 < periodic < query(tmp_path, "test_daily_stats", "SELECT sum(clean_passes) AS n FROM t")[0]["n"]
    assert refresh(tmp_path).mode == "unchanged"  # nothing new: the previous result stands
    assert tables(tmp_path) == incremental


def test_two_parts_landing_between_refreshes_are_added_together(tmp_path, rows):
    webhooks(tmp_path, D, job_hooks(range(1, JOBS + 1)))
    land(tmp_path, "part-0", [r for job in range(1, 20) for r in rows[job]])
    refresh(tmp_path)
    land(tmp_path, "part-1", [r for job in range(20, 35) for r in rows[job]])
    land(tmp_path, "part-2", [r for job in range(35, JOBS + 1) for r in rows[job]])
    built = refresh(tmp_path)
    assert (built.mode, built.parts_added) == ("append", 2)
    assert tables(tmp_path) == at_once(tmp_path, tmp_path / "once")


def test_a_job_counted_before_that_changed_is_counted_again(tmp_path, rows):
    """Job 3's `completed` arrives as cancelled after its rows were counted: its rows become infra
    suspects, which an append of the new part alone would miss. Its (commit, configuration) keys are
    counted again; the rows it held alone (its extremes) are A's now."""
    first_half_counted(tmp_path, rows)
    webhooks(tmp_path, D, job_hooks(range(1, JOBS + 1), conclusions={3: "cancelled"}))
    land(tmp_path, "part-1", [r for job in range(25, JOBS + 1) for r in rows[job]])
    built = refresh(tmp_path)
    assert (built.mode, built.reason) == ("append", "24 new and 1 changed job(s) (1 new test_run part(s))")
    assert tables(tmp_path) == at_once(tmp_path, tmp_path / "once")
    died = query(tmp_path, "test_daily_stats", "SELECT sum(infra_runs) AS n FROM t")[0]["n"]
    assert died >= len(rows[3])


def test_a_counted_job_whose_workflow_is_named_later_is_added_again(tmp_path, rows):
    """Job 6 is counted before any payload names its workflow; its run's later webhook says
    periodic: its clean passes move to the periodic counters in the append, as counted at once."""
    webhooks(tmp_path, D, job_hooks(range(1, JOBS + 1), workflows={6: None}))
    land(tmp_path, "part-0", [r for job in range(1, 25) for r in rows[job]])
    refresh(tmp_path)
    unnamed = query(tmp_path, "test_jobs", "SELECT workflow_name FROM t WHERE job_id = 6")
    assert unnamed == [{"workflow_name": None}]
    webhooks(tmp_path, D, job_hooks(range(1, JOBS + 1), workflows={6: "periodic"}))
    land(tmp_path, "part-1", [r for job in range(25, JOBS + 1) for r in rows[job]])
    built = refresh(tmp_path)
    assert (built.mode, built.reason) == ("append", "24 new and 1 changed job(s) (1 new test_run part(s))")
    assert tables(tmp_path) == at_once(tmp_path, tmp_path / "once")
    # its rows in test_results were rewritten too (what a later recompute of the day reads)
    assert query(tmp_path, "test_results", "SELECT DISTINCT workflow_name FROM t WHERE job_id = 6") == [
        {"workflow_name": "periodic"}]


def test_jobs_counted_before_their_webhooks_move_to_their_configuration_in_an_append(tmp_path, rows):
    """Jobs 13-24's reports land before their webhooks: their rows are counted under an unknown
    configuration, and they hold every extreme there. When the webhooks come, all of them leave it:
    the unknown groups are gone, so nothing is lost and the refresh appends (on a day of PyTorch's
    pull requests this is most refreshes); equal to the day counted at once."""
    early = [j for j in range(1, 25) if j % 13 != 5]  # jobs 5 and 18 never get webhooks: not landed here
    webhooks(tmp_path, D, job_hooks(range(1, 13)))
    land(tmp_path, "part-0", [r for job in early for r in rows[job]])
    refresh(tmp_path)
    unknown = query(tmp_path, "test_daily_stats", "SELECT count(*) AS n FROM t WHERE build_env IS NULL")
    assert unknown[0]["n"] > 0
    webhooks(tmp_path, D, job_hooks(range(1, JOBS + 1)))
    land(tmp_path, "part-1", [r for job in range(25, JOBS + 1) for r in rows[job]])
    built = refresh(tmp_path)
    assert built.mode == "append", built.reason
    assert tables(tmp_path) == at_once(tmp_path, tmp_path / "once")
    # jobs 31 and 44 never get webhooks: their rows stay under the unknown configuration
    assert query(tmp_path, "test_daily_stats", "SELECT count(*) AS n FROM t WHERE build_env IS NULL")[0]["n"] > 0


@pytest.mark.parametrize("counted_b,held_now,lost", [
    (3, 20.0, 1),   # rows outside the moved keys, the extreme's holder fell short: only the day can say
    (3, 30.0, 0),   # it holds the extreme as before
    (5, 20.0, 0),   # every row counted is in B: A alone is the group now, and the append takes A's
])
def test_an_extreme_is_lost_only_when_rows_outside_the_moved_keys_remain(counted_b, held_now, lost):
    """The group's previous longest pass (30 s) came from a changed job's row."""
    con = duckdb.connect()
    key = {"file": "test_ops.py", "classname": "TestOps", "name": "test_add", "build_env": None,
           "test_config": None, "platform": None, "branch_class": "unknown"}
    stamp = dt.datetime(2026, 11, 10, tzinfo=dt.timezone.utc)

    def group(n: int, max_pass: float) -> pa.Table:
        return pa.Table.from_pylist([{**key, "runs": n, "infra_runs": 0, "max_pass_time": max_pass,
                                      "first_seen": stamp, "last_seen": stamp}])
    con.register("previous_stats", group(5, 30.0))
    con.register("extremes_b", group(1, 30.0))
    con.register("extremes_a", group(1, held_now))
    con.register("agg_b", group(counted_b, 30.0))
    con.execute("CREATE TABLE moved_groups AS SELECT hash(file, classname, name, build_env, test_config, platform, "
                "branch_class) AS g FROM previous_stats")
    steps = dict(results_stats.SQL.steps("increments"))
    con.execute(steps["outside_groups"])
    assert con.execute(steps["lost_extremes"]).fetchall()[0][0] == lost


def test_a_day_counted_before_the_workflow_was_recorded_is_recomputed(tmp_path, rows):
    """The jobs counted by a version that did not record their workflow cannot tell which changed
    workflow: the next refresh counts the day again instead of adding to it."""
    first_half_counted(tmp_path, rows)
    counted = lake(tmp_path).store.full(increments.counted_jobs_path(D))
    pq.write_table(pq.read_table(counted).drop_columns(["workflow_name"]), counted)
    land(tmp_path, "part-1", [r for job in range(25, JOBS + 1) for r in rows[job]])
    built = refresh(tmp_path)
    assert (built.mode, built.reason) == ("recompute", "the jobs counted were recorded without workflow_name")
    assert tables(tmp_path) == at_once(tmp_path, tmp_path / "once")


def test_a_job_whose_reports_span_two_parts_is_recomputed(tmp_path, rows):
    """Job 10's first rows counted alone may be a mass failure or not; with the rest they are one job."""
    webhooks(tmp_path, D, job_hooks(range(1, JOBS + 1)))
    land(tmp_path, "part-0", [r for job in range(1, 10) for r in rows[job]] + rows[10][:4])
    refresh(tmp_path)
    land(tmp_path, "part-1", rows[10][4:] + [r for job in range(11, JOBS + 1) for r in rows[job]])
    assert refresh(tmp_path).mode == "recompute"
    assert tables(tmp_path) == at_once(tmp_path, tmp_path / "once")


def test_a_rewritten_partition_is_recomputed(tmp_path, rows):
    first_half_counted(tmp_path, rows)
    lake(tmp_path).store.delete(f"test_run/day={D}/part-0.parquet")  # a rebuild: all parts replaced
    land(tmp_path, "data", [r for job in range(1, JOBS + 1) for r in rows[job]])
    built = refresh(tmp_path)
    assert built.mode == "recompute" and "rewritten or removed" in built.reason
    assert tables(tmp_path) == at_once(tmp_path, tmp_path / "once")


def test_a_refresh_killed_while_writing_leaves_no_base_and_the_next_one_recomputes(tmp_path, rows, monkeypatch):
    first_half_counted(tmp_path, rows)
    land(tmp_path, "part-1", [r for job in range(25, 37) for r in rows[job]])
    build_test_results(lake(tmp_path), D)
    write = type(lake(tmp_path)).write

    def dies_on_outcomes(self, table, day, data, part="data"):
        if table == "test_sha_outcomes":
            raise KeyboardInterrupt("killed")
        return write(self, table, day, data, part)

    monkeypatch.setattr(type(lake(tmp_path)), "write", dies_on_outcomes)
    with pytest.raises(KeyboardInterrupt):
        build_test_daily_stats(lake(tmp_path), D, incremental=True)
    monkeypatch.undo()
    # test_daily_stats has the new parts, test_sha_outcomes not: no record says what they hold
    assert increments.read_record(lake(tmp_path), D) is None
    land(tmp_path, "part-2", [r for job in range(37, JOBS + 1) for r in rows[job]])
    assert refresh(tmp_path).mode == "recompute"
    assert tables(tmp_path) == at_once(tmp_path, tmp_path / "once")


def test_only_the_intra_day_refresh_adds_increments(tmp_path, rows):
    first_half_counted(tmp_path, rows)
    land(tmp_path, "part-1", [r for job in range(25, JOBS + 1) for r in rows[job]])
    assert refresh(tmp_path, incremental=False).mode == "recompute"

    def materialize(tags):
        return dg.materialize([assets.test_results_assets, assets.test_daily_stats_assets], partition_key=D,
                              resources={"lake": LakeResource(uri=str(tmp_path / "lake"))}, tags=tags)

    land(tmp_path, "part-2", [run_row(999, 999, "test_late")])
    result = materialize(archive_refresh_job.tags)
    meta = {e.asset_key.to_user_string(): e.materialization.metadata for e in result.get_asset_materialization_events()}
    assert meta["test_daily_stats"]["mode"].value == "append"
    assert (meta["test_results"]["mode"].value, meta["test_results"]["test_run_parts_added"].value) == ("append", 1)
    assert {c.check_name: c.passed for c in result.get_asset_check_evaluations()}["every_test_row_counted_once"]
    land(tmp_path, "part-3", [run_row(998, 998, "test_later")])
    result = materialize({})
    meta = {e.asset_key.to_user_string(): e.materialization.metadata for e in result.get_asset_materialization_events()}
    assert meta["test_daily_stats"]["mode"].value == "recompute"
    assert meta["test_results"]["mode"].value == "rebuild"
    # both counted the day's four parts again, and say so
    added = [meta[t]["test_run_parts_added"].value for t in ("test_daily_stats", "test_results")]
    assert added == [4, 4]


def _sources(parts: dict[str, int], generation: str | None = None, merged: dict | None = None) -> increments.Sources:
    return increments.Sources({f"test_run/day=D/{p}": n for p, n in parts.items()}, generation,
                              {f"test_run/day=D/{m}": tuple(f"test_run/day=D/{s}" for s in src)
                               for m, src in (merged or {}).items()})


def test_plan_reads_the_parts_alone():
    rec = increments.Record({"test_run/day=D/a.parquet": 10})
    assert increments.plan(rec, _sources({"a.parquet": 10}), True).mode == "unchanged"
    assert increments.plan(rec, _sources({"a.parquet": 10, "b.parquet": 5}), True).new_parts == [
        "test_run/day=D/b.parquet"]
    assert increments.plan(rec, _sources({"a.parquet": 11}), True).mode == "recompute"  # grew: rewritten
    assert increments.plan(rec, _sources({"b.parquet": 5}), True).mode == "recompute"
    assert increments.plan(None, _sources({"a.parquet": 10}), True).mode == "recompute"
    assert increments.plan(rec, _sources({"a.parquet": 10}), False).mode == "recompute"
    assert increments.Record.from_json(rec.to_json()) == rec
    # the ingest's manifest names a generation, changed at every rewrite of the partition
    gen = increments.Record({"test_run/day=D/a.parquet": 10}, "g1")
    grown = {"a.parquet": 10, "b.parquet": 5}
    assert increments.plan(gen, _sources(grown, "g1"), True).mode == "append"
    rewritten = increments.plan(gen, _sources(grown, "g2"), True)
    assert rewritten.mode == "recompute" and "generation" in rewritten.reason
    assert increments.Record.from_json(gen.to_json()) == gen


def test_plan_takes_a_merge_of_counted_parts_as_counted():
    counted = increments.Record({f"test_run/day=D/{p}.parquet": 10 for p in ("a", "b", "c")}, "g")
    merged = {"m1.parquet": ("a.parquet", "b.parquet")}
    plan = increments.plan(counted, _sources({"m1.parquet": 15, "c.parquet": 10, "d.parquet": 5}, "g", merged), True)
    assert (plan.mode, plan.new_parts) == ("append", ["test_run/day=D/d.parquet"])
    assert plan.carried == {"test_run/day=D/m1.parquet": ["test_run/day=D/a.parquet", "test_run/day=D/b.parquet"]}
    # a merge of merges, as the next level's: counted through its sources' sources
    deeper = {**merged, "m2.parquet": ("m1.parquet", "c.parquet")}
    plan = increments.plan(counted, _sources({"m2.parquet": 25}, "g", deeper), True)
    assert plan.mode == "unchanged" and sorted(plan.carried["test_run/day=D/m2.parquet"]) == [
        f"test_run/day=D/{p}.parquet" for p in ("a", "b", "c")]
    # a merge of parts counted and parts never counted (a follower that missed a refresh) cannot be split
    mixed = {"m1.parquet": ("a.parquet", "x.parquet")}
    plan = increments.plan(counted, _sources({"m1.parquet": 15, "b.parquet": 10, "c.parquet": 10}, "g", mixed), True)
    assert plan.mode == "recompute" and "not counted" in plan.reason
    # parts merged before it counted anything are simply new
    fresh = increments.plan(counted, _sources({"a.parquet": 10, "b.parquet": 10, "c.parquet": 10, "m1.parquet": 9},
                                              "g", {"m1.parquet": ("x.parquet", "y.parquet")}), True)
    assert (fresh.mode, fresh.new_parts, fresh.carried) == ("append", ["test_run/day=D/m1.parquet"], {})
    # a counted part missing and not merged anywhere: what it held is gone
    gone = increments.plan(counted, _sources({"m1.parquet": 15}, "g", merged), True)
    assert gone.mode == "recompute" and "c.parquet" in gone.reason


def test_the_ingests_own_parts_are_added_as_they_land(tmp_path):
    """With the real ingest: reports of new jobs ingested by a refresh become a new test_run part,
    which the aggregates add; the result equals the day aggregated at once."""
    from resources.storage import Store
    from torchci_assets.ingest.reports import ingest_test_run_day
    from torchci_assets.simulate.landing import land_flaky_test

    archive = Store(str(tmp_path / "archive"))
    webhooks(tmp_path, D, job_hooks(range(1, 13)))
    jobs = {job: (1000 + job, 1 + job % 2, job) for job in range(1, 13)}
    land_flaky_test(archive, D, [jobs[j] for j in range(1, 7)], "test_ops", "TestOps", "test_early")
    ingest_test_run_day(archive, lake(tmp_path), D, incremental=True)
    assert refresh(tmp_path).mode == "recompute"  # the first refresh of the day
    land_flaky_test(archive, D, [jobs[j] for j in range(7, 13)], "test_ops", "TestOps", "test_late")
    ingest_test_run_day(archive, lake(tmp_path), D, incremental=True)
    assert len(lake(tmp_path).files("test_run", [D])) == 2  # the ingest added a part
    built = refresh(tmp_path)
    assert (built.mode, built.parts_added) == ("append", 1)
    assert tables(tmp_path) == at_once(tmp_path, tmp_path / "once")


def refreshed_metadata(tmp_path) -> dict[str, dict]:
    """One intra-day refresh of the test rows, their aggregates and flaky_tests: each asset's metadata."""
    result = dg.materialize([assets.test_results_assets, assets.test_daily_stats_assets, flaky_tests_assets],
                            partition_key=D, resources={"lake": LakeResource(uri=str(tmp_path / "lake"))},
                            tags=archive_refresh_job.tags)
    assert result.success
    return {e.asset_key.to_user_string(): {k: v.value for k, v in e.materialization.metadata.items()}
            for e in result.get_asset_materialization_events()}


def digests(tmp_path, table: str) -> dict[str, str]:
    lk = lake(tmp_path)
    return {path: lk.file_digest(path) for path in lk.files(table, [D])}


def test_a_refresh_with_nothing_new_rewrites_no_file_and_flaky_tests_is_left_as_written(tmp_path, rows):
    """Webhooks that move no job (a pull request's, a redelivery) or nothing at all landed: test_jobs
    is not rewritten with the same rows, so flaky_tests, which keeps its result while none of its
    input files changed, keeps it."""
    first_half_counted(tmp_path, rows)
    refreshed_metadata(tmp_path)
    jobs, results = digests(tmp_path, "test_jobs"), digests(tmp_path, "test_results")
    meta = refreshed_metadata(tmp_path)
    assert meta["flaky_tests"]["unchanged_inputs"] is True
    assert (digests(tmp_path, "test_jobs"), digests(tmp_path, "test_results")) == (jobs, results)
    assert (meta["test_results"]["mode"], meta["test_results"]["rows_written"]) == ("unchanged", 0)
    assert meta["test_daily_stats"]["mode"] == "unchanged"


def test_a_refresh_after_a_job_changed_rewrites_its_files_and_recomputes_flaky_tests(tmp_path, rows):
    """The opposite: job 3's `completed` says cancelled after its rows were written; no test row landed."""
    first_half_counted(tmp_path, rows)
    refreshed_metadata(tmp_path)
    jobs = digests(tmp_path, "test_jobs")
    webhooks(tmp_path, D, job_hooks(range(1, JOBS + 1), conclusions={3: "cancelled"}))
    meta = refreshed_metadata(tmp_path)
    assert (meta["test_results"]["mode"], meta["test_results"]["files_rewritten"]) == ("append", 1)
    assert meta["test_daily_stats"]["mode"] != "unchanged"
    assert meta["flaky_tests"]["unchanged_inputs"] is False
    assert digests(tmp_path, "test_jobs") != jobs
    assert query(tmp_path, "test_jobs", "SELECT job_conclusion FROM t WHERE job_id = 3") == [
        {"job_conclusion": "cancelled"}]
