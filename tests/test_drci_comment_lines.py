"""What each job's line of a Dr. CI comment shows: the job as `workflow / job`, a failing test's message
as it failed (not the masked key it is compared by), a pending job marked unstable listed with an
hourglass and counted as pending, and a failure without a log line saying so."""

import datetime as dt

import pyarrow as pa
import pytest
from fake_github_pulls import FakePullRequests
from hud_lake import DAY, T0, History, sha
from test_drci_reverted_pr import JOB, PR_HEAD, comment, main_history

from resources.lake import Lake
from torchci_assets.derived.drci import classify as c
from torchci_assets.derived.drci.comment import NOT_CLASSIFIED, Head, render

REPO = "pytorch/pytorch"


@pytest.fixture
def fake(httpserver):
    return FakePullRequests(httpserver, REPO)


def pr50_with_a_failing_test(tmp_path, h: History) -> None:
    """PR 50's head failing JOB with no log line yet, one test failing in test_results."""
    h.add("pull_request", DAY, repo=REPO, number=50, state="open", head_sha=PR_HEAD, head_ref="u/50",
          base_ref="main", labels=[], merged=None, updated_at=T0, received_at=T0)
    h.job(PR_HEAD, JOB, "failure", run_id=500, branch="u/50", created=T0 + dt.timedelta(hours=9), job_id=5001)
    Lake.at(str(tmp_path / "lake")).write("test_results", DAY, pa.Table.from_pylist([
        {"file": "test_view_ops.py", "classname": "TestViewOpsCPU", "name": "test_reshape_cpu", "status": "failed",
         "rerun_count": 0, "message": "RuntimeError: shape '[2, 3]' is invalid for input of size 7\nmore",
         "head_sha": PR_HEAD, "head_branch": "u/50", "job_id": 5001, "workflow_id": 500,
         "build_env": "linux-jammy", "test_config": "default"}]))


def test_a_failing_test_is_quoted_as_it_failed_and_the_job_by_its_full_name(tmp_path, httpserver, fake):
    h = History()
    main_history(h)
    pr50_with_a_failing_test(tmp_path, h)
    fake.merge_bases[PR_HEAD] = sha(5)
    body = comment(tmp_path, httpserver, h)["body"]
    assert "`TestViewOpsCPU.test_reshape_cpu (test_view_ops.py): RuntimeError: shape '[2, 3]' is invalid for " \
           "input of size 7`" in body
    assert f"* [pull / {JOB}](http://127.0.0.1:{httpserver.port}/{REPO}/actions/runs/500/job/5001) ({NOT_CLASSIFIED})" \
        in body


def test_the_same_failure_is_still_compared_by_its_masked_key():
    one = c.FailedTest("T.t (f.py)", c.message_key("size 7"), c.first_line("size 7"))
    other = c.FailedTest("T.t (f.py)", c.message_key("size 9"), c.first_line("size 9"))
    assert one == other and (one.text, other.text) == ("size 7", "size 9")


UNSTABLE_JOB = "linux-jammy / test (default, 1, 1, linux.4xlarge, unstable)"


def test_a_pending_unstable_job_is_listed_as_unstable_and_counted_as_pending():
    """Upstream's "test pending unstable job": listed with the unstable ones, an hourglass before it, in
    the pending count, not among the failures."""
    jobs = [c.HeadJob(UNSTABLE_JOB, "g", "pending", workflow="pull", job_id=1, run_id=1),
            c.HeadJob("linux-jammy / test (default, 1, 1, linux.4xlarge)", "g2", "pending", workflow="pull", job_id=2,
                      run_id=1),
            c.HeadJob("linux-jammy / build", "g3", "failure", workflow="pull", job_id=3, run_id=1,
                      failure_line="error: expected ';'")]
    verdicts, pending = c.classify_head(jobs, c.Trunk(), c.Flaky())
    text = render(Head(REPO, 1, "a" * 40, "b" * 40), verdicts, pending)
    assert "## :x: 1 New Failure, 2 Pending\n" in text
    assert "The following job is marked as unstable" in text
    assert f"* :hourglass_flowing_sand: [pull / {UNSTABLE_JOB}](https://github.com/{REPO}/actions/runs/1/job/1)" in text
    assert c.counts(verdicts)[c.UNSTABLE] == 0
    only = render(Head(REPO, 1, "a" * 40, "b" * 40), verdicts[1:], pending)
    assert "## :hourglass_flowing_sand: No Failures, 2 Pending\n" in only and "Looks good so far" in only
