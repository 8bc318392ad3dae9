"""Dr. CI's classes where PyTorch's Dr. CI (test-infra's torchci/lib/drciUtils.ts and
pages/api/drci/drci.ts) decides by the job's name or its log's line: a step cancelled by its
timeout is a cancellation to retry, lint is never the trunk's or a flake, and the jobs it never calls
flaky (builds, docs, backwards_compat, ...) are not FLAKY here either, nor INFRA by their log.

The log lines are those the project's log classifier finds in PyTorch's real CI logs
(tests/data/log-classifier/fixtures), with its own rules and with PyTorch's ruleset; the end-to-end
cases run Dr. CI over a hand-made lake, merge bases from a real HTTP server on 127.0.0.1 playing
GitHub's compare API (fake_github_pulls.py).
"""

import datetime as dt
import re
from pathlib import Path

import pytest
from fake_github_pulls import FakePullRequests
from hud_lake import DAY, REPO, T0, History, sha
from test_drci import BASE, BROKEN, GROUP, MAIN, T1, T2, failing_job, flaky, gh, trunk

from resources.lake import Lake
from torchci_assets.derived.drci import classify as c
from torchci_assets.derived.drci.build import build_comments
from torchci_assets.derived.drci.comment import NOT_CLASSIFIED, Head, render
from torchci_assets.derived.failures.classifier import classify_bytes
from torchci_assets.derived.failures.rules import DEFAULT_RULES_PATH, load_ruleset
from torchci_assets.derived.hud.health import build_commit_health, build_pr_jobs

DATA = Path(__file__).parent / "data" / "log-classifier"
RULESETS = {"own rules": DEFAULT_RULES_PATH, "PyTorch's ruleset": DATA / "pytorch-ruleset.toml"}
PR_HEAD = "cd" * 20
BUILD_GROUP = "pull / linux-jammy-py3.10-gcc11 / build"
LINT_GROUP = "Lint / lintrunner-noclang / linux-job"


def classified(fixture: str, rules: Path = DEFAULT_RULES_PATH):
    """The log classifier's match in one of PyTorch's real logs (the fixture's in-band markers removed:
    they are not part of the log)."""
    text = (DATA / "fixtures" / fixture).read_text()
    lines = [line.removeprefix("#=MATCH=# ").replace("‹", "").replace("›", "")
             for line in text.split("\n") if not line.startswith("#=SOURCE=#")]
    return classify_bytes("\n".join(lines).encode(), load_ruleset(rules))


def classified_line(fixture: str, rules: Path = DEFAULT_RULES_PATH) -> str:
    """The line the log classifier finds in one of PyTorch's real logs, as `job_failure` keeps it."""
    return classified(fixture, rules).line


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


# ---- builds, docs and the other jobs upstream never calls flaky: never INFRA by their log ----------

NEVER_FLAKY = [("pull", "linux-jammy-py3.10-gcc11 / build"), ("pull", "linux-docs / build-docs-python-false"),
               ("pull", "linux-jammy-py3.10-gcc11 / test (backwards_compat, 1, 1, linux.2xlarge)"),
               ("linux-binary-manywheel", "manywheel-py3_14t-rocm7_2-build / build")]
# real logs whose line this project's log classifier calls infrastructure (its log_classifier.infra_rules)
INFRA_LOGS = ("docker_manifest_unknown.txt", "gha_cancellation_shutdown.txt")
# the shard numbers job_identities.sql drops from a job's name to make its group
SHARDS = re.compile(r", \d+, \d+(,|\))")


def infra_by_log(workflow: str, name: str, fixture: str, **kw) -> c.HeadJob:
    """A failing job whose log's line an infra rule matched (`pr_jobs`' infra class, reason `log`), in the
    job group `pr_jobs` gives it (shard numbers dropped)."""
    group = workflow + " / " + SHARDS.sub(r"\1", name)
    return c.HeadJob(name, group, "failure", "infra", job_id=91, run_id=92, workflow=workflow, infra_reason="log",
                     failure_line=classified_line(fixture), **kw)


@pytest.mark.parametrize("fixture", INFRA_LOGS)
@pytest.mark.parametrize("workflow, name", NEVER_FLAKY)
def test_a_build_or_docs_job_whose_log_looks_like_infrastructure_is_classed_as_upstream(workflow, name, fixture):
    """PyTorch's Dr. CI asks the jobs it never calls flaky (EXCLUDED_FROM_FLAKINESS) only whether main
    failed alike and whether the merge base ran them, before any of its infra checks: a build's log that
    looks like infrastructure may be the code's (the real manywheel log: the workflow pulls an image,
    python:3.14t, that does not exist), so it is the trunk's, unclassified, cancelled or the pull request's."""
    from torchci_assets.config import DEFAULT_INFRA_RULES

    assert classified(fixture).rule in DEFAULT_INFRA_RULES
    job = infra_by_log(workflow, name, fixture)
    assert c.excluded(job, c.EXCLUDED_FROM_FLAKINESS) and not c.excluded(job, c.EXCLUDED_FROM_BROKEN_TRUNK)
    v = c.classify(job, trunk({}), c.Flaky())
    assert (v.cls, v.evidence) == (c.NEW, "")
    on_main = c.classify(job, trunk({BASE: [(job.job_group, job.failure_line)]}), c.Flaky())
    assert (on_main.cls, on_main.main.sha) == (c.BROKEN_TRUNK, BASE)
    assert c.classify(job, base_ran(), c.Flaky()).cls == c.UNCLASSIFIED
    assert c.classify(infra_by_log(workflow, name, fixture, cancelled=True), trunk({}), c.Flaky()).cls == c.CANCELLED
    # a test job with the same log is the infrastructure's, as before (upstream would call it flaky)
    test = infra_by_log("pull", "linux-jammy-py3.10-gcc11 / test (default, 1, 5, linux.4xlarge)", fixture)
    assert c.classify(test, trunk({}), c.Flaky()).cls == c.INFRA


@pytest.mark.parametrize("reason", ["no-test-results", "failed-outside-tests", "mass-failure", "shared-message"])
def test_a_backwards_compat_job_is_not_infra_by_what_its_tests_reported(reason):
    """backwards_compat is a test job upstream never calls flaky: no test result, or a failure outside the
    tests, is no more an excuse for it than an infra-looking log."""
    name = "linux-jammy-py3.10-gcc11 / test (backwards_compat, 1, 1, linux.2xlarge)"
    bc = c.HeadJob(name, "pull / linux-jammy-py3.10-gcc11 / test", "failure", "infra", workflow="pull",
                   test_config="backwards_compat", infra_reason=reason)
    assert c.classify(bc, trunk({}), c.Flaky()).cls == c.NEW
    default = failing_job(failure_class="infra", infra_reason=reason)
    assert c.classify(default, trunk({}), c.Flaky()).cls == c.INFRA


def test_an_abandoned_build_stays_infra_unlike_a_failed_one():
    """A job without a conclusion for 36 hours never ran to a failure: upstream counts it pending (never the
    pull request's), so it is INFRA here for builds and docs too, never NEW, nor BROKEN TRUNK by whatever
    main's build failed with (it has no line to compare)."""
    build = c.HeadJob("linux-jammy-py3.10-gcc11 / build", BUILD_GROUP, "failure", "infra", workflow="pull",
                      infra_reason="abandoned")
    for at_base in (trunk({}), trunk({BASE: [(BUILD_GROUP, "ninja: build stopped: subcommand failed.")]}), base_ran()):
        v = c.classify(build, at_base, c.Flaky())
        assert (v.cls, v.evidence) == (c.INFRA, "no conclusion for 36 hours: abandoned")


@pytest.mark.parametrize("cancelled", [False, True])
def test_an_abandoned_lint_job_is_infra_as_an_abandoned_build_is(cancelled):
    """Lint goes straight to CANCELLED or NEW, before any infra check, as upstream sets it aside; but an
    abandoned lint job never concluded either, which upstream counts pending like any other: telling the
    author to fix a lint error that was never reported (NEW) is wrong, so it is INFRA, as a build is.
    A lint job failing on an infra-looking line stays the pull request's."""
    lint = c.HeadJob("lintrunner-noclang / linux-job", LINT_GROUP, "failure", "infra", workflow="Lint",
                     infra_reason="abandoned", cancelled=cancelled)
    for at_base in (trunk({}), trunk({BASE: [(LINT_GROUP, "Lint for torch/foo.py")]})):
        v = c.classify(lint, at_base, c.Flaky())
        assert (v.cls, v.evidence) == (c.INFRA, "no conclusion for 36 hours: abandoned")
    by_log = c.HeadJob("lintrunner-noclang / linux-job", LINT_GROUP, "failure", "infra", workflow="Lint",
                       infra_reason="log", cancelled=cancelled)
    assert c.classify(by_log, trunk({}), c.Flaky()).cls == (c.CANCELLED if cancelled else c.NEW)


def test_a_build_failing_on_an_infra_looking_line_reaches_the_comment_as_new(tmp_path):
    """Through the lake: the manywheel build's real line is an infra rule's (`job_failure.infra`), yet the
    comment lists the build as the pull request's new failure; a test job failing so stays INFRA."""
    from resources.github import GitHubResource

    h = History()
    build, test = "manywheel-py3_14t-rocm7_2-build / build", "linux-jammy / test (default, 1, 2, linux.4xlarge)"
    for i in (1, 2):
        for name, config in ((build, None), (test, "default")):
            h.job(h.push(i, T0.replace(hour=8 + i)), name, "success", run_id=10 * i, created=T0.replace(hour=8 + i),
                  test_config=config)
    _pull_request_50(h)
    line = classified_line("docker_manifest_unknown.txt")
    for name, config, job_id in ((build, None, 5001), (test, "default", 5002)):
        h.job(PR_HEAD, name, "failure", run_id=500, branch="u/50", test_config=config, job_id=job_id)
        h.add("job_failure", DAY, job_id=job_id, run_attempt=1, infra=True, line=line)
    row = _comment(tmp_path, h, GitHubResource(api_url="http://127.0.0.1:9"))
    assert {j["job_id"]: j["class"] for j in row["jobs"]} == {5001: c.NEW, 5002: c.INFRA}
    assert (row["new"], row["infra"]) == (1, 1) and "## :x: 1 New Failure, 1 Unrelated Failure\n" in row["body"]


# ---- a label that suppresses a job's failure (SUPPRESSED_JOB_BY_LABELS) --------------------------

BC_LINTER = c.HeadJob("bc_linter", "BC Lint / bc_linter", "failure", "new", job_id=81, run_id=41, workflow="BC Lint",
                      failure_line="##[error]Process completed with exit code 1.")


def test_a_bc_linter_failure_under_a_suppressing_label_is_flaky_and_says_which_label():
    """PyTorch's Dr. CI: a pull request labelled `suppress-bc-linter` or `suppress-api-compatibility-check`
    breaks compatibility on purpose, so bc_linter's failure is not for its author to fix (FLAKY, with
    the label named); the rule is the job's own name, exactly, and comes before every other class."""
    labels = c.suppressing_labels(REPO, ["module: nn", "suppress-bc-linter"])
    v = c.classify(BC_LINTER, trunk({}), c.Flaky(), labels=labels)
    assert (v.cls, v.evidence) == (c.FLAKY, "suppressed by suppress-bc-linter")
    both = c.suppressing_labels(REPO, ["suppress-api-compatibility-check", "suppress-bc-linter"])
    assert c.classify(BC_LINTER, trunk({}), c.Flaky(), labels=both).evidence == \
        "suppressed by suppress-bc-linter, suppress-api-compatibility-check"  # upstream's list order
    # without the label it is a lint failure like any: the pull request's own
    assert c.classify(BC_LINTER, trunk({}), c.Flaky(), labels=c.suppressing_labels(REPO, ["module: nn"])).cls == c.NEW
    # the label silences that job only, and before an UNSTABLE mark or a cancellation
    assert c.classify(failing_job(), trunk({}), c.Flaky(), labels=labels).cls == c.NEW
    cancelled = c.HeadJob("bc_linter", "BC Lint / bc_linter", "failure", "new", workflow="BC Lint", cancelled=True)
    assert c.classify(cancelled, trunk({}), c.Flaky(), {"BC Lint / bc_linter": ["x", 1, ""]}, labels).cls == c.FLAKY
    # as upstream, only in pytorch/pytorch (its check is the repository's name)
    assert c.suppressing_labels("pytorch/vision", ["suppress-bc-linter"]) == ()
    text = render(Head(REPO, 50, PR_HEAD, BASE), [v], 0)
    assert "## :white_check_mark: You can merge normally! (1 Unrelated Failure)\n" in text
    assert "* [BC Lint / bc_linter](https://github.com/pytorch/pytorch/actions/runs/41/job/81) (suppressed by " \
        "suppress-bc-linter)\n" in text


def test_a_label_added_after_the_failure_reaches_the_comment_through_the_lake(tmp_path):
    """The label comes with a `labeled` webhook after BC Lint failed: the pull request's latest
    labels (pr_jobs keeps them) suppress it; the label removed again, the failure is NEW again."""
    from resources.github import GitHubResource

    def history(labels_later: list[str]) -> History:
        h = History()
        for i in (1, 2):
            h.job(h.push(i, T0.replace(hour=8 + i)), "bc_linter", "success", workflow="BC Lint", run_id=10 * i,
                  created=T0.replace(hour=8 + i))
        _pull_request_50(h)
        h.add("pull_request", DAY, repo=REPO, number=50, state="open", head_sha=PR_HEAD, head_ref="u/50",
              base_ref="main", labels=labels_later, merged=None, updated_at=T0.replace(hour=12),
              received_at=T0.replace(hour=12))
        h.job(PR_HEAD, "bc_linter", "failure", workflow="BC Lint", run_id=500, branch="u/50",
              created=T0.replace(hour=10))
        return h

    dry = GitHubResource(api_url="http://127.0.0.1:9")
    row = _comment(tmp_path / "labelled", history(["suppress-api-compatibility-check"]), dry)
    assert (row["new"], row["flaky"]) == (0, 1)
    assert "You can merge normally! (1 Unrelated Failure)" in row["body"]
    assert "(suppressed by suppress-api-compatibility-check)" in row["body"]
    row = _comment(tmp_path / "unlabelled", history([]), dry)
    assert (row["new"], row["flaky"]) == (1, 0) and "suppressed" not in row["body"]


# ---- a failure of a job that did not run at the merge base (UNCLASSIFIED) --------------------------


def base_ran(*names: str) -> c.Trunk:
    """Main around BASE, whose own jobs (`workflow / job` as GitHub names them) are `names`."""
    t = trunk({})
    t.base_jobs = frozenset(c.base_name(n) for n in names)
    return t


def test_a_failure_of_a_job_the_merge_base_never_ran_is_unclassified_not_new():
    """PyTorch's Dr. CI: with nothing to compare against, it cannot tell the pull request's failure from
    one main has too, and says so (UNCLASSIFIED) rather than blaming the pull request. Shard numbers and
    the runner do not make another job (PyTorch's `lf.` runners on a pull request, plain ones on main)."""
    job = failing_job([(T1, BROKEN)], name="linux-jammy-py3.10-gcc11 / test (default, 2, 5, lf.linux.4xlarge)")
    ran = base_ran("pull / linux-jammy-py3.10-gcc11 / test (default, 1, 5, linux.4xlarge)")
    assert c.classify(job, ran, c.Flaky()).cls == c.NEW
    v = c.classify(job, base_ran("pull / linux-jammy-py3.10-gcc11 / build"), c.Flaky())
    assert (v.cls, v.evidence) == (c.UNCLASSIFIED, c.NOT_AT_MERGE_BASE)
    # the merge base's jobs unknown (not among main's commits the lake read): NEW, as before
    assert c.classify(job, trunk({}), c.Flaky()).cls == c.NEW
    # a cancellation there is unclassified too (upstream splits cancelled jobs out of the new ones only)
    cancelled = failing_job(name=job.name, cancelled=True)
    assert c.classify(cancelled, base_ran(), c.Flaky()).cls == c.UNCLASSIFIED
    # a known flake and an unstable mark still come first; lint is never unclassified
    flake = "RuntimeError: NCCL communicator was aborted on rank 1"
    assert c.classify(failing_job([(T1, flake)]), base_ran(), flaky((T1, flake, MAIN[1], "main"))).cls == c.FLAKY
    lint = c.HeadJob("lintrunner-noclang / linux-job", "Lint / lintrunner-noclang / linux-job", "failure", "new",
                     workflow="Lint")
    assert c.classify(lint, base_ran(), c.Flaky()).cls == c.NEW


def test_a_generic_exit_code_line_keeps_a_job_new_unless_it_is_never_called_flaky():
    """Upstream's order: a job it never calls flaky (a build) is unclassified as soon as it is not main's
    failure; any other is first kept NEW when its line only says a step failed (its
    EXCLUDED_FROM_SIMILARITY_POST_PROCESSING)."""
    exit_code = "##[error]Process completed with exit code 1."
    test = failing_job(failure_line=exit_code)
    build = c.HeadJob("linux-jammy-py3.10-gcc11 / build", BUILD_GROUP, "failure", "new", workflow="pull",
                      failure_line=exit_code)
    assert (c.classify(test, base_ran(), c.Flaky()).cls, c.classify(build, base_ran(), c.Flaky()).cls) == \
        (c.NEW, c.UNCLASSIFIED)
    test.failure_line = "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert c.classify(test, base_ran(), c.Flaky()).cls == c.UNCLASSIFIED


def test_the_header_and_the_section_say_unclassified_as_pytorchs_dr_ci():
    job = failing_job([(T1, BROKEN)])
    unknown = c.Verdict(job, c.UNCLASSIFIED, c.NOT_AT_MERGE_BASE)
    new = c.Verdict(failing_job([(T2, BROKEN)], name="linux-jammy / test (default, 2, 5, linux.4xlarge)"), c.NEW)
    text = render(Head(REPO, 50, PR_HEAD, BASE), [new, unknown], 0)
    assert "\n## :x: 1 New Failure, 1 Unclassified Failure\n" in text
    assert ("<details open><summary><b>UNCLASSIFIED FAILURE</b> - DrCI could not classify the following job because "
            "the workflow did not run on the merge base. The failure may be pre-existing on trunk or introduced by "
            "this PR:</summary>") in text
    assert f"({c.NOT_AT_MERGE_BASE}) ({NOT_CLASSIFIED})\n" in text
    assert text.index("NEW FAILURE") < text.index("UNCLASSIFIED FAILURE")
    # alone, or beside unrelated failures: a failure status, never "No Failures" nor "You can merge normally!"
    alone = render(Head(REPO, 50, PR_HEAD, BASE), [unknown, unknown], 1)
    assert "\n## :x: 1 Pending, 2 Unclassified Failures\n" in alone and ":green_heart:" not in alone
    assert "UNCLASSIFIED FAILURES</b> - DrCI could not classify the following jobs" in alone
    flaky_one = c.Verdict(failing_job(), c.FLAKY, "suppressed by suppress-bc-linter")
    assert "\n## :x: 1 Unrelated Failure, 1 Unclassified Failure\n" in render(Head(REPO, 50, PR_HEAD, BASE),
                                                                             [flaky_one, unknown], 0)


def periodic_on_main_and_pr_50() -> History:
    """Main's `pull` jobs run on every commit; `periodic` ran (and failed) on sha(8) only. Pull request 50,
    branched at sha(5), fails one `pull` test shard on a runner of its own, and the periodic job."""
    h = History()
    for i in range(1, 9):
        at = T0 + dt.timedelta(hours=i)
        h.push(i, at)
        h.job(sha(i), "linux-jammy / build", "success", run_id=10 * i, created=at)
        for shard in (1, 2):
            h.job(sha(i), f"linux-jammy / test (default, {shard}, 2, linux.4xlarge)", "success", run_id=10 * i,
                  created=at)
    h.job(sha(8), "linux-jammy / test (slow, 1, 1, linux.4xlarge)", "failure", workflow="periodic", run_id=88,
          created=T0 + dt.timedelta(hours=8))
    _pull_request_50(h)
    at = T0 + dt.timedelta(hours=9)
    h.job(PR_HEAD, "linux-jammy / test (default, 2, 2, lf.linux.4xlarge)", "failure", run_id=500, branch="u/50",
          created=at, job_id=5001)
    h.job(PR_HEAD, "linux-jammy / test (slow, 1, 1, linux.4xlarge)", "failure", workflow="periodic", run_id=501,
          branch="u/50", created=at, job_id=5002)
    return h


def test_a_job_the_merge_base_never_ran_reaches_the_comment_and_the_hud_as_unclassified(tmp_path, httpserver, fake):
    """Through the lake: the merge base's jobs are main's commit_health rows for it. The HUD's page, which
    carries the comment, shows the unclassified job as a failure of the pull request's, not as broken on
    main (main's periodic job failed three commits after the merge base, when the pull request's ran)."""
    from resources.storage import Store
    from torchci_assets.derived.site.site import publish_site

    fake.merge_bases[PR_HEAD] = sha(5)
    row = _comment(tmp_path, periodic_on_main_and_pr_50(), gh(httpserver))
    assert (row["merge_base"], row["new"], row["unclassified"]) == (sha(5), 1, 1)
    assert "\n## :x: 1 New Failure, 1 Unclassified Failure\n" in row["body"]
    assert {j["job_id"]: j["class"] for j in row["jobs"]} == {5001: c.NEW, 5002: c.UNCLASSIFIED}
    lake = Lake.at(str(tmp_path / "lake"))
    publish_site(lake, Store(str(tmp_path / "out")), DAY, REPO)
    page = (tmp_path / "out" / "hud" / "pr" / "50.html").read_text()
    table = re.search(r'<table class="list" id="jobs">.*?</table>', page).group(0)
    shown = {int(job): css for css, job in re.findall(r'<b class="(\w+)">.*?/job/(\d+)"', table)}
    assert shown == {5001: "new", 5002: "new"}
