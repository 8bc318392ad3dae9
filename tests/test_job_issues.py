"""DISABLED and UNSTABLE job issues read back into disabled-jobs.json and unstable-jobs.json,
against the fake GitHub API, checked against the files PyTorch published."""

import json

import pytest
from conftest import pytorch_bytes
from fake_github_issues import FakeIssueTracker, json_response

from resources.github import GitHubError, GitHubResource
from resources.storage import Store
from torchci_assets.derived.flakiness.issue_text import is_test_issue
from torchci_assets.derived.flakiness.job_issues import (
    DISABLED_JOBS_PATH,
    UNSTABLE_JOBS_PATH,
    condense_jobs,
    job_entry,
    job_name,
    publish_job_lists,
    read_job_lists,
)
from torchci_assets.derived.flakiness.lists import dumps

REPO = "pytorch/pytorch"


def github(httpserver) -> GitHubResource:
    return GitHubResource(api_url=httpserver.url_for(""), token="t0ken", search_interval_s=0.0)


def rebuild(fake: FakeIssueTracker, prefix: str, published: dict) -> None:
    """The open issues a published list was built from: title, author (given write access), number."""
    for name, (author, number, *_rest) in published.items():
        fake.add(f"{prefix} {name}", "", user=author, number=int(number))
        fake.permissions[author] = "write"


def noise(fake: FakeIssueTracker) -> None:
    """Issues the lists must not take: a stranger's, a reader's, a closed one, a test's, the
    prefix elsewhere in the title, a bare prefix."""
    fake.permissions.update({"a-reader": "read", "a-maintainer": "admin"})
    fake.add("UNSTABLE pull / linux-jammy-py3.10-gcc11 / test (crossref)", user="a-stranger", number=900001)
    fake.add("DISABLED trunk / macos-py3-arm64 / test (mps)", user="a-reader", number=900002)
    fake.add("UNSTABLE periodic / win-vs2022-cpu-py3 / test (default)", user="a-maintainer", number=900003,
             state="closed")
    fake.add("DISABLED test_conv (__main__.TestNN)", "Platforms: linux", user="a-maintainer", number=900004)
    fake.add("Make the xla job UNSTABLE again", user="a-maintainer", number=900005)
    fake.add("UNSTABLE", user="a-maintainer", number=900006)


def test_unstable_jobs_are_pytorchs_published_file_byte_for_byte(httpserver):
    raw = pytorch_bytes("unstable-jobs.json")
    fake = FakeIssueTracker(httpserver)
    rebuild(fake, "UNSTABLE", json.loads(raw))
    noise(fake)
    assert dumps(read_job_lists(github(httpserver), REPO)[UNSTABLE_JOBS_PATH]) == raw


def test_disabled_jobs_are_pytorchs_published_file_but_for_titles_it_now_reads_as_tests(httpserver):
    """Five entries of the published file have titles that today's update_disabled_issues.py takes
    for disabled tests (`DISABLED test_... (...)`): another version of the script wrote them.
    Every other entry, and nothing else, comes back byte for byte."""
    published = json.loads(pytorch_bytes("disabled-jobs.json"))
    as_tests = sorted(k for k in published if is_test_issue(f"DISABLED {k}"))
    assert len(as_tests) == 5 and all(k.startswith("test_") for k in as_tests)
    jobs = {k: v for k, v in published.items() if k not in as_tests}
    fake = FakeIssueTracker(httpserver)
    rebuild(fake, "DISABLED", published)
    noise(fake)
    lists = read_job_lists(github(httpserver), REPO)
    assert dumps(lists[DISABLED_JOBS_PATH]) == dumps(jobs)
    assert "trunk / macos-py3-arm64 / test (mps)" not in lists[DISABLED_JOBS_PATH]  # a reader filed it


def test_each_author_is_asked_once_and_a_non_collaborator_may_not(httpserver):
    fake = FakeIssueTracker(httpserver)
    fake.permissions["a-maintainer"] = "maintain"  # maintain is not enough, as in PyTorch's script
    fake.permissions["a-writer"] = "WRITE"
    for i, user in enumerate(["a-writer", "a-writer", "a-maintainer", "a-stranger", "a-stranger"]):
        fake.add(f"UNSTABLE pull / env-{i} / test", user=user)
    unstable = read_job_lists(github(httpserver), REPO)[UNSTABLE_JOBS_PATH]
    assert sorted(unstable) == ["pull / env-0 / test", "pull / env-1 / test"]
    assert fake.count("GET", f"/repos/{REPO}/collaborators/") == 3


def test_a_permission_error_other_than_not_found_fails_the_read_instead_of_dropping_jobs(httpserver):
    fake = FakeIssueTracker(httpserver)
    fake.permissions["a-writer"] = "write"
    fake.add("UNSTABLE pull / env / test", user="a-writer")
    fake.fail("permission", *[json_response(502, {"message": "Bad Gateway"})] * 2)
    gh = GitHubResource(api_url=httpserver.url_for(""), token="t0ken", search_interval_s=0.0,
                        max_retries=1, backoff_base_s=0.0)
    with pytest.raises(GitHubError):
        read_job_lists(gh, REPO)
    assert read_job_lists(gh, REPO)[UNSTABLE_JOBS_PATH]  # GitHub answers again: the job is back


@pytest.mark.parametrize("title, prefix, name", [
    ("DISABLED pull / linux-jammy-py3.10-gcc11 / test (default)", "DISABLED",
     "pull / linux-jammy-py3.10-gcc11 / test (default)"),
    ("DISABLED   inductor / cuda13 / test  ", "DISABLED", "inductor / cuda13 / test"),
    ("DISABLED test_conv (__main__.TestNN)", "DISABLED", None),  # a test, not a job
    ("DISABLEDtest_conv (__main__.TestNN)", "DISABLED", None),
    ("DISABLED testAssertNotRegex (__main__.CPythonTest)", "DISABLED", "testAssertNotRegex (__main__.CPythonTest)"),
    ("UNSTABLE test_conv (__main__.TestNN)", "UNSTABLE", "test_conv (__main__.TestNN)"),  # the test pattern is DISABLED's
    ("DISABLED", "DISABLED", None),
    ("disabled pull / x / test", "DISABLED", None),  # the prefix is case-sensitive
    ("UNSTABLE pull / x / test", "DISABLED", None),
])
def test_job_names_are_read_as_update_disabled_issues_reads_them(title, prefix, name):
    assert job_name(title, prefix) == name


def test_a_job_name_splits_on_its_first_two_slashes():
    url = "https://github.com/pytorch/pytorch/issues/152884"
    assert job_entry("Lint / Link checks / Lint URLs / linux-job", "huydhn", url) == [
        "huydhn", "152884", url, "Lint", "Link checks", "Lint URLs / linux-job"]
    assert job_entry("LiteInterpreterUpgraderTest.DivTensorV2", "a", url)[3:] == [
        "LiteInterpreterUpgraderTest.DivTensorV2", "", ""]


def test_of_two_issues_for_one_job_the_later_url_in_string_order_wins():
    issues = [{"title": "UNSTABLE pull / x / test", "user": {"login": "a"},
               "html_url": f"https://github.com/{REPO}/issues/{n}"} for n in (99, 100)]
    assert condense_jobs(issues, "UNSTABLE", lambda _: True)["pull / x / test"][1] == "99"


def test_both_lists_are_published_together(httpserver, tmp_path):
    fake = FakeIssueTracker(httpserver)
    fake.permissions["a-writer"] = "admin"
    fake.add("DISABLED pull / linux / test (default)", user="a-writer", number=11)
    fake.add("UNSTABLE trunk / rocm / test (distributed)", user="a-writer", number=12)
    store = Store(str(tmp_path))
    counts = publish_job_lists(github(httpserver), REPO, store)
    assert counts == {DISABLED_JOBS_PATH: 1, UNSTABLE_JOBS_PATH: 1}
    assert json.loads(store.read_bytes(UNSTABLE_JOBS_PATH)) == {"trunk / rocm / test (distributed)": [
        "a-writer", "12", f"https://github.com/{REPO}/issues/12", "trunk", "rocm", "test (distributed)"]}
    assert list(json.loads(store.read_bytes(DISABLED_JOBS_PATH))) == ["pull / linux / test (default)"]
