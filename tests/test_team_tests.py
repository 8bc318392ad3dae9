"""What a team whose CI follows none of PyTorch's job names gets from its own test reports, end to end:
its history (tests/fake_team_history.py on the fake Actions API, with a test that times out now and
then: fill_with_flaky_sync), `torchci backfill` reading its `junit-<os>` artifacts, then `torchci run`
over every asset, as docs/ingest.md tells a team to.
Its jobs are named `test / unit (ubuntu-latest)`: PyTorch's `<build_env> / test (<config>, <shard>,
<num_shards>, <runner>)` does not match them, so each such job is its own build_env, with the
test_config `default`.

The same history's platform smoke sets are checked here too, on the same outputs (a second file
would build them again): acme/widgets runs its tests on three platforms, with a test that times out
now and then on Ubuntu and passes when re-run. Its sets come out empty, and that is the answer: a
smoke set is the tests failing on one platform significantly more than elsewhere, chosen from
evidence alone (nothing to configure), and a test that passes on a re-run is a flaky test for the
disabled list, not one failing its platform's jobs. Each platform gets its file all the same, saying
what it takes to enter it, and the documentation says why a set is empty with the figures the code
uses."""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from fake_team_history import BRANCH, OSES, TEAM, fill_with_flaky_sync, served
from midnight import days_before_today

from resources.lake import Lake, connect
from resources.storage import Store
from torchci_assets.cli import main
from torchci_assets.derived.flakiness.flaky import MIN_FLAKE_EVENTS
from torchci_assets.derived.flakiness.smoke import (
    SMOKE_DIR,
    SMOKE_MIN_EXCLUSIVE_SHAS,
    SMOKE_MIN_FAILURE_RATE,
    SMOKE_MIN_RUNS,
)
from torchci_assets.derived.sharding.times import TEST_TIMES_PATH, dumps, publish_test_times

TORCHCI = str(Path(sys.executable).parent / "torchci")
TEST_JOBS = [f"test / unit ({o})" for o in OSES]
DOCS = Path(__file__).resolve().parents[1] / "docs" / "outputs.md"


@pytest.fixture(scope="module")
def days() -> list[dt.date]:
    """The team's history: the two days before today, as `torchci backfill` and `torchci run` (which read
    up to the real today) and Dr. CI (which writes only today's and yesterday's partitions) see them."""
    return days_before_today(2)


@pytest.fixture(scope="module")
def outputs(tmp_path_factory, days):
    """The outputs folder once the team's history went through backfill and `torchci run`."""
    root = tmp_path_factory.mktemp("team-tests")
    config = root / "my-repo.yaml"
    config.write_text(f"upstream:\n  repo: {TEAM}\n  branches: [{BRANCH}]\nbackfill:\n  report_artifacts: [junit-]\n")
    with served(fill_with_flaky_sync, days) as api, pytest.MonkeyPatch.context() as mp:
        mp.setenv("GITHUB_API_URL", api.server.url_for("").rstrip("/"))
        mp.setenv("GITHUB_TOKEN", "ghp_FAKE0123456789")
        mp.setenv("TORCHCI_CONFIG", str(config))
        mp.setenv("TORCHCI_FIRST_DAY", days[0].isoformat())
        mp.setenv("DAGSTER_HOME", str(root / "dagster"))
        for var, folder in (("ARCHIVE", "archive"), ("LAKE", "lake"), ("OUTPUTS", "out")):
            mp.setenv(f"TORCHCI_{var}_URI", str(root / folder))
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["backfill", "--repo", TEAM, "--since", days[0].isoformat(), "--prs"]) == 0
        # in its own process, as a user runs it: the definitions read the environment as they load
        ran = subprocess.run([TORCHCI, "run", "--quiet"], env=dict(os.environ), cwd=root, capture_output=True,
                             text=True, timeout=600)
        assert ran.returncode == 0, ran.stderr[-3000:]
    return root / "out"


def test_the_team_s_test_times_are_keyed_by_its_test_jobs(outputs):
    """Each test job of master's runs is a build_env of test-times.json, its files under `default`
    (was: no test times at all, `nothing new to publish`, every job's build_env unknown)."""
    times = json.loads((outputs / "stats" / "test-times.json").read_text())
    assert sorted(times) == sorted(TEST_JOBS + ["default"])
    for job in TEST_JOBS:  # each report's times add up to 1 ms; the failing runs' test_widgets are not clean
        assert times[job] == {"default": {"test_ops": 0.001, "tests/test_sync": 0.001}}
    classes = json.loads((outputs / "stats" / "test-class-times.json").read_text())
    assert classes["test / unit (macos-latest)"]["default"]["test_ops"] == {"": 0.0, "TestOps": 0.001}


def test_each_test_job_has_a_shard_plan(outputs):
    """A plan per test job, under its name percent-encoded, one shard (the job runs unsharded)."""
    for job in TEST_JOBS:
        plan = json.loads((outputs / "shard-plans" / job.replace(" ", "%20").replace("/", "%2F")
                           .replace("(", "%28").replace(")", "%29") / "default.json").read_text())
        assert (plan["build_env"], plan["test_config"], len(plan["shards"])) == (job, "default", 1)


def test_a_test_that_timed_out_then_passed_on_the_re_run_is_flaky_on_its_platform(outputs):
    """Three master runs whose Ubuntu job failed test_sync_widget and passed when re-run: flaky, on
    linux, on the HUD's tests page and in the (local) disabled list."""
    tests = (outputs / "hud" / "tests.html").read_text()
    row = next(r for r in tests.split("<tr")[1:] if "test_sync_widget" in r and 'data-verdict="flaky"' in r)
    assert "3 flake events in 24 runs" in row and "linux" in row and "mac" not in row
    assert ".test_sync_widget" not in tests  # a test outside a class is named alone (was `.test_sync_widget`)
    disabled = json.loads((outputs / "stats" / "disabled-tests-condensed.json").read_text())
    assert [v[2] for k, v in disabled.items() if k.startswith("test_sync_widget ")] == [["linux"]]


def test_dr_ci_calls_the_known_flaky_test_s_failure_on_a_pull_request_flaky(outputs):
    body = (outputs / "drci" / "108.md").read_text()
    assert "You can merge normally! (1 Unrelated Failure)" in body and "<b>FLAKY</b>" in body
    assert "`FAILED tests/test_sync.py::test_sync_widget - TimeoutError: widget service did not answer" in body


def test_a_team_s_test_job_that_ran_this_month_keeps_its_times_and_a_retired_one_is_dropped(tmp_path):
    """A month of jobs: the Ubuntu and macOS jobs ran on its last day (macOS's reports landed that day),
    FreeBSD's only before the month. Each job is its own build_env here too (was: none had one, so all
    were dropped as retired, the day's own times too, once the lake held a month)."""
    last = dt.datetime.now(dt.timezone.utc).date()  # the month's last day: publish_test_times is given it
    lake, store, today = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out")), last.isoformat()
    ubuntu, macos, freebsd = "test / unit (ubuntu-latest)", "test / unit (macos-latest)", "test / unit (freebsd)"
    store.write_bytes(TEST_TIMES_PATH, dumps({job: {"default": {"test_ops": 1.0}} for job in (ubuntu, freebsd)}))
    for offset, names in ((40, [ubuntu, freebsd]), (29, ["lint"]), (0, [ubuntu, macos])):
        lake.write("workflow_job", (last - dt.timedelta(days=offset)).isoformat(),
                   pa.table({"build_env": pa.nulls(len(names), pa.string()), "name": pa.array(names, pa.string())}))
    lake.write("test_time_daily", today, pa.table({
        "build_env": [macos], "test_config": ["default"], "file": ["test_ops"],
        "classname": pa.nulls(1, pa.string()), "time": [2.0], "runs": pa.array([1], pa.int64())}))
    publish_test_times(lake, store, today)
    assert sorted(json.loads(store.read_bytes(TEST_TIMES_PATH))) == ["default", macos, ubuntu]


# ---- the platform smoke sets ------------------------------------------------------------------

def test_each_of_the_team_s_platforms_gets_an_empty_set_saying_what_it_takes(outputs):
    sets = {p.stem: json.loads(p.read_text()) for p in (outputs / SMOKE_DIR).glob("*.json")}
    assert sorted(sets) == ["linux", "mac", "win"]
    for document in sets.values():
        assert document["tests"] == []
        assert document["criteria"]["min_runs"] == SMOKE_MIN_RUNS
        assert document["criteria"]["min_exclusive_failing_shas"] == SMOKE_MIN_EXCLUSIVE_SHAS


def test_the_flaky_test_is_flake_evidence_on_its_platform_not_smoke_evidence(outputs, days):
    """What the sets were chosen from: the timed-out test flaked on linux alone, in fewer runs than a
    set needs, so it enters no set (and the lake's smoke_tests has no row)."""
    lake = Lake.at(str(outputs.parent / "lake"))
    day = days[-1].isoformat()
    con = connect()
    lake.register(con, "flaky_test_platforms", [day], name="ev")
    rows = con.execute("SELECT platform, runs, flake_events FROM ev WHERE name = 'test_sync_widget' "
                       "ORDER BY platform").fetchall()
    flaky = {platform: (runs, flakes) for platform, runs, flakes in rows}
    assert sorted(flaky) == ["linux", "mac", "win"]
    assert flaky["linux"][1] == 3 and flaky["mac"][1] == flaky["win"][1] == 0
    assert all(runs < SMOKE_MIN_RUNS for runs, _ in flaky.values())
    assert lake.rows_in(lake.files("smoke_tests", [day])) == 0


def test_the_documentation_says_why_a_set_is_empty_with_the_code_s_figures():
    """A user reading an empty set learns it is an answer, and what would put a test in it."""
    text = " ".join(DOCS.read_text().split())
    section = text[text.index("## Smoke-test sets"):]
    section = section[:section.index(" ## ")]
    assert "empty" in section and "nothing to configure" in section
    figures = re.findall(r"\d+%?", section)
    for figure in (str(SMOKE_MIN_RUNS), str(SMOKE_MIN_EXCLUSIVE_SHAS), f"{SMOKE_MIN_FAILURE_RATE:.0%}",
                   str(MIN_FLAKE_EVENTS)):
        assert figure in figures, (figure, section)
