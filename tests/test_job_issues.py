"""DISABLED and UNSTABLE job issues read back into disabled-jobs.json and unstable-jobs.json,
against the fake GitHub API, checked against the files PyTorch published and against PyTorch's
own logic run on the same issues."""

import json
import re
import urllib.request
from urllib.parse import urlencode

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
    """The open issues a published list was built from: title, author (given write access; the
    flaky bot, `pytorch-bot[bot]` to the REST API, none), number."""
    for name, (author, number, *_rest) in published.items():
        bot = author == "pytorch-bot"
        fake.add(f"{prefix} {name}", "", user=f"{author}[bot]" if bot else author, number=int(number))
        if not bot:
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
    fake.add("UNSTABLE", user="a-stranger", number=900006)


def test_unstable_jobs_are_pytorchs_published_file_byte_for_byte(httpserver):
    raw = pytorch_bytes("unstable-jobs.json")
    fake = FakeIssueTracker(httpserver)
    rebuild(fake, "UNSTABLE", json.loads(raw))
    noise(fake)
    assert dumps(read_job_lists(github(httpserver), REPO)[UNSTABLE_JOBS_PATH]) == raw


def test_disabled_jobs_are_pytorchs_published_file_byte_for_byte(httpserver):
    """Five of its entries are test titles PyTorch does not read as a test's (a `/` or a `,` in
    the name), filed by the flaky bot: PyTorch lists them as jobs, and so does this."""
    raw = pytorch_bytes("disabled-jobs.json")
    published = json.loads(raw)
    assert sum(1 for k in published if k.startswith("test_")) == 5
    fake = FakeIssueTracker(httpserver)
    rebuild(fake, "DISABLED", published)
    noise(fake)
    lists = read_job_lists(github(httpserver), REPO)
    assert dumps(lists[DISABLED_JOBS_PATH]) == raw
    assert "trunk / macos-py3-arm64 / test (mps)" not in lists[DISABLED_JOBS_PATH]  # a reader filed it


# ---- PyTorch's own logic, as a reference ---------------------------------------------------
# update_disabled_issues.py (pytorch/test-infra) writes what the HUD's getDisabledTestsAndJobs
# builds (torchci/pages/api/flaky-tests/getDisabledTestsAndJobs.ts and the flaky bot's
# isSingleIssue, isAggregateIssue, parseTestName): re-expressed here in Python over the fake
# API, read as PyTorch reads GitHub (search for the open issues of a prefix; GraphQL's url, number
# and author login, a bot's without `[bot]`; the collaborator permission), then dumped as the
# script dumps it. One deviation: PyTorch's code fails on a non-collaborator (GitHub's 404);
# here, as in the code under test, such an author may not.
_PT_TEST_NAME = re.compile(r"^\s*(test_[a-zA-Z0-9-_\.]+)\s+\(([a-zA-Z0-9-_\.]+)\)\s*$")


def _pt_get(base: str, path: str, args: dict | None = None):
    url = f"{base.rstrip('/')}{path}" + (f"?{urlencode(args)}" if args else "")
    try:
        with urllib.request.urlopen(url) as resp:
            return json.load(resp)
    except urllib.error.HTTPError:
        return None


def _pt_issues(base: str, prefix: str) -> list[dict]:
    found, page = [], 1
    while True:
        res = _pt_get(base, "/search/issues", {"q": f"is:issue is:open repo:{REPO} in:title {prefix}",
                                               "per_page": 100, "page": page})
        found += res["items"]
        if len(found) >= res["total_count"]:
            break
        page += 1
    nodes = [{"number": i["number"], "title": i["title"], "body": i["body"], "url": i["html_url"],
              "author": {"login": i["user"]["login"].removesuffix("[bot]")}} for i in found]
    return sorted(nodes, key=lambda n: n["url"])


def _pt_is_test_issue(title: str) -> bool:
    single = title.startswith("DISABLED ") and _PT_TEST_NAME.match(title[len("DISABLED "):].strip())
    return bool(single) or title.startswith("DISABLED MULTIPLE ")


def _pt_condense_jobs(base: str, issues: list[dict], prefix: str) -> dict:
    jobs, allowed = {}, {}
    for issue in issues:
        if not issue["title"].startswith(prefix):
            continue
        job = issue["title"][len(prefix):].strip()
        login = issue["author"]["login"]
        if login != "pytorch-bot":
            if login not in allowed:
                perm = _pt_get(base, f"/repos/{REPO}/collaborators/{login}/permission") or {}
                allowed[login] = perm.get("permission") in ("admin", "write")
            if not allowed[login]:
                continue
        parts = job.split("/")
        jobs[job] = [login, str(issue["number"]), issue["url"], parts[0].strip(),
                     (parts[1] if len(parts) > 1 else "").strip(), "/".join(parts[2:]).strip()]
    return jobs


def pytorch_job_lists(base: str) -> dict[str, bytes]:
    disabled = [i for i in _pt_issues(base, "DISABLED") if not _pt_is_test_issue(i["title"])]
    unstable = _pt_issues(base, "UNSTABLE")
    return {path: json.dumps(_pt_condense_jobs(base, issues, prefix), sort_keys=True, indent=2).encode()
            for path, issues, prefix in ((DISABLED_JOBS_PATH, disabled, "DISABLED"),
                                         (UNSTABLE_JOBS_PATH, unstable, "UNSTABLE"))}


def test_both_lists_equal_what_pytorchs_own_logic_builds_from_the_same_issues(httpserver):
    """Every kind of title and author at once: the published files' issues, the noise, and the
    edges where PyTorch's reading is particular."""
    fake = FakeIssueTracker(httpserver)
    rebuild(fake, "DISABLED", json.loads(pytorch_bytes("disabled-jobs.json")))
    rebuild(fake, "UNSTABLE", json.loads(pytorch_bytes("unstable-jobs.json")))
    noise(fake)
    fake.permissions["a-writer"] = "write"
    for title, user in [
        ("DISABLED MULTIPLE There are multiple flaky tests in test_nn.py", "pytorch-bot[bot]"),  # tests
        ("DISABLED test_add (__main__.TestOps) ", "pytorch-bot[bot]"),  # one test, trailing space
        ("DISABLED test_add, test_sub (__main__.TestOps)", "a-writer"),  # not a test's: a job
        ("DISABLEDtest_mul (__main__.TestOps)", "a-writer"),  # no space: a job
        ("UNSTABLE test_conv (__main__.TestNN)", "a-writer"),  # UNSTABLE titles are all jobs'
        ("UNSTABLE", "a-writer"),  # an empty job name is kept
        ("UNSTABLE pull / a / b / c (x, y)", "pytorch-bot[bot]"),  # the bot needs no permission
        ("DISABLED pull / win / test (default)", "pytorch-bot"),  # the login as GraphQL gives it
        ("UNSTABLE pull / a / b / c (x, y)", "a-writer"),  # a later URL for the same job wins
        # Apps PyTorch's bot authorizes for test issues: the job lists ask GitHub (no allowlist)
        ("DISABLED pull / by-app / test (default)", "meta-codesync[bot]"),
        ("UNSTABLE pull / by-app / test (default)", "facebook-github-tools[bot]"),
    ]:
        fake.add(title, user=user)
    fake.permissions["pytorch-bot"] = "read"
    reference = pytorch_job_lists(httpserver.url_for(""))
    ours = read_job_lists(github(httpserver), REPO)
    for path in (DISABLED_JOBS_PATH, UNSTABLE_JOBS_PATH):
        assert dumps(ours[path]) == reference[path]
    assert "" in ours[UNSTABLE_JOBS_PATH] and "test_conv (__main__.TestNN)" in ours[UNSTABLE_JOBS_PATH]
    assert ours[UNSTABLE_JOBS_PATH]["pull / a / b / c (x, y)"][0] == "a-writer"
    assert "test_add, test_sub (__main__.TestOps)" in ours[DISABLED_JOBS_PATH]
    assert "pull / by-app / test (default)" not in ours[DISABLED_JOBS_PATH] | ours[UNSTABLE_JOBS_PATH]


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
    ("DISABLED  test_conv (__main__.TestNN)  ", "DISABLED", None),
    ("DISABLED MULTIPLE There are multiple flaky tests in test_nn.py", "DISABLED", None),
    ("DISABLEDtest_conv (__main__.TestNN)", "DISABLED", "test_conv (__main__.TestNN)"),  # not a test's title
    ("DISABLED test_a/b (__main__.TestNN)", "DISABLED", "test_a/b (__main__.TestNN)"),
    ("DISABLED testAssertNotRegex (__main__.CPythonTest)", "DISABLED", "testAssertNotRegex (__main__.CPythonTest)"),
    ("UNSTABLE test_conv (__main__.TestNN)", "UNSTABLE", "test_conv (__main__.TestNN)"),  # the test pattern is DISABLED's
    ("DISABLED", "DISABLED", ""),  # kept, as PyTorch keeps it
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
