"""The dry-run disabled list names platforms as PyTorch's runner names them, from real job names
through the verdict to the published file.

PyTorch's runner drops every platform name of an entry it does not know and disables a test whose
list ends empty everywhere, so a name of this project's own (its job-name parser calls aarch64 and
s390x jobs `linux-aarch64` and `s390x`) would disable an aarch64-only flake on Windows and macOS.
"""

import json

from test_flaky import History

from resources.lake import Lake
from resources.storage import Store
from torchci_assets.derived.flakiness.flaky import build_flaky_tests
from torchci_assets.derived.flakiness.issue_text import PYTORCH_PLATFORMS
from torchci_assets.derived.flakiness.lists import DISABLED_TESTS_PATH, publish_disabled_tests, pytorch_key
from torchci_assets.ingest.jobnames import parse_job_name

# real job names of PyTorch's trunk and pull workflows
JOB_NAMES = {
    "linux": "linux-jammy-py3.10-gcc11 / test (default, 1, 5, linux.4xlarge)",
    "aarch64": "linux-jammy-aarch64-py3.10 / test (default, 1, 3, linux.arm64.2xlarge)",
    "win": "win-vs2022-cpu-py3 / test (default, 1, 3, windows.4xlarge.nonephemeral)",
}


def config(which: str) -> tuple[str, str, str]:
    """(build_env, test_config, platform) as the ingest reads them off the job's name."""
    job = parse_job_name(JOB_NAMES[which])
    return job.build_env, job.test_config, job.platform


def published_platforms(tmp_path, flakes: dict[str, dict[int, str]], absent: dict[str, set[str]]) -> dict:
    """Forty main commits, each run on every config of JOB_NAMES; `flakes[test]` maps a commit to
    the config where the test flaked (a rerun passed), `absent[test]` the configs that never ran
    it. Returns the published list's platforms by test name."""
    tests = sorted(flakes)
    h = History(tests)
    for commit in range(40):
        for which in JOB_NAMES:
            outcomes = {t: "flake" for t in tests if flakes[t].get(commit) == which}
            outcomes.update({t: "absent" for t in tests if which in absent.get(t, set())})
            h.run(commit, config(which), outcomes)
    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    day = h.build(lake)[-1]
    build_flaky_tests(lake, day, 14)
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
