"""Many tests of one file flaking at once get one aggregate DISABLED issue, in the format PyTorch's
update_disabled_issues.py reads, against the fake GitHub API."""

import threading

import pytest
from fake_github_issues import FakeIssueTracker
from test_disabled_issues import dies_after_create, racing_tracker

from resources.github import GitHubResource
from resources.lake import Lake
from torchci_assets.derived.flakiness import aggregates
from torchci_assets.derived.flakiness import issues as issues_module
from torchci_assets.derived.flakiness.aggregates import AGGREGATE_LABEL, aggregate_title, groups
from torchci_assets.derived.flakiness.issue_text import Evidence, condense
from torchci_assets.derived.flakiness.issues import IssueTracker, Wanted, file_disabled_issues

REPO = "pytorch/pytorch"
DAY = "2026-11-20"
BURST = [f"test_op_{i:02d} (__main__.TestBurst)" for i in range(50)]
OTHER = ["test_x (__main__.TestOther)", "test_y (__main__.TestOther)"]


def wanted(tests, platforms=("linux",)) -> list[Wanted]:
    return [Wanted(t, list(platforms), list(platforms), 3) for t in tests]


def evidence(tests, file) -> dict[str, Evidence]:
    return {t: Evidence(t, file) for t in tests}


def run(httpserver, lake, tests, ev, max_new=10, tracker=IssueTracker, run_id="run-0001"):
    gh = GitHubResource(api_url=httpserver.url_for(""), token="t0ken", search_interval_s=0.0,
                        write_interval_s=0.0, backoff_base_s=0.0)
    return file_disabled_issues(tracker(gh, REPO), lake, DAY, tests, ev, ["skipped", "module: flaky-tests"],
                                max_new, run_id)


def test_a_burst_of_fifty_tests_of_one_file_files_one_issue_that_disables_all_of_them(httpserver, tmp_path):
    fake = FakeIssueTracker(httpserver)
    lake = Lake.at(str(tmp_path / "lake"))
    report = run(httpserver, lake, wanted(BURST) + wanted(OTHER, ()),
                 {**evidence(BURST, "test_burst.py"), **evidence(OTHER, "test_other.py")})
    (aggregate,) = fake.titled(aggregate_title("test_burst.py"))
    assert len(fake.issues) == 3  # the aggregate, and the two tests of a quiet file on their own
    assert AGGREGATE_LABEL in [x["name"] for x in aggregate["labels"]]
    assert {r["issue_number"] for r in report.rows if r["test"] in BURST} == {aggregate["number"]}
    assert report.count("created") == 52
    disabled = condense(fake.issues.values())  # read back as PyTorch's script reads it
    assert sorted(disabled) == sorted(BURST + OTHER)
    assert disabled[BURST[0]][2] == ["linux"] and disabled[OTHER[0]][2] == []


def test_a_second_run_and_a_run_after_a_crash_file_nothing_more(httpserver, tmp_path):
    fake = FakeIssueTracker(httpserver, lag=True)  # search does not see the new aggregate yet
    ev = evidence(BURST, "test_burst.py")
    run(httpserver, Lake.at(str(tmp_path / "lake")), wanted(BURST), ev)
    # a new lake: as if the run had died before writing its ledger rows
    again = run(httpserver, Lake.at(str(tmp_path / "other-lake")), wanted(BURST), ev)
    assert len(fake.issues) == 1 and again.count("created") == 0
    assert {r["action"] for r in again.rows} == {"found"}


def test_tests_whose_issues_a_human_closed_are_not_new_and_not_filed_again_together(httpserver, tmp_path):
    """Five tests whose issues were closed days ago (re-enabled) flake again beside five new ones:
    the closed issues, found by their titles as the one-test path finds them, are not filed again
    in an aggregate; the five new tests are."""
    import datetime as dt

    from torchci_assets.derived.flakiness.issue_text import MARKER

    fake = FakeIssueTracker(httpserver)
    closed, new = BURST[:5], BURST[5:10]
    for t in closed:
        fake.add(f"DISABLED {t}", f"Platforms: linux\n{MARKER}", state="closed", user="torchci-bot[bot]",
                 age=dt.timedelta(days=3))
    report = run(httpserver, Lake.at(str(tmp_path / "lake")), wanted(closed + new), evidence(BURST, "test_burst.py"))
    (aggregate,) = fake.titled(aggregate_title("test_burst.py"))
    assert report.aggregates == {aggregate["title"]: new}
    assert all(fake.titled(f"DISABLED {t}")[0]["state"] == "closed" for t in closed)
    # no failure seen since the closing: each left closed, on its own issue
    assert {(r["test"], r["action"], r["issue_number"]) for r in report.rows if r["test"] in closed} == {
        (t, "found", fake.titled(f"DISABLED {t}")[0]["number"]) for t in closed}


def test_new_flaky_tests_of_a_file_with_an_open_aggregate_join_its_list(httpserver, tmp_path):
    fake = FakeIssueTracker(httpserver)
    lake = Lake.at(str(tmp_path / "lake"))
    run(httpserver, lake, wanted(BURST[:10]), evidence(BURST[:10], "test_burst.py"))
    later = run(httpserver, lake, wanted(BURST[10:12], ("win",)), evidence(BURST[10:12], "test_burst.py"))
    (aggregate,) = fake.issues.values()
    assert [r["action"] for r in later.rows] == ["updated", "updated"]
    disabled = condense([aggregate])
    assert sorted(disabled) == sorted(BURST[:12]) and disabled[BURST[11]][2] == ["win"]
    assert "2 more flaky test(s)" in fake.comments[aggregate["number"]][0]


def test_an_aggregate_counts_as_one_new_issue_against_the_cap(httpserver, tmp_path):
    fake = FakeIssueTracker(httpserver)
    report = run(httpserver, Lake.at(str(tmp_path / "lake")), wanted(BURST + OTHER),
                 {**evidence(BURST, "test_burst.py"), **evidence(OTHER, "test_other.py")}, max_new=1)
    assert len(fake.issues) == 1 and sorted(report.deferred) == sorted(OTHER)


def test_four_tests_of_a_file_are_not_an_aggregate_five_are():
    def files(n):
        return groups(wanted([f"test_{i} (__main__.T)" for i in range(n)]), lambda t: "test_t.py", lambda t: True)
    assert files(4) == {} and len(files(5)["test_t.py"]) == 5


def test_the_list_is_pytorchs_format():
    assert aggregates.tests_block({"test_b (__main__.T)": [], "test_a (__main__.T)": ["linux", "win"]}) == (
        "disable the following tests:\n```\ntest_a (__main__.T): linux, win\ntest_b (__main__.T):\n```\n")


def test_a_crash_between_creating_the_aggregate_and_recording_it_files_no_second_one(httpserver, tmp_path,
                                                                                     monkeypatch):
    fake = FakeIssueTracker(httpserver, lag=True)  # search does not see the new aggregate yet
    lake = Lake.at(str(tmp_path / "lake"))
    ev = evidence(BURST, "test_burst.py")
    real_record = issues_module.record
    monkeypatch.setattr(issues_module, "record", dies_after_create(real_record))
    with pytest.raises(SystemExit):
        run(httpserver, lake, wanted(BURST), ev)
    (aggregate,) = fake.issues.values()
    assert lake.days("disabled_issues") == []  # nothing recorded
    monkeypatch.setattr(issues_module, "record", real_record)
    again = run(httpserver, lake, wanted(BURST), ev)
    assert list(fake.issues) == [aggregate["number"]] and fake.count("POST", f"/repos/{REPO}/issues") == 1
    assert {(r["action"], r["issue_number"]) for r in again.rows} == {("found", aggregate["number"])}


def test_two_racing_runs_leave_one_open_aggregate(httpserver, tmp_path):
    """Outside the `github_issues` pool two runs can both see no aggregate and both create one;
    each rereads the list after its create, and the later twin is closed."""
    fake = FakeIssueTracker(httpserver, lag=True)
    Racing = racing_tracker(2)
    reports = []
    threads = [threading.Thread(target=lambda i=i: reports.append(run(
        httpserver, Lake.at(str(tmp_path / f"lake-{i}")), wanted(BURST), evidence(BURST, "test_burst.py"),
        tracker=Racing, run_id=f"run-{i}"))) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(reports) == 2
    (kept,) = fake.titled(aggregate_title("test_burst.py"), "open")
    (twin,) = fake.titled(aggregate_title("test_burst.py"), "closed")
    assert kept["number"] < twin["number"] and twin["state_reason"] == "not_planned"
    assert fake.comments[twin["number"]][0].startswith(f"Duplicate of #{kept['number']}")
    assert sorted(sorted({r["action"] for r in rep.rows}) for rep in reports) == [["created"], ["found"]]
    assert {r["issue_number"] for rep in reports for r in rep.rows} == {kept["number"]}
