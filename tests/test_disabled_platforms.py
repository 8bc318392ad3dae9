"""The dry-run disabled list and the DISABLED issues name platforms as PyTorch's runner names them,
from real job names through the verdict to the published file and the issue's `Platforms:` line.

PyTorch's runner drops every platform name of an entry it does not know and disables a test whose
list ends empty everywhere, so a name of this project's own (its job-name parser calls aarch64 and
s390x jobs `linux-aarch64` and `s390x`) would disable an aarch64-only flake on Windows and macOS.
"""

import json

from fake_github_issues import FakeIssueTracker
from test_flaky import History

from resources.github import GitHubResource
from resources.lake import Lake
from resources.storage import Store
from torchci_assets.derived.flakiness.flaky import build_flaky_tests
from torchci_assets.derived.flakiness.issue_text import PYTORCH_PLATFORMS
from torchci_assets.derived.flakiness.issues import IssueTracker, file_disabled_issues, wanted_tests
from torchci_assets.derived.flakiness.lists import (DISABLED_TESTS_PATH, flaky_rows, publish_disabled_tests,
                                                    pytorch_key)
from torchci_assets.ingest.jobnames import parse_job_name

# real job names of PyTorch's trunk and pull workflows
JOB_NAMES = {
    "linux": "linux-jammy-py3.10-gcc11 / test (default, 1, 5, linux.4xlarge)",
    "aarch64": "linux-jammy-aarch64-py3.10 / test (default, 1, 3, linux.arm64.2xlarge)",
    "win": "win-vs2022-cpu-py3 / test (default, 1, 3, windows.4xlarge.nonephemeral)",
    "dynamo": "linux-jammy-py3.10-clang18 / test (dynamo_wrapped, 1, 3, linux.2xlarge)",
    "inductor": "inductor / unit-test / inductor-test / test (inductor, 1, 2, linux.g5.4xlarge.nvidia.gpu)",
    "rocm": "rocm-mi300 / linux-noble-rocm-py3.12-mi300 / test (default, 1, 6, linux.rocm.gpu.mi300.2)",
    "rocm_inductor": "rocm-mi300 / linux-noble-rocm-py3.12-mi300 / test (inductor, 1, 2, linux.rocm.gpu.mi300.2)",
}


def config(which: str) -> tuple[str, str, str]:
    """(build_env, test_config, platform) as the ingest reads them off the job's name."""
    job = parse_job_name(JOB_NAMES[which])
    return job.build_env, job.test_config, job.platform


def verdict(tmp_path, flakes: dict[str, dict[int, str]], absent: dict[str, set[str]]) -> tuple[Lake, str]:
    """Forty main commits, each run on every config of JOB_NAMES; `flakes[test]` maps a commit to
    the config where the test flaked (a rerun passed), `absent[test]` the configs that never ran
    it. Returns the lake with its flaky verdict, and the verdict's day."""
    tests = sorted(flakes)
    h = History(tests)
    for commit in range(40):
        for which in JOB_NAMES:
            outcomes = {t: "flake" for t in tests if flakes[t].get(commit) == which}
            outcomes.update({t: "absent" for t in tests if which in absent.get(t, set())})
            h.run(commit, config(which), outcomes)
    lake = Lake.at(str(tmp_path / "lake"))
    day = h.build(lake)[-1]
    build_flaky_tests(lake, day, 14)
    return lake, day


def published_platforms(tmp_path, flakes: dict[str, dict[int, str]], absent: dict[str, set[str]]) -> dict:
    """The published list's platforms by test name, for the history of `verdict`."""
    tests = sorted(flakes)
    lake, day = verdict(tmp_path, flakes, absent)
    out = Store(str(tmp_path / "out"))
    publish_disabled_tests(lake, out, day)
    published = json.loads(out.read_bytes(DISABLED_TESTS_PATH))
    assert all(p in PYTORCH_PLATFORMS for _, _, platforms in published.values() for p in platforms), published
    return {t: published[pytorch_key("TestX", t)][2] for t in tests if pytorch_key("TestX", t) in published}


def test_a_flake_of_aarch64_jobs_disables_the_test_on_linux_only(tmp_path):
    assert config("aarch64")[2] == "linux-aarch64"  # the ingest's own name for the platform
    platforms = published_platforms(tmp_path, {"test_arm": {5: "aarch64", 17: "aarch64", 30: "aarch64"}}, {})
    assert platforms == {"test_arm": ["linux"]}  # PyTorch's IS_LINUX: aarch64 jobs, not Windows or macOS


def test_a_flake_of_linux_and_aarch64_jobs_that_ran_only_there_is_linux_not_everywhere(tmp_path):
    """Both are PyTorch's linux: the one platform that ran it, which names it (not [], every
    platform); a test that also ran, cleanly, on Windows is likewise disabled on linux alone."""
    platforms = published_platforms(tmp_path, {
        "test_linux_only": {5: "linux", 17: "aarch64", 30: "linux"},
        "test_everywhere_else_clean": {6: "linux", 18: "aarch64", 31: "linux"},
    }, {"test_linux_only": {"win"}})
    assert platforms == {"test_linux_only": ["linux"], "test_everywhere_else_clean": ["linux"]}


# Where PyTorch's flaky bot (test-infra utils.ts getPlatformsAffected) disables a test flaky in these
# jobs: a job whose name says dynamo or inductor counts for no OS, only for `dynamo` / `inductor`,
# and those only when `linux` is not otherwise a platform (they are subsets of linux); a ROCm job
# counts as rocm alone.
BOT_PLATFORMS = {
    "test_dynamo_only": ({5: "dynamo", 17: "dynamo", 30: "dynamo"}, ["dynamo"]),
    "test_dynamo_and_linux": ({5: "dynamo", 17: "linux", 30: "dynamo"}, ["linux"]),
    "test_inductor_only": ({5: "inductor", 17: "inductor", 30: "rocm_inductor"}, ["inductor"]),
    "test_dynamo_and_inductor": ({5: "dynamo", 17: "inductor", 30: "dynamo"}, ["dynamo", "inductor"]),
    "test_inductor_and_aarch64": ({5: "inductor", 17: "aarch64", 30: "inductor"}, ["linux"]),
    "test_rocm_only": ({5: "rocm", 17: "rocm", 30: "rocm"}, ["rocm"]),
    "test_rocm_and_dynamo": ({5: "rocm", 17: "dynamo", 30: "rocm"}, ["dynamo", "rocm"]),
    "test_win_and_dynamo": ({5: "win", 17: "dynamo", 30: "win"}, ["dynamo", "win"]),
}


def test_a_flake_of_dynamo_or_inductor_jobs_disables_the_test_there_not_on_all_of_linux(tmp_path):
    """A test flaky only under dynamo_wrapped was disabled on `linux`, hiding it from every Linux
    job (default, distributed, CUDA, ...) where PyTorch's bot hides it from dynamo jobs alone."""
    platforms = published_platforms(tmp_path, {t: flakes for t, (flakes, _) in BOT_PLATFORMS.items()}, {})
    assert platforms == {t: want for t, (_, want) in BOT_PLATFORMS.items()}


def test_the_issue_of_a_test_flaky_only_under_dynamo_says_platforms_dynamo(tmp_path, httpserver):
    fake = FakeIssueTracker(httpserver)
    lake, day = verdict(tmp_path, {"test_dynamo_only": BOT_PLATFORMS["test_dynamo_only"][0]}, {})
    wanted = wanted_tests(flaky_rows(lake, day), {})
    assert [(w.test, w.platforms, w.flaked) for w in wanted] == [
        (pytorch_key("TestX", "test_dynamo_only"), ["dynamo"], ["dynamo"])]
    gh = GitHubResource(api_url=httpserver.url_for(""), token="t0ken", search_interval_s=0.0,
                        write_interval_s=0.0, backoff_base_s=0.0)
    report = file_disabled_issues(IssueTracker(gh, "pytorch/pytorch"), lake, day, wanted, {}, ["skipped"], 10, "run-1")
    assert [r["action"] for r in report.rows] == ["created"]
    (issue,) = fake.issues.values()
    assert issue["body"].startswith("Platforms: dynamo\n")
