"""Dr. CI's post-pass over one head's failures (upstream's hasSimilarFailuresInSamePR): a failure that
repeats an UNSTABLE, FLAKY or BROKEN TRUNK job of the same head is unrelated too. End to end through the
real lake builders, and the limits (a generic line, another message, a cancelled twin) on hand-made jobs."""

import datetime as dt

import pytest
from fake_github_pulls import FakePullRequests
from hud_lake import T0, History, sha
from test_drci_reverted_pr import JOB, SEGV, comment, main_history

from torchci_assets.derived.drci import classify as c

PR_HEAD = "cd" * 20
CUDA = "linux-focal-cuda12.6 / test (default, 1, 1, linux.4xlarge)"


@pytest.fixture
def fake(httpserver):
    return FakePullRequests(httpserver, "pytorch/pytorch")


def pr50(h: History, *jobs: tuple[str, str]) -> None:
    """PR 50 with its head failing each (workflow, job name) of `jobs` with SEGV."""
    h.add("pull_request", "2026-10-05", repo="pytorch/pytorch", number=50, state="open", head_sha=PR_HEAD,
          head_ref="u/50", base_ref="main", labels=[], merged=None, updated_at=T0, received_at=T0)
    for k, (workflow, name) in enumerate(jobs):
        j = h.job(PR_HEAD, name, "failure", workflow=workflow, run_id=500 + k, branch="u/50",
                  created=T0 + dt.timedelta(hours=9), job_id=5001 + k)
        h.add("job_failure", "2026-10-05", job_id=j, run_attempt=1, infra=False, line=SEGV)


def test_a_periodic_job_broken_like_its_trunk_job_is_flaky(tmp_path, httpserver, fake):
    """The merge base sha(5) fails JOB with SEGV: the head's JOB is BROKEN TRUNK, and its periodic slow
    shard (never run on main) failing with the same SEGV is FLAKY, citing JOB, not the author's to fix."""
    h = History()
    main_history(h, failing_at=(5,))
    pr50(h, ("pull", JOB), ("periodic", "linux-jammy / test (slow, 1, 1, linux.4xlarge)"))
    fake.merge_bases[PR_HEAD] = sha(5)
    row = comment(tmp_path, httpserver, h)
    assert {j["job_id"]: j["class"] for j in row["jobs"]} == {5001: c.BROKEN_TRUNK, 5002: c.FLAKY}
    assert "You can merge normally! (2 Unrelated Failures)" in row["body"]
    assert "the same failure as pull / linux-jammy / test (default, 1, 1, linux.4xlarge)" in row["body"]


UNSTABLE_JAMMY = {"pull / linux-jammy": ["pytorch-bot", 123, "https://github.com/pytorch/pytorch/issues/123", "pull",
                                        "linux-jammy", ""]}


def test_a_job_failing_like_an_unstable_one_that_main_fails_too_is_unstable(tmp_path, httpserver, fake):
    """`pull / linux-jammy` is marked unstable and its SEGV is on the merge base too (unrelated beneath
    the mark); the CUDA job failing with the same SEGV (not on main) is unstable too, citing it."""
    h = History()
    main_history(h, failing_at=(5,))
    pr50(h, ("pull", JOB), ("pull", CUDA))
    fake.merge_bases[PR_HEAD] = sha(5)
    row = comment(tmp_path, httpserver, h, unstable=UNSTABLE_JAMMY)
    assert {j["job_id"]: j["class"] for j in row["jobs"]} == {5001: c.UNSTABLE, 5002: c.UNSTABLE}
    assert "You can merge normally! (2 Unrelated Failures)" in row["body"]
    assert f"the same failure as pull / {JOB}" in row["body"]


def test_an_unstable_mark_alone_does_not_make_its_twin_unrelated(tmp_path, httpserver, fake):
    """The same, but nothing says the SEGV is not the pull request's (main passes): the mark excuses the
    unstable job only, and its twin is NEW (upstream would call it UNSTABLE)."""
    h = History()
    main_history(h)
    pr50(h, ("pull", JOB), ("pull", CUDA))
    fake.merge_bases[PR_HEAD] = sha(5)
    row = comment(tmp_path, httpserver, h, unstable=UNSTABLE_JAMMY)
    assert {j["job_id"]: j["class"] for j in row["jobs"]} == {5001: c.UNSTABLE, 5002: c.NEW}


def job(name: str, line: str | None, job_id: int, cancelled=False, tests=()) -> c.HeadJob:
    return c.HeadJob(name=name, job_group=f"pull / {name}", state="failure", job_id=job_id, run_id=1, workflow="pull",
                     failure_line=line, cancelled=cancelled,
                     tests=tuple(c.FailedTest(k, c.message_key(m)) for k, m in tests))


def classes(flaky: c.HeadJob, other: c.HeadJob) -> list[str]:
    """The classes after the post-pass of a FLAKY job and another one, NEW before it."""
    return [v.cls for v in c.similar_in_pr([c.Verdict(flaky, c.FLAKY, "x"), c.Verdict(other, c.NEW)])]


def test_only_the_same_failure_follows_a_flaky_twin():
    assert classes(job(JOB, SEGV, 1), job(CUDA, SEGV, 2)) == [c.FLAKY, c.FLAKY]
    assert classes(job(JOB, SEGV, 1), job(CUDA, "RuntimeError: CUDA error: an illegal memory access", 2)) == \
        [c.FLAKY, c.NEW]
    # a generic exit code says nothing of the failure: never matched (upstream's exclusion)
    generic = "Process completed with exit code 1."
    assert classes(job(JOB, generic, 1), job(CUDA, generic, 2)) == [c.FLAKY, c.NEW]
    # a cancelled job is not the same failure as a failed one
    assert classes(job(JOB, SEGV, 1), job(CUDA, SEGV, 2, cancelled=True)) == [c.FLAKY, c.NEW]
    # without log lines, the same failing tests with the same messages (numbers masked) are
    t = "TestOps.test_add (test_ops.py)"
    assert classes(job(JOB, None, 1, tests=[(t, "AssertionError: 3 != 4")]),
                   job(CUDA, None, 2, tests=[(t, "AssertionError: 5 != 6")])) == [c.FLAKY, c.FLAKY]
    assert classes(job(JOB, None, 1), job(CUDA, None, 2)) == [c.FLAKY, c.NEW]
    # never a build (a job never called flaky)
    assert classes(job(JOB, SEGV, 1), job("linux-jammy / build", SEGV, 2)) == [c.FLAKY, c.NEW]


def test_a_cancelled_job_cancelled_like_an_unrelated_one_is_unrelated_too():
    """Upstream's post-pass takes every job its classes left as the pull request's, cancelled ones
    included (isSameFailure then asks for the same conclusion): a cancelled periodic shard whose log
    ends like the cancelled trunk job's, itself cancelled alike on the merge base, is FLAKY."""
    cut = "##[error]The runner has received a shutdown signal."
    twin = job("linux-jammy / test (slow, 1, 1, linux.4xlarge)", cut, 2, cancelled=True)
    trunk_job = job(JOB, cut, 1, cancelled=True)
    trunk_job.job_group, twin.workflow, twin.job_group = "pull / linux-jammy / test", "periodic", "periodic / linux-jammy / test"
    main = c.Trunk(failures={"pull / linux-jammy / test": [
        c.MainFailure("ab" * 20, "pull / linux-jammy / test", 90, 9, True, line=c.message_key(cut), cancelled=True)]})
    verdicts, _ = c.classify_head([trunk_job, twin], main, c.Flaky())
    assert [(v.cls, v.related) for v in verdicts] == [(c.BROKEN_TRUNK, None), (c.FLAKY, trunk_job)]
    # a cancelled job is still never the same failure as a failed one, nor is nothing the same as nothing
    assert classes(job(JOB, SEGV, 1), job(CUDA, SEGV, 2, cancelled=True)) == [c.FLAKY, c.NEW]
    assert [v.cls for v in c.similar_in_pr([c.Verdict(job(JOB, None, 1, cancelled=True), c.FLAKY, "x"),
                                            c.Verdict(job(CUDA, None, 2, cancelled=True), c.CANCELLED)])] == \
        [c.FLAKY, c.CANCELLED]
