"""A team's pytest test outside a class (module-level `def test_sync_widget()`, in the lake with an
empty class) in PyTorch's formats: the disabled list, the DISABLED issues' titles and the slow list
name it `test_sync_widget (__main__)`, and every run reads it back under that name: its issue is
found again, its platforms parsed, and it is re-enabled on clean reruns and kept while it reports.
The team is the one of tests/test_team_*.py (`acme/widgets`, main branch `master`); its issues live
on the fake GitHub (tests/fake_github_issues.py)."""

import datetime as dt

import dagster as dg
import pyarrow as pa
import pytest
from fake_github_issues import FakeIssueTracker
from fake_team_history import BRANCH, TEAM
from test_disabled_issues import RERUN, World, entry, github, metadata, run
from test_flaky import LINUX, WIN, History
from test_team_flaky_words import built_on_master

from resources.configured import LakeResource, OutputsResource
from resources.github import GitHubResource
from resources.lake import Lake
from resources.storage import Store
from torchci_assets.derived.flakiness.assets import slow_tests_asset
from torchci_assets.derived.flakiness.issue_text import (condense, disabled_test, issue_title, method_and_class,
                                                         parse_platforms, runner_test, titled_for_test,
                                                         unreadable_reason)
from torchci_assets.derived.flakiness.issues import title_query
from torchci_assets.derived.flakiness.lists import (DISABLED_TESTS_PATH, REENABLED_TESTS_PATH, SLOW_TESTS_PATH, dumps,
                                                    pytorch_key)
from torchci_assets.derived.flakiness.retired import find_absent

KEY = "test_sync_widget (__main__)"
OLD_KEY = "test_sync_widget (__main__.)"  # as an earlier version named it
BOT = "pytorch-bot[bot]"
CONFIG = f"""
upstream: {{repo: {TEAM}, branches: [{BRANCH}]}}
poll_commits: false
disabled_issues: {{enabled: {{enabled}}, max_new_per_run: 10}}
"""


@pytest.fixture(autouse=True)
def team_config(tmp_path, monkeypatch):
    configure(tmp_path, monkeypatch, True)


def configure(tmp_path, monkeypatch, enabled: bool) -> None:
    (tmp_path / "config.yaml").write_text(CONFIG.replace("{enabled}", str(enabled).lower()))
    monkeypatch.setenv("TORCHCI_CONFIG", str(tmp_path / "config.yaml"))


def pytorch_runner_disables(target: str, classname: str, method: str) -> bool:
    """Whether PyTorch's test harness takes the list entry `target` for the test `method` of class
    `classname`: common_utils.py `check_if_enable`'s `matches_test`, to the letter (a list entry
    disables every class whose name starts with the entry's class word)."""
    parts = target.split()
    if len(parts) < 2:
        return False
    return classname.startswith(parts[1][1:-1].split(".")[-1]) and parts[0] == method


def classless(h: History, name: str = "test_sync_widget") -> History:
    """`h` with `name` reported outside a class, as pytest's JUnit names a module-level function."""
    for rows in h.rows.values():
        for r in rows:
            if r["name"] == name:
                r["classname"] = ""
    return h


def team_world(h: History, tmp_path) -> World:
    root = tmp_path / "built"
    return World((root, built_on_master(classless(h), root), h), tmp_path)


@pytest.fixture
def flaky_world(tmp_path):
    """test_sync_widget flakes on master's Linux jobs (3 of 40) and passes on Windows."""
    h = History(["test_sync_widget", "test_ok"])
    for i in range(40):
        h.run(i, LINUX, {"test_sync_widget": "flake"} if i in (5, 17, 30) else None)
        h.run(i, WIN, None)
    return team_world(h, tmp_path)


def test_a_test_outside_a_class_is_named_under_main_alone_and_a_class_s_as_before():
    assert pytorch_key("", "test_sync_widget") == KEY
    assert pytorch_key("test_nn.TestNN", "test_conv") == "test_conv (__main__.TestNN)"  # PyTorch's, unchanged
    assert issue_title(KEY) == f"DISABLED {KEY}" and unreadable_reason(KEY) is None
    assert disabled_test(issue_title(KEY)) == KEY and runner_test(KEY) == KEY
    assert method_and_class(KEY) == ("test_sync_widget", "")  # the words its evidence is read by
    url = f"https://github.com/{TEAM}/issues/7"
    assert condense([{"title": issue_title(KEY), "body": "Platforms: linux", "html_url": url}]) \
        == {KEY: ["7", url, ["linux"]]}
    # an issue an earlier version titled `(__main__.)` is the same test's, and its search finds both
    assert titled_for_test(issue_title(OLD_KEY), KEY) and runner_test(OLD_KEY) == KEY
    assert title_query(TEAM, KEY) == f'repo:{TEAM} is:issue in:title "test_sync_widget"'


def test_pytorch_s_harness_reading_the_entry_disables_no_test_of_a_class():
    """The harness matches a class by the prefix of its name: `(__main__.)`, an empty class word,
    disabled `test_sync_widget` of every class; `(__main__)` names no class."""
    assert pytorch_runner_disables(OLD_KEY, "TestWidgets", "test_sync_widget")  # why the old form was wrong
    assert not pytorch_runner_disables(KEY, "TestWidgets", "test_sync_widget")
    assert pytorch_runner_disables("test_conv (__main__.TestNN)", "TestNNDeviceTypeCPU", "test_conv")


def test_its_issue_is_filed_once_under_main_and_found_again_with_its_platforms(httpserver, flaky_world):
    fake = FakeIssueTracker(httpserver, repo=TEAM)
    first = run(flaky_world, github(httpserver))
    assert first.success
    (issue,) = fake.titled(f"DISABLED {KEY}")
    assert parse_platforms(issue["body"]) == ["linux"] and "flaky on master:" in issue["body"]
    assert "| linux | 40 | 0 | 3 | 3 | 0 | 0 |" in issue["body"]  # its evidence, read under its name
    assert flaky_world.published() == {KEY: entry(issue, ["linux"])}
    again = run(flaky_world, github(httpserver))
    assert again.success and fake.count("POST", f"/repos/{TEAM}/issues") == 1
    assert [(r["test"], r["action"]) for r in flaky_world.ledger() if r["run_id"] == again.run_id] == [(KEY, "found")]
    assert flaky_world.published() == {KEY: entry(issue, ["linux"])}


def test_an_issue_an_earlier_version_titled_with_an_empty_class_is_found_not_filed_again(httpserver, flaky_world):
    fake = FakeIssueTracker(httpserver, repo=TEAM)
    old = fake.add(f"DISABLED {OLD_KEY}", "Platforms: linux\n\nflaky", user=BOT)
    assert run(flaky_world, github(httpserver)).success
    assert fake.count("POST", f"/repos/{TEAM}/issues") == 0
    assert flaky_world.published() == {KEY: entry(old, ["linux"])}  # its class word empty no more
    assert [(r["test"], r["action"]) for r in flaky_world.ledger()] == [(KEY, "found")]


def test_the_dry_run_lists_it_under_main_and_plans_its_title(httpserver, flaky_world, tmp_path, monkeypatch,
                                                              instance):
    configure(tmp_path, monkeypatch, False)
    result = run(flaky_world, GitHubResource(api_url=httpserver.url_for("")), instance)
    assert result.success
    assert list(flaky_world.published()) == [KEY]
    logs = [e.user_message for e in instance.all_logs(result.run_id)]
    assert any(m.startswith(f"DRY RUN: would find or file 'DISABLED {KEY}' in {TEAM}") for m in logs)


def test_the_dry_run_re_enables_it_on_a_clean_window(httpserver, tmp_path, monkeypatch):
    configure(tmp_path, monkeypatch, False)
    h = History(["test_sync_widget"])
    for i in range(40):
        h.run(i, LINUX, None)
        h.run(i, WIN, None)
    world = team_world(h, tmp_path)
    out = Store(world.outputs_uri)
    out.write_bytes(DISABLED_TESTS_PATH, dumps({KEY: ["local-0123456789ab", "", ["linux"]]}))
    assert run(world, GitHubResource(api_url=httpserver.url_for(""))).success
    assert world.published() == {}
    assert world.published(REENABLED_TESTS_PATH) == {KEY: {"id": "local-0123456789ab", "runs": 80}}


def test_clean_reruns_re_enable_it(httpserver, tmp_path):
    h = History(["test_sync_widget", "test_ok"])
    for i in range(40):
        h.run(i, LINUX, None)
    for i in range(2, 24 * 7, 24):  # a rerun job a day for a week, every rerun green
        h.run(i, RERUN, None)
    world = team_world(h, tmp_path)
    fake = FakeIssueTracker(httpserver, repo=TEAM)
    issue = fake.add(f"DISABLED {KEY}", "Platforms: linux\n\nflaky", user=BOT, age=dt.timedelta(days=60))
    result = run(world, github(httpserver))
    assert result.success
    assert fake.issues[issue["number"]]["state"] == "closed"
    assert fake.comments[issue["number"]][0].startswith(f"Re-enabling `{KEY}`: every rerun")
    assert metadata(result, "disabled_tests")["source"] == f"open DISABLED issues of {TEAM}"


def test_a_disabled_test_outside_a_class_that_still_reports_is_not_retired(tmp_path):
    lake, today = Lake.at(str(tmp_path / "lake")), dt.date(2026, 11, 20)
    for n in range(7):
        day = (today - dt.timedelta(days=n)).isoformat()
        lake.write("test_daily_stats", day, pa.Table.from_pylist([{
            "file": "tests/test_sync.py", "classname": "", "name": "test_sync_widget", "skipped": 1,
            "last_seen": dt.datetime.fromisoformat(f"{day}T12:00:00+00:00")}]))
    assert find_absent(lake, today.isoformat(), [KEY]).absent == []


def slow_row(branch: str, seconds: float) -> dict:
    return {"file": "tests/test_sync.py", "classname": "", "name": "test_sync_widget", "build_env": "test / unit",
            "test_config": "default", "branch_class": branch, "clean_passes": 3, "pass_time": 3 * seconds}


def materialize_slow_tests(tmp_path, day: str) -> dict:
    result = dg.materialize([slow_tests_asset], partition_key=day, resources={
        "lake": LakeResource(uri=str(tmp_path / "lake")), "outputs": OutputsResource(uri=str(tmp_path / "out"))})
    return metadata(result, "slow_tests")


def test_the_slow_list_names_it_under_main_and_its_quiet_window_names_the_team_s_branch(tmp_path):
    """A window without a clean pass on master publishes nothing, and says so in master's words."""
    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    lake.write("test_daily_stats", "2026-11-05", pa.Table.from_pylist([slow_row("other", 90.0)]))
    said = materialize_slow_tests(tmp_path, "2026-11-05")["nothing_new"]
    assert said.startswith("no clean master-branch pass in the 14 days ending 2026-11-05: ") \
        and "main-branch" not in said
    lake.write("test_daily_stats", "2026-11-20", pa.Table.from_pylist([slow_row("main", 90.0)]))
    assert materialize_slow_tests(tmp_path, "2026-11-20")["slow_tests"] == 1
    assert out.read_bytes(SLOW_TESTS_PATH) == dumps({KEY: 90.0})
