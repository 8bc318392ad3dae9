"""Dr. CI's classes where PyTorch's Dr. CI (test-infra's torchci/lib/drciUtils.ts and
pages/api/drci/drci.ts) decides by the job's name or its log's line: a step cancelled by its
timeout is a cancellation to retry, lint is never the trunk's or a flake, and the jobs it never calls
flaky (builds, docs, backwards_compat, ...) are not FLAKY here either.

The log lines are those the project's log classifier finds in PyTorch's real CI logs
(tests/data/log-classifier/fixtures), with its own rules and with PyTorch's ruleset; the end-to-end
cases run Dr. CI over a hand-made lake, merge bases from a real HTTP server on 127.0.0.1 playing
GitHub's compare API (fake_github_pulls.py).
"""

from pathlib import Path

import pytest
from fake_github_pulls import FakePullRequests
from hud_lake import DAY, REPO, T0, History, sha
from test_drci import BASE, BROKEN, GROUP, MAIN, T1, T2, failing_job, flaky, gh, trunk

from resources.lake import Lake
from torchci_assets.derived.drci import classify as c
from torchci_assets.derived.drci.build import build_comments
from torchci_assets.derived.failures.classifier import classify_bytes
from torchci_assets.derived.failures.rules import DEFAULT_RULES_PATH, load_ruleset
from torchci_assets.derived.hud.health import build_commit_health, build_pr_jobs

DATA = Path(__file__).parent / "data" / "log-classifier"
RULESETS = {"own rules": DEFAULT_RULES_PATH, "PyTorch's ruleset": DATA / "pytorch-ruleset.toml"}
PR_HEAD = "cd" * 20
LINT_GROUP = "Lint / lintrunner-noclang / linux-job"


def classified_line(fixture: str, rules: Path = DEFAULT_RULES_PATH) -> str:
    """The line the log classifier finds in one of PyTorch's real logs, as `job_failure` keeps it
    (the fixture's in-band markers removed: they are not part of the log)."""
    text = (DATA / "fixtures" / fixture).read_text()
    lines = [line.removeprefix("#=MATCH=# ").replace("‹", "").replace("›", "")
             for line in text.split("\n") if not line.startswith("#=SOURCE=#")]
    return classify_bytes("\n".join(lines).encode(), load_ruleset(rules)).line


@pytest.fixture
def fake(httpserver):
    return FakePullRequests(httpserver, REPO)


def _comment(tmp_path, h: History, github) -> dict:
    """Dr. CI's row of the only pull request of `h` (pull_request webhooks and jobs written by hand)."""
    now = T0.replace(hour=20)
    lake = Lake.at(str(tmp_path / "lake"))
    h.write(lake)
    build_commit_health(lake, DAY, REPO, ("refs/heads/main",), min_groups=1, now=now)
    build_pr_jobs(lake, DAY, REPO, now=now)
    return build_comments(lake, github, DAY, REPO, now=now).rows[0]


def _pull_request_50(h: History) -> None:
    h.add("pull_request", DAY, repo=REPO, number=50, state="open", head_sha=PR_HEAD, head_ref="u/50",
          base_ref="main", labels=[], merged=None, updated_at=T0, received_at=T0)


# ---- a step cancelled by its timeout ---------------------------------------------------------


@pytest.mark.parametrize("rules", RULESETS.values(), ids=RULESETS.keys())
def test_a_job_failed_by_a_step_cancelled_on_timeout_is_cancelled_not_new(rules):
    """GitHub ends a step that exceeds its timeout with `##[error]The operation was canceled.` and the
    job with conclusion `failure`: PyTorch's Dr. CI lists such a job with the cancelled ones, to
    retry (CANCELLED_STEP_ERROR among the log classifier's captures), never as the PR's failure."""
    line = classified_line("gha_operation_canceled.txt", rules)
    assert line == "##[error]The operation was canceled."
    build = c.HeadJob("macos-arm64-binary-wheel / wheel-py3_14t-cpu-build", "pull / macos / build", "failure",
                      "new", job_id=90370824564, run_id=30387636235, workflow="pull", failure_line=line)
    assert c.classify(build, trunk({}), c.Flaky()).cls == c.CANCELLED
    # as any failure, it is the trunk's where main's same job failed the same way (same conclusion, same line)
    on_main = trunk({BASE: [(build.job_group, line)]})
    assert c.classify(build, on_main, c.Flaky()).cls == c.BROKEN_TRUNK
    # only that line: a job failed otherwise is still the pull request's own failure
    timed_out = failing_job(failure_line=classified_line("gha_timeout.txt", rules))
    assert c.classify(timed_out, trunk({}), c.Flaky()).cls == c.NEW


def test_a_step_cancelled_on_timeout_reaches_the_comment_as_a_cancelled_job(tmp_path):
    from resources.github import GitHubResource

    h = History()
    for i in (1, 2):
        h.job(h.push(i, T0.replace(hour=8 + i)), "linux-jammy / build", "success", run_id=10 * i,
              created=T0.replace(hour=8 + i))
    _pull_request_50(h)
    job = h.job(PR_HEAD, "linux-jammy / build", "failure", run_id=500, branch="u/50")
    h.add("job_failure", DAY, job_id=job, run_attempt=1, infra=False,
          line=classified_line("gha_operation_canceled.txt"))
    row = _comment(tmp_path, h, GitHubResource(api_url="http://127.0.0.1:9"))
    assert (row["new"], row["cancelled"]) == (0, 1)
    assert "## :x: 1 Cancelled Job\n" in row["body"] and "was cancelled. Please retry" in row["body"]
    assert "NEW FAILURE" not in row["body"]


# ---- jobs PyTorch's Dr. CI never matches against main or against flakes ----------------------------


@pytest.mark.parametrize("workflow, name", [("Lint", "lintrunner-noclang / linux-job"),
                                            ("BC Lint", "bc_linter"), ("pull", "LINT / quick-checks")])
def test_a_lint_failure_is_never_broken_trunk_nor_flaky(workflow, name):
    """PyTorch's Dr. CI (isExcludedFromBrokenTrunk): lint fails because of the code it reads, so main's
    lint failing too, even on the same line, does not make the pull request's lint error main's."""
    line = classified_line("lint_lintrunner.txt")
    lint = c.HeadJob(name, f"{workflow} / {name}", "failure", "new", job_id=8, run_id=4, workflow=workflow,
                     failure_line=line)
    v = c.classify(lint, trunk({BASE: [(lint.job_group, line)]}), c.Flaky())
    assert (v.cls, v.main) == (c.NEW, None)
    assert c.excluded(lint, c.EXCLUDED_FROM_BROKEN_TRUNK) and c.excluded(lint, c.EXCLUDED_FROM_FLAKINESS)
    cancelled = c.HeadJob(name, f"{workflow} / {name}", "failure", "new", workflow=workflow, cancelled=True)
    assert c.classify(cancelled, trunk({}), c.Flaky()).cls == c.CANCELLED


def test_jobs_never_called_flaky_upstream_are_not_flaky_but_can_be_broken_trunk():
    """PyTorch's EXCLUDED_FROM_FLAKINESS (backwards_compat, docs, builds, ...) are matched against main
    (BROKEN TRUNK) but never called flaky: a test of such a job failing like a known flake is NEW."""
    flake = "RuntimeError: NCCL communicator was aborted on rank 1"
    seen = flaky((T1, flake, MAIN[1], "main"))
    bc = failing_job([(T1, flake)], name="linux-jammy-py3.10-gcc11 / test (backwards_compat, 1, 1, linux.2xlarge)")
    assert c.classify(bc, trunk({}), seen).cls == c.NEW
    assert c.excluded(bc, c.EXCLUDED_FROM_FLAKINESS) and not c.excluded(bc, c.EXCLUDED_FROM_BROKEN_TRUNK)
    # matched against main as any job: its test failing alike at the merge base is BROKEN TRUNK
    assert c.classify(bc, trunk({BASE: [bc.job_group]}, {BASE: {(T1, flake)}}), seen).cls == c.BROKEN_TRUNK
    # but a known flake is no evidence for it there either: a test main does not share makes it NEW
    both = failing_job([(T2, BROKEN), (T1, flake)], name=bc.name)
    assert c.classify(both, trunk({BASE: [bc.job_group]}, {BASE: {T2}}), seen).cls == c.NEW
    assert c.classify(failing_job([(T2, BROKEN), (T1, flake)]), trunk({BASE: [GROUP]}, {BASE: {T2}}),
                      seen).cls == c.BROKEN_TRUNK
    default = failing_job([(T1, flake)])
    assert not c.excluded(default, c.EXCLUDED_FROM_FLAKINESS) and c.classify(default, trunk({}), seen).cls == c.FLAKY


def test_main_failing_lint_the_same_way_leaves_the_pull_requests_lint_failure_new(tmp_path, httpserver, fake):
    h = History()
    lint = classified_line("lint_lintrunner.txt")
    for i in (1, 2):
        job = h.job(h.push(i, T0.replace(hour=8 + i)), "lintrunner-noclang / linux-job",
                    "failure" if i == 1 else "success", workflow="Lint", run_id=10 * i,
                    created=T0.replace(hour=8 + i))
        if i == 1:
            h.add("job_failure", DAY, job_id=job, run_attempt=1, infra=False, line=lint)
    _pull_request_50(h)
    job = h.job(PR_HEAD, "lintrunner-noclang / linux-job", "failure", workflow="Lint", run_id=500, branch="u/50")
    h.add("job_failure", DAY, job_id=job, run_attempt=1, infra=False, line=lint)
    fake.merge_bases[PR_HEAD] = sha(1)
    row = _comment(tmp_path, h, gh(httpserver))
    assert row["merge_base"] == sha(1) and (row["new"], row["broken_trunk"]) == (1, 0)
    assert "## :x: 1 New Failure\n" in row["body"] and "BROKEN TRUNK" not in row["body"]
