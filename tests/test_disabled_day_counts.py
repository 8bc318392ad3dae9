"""The finished day's `disabled_tests` table, live: the list CI read at the day's end, with the
whole day's counts.

The day's last intra-day refresh wrote the table from the reports landed by then. The daily run of
that day (at 00:30 the next day, usually after the next day's first refresh published its list)
keeps the list, which is what CI read, but counts each test's runs and flake events from the day's
whole verdict, which the HUD's metrics page shows for the day. Run through Dagster as in
test_disabled_past_day.py: a lake of hand-made CI history, the real flaky verdict, and a real HTTP
server on 127.0.0.1 playing GitHub's issues and search API.
"""

import shutil
from pathlib import Path

import pytest
from fake_github_issues import FakeIssueTracker
from test_disabled_issues import REFRESH, TEST_A, TEST_B, World, built_world, config, github, run  # noqa: F401
from test_disabled_past_day import files, next_day, table
from test_flaky import LINUX, WIN, History

from resources.lake import connect
from torchci_assets.derived.flakiness.flaky import build_flaky_tests

COMMITS, BY_MORNING = 40, 32  # main's hourly commits of the two days, and those in by the last refresh
LIST = ("test", "id", "url", "platforms", "status")  # what CI read
COUNTS = ("flake_events", "runs")


def history(commits: int) -> History:
    """test_a flakes on Linux, test_b on Linux and Windows (as in test_disabled_issues.py), the
    last of each after the morning."""
    h = History(["test_a", "test_b", "test_ok"])
    for i in range(commits):
        h.run(i, LINUX, {"test_a": "flake"} if i in (5, 17, 30, 36) else {"test_b": "flake"} if i in (8, 20, 33)
              else None)
        h.run(i, WIN, {"test_b": "flake"} if i in (9, 21, 34) else None)
    return h


@pytest.fixture(scope="module")
def morning(tmp_path_factory):
    return built_world(history(BY_MORNING), tmp_path_factory, "morning")


@pytest.fixture
def world(morning, tmp_path):
    return World(morning, tmp_path)


def the_rest_of_the_day_lands(world) -> None:
    """The reports after the last refresh, and the daily run's verdict of the whole day."""
    history(COMMITS).build(world.lake)
    build_flaky_tests(world.lake, world.day)


def verdict_counts(world) -> dict[str, tuple[int, int]]:
    """Per test, flake events and runs in the day's `flaky_tests`, read as the HUD would."""
    con = connect()
    world.lake.register(con, "flaky_tests", [world.day], name="f")
    rows = con.execute("SELECT name, sum(flake_events), sum(runs) FROM f GROUP BY name").fetchall()
    return {f"{name} (__main__.TestX)": (events, runs) for name, events, runs in rows}


def counts(rows: list[dict]) -> dict[str, tuple[int, int]]:
    return {r["test"]: tuple(r[c] for c in COUNTS) for r in rows}


def listed(rows: list[dict]) -> list[tuple]:
    return [tuple(r[c] if c != "platforms" else list(r[c]) for c in LIST) for r in rows]


def last_refresh_then_the_next_day(httpserver, world) -> list[dict]:
    """The day's last refresh files the issues and writes the table; the rest of the day lands; the
    next day's first refresh publishes its list. Returns the table the last refresh wrote."""
    FakeIssueTracker(httpserver)
    assert run(world, github(httpserver), tags=REFRESH).success
    at_last_refresh = table(world, world.day)
    the_rest_of_the_day_lands(world)
    assert run(world, github(httpserver), day=next_day(world.day), tags=REFRESH).success
    return at_last_refresh


def test_the_daily_run_keeps_the_list_ci_read_and_counts_the_whole_day(httpserver, world):
    at_last_refresh = last_refresh_then_the_next_day(httpserver, world)
    whole_day = verdict_counts(world)
    assert counts(at_last_refresh) != {t: whole_day[t] for t in (TEST_A, TEST_B)}, "nothing landed after it"
    published = files(world)

    assert run(world, github(httpserver)).success

    after = table(world, world.day)
    assert listed(after) == listed(at_last_refresh)
    assert counts(after) == {TEST_A: whole_day[TEST_A], TEST_B: whole_day[TEST_B]}, \
        "the finished day's table kept the last refresh's counts"
    assert files(world) == published


def test_a_re_run_weeks_later_gives_the_same_table(httpserver, world):
    last_refresh_then_the_next_day(httpserver, world)
    assert run(world, github(httpserver)).success
    daily = table(world, world.day)
    assert run(world, github(httpserver), day=next_day(world.day, 21)).success

    assert run(world, github(httpserver)).success
    assert table(world, world.day) == daily


def test_a_past_day_whose_verdict_is_gone_keeps_the_counts_it_was_written_with(httpserver, world):
    last_refresh_then_the_next_day(httpserver, world)
    assert run(world, github(httpserver)).success
    daily = table(world, world.day)
    shutil.rmtree(Path(world.lake_uri) / "flaky_tests" / f"day={world.day}")

    assert run(world, github(httpserver)).success
    assert table(world, world.day) == daily
