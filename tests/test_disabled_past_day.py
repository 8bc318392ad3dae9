"""A re-run or backfill of an earlier day's `disabled_tests`, once a later day's list is published.

The day's lake table is what the HUD's metrics page counts for that day: it must keep saying what
CI read that day, not take the DISABLED issues open now (live) or the list published now (dry run),
and the files CI reads stay the later day's. Run through Dagster as in test_disabled_issues.py: a
lake of hand-made CI history, the real flaky verdict, and a real HTTP server on 127.0.0.1 playing
GitHub's issues and search API.
"""

import datetime as dt
import time

import dagster as dg
import pytest
from fake_github_issues import FakeIssueTracker
from test_disabled_issues import TEST_A, TEST_B, World, built, config, github, metadata, run  # noqa: F401 (fixtures)
from test_flaky import LINUX, History
from test_hud_outage import DOWN, KINDS, check

from resources.github import GitHubResource
from resources.lake import Lake
from resources.storage import Store
from torchci_assets.derived.flakiness.assets import READ_AT, last_read
from torchci_assets.derived.flakiness.flaky import build_flaky_tests
from torchci_assets.derived.flakiness.lists import DISABLED_TESTS_DAY, DISABLED_TESTS_PATH, REENABLED_TESTS_PATH

HUMAN = "test_human (__main__.TestZ)"
# What CI reads, and the day it is for: a past day must leave all three as they are.
PUBLISHED = (DISABLED_TESTS_PATH, REENABLED_TESTS_PATH, DISABLED_TESTS_DAY)


def next_day(day: str, n: int = 1) -> str:
    return (dt.date.fromisoformat(day) + dt.timedelta(days=n)).isoformat()


def table(world, day: str) -> list[dict]:
    """The day's `disabled_tests` lake table, as the HUD's metrics read it."""
    return world.lake.read_files(world.lake.files("disabled_tests", [day])).to_pylist()


def disabled(world, day: str) -> set[str]:
    return {r["test"] for r in table(world, day) if r["status"] == "disabled"}


def files(world) -> dict[str, bytes]:
    store = Store(world.outputs_uri)
    return {p: store.read_bytes(p) for p in PUBLISHED}


@pytest.fixture
def world(built, tmp_path):
    return World(built, tmp_path)


def live_days(httpserver, world, instance=None) -> FakeIssueTracker:
    """The day's live run files test_a's and test_b's issues; then a maintainer files one for
    test_human, which the run two days later publishes."""
    fake = FakeIssueTracker(httpserver)
    fake.permissions["a-human"] = "write"
    assert run(world, github(httpserver), instance).success
    fake.add(f"DISABLED {HUMAN}", "Platforms: mac", age=dt.timedelta(minutes=1))
    assert run(world, github(httpserver), instance, day=next_day(world.day, 2)).success
    assert set(world.published()) == {TEST_A, TEST_B, HUMAN}
    return fake


def test_a_live_rerun_of_a_past_day_keeps_its_table_and_says_what_the_issues_say_now(httpserver, world):
    live_days(httpserver, world)
    before, published = table(world, world.day), files(world)
    assert {r["test"] for r in before} == {TEST_A, TEST_B}

    result = run(world, github(httpserver))

    assert result.success
    assert table(world, world.day) == before, "the past day took the issues open now"
    assert files(world) == published
    meta = metadata(result, "disabled_tests")
    assert meta["published"] is False and meta["disabled"] == 2 and meta["newly_disabled"] == 2
    assert meta["source"] == f"{world.day}'s table as written before"
    assert meta["past_day"] == (f"kept: a later day ({next_day(world.day, 2)}) is published; the table holds the "
                            f"2 test(s) disabled on {world.day}; the open issues now say 3")


def test_a_live_backfill_of_a_day_never_run_carries_over_the_list_ci_was_reading(httpserver, world):
    live_days(httpserver, world)
    published, never_run = files(world), next_day(world.day)

    result = run(world, github(httpserver), day=never_run)

    assert result.success
    assert disabled(world, never_run) == {TEST_A, TEST_B}, "the never-run day took the issues open now"
    assert {r["id"]: r["url"] for r in table(world, never_run)} == {r["id"]: r["url"] for r in table(world, world.day)}
    assert files(world) == published
    meta = metadata(result, "disabled_tests")
    assert meta["past_day"] == (
        f"carried over: no list was published for {never_run}; the table holds the 2 test(s) of {world.day}'s, "
        "which CI went on reading; the open issues now say 3")
    assert meta["source"] == f"{world.day}'s table, carried over" and meta["newly_disabled"] == 0


def test_a_backfill_of_a_day_never_run_while_github_fails_carries_over_the_list_too(httpserver, world):
    """The HUD counts no disabled test for a day without a table: a failed read gets the list CI
    was reading all the same, and the check fails as for any day."""
    fake = live_days(httpserver, world)
    published, never_run = files(world), next_day(world.day)
    for kind in KINDS:
        fake.fail(kind, *DOWN)

    result = run(world, github(httpserver), day=never_run)

    assert result.success and not check(result, "disabled_tests").passed
    assert disabled(world, never_run) == {TEST_A, TEST_B}
    assert files(world) == published
    assert metadata(result, "disabled_tests")["past_day"].endswith("the open issues could not be read now")


def test_a_past_days_run_leaves_when_the_published_lists_were_read(httpserver, world, instance):
    """The HUD says how old the list CI goes on with is from `read_from_github_at`, carried over
    the runs that did not read it: a past day's run reads the issues but publishes nothing."""
    live_days(httpserver, world, instance)
    later = metadata(run(world, github(httpserver), instance, day=next_day(world.day, 2)), "disabled_tests")[READ_AT]
    time.sleep(1.1)  # the time is kept to the second

    past = metadata(run(world, github(httpserver), instance), "disabled_tests")

    assert past[READ_AT] == later

    assert last_read({k: dg.MetadataValue.text(v) if isinstance(v, str) else dg.MetadataValue.bool(v)
                      for k, v in {"dry_run": False, "not_published": "a later day"}.items()}, 0.0) is None, \
        "a past day's run written before read_from_github_at was kept read as the lists' last read"


# ---- dry run: the list is the verdict's ------------------------------------------------------------


@pytest.fixture(scope="module")
def days_built(tmp_path_factory):
    """Five days of hourly main commits on linux: test_a flakes on the first day, test_b on the
    fourth and fifth; the verdict built for every day."""
    h = History(["test_a", "test_b", "test_ok"])
    flakes = {2: "test_a", 6: "test_a", 10: "test_a", 90: "test_b", 95: "test_b", 100: "test_b"}
    for i in range(110):
        h.run(i, LINUX, {flakes[i]: "flake"} if i in flakes else None)
    root = tmp_path_factory.mktemp("days")
    lake = Lake.at(str(root / "lake"))
    days = h.build(lake)
    for day in days:
        build_flaky_tests(lake, day)
    return root, days[0], h


@pytest.fixture
def days(days_built, tmp_path):
    return World(days_built, tmp_path)


def dry(httpserver, world, day: str, instance=None):
    result = run(world, GitHubResource(api_url=httpserver.url_for("")), instance, day=day)
    assert result.success and metadata(result, "disabled_tests")["dry_run"] is True
    return result


def test_a_dry_rerun_of_a_day_older_than_the_kept_baselines_gives_the_table_it_first_gave(httpserver, days):
    first = days.day
    later = [next_day(first, n) for n in range(1, 5)]
    dry(httpserver, days, first)
    before = table(days, first)
    assert {r["test"] for r in before} == {TEST_A}
    for day in later:
        dry(httpserver, days, day)
    assert set(days.published()) == {TEST_A, TEST_B}
    published = files(days)

    result = dry(httpserver, days, first)

    assert table(days, first) == before, "the past day was decided against the list published now"
    assert files(days) == published
    assert metadata(result, "disabled_tests")["past_day"] == (
        f"kept: a later day ({later[-1]}) is published; the table holds the 1 test(s) disabled on {first}; "
        "the verdict now says 1")


def test_a_dry_backfill_of_a_day_never_run_decides_as_the_day_would_have(httpserver, days_built, days, tmp_path):
    """Decided from that day's verdict against the table of the day before it, not against the
    list published now: the table a run of every day in turn gives it."""
    first, never_run, last = days.day, next_day(days.day, 2), next_day(days.day, 4)
    dry(httpserver, days, first)
    dry(httpserver, days, last)
    published = files(days)

    meta = metadata(dry(httpserver, days, never_run), "disabled_tests")

    assert files(days) == published
    assert meta["source"] == f"flaky verdict (dry run), against {first}'s table"
    in_turn = World(days_built, tmp_path / "in-turn")
    for n in range(3):
        dry(httpserver, in_turn, next_day(first, n))
    assert disabled(in_turn, never_run) == {TEST_A}
    assert table(days, never_run) == table(in_turn, never_run), "the backfilled day took a later day's list"
