"""Many tests of one file flaking at once get one aggregate DISABLED issue, in the format PyTorch's
update_disabled_issues.py reads, against the fake GitHub API."""

from fake_github_issues import FakeIssueTracker

from resources.github import GitHubResource
from resources.lake import Lake
from torchci_assets.derived.flakiness import aggregates
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


def run(httpserver, lake, tests, ev, max_new=10):
    gh = GitHubResource(api_url=httpserver.url_for(""), token="t0ken", search_interval_s=0.0,
                        write_interval_s=0.0, backoff_base_s=0.0)
    return file_disabled_issues(IssueTracker(gh, REPO), lake, DAY, tests, ev, ["skipped", "module: flaky-tests"],
                                max_new, "run-0001")


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
