"""The autorevert over a lake with the job tables: every attempt of a signal, with its start, read
through the HUD's own classification (commit_health built by the project's code beside them).
Upstream's infrastructure check (a failure must start between two successes) and its flaky rule
for tests (a test that failed and passed on one commit) need what commit_health alone lacks."""

import datetime as dt

from hud_lake import DAY, REPO, T0, History, sha

from resources.github import GitHubResource
from resources.lake import Lake
from torchci_assets.derived.guardians.passes import autorevert_pass, judged
from torchci_assets.derived.hud.health import build_commit_health
from torchci_assets.guardian_config import AutorevertConfig

NOW = T0 + dt.timedelta(hours=4)
JOB = "linux-jammy-py3.10 / test (default, 1, 1, linux.4xlarge)"
GROUP = "trunk / linux-jammy-py3.10 / test (default, linux.4xlarge)"
TEST, OTHER = "TestNN.test_conv (test_nn.py)", "TestNN.test_pool (test_nn.py)"


def at(minutes: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


def lake_of(tmp_path, h: History) -> Lake:
    """The lake of `h`'s job tables with commit_health built from them, as the refresh does."""
    lake = Lake.at(str(tmp_path / "lake"))
    h.write(lake)
    build_commit_health(lake, DAY, REPO, ("refs/heads/main",), min_groups=1, now=NOW)
    return lake


def attempt(h: History, i: int, conclusion: str, minute: float, attempt_no: int = 1, tests=()) -> None:
    """Commit i's trunk run (id 100 + i), attempt `attempt_no`, created at `minute`, failing `tests`."""
    job = h.job(sha(i), JOB, conclusion, workflow="trunk", run_id=100 + i, attempt=attempt_no, created=at(minute),
                minutes=20)
    for test in tests:
        h.failing_test(sha(i), job, test.split(".")[1].split(" ")[0])


def verdicts(lake: Lake) -> dict:
    return {v.signal.key: v for v in judged(lake, AutorevertConfig(), NOW, True)[1]}


def trunk(*attempts: tuple) -> History:
    """Main's commits 1..4 (sha(0) is GitHub's null sha), one every 10 minutes, each with its
    trunk run, and the `attempts` (arguments of `attempt`) of their job."""
    h = History()
    for i in range(1, 5):
        h.push(i, at(10 * i))
        h.run(100 + i, "trunk", created=at(10 * i + 1))
    for a in attempts:
        attempt(h, *a)
    return h


def test_a_green_that_passed_only_before_the_failures_is_run_again_then_the_culprit_stands(tmp_path):
    # two greens (enough by their count), then commit 3 fails twice and commit 4 once; every
    # success started before the first failure: a breakage from outside would look the same
    h = trunk((1, "success", 1), (2, "success", 11), (3, "failure", 21), (3, "failure", 60, 2), (4, "failure", 31))
    v = verdicts(lake_of(tmp_path, h))[GROUP]
    assert (v.kind, v.culprit, v.restarts) == ("restart", sha(3), (sha(2),))
    assert v.reason.startswith("no success below the first red started after its first failure")
    summary = autorevert_pass(GitHubResource(), Lake.at(str(tmp_path / "lake")), REPO, AutorevertConfig(), NOW)
    assert [(r["action"], r["commit_sha"], r["notes"]) for r in summary.taken] == [("restart", sha(2), "rerun")]
    # the green's re-run in flight: it is still the last green, nothing older is re-run meanwhile
    running = trunk((1, "success", 1), (2, "success", 11), (3, "failure", 21), (3, "failure", 60, 2),
                    (4, "failure", 31), (2, None, 90, 2))
    v = verdicts(lake_of(tmp_path / "running", running))[GROUP]
    assert (v.kind, v.culprit, v.restarts) == ("suspect", sha(3), ())
    # the green's re-run passes after the failures began: a failure lies between two successes
    attempt(h, 2, "success", 90, 2)
    v = verdicts(lake_of(tmp_path / "later", h))[GROUP]
    assert (v.kind, v.culprit) == ("confirmed", sha(3))


def test_failures_that_all_started_before_the_successes_re_run_the_first_red(tmp_path):
    # the greens' jobs queued long and ran after the reds had failed
    h = trunk((1, "success", 100), (2, "success", 110), (3, "failure", 21), (3, "failure", 30, 2), (4, "failure", 31))
    v = verdicts(lake_of(tmp_path, h))[GROUP]
    assert (v.kind, v.culprit, v.restarts) == ("restart", sha(3), (sha(3),))
    assert v.reason.startswith("every failure started before every success below it")


def test_a_test_that_failed_and_passed_on_one_commit_is_flaky_and_blames_no_one(tmp_path):
    # commit 2: the test failed on the first attempt; the rerun failed on another test only, so
    # commit_health's latest attempt shows the test passing there
    h = trunk((1, "success", 1), (1, "success", 40, 2), (2, "failure", 11, 1, [TEST]), (2, "failure", 50, 2, [OTHER]),
              (3, "failure", 21, 1, [TEST]), (3, "failure", 60, 2, [TEST]), (4, "failure", 31, 1, [TEST]))
    lake = lake_of(tmp_path, h)
    v = verdicts(lake)[f"{GROUP} :: {TEST}"]
    assert v.kind == "ineligible" and v.reason.startswith(f"flaky: failed and passed on {sha(2)[:10]}")
    # the group, red on every attempt from commit 2 on, still pins commit 2: the test adds nothing
    summary = autorevert_pass(GitHubResource(), lake, REPO, AutorevertConfig(), NOW)
    assert [(v.signal.key, v.culprit) for v in summary.confirmed] == [(GROUP, sha(2))]


def test_inside_a_gap_failures_that_all_started_before_the_successes_re_run_the_first_red_too(tmp_path):
    # commit 2's run skipped the job: a gap, bisected. The green passed twice (enough by the count),
    # but its jobs queued long and both attempts started after the reds had failed: as upstream,
    # the first red's failed jobs are re-run beside the bisection, not once the gap is closed
    h = trunk((1, "success", 100), (1, "success", 110, 2), (2, "skipped", 11), (3, "failure", 21), (4, "failure", 31))
    lake = lake_of(tmp_path, h)
    v = verdicts(lake)[GROUP]
    assert (v.kind, v.culprit, v.suspects, v.restarts) == ("restart", None, (sha(2), sha(3)), (sha(2), sha(3)))
    assert "every failure started before every success below it" in v.reason
    summary = autorevert_pass(GitHubResource(), lake, REPO, AutorevertConfig(), NOW)
    assert [(r["commit_sha"], r["run_id"], r["notes"]) for r in summary.taken] == [
        (sha(2), 102, "rerun"), (sha(3), 103, "rerun-failed-jobs")]
    # the first red's re-run in flight: the gap is still bisected, the red not re-run again; that
    # re-run started after every success, so whatever it says it cannot lie between two: the last
    # green is re-run beside it, to bring a success after it
    attempt(h, 3, None, 120, 2)
    v = verdicts(lake_of(tmp_path / "running", h))[GROUP]
    assert (v.kind, v.restarts) == ("restart", (sha(1), sha(2)))
    assert "nothing in flight can settle the infrastructure check" in v.reason


def test_once_the_first_red_failed_after_every_success_the_last_green_is_re_run_to_bracket_it(tmp_path):
    # the greens ran late (after the reds had failed); the first red's re-run failed after them:
    # a failure after a success, but none between two, and nothing in flight can bring one. As
    # upstream stands, the check would wait for ever: the last green is re-run instead
    h = trunk((1, "success", 100), (2, "success", 110), (3, "failure", 21), (3, "failure", 30, 2), (4, "failure", 31),
              (3, "failure", 150, 3))
    v = verdicts(lake_of(tmp_path, h))[GROUP]
    assert (v.kind, v.culprit, v.restarts) == ("restart", sha(3), (sha(2),))
    assert "nothing in flight can settle the infrastructure check" in v.reason
    # the green's re-run passes after that failure: it lies between two successes
    attempt(h, 2, "success", 200, 2)
    v = verdicts(lake_of(tmp_path / "later", h))[GROUP]
    assert (v.kind, v.culprit) == ("confirmed", sha(3))


def test_a_test_signal_keeps_its_first_red_while_that_commit_is_re_run(tmp_path):
    # commit 3 failed the test; its confirming re-run is in flight (commit_health's latest attempt,
    # pending, lists no failing test yet): it is still the test's first red, not a commit to bisect
    h = trunk((1, "success", 1), (1, "success", 40, 2), (2, "success", 11), (3, "failure", 21, 1, [TEST]),
              (4, "failure", 31, 1, [TEST]), (3, None, 90, 2))
    v = verdicts(lake_of(tmp_path, h))[f"{GROUP} :: {TEST}"]
    assert (v.kind, v.culprit, v.restarts) == ("suspect", sha(3), ())
