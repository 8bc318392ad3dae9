"""`make run`, then `make dev`: the UI and the daemon take the shell's runs as their own.

The real processes: `torchci run` on a simulated archive of the two days before today (UTC), as
`make run` simulates days ending yesterday, then `dagster dev` (webserver, daemon, code server) on
the same instance. The refresh sensor's first tick must find nothing new, the shell's runs must be
the code location's `all_assets_daily` runs at its current snapshot (a clean re-execution), a day
launched from the UI must execute in one process as the shell's does (forked from the warm worker
of dagster.yaml's run launcher), and in a real browser
(Chromium, as tests/test_hud_browser.py drives it) the asset catalog shows every partition
materialized, the Columns view of `workflow_job` and the checks' descriptions.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import shutil
import subprocess
import time

import pytest
from conftest import free_port, skip_without
from dagster_dev import BIN, ROOT, DagsterDev, dev_env
from midnight import days_before_today

from jobs.daily import FINGERPRINT_TAG
from torchci_assets.checks import DESCRIPTIONS
from torchci_assets.simulate.generate import generate_archive
from torchci_assets.simulate.world import Options

SIM = Options(seed=3, commits_per_day=4, prs_per_day=2, configs=3, test_files=6, tests_per_file=5,
              backends=1, platform_failures=0)


@pytest.fixture(scope="module")
def dev(tmp_path_factory):
    root = tmp_path_factory.mktemp("dev")
    days = days_before_today(2)  # the sensor's first tick, below, watches the real today and yesterday
    generate_archive(root / "archive", days, SIM, log=lambda _: None)
    env = dev_env(root)
    cli = subprocess.run([str(BIN / "torchci"), "run", "--quiet"], env=env, cwd=root, capture_output=True,
                         text=True, timeout=600)
    assert cli.returncode == 0, cli.stderr[-3000:]
    server = DagsterDev(env, free_port(), root / "dagster-dev.log")
    try:
        server.wait_loaded()
        tick = server.wait_for_tick("archive_refresh_sensor")
        yield {"server": server, "tick": tick, "days": [d.isoformat() for d in days], "cli": cli,
               "log": root / "dagster-dev.log"}
    finally:
        server.stop()


def test_the_sensor_takes_torchci_runs_as_the_baseline_and_launches_nothing(dev):
    tick = dev["tick"]
    assert tick["status"] == "SKIPPED", tick
    # yesterday is watched and unchanged; today has no partition (the archive ends yesterday)
    assert tick["skipReason"].startswith(f"{dev['days'][1]}: nothing new since"), tick
    assert ";" not in tick["skipReason"]
    assert not [r for r in dev["server"].runs() if r["jobName"] == "archive_refresh"]


def test_torchci_runs_are_the_code_location_s_daily_runs_at_its_current_snapshot(dev):
    server = dev["server"]
    runs = [r for r in server.runs() if {"key": "torchci/source", "value": "torchci run"} in r["tags"]]
    assert sorted(next(t["value"] for t in r["tags"] if t["key"] == "dagster/partition") for r in runs) == dev["days"]
    snapshot = server.job_snapshot_id("all_assets_daily")
    for run in runs:
        assert run["jobName"] == "all_assets_daily" and run["status"] == "SUCCESS"
        assert run["repositoryOrigin"] == {"repositoryLocationName": "torchci", "repositoryName": "__repository__"}
        assert run["pipelineSnapshotId"] == snapshot  # the UI re-executes it without a version warning
        assert any(t["key"] == FINGERPRINT_TAG and len(t["value"]) == 16 for t in run["tags"])
        assert {"key": "dagster/code_location", "value": "torchci"} in run["tags"]


def test_quiet_prints_one_line_per_day_and_the_ui_keeps_the_whole_log(dev):
    out = dev["cli"].stdout + dev["cli"].stderr
    assert " - INFO - " not in out  # no asset's progress lines
    assert [line.split(":")[0].strip() for line in out.splitlines() if line.strip().startswith("[")] == \
        [f"[{i}/2] {day}" for i, day in enumerate(dev["days"], 1)]
    server = dev["server"]
    (run, *_) = [r for r in server.runs() if {"key": "torchci/source", "value": "torchci run"} in r["tags"]]
    events = server.graphql("""query($id: ID!) { logsForRun(runId: $id) { ... on EventConnection {
        events { ... on MessageEvent { message level } } } } }""", id=run["runId"])["logsForRun"]["events"]
    progress = [e["message"] for e in events if e.get("level") == "INFO"]
    assert any(m.startswith(f"webhooks day={run_day(run)}: ") for m in progress), progress
    assert not any(m in out for m in progress)


def run_day(run: dict) -> str:
    return next(t["value"] for t in run["tags"] if t["key"] == "dagster/partition")


def test_make_dev_starts_quietly_as_the_torchci_code_location(dev):
    log = dev["log"].read_text()
    assert "BetaWarning" not in log and "PreviewWarning" not in log
    assert "Found a dagster instance configuration" not in log  # started in DAGSTER_HOME, as `make dev` is
    dry = subprocess.run(["make", "-n", "dev"], cwd=ROOT, capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "DAGSTER_HOME": "/somewhere/home"})
    assert 'cd "/somewhere/home" && ' in dry.stdout


# ---- in a browser ------------------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        skip_without("no Chromium (apt-get install chromium)")
    try:
        from playwright import sync_api
    except ImportError:
        skip_without("no Playwright (make install installs it)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-background-networking",
                                                                 "--no-first-run"])
        yield b
        b.close()


@contextlib.contextmanager
def open_page(browser, url: str, height: int = 1200):
    """A page of the UI at `url`, closed on leaving: an open page polls the webserver for live
    asset data every 2 s, which costs the webserver and Chromium CPU for the rest of the module."""
    page = browser.new_page(viewport={"width": 1600, "height": height})
    try:
        page.set_default_timeout(180_000)  # the machine is shared: the UI's first load can take a while
        # Dagster's newsletter dialog covers the page on a first visit, whenever it opens: Playwright
        # dismisses it before any action it would block.
        page.add_locator_handler(page.get_by_text("Skip", exact=True), lambda skip: skip.click())
        page.goto(url)
        yield page
    finally:
        page.close()


def wait_text(page, predicate, timeout: float = 180.0) -> str:
    """The page's text once `predicate` holds for it (the UI fills in asset status asynchronously)."""
    deadline = time.monotonic() + timeout
    while True:
        text = page.inner_text("body")
        if predicate(text) or time.monotonic() > deadline:
            return text
        time.sleep(0.5)


def test_the_catalog_shows_every_partition_materialized_after_make_run(dev, browser):
    from torchci_assets.definitions import defs

    graph = defs.resolve_asset_graph()
    materializable = {k.to_user_string() for k in graph.materializable_asset_keys}
    want = f"{len(dev['days'])} partitions"
    complete = re.compile(r"^All$", re.M)  # the status of an asset whose every partition is materialized
    with open_page(browser, f"{dev['server'].url}/assets", height=6000) as page:  # every row rendered at once
        text = wait_text(page, lambda t: t.count(want) >= len(materializable)
                         and len(complete.findall(t)) >= len(materializable))
        page.screenshot(path=str(dev["log"].parent / "catalog.png"))
    assert text.count(want) == len(materializable), text[:3000]
    assert len(complete.findall(text)) == len(materializable)
    assert "missing" not in text.lower()
    with open_page(browser, f"{dev['server'].url}/assets/workflow_job?view=partitions") as partitions:
        text = wait_text(partitions, lambda t: "Missing (" in t)
    assert "Missing (0)" in text and f"Materialized ({len(dev['days'])})" in text


def test_workflow_job_shows_its_columns(dev, browser):
    with open_page(browser, f"{dev['server'].url}/assets/workflow_job") as page:
        text = wait_text(page, lambda t: "Column name" in t)
        page.screenshot(path=str(dev["log"].parent / "columns.png"), full_page=True)
    columns = text[text.index("Column name"):]
    for name, kind in (("build_env", "string"), ("run_attempt", "int64"), ("received_at", "timestamp[us, tz=UTC]")):
        assert re.search(rf"^{name}\s*\n\s*{re.escape(kind)}", columns, re.M), name
    assert "Row count" in text


def test_checks_show_their_description_and_blocking(dev, browser):
    with open_page(browser, f"{dev['server'].url}/assets/workflow_job?view=checks") as page:
        wait_text(page, lambda t: "required_columns_not_null" in t)
        page.get_by_text("required_columns_not_null", exact=True).first.click()
        text = wait_text(page, lambda t: DESCRIPTIONS["required_columns_not_null"] in t)
        page.screenshot(path=str(dev["log"].parent / "checks.png"), full_page=True)
    assert "This is a blocking asset check." in text
    assert DESCRIPTIONS["required_columns_not_null"] in text
    assert f"Partition\n{dev['days'][-1]}" in text  # a result per day partition (the latest: `make run`'s last)


# ---- last: it re-materializes a day, after the checks of what `make run` left ----------------------

def test_a_day_launched_from_the_ui_runs_its_steps_in_one_process(dev):
    server = dev["server"]
    run_id = server.launch_day("all_assets_daily", dev["days"][1])
    assert server.wait_run(run_id)["status"] == "SUCCESS"
    events = server.graphql("""query($id: ID!) { logsForRun(runId: $id) { ... on EventConnection {
        events { __typename ... on MessageEvent { message } } } } }""", id=run_id)["logsForRun"]["events"]
    messages = [e.get("message") or "" for e in events]
    assert any(m.startswith("Executing steps in process") for m in messages), messages[:20]
    assert not any("multiprocess executor" in m for m in messages)
    # forked from the warm worker (dagster.yaml's run launcher), which reports what the run cost
    run = server.graphql("""query($id: ID!) { runOrError(runId: $id) { ... on Run { tags { key value } } } }""",
                         id=run_id)["runOrError"]
    pid = {t["key"]: t["value"] for t in run["tags"]}["torchci/worker"].split(":")[0]
    assert any(f"Started process for run (pid: {pid})" in m for m in messages)
    report = re.compile(rf"run {run_id} of all_assets_daily \(pid {pid}\) exited 0 after .* CPU-s")
    deadline = time.time() + 10
    while not report.search(dev["log"].read_text(errors="replace")) and time.time() < deadline:
        time.sleep(0.2)
    assert report.search(dev["log"].read_text(errors="replace"))


# ---- after that: a new day, made by a reload -----------------------------------------------------

CI_RESULT_ASSETS = ["ci_result", "ci_callback_minutes", "ci_result_rejects"]  # one multi-asset, the cheapest ingest


def test_a_new_day_runs_from_the_warm_worker_after_the_code_location_is_reloaded(dev):
    """The archive ended yesterday, so the partitions end there. Once files land today the refresh
    sensor asks for a Reload, which gives the code server today's partition; the runs of today that
    follow must not be forked from a warm worker that loaded the partitions before it ("Partition
    key range end <today> is after the partitions definition end time")."""
    server, yesterday = dev["server"], dev["days"][1]
    today = (dt.date.fromisoformat(yesterday) + dt.timedelta(days=1)).isoformat()
    warm = server.launch_day("all_assets_daily", yesterday, CI_RESULT_ASSETS)  # a warm worker, partitions to yesterday
    assert server.wait_run(warm)["status"] == "SUCCESS"
    (dev["log"].parent / "archive" / "ci-results" / f"day={today}").mkdir(parents=True)
    server.reload()
    run_id = server.launch_day("all_assets_daily", today, CI_RESULT_ASSETS)
    assert server.wait_run(run_id)["status"] == "SUCCESS", "\n".join(failures(server, run_id))
    run = server.graphql("""query($id: ID!) { runOrError(runId: $id) { ... on Run { tags { key value } } } }""",
                         id=run_id)["runOrError"]
    assert any(t["key"] == "torchci/worker" for t in run["tags"])  # forked from a warm worker, not the code server


def failures(server: DagsterDev, run_id: str) -> list[str]:
    events = server.graphql("""query($id: ID!) { logsForRun(runId: $id) { ... on EventConnection {
        events { __typename ... on MessageEvent { message } } } } }""", id=run_id)["logsForRun"]["events"]
    return [e.get("message") or "" for e in events if "Failure" in e["__typename"]]

