"""Dr. CI: the classification of a head's failures, the comment, and posting it exactly once.

Classification and rendering are plain functions fed by hand-made jobs; posting, merge bases and
the lost-webhook refresh run against a real HTTP server on 127.0.0.1 playing GitHub's comments,
compare and Actions APIs (fake_github_pulls.py).
"""

import datetime as dt
import re
import threading

import pytest
from fake_github_issues import Scripted, json_response
from fake_github_pulls import FakePullRequests
from resources.github import GitHubResource
from resources.lake import Lake
from resources.storage import Store
from torchci_assets.derived.drci import classify as c
from torchci_assets.derived.drci.comment import MARKER_END, MARKER_START, Head, render
from torchci_assets.derived.drci.inputs import Main, PullRequest, flaky_for, index_sightings
from torchci_assets.derived.drci.merge_base import NO_CREDENTIALS, resolve
from torchci_assets.derived.drci.page import to_html, with_drci_section
from torchci_assets.derived.drci.post import StopPosting, upsert
from torchci_assets.derived.drci.publish import publish, publish_metadata
from torchci_assets.derived.drci.refresh import RefreshLimits, merge_rest_jobs, refresh_heads

TOKEN = "ghp_drcitest00000000000000000000000000"
REPO = "pytorch/pytorch"
GROUP = "pull / linux-jammy-py3.10-gcc11 / test (default, linux.4xlarge)"
BUILD = "pull / linux-jammy-py3.10-gcc11 / build"
MAIN = [f"{i:040x}" for i in range(1, 9)]  # main commits, oldest first
BASE = MAIN[3]
HEAD = "ab" * 20
TODAY = dt.date(2026, 11, 2)  # the publishing tests' day is today
T1 = "TestOps.test_add (test_ops.py)"
T2 = "TestNN.test_conv (test_nn.py)"


def failing_job(tests=(), name="linux-jammy-py3.10-gcc11 / test (default, 1, 5, linux.4xlarge)", failure_class="new",
                **kw):
    return c.HeadJob(name=name, job_group=GROUP, state="failure", failure_class=failure_class, job_id=7, run_id=3,
                     workflow="pull", build_env="linux-jammy-py3.10-gcc11", test_config="default",
                     tests=tuple(c.FailedTest(k, c.message_key(m)) for k, m in tests), **kw)


BROKEN = "AssertionError: False is not true"


def trunk(failing: dict[str, list[str]], tests: dict[str, set] | None = None) -> c.Trunk:
    """Main with `failing` groups per sha and failing tests per sha (default config): a test key
    fails with BROKEN, a (key, message) pair with its message."""
    def pairs(ts):
        return frozenset((t, c.message_key(BROKEN)) if isinstance(t, str) else (t[0], c.message_key(t[1])) for t in ts)
    main = Main(order=list(MAIN), failures={sha: [(g, 90, 9, "", False) if isinstance(g, str)
                                                  else (g[0], 90, 9, c.message_key(g[1]), False)
                                                  for g in groups] for sha, groups in failing.items()},
                tests={(sha, "linux-jammy-py3.10-gcc11", "default"): pairs(t) for sha, t in (tests or {}).items()})
    return main.trunk(BASE)


def flaky(*sightings):
    pr = PullRequest(1, HEAD, "open", "main", "gh/ada/1/head", None)
    return flaky_for(index_sightings([(t, c.message_key(m), branch, c.FlakySighting(sha, 5, 6))
                                      for t, m, sha, branch in sightings]), pr)


# ---- classification --------------------------------------------------------------------


def test_a_new_failure_in_a_test_flaky_elsewhere_with_another_message_is_new():
    job = failing_job([(T1, "RuntimeError: expected the fused kernel's output to be contiguous")])
    seen = flaky((T1, "AssertionError: Tensor-likes are not close!", MAIN[0], "main"))
    assert c.classify(job, trunk({}), seen).cls == c.NEW


def test_the_same_flaky_failure_seen_elsewhere_is_flaky_with_its_evidence():
    job = failing_job([(T1, "AssertionError: Tensor-likes are not close!\nMismatched elements: 3 / 64")])
    seen = flaky((T1, "AssertionError: Tensor-likes are not close!\nMismatched elements: 9 / 64", MAIN[0], "main"))
    v = c.classify(job, trunk({}), seen)
    assert (v.cls, v.sighting.sha) == (c.FLAKY, MAIN[0])


def test_every_failing_test_must_be_a_known_flake_for_the_job_to_be_flaky():
    job = failing_job([(T1, "AssertionError: Tensor-likes are not close!"), (T2, "AssertionError: boom")])
    seen = flaky((T1, "AssertionError: Tensor-likes are not close!", MAIN[0], "main"))
    assert c.classify(job, trunk({}), seen).cls == c.NEW


def test_the_same_failure_on_an_earlier_head_of_the_same_pull_request_is_no_evidence():
    job = failing_job([(T1, "AssertionError: Tensor-likes are not close!")])
    seen = flaky((T1, "AssertionError: Tensor-likes are not close!", MAIN[0], "gh/ada/1/head"),
                 (T1, "AssertionError: Tensor-likes are not close!", HEAD, None))
    assert c.classify(job, trunk({}), seen).cls == c.NEW


def test_each_pull_request_gets_the_first_sighting_off_its_branch_of_each_failure():
    """The rule, stated over every sighting (what a pull request's comment may cite for each test
    and message), against the index each comment looks its failures up in."""
    import random

    rng = random.Random(7)
    shas, branches = [f"{i:040x}" for i in range(6)], [None, "main", "gh/ada/1/head", "gh/bob/2/head"]
    rows = [(f"test_{rng.randrange(4)}", f"message {rng.randrange(3)}", rng.choice(branches),
             c.FlakySighting(rng.choice(shas), i, 1000 + i)) for i in range(60)]
    index = index_sightings(rows)
    for head_sha in shas[:3]:
        for head_ref in branches[1:]:
            pr = PullRequest(1, head_sha, "open", "main", head_ref, None)
            expected: dict = {}
            for test, message, branch, seen in rows:
                if seen.sha != head_sha and (branch is None or branch != head_ref):
                    expected.setdefault((test, message), seen)
            got = flaky_for(index, pr)
            assert dict(got.sightings) == expected and len(got.sightings) == len(expected)
            assert all(got.sightings.get(k) == v for k, v in expected.items())
            assert got.sightings.get(("test_9", "message 0")) is None
            assert got.tests == {t for t, _, _, _ in rows}


def test_broken_trunk_needs_the_same_group_and_every_failing_test_on_the_merge_base():
    job = failing_job([(T1, BROKEN)])
    v = c.classify(job, trunk({BASE: [GROUP]}, {BASE: {T1, T2}}), c.Flaky())
    assert (v.cls, v.main.sha, v.main.merge_base) == (c.BROKEN_TRUNK, BASE, True)
    # the merge base fails in that group, but with other tests: the PR's failure is its own
    assert c.classify(job, trunk({BASE: [GROUP]}, {BASE: {T2}}), c.Flaky()).cls == c.NEW
    # the test fails on main, but the group does not (it recovered on rerun): not broken
    assert c.classify(job, trunk({}, {BASE: {T1}}), c.Flaky()).cls == c.NEW
    # the test fails on the merge base with another message: the PR broke it another way
    assert c.classify(job, trunk({BASE: [GROUP]}, {BASE: {(T1, "RuntimeError: CUDA error")}}), c.Flaky()).cls == c.NEW


def test_broken_trunk_looks_at_commits_near_the_merge_base_only():
    job = failing_job([(T1, BROKEN)])
    near, far = MAIN[3 + c.NEAR_COMMITS], MAIN[3 + c.NEAR_COMMITS + 1]
    v = c.classify(job, trunk({near: [GROUP]}, {near: {T1}}), c.Flaky())
    assert (v.cls, v.main.distance) == (c.BROKEN_TRUNK, c.NEAR_COMMITS)
    assert c.classify(job, trunk({far: [GROUP]}, {far: {T1}}), c.Flaky()).cls == c.NEW


def test_a_build_failing_at_all_on_the_merge_base_is_broken_trunk_and_never_flaky():
    build = c.HeadJob(name="linux-jammy-py3.10-gcc11 / build", job_group=BUILD, state="failure", failure_class="new",
                      workflow="pull")
    assert c.classify(build, trunk({BASE: [BUILD]}), c.Flaky()).cls == c.BROKEN_TRUNK
    assert c.classify(build, trunk({BASE: [GROUP]}), c.Flaky()).cls == c.NEW
    # with both logs classified, the lines must agree: a compile error in another file is another failure
    build.failure_line = "FAILED: [code=1] caffe2/CMakeFiles/torch_cpu.dir/__/aten/src/ATen/native/Linear.cpp.o"
    there = [(BUILD, "FAILED: [code=1] caffe2/CMakeFiles/torch_cpu.dir/__/torch/csrc/jit/ir/ir.cpp.o")]
    assert c.classify(build, trunk({BASE: there}), c.Flaky()).cls == c.NEW
    assert c.classify(build, trunk({BASE: [(BUILD, build.failure_line)]}), c.Flaky()).cls == c.BROKEN_TRUNK


def test_a_known_flake_that_also_struck_near_the_merge_base_is_flaky_not_broken_trunk():
    # a test failing intermittently on one platform fails on main now and then too: main is not
    # broken (rebasing would not help), and the evidence is the flake's
    flake = "OSError: [WinError 1455] The paging file is too small for this operation to complete"
    job = failing_job([(T1, flake)])
    on_main = trunk({MAIN[4]: [GROUP]}, {MAIN[4]: {(T1, flake)}})
    v = c.classify(job, on_main, flaky((T1, flake, MAIN[1], "main")))
    assert (v.cls, v.sighting.sha, v.main) == (c.FLAKY, MAIN[1], None)
    # the same failure on main without the test being known flaky stays broken trunk
    assert c.classify(job, on_main, c.Flaky()).cls == c.BROKEN_TRUNK


def test_a_broken_test_beside_a_known_flake_in_one_job_is_broken_trunk():
    flake = "torch._dynamo.exc.InternalTorchDynamoError: KeyError: 'L__self__'"
    job = failing_job([(T1, BROKEN), (T2, flake)])
    seen = flaky((T2, flake, MAIN[0], "main"))
    v = c.classify(job, trunk({BASE: [GROUP]}, {BASE: {T1}}), seen)
    assert (v.cls, v.main.sha) == (c.BROKEN_TRUNK, BASE)
    # the second failure is not a known flake (another message): the job's failure is its own
    other = failing_job([(T1, BROKEN), (T2, "RuntimeError: the PR's own bug")])
    assert c.classify(other, trunk({BASE: [GROUP]}, {BASE: {T1}}), seen).cls == c.NEW
    # only flakes, none of them on main: flaky, never broken trunk
    assert c.classify(failing_job([(T2, flake)]), trunk({BASE: [GROUP]}, {BASE: {T1}}), seen).cls == c.FLAKY


def test_a_flake_that_passed_on_rerun_elsewhere_is_evidence_of_the_same_failure(tmp_path):
    """test_results keeps a test that failed and passed on rerun as passed, rerun_count > 0, with
    the failed try's message: the commonest sighting of a flake, read from the lake."""
    import pyarrow as pa
    from torchci_assets.derived.drci.inputs import load_flaky
    from resources.lake import connect

    day, nccl = "2026-11-02", "RuntimeError: NCCL communicator was aborted on rank 1"
    lake = Lake.at(str(tmp_path / "lake"))
    lake.write("flaky_tests", day, pa.Table.from_pylist(
        [{"file": "test_ops.py", "classname": "TestOps", "name": "test_add", "verdict": "flaky"}]))
    rows = [("passed", 1, nccl, MAIN[2], "main", 501), ("passed", 0, None, MAIN[3], "main", 502),
            ("passed", 2, "RuntimeError: another failure", MAIN[5], "main", 503), ("failed", 2, nccl, HEAD, "gh/ada/1/head", 504)]
    lake.write("test_results", day, pa.Table.from_pylist([
        {"file": "test_ops.py", "classname": "TestOps", "name": "test_add", "status": st, "rerun_count": n,
         "message": m, "head_sha": sha, "head_branch": br, "job_id": jid, "workflow_id": 9, "build_env": "linux-jammy",
         "test_config": "default"} for st, n, m, sha, br, jid in rows]))
    job = failing_job([(T1, nccl)])
    pr = PullRequest(1, HEAD, "open", "main", "gh/ada/1/head", None, jobs=[job])
    con = connect()
    try:
        sightings = load_flaky(con, lake, day, {1: pr})
    finally:
        con.close()
    v = c.classify(job, trunk({}), flaky_for(sightings, pr))
    assert (v.cls, v.sighting.sha, v.sighting.job_id) == (c.FLAKY, MAIN[2], 501)


def test_unstable_and_infra_come_first():
    assert c.classify(failing_job(name="linux / test (default, 1, 1, unstable)"), trunk({}), c.Flaky()).cls == c.UNSTABLE
    v = c.classify(failing_job(failure_class="infra", infra_reason="runner lost"), trunk({}), c.Flaky())
    assert (v.cls, v.evidence) == (c.INFRA, "runner lost")


def test_missing_reports_are_due_an_hour_after_the_run_ends_its_last_job_when_its_completion_was_not_heard():
    """A run heard running (its `completed` delivery late or lost): while one of its jobs on the head runs,
    the failed shard's reports are not due; once none does, they are an hour after its last job's end.
    Another run's pending job does not hold it."""
    t = dt.datetime(2026, 10, 5, 10, 0, tzinfo=dt.timezone.utc)

    def verdict(others: list[c.HeadJob], now: dt.datetime) -> str:
        jobs = [failing_job(failure_class="infra", infra_reason=c.NO_TEST_RESULTS, run_status="in_progress",
                            completed_at=t), *others]
        c.settle_runs(jobs)
        return c.classify(jobs[0], trunk({}), c.Flaky(), now=now).cls

    later = c.HeadJob("test (default, 3, 5)", GROUP, "success", job_id=8, run_id=3, completed_at=t + dt.timedelta(hours=2))
    running = c.HeadJob("test (default, 2, 5)", GROUP, "pending", job_id=9, run_id=3)
    elsewhere = c.HeadJob("test (default, 2, 5)", GROUP, "pending", job_id=9, run_id=4)
    assert verdict([running], t + dt.timedelta(hours=5)) == c.NEW
    assert verdict([later, elsewhere], t + dt.timedelta(hours=2, minutes=30)) == c.NEW
    assert verdict([later, elsewhere], t + dt.timedelta(hours=3)) == c.INFRA


def test_a_lint_job_is_the_pull_requests_even_when_its_failure_looks_like_infrastructure():
    """Upstream sends lint to the new failures before any other class but UNSTABLE (isExcludedFromBrokenTrunk
    comes before its infra checks): lint reads the code, so its failure is the code's to fix or retry."""
    lint = "lintrunner-noclang / linux-job"
    assert c.classify(failing_job(name=lint, failure_class="infra", infra_reason="log"), trunk({}), c.Flaky()).cls \
        == c.NEW
    assert c.classify(failing_job(name=lint, failure_class="infra", infra_reason="log", cancelled=True),
                      trunk({}), c.Flaky()).cls == c.CANCELLED
    # but one abandoned reported nothing of the code (test_drci_upstream.py)
    assert c.classify(failing_job(name=lint, failure_class="infra", infra_reason="abandoned", cancelled=True),
                      trunk({}), c.Flaky()).cls == c.INFRA


def pytorch_unstable() -> dict:
    from conftest import pytorch_json
    return pytorch_json("unstable-jobs.json")


@pytest.mark.parametrize("workflow,name,marked_by", [
    ("pull", "linux-jammy-py3_9-clang9-xla / test (xla, 1, 1, lf.linux.12xlarge)",
     "pull / linux-jammy-py3_9-clang9-xla / test (xla)"),
    # an entry without a config marks every test config of the environment (a prefix of the name)
    ("trunk-rocm-sandbox", "linux-jammy-rocm-py3.10 / test (distributed, 2, 3, linux.rocm.gpu.4)",
     "trunk-rocm-sandbox / linux-jammy-rocm-py3.10 / test"),
    ("trunk", "linux-jammy-rocm-py3.10-mi355 / test (default, 4, 6, linux.rocm.gpu.mi355.2)",
     "trunk / linux-jammy-rocm-py3.10-mi355 / test (default)"),
    ("Lint", "Lint URLs / linux-job", "Lint / Lint URLs / linux-job"),
    ("pull", "linux-jammy-py3_9-clang9-xla / build", None),        # the entry names its tests only
    ("trunk", "linux-jammy-rocm-py3.10-mi355 / test (inductor, 1, 2, linux.rocm.gpu.mi355.2)", None),
    ("trunk", "linux-jammy-rocm-py3.10 / test (default, 1, 6, linux.rocm.gpu.2)", None),
])
def test_jobs_are_matched_to_pytorchs_published_unstable_jobs_as_its_dr_ci_does(workflow, name, marked_by):
    job = failing_job(name=name)
    job.workflow = workflow
    hit = c.unstable_entry(job, pytorch_unstable())
    assert (hit[0] if hit else None) == marked_by
    v = c.classify(job, trunk({}), c.Flaky(), pytorch_unstable())
    assert v.cls == (c.UNSTABLE if marked_by else c.NEW)
    if marked_by:
        assert v.issue == pytorch_unstable()[marked_by][2] and v.evidence == f"UNSTABLE {marked_by}"


def test_an_unstable_mark_comes_before_every_other_class():
    entry = {"pull / linux-jammy-py3.10-gcc11": ["a-maintainer", "170001", "https://github.com/pytorch/pytorch/issues/170001",
                                                 "pull", "linux-jammy-py3.10-gcc11", ""]}
    broken = failing_job([(T1, BROKEN)])
    assert c.classify(broken, trunk({BASE: [GROUP]}, {BASE: {T1}}), c.Flaky()).cls == c.BROKEN_TRUNK
    assert c.classify(broken, trunk({BASE: [GROUP]}, {BASE: {T1}}), c.Flaky(), entry).cls == c.UNSTABLE
    assert c.classify(failing_job(failure_class="infra"), trunk({}), c.Flaky(), entry).cls == c.UNSTABLE
    build = c.HeadJob(name="linux-jammy-py3.10-gcc11 / build", job_group=BUILD, state="failure", workflow="pull")
    assert c.classify(build, trunk({}), c.Flaky(), entry).cls == c.UNSTABLE  # the environment's build too
    # PyTorch matches by substring: an entry naming `pull / env` also marks `pull / env-debug`, kept as it does
    other = c.HeadJob(name="linux-jammy-py3.10-gcc11-debug / build", job_group=BUILD, state="failure", workflow="pull")
    assert c.classify(other, trunk({}), c.Flaky(), entry).cls == c.UNSTABLE
    cuda = c.HeadJob(name="linux-jammy-cuda13.0-py3.10-gcc11 / build", job_group=BUILD, state="failure", workflow="pull")
    assert c.classify(cuda, trunk({}), c.Flaky(), entry).cls == c.NEW
    assert c.classify(cuda, trunk({}), c.Flaky(), {" ": entry["pull / linux-jammy-py3.10-gcc11"]}).cls == c.NEW


def test_a_malformed_unstable_list_is_reported_and_marks_nothing_it_cannot_read(tmp_path):
    from torchci_assets.derived.flakiness.job_issues import load_unstable
    from torchci_assets.derived.flakiness.job_issues import UNSTABLE_JOBS_PATH

    store, logs = Store(str(tmp_path / "out")), []
    assert load_unstable(store, logs.append) == {} and logs == []  # a dry run publishes none: not an error
    store.write_bytes(UNSTABLE_JOBS_PATH, b"{not json")
    assert load_unstable(store, logs.append) == {} and "not readable JSON" in logs[-1]
    store.write_bytes(UNSTABLE_JOBS_PATH, b'["pull / x"]')
    assert load_unstable(store, logs.append) == {} and "not a mapping" in logs[-1]
    store.write_bytes(UNSTABLE_JOBS_PATH, b'{"pull / a": ["u", "1", "https://x/1", "pull", "a", ""], "pull / b": 3, "": []}')
    assert list(load_unstable(store, logs.append)) == ["pull / a"] and "2 malformed entries" in logs[-1]


# ---- the comment -----------------------------------------------------------------------


def head(**kw):
    return Head(REPO, 123, HEAD, BASE, **kw)


def test_comment_header_counts_and_markers():
    new = c.Verdict(failing_job([(T1, "RuntimeError: x")]), c.NEW)
    infra = c.Verdict(failing_job(failure_class="infra", infra_reason="runner lost"), c.INFRA, "runner lost")
    body = render(head(), [new, infra], pending=2)
    assert body.startswith(MARKER_START + "\n") and body.endswith(MARKER_END)
    assert "## :x: 1 New Failure, 2 Pending, 1 Unrelated Failure\n" in body
    assert f"As of commit {HEAD} with merge base {BASE}:" in body
    assert "<b>NEW FAILURE</b> - The following job has failed:" in body
    assert f"(https://github.com/{REPO}/actions/runs/3/job/7)" in body
    assert "`TestOps.test_add (test_ops.py): RuntimeError: x`" in body  # no log line: the first failing test


def test_a_cancelled_job_is_listed_apart_to_retry_not_as_a_new_failure():
    """PyTorch's Dr. CI: `N Cancelled Job(s)` in the title (with the ❌), a CANCELLED section asking for a retry."""
    cancelled = c.classify(failing_job(cancelled=True), trunk({}), c.Flaky())
    # main failed the same job at the merge base: a cancelled job never ran to a result, so nothing shows it
    # would fail as main does (PyTorch's isSameFailure requires the same conclusion): still to retry
    on_base = c.classify(failing_job(cancelled=True), trunk({BASE: [GROUP]}), c.Flaky())
    assert (cancelled.cls, on_base.cls) == (c.CANCELLED, c.CANCELLED)
    infra = c.Verdict(failing_job(failure_class="infra", infra_reason="runner lost"), c.INFRA, "runner lost")
    body = render(head(), [cancelled, infra], pending=1)
    assert "## :x: 1 Cancelled Job, 1 Pending, 1 Unrelated Failure\n" in body and "NEW FAILURE" not in body
    assert "<details><summary><b>CANCELLED JOB</b> - The following job was cancelled. Please retry:</summary>" in body
    assert c.counts([cancelled, infra]) == {c.NEW: 0, c.BROKEN_TRUNK: 0, c.FLAKY: 0, c.UNSTABLE: 0, c.INFRA: 1,
                                            c.CANCELLED: 1, c.UNCLASSIFIED: 0, c.AWAITING_APPROVAL: 0}
    new = c.Verdict(failing_job([(T1, "RuntimeError: x")]), c.NEW)
    body = render(head(), [new, cancelled, cancelled], pending=0)
    assert "## :x: 1 New Failure, 2 Cancelled Jobs\n" in body
    assert "<b>CANCELLED JOBS</b> - The following jobs were cancelled. Please retry:" in body
    assert body.index("NEW FAILURE") < body.index("CANCELLED JOBS")
    # read from the REST API (a lost webhook): GitHub's conclusion says cancelled
    jobs = [c.HeadJob("linux / build", BUILD, "pending", workflow="pull")]
    merge_rest_jobs(jobs, [{"id": 5, "name": "pull"}], {5: [{"id": 51, "name": "linux / build", "workflow_name": "pull",
                                                             "status": "completed", "conclusion": "cancelled"}]})
    assert c.classify(jobs[0], trunk({}), c.Flaky()).cls == c.CANCELLED


def test_a_heads_jobs_read_from_the_rest_api_are_its_workflows_newest_runs_latest_attempts():
    """As PyTorch's Dr. CI reads them: an older run of a workflow on the head says nothing of it now,
    and a later attempt than the lake's (a higher job id: its webhook was lost) replaces the lake's."""
    name = "linux / test (default, 1, 2, linux.4xlarge)"
    stuck = c.HeadJob(name, GROUP, "pending", workflow="pull")
    listed = {200: [{"id": 2001, "name": name, "workflow_name": "pull", "status": "in_progress", "conclusion": None}],
              100: [{"id": 1001, "name": name, "workflow_name": "pull", "status": "completed", "conclusion": "failure"}]}
    merge_rest_jobs([stuck], [{"id": 200, "name": "pull"}, {"id": 100, "name": "pull"}], listed)
    assert stuck.state == "pending"  # run 100's failure is an older run's
    lint = c.HeadJob("lint / lintrunner", "pull / lint / lintrunner", "failure", failure_class="new", job_id=11,
                     run_id=300, workflow="pull")
    merge_rest_jobs([lint], [{"id": 300, "name": "pull"}],
                    {300: [{"id": 12, "name": "lint / lintrunner", "workflow_name": "pull", "status": "completed",
                            "conclusion": "success"}]})
    assert (lint.state, lint.job_id) == ("success", 12)  # its rerun passed; the lake had only attempt 1
    merge_rest_jobs([lint], [{"id": 300, "name": "pull"}],
                    {300: [{"id": 10, "name": "lint / lintrunner", "workflow_name": "pull", "status": "completed",
                            "conclusion": "failure"}]})
    assert (lint.state, lint.job_id) == ("success", 12)  # an earlier attempt never replaces a later one


def test_an_unstable_job_links_its_issue_and_a_url_that_could_break_the_comment_is_not_linked():
    job = failing_job(name="linux-jammy-py3.10-gcc11 / test (default, 1, 5, linux.4xlarge)")
    entry = ["a-maintainer", "170001", "https://github.com/pytorch/pytorch/issues/170001", "pull", "x", ""]
    v = c.classify(job, trunk({}), c.Flaky(), {"pull / linux-jammy-py3.10-gcc11": entry})
    body = render(head(), [v], pending=0)
    assert "## :white_check_mark: You can merge normally! (1 Unrelated Failure)" in body
    assert "([UNSTABLE pull / linux-jammy-py3.10-gcc11](https://github.com/pytorch/pytorch/issues/170001))" in body
    hostile = ["a", "1", "https://evil.example/x) [click](javascript:alert(1)", "pull", "x", ""]
    v = c.classify(job, trunk({}), c.Flaky(), {"pull / linux-jammy-py3.10-gcc11 / test [": hostile})
    assert v.cls == c.NEW  # "... / test [" is no prefix of "... / test (default)"
    v = c.classify(job, trunk({}), c.Flaky(), {"pull / linux-jammy-py3.10-gcc11": hostile})
    item = next(line for line in render(head(), [v], pending=0).splitlines() if line.startswith("* ["))
    assert item.endswith("(UNSTABLE pull / linux-jammy-py3.10-gcc11)") and "evil" not in item


def test_comment_without_failures_and_with_an_estimated_merge_base():
    body = render(head(merge_base_note=NO_CREDENTIALS), [], pending=0)
    assert "## :white_check_mark: No Failures\n" in body
    assert f"with merge base {BASE} ({NO_CREDENTIALS}):" in body
    only_unrelated = render(head(), [c.Verdict(failing_job(), c.FLAKY)], pending=0)
    assert "## :white_check_mark: You can merge normally! (1 Unrelated Failure)" in only_unrelated


def test_the_pr_page_shows_the_comment_text_escaped():
    job = failing_job(failure_line="<script>alert(1)</script> Error: `x` failed")
    body = render(head(), [c.Verdict(job, c.NEW)], pending=0)
    page = with_drci_section("<html><main><p>jobs</p></main></html>", body)
    assert "<script>" not in page and "&lt;script&gt;" in page
    text = re.sub(r"<[^>]+>", "", to_html(body))
    assert "❌ 1 New Failure" in text and f"As of commit {HEAD} with merge base {BASE}:" in text
    assert job.name in text
    assert page.index('<section id="drci">') < page.index("</main>")


# ---- posting ---------------------------------------------------------------------------


def gh(httpserver, **kw) -> GitHubResource:
    kw.setdefault("token", TOKEN)
    kw.update(backoff_base_s=0.01, search_interval_s=0, write_interval_s=0)
    client = GitHubResource(api_url=httpserver.url_for(""), **kw)
    client._sleep = lambda s: None
    return client


@pytest.fixture
def fake(httpserver):
    return FakePullRequests(httpserver, REPO)


def body(text="## :x: 1 New Failure"):
    return f"{MARKER_START}\n{text}\n{MARKER_END}"


def test_create_once_then_edit_only_when_the_body_changed(httpserver, fake):
    client = gh(httpserver)
    assert upsert(client, REPO, 5, body()).action == "created"
    assert upsert(client, REPO, 5, body()).action == "unchanged"
    assert fake.count("PATCH") == 0
    assert upsert(client, REPO, 5, body("## :white_check_mark: No Failures")).action == "edited"
    assert fake.bodies(5) == [body("## :white_check_mark: No Failures")]
    assert (fake.count("POST"), fake.count("PATCH")) == (1, 1)


def test_the_marker_is_found_over_paginated_comments(httpserver, fake):
    for i in range(230):
        fake.add_comment(9, f"LGTM {i}", user={"login": f"human{i}", "type": "User"})
    old = fake.add_comment(9, body("## :x: 2 New Failures"))
    posted = upsert(gh(httpserver), REPO, 9, body())
    assert (posted.action, posted.comment_id) == ("edited", old["id"])
    assert fake.count("GET", r"/issues/9/comments$") == 3  # 100 + 100 + 31
    assert fake.count("POST") == 0 and fake.bodies(9).count(body()) == 1


def test_a_secondary_rate_limit_is_waited_out(httpserver, fake):
    limited = json_response(403, {"message": "You have exceeded a secondary rate limit. Please wait."},
                            {"Retry-After": "1"})
    fake.fail("create", limited)
    assert upsert(gh(httpserver), REPO, 5, body()).action == "created"
    assert fake.count("POST") == 2 and fake.bodies(5) == [body()]


def test_a_rate_limit_that_outlasts_the_retries_stops_the_run(httpserver, fake, tmp_path):
    limited = json_response(403, {"message": "API rate limit exceeded for installation."},
                            {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "9999999999"})
    fake.fail("list", limited)
    with pytest.raises(StopPosting):
        upsert(gh(httpserver), REPO, 5, body())
    fake.fail("list", limited)
    lake, outputs = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    rows = [{"pr": n, "head_sha": HEAD, "pr_state": "open", "body": body()} for n in (5, 6, 7)]
    report = publish(lake, outputs, gh(httpserver), "2026-11-02", REPO, rows, enabled=True, today=TODAY)
    assert sorted(report.failed) == [5, 6, 7]
    assert fake.count("GET") == 2  # one list each time; 6 and 7 were not tried
    assert fake.comments == {}


def test_a_refusal_stops_the_run_instead_of_repeating_for_every_pr(httpserver, fake, tmp_path):
    fake.fail("create", json_response(403, {"message": "Resource not accessible by integration"}))
    lake, outputs = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    rows = [{"pr": n, "head_sha": HEAD, "pr_state": "open", "body": body()} for n in (5, 6)]
    report = publish(lake, outputs, gh(httpserver), "2026-11-02", REPO, rows, enabled=True, today=TODAY)
    assert report.failed == {5: "stopped: HTTP 403", 6: "stopped: HTTP 403"}
    assert fake.count("POST") == 1 and fake.count("GET") == 1


def test_a_locked_conversation_fails_that_pr_only(httpserver, fake, tmp_path):
    fake.fail("create", json_response(403, {"message": "Unable to create comment because issue is locked."}))
    lake, outputs = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    rows = [{"pr": n, "head_sha": HEAD, "pr_state": "open", "body": body()} for n in (5, 6)]
    report = publish(lake, outputs, gh(httpserver), "2026-11-02", REPO, rows, enabled=True, today=TODAY)
    assert list(report.failed) == [5] and "locked" in report.failed[5]
    assert report.actions["created"] == 1 and fake.bodies(6) == [body()]


def test_only_our_own_comment_is_taken(httpserver, fake):
    other_bot = {"login": "pytorch-bot[bot]", "type": "Bot"}
    theirs = fake.add_comment(5, body("## :x: theirs"), user=other_bot)
    fake.add_comment(5, "> " + body("## quoted by a human"), user={"login": "ada", "type": "User"})
    posted = upsert(gh(httpserver), REPO, 5, body(), author="torchci-bot[bot]")
    assert posted.action == "created" and posted.removed == ()
    assert fake.bodies(5)[0] == theirs["body"] and fake.bodies(5)[-1] == body() and len(fake.bodies(5)) == 3
    # without an author, the first marker comment is edited and a twin by another login is not deleted
    assert upsert(gh(httpserver), REPO, 5, body()).removed == ()


def test_two_runs_racing_leave_one_comment(httpserver, fake):
    client = gh(httpserver)
    # the other run creates its comment while ours is being created: both saw none before
    fake.on_create = lambda: fake.add_comment(5, body())
    posted = upsert(client, REPO, 5, body())
    assert fake.bodies(5) == [body()] and len(posted.removed) == 1
    assert posted.comment_id == fake.comments[5][0]["id"]  # the older one is kept


def test_racing_runs_in_threads_leave_one_comment(httpserver, fake):
    barrier = threading.Barrier(2)
    results = []

    def run():
        client = gh(httpserver)
        barrier.wait()
        results.append(upsert(client, REPO, 8, body()))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(fake.comments[8]) == 1 and fake.bodies(8) == [body()]
    assert {r.comment_id for r in results} == {fake.comments[8][0]["id"]}


def test_a_create_without_answer_is_adopted_not_resent(httpserver, fake):
    fake.fail("create", Scripted(json_response(502, {"message": "Bad Gateway"}), after_effect=True))
    assert upsert(gh(httpserver), REPO, 5, body()).action == "created"
    assert fake.count("POST") == 1 and fake.bodies(5) == [body()]


def test_a_crash_between_create_and_record_costs_no_second_comment(httpserver, fake, tmp_path):
    lake, outputs = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    upsert(gh(httpserver), REPO, 5, body())  # posted, then the run died before its ledger row
    rows = [{"pr": 5, "head_sha": HEAD, "pr_state": "open", "body": body()}]
    report = publish(lake, outputs, gh(httpserver), "2026-11-02", REPO, rows, enabled=True, today=TODAY)
    assert report.actions.get("unchanged") == 1 and fake.count("POST") == 1
    # recorded now: the next run with the same body sends nothing at all
    before = len(fake.requests)
    assert publish(lake, outputs, gh(httpserver), "2026-11-02", REPO, rows, enabled=True, today=TODAY).actions["recorded"] == 1
    assert len(fake.requests) == before


def test_dry_run_writes_the_markdown_and_skips_closed_prs(httpserver, fake, tmp_path, caplog):
    lake, outputs = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    rows = [{"pr": 5, "head_sha": HEAD, "pr_state": "open", "body": body()},
            {"pr": 6, "head_sha": HEAD, "pr_state": "closed", "body": body()}]
    lines = []
    report = publish(lake, outputs, GitHubResource(api_url=httpserver.url_for("")), "2026-11-02", REPO, rows,
                     enabled=True, log=lines.append, today=TODAY)
    assert report.dry_run and outputs.read_bytes("drci/5.md").decode() == body()
    assert not outputs.exists("drci/6.md") and report.actions["closed"] == 1
    assert any(line.startswith("DRY RUN") and "#5" in line for line in lines)
    assert fake.requests == []


def test_a_dry_runs_metadata_says_which_prs_it_skipped_and_how_many_it_would_post(httpserver, fake, tmp_path):
    """A closed pull request is left alone, not a post that closed anything; a dry run would post or
    edit the comment of every open one."""
    lake, outputs = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    rows = [{"pr": n, "head_sha": HEAD, "pr_state": state, "body": body()}
            for n, state in ((5, "open"), (6, "closed"), (7, "open"), (8, "open"), (9, "closed"))]
    report = publish(lake, outputs, GitHubResource(api_url=httpserver.url_for("")), "2026-11-02", REPO, rows,
                     enabled=True, today=TODAY)
    assert publish_metadata(report) == {"prs_skipped_closed": 2, "dry_run_would_post_or_edit": 3}
    assert fake.requests == []


def test_a_switched_off_dr_ci_says_what_it_would_post_and_why_as_a_missing_token_does(httpserver, fake, tmp_path):
    """With credentials but `drci.enabled: false` nothing is sent, and the UI's metadata counts what a
    live run would post, with the reason, as it does when no credentials are set."""
    lake, outputs = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    rows = [{"pr": n, "head_sha": HEAD, "pr_state": state, "body": body()}
            for n, state in ((5, "open"), (6, "closed"), (7, "open"))]
    lines = []
    off = publish(lake, outputs, gh(httpserver), "2026-11-02", REPO, rows, enabled=False, log=lines.append,
                  today=TODAY)
    assert off.dry_run and off.dry_run_reason == "drci.enabled is false"
    assert publish_metadata(off) == {"prs_skipped_closed": 1, "dry_run_would_post_or_edit": 2}
    assert lines == [f"DRY RUN (drci.enabled is false): would post or edit 2 Dr. CI comment(s); written under "
                     f"{outputs.display('drci')}/ only"]
    assert fake.requests == [] and outputs.exists("drci/7.md")
    tokenless = publish(lake, outputs, GitHubResource(api_url=httpserver.url_for("")), "2026-11-02", REPO, rows,
                        enabled=True, today=TODAY)
    assert tokenless.dry_run_reason == "no GitHub credentials" and publish_metadata(tokenless) == publish_metadata(off)


# ---- merge bases and lost webhooks --------------------------------------------------------


def test_merge_base_from_the_compare_api_is_cached_per_head(httpserver, fake, tmp_path):
    lake = Lake.at(str(tmp_path / "lake"))
    fake.merge_bases[HEAD] = BASE
    first = resolve(lake, gh(httpserver), "2026-11-02", REPO, [(HEAD, MAIN[6])])
    assert (first[HEAD].sha, first[HEAD].exact, first[HEAD].fetched) == (BASE, True, True)
    again = resolve(lake, gh(httpserver), "2026-11-03", REPO, [(HEAD, MAIN[6])])
    assert (again[HEAD].sha, again[HEAD].fetched) == (BASE, False)
    assert fake.count("GET", "/compare/") == 1
    assert fake.requests[0][1] == f"/repos/{REPO}/compare/main...{HEAD}"


def test_merge_base_without_credentials_or_answer_is_an_explicit_estimate(httpserver, fake, tmp_path):
    lake = Lake.at(str(tmp_path / "lake"))
    dry = resolve(lake, GitHubResource(api_url=httpserver.url_for("")), "2026-11-02", REPO, [(HEAD, MAIN[6])])
    assert (dry[HEAD].sha, dry[HEAD].note) == (MAIN[6], NO_CREDENTIALS) and fake.requests == []
    missing = resolve(lake, gh(httpserver), "2026-11-02", REPO, [(HEAD, MAIN[6])])  # compare: 404
    assert missing[HEAD].sha == MAIN[6] and "compare API failed (404)" in missing[HEAD].note
    assert not lake.days("drci_merge_bases")  # estimates are not cached


def test_a_head_stuck_in_progress_is_read_from_the_rest_api(httpserver, fake):
    now = dt.datetime(2026, 11, 2, 12, tzinfo=dt.timezone.utc)
    stuck = c.HeadJob("linux / test (default, 1, 2, linux.4xlarge)", GROUP, "pending", workflow="pull",
                      started_at=now - dt.timedelta(hours=6))
    fresh = c.HeadJob("linux / test (default, 2, 2, linux.4xlarge)", GROUP, "pending", workflow="pull",
                      started_at=now - dt.timedelta(minutes=20))
    prs = {1: PullRequest(1, HEAD, "open", "main", "gh/ada/1/head", now - dt.timedelta(hours=6), [stuck, fresh]),
           2: PullRequest(2, "cd" * 20, "open", "main", "b", now - dt.timedelta(minutes=5), [])}
    fake.runs[HEAD] = [{"id": 77, "name": "pull", "head_sha": HEAD, "status": "completed"}]
    fake.jobs[77] = [{"id": 701, "run_id": 77, "workflow_name": "pull", "name": stuck.name, "status": "completed",
                      "conclusion": "failure"},
                     {"id": 702, "run_id": 77, "workflow_name": "pull", "name": fresh.name, "status": "completed",
                      "conclusion": "success"},
                     {"id": 703, "run_id": 77, "workflow_name": "pull", "name": "lint / lintrunner",
                      "status": "completed", "conclusion": "success"}]
    changed, requests = refresh_heads(gh(httpserver), REPO, prs, RefreshLimits(), now)
    assert changed == {1: 3} and requests == 2  # PR 2 is young: not read
    assert (stuck.state, stuck.job_id, stuck.from_rest) == ("failure", 701, True)
    assert fresh.state == "success" and prs[1].jobs[-1].job_group == "pull / lint / lintrunner"
    assert fake.requests[0][2]["head_sha"] == HEAD


# ---- through the lake: drci_comments, drci/<pr>.md and the PR page show the same text --------


def test_comments_from_the_lake_reach_the_markdown_and_the_pr_page(tmp_path, httpserver):
    from hud_lake import DAY as HUD_DAY
    from test_hud_site import build, history
    from torchci_assets.derived.drci.build import build_comments, load_comments
    from torchci_assets.derived.site.site import publish_site

    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    history().write(lake)
    build(lake)
    dry = GitHubResource(api_url=httpserver.url_for(""))
    report = build_comments(lake, dry, HUD_DAY, REPO)
    assert [r["pr"] for r in report.rows] == [7, 8] and all(r["new"] == 1 for r in report.rows)
    publish(lake, out, dry, HUD_DAY, REPO, report.rows, enabled=False, today=dt.date.fromisoformat(HUD_DAY))
    publish_site(lake, out, HUD_DAY, REPO)
    body = load_comments(lake, HUD_DAY)[7]["body"]
    assert out.read_bytes("drci/7.md").decode() == body and "## :x: 1 New Failure" in body
    page = re.sub(r"<[^>]+>", "", (tmp_path / "out" / "hud" / "pr" / "7.html").read_text())
    shown = re.sub(r"<[^>]+>", "", to_html(body))
    assert shown in page and "❌ 1 New Failure" in shown and "As of commit " + "a" * 40 in shown


def test_a_cancelled_job_reaches_the_comment_as_cancelled_even_from_an_older_pr_jobs_partition(tmp_path):
    import pyarrow.parquet as pq
    from hud_lake import DAY as HUD_DAY
    from hud_lake import T0, History
    from torchci_assets.derived.drci.build import build_comments
    from torchci_assets.derived.hud.health import build_commit_health, build_pr_jobs

    now = T0 + dt.timedelta(hours=12)
    h = History()
    for i in (1, 2):
        h.job(h.push(i, T0 + dt.timedelta(hours=i)), "linux-jammy / build", "success", run_id=10 * i,
              created=T0 + dt.timedelta(hours=i))
    h.add("pull_request", HUD_DAY, repo=REPO, number=50, state="open", head_sha=HEAD, head_ref="u/50", base_ref="main",
          labels=[], merged=None, updated_at=T0, received_at=T0)
    h.job(HEAD, "linux-jammy / build", "cancelled", run_id=500, branch="u/50")  # its run was cancelled by hand
    lake = Lake.at(str(tmp_path / "lake"))
    h.write(lake)
    build_commit_health(lake, HUD_DAY, REPO, ("refs/heads/main",), min_groups=1, now=now)
    build_pr_jobs(lake, HUD_DAY, REPO, now=now)
    dry = GitHubResource(api_url="http://127.0.0.1:9")
    row = build_comments(lake, dry, HUD_DAY, REPO, now=now).rows[0]
    assert row["new"] == 0 and "## :x: 1 Cancelled Job\n" in row["body"] and "Please retry" in row["body"]
    assert row["cancelled"] == 1  # drci_comments counts it in a column of its own
    # a partition written before pr_jobs marked cancellations is read as it was: the job is a new failure
    [path] = lake.files("pr_jobs", [HUD_DAY])
    lake.write("pr_jobs", HUD_DAY, pq.read_table(path).drop_columns(["cancelled"]))
    assert build_comments(lake, dry, HUD_DAY, REPO, now=now).rows[0]["new"] == 1


def _main_broke_the_build_and_so_did_pr_50(base_ref: str = "main"):
    """Main's build failed at sha(1) (fixed at sha(2)); pull request 50's head, branched off sha(1),
    fails the same build, cancelled or not: (the history, the time to build as of)."""
    from hud_lake import DAY as HUD_DAY
    from hud_lake import T0, History

    h = History()
    for i in (1, 2):
        h.job(h.push(i, T0 + dt.timedelta(hours=i)), "linux-jammy / build", "failure" if i == 1 else "success",
              run_id=10 * i, created=T0 + dt.timedelta(hours=i))
    h.add("pull_request", HUD_DAY, repo=REPO, number=50, state="open", head_sha=HEAD, head_ref="u/50",
          base_ref=base_ref, labels=[], merged=None, updated_at=T0, received_at=T0)
    return h, T0 + dt.timedelta(hours=12)


def _comment_of_pr_50(h, tmp_path, github, now, health_days: tuple[str, ...] = (), **kw) -> dict:
    from hud_lake import DAY as HUD_DAY
    from torchci_assets.derived.drci.build import build_comments
    from torchci_assets.derived.hud.health import build_commit_health, build_pr_jobs

    lake = Lake.at(str(tmp_path / "lake"))
    if not lake.days("pr_jobs"):
        h.write(lake)
        for day in sorted({*health_days, HUD_DAY}):
            build_commit_health(lake, day, REPO, ("refs/heads/main",), min_groups=1, now=now)
        build_pr_jobs(lake, HUD_DAY, REPO, now=now)
    return build_comments(lake, github, HUD_DAY, REPO, now=now, **kw).rows[0]


def test_a_cancelled_job_is_cancelled_even_when_main_failed_the_same_job_at_the_merge_base(tmp_path, httpserver, fake):
    """The build was cancelled (by hand, or a newer push): it never ran to a result, so main's
    failure says nothing of it; "You can merge normally!" would wave through a job never run.
    PyTorch's Dr. CI asks for a retry (isSameFailure requires the same conclusion)."""
    from hud_lake import sha

    h, now = _main_broke_the_build_and_so_did_pr_50()
    h.job(HEAD, "linux-jammy / build", "cancelled", run_id=500, branch="u/50")
    fake.merge_bases[HEAD] = sha(1)
    row = _comment_of_pr_50(h, tmp_path, gh(httpserver), now)
    assert row["merge_base"] == sha(1) and (row["cancelled"], row["broken_trunk"], row["new"]) == (1, 0, 0)
    assert "## :x: 1 Cancelled Job\n" in row["body"] and "You can merge normally" not in row["body"]


def test_a_build_removes_the_retired_deleted_comments_extracts_it_lists_and_nothing_else(tmp_path):
    """Dr. CI once kept the deleted comments' ids as per-file extracts (`_deleted_comments-<digest>.pq`
    and their index) beside its other extracts; it reads them no more. A build removes those in the
    folders its extracts' windows list, and touches no other file of the lake."""
    from hud_lake import DAY as HUD_DAY
    from torchci_assets.derived.drci.build import build_comments
    from torchci_assets.partitions import days_ending

    h, now = _main_broke_the_build_and_so_did_pr_50()
    h.job(HEAD, "linux-jammy / build", "failure", run_id=500, branch="u/50")
    first = _comment_of_pr_50(h, tmp_path, GitHubResource(api_url="http://127.0.0.1:9"), now)
    root = tmp_path / "lake"
    old_day = days_ending(HUD_DAY, 30)[0]  # outside every window: never listed by a build of HUD_DAY
    retired = [f"day={HUD_DAY}/_deleted_comments-{'ab' * 16}.pq", f"day={HUD_DAY}/_deleted_comments-index.json",
               f"day={days_ending(HUD_DAY, 3)[0]}/_deleted_comments-{'cd' * 16}.pq"]
    kept = [f"day={HUD_DAY}/_deleted_comments-{'ab' * 15}.pq", f"day={HUD_DAY}/_deleted_comments-index.json.tmp",
            f"day={HUD_DAY}/_deleted_comments_v2-{'ab' * 16}.pq", f"day={HUD_DAY}/_deleted_comments.json",
            "_deleted_comments.json", f"day={old_day}/_deleted_comments-{'ef' * 16}.pq"]
    for rel in retired + kept:
        (root / "drci_comments" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "drci_comments" / rel).write_bytes(b"planted")
    written = f"drci_comments/day={HUD_DAY}/data.parquet"  # the build's own partition
    before = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    row = build_comments(Lake.at(str(root)), GitHubResource(api_url="http://127.0.0.1:9"), HUD_DAY, REPO,
                         now=now).rows[0]
    after = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    assert sorted(set(before) - set(after)) == sorted(f"drci_comments/{rel}" for rel in retired)
    assert {k: v for k, v in after.items() if k != written} == {
        k: v for k, v in before.items() if k != written and k[len("drci_comments/"):] not in retired}
    assert row["body"] == first["body"]


def _main_cancelled_the_build_and_pr_50(pr_conclusion: str, days_before: int = 0):
    """Main's build at sha(1) was cancelled (its run cancelled, or a step timed out; fine again at
    sha(2)), `days_before` the pull request's day; pull request 50's head, branched off sha(1), ends
    its build with `pr_conclusion`."""
    from hud_lake import T0, History

    h = History()
    pushed = T0 - dt.timedelta(days=days_before)
    for i in (1, 2):
        h.job(h.push(i, pushed + dt.timedelta(hours=i)), "linux-jammy / build", "cancelled" if i == 1 else "success",
              run_id=10 * i, created=pushed + dt.timedelta(hours=i), day=f"{pushed:%Y-%m-%d}")
    h.add("pull_request", "2026-10-05", repo=REPO, number=50, state="open", head_sha=HEAD, head_ref="u/50",
          base_ref="main", labels=[], merged=None, updated_at=T0, received_at=T0)
    h.job(HEAD, "linux-jammy / build", pr_conclusion, run_id=500, branch="u/50")
    return h, T0 + dt.timedelta(hours=12)


def test_a_cancelled_job_is_broken_trunk_where_main_cancelled_the_same_job_too(tmp_path, httpserver, fake):
    """PyTorch's Dr. CI calls a failure the trunk's when the merge base has the same job with the same
    conclusion (isSameFailure): a build cancelled here and at the merge base is BROKEN TRUNK, not a
    cancellation to retry; a build that failed here is not the same failure as main's cancelled one."""
    from hud_lake import sha

    fake.merge_bases[HEAD] = sha(1)
    h, now = _main_cancelled_the_build_and_pr_50("cancelled")
    row = _comment_of_pr_50(h, tmp_path / "cancelled", gh(httpserver), now)
    assert row["merge_base"] == sha(1) and (row["broken_trunk"], row["cancelled"], row["new"]) == (1, 0, 0)
    assert "## :white_check_mark: You can merge normally! (1 Unrelated Failure)\n" in row["body"]
    assert "<b>BROKEN TRUNK</b>" in row["body"] and "CANCELLED" not in row["body"]
    h, now = _main_cancelled_the_build_and_pr_50("failure")
    row = _comment_of_pr_50(h, tmp_path / "failed", gh(httpserver), now)
    assert (row["broken_trunk"], row["cancelled"], row["new"]) == (0, 0, 1)
    assert "## :x: 1 New Failure\n" in row["body"]


def test_main_cancelling_the_build_a_week_before_is_still_told_from_a_failure(tmp_path, httpserver, fake):
    """A merge base pushed 7 days back is in the commit_health partitions Dr. CI reads (each holds
    the pushes of its two days before): the conclusion of main's job there must be read too, or
    main's cancellation counts as a failure and the pull request's failed build as BROKEN TRUNK."""
    from hud_lake import T0, sha

    fake.merge_bases[HEAD] = sha(1)
    h, now = _main_cancelled_the_build_and_pr_50("failure", days_before=7)
    row = _comment_of_pr_50(h, tmp_path, gh(httpserver), now,
                            health_days=(f"{T0 - dt.timedelta(days=5):%Y-%m-%d}",))
    assert row["merge_base"] == sha(1) and (row["broken_trunk"], row["new"]) == (0, 1)
    assert "## :x: 1 New Failure\n" in row["body"]


def test_the_merge_base_is_taken_with_main_whatever_the_pull_requests_base(tmp_path, httpserver, fake):
    """A stacked pull request (base feature-a) is retargeted to main when feature-a merges, its head
    unchanged. Its merge base with feature-a (feature-a's tip) is no main commit, so BROKEN TRUNK
    could never be found; PyTorch's Dr. CI always compares the head with main, and so does this one.
    A merge base an earlier version cached with the pull request's base is asked again, once."""
    import pyarrow as pa
    from hud_lake import sha
    from torchci_assets.derived.drci.merge_base import SCHEMA

    h, now = _main_broke_the_build_and_so_did_pr_50(base_ref="feature-a")
    h.job(HEAD, "linux-jammy / build", "failure", run_id=500, branch="u/50")
    feature_tip = "fe" * 20
    fake.compared.update({("feature-a", HEAD): feature_tip, ("main", HEAD): sha(1)})
    lake = Lake.at(str(tmp_path / "lake"))
    lake.write("drci_merge_bases", "2026-10-04", pa.Table.from_pylist([
        {"head_sha": HEAD, "repo": REPO, "base_ref": "feature-a", "merge_base": feature_tip}], schema=SCHEMA))
    row = _comment_of_pr_50(h, tmp_path, gh(httpserver), now)
    assert (row["merge_base"], row["merge_base_exact"], row["broken_trunk"], row["new"]) == (sha(1), True, 1, 0)
    assert [p for _, p, _ in fake.requests if "/compare/" in p] == [f"/repos/{REPO}/compare/main...{HEAD}"]
    assert _comment_of_pr_50(h, tmp_path, gh(httpserver), now)["merge_base"] == sha(1)
    assert fake.count("GET", "/compare/") == 1  # cached now, with main
    # a deployment whose main branch is master compares with master (and caches apart)
    fake.compared[("master", HEAD)] = sha(1)
    assert _comment_of_pr_50(h, tmp_path, gh(httpserver), now, main_branch="master")["broken_trunk"] == 1
    assert fake.requests[-1][1] == f"/repos/{REPO}/compare/master...{HEAD}"


def test_a_job_whose_completed_webhook_was_lost_in_a_failed_run_is_pending_not_a_pass(tmp_path):
    """The run's `completed` (conclusion failure) reached the lake, its test job's did not: the comment
    must not say the head passed, since that job may be the failure; it counts the job as pending."""
    from hud_lake import DAY as HUD_DAY
    from hud_lake import T0, History
    from torchci_assets.derived.drci.build import build_comments
    from torchci_assets.derived.hud.health import build_commit_health, build_pr_jobs

    now = T0 + dt.timedelta(hours=2)
    h = History()
    h.job(h.push(1, T0), "linux-jammy / build", "success", run_id=10)
    h.add("pull_request", HUD_DAY, repo=REPO, number=51, state="open", head_sha=HEAD, head_ref="u/51", base_ref="main",
          labels=[], merged=None, updated_at=T0, received_at=T0)
    h.job(HEAD, "linux-jammy / build", "success", run_id=510, branch="u/51")
    h.job(HEAD, "linux-jammy / test (default, 1, 1, linux.2xlarge)", None, run_id=510, branch="u/51")
    h.run(510, "pull", conclusion="failure", minutes=40)
    lake = Lake.at(str(tmp_path / "lake"))
    h.write(lake)
    build_commit_health(lake, HUD_DAY, REPO, ("refs/heads/main",), min_groups=1, now=now)
    build_pr_jobs(lake, HUD_DAY, REPO, now=now)
    row = build_comments(lake, GitHubResource(api_url="http://127.0.0.1:9"), HUD_DAY, REPO, now=now).rows[0]
    assert (row["new"], row["pending"]) == (0, 1)
    assert "\n## :hourglass_flowing_sand: No Failures, 1 Pending\n" in row["body"]
    assert ":white_check_mark:" not in row["body"]


def test_drci_config_defaults_and_refusals():
    from torchci_assets.config import ConfigError, parse_config

    base = {"upstream": {"repo": REPO, "branches": ["main"]}}
    assert parse_config(base, "t.yaml").drci.enabled is False
    cfg = parse_config({**base, "drci": {"enabled": True, "stuck_after_minutes": 240}}, "t.yaml").drci
    assert (cfg.enabled, cfg.stuck_after_minutes, cfg.missing_after_minutes) == (True, 240, 30)
    assert parse_config({**base, "drci": {"author": "my-app[bot]"}}, "t.yaml").drci.author == "my-app[bot]"
    for bad in ({"enabled": "yes"}, {"stuck_after_minutes": 0}, {"cadence": 5}, {"author": "two words"}):
        with pytest.raises(ConfigError, match="drci"):
            parse_config({**base, "drci": bad}, "t.yaml")


def test_a_head_whose_webhooks_were_all_lost_is_read_from_the_rest_api(tmp_path, httpserver, fake):
    from hud_lake import DAY as HUD_DAY
    from hud_lake import T0
    from test_hud_site import NOW, build, history
    from torchci_assets.derived.drci.build import build_comments

    lake = Lake.at(str(tmp_path / "lake"))
    h = history()
    lost = "c" * 40
    h.add("pull_request", HUD_DAY, repo=REPO, number=9, state="open", head_sha=lost, head_ref="gh/u/9/head",
          base_ref="main", labels=[], merged=None, updated_at=T0, received_at=T0)
    h.write(lake)
    build(lake)
    fake.runs[lost] = [{"id": 990, "name": "pull", "head_sha": lost}]
    fake.jobs[990] = [{"id": 9901, "run_id": 990, "workflow_name": "pull", "name": "linux-jammy / build",
                       "status": "completed", "conclusion": "failure"}]
    report = build_comments(lake, gh(httpserver), HUD_DAY, REPO, now=NOW)
    assert report.refreshed_heads == 1 and report.refresh_requests == 2
    row = next(r for r in report.rows if r["pr"] == 9)
    assert row["new"] == 1 and row["refreshed_jobs"] == 1 and "state read from the REST API" in row["body"]
    assert "compare API failed (404)" in row["merge_base_note"]
    # the same day recomputed three days later (a backfill) is the lake's view: nothing read
    before = fake.count("GET", "/actions/")
    later = build_comments(lake, gh(httpserver), HUD_DAY, REPO, now=NOW + dt.timedelta(days=3))
    assert later.refresh_requests == 0 and fake.count("GET", "/actions/") == before
    assert 9 not in {r["pr"] for r in later.rows}  # no job known: no comment


def _labelled_days_later(number: int):
    """A pull request whose `pull` job failed (infrastructure) on D0, labelled ciflow/trunk on D, three
    days later, when D's window no longer holds D0: (history, the job, D, the label's time, now)."""
    from hud_lake import History

    d0, d = "2026-10-02", "2026-10-05"
    t0 = dt.datetime(2026, 10, 2, 8, tzinfo=dt.timezone.utc)
    later, now = t0 + dt.timedelta(days=3, hours=1), t0 + dt.timedelta(days=3, hours=4)
    h = History()
    pr = dict(repo=REPO, number=number, state="open", head_sha=HEAD, head_ref=f"u/{number}", base_ref="main",
              merged=None)
    h.add("pull_request", d0, **pr, labels=[], updated_at=t0, received_at=t0)
    job = h.job(HEAD, "linux-jammy / test (default, 1, 1, linux.2xlarge)", "failure", run_id=number * 10,
                created=t0, day=d0, branch=f"u/{number}", test_config="default")
    h.test_job(job, infra_reason="job-died", day=d0)
    h.add("pull_request", d, **pr, labels=["ciflow/trunk"], updated_at=later, received_at=later)
    return h, job, d, later, now


def _pr_jobs_days(h, tmp_path, d: str, now: dt.datetime) -> Lake:
    """`h` written to a lake and pr_jobs built for D0, D-1 and D, in order (D as of `now`)."""
    from torchci_assets.derived.hud.health import build_pr_jobs

    lake = Lake.at(str(tmp_path / "lake"))
    h.write(lake)
    for day in ("2026-10-02", "2026-10-04", d):
        build_pr_jobs(lake, day, REPO, now=now if day == d else None)
    return lake


def test_a_head_whose_ci_ran_before_the_window_keeps_its_jobs_when_a_label_brings_it_back(tmp_path, httpserver, fake):
    """CI ran on D0; a label on D brings the pull request back into D's window, which no longer holds
    its jobs: D's partition carries D-1's jobs of that head (with D's labels), so Dr. CI classifies them
    as before and reads nothing from the REST API, and the HUD's page shows them, not "no job yet"."""
    import pyarrow.parquet as pq

    from torchci_assets.derived.drci.build import build_comments
    from torchci_assets.derived.hud.health import build_pr_jobs

    h, job, d, later, now = _labelled_days_later(60)
    lake = _pr_jobs_days(h, tmp_path, d, now)
    [row] = [r for r in pq.read_table(lake.files("pr_jobs", [d])[0]).to_pylist() if r["number"] == 60]
    assert (row["source"], row["job_id"], row["state"], row["failure_class"], row["infra_reason"]) == (
        "github", job, "failure", "infra", "job-died")
    assert (row["labels"], row["pr_updated_at"]) == (["ciflow/trunk"], later)  # today's pull request fields
    report = build_comments(lake, gh(httpserver), d, REPO, now=now)
    assert report.refreshed_heads == 0 and fake.count("GET", "/actions/") == 0
    [comment] = [r for r in report.rows if r["pr"] == 60]
    assert (comment["new"], comment["infra"]) == (0, 1)
    # a carried job is unstable by today's UNSTABLE issues, not by the day it was carried from
    build_pr_jobs(lake, d, REPO, now=now, unstable_jobs=["pull / linux-jammy / test (default)"])
    [row] = [r for r in pq.read_table(lake.files("pr_jobs", [d])[0]).to_pylist() if r["number"] == 60]
    assert (row["job_id"], row["unstable"], row["cancelled"]) == (job, True, False)


def test_a_head_whose_later_workflow_runs_in_the_window_keeps_its_earlier_workflows_jobs(tmp_path, httpserver, fake):
    """PyTorch's usual path: `pull` ran on D0; a ciflow/trunk label on D starts `trunk` on the same head.
    D's window holds only the trunk job, yet the pull job's failure is still the head's: D's partition
    carries it from D-1 beside today's job, and Dr. CI counts both."""
    import pyarrow.parquet as pq

    from torchci_assets.derived.drci.build import build_comments

    h, pulled, d, later, now = _labelled_days_later(61)
    trunk = h.job(HEAD, "linux-jammy / test (default, 1, 1, linux.2xlarge)", "success", run_id=611,
                  created=later, day=d, branch="u/61", workflow="trunk", test_config="default")
    lake = _pr_jobs_days(h, tmp_path, d, now)
    rows = [r for r in pq.read_table(lake.files("pr_jobs", [d])[0]).to_pylist() if r["number"] == 61]
    assert sorted((r["workflow"], r["job_id"], r["state"]) for r in rows) == [
        ("pull", pulled, "failure"), ("trunk", trunk, "success")]
    assert {tuple(r["labels"]) for r in rows} == {("ciflow/trunk",)}  # today's pull request fields on both
    report = build_comments(lake, gh(httpserver), d, REPO, now=now)
    [comment] = [r for r in report.rows if r["pr"] == 61]
    assert (comment["new"], comment["infra"]) == (0, 1)


@pytest.mark.parametrize("null_workflow", ["downstream", "github"])
def test_a_job_the_window_still_shows_is_not_carried_beside_itself_when_it_names_no_workflow(tmp_path, null_workflow):
    """A downstream callback without workflow.name (or a webhook without workflow_name) has a NULL
    workflow: the job the window shows must still stand for the previous day's copy, or each day
    adds one more."""
    import pyarrow.parquet as pq
    from hud_lake import History

    from torchci_assets.derived.hud.health import build_pr_jobs

    days = ("2026-10-03", "2026-10-04", "2026-10-05")
    t0 = dt.datetime(2026, 10, 3, 8, tzinfo=dt.timezone.utc)
    h = History()
    h.add("pull_request", days[0], repo=REPO, number=70, state="open", head_sha=HEAD, head_ref="u/70",
          base_ref="main", merged=None, labels=[], updated_at=t0, received_at=t0)
    h.job(HEAD, "linux-jammy / test (default, 1, 1, linux.2xlarge)", "success", run_id=700, created=t0,
          day=days[0], branch="u/70", workflow=None if null_workflow == "github" else "pull")
    h.add("ci_result", days[0], repo="acme/torch-npu", level="L3", head_sha=HEAD,
          workflow_name=None if null_workflow == "downstream" else "npu-ci", run_id=9, run_attempt=1,
          job_name="npu-test", status="completed", conclusion="success", started_at=t0, completed_at=t0,
          execution_s=60.0, failed=0, callback_at=t0, failure_kind="none")
    for day in days[1:]:  # the other days' tables exist, empty
        h.rows.setdefault(("pull_request", day), [])
        h.rows.setdefault(("ci_result", day), [])
    lake = Lake.at(str(tmp_path / "lake"))
    h.write(lake)
    counts = []
    for day in days:  # every day's three-day window still holds the first day
        build_pr_jobs(lake, day, REPO, now=t0 + dt.timedelta(days=2, hours=12) if day == days[2] else None)
        counts.append(sum(r["number"] == 70 for r in pq.read_table(lake.files("pr_jobs", [day])[0]).to_pylist()))
    assert counts == [2, 2, 2]


def test_a_backfill_of_an_old_day_posts_and_writes_nothing(httpserver, fake, tmp_path):
    lake, outputs = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    rows = [{"pr": 5, "head_sha": HEAD, "pr_state": "open", "body": body()}]
    report = publish(lake, outputs, gh(httpserver), "2026-10-30", REPO, rows, enabled=True, today=TODAY)
    assert report.actions == {"backfill": 1} and fake.requests == [] and not outputs.exists("drci/5.md")
    assert publish(lake, outputs, gh(httpserver), "2026-11-01", REPO, rows, enabled=True,
                   today=TODAY).actions["created"] == 1  # yesterday's partition still posts


def test_yesterdays_partition_leaves_every_pull_request_a_newer_partition_lists_to_it(httpserver, fake, tmp_path):
    """The daily run of yesterday at 00:30 (or a late file's refresh of it) must not put yesterday's
    view over today's comment, nor post on a pull request closed since midnight."""
    import pyarrow as pa
    from hud_lake import schema
    from torchci_assets.derived.drci.build import SCHEMA
    from torchci_assets.derived.hud.health import PR_JOBS_SCHEMA

    lake, outputs = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    today, other = TODAY.isoformat(), "cd" * 20
    lake.write("drci_comments", today, pa.Table.from_pylist([
        {"pr": 5, "head_sha": HEAD, "pr_state": "open"},      # same head: today's comment is the one to show
        {"pr": 6, "head_sha": other, "pr_state": "open"},     # pushed again after midnight
        {"pr": 7, "head_sha": HEAD, "pr_state": "closed"},    # closed after midnight
    ], schema=SCHEMA))
    lake.write("pr_jobs", today, pa.Table.from_pylist([{"number": 9, "head_sha": HEAD, "pr_state": "closed"}],
                                                       schema=PR_JOBS_SCHEMA))  # closed: today's comments not yet built
    at = dt.datetime(2026, 11, 2, 0, 5, tzinfo=dt.timezone.utc)  # webhooks no newer partition has read yet
    lake.write("pull_request", today, pa.Table.from_pylist([
        {"repo": REPO, "number": 10, "state": "closed", "head_sha": HEAD, "received_at": at},
        {"repo": REPO, "number": 11, "state": "open", "head_sha": HEAD, "received_at": at},  # a label, say
        {"repo": "acme/other", "number": 8, "state": "closed", "head_sha": HEAD, "received_at": at},
    ], schema=schema("pull_request")))
    prs = (5, 6, 7, 8, 9, 10, 11)
    rows = [{"pr": n, "head_sha": HEAD, "pr_state": "open", "body": body()} for n in prs]
    report = publish(lake, outputs, gh(httpserver), "2026-11-01", REPO, rows, enabled=True, today=TODAY)
    assert report.actions == {"closed": 0, "superseded": 1, "outdated": 4, "created": 2}
    assert [n for n in prs if outputs.exists(f"drci/{n}.md")] == [8, 11]
    assert fake.count("POST") == 2 and fake.bodies(8) == [body()]
    # today's own partition is the newest: it posts
    assert publish(lake, outputs, gh(httpserver), today, REPO, rows[:1], enabled=True,
                   today=TODAY).actions["created"] == 1


def materialize_on_hud_lake(tmp_path, httpserver, instance=None):
    """drci_comments materialized in Dagster (no credentials) over the HUD tests' lake, outputs under
    tmp_path/out: (the lake, the materialization's metadata)."""
    import dagster as dg
    from hud_lake import DAY as HUD_DAY
    from resources.configured import ArchiveResource, LakeResource, OutputsResource
    from test_hud_site import build, history
    from torchci_assets.derived.drci.assets import drci_comments_asset

    lake = Lake.at(str(tmp_path / "lake"))
    history().write(lake)
    build(lake)
    result = dg.materialize([drci_comments_asset], partition_key=HUD_DAY, resources={
        "lake": LakeResource(uri=str(tmp_path / "lake")), "outputs": OutputsResource(uri=str(tmp_path / "out")),
        "github": GitHubResource(api_url=httpserver.url_for("")),
        "archive": ArchiveResource(uri=str(tmp_path / "archive"))}, instance=instance)
    assert result.success
    return lake, result.get_asset_materialization_events()[0].materialization.metadata


def test_the_asset_runs_in_dagster_and_reports_its_figures(tmp_path, httpserver):
    from hud_lake import DAY as HUD_DAY

    lake, meta = materialize_on_hud_lake(tmp_path, httpserver)
    assert meta["pull_requests"].value == 2 and meta["jobs_new"].value == 2 and meta["dry_run"].value is True
    assert meta["merge_bases_estimated"].value == 2 and "no credentials" in meta["merge_base_note"].value
    assert meta["prs_skipped_backfill"].value == 2  # an old day: recomputed, nothing written
    assert not any(k.startswith("posts_") for k in meta)
    from torchci_assets.derived.drci.build import load_comments
    assert sorted(load_comments(lake, HUD_DAY)) == [7, 8]


def test_each_comment_says_how_often_it_updates_as_the_refresh_interval_is_set(tmp_path, httpserver, monkeypatch):
    """The comment's last line promises a cadence to the author: the one the refresh sensor keeps."""
    from hud_lake import DAY as HUD_DAY
    from torchci_assets.cadence import REFRESH_MINUTES_VAR
    from torchci_assets.derived.drci.build import load_comments

    footer = "This comment was automatically generated by torchci-dagster and updates {}.\n" + MARKER_END
    assert render(head(), [], pending=0).endswith(footer.format("every 1.5 minutes"))  # the default interval
    monkeypatch.setenv(REFRESH_MINUTES_VAR, "15")  # an operator trading freshness for cost
    lake, _ = materialize_on_hud_lake(tmp_path, httpserver)
    bodies = [row["body"] for row in load_comments(lake, HUD_DAY).values()]
    assert len(bodies) == 2 and all(b.endswith(footer.format("every 15 minutes")) for b in bodies)


def test_open_unstable_issues_reach_the_comments_through_the_published_list(tmp_path, httpserver):
    """End to end: open UNSTABLE issues on the fake issues API, read back by the flakiness domain into
    stats/unstable-jobs.json (a stranger's issue does not count), then the asset classifies the PR
    jobs it marks UNSTABLE, citing the issue, from that file."""
    from fake_github_issues import FakeIssueTracker
    from hud_lake import DAY as HUD_DAY
    from torchci_assets.derived.drci.build import load_comments
    from torchci_assets.derived.flakiness.job_issues import publish_job_lists

    issues = FakeIssueTracker(httpserver)
    issues.permissions["a-maintainer"] = "write"
    marked = issues.add("UNSTABLE pull / linux-jammy / test (default)", user="a-maintainer")
    issues.add("UNSTABLE pull / linux-jammy", user="a-stranger")  # would mark everything: not a collaborator
    out = Store(str(tmp_path / "out"))
    assert publish_job_lists(gh(httpserver), REPO, out) == {"stats/disabled-jobs.json": 0, "stats/unstable-jobs.json": 1}
    lake, meta = materialize_on_hud_lake(tmp_path, httpserver)
    assert (meta["jobs_unstable"].value, meta["jobs_new"].value, meta["unstable_jobs_listed"].value) == (2, 0, 1)
    body = load_comments(lake, HUD_DAY)[7]["body"]
    assert "You can merge normally! (1 Unrelated Failure)" in body and "<b>UNSTABLE</b>" in body
    assert f"([UNSTABLE pull / linux-jammy / test (default)]({marked['html_url']}))" in body


def test_an_unchanged_body_leaves_its_file_as_it_is(tmp_path, monkeypatch):
    """A refresh every few minutes: drci/<pr>.md is rewritten only when its body changed."""
    lake, outputs = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    dry = GitHubResource(api_url="http://127.0.0.1:9")
    rows = [{"pr": n, "head_sha": HEAD, "pr_state": "open", "body": f"body of {n}"} for n in (5, 6)]
    publish(lake, outputs, dry, "2026-11-02", REPO, rows, enabled=False, today=TODAY)
    written = []
    real = Store.write_bytes
    monkeypatch.setattr(Store, "write_bytes", lambda self, rel, data: (written.append(rel), real(self, rel, data)))
    report = publish(lake, outputs, dry, "2026-11-02", REPO, rows, enabled=False, today=TODAY)
    assert written == [] and (report.files, report.unchanged_files) == (2, 2)
    rows[1]["body"] = "body of 6, with a new failure"
    report = publish(lake, outputs, dry, "2026-11-02", REPO, rows, enabled=False, today=TODAY)
    assert written == ["drci/6.md"] and report.unchanged_files == 1
    assert outputs.read_bytes("drci/6.md") == b"body of 6, with a new failure"


def test_extracts_follow_the_source_files_and_equal_the_filtered_source(tmp_path, extracts_made):
    """Dr. CI reads the failures of test_results through one extract per file: a file extracted
    before is not read again, a new or rewritten one is, an extract whose file is gone goes, and
    the extracts hold exactly the source's rows that match the filter."""
    import pyarrow as pa

    from resources import lake_extracts
    from resources.lake import connect
    from torchci_assets.derived.drci import extracts

    day = "2026-11-02"
    lake = Lake.at(str(tmp_path / "lake"))

    def rows(first_job: int, n: int) -> pa.Table:
        return pa.Table.from_pylist([
            {"file": "test_ops.py", "classname": "TestOps", "name": f"test_{i % 7}",
             "status": ("failed", "passed", "error", "skipped")[i % 4], "rerun_count": i % 3,
             "message": None if i % 5 == 0 else f"boom {i}", "head_sha": HEAD, "head_branch": "main",
             "job_id": first_job + i % 3, "workflow_id": 9, "build_env": "linux-jammy", "test_config": "default"}
            for i in range(n)])

    lake.write("test_results", day, rows(100, 40), part="inc-1")
    lake.write("test_results", day, rows(200, 30), part="inc-2")

    def view() -> list[tuple]:
        con = connect()
        try:
            lake_extracts.register_extract(con, lake, extracts.FAILURES, [day], "tr")
            return sorted(con.execute("SELECT * EXCLUDE (day) FROM tr").fetchall(), key=repr)
        finally:
            con.close()

    def expected() -> list[tuple]:
        con = connect()
        try:
            lake.register(con, "test_results", [day], name="src")
            return sorted(con.sql(extracts.SQL["test_failures"]).fetchall(), key=repr)
        finally:
            con.close()

    assert view() == expected() and sorted(extracts_made) == [f"day={day}/inc-1.parquet", f"day={day}/inc-2.parquet"]
    extracts_made.clear()
    assert view() == expected() and extracts_made == []  # nothing new: no source file read
    lake.write("test_results", day, rows(300, 50), part="inc-2")  # rewritten
    lake.write("test_results", day, rows(400, 20), part="inc-3")  # new
    assert view() == expected() and sorted(extracts_made) == [f"day={day}/inc-2.parquet", f"day={day}/inc-3.parquet"]
    kept = sorted(p.name for p in (tmp_path / "lake" / "drci_comments" / f"day={day}").glob("_test_failures-*.pq"))
    assert len(kept) == 3  # the extract of the old inc-2 is gone
    assert lake.files("drci_comments", [day]) == []  # no reader of the table sees them
