"""A repository whose commits land on `master`, configured so (`upstream.branches: [master]`): its
jobs are main's, and it gets what a repository on `main` gets (test times, slow tests, flaky and
broken tests from main's evidence, test-time regressions with their commit).

The simulator's archive is generated once and read twice: as it is (a repository on `main`, the
bundled config) and with its branch renamed `master` in every webhook (as a repository on master
delivers them), under a TORCHCI_CONFIG naming it. Both go through the real ingest and the real
assets; what they publish must be the same.
"""

import datetime as dt
import gzip
import json
import math
import os
import shutil
from pathlib import Path
from unittest import mock

import dagster as dg
import orjson
import pyarrow as pa
import pytest
from conftest import pytorch_json
from test_flaky import CLANG, LINUX, WIN, History, sha

from resources.configured import LakeResource, OutputsResource
from resources.lake import Lake, connect
from resources.storage import Store
from torchci_assets.config import CONFIG_ENV_VAR
import torchci_assets.derived.sharding.assets as sharding
from torchci_assets.derived.flakiness.assets import flaky_tests_assets, slow_tests_asset
from torchci_assets.derived.flakiness.flaky import build_flaky_tests
from torchci_assets.derived.flakiness.lists import SLOW_TESTS_PATH
from torchci_assets.derived.results.assets import RESULTS_ASSETS
from torchci_assets.derived.results.stats import build_test_daily_stats, build_test_results
from torchci_assets.derived.sharding.regressions import find_test_time_regressions
from torchci_assets.derived.sharding.times import TEST_CLASS_TIMES_PATH, TEST_TIMES_PATH
from torchci_assets.ingest.reports import ingest_test_run_day
from torchci_assets.ingest.webhooks import ingest_webhook_day
from torchci_assets.simulate.generate import generate_archive
from torchci_assets.simulate.world import Options

MASTER = "refs/heads/master"
# Two days of eight commits are the smallest history that still has everything compared below on
# both branches: main's jobs by the hundred, slow tests, broken tests, flake events and flips.
DAYS = [dt.date(2026, 11, 10) + dt.timedelta(days=i) for i in range(2)]
NAMES = [d.isoformat() for d in DAYS]
SIM = Options(seed=3, commits_per_day=8, prs_per_day=3, configs=4, test_files=10, tests_per_file=6, backends=0)
# how a repository on master spells what the simulator spells with main: its branch, the push ref, the
# pull requests' base label
ON_MASTER = {"main": "master", "refs/heads/main": MASTER, "pytorch:main": "pytorch:master"}
PUBLISHED = (TEST_TIMES_PATH, TEST_CLASS_TIMES_PATH, SLOW_TESTS_PATH)


def on_master(value):
    if isinstance(value, dict):
        return {k: on_master(v) for k, v in value.items()}
    if isinstance(value, list):
        return [on_master(v) for v in value]
    return ON_MASTER.get(value, value) if isinstance(value, str) else value


def rename_branch(archive: Path) -> None:
    """Every webhook of the archive as the repository on master delivers it; a torn line stays torn."""
    for path in (archive / "webhooks").rglob("*.jsonl.gz"):
        lines = []
        for line in gzip.decompress(path.read_bytes()).splitlines():
            try:
                lines.append(orjson.dumps(on_master(orjson.loads(line))))
            except orjson.JSONDecodeError:
                lines.append(line)
        path.write_bytes(gzip.compress(b"\n".join(lines) + b"\n"))


def process(root: Path) -> dict:
    """Ingest the archive under `root`, materialize the results of every day and, on the last, test
    times, slow tests, flaky tests and regressions; returns each asset's metadata."""
    archive, lake = Store(str(root / "archive")), Lake.at(str(root / "lake"))
    for day in NAMES:
        ingest_webhook_day(archive, lake, day)
        ingest_test_run_day(archive, lake, day)
    resources = {"lake": LakeResource(uri=str(root / "lake")), "outputs": OutputsResource(uri=str(root / "out"))}
    for day in NAMES:
        assert dg.materialize(RESULTS_ASSETS, partition_key=day, resources=resources).success
    result = dg.materialize([sharding.test_times_asset, slow_tests_asset, flaky_tests_assets,
                             sharding.test_time_regressions_asset],
                            partition_key=NAMES[-1], resources=resources)
    return {e.asset_key.to_user_string(): {k: v.value for k, v in e.materialization.metadata.items()}
            for e in result.get_asset_materialization_events()}


@pytest.fixture(scope="module")
def both(tmp_path_factory) -> dict[str, tuple[Path, dict]]:
    """The same history on main (bundled config) and on master (its own config): root and metadata."""
    main, master = tmp_path_factory.mktemp("main"), tmp_path_factory.mktemp("master")
    generate_archive(main / "archive", DAYS, SIM, log=lambda _: None)
    shutil.copytree(main / "archive", master / "archive")
    rename_branch(master / "archive")
    config = master / "widgets.yaml"
    config.write_text("upstream:\n  repo: pytorch/pytorch\n  branches: [master]\n")
    env = {k: v for k, v in os.environ.items() if k != CONFIG_ENV_VAR}
    with mock.patch.dict(os.environ, env, clear=True):
        on_main = process(main)
    with mock.patch.dict(os.environ, {**env, CONFIG_ENV_VAR: str(config)}, clear=True):
        on_master_ = process(master)
    return {"main": (main, on_main), "master": (master, on_master_)}


def same(a, b) -> bool:
    """Equal, floats within 1e-9 of each other: DuckDB sums in no fixed order, so two runs over the
    same rows can differ in the last bits."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


def rows(root: Path, table: str, days: list[str], sql: str) -> list[tuple]:
    con = connect()
    try:
        Lake.at(str(root / "lake")).register(con, table, days, name="t")
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_the_jobs_of_master_pushes_are_main_s(both):
    main, master = both["main"][0], both["master"][0]
    by_branch = "SELECT branch_class, head_branch, count(*) FROM t GROUP BY ALL ORDER BY ALL"
    on_main, on_master_ = rows(main, "test_jobs", NAMES, by_branch), rows(master, "test_jobs", NAMES, by_branch)
    assert [(c, b, n) for c, b, n in on_master_ if c == "main"] == [("main", "master", n) for c, b, n in on_main
                                                                   if c == "main"]
    assert [r for r in on_main if r[0] == "main"][0][2] > 100  # the history has main's jobs to count
    assert {b for c, b, _ in on_master_ if c == "other"} == {b for c, b, _ in on_main if c == "other"}


def test_test_times_and_slow_tests_publish_as_on_main(both):
    (main, meta_main), (master, meta_master) = both["main"], both["master"]
    for asset in ("test_times", "slow_tests"):
        assert meta_master[asset]["published"] is True and "nothing_new" not in meta_master[asset], asset
    assert meta_master["test_times"]["entries"] == meta_main["test_times"]["entries"] > 0
    assert meta_master["slow_tests"]["slow_tests"] == meta_main["slow_tests"]["slow_tests"] > 0
    for path in PUBLISHED:
        published = [json.loads((root / "out" / path).read_bytes()) for root in (master, main)]
        assert published[0] and same(*published), path


def test_flaky_detection_reads_master_s_runs_as_main_s(both):
    (main, meta_main), (master, meta_master) = both["main"], both["master"]
    verdicts = "SELECT * EXCLUDE (day) FROM t ORDER BY file, classname, name"
    on_master_ = rows(master, "flaky_tests", NAMES[-1:], verdicts)
    assert on_master_ and same(on_master_, rows(main, "flaky_tests", NAMES[-1:], verdicts))
    assert meta_master["flaky_tests"]["verdict_broken"] == meta_main["flaky_tests"]["verdict_broken"] > 0
    main_flakes = rows(master, "flaky_tests", NAMES[-1:], "SELECT sum(main_flake_events), sum(flips) FROM t")
    assert main_flakes[0][0] > 0 and main_flakes[0][1] > 0  # main's evidence: flake events and flips


# ---- main's commit order: pushes to the configured branch ------------------------------------------

def test_flaky_orders_master_commits_by_their_push(tmp_path):
    """Broken on commits 10 and 11, whose fix (12) ran its jobs before 11's: only the order of the
    pushes to master says 11 is no isolated failure between passes (test_flaky's case, on master)."""
    h = History(["test_broken"])
    for i in range(30):
        for c in (LINUX, CLANG, WIN):
            h.run(i, c, {"test_broken": "fail"} if i in (10, 11) else None, later_hours=2.5 if i == 11 else 0.5)
    for job in h.jobs:
        job["head_branch"] = "master"
    for push in h.pushes.values():
        push["ref"] = MASTER
    lake = Lake.at(str(tmp_path / "lake"))
    days = h.build(lake)
    for day in days:
        build_test_results(lake, day, main_branch=MASTER)
        build_test_daily_stats(lake, day)
    build_flaky_tests(lake, days[-1], main_branch=MASTER)
    con = connect()
    lake.register(con, "flaky_tests", [days[-1]], name="f")
    [b] = con.execute("SELECT verdict, flips, broken_from_sha, broken_fixed_sha, main_flake_events FROM f").fetchall()
    assert b == ("broken", 0, sha(10), sha(12), 0)


def regression_lake(tmp_path, ref: str = MASTER) -> tuple[Lake, str]:
    """A PyTorch file at its real time of 2026-08-19 on four days of one commit each, then three
    commits pushed to `ref`: X fast, Y slow (the culprit: its slow runs finish last), Z slow."""
    env, file = "linux-jammy-py3.10-gcc11", "test_torch"
    before = float(pytorch_json("test-times.2026-08-19.json")[env]["default"][file])
    lake, day = Lake.at(str(tmp_path / "lake")), "2026-08-20"
    at = dt.datetime.fromisoformat(f"{day}T09:00:00+00:00")
    for back in range(1, 5):
        d = (dt.date.fromisoformat(day) - dt.timedelta(days=back)).isoformat()
        lake.write("test_time_sha_daily", d, pa.Table.from_pylist([
            {"build_env": env, "test_config": "default", "file": file, "head_sha": f"{back:040x}", "runs": 1,
             "time": before, "first_at": at - dt.timedelta(days=back)}]))
    commits = [("x" * 40, before, 0, 1), ("y" * 40, before + 600, 1, 14), ("z" * 40, before + 600, 2, 3)]
    lake.write("test_time_sha_daily", day, pa.Table.from_pylist([
        {"build_env": env, "test_config": "default", "file": file, "head_sha": c, "runs": 1, "time": t,
         "first_at": at + dt.timedelta(hours=finished)} for c, t, _, finished in commits]))
    lake.write("push", day, pa.Table.from_pylist([
        {"repo": "pytorch/pytorch", "ref": ref, "after": c, "received_at": at + dt.timedelta(minutes=10 * pushed)}
        for c, _, pushed, _ in commits]))
    return lake, day


def test_a_regression_names_the_first_slow_commit_pushed_to_master(tmp_path):
    lake, day = regression_lake(tmp_path)
    [row] = find_test_time_regressions(lake, day, main_branch=MASTER).rows
    assert (row["first_slow_sha"], row["last_fast_sha"]) == ("y" * 40, "x" * 40)
    # the asset reads the branch from TORCHCI_CONFIG
    config = tmp_path / "widgets.yaml"
    config.write_text("upstream:\n  repo: pytorch/pytorch\n  branches: [master]\n")
    with mock.patch.dict(os.environ, {CONFIG_ENV_VAR: str(config)}):
        assert dg.materialize([sharding.test_time_regressions_asset], partition_key=day,
                              resources={"lake": LakeResource(uri=str(tmp_path / "lake"))}).success
    found = rows(tmp_path, "test_time_regressions", [day], "SELECT first_slow_sha, last_fast_sha FROM t")
    assert found == [("y" * 40, "x" * 40)]


def test_a_deployment_on_main_reads_its_pushes_to_main_as_before(tmp_path):
    on_main, day = regression_lake(tmp_path / "main", "refs/heads/main")
    assert [r["first_slow_sha"] for r in find_test_time_regressions(on_main, day).rows] == ["y" * 40]
    # pushes to another branch than the one read: the commits fall back to the order their runs finished in
    on_master, day = regression_lake(tmp_path / "master")
    assert [r["first_slow_sha"] for r in find_test_time_regressions(on_master, day).rows] == ["z" * 40]
