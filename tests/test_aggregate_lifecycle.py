"""The life of an aggregate DISABLED issue after its filing, against the fake GitHub API: a closed
aggregate is never reopened for one of its tests, a listed test flaking somewhere new has its
line widened, and its tests are re-enabled or retired one by one, the aggregate closed when none
is left, as PyTorch's flaky bot does."""

import datetime as dt
import re
import shutil
from pathlib import Path

import pytest
from fake_github_issues import FakeIssueTracker, json_response
from test_reenable import BOT, DAY, REPO, clean, github, lake_with, rerun
from test_retired_tests import ledger
from test_retired_tests import lake as retired_lake  # noqa: F401 - a fixture: test_gone deleted from test_a.py

from resources.github import GitHubResource
from resources.lake import Lake
from resources.storage import Store
from torchci_assets.config import DisabledIssuesConfig
from torchci_assets.derived.flakiness.aggregates import AGGREGATE_LABEL, aggregate_body, aggregate_title
from torchci_assets.derived.flakiness.issue_text import MARKER, Evidence, condense
from torchci_assets.derived.flakiness.issues import (IssueTracker, Wanted, file_disabled_issues, ledger_row, record,
                                                     reenabled_here)
from torchci_assets.derived.flakiness.lifecycle import run_lifecycle
from torchci_assets.derived.flakiness.lists import DISABLED_TESTS_PATH, dumps, publish_disabled_from_issues

FILE = "test_burst.py"
BURST = [f"test_op_{i:02d} (__main__.TestBurst)" for i in range(6)]
T = BURST[0]
# BURST as PyTorch's bot lists a test whose class is not in `__main__` (and people copy it)
DOTTED = [t.replace("__main__.", "distributed.test_burst.") for t in BURST]
LABELS = ["skipped", "module: flaky-tests"]


def now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def aggregate(fake, lines: dict[str, list[str]], state="open", age=dt.timedelta(days=3), user=BOT) -> dict:
    body = aggregate_body(FILE, lines, f"Platforms: linux\n{MARKER}")
    return fake.add(aggregate_title(FILE), body, state=state, user=user, age=age, labels=["skipped", AGGREGATE_LABEL])


def file(httpserver, lake, wanted, ev, run_id="run-0001"):
    return file_disabled_issues(IssueTracker(github(httpserver), REPO), lake, DAY, wanted, ev, LABELS, 10, run_id,
                                only_trusted=True)


def life(httpserver, lake, tmp_path, log=None, gh=None, day=DAY):
    return run_lifecycle(gh or github(httpserver), lake, Store(str(tmp_path / "outputs")), day, "run-0001", REPO,
                         DisabledIssuesConfig(enabled=True), "test config",
                         log=log.append if log is not None else lambda s: None)


def disabled(fake) -> dict:
    return condense(i for i in fake.issues.values() if i["state"] == "open")


# ---- a closed aggregate is not a test's issue -------------------------------------------------------


def filed_and_closed(httpserver, fake, lake) -> dict:
    """This project files the aggregate of BURST; two days ago a maintainer closed it."""
    first = file(httpserver, lake, [Wanted(t, ["linux"], ["linux"], 3) for t in BURST],
                 {t: Evidence(t, FILE) for t in BURST})
    (agg,) = fake.issues.values()
    assert first.count("created") == len(BURST) and agg["title"] == aggregate_title(FILE)
    fake.close(agg["number"])
    fake.age(agg["number"], dt.timedelta(days=2))
    return agg


def test_one_test_flaking_after_its_aggregate_closed_gets_an_issue_of_its_own(httpserver, tmp_path):
    fake = FakeIssueTracker(httpserver)
    lake = Lake.at(str(tmp_path / "lake"))
    agg = filed_and_closed(httpserver, fake, lake)
    flaked = now() - dt.timedelta(hours=2)  # after the close
    report = file(httpserver, lake, [Wanted(T, ["linux"], ["linux"], 3)],
                  {T: Evidence(T, FILE, last_main_flake_at=flaked)})
    # PyTorch's bot matches an aggregate only while it is open: the one test gets an issue, the
    # five others stay re-enabled
    assert fake.issues[agg["number"]]["state"] == "closed"
    assert sorted(disabled(fake)) == [T]
    (row,) = report.rows
    assert row["action"] == "created" and f"aggregate #{agg['number']}" in row["detail"]
    assert fake.titled(f"DISABLED {T}", "open")


def test_a_test_of_a_closed_aggregate_without_a_main_flake_since_stays_re_enabled(httpserver, tmp_path):
    fake = FakeIssueTracker(httpserver)
    lake = Lake.at(str(tmp_path / "lake"))
    agg = filed_and_closed(httpserver, fake, lake)
    flaked = now() - dt.timedelta(days=3)  # the verdict's window still holds the flakes before the close
    report = file(httpserver, lake, [Wanted(T, ["linux"], ["linux"], 3)],
                  {T: Evidence(T, FILE, last_main_flake_at=flaked)})
    assert [(r["action"], r["issue_number"]) for r in report.rows] == [("found", agg["number"])]
    assert "left closed" in report.rows[0]["detail"]
    assert len(fake.issues) == 1 and disabled(fake) == {}


def test_all_tests_of_a_closed_aggregate_flaking_again_get_a_new_aggregate(httpserver, tmp_path):
    fake = FakeIssueTracker(httpserver)
    lake = Lake.at(str(tmp_path / "lake"))
    agg = filed_and_closed(httpserver, fake, lake)
    flaked = now() - dt.timedelta(hours=2)
    report = file(httpserver, lake, [Wanted(t, ["linux"], ["linux"], 3) for t in BURST],
                  {t: Evidence(t, FILE, last_main_flake_at=flaked) for t in BURST})
    assert fake.issues[agg["number"]]["state"] == "closed"
    (new,) = fake.titled(aggregate_title(FILE), "open")
    assert new["number"] != agg["number"] and report.count("created") == len(BURST)
    assert sorted(disabled(fake)) == BURST and len(fake.issues) == 2


# ---- a listed test flaking somewhere new ------------------------------------------------------------


def test_a_listed_test_flaking_on_a_new_platform_has_its_line_widened_once(httpserver, tmp_path):
    fake = FakeIssueTracker(httpserver)
    agg = aggregate(fake, {t: ["linux"] for t in BURST})
    lake = Lake.at(str(tmp_path / "lake"))
    flaked = now() - dt.timedelta(hours=2)  # after the aggregate was filed
    ev = {T: Evidence(T, FILE, last_main_flake_at=flaked)}
    report = file(httpserver, lake, [Wanted(T, ["linux", "win"], ["linux", "win"], 3)], ev)
    assert [(r["action"], r["detail"]) for r in report.rows] == [
        ("updated", f"added platforms: win (its line of aggregate #{agg['number']})")]
    assert report.rows[0]["platforms"] == ["linux", "win"]
    now_disabled = condense([fake.issues[agg["number"]]])
    assert now_disabled[T][2] == ["linux", "win"] and all(now_disabled[t][2] == ["linux"] for t in BURST[1:])
    (comment,) = fake.comments[agg["number"]]
    assert f"`{T}` flaked on win as well" in comment
    again = file(httpserver, lake, [Wanted(T, ["linux", "win"], ["linux", "win"], 3)], ev, run_id="run-0002")
    assert again.count("found") == 1 and len(fake.comments[agg["number"]]) == 1


def test_a_line_naming_the_tests_module_in_its_suite_is_the_tests_line_widened_as_written(httpserver, tmp_path):
    """PyTorch's runner matches a disabled test by its method and class name alone, and PyTorch's
    bot lists a test whose class is not in `__main__` with its dotted suite: such a line is the
    test's, widened where it stands (its name as written, in the list and in the comment that
    says why, so a reader finds the line it names), and no issue is filed beside it."""
    fake = FakeIssueTracker(httpserver)
    written = {t: ["linux"] for t in DOTTED}
    agg = aggregate(fake, written)
    lake = Lake.at(str(tmp_path / "lake"))
    ev = {T: Evidence(T, FILE, last_main_flake_at=now() - dt.timedelta(hours=2))}  # after its listing
    report = file(httpserver, lake, [Wanted(T, ["linux", "win"], ["linux", "win"], 3)], ev)
    assert [(r["action"], r["issue_number"], r["platforms"]) for r in report.rows] == [
        ("updated", agg["number"], ["linux", "win"])]
    assert len(fake.issues) == 1
    assert condense([fake.issues[agg["number"]]]) == {
        **condense([agg]), DOTTED[0]: [str(agg["number"]), agg["html_url"], ["linux", "win"]]}
    (comment,) = fake.comments[agg["number"]]
    assert f"`{DOTTED[0]}` flaked on win as well" in comment and "__main__" not in comment


def test_a_listed_test_is_not_widened_on_flakes_from_before_its_listing_nor_where_covered(httpserver, tmp_path):
    fake = FakeIssueTracker(httpserver)
    agg = aggregate(fake, {**{t: ["linux"] for t in BURST}, T: ["windows"]}, age=dt.timedelta(days=3))
    lake = Lake.at(str(tmp_path / "lake"))
    before = now() - dt.timedelta(days=4)
    other = BURST[1]
    report = file(httpserver, lake,
                  [Wanted(T, ["win"], ["win"], 3), Wanted(other, ["linux", "mac"], ["linux", "mac"], 3)],
                  {T: Evidence(T, FILE, last_main_flake_at=now()),
                   other: Evidence(other, FILE, last_main_flake_at=before)})
    # `windows` is `win` to PyTorch's runner; mac flaked only before the test was listed
    assert [r["action"] for r in report.rows] == ["found", "found"]
    assert agg["number"] not in fake.comments and fake.issues[agg["number"]]["body"] == agg["body"]


def listed_earlier(fake, lake, lines: dict[str, list[str]], row_platforms: list[str], detail: str) -> dict:
    """An aggregate filed three days ago listing `lines`, and the ledger's row of T's listing then,
    recording `row_platforms` with `detail`."""
    agg = fake.add(aggregate_title(FILE), aggregate_body(FILE, lines, f"Platforms: \n{MARKER}"), user=BOT,
                   age=dt.timedelta(days=3), labels=["skipped", AGGREGATE_LABEL])
    row = ledger_row(T, "updated", agg, REPO, "run-0000", detail.format(n=agg["number"]))
    record(lake, DAY, [{**row, "platforms": row_platforms, "at": now() - dt.timedelta(days=3)}], "earlier")
    return agg


def test_a_listing_row_of_an_older_version_is_not_taken_for_the_line_a_human_narrowed(httpserver, tmp_path):
    """Versions before the lines were read one by one recorded an aggregate's test with the platforms
    of the aggregate's body (its example's `Platforms:` line, here everywhere), not of the test's line.
    Taken for what the ledger saw of the line, that `[]` made the line look narrowed by hand, and the
    test's flake on win after its listing was never added: CI kept running it on Windows."""
    fake = FakeIssueTracker(httpserver)
    lake = Lake.at(str(tmp_path / "lake"))
    agg = listed_earlier(fake, lake, {t: ["linux"] for t in BURST}, [], "added to aggregate #{n}")
    ev = {T: Evidence(T, FILE, last_main_flake_at=now() - dt.timedelta(hours=2))}  # after its listing
    report = file(httpserver, lake, [Wanted(T, ["linux", "win"], ["linux", "win"], 3)], ev)
    assert [(r["action"], r["detail"]) for r in report.rows] == [
        ("updated", f"added platforms: win (its line of aggregate #{agg['number']})")]
    assert condense([fake.issues[agg["number"]]])[T][2] == ["linux", "win"]


def test_a_line_a_human_narrowed_after_its_listing_is_not_widened_on_the_flakes_before(httpserver, tmp_path):
    """This version's listing row records the test's line: a maintainer taking win off it is seen,
    and the flakes before the edit do not add win back."""
    fake = FakeIssueTracker(httpserver)
    lake = Lake.at(str(tmp_path / "lake"))
    agg = listed_earlier(fake, lake, {**{t: ["linux"] for t in BURST}, T: ["linux", "win"]}, ["linux", "win"],
                         "added to aggregate #{n}; its line: linux, win")
    fake._patch(fake.issues[agg["number"]], {"body": agg["body"].replace(f"{T}: linux, win", f"{T}: linux")})
    ev = {T: Evidence(T, FILE, last_main_flake_at=now() - dt.timedelta(hours=2))}  # before the edit
    report = file(httpserver, lake, [Wanted(T, ["linux", "win"], ["linux", "win"], 3)], ev)
    assert [r["action"] for r in report.rows] == ["found"] and "narrowed by hand" in report.rows[0]["detail"]
    assert condense([fake.issues[agg["number"]]])[T][2] == ["linux"] and agg["number"] not in fake.comments


# ---- re-enabling and retiring the tests of an aggregate ------------------------------------------------


def test_clean_tests_are_dropped_from_the_list_and_the_rest_stay_disabled(httpserver, tmp_path):
    fake = FakeIssueTracker(httpserver)
    old = dt.timedelta(days=20)
    agg = aggregate(fake, {t: ["linux"] for t in BURST}, age=old)
    still = BURST[3]
    lake = lake_with(tmp_path, [r for t in BURST[:3] for r in clean(t, "linux")]
                     + clean(still, "linux", (1, 2)) + [rerun(still, "linux", 3, "failed")])
    result = life(httpserver, lake, tmp_path)
    assert fake.issues[agg["number"]]["state"] == "open"
    assert sorted(condense([fake.issues[agg["number"]]])) == BURST[3:]
    assert [(r["test"], r["action"]) for r in result.aggregates.rows] == [(t, "dropped") for t in BURST[:3]]
    (comment,) = fake.comments[agg["number"]]
    assert all(f"`{t}` is dropped from the list" in comment for t in BURST[:3]) and still not in comment
    assert "3 test(s) stay disabled" in comment
    assert life(httpserver, lake, tmp_path).aggregates.rows == [] and len(fake.comments[agg["number"]]) == 1


def test_an_aggregate_whose_tests_are_all_clean_is_closed_with_one_comment(httpserver, tmp_path):
    fake = FakeIssueTracker(httpserver)
    old = dt.timedelta(days=20)
    agg = aggregate(fake, {t: ["linux"] for t in BURST}, age=old)
    single = fake.add("DISABLED test_single (__main__.TestBurst)", "Platforms: linux", age=old, user=BOT)
    lake = lake_with(tmp_path, [r for t in [*BURST, "test_single (__main__.TestBurst)"] for r in clean(t, "linux")])
    result = life(httpserver, lake, tmp_path)
    assert fake.issues[single["number"]]["state"] == "closed"
    assert fake.issues[agg["number"]]["state"] == "closed" and result.aggregates.closed == [agg["number"]]
    (comment,) = fake.comments[agg["number"]]
    assert "closing this issue" in comment
    assert {r["issue_state"] for r in result.aggregates.rows} == {"closed"}


def test_a_line_clean_on_one_platform_is_narrowed_to_the_others(httpserver, tmp_path):
    fake = FakeIssueTracker(httpserver)
    agg = aggregate(fake, {t: ["linux", "win"] for t in BURST}, age=dt.timedelta(days=20))
    lake = lake_with(tmp_path, clean(T, "linux"))
    result = life(httpserver, lake, tmp_path)
    lines = condense([fake.issues[agg["number"]]])
    assert lines[T][2] == ["win"] and all(lines[t][2] == ["linux", "win"] for t in BURST[1:])
    assert [(r["test"], r["action"], r["platforms"]) for r in result.aggregates.rows] == [(T, "narrowed", ["win"])]
    assert "stays disabled on win" in fake.comments[agg["number"]][0]


def test_lines_naming_the_tests_module_in_their_suite_are_dropped_and_narrowed_as_written(httpserver, tmp_path):
    """The reruns report a test by its JUnit classname, which the runner, and this project, match
    to a line by class name alone: a dotted line is judged on its test's reruns, dropped or
    narrowed, and every other line keeps its text."""
    fake = FakeIssueTracker(httpserver)
    agg = aggregate(fake, {t: ["linux", "win"] for t in DOTTED}, age=dt.timedelta(days=20))
    lake = lake_with(tmp_path, clean(T, "linux") + clean(T, "win") + clean(BURST[1], "linux"))
    result = life(httpserver, lake, tmp_path)
    assert [(r["test"], r["action"], r["platforms"]) for r in result.aggregates.rows] == [
        (T, "dropped", []), (BURST[1], "narrowed", ["win"])]
    body = fake.issues[agg["number"]]["body"]
    assert f"{DOTTED[0]}:" not in body and f"{DOTTED[1]}: win\n" in body
    assert all(f"{t}: linux, win\n" in body for t in DOTTED[2:]) and "__main__" not in body
    assert fake.issues[agg["number"]]["state"] == "open"


@pytest.mark.parametrize("days_later", [0, 1])
def test_a_crash_between_the_comment_and_the_edit_comments_once(httpserver, tmp_path, days_later):
    """The run after the crash, that day's or a later day's, edits without a second comment."""
    fake = FakeIssueTracker(httpserver)
    agg = aggregate(fake, {t: ["linux"] for t in BURST}, age=dt.timedelta(days=20))
    lake = lake_with(tmp_path, clean(T, "linux"))
    fake.fail("update", json_response(502, {"message": "Bad Gateway"}))
    no_retry = GitHubResource(api_url=httpserver.url_for(""), token="t0ken", search_interval_s=0.0,
                              write_interval_s=0.0, backoff_base_s=0.0, max_retries=0)
    first = life(httpserver, lake, tmp_path, gh=no_retry)
    assert T in first.aggregates.failed and T in condense([fake.issues[agg["number"]]])
    assert len(fake.comments[agg["number"]]) == 1
    later = (dt.date.fromisoformat(DAY) + dt.timedelta(days=days_later)).isoformat()
    second = life(httpserver, lake, tmp_path, gh=no_retry, day=later)
    assert [(r["test"], r["action"]) for r in second.aggregates.rows] == [(T, "dropped")]
    assert T not in condense([fake.issues[agg["number"]]]) and len(fake.comments[agg["number"]]) == 1


def test_a_test_listed_lately_counts_its_reruns_from_its_listing(httpserver, tmp_path):
    fake = FakeIssueTracker(httpserver)
    agg = aggregate(fake, {t: ["linux"] for t in BURST}, age=dt.timedelta(days=20))
    lake = lake_with(tmp_path, clean(T, "linux") + clean(BURST[1], "linux"))
    added = ledger_row(T, "updated", agg, REPO, "run-0000", f"added to aggregate #{agg['number']}")
    added["at"] = dt.datetime.fromisoformat(f"{DAY}T06:00:00+00:00") - dt.timedelta(days=3, hours=12)
    record(lake, DAY, [added], "earlier")
    result = life(httpserver, lake, tmp_path)
    assert [r["test"] for r in result.aggregates.rows] == [BURST[1]]  # T: three clean days since, not seven


def test_a_strangers_aggregate_is_left_alone(httpserver, tmp_path):
    fake = FakeIssueTracker(httpserver)
    agg = aggregate(fake, {t: ["linux"] for t in BURST}, age=dt.timedelta(days=20), user="a-stranger")
    lake = lake_with(tmp_path, [r for t in BURST for r in clean(t, "linux")])
    logs = []
    result = life(httpserver, lake, tmp_path, log=logs)
    assert result.aggregates.rows == [] and agg["number"] not in fake.comments
    assert fake.issues[agg["number"]]["body"] == agg["body"] and fake.issues[agg["number"]]["state"] == "open"
    assert f"#{agg['number']} ({T}) is left alone: its author a-stranger may not disable tests" in logs


@pytest.mark.parametrize("suite", ["__main__.TestA", "test_a.TestA"])
def test_a_deleted_test_is_dropped_from_its_aggregate(httpserver, retired_lake, tmp_path, suite):  # noqa: F811
    """Its line as written: under `__main__`, or under a dotted suite (the runner's class name alone)."""
    fake = FakeIssueTracker(httpserver)
    gone, alive = f"test_gone ({suite})", f"test_alive ({suite})"
    agg = fake.add(aggregate_title("test_a.py"), aggregate_body("test_a.py", {gone: ["linux"], alive: []}, "x"),
                   user=BOT, age=dt.timedelta(days=20))
    result = life(httpserver, retired_lake, tmp_path)
    assert [(r["test"], r["action"]) for r in result.aggregates.rows] == [("test_gone (__main__.TestA)", "dropped")]
    assert "deleted or renamed" in result.aggregates.rows[0]["detail"]
    assert sorted(condense([fake.issues[agg["number"]]])) == [alive]
    assert result.retirement.rows == [] and fake.issues[agg["number"]]["state"] == "open"


def test_closing_a_large_aggregate_is_not_refused_as_a_mass_reenabling(httpserver, tmp_path):
    """An aggregate closed on rerun evidence re-enables all its tests at once: the published list
    loses them in one go, which the list refuses from a search that lost most issues, not from
    this project's own closes."""
    fake = FakeIssueTracker(httpserver)
    many = [f"test_op_{i:02d} (__main__.TestBurst)" for i in range(12)]
    agg = aggregate(fake, {t: ["linux"] for t in many}, age=dt.timedelta(days=20))
    lake = lake_with(tmp_path, [r for t in many for r in clean(t, "linux")])
    outputs = Store(str(tmp_path / "outputs"))
    yesterday = (dt.date.fromisoformat(DAY) - dt.timedelta(days=1)).isoformat()
    publish_disabled_from_issues(lake, outputs, yesterday, [agg])  # the list as it stood: the twelve tests
    assert life(httpserver, lake, tmp_path).aggregates.closed == [agg["number"]]
    with pytest.raises(ValueError, match="refusing"):  # a human's close, or an outage: refused as before
        publish_disabled_from_issues(lake, outputs, DAY, [])
    decision = publish_disabled_from_issues(lake, outputs, DAY, [], reenabled_here=reenabled_here(lake, DAY))
    assert decision.disabled == {} and sorted(decision.reenabled) == many


# ---- the dry run plans what a live run does to an aggregate's lines --------------------------------------


def dry_then_live(httpserver, fake, lake_dir: Path, tmp_path) -> tuple[list[tuple], list[tuple], list[str]]:
    """The lifecycle's dry run, on the list PyTorch builds from the open issues, then its live run,
    each on its own copy of the lake at `lake_dir`: per test, what the dry run plans for its
    aggregate line and what the live run did (action, aggregate, the aggregate's state after),
    and the dry run's log. The dry run sends GitHub nothing."""
    outputs = Store(str(tmp_path / "dry" / "outputs"))
    outputs.write_bytes(DISABLED_TESTS_PATH, dumps(disabled(fake)))
    lakes = {mode: Lake.at(str(shutil.copytree(lake_dir, tmp_path / mode / "lake"))) for mode in ("dry", "live")}
    logs: list[str] = []
    run_lifecycle(GitHubResource(api_url=httpserver.url_for("")), lakes["dry"], outputs, DAY, "run-dry", REPO,
                  DisabledIssuesConfig(enabled=True), "test config", log=logs.append)
    assert fake.requests == []
    live = life(httpserver, lakes["live"], tmp_path / "live")
    done = sorted((r["test"], r["action"], r["issue_number"], r["issue_state"]) for r in live.aggregates.rows)
    planned = []
    for r in ledger(lakes["dry"]):
        what = re.match(r"would (drop|narrow) .* the list of aggregate #(\d+) ", r["detail"])
        planned.append((r["test"], {"drop": "dropped", "narrow": "narrowed"}[what.group(1)] if what else r["detail"],
                        int(what.group(2)) if what else None, "closed" if "would close it" in r["detail"] else "open"))
    return sorted(planned), done, logs


@pytest.mark.parametrize("fixed", [3, len(BURST)])
def test_the_dry_run_plans_an_aggregates_clean_lines_dropped_and_it_closed_only_when_empty(
        httpserver, tmp_path, fixed):
    """The published list names each test of an aggregate with the aggregate's number. A live run
    drops the lines of its clean tests, comments nothing on a still-failing one, and closes the
    aggregate only when no line is left; the dry run must plan just that, not a close of the
    issue of each clean test and a comment on the failing one's."""
    fake = FakeIssueTracker(httpserver)
    agg = aggregate(fake, {t: ["linux"] for t in BURST}, age=dt.timedelta(days=20))
    lake_with(tmp_path / "built", [r for t in BURST[:fixed] for r in clean(t, "linux")]
              + [rerun(t, "linux", 3, "failed") for t in BURST[fixed:]])
    planned, done, logs = dry_then_live(httpserver, fake, tmp_path / "built" / "lake", tmp_path)
    state = "closed" if fixed == len(BURST) else "open"
    assert done == [(t, "dropped", agg["number"], state) for t in BURST[:fixed]]
    assert fake.issues[agg["number"]]["state"] == state
    assert planned == done
    assert len([m for m in logs if m.startswith("DRY RUN: would")]) == fixed  # a line for each row


def test_the_dry_run_plans_a_deleted_tests_line_dropped_from_its_aggregate(httpserver, retired_lake, tmp_path):  # noqa: F811
    """A live run drops the deleted test's line and keeps the aggregate open for the other; the dry
    run must plan that, not a close of the aggregate as the deleted test's own issue."""
    gone, alive = "test_gone (__main__.TestA)", "test_alive (__main__.TestA)"
    fake = FakeIssueTracker(httpserver)
    agg = fake.add(aggregate_title("test_a.py"), aggregate_body("test_a.py", {gone: ["linux"], alive: []}, "x"),
                   user=BOT, age=dt.timedelta(days=20))
    planned, done, _logs = dry_then_live(httpserver, fake, tmp_path / "lake", tmp_path)
    assert done == [(gone, "dropped", agg["number"], "open")]
    assert planned == done


def test_the_dry_run_plans_a_line_clean_on_one_platform_narrowed_in_its_aggregate(httpserver, tmp_path):
    fake = FakeIssueTracker(httpserver)
    agg = aggregate(fake, {t: ["linux", "win"] for t in BURST}, age=dt.timedelta(days=20))
    lake_with(tmp_path / "built", clean(T, "linux"))
    planned, done, logs = dry_then_live(httpserver, fake, tmp_path / "built" / "lake", tmp_path)
    assert done == [(T, "narrowed", agg["number"], "open")] and planned == done
    (line,) = [m for m in logs if m.startswith("DRY RUN: would")]
    assert line.startswith(f"DRY RUN: would narrow '{T}' to win in the list of aggregate #{agg['number']} "
                           f"({agg['html_url']}), its issue on the published list: every rerun")
