"""A DISABLED issue an earlier version of this project titled `DISABLED test_x (__main__.)` for a
test outside a class, still open under that title: the disabled list CI reads names the test
`test_x (__main__)`, since PyTorch's runner takes the empty class word of `(__main__.)` for every
class of the file. The issue's title is left as it is (retitling someone's issue is a write this
project does not make); the loop finds it as the test's and files no other.

Run through Dagster as in test_disabled_issues.py: a lake of hand-made CI history in which
`test_sync` reports outside a class and flakes on main's Linux jobs, the real flaky verdict, and a
real HTTP server on 127.0.0.1 playing GitHub's issues and search API.
"""

import pytest
from fake_github_issues import FakeIssueTracker
from test_disabled_issues import (World, as_yesterdays, built_world, config, configure, entry,  # noqa: F401
                                  github, metadata, run)
from test_flaky import LINUX, WIN, History
from test_team_classless import classless, pytorch_runner_disables

from resources.github import GitHubResource
from resources.storage import Store
from torchci_assets.derived.flakiness.lists import DISABLED_TESTS_PATH, REENABLED_TESTS_PATH, dumps, stable_id

KEY = "test_sync (__main__)"
OLD_KEY = "test_sync (__main__.)"  # as an earlier version titled its issue and wrote its list
BOT = "pytorch-bot[bot]"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """test_sync, outside a class, flakes on 3 of main's 40 Linux jobs and passes on Windows."""
    h = History(["test_sync", "test_ok"])
    for i in range(40):
        h.run(i, LINUX, {"test_sync": "flake"} if i in (5, 17, 30) else None)
        h.run(i, WIN, None)
    return built_world(classless(h, "test_sync"), tmp_path_factory, "classless")


@pytest.fixture
def world(built, tmp_path):
    return World(built, tmp_path)


def table(world) -> list[dict]:
    return world.lake.read_files(world.lake.files("disabled_tests", [world.day])).to_pylist()


def disables_in_a_class(listed: dict) -> list[str]:
    """The entries PyTorch's runner takes for test_sync of a class of the file (none should)."""
    return [k for k in listed if pytorch_runner_disables(k, "TestSyncDeviceTypeCPU", "test_sync")]


def test_the_list_names_an_old_titled_issue_s_test_outside_a_class(httpserver, world):
    fake = FakeIssueTracker(httpserver)
    old = fake.add(f"DISABLED {OLD_KEY}", "Platforms: linux\n\nflaky", user=BOT)

    result = run(world, github(httpserver))

    assert result.success
    assert world.published() == {KEY: entry(old, ["linux"])}
    assert disables_in_a_class(world.published()) == []
    assert [r["test"] for r in table(world)] == [KEY]
    assert fake.count("POST", "/repos/pytorch/pytorch/issues") == 0 and fake.titled(f"DISABLED {OLD_KEY}") == [old]
    assert fake.count("PATCH") == 0, "the issue's title is someone's: it is not rewritten"


def test_an_old_and_a_new_titled_issue_for_the_test_are_one_entry(httpserver, world):
    """As two issues titled alike are: the first by URL keeps its number, platforms are merged."""
    fake = FakeIssueTracker(httpserver)
    old = fake.add(f"DISABLED {OLD_KEY}", "Platforms: linux", user=BOT)
    fake.add(f"DISABLED {KEY}", "Platforms: win", user=BOT)

    assert run(world, github(httpserver)).success
    assert world.published() == {KEY: entry(old, ["linux", "win"])}


def test_a_list_an_earlier_version_published_under_the_old_name_is_not_read_as_a_re_enable(httpserver, world):
    """Yesterday's list carried the old name; today's carries the new one for the same issue: the
    test was never re-enabled, nor newly disabled."""
    fake = FakeIssueTracker(httpserver)
    old = fake.add(f"DISABLED {OLD_KEY}", "Platforms: linux", user=BOT)
    Store(world.outputs_uri).write_bytes(DISABLED_TESTS_PATH, dumps({OLD_KEY: entry(old, ["linux"])}))
    as_yesterdays(world)

    result = run(world, github(httpserver))

    assert result.success
    assert world.published() == {KEY: entry(old, ["linux"])}
    assert world.published(REENABLED_TESTS_PATH) == {}
    meta = metadata(result, "disabled_tests")
    assert (meta["reenabled"], meta["newly_disabled"]) == (0, 0)


def test_the_dry_run_renames_an_entry_its_earlier_version_listed_under_the_old_name(httpserver, world, tmp_path,
                                                                                     monkeypatch):
    configure(tmp_path, monkeypatch, enabled=False)
    Store(world.outputs_uri).write_bytes(DISABLED_TESTS_PATH, dumps({OLD_KEY: [stable_id(OLD_KEY), "", ["linux"]]}))
    as_yesterdays(world)

    result = run(world, GitHubResource(api_url=httpserver.url_for("")))

    assert result.success
    assert world.published() == {KEY: [stable_id(OLD_KEY), "", ["linux"]]}
    assert disables_in_a_class(world.published()) == []
    meta = metadata(result, "disabled_tests")
    assert (meta["reenabled"], meta["newly_disabled"]) == (0, 0)
    assert world.published(REENABLED_TESTS_PATH) == {}
