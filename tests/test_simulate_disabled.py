"""The simulator's disabled-test lifecycle: PyTorch's rerun_disabled_tests jobs over the disabled
tests, fixes on known days, and a burst of one file's tests, read back by the real ingest and the
re-enabling's own query."""

from __future__ import annotations

import datetime as dt
import json

import dagster as dg

from resources.configured import ArchiveResource, LakeResource
from resources.lake import Lake, connect
from torchci_assets.derived.flakiness.reenable import rerun_evidence
from torchci_assets.derived.results import assets as results
from torchci_assets.ingest import assets as ingest
from torchci_assets.ingest.jobnames import parse_job_name
from torchci_assets.simulate.disabled import BURST_SIZE, ENABLED_MESSAGE, MAX_NUM_RETRIES, RERUN_MODE
from torchci_assets.simulate.cli import main
from torchci_assets.simulate.generate import generate_archive
from torchci_assets.simulate.world import Options, World

D1, D2 = dt.date(2026, 11, 1), dt.date(2026, 11, 2)
START = D1 - dt.timedelta(days=4)  # fixes land from START + 2 to START + 9 (some before D1, some after D2),
# the burst on START + 5 = D2
SMALL = dict(commits_per_day=6, prs_per_day=4, configs=6, test_files=16, tests_per_file=12, backends=1)
QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}


def test_off_by_default_and_the_same_world_otherwise():
    plain, with_life = World(Options(**SMALL)), World(Options(**SMALL, lifecycle_from=START.isoformat()))
    assert plain.life == () and not any(RERUN_MODE in j.name for a in plain.activities(D1) for j in a.jobs)
    # the lifecycle adds its tests and jobs; the planted flaky tests and the suite stay as they were
    assert plain.rules == with_life.rules and plain.suite == with_life.suite
    assert {r.kind for r in with_life.life} == {"fixed", "lingering", "burst"}
    burst = [r for r in with_life.life if r.kind == "burst"]
    assert len({r.template.file for r in burst}) == 1 and 0 < len(burst) <= BURST_SIZE
    assert not {r.template for r in with_life.life} & {r.template for r in with_life.rules}


def test_rerun_jobs_run_only_the_disabled_tests_and_fixed_ones_pass_every_rerun():
    world = World(Options(**SMALL, lifecycle_from=START.isoformat()))
    jobs = [j for a in world.activities(D2) for j in a.jobs if RERUN_MODE in j.name]
    assert len(jobs) == len(world.configs)
    for job in jobs:
        parsed = parse_job_name(job.name)
        assert (parsed.test_config, parsed.shard, parsed.num_shards) == (job.cfg.test_config, 1, 1)
        assert job.name.endswith(f", {job.cfg.runner}, {RERUN_MODE})") and job.run.event == "schedule"
    reds: dict[str, list[int]] = {}
    for job in jobs:
        for t, n in job.reruns.items():
            reds.setdefault(t, []).append(n)
    for r in world.life:
        if r.kind == "fixed" and r.fixed <= D2:
            assert set(reds[r.template]) == {0}  # fixed: clean in every rerun
        if r.kind == "burst":  # disabled the day after the burst began, which is after D2 here
            assert r.template not in reds
    still = [n for r in world.life if r.kind == "fixed" and r.fixed > D2 for n in reds[r.template]]
    assert sum(still) > 0  # flaky at 5%..30% a try: 50 reruns show it


def test_reports_are_ingested_and_counted_as_the_reenabling_counts_them(tmp_path, monkeypatch):
    archive, lake_dir = tmp_path / "archive", tmp_path / "lake"
    generate_archive(archive, [D1, D2], Options(**SMALL, lifecycle_from=START.isoformat()), log=lambda _: None)
    truth = json.loads((archive / "ground-truth.json").read_text())["disabled_lifecycle"]
    assert truth["rerun_mode"] == RERUN_MODE and truth["max_num_retries"] == MAX_NUM_RETRIES
    resources = {"archive": ArchiveResource(uri=str(archive)), "lake": LakeResource(uri=str(lake_dir))}
    for assets in ([ingest.webhook_assets, ingest.test_run_assets], [results.test_results_assets]):
        for day in (D1, D2):
            assert dg.materialize(assets, partition_key=day.isoformat(), resources=resources, run_config=QUIET).success
    lake = Lake.at(str(lake_dir))
    con = connect()
    lake.register(con, "test_results", lake.days("test_results"), name="r")
    skipped = con.execute("SELECT count(*) FROM r WHERE job_name LIKE '%rerun_disabled_tests%' AND message = ?",
                          [ENABLED_MESSAGE]).fetchall()[0][0]
    con.close()
    assert skipped > 0  # the tests that are not disabled are skipped in the rerun jobs

    since = {t["test"]: dt.datetime(2026, 10, 1, tzinfo=dt.timezone.utc) for t in truth["tests"]}
    evidence = rerun_evidence(lake, D2.isoformat(), since)
    fixed_before = [t["test"] for t in truth["tests"] if t["kind"] == "fixed" and t["fixed"] <= D1.isoformat()]
    fixed_after = [t["test"] for t in truth["tests"] if t["kind"] == "fixed" and t["fixed"] > D2.isoformat()]
    assert fixed_before and fixed_after
    for test in fixed_before:
        runs = evidence[test]
        assert all(r.red == 0 and r.green > 0 for r in runs.values()) and sum(r.jobs for r in runs.values()) >= 2
    assert sum(r.red for t in fixed_after for r in evidence[t].values()) > 0
    assert not any(t["kind"] == "burst" and t["test"] in evidence for t in truth["tests"])


def test_the_cli_flag_starts_the_lifecycle_on_the_first_day(tmp_path):
    assert main(["--out", str(tmp_path), "--days", "1", "--start", D1.isoformat(), "--configs", "3",
                 "--test-files", "10", "--prs-per-day", "1", "--commits-per-day", "2", "--backends", "1",
                 "--disabled-lifecycle"]) == 0
    truth = json.loads((tmp_path / "ground-truth.json").read_text())
    assert truth["generator"]["options"]["lifecycle_from"] == D1.isoformat()
    fixed = [t for t in truth["disabled_lifecycle"]["tests"] if t["kind"] == "fixed"]
    assert fixed and all(t["start"] is None and t["fixed"] > D1.isoformat() for t in fixed)
