"""Disabled tests re-enabled on the evidence of PyTorch's rerun_disabled_tests jobs, against the
fake GitHub API: closed when clean everywhere, narrowed where clean, evidence when still red."""

import datetime as dt
import json

import pyarrow as pa
import pytest
from fake_github_issues import FakeIssueTracker
from midnight import utc_today

from resources.github import GitHubResource
from resources.lake import Lake, connect
from resources.storage import Store
from torchci_assets.config import DisabledIssuesConfig
from torchci_assets.derived.flakiness.issue_text import Evidence
from torchci_assets.derived.flakiness.issues import (LEDGER_TABLE, IssueTracker, Wanted, file_disabled_issues,
                                                     ledger_row, record)
from torchci_assets.derived.flakiness.lifecycle import run_lifecycle
from torchci_assets.derived.flakiness.lists import DISABLED_TESTS_PATH, dumps
from torchci_assets.derived.flakiness.reenable import (MIN_DAYS, MIN_JOBS, REENABLED_MARKER, Decision, PlatformRuns,
                                                      act, decide, rerun_evidence)

# The day the tests judge, 12 days before the real clock: the fake GitHub dates issues and their
# events by the real clock (issues filed "20 days ago"), and those dates must fall where the tests
# put them against this day's reruns on whatever day the suite runs.
DAY = (utc_today(dt.timedelta(0)) - dt.timedelta(days=12)).isoformat()  # days of slack: no wait at midnight
REPO = "pytorch/pytorch"
FIXED, HALF = "test_fixed (__main__.TestR)", "test_half (__main__.TestR)"
STILL, LATE = "test_still (__main__.TestR)", "test_late (__main__.TestR)"
JOB = "linux-jammy-py3.10-gcc11 / test (default, 1, 1, linux.2xlarge, rerun_disabled_tests)"
BOT = "pytorch-bot[bot]"  # PyTorch's bot, which files DISABLED issues
_job_ids = iter(range(1_000_000, 2_000_000))


def at(days_ago: int) -> dt.datetime:
    return dt.datetime.fromisoformat(f"{DAY}T06:00:00+00:00") - dt.timedelta(days=days_ago)


def rerun(test: str, platform: str, days_ago: int, status="passed", message=None, infra=False,
          job_name=JOB) -> dict:
    name, cls = test.split(" (__main__.")
    return {"name": name, "classname": f"test_r.{cls[:-1]}", "platform": platform, "job_id": next(_job_ids),
            "job_completed_at": at(days_ago), "infra_suspect": infra, "status": status, "message": message,
            "job_name": job_name}


def flaky(red, green) -> str:
    return json.dumps({"flaky": True, "num_red": red, "num_green": green, "max_num_retries": 50})


def lake_with(tmp_path, rows: list[dict]) -> Lake:
    lake = Lake.at(str(tmp_path / "lake"))
    by_day: dict[str, list[dict]] = {}
    for r in rows:
        by_day.setdefault(r["job_completed_at"].date().isoformat(), []).append(r)
    for day, day_rows in by_day.items():
        lake.write("test_results", day, pa.Table.from_pylist(day_rows))
    return lake


def clean(test, platform, days=tuple(range(1, MIN_DAYS + 1))) -> list[dict]:
    return [rerun(test, platform, d) for d in days]


def github(httpserver) -> GitHubResource:
    return GitHubResource(api_url=httpserver.url_for(""), token="t0ken", search_interval_s=0.0,
                          write_interval_s=0.0, backoff_base_s=0.0)


def lifecycle(httpserver, lake, tmp_path, gh=None, log=None):
    return run_lifecycle(gh or github(httpserver), lake, Store(str(tmp_path / "outputs")), DAY, "run-0001", REPO,
                         DisabledIssuesConfig(enabled=True), "test config",
                         log=log.append if log is not None else lambda s: None).reenabling


def test_clean_everywhere_closes_clean_somewhere_narrows_red_comments_once_a_day(httpserver, tmp_path):
    fake = FakeIssueTracker(httpserver)
    old = dt.timedelta(days=20)
    fixed = fake.add(f"DISABLED {FIXED}", "Platforms: linux, win\n\nflaky", age=old, user=BOT)
    half = fake.add(f"DISABLED {HALF}", "Platforms: linux, win\n\nflaky", age=old, user=BOT)
    still = fake.add(f"DISABLED {STILL}", "Platforms: linux", age=old, user=BOT)
    lake = lake_with(tmp_path, clean(FIXED, "linux") + clean(FIXED, "win") + clean(HALF, "linux")
                     + clean(HALF, "win", (2,)) + [rerun(HALF, "win", 4, "skipped", flaky(1, 49))]
                     + clean(STILL, "linux", (1, 2)) + [rerun(STILL, "linux", 3, "failed", "AssertionError")])
    result = lifecycle(httpserver, lake, tmp_path)
    assert sorted((d.test, d.action) for d in result.decisions) == [
        (FIXED, "close"), (HALF, "narrow"), (STILL, "evidence")]
    assert fake.issues[fixed["number"]]["state"] == "closed"
    assert fake.issues[fixed["number"]]["state_reason"] == "completed"
    assert REENABLED_MARKER in fake.comments[fixed["number"]][0]
    assert fake.issues[half["number"]]["state"] == "open"
    assert fake.issues[half["number"]]["body"].startswith("Platforms: win\n")  # linux re-enabled, win stays
    assert "| win | 2 | 2 | 50 | 1 |" in fake.comments[half["number"]][0]
    assert "Still flaky" in fake.comments[still["number"]][0]
    assert sorted(r["action"] for r in result.rows) == ["evidence", "narrowed", "reenabled"]

    again = lifecycle(httpserver, lake, tmp_path)  # now disabled on win only, where it still fails
    assert [(r["test"], r["action"]) for r in again.rows] == [(HALF, "evidence")]
    third = lifecycle(httpserver, lake, tmp_path)  # the same day: nothing new to say
    assert third.rows == [] and len(fake.comments[still["number"]]) == 1 and len(fake.comments[half["number"]]) == 2


def test_a_strangers_issues_are_neither_closed_nor_narrowed_nor_commented(httpserver, tmp_path):
    """Anyone can open a DISABLED issue: one whose author may not disable tests disables nothing
    (it is not in the published list), so its reruns are not this project's to act on."""
    fake = FakeIssueTracker(httpserver)
    old = dt.timedelta(days=20)
    theirs = [fake.add(f"DISABLED {t}", "Platforms: linux, win", age=old, user="a-stranger")
              for t in (FIXED, HALF, STILL)]
    ours = fake.add(f"DISABLED {LATE}", "Platforms: linux", age=old, user=BOT)
    lake = lake_with(tmp_path, clean(FIXED, "linux") + clean(FIXED, "win") + clean(HALF, "linux")
                     + [rerun(HALF, "win", 2, "failed")] + [rerun(STILL, "linux", 3, "failed")] + clean(LATE, "linux"))
    logs = []
    result = lifecycle(httpserver, lake, tmp_path, log=logs)
    assert [(d.test, d.action) for d in result.decisions] == [(LATE, "close")]
    assert fake.issues[ours["number"]]["state"] == "closed"
    for issue in theirs:
        now = fake.issues[issue["number"]]
        assert (now["state"], now["body"]) == ("open", "Platforms: linux, win") and issue["number"] not in fake.comments
    assert [m for m in logs if "left alone" in m] == [
        f"#{i['number']} ({t}) is left alone: its author a-stranger may not disable tests"
        for i, t in zip(theirs, (FIXED, HALF, STILL))]


def test_an_issue_naming_the_tests_module_in_its_suite_is_reenabled_on_the_tests_reruns(httpserver, tmp_path):
    """PyTorch's bot titles a test whose class is not in `__main__` with its dotted suite, and the
    runner disables it by class name alone: `test_fixed (test_r.TestR)` is the test the reruns
    report as `test_r.TestR`, so its clean reruns re-enable it like any other, and the comment
    names it as the title does."""
    fake = FakeIssueTracker(httpserver)
    dotted = fake.add("DISABLED test_fixed (test_r.TestR)", "Platforms: linux\n\nflaky", age=dt.timedelta(days=20),
                      user=BOT)
    result = lifecycle(httpserver, lake_with(tmp_path, clean(FIXED, "linux")), tmp_path)
    assert [(d.test, d.action) for d in result.decisions] == [(FIXED, "close")]
    assert fake.issues[dotted["number"]]["state"] == "closed"
    # the comment names the test as the issue's title does
    assert fake.comments[dotted["number"]][0].startswith("Re-enabling `test_fixed (test_r.TestR)`: every rerun")


def test_runs_before_the_issue_was_filed_and_greens_of_infra_jobs_do_not_count(httpserver, tmp_path):
    fake = FakeIssueTracker(httpserver)
    # filed two days ago
    late = fake.add(f"DISABLED {LATE}", "Platforms: linux", age=dt.timedelta(days=2), user=BOT)
    other = fake.add(f"DISABLED {FIXED}", "Platforms: linux", age=dt.timedelta(days=20), user=BOT)
    lake = lake_with(tmp_path, clean(LATE, "linux", (1, 5, 9)) + [rerun(FIXED, "linux", d, infra=True) for d in (1, 3, 5)])
    assert lifecycle(httpserver, lake, tmp_path).decisions == []
    assert fake.issues[late["number"]]["state"] == fake.issues[other["number"]]["state"] == "open"


def test_ordinary_jobs_and_plain_skips_are_no_evidence(httpserver, tmp_path):
    fake = FakeIssueTracker(httpserver)
    fake.add(f"DISABLED {FIXED}", "Platforms: linux", age=dt.timedelta(days=20), user=BOT)
    lake = lake_with(tmp_path, [rerun(FIXED, "linux", d, job_name="linux-jammy / test (default, 1, 3)") for d in (1, 3, 5)]
                     + [rerun(FIXED, "linux", d, "skipped", "Test is disabled because an issue exists") for d in (2, 4)])
    assert lifecycle(httpserver, lake, tmp_path).decisions == []


def test_the_evidence_reads_each_file_of_its_window_once_and_follows_a_rewrite(tmp_path, extracts_made):
    """Every refresh asks for 14 days of evidence: each test_results file is read once (its extract
    is kept), and a rewritten day is read again and counts as it is now."""
    lake = lake_with(tmp_path, clean(FIXED, "linux") + [rerun(FIXED, "linux", 2, job_name="linux-jammy / test")])
    since = {FIXED: at(30)}
    first = rerun_evidence(lake, DAY, since)
    assert first == {FIXED: {"linux": PlatformRuns(green=MIN_DAYS, red=0, jobs=MIN_DAYS, days=MIN_DAYS)}}
    assert len(extracts_made) == MIN_DAYS
    extracts_made.clear()
    assert rerun_evidence(lake, DAY, since) == first and extracts_made == []
    day3 = at(3).date().isoformat()
    lake.write("test_results", day3, pa.Table.from_pylist([rerun(FIXED, "linux", 3, "failed", "AssertionError")]))
    again = rerun_evidence(lake, DAY, since)
    assert extracts_made == [f"day={day3}/data.parquet"]
    assert again == {FIXED: {"linux": PlatformRuns(green=MIN_DAYS - 1, red=1, jobs=MIN_DAYS, days=MIN_DAYS)}}


def test_without_credentials_it_logs_what_it_would_reenable(httpserver, tmp_path):
    fake = FakeIssueTracker(httpserver)
    outputs = Store(str(tmp_path / "outputs"))
    url = "https://github.com/pytorch/pytorch/issues/"
    outputs.write_bytes(DISABLED_TESTS_PATH, dumps({FIXED: ["1", f"{url}1", ["linux"]],
                                                    HALF: ["2", f"{url}2", ["linux", "win"]]}))
    lake = lake_with(tmp_path, clean(FIXED, "linux") + clean(HALF, "linux") + [rerun(HALF, "win", 2, "failed")])
    logs = []
    result = run_lifecycle(GitHubResource(api_url=httpserver.url_for("")), lake, outputs, DAY, "run-1", REPO,
                           DisabledIssuesConfig(enabled=True), "test config", log=logs.append).reenabling
    assert fake.requests == [] and [(r["test"], r["action"]) for r in result.rows] == [
        (FIXED, "dry_run"), (HALF, "dry_run")]
    # disabled by a dry run's list instead (local ids): no issue yet; a live run files them now and
    # judges them on the reruns after, so none is re-enabled in this run
    outputs.write_bytes(DISABLED_TESTS_PATH, dumps({FIXED: ["local-1", "", ["linux"]],
                                                    HALF: ["local-2", "", ["linux", "win"]]}))
    assert run_lifecycle(GitHubResource(api_url=httpserver.url_for("")), lake, outputs, DAY, "run-2", REPO,
                         DisabledIssuesConfig(enabled=True), "test config").reenabling.rows == []
    assert logs == [f"DRY RUN: {r['detail']}" for r in result.rows]  # the ledger says what the log says
    assert logs[0].startswith(f"DRY RUN: would comment its rerun evidence on the DISABLED issue of {FIXED} and close it")
    assert logs[1].startswith(f"DRY RUN: would comment its rerun evidence on the DISABLED issue of {HALF} and narrow "
                              "its Platforms line to win (clean on linux)")


def test_the_dry_runs_plan_names_a_test_as_its_published_entry_writes_it(httpserver, tmp_path):
    """An entry written with a dotted suite (its issue's title, or its aggregate's line) disables the
    test in PyTorch's runner; the plan names the issue by that entry, as the live comment does, and,
    the entry being the only one naming its issue, says what a live run does if that is an aggregate."""
    outputs = Store(str(tmp_path / "outputs"))
    outputs.write_bytes(DISABLED_TESTS_PATH, dumps({"test_fixed (test_r.TestR)": ["1", "", ["linux"]]}))
    lake = lake_with(tmp_path, clean(FIXED, "linux"))
    run_lifecycle(GitHubResource(api_url=httpserver.url_for("")), lake, outputs, DAY, "run-1", REPO,
                  DisabledIssuesConfig(enabled=True), "test config")
    con = connect()
    lake.register(con, LEDGER_TABLE, [DAY], name="l")
    assert con.sql("SELECT test, detail FROM l").fetchall() == [(FIXED, (
        "would comment its rerun evidence on the DISABLED issue of test_fixed (test_r.TestR) and close it "
        "(clean on linux); the published list does not say whether #1 is its own issue or an aggregate listing it "
        "alone, on which a live run drops its line and closes the aggregate, with one comment"))]


J, D = MIN_JOBS, MIN_DAYS


@pytest.mark.parametrize("disabled_on, runs, action", [
    (["linux"], {"linux": PlatformRuns(J, 0, J, D)}, "close"),
    (["linux"], {"linux": PlatformRuns(J, 0, J, D - 1)}, "wait"),  # too few days
    (["linux", "win"], {"linux": PlatformRuns(J, 0, J, D)}, "narrow"),
    (["linux"], {"linux": PlatformRuns(40, 1, J, D)}, "evidence"),
    (["linux"], {"win": PlatformRuns(0, 3, J, D)}, "wait"),  # red where it is not disabled
    ([], {"linux": PlatformRuns(J, 0, J, D), "win": PlatformRuns(J, 0, J, D)}, "close"),
    ([], {"linux": PlatformRuns(J, 0, J, D), "win": PlatformRuns(1, 0, 1, 1)}, "wait"),
    ([], {"linux": PlatformRuns(J, 0, J, D), "win": PlatformRuns(1, 2, J, D)}, "evidence"),
])
def test_the_rule_per_platform(disabled_on, runs, action):
    assert decide("test_x (__main__.T)", disabled_on, runs).action == action


def reopened(fake, issue, when: dt.datetime) -> None:
    """Someone reopened `issue` at `when`: GitHub shows the reason, no time but its last change."""
    with fake.lock:
        fake.issues[issue["number"]].update(state="open", state_reason="reopened", closed_at=None,
                                            updated_at=when.strftime("%Y-%m-%dT%H:%M:%SZ"))
        fake.search_view[issue["number"]] = dict(fake.issues[issue["number"]])


def test_a_reopened_issue_counts_its_greens_only_from_the_reopening(httpserver, tmp_path):
    """FIXED was closed on a clean week of reruns, failed again and was reopened by a human a day
    ago: that week says nothing of it now. HALF was reopened by this project 8 days ago (its ledger
    row), and a comment changed it since: the clean week after its reopening counts."""
    fake = FakeIssueTracker(httpserver)
    fake.permissions["a-maintainer"] = "write"
    human = fake.add(f"DISABLED {FIXED}", "Platforms: linux", age=dt.timedelta(days=60), user="a-maintainer")
    ours = fake.add(f"DISABLED {HALF}", "Platforms: linux", age=dt.timedelta(days=60), user=BOT)
    reopened(fake, human, at(1))
    reopened(fake, ours, at(1))
    lake = lake_with(tmp_path, clean(FIXED, "linux", range(6, 13)) + clean(HALF, "linux", range(1, 8)))
    row = ledger_row(HALF, "updated", fake.issues[ours["number"]], REPO, "run-0", "reopened: failed after closing")
    record(lake, DAY, [{**row, "at": at(8)}], "reopen")
    result = lifecycle(httpserver, lake, tmp_path)
    assert [(d.test, d.action) for d in result.decisions] == [(HALF, "close")]
    assert fake.issues[human["number"]]["state"] == "open" and human["number"] not in fake.comments


def test_an_issue_the_filing_reopens_is_not_closed_again_by_the_same_run(httpserver, tmp_path):
    fake = FakeIssueTracker(httpserver)
    issue = fake.add(f"DISABLED {FIXED}", "Platforms: linux", state="closed", age=dt.timedelta(days=30), user=BOT)
    lake = lake_with(tmp_path, clean(FIXED, "linux", range(7, 14)))  # while it was disabled, before the close
    gh = github(httpserver)
    failed = dt.datetime.now(dt.timezone.utc)  # flaked on main, after the close
    filing = file_disabled_issues(IssueTracker(gh, REPO), lake, DAY, [Wanted(FIXED, ["linux"], ["linux"], 3)],
                                  {FIXED: Evidence(FIXED, last_main_flake_at=failed)}, ["skipped"], 10, "run-0001")
    assert [r["detail"].split(":")[0] for r in filing.rows] == ["reopened"]
    life = run_lifecycle(gh, lake, Store(str(tmp_path / "outputs")), DAY, "run-0001", REPO,
                         DisabledIssuesConfig(enabled=True), "test config", open_issues=filing.open_list)
    assert life.reenabling.decisions == [] and fake.issues[issue["number"]]["state"] == "open"


CLEAN, RED = PlatformRuns(J, 0, J, D), PlatformRuns(40, 2, J, D)


@pytest.mark.parametrize("disabled_on, runs, action, keep", [
    (["mac", "macos"], {"mac": CLEAN}, "close", []),  # one condition, IS_MACOS, under two names
    (["macos", "win"], {"mac": CLEAN}, "narrow", ["win"]),
    (["linux"], {"linux": CLEAN, "rocm": RED}, "evidence", []),  # IS_LINUX holds on ROCm jobs too
    (["linux"], {"linux": CLEAN, "xpu": PlatformRuns(2, 0, 2, 2)}, "wait", []),
    (["linux", "win"], {"linux": CLEAN, "rocm": CLEAN, "win": RED}, "narrow", ["win"]),
    (["rocm"], {"linux": RED, "rocm": CLEAN}, "close", []),
    # a test configuration holds where its jobs ran (`dynamo`: the reruns of jobs where
    # TEST_WITH_TORCHDYNAMO holds), whatever the OS's own reruns say
    (["dynamo"], {"linux": CLEAN}, "wait", []),  # plain Linux reruns do not run it disabled
    (["dynamo"], {"dynamo": CLEAN, "linux": RED}, "close", []),
    (["inductor"], {"inductor": CLEAN, "dynamo": RED, "linux": RED}, "close", []),
    (["inductor"], {"dynamo": CLEAN, "linux": CLEAN}, "wait", []),
    (["inductor", "slow"], {"linux": CLEAN, "win": RED}, "evidence", []),  # slow: on any platform
    (["dynamo"], {}, "wait", []),
])
def test_issue_platforms_are_read_as_pytorchs_runner_reads_them(disabled_on, runs, action, keep):
    d = decide("test_x (__main__.T)", disabled_on, runs)
    assert (d.action, d.keep) == (action, keep)


DYNAMO_JOB = "linux-jammy-py3.10-clang18 / test (dynamo_wrapped, 1, 1, linux.2xlarge, rerun_disabled_tests)"
INDUCTOR_JOB = ("rocm-mi300 / linux-noble-rocm-py3.12-mi300 / test (inductor, 1, 1, linux.rocm.gpu.mi300.2, "
                "rerun_disabled_tests)")


def test_a_test_disabled_under_dynamo_is_reenabled_on_the_reruns_of_dynamo_jobs_only(httpserver, tmp_path):
    """Plain Linux rerun jobs do not run a test disabled on `dynamo` as disabled: their greens say
    nothing of it under dynamo. A ROCm inductor job runs it disabled on `rocm` (TEST_WITH_ROCM holds
    there too): its red keeps a test disabled on rocm disabled."""
    fake = FakeIssueTracker(httpserver)
    old = dt.timedelta(days=20)
    plain = fake.add(f"DISABLED {FIXED}", "Platforms: dynamo\n\nflaky", age=old, user=BOT)
    dynamo = fake.add(f"DISABLED {HALF}", "Platforms: dynamo\n\nflaky", age=old, user=BOT)
    rocm = fake.add(f"DISABLED {STILL}", "Platforms: rocm\n\nflaky", age=old, user=BOT)
    days = range(1, MIN_DAYS + 1)
    lake = lake_with(tmp_path, clean(FIXED, "linux") + [rerun(HALF, "linux", d, job_name=DYNAMO_JOB) for d in days]
                     + clean(STILL, "rocm") + [rerun(STILL, "rocm", 2, "failed", job_name=INDUCTOR_JOB)])
    result = lifecycle(httpserver, lake, tmp_path)
    assert [(d.test, d.action) for d in result.decisions] == [(HALF, "close"), (STILL, "evidence")]
    assert fake.issues[dynamo["number"]]["state"] == "closed"
    assert "| dynamo | 7 | 7 | 7 | 0 |" in fake.comments[dynamo["number"]][0]
    assert fake.issues[plain["number"]]["state"] == fake.issues[rocm["number"]]["state"] == "open"


def test_a_platform_re_enabled_again_after_the_filing_added_it_back_is_said_again(httpserver, tmp_path):
    """Re-enabled on win, the test flaked on win again and the filing added win back; clean there
    again, it is re-enabled on win a second time, and the issue says so a second time."""
    fake = FakeIssueTracker(httpserver)
    n = fake.add(f"DISABLED {HALF}", "Platforms: linux, win\n\nflaky", age=dt.timedelta(days=20), user=BOT)["number"]
    gh, narrow = github(httpserver), Decision(HALF, "narrow", ["linux"], ["win"])
    runs = {"win": PlatformRuns(J, 0, J, D)}
    act(gh, REPO, dict(fake.issues[n]), narrow, runs, DAY)
    flaked_on_win = Wanted(HALF, ["linux"], ["linux", "win"], 4)
    file_disabled_issues(IssueTracker(gh, REPO), lake_with(tmp_path, []), DAY, [flaked_on_win], {HALF: Evidence(HALF)},
                         ["skipped"], 10, "run-0002")
    assert fake.issues[n]["body"].startswith("Platforms: linux, win\n")
    act(gh, REPO, dict(fake.issues[n]), narrow, runs, DAY)
    assert fake.issues[n]["body"].startswith("Platforms: linux\n")
    assert [c.split(":")[0] for c in fake.comments[n]] == [
        f"Re-enabling `{HALF}` on win", "It flaked on win as well", f"Re-enabling `{HALF}` on win"]


def test_an_issue_a_human_reopened_and_re_enabled_again_is_said_again(httpserver, tmp_path):
    """Closed on clean reruns, reopened by a human, clean again: the second close has its comment
    too (a close GitHub refused is still said once: test_clean_everywhere_...)."""
    fake = FakeIssueTracker(httpserver)
    n = fake.add(f"DISABLED {FIXED}", "Platforms: linux", age=dt.timedelta(days=20), user=BOT)["number"]
    gh, close = github(httpserver), Decision(FIXED, "close", dropped=["linux"])
    runs = {"linux": PlatformRuns(J, 0, J, D)}
    act(gh, REPO, dict(fake.issues[n]), close, runs, DAY)
    gh.request("PATCH", f"/repos/{REPO}/issues/{n}", json_body={"state": "open"})  # a human reopens it
    act(gh, REPO, dict(fake.issues[n]), close, runs, DAY)
    assert fake.issues[n]["state"] == "closed" and len(fake.comments[n]) == 2
    assert all(c.startswith(f"Re-enabling `{FIXED}`: every rerun") for c in fake.comments[n])
