"""Dr. CI's verdicts on edge cases, checked against PyTorch's Dr. CI (test-infra's torchci/lib/drciUtils.ts,
jobUtils.ts and pages/api/drci/drci.ts) as the reference:

- a failure main started having after the merge base (a dependency, an image, a runner changed under
  everyone) is not the pull request's: upstream finds it among the same failures of the day before the
  merge base up to the head's push (hasSimilarFailures) and calls it FLAKY; here main's commits in that
  span are asked, beyond the two on each side of the merge base that BROKEN TRUNK asks;
- a job whose step ran past its timeout: GitHub's `The action 'Test' has timed out` is the pull
  request's for backwards_compat (upstream never calls it flaky, and only the cancelled-step line is a
  cancellation), INFRA for a test shard here; a job past its own timeout GitHub concludes `cancelled`;
- a job created and never started, with no sibling id to replace it: pending, abandoned after 36 hours.

The log lines are those the project's log classifier finds in PyTorch's real CI logs
(tests/data/log-classifier/fixtures); merge bases come from a real HTTP server on 127.0.0.1 playing
GitHub's compare API (fake_github_pulls.py).
"""

import datetime as dt

import pytest
from hud_lake import DAY, REPO, T0, History, sha
from test_drci import T1, T2, fake, gh  # noqa: F401 (fake: the compare API's fixture)
from test_drci_upstream import classified_line

from resources.lake import Lake
from torchci_assets.derived.drci import classify as c
from torchci_assets.derived.drci.build import build_comments
from torchci_assets.derived.drci.inputs import Main
from torchci_assets.derived.hud.health import build_commit_health, build_pr_jobs

PR_HEAD = "ef" * 20
SMOKE = "linux-noble-rocm-py3.12-mi300 / inductor-smoke"
# an external breakage: a ROCm library missing from the runners' image (a real log's line)
MISSING_SO = "python_importerror_missing_so.txt"


def at(hour: float) -> dt.datetime:
    return T0.replace(hour=0) + dt.timedelta(hours=hour)


def comment(tmp_path, h: History, github, now: dt.datetime) -> dict:
    """Dr. CI's row of pull request 50 of `h`, as of `now` (the partition of its day)."""
    lake = Lake.at(str(tmp_path / "lake"))
    h.write(lake)
    day = now.date().isoformat()
    build_commit_health(lake, day, REPO, ("refs/heads/main",), min_groups=1, now=now)
    build_pr_jobs(lake, day, REPO, now=now)
    return build_comments(lake, github, day, REPO, now=now).rows[0]


def pull_request_50(h: History, pushed: dt.datetime) -> None:
    h.add("pull_request", DAY, repo=REPO, number=50, state="open", head_sha=PR_HEAD, head_ref="u/50",
          base_ref="main", labels=[], merged=None, updated_at=pushed, received_at=pushed)


def main_breaks_at(h: History, first_failing: int, line: str, name: str = SMOKE) -> None:
    """Main commits 1..8, pushed at hours 1..8, whose job `name` fails with `line` from `first_failing` on."""
    for i in range(1, 9):
        job = h.job(h.push(i, at(i)), name, "failure" if i >= first_failing else "success", run_id=10 * i,
                    created=at(i))
        if i >= first_failing:
            h.add("job_failure", DAY, job_id=job, run_attempt=1, infra=False, line=line)


def pr_fails(h: History, line: str, pushed: dt.datetime, name: str = SMOKE) -> None:
    pull_request_50(h, pushed)
    job = h.job(PR_HEAD, name, "failure", run_id=500, branch="u/50", created=pushed)
    h.add("job_failure", DAY, job_id=job, run_attempt=1, infra=False, line=line)


# ---- main broke after the merge base, not by the pull request -------------------------------------


def test_a_failure_main_started_having_after_the_merge_base_is_flaky_not_new(tmp_path, httpserver, fake):
    """Main's job fails from commit 6 on (three after the merge base, 3), the pull request's fails alike:
    the pull request lacks commits 4..8, so main's code did not break it, nor did its own; PyTorch's Dr. CI
    finds that failure on main between the day before the merge base and the head's push and calls it
    FLAKY (hasSimilarFailures), where BROKEN TRUNK asks only two commits on each side."""
    line = classified_line(MISSING_SO)
    h = History()
    main_breaks_at(h, 6, line)
    pr_fails(h, line, at(10))
    fake.merge_bases[PR_HEAD] = sha(3)
    row = comment(tmp_path, h, gh(httpserver), at(12))
    assert (row["new"], row["flaky"], row["broken_trunk"]) == (0, 1, 0)
    assert f"([similar failure](" in row["body"] and f"on main, 3 commits after the merge base: {sha(6)[:10]})" \
        in row["body"]
    assert "NEW FAILURE" not in row["body"]


def main_with(failing: dict[int, list], tests: dict[int, set] | None = None) -> Main:
    """Main commits 1..8 pushed at hours 1..8 of DAY; `failing`: commit -> [(group, line)] failing there;
    `tests`: commit -> {(test, message)} failing there (linux-jammy-py3.10-gcc11, default)."""
    return Main(order=[sha(i) for i in range(1, 9)], pushed={sha(i): at(i) for i in range(1, 9)},
                failures={sha(i): [(g, 90 + i, 9, c.message_key(line), False) for g, line in groups]
                          for i, groups in failing.items()},
                tests={(sha(i), "linux-jammy-py3.10-gcc11", "default"): frozenset((k, c.message_key(m)) for k, m in t)
                       for i, t in (tests or {}).items()})


def smoke(line: str, **kw) -> c.HeadJob:
    return c.HeadJob(SMOKE, f"pull / {SMOKE}", "failure", "new", job_id=7, run_id=3, workflow="pull",
                     failure_line=line, **kw)


def verdict(job: c.HeadJob, main: Main, until: dt.datetime | None = None, own=frozenset()) -> c.Verdict:
    return c.classify(job, main.trunk(sha(3), frozenset(own), until or at(10)), c.Flaky())


def test_main_failing_alike_after_the_merge_base_is_evidence_only_within_upstreams_span():
    line = classified_line(MISSING_SO)
    main = main_with({6: [(f"pull / {SMOKE}", line)]})
    v = verdict(smoke(line), main)
    assert (v.cls, v.main.sha, v.main.distance, v.main.after) == (c.FLAKY, sha(6), 3, True)
    assert v.evidence == "failed the same way on main, 3 commits after the merge base"
    # the head was pushed before main's failure: nothing says main had it when the head ran
    assert verdict(smoke(line), main, until=at(5.5)).cls == c.NEW
    # a merge base more than a week (and a day) before the head's push is too old to tell by, as upstream
    assert verdict(smoke(line), main, until=at(3) + dt.timedelta(days=6, hours=1)).cls == c.NEW
    assert verdict(smoke(line), main, until=at(3) + dt.timedelta(days=5, hours=23)).cls == c.FLAKY
    # main failing otherwise is another failure
    assert verdict(smoke("ImportError: libamdhip64.so.6: cannot open shared object file"), main).cls == c.NEW
    # a commit that landed this pull request before, and those after it, are its own breakage
    assert verdict(smoke(line), main, own={sha(6)}).cls == c.NEW
    # the two commits on each side stay BROKEN TRUNK's
    near = verdict(smoke(line), main_with({5: [(f"pull / {SMOKE}", line)]}))
    assert (near.cls, near.main.sha) == (c.BROKEN_TRUNK, sha(5))
    # beyond them, a failure up to a day before the merge base counts, as upstream's span starts there
    assert verdict(smoke(line), main_with({1: [(f"pull / {SMOKE}", line)]})).cls == c.BROKEN_TRUNK
    before = Main(order=[sha(0), *main.order], pushed={sha(0): at(3) - dt.timedelta(hours=23), **main.pushed},
                  failures={sha(0): [(f"pull / {SMOKE}", 90, 9, c.message_key(line), False)]})
    assert verdict(smoke(line), before).cls == c.FLAKY
    before.pushed[sha(0)] = at(3) - dt.timedelta(hours=25)
    assert verdict(smoke(line), before).cls == c.NEW


def test_a_heads_main_failures_are_those_of_its_commits_by_group_in_mains_order():
    """What `Main.trunk` hands the classifier for merge base 3: the failures of commits 1-5 (two on each
    side) by group, in main's order, each with its distance and side; the later commits pushed by the
    head's push in `window`; the pull request's own landing commit and those after it left out."""
    a, b = "pull / a", "pull / b"
    main = main_with({1: [(a, "x 1")], 2: [(b, "y")], 3: [(a, "x 3"), (a, "x 3 again")], 4: [(a, "x 4")],
                      6: [(a, "x 6"), (b, "y 6")], 7: [(a, "x 7")], 8: [(b, "y 8")]})
    t = main.trunk(sha(3), frozenset(), at(7.5))

    def seen(failures):
        return [(f.sha, f.job_id, f.distance, f.merge_base, f.after, f.line) for f in failures]

    assert seen(t.failures.get(a, ())) == [
        (sha(1), 91, 2, False, False, "x N"), (sha(3), 93, 0, True, False, "x N"),
        (sha(3), 93, 0, True, False, "x N again"), (sha(4), 94, 1, False, True, "x N")]
    assert seen(t.failures[b]) == [(sha(2), 92, 1, False, False, "y")]
    assert t.failures.get("pull / c", ()) == () and "pull / c" not in t.failures
    assert sorted(t.failures) == [a, b] and len(t.failures) == 2
    # commits 6 and 7 were pushed by 7.5; 8 was not
    assert seen(t.window.get(a, ())) == [(sha(6), 96, 3, False, True, "x N"), (sha(7), 97, 4, False, True, "x N")]
    assert seen(t.window[b]) == [(sha(6), 96, 3, False, True, "y N")]
    # landed at commit 4: it and every later commit are the pull request's own
    own = main.trunk(sha(3), frozenset({sha(4)}), at(7.5))
    assert [f.sha for f in own.failures[a]] == [sha(1), sha(3), sha(3)] and not own.window


@pytest.mark.parametrize("line", ["##[error]Process completed with exit code 1.",
                                  "##[error]The operation was canceled.", None])
def test_a_line_that_names_no_failure_finds_nothing_on_main_after_the_merge_base(line):
    """A step's exit code, its cancellation or no line at all is every failure's: without upstream's last
    command to compare, it would make any failure main had in a week the pull request's excuse."""
    main = main_with({6: [(f"pull / {SMOKE}", line or "")]})
    assert verdict(smoke(line), main).cls in (c.NEW, c.CANCELLED)


def test_jobs_upstream_never_calls_flaky_are_not_flaky_by_mains_later_failure():
    line = "ninja: build stopped: subcommand failed."
    build = c.HeadJob("linux-jammy-py3.10-gcc11 / build", "pull / linux-jammy-py3.10-gcc11 / build", "failure",
                      "new", workflow="pull", failure_line=line)
    assert verdict(build, main_with({6: [(build.job_group, line)]})).cls == c.NEW


def test_a_test_job_is_flaky_by_main_only_when_main_failed_its_tests_alike():
    group = "pull / linux-jammy-py3.10-gcc11 / test (default, linux.4xlarge)"
    msg = "ImportError: librocm_smi64.so.1: cannot open shared object file: No such file or directory"
    job = c.HeadJob("linux-jammy-py3.10-gcc11 / test (default, 1, 5, linux.4xlarge)", group, "failure", "new",
                    workflow="pull", build_env="linux-jammy-py3.10-gcc11", test_config="default",
                    tests=(c.FailedTest(T1, c.message_key(msg)),))
    assert verdict(job, main_with({6: [(group, "")]}, {6: {(T1, msg)}})).cls == c.FLAKY
    assert verdict(job, main_with({6: [(group, "")]}, {6: {(T2, msg)}})).cls == c.NEW


# ---- a job that ran past its timeout ------------------------------------------------------------------

BC = "linux-jammy-py3.10-gcc11 / test (backwards_compat, 1, 1, linux.2xlarge)"
DEFAULT = "linux-jammy-py3.10-gcc11 / test (default, 1, 5, linux.4xlarge)"


def timed_out(tmp_path, github, fake, name: str, conclusion: str, line: str) -> dict:
    """Dr. CI's row of a pull request whose job `name` ended `conclusion` with the log classifier's `line`
    (an infra rule's: `job_failure.infra`), the job having passed at the merge base."""
    h = History()
    config = "backwards_compat" if "backwards_compat" in name else "default"
    for i in (1, 2):
        h.job(h.push(i, at(i)), name, "success", run_id=10 * i, created=at(i), test_config=config)
    pull_request_50(h, at(4))
    job = h.job(PR_HEAD, name, conclusion, run_id=500, branch="u/50", created=at(4), minutes=240, test_config=config)
    h.add("job_failure", DAY, job_id=job, run_attempt=1, infra=True, line=line)
    fake.merge_bases[PR_HEAD] = sha(2)
    return comment(tmp_path, h, github, at(12))


def test_a_backwards_compat_step_past_its_timeout_is_the_pull_requests_as_upstream_says(tmp_path, httpserver, fake):
    """GitHub stops a step past its `timeout-minutes` with `##[error]The action 'Test' has timed out after N
    minutes.` and concludes the job `failure`. PyTorch's Dr. CI never calls backwards_compat flaky, has no
    infra class, and takes only the cancelled-step line for a cancellation: NEW, as here. A test shard
    with that line is INFRA here, to retry (upstream: FLAKY when another branch's same job timed out in
    the week, else NEW)."""
    line = classified_line("gha_timeout.txt")
    row = timed_out(tmp_path / "bc", gh(httpserver), fake, BC, "failure", line)
    assert (row["new"], row["infra"], row["cancelled"]) == (1, 0, 0)
    assert "has timed out after 360 minutes" in row["body"]
    shard = timed_out(tmp_path / "default", gh(httpserver), fake, DEFAULT, "failure", line)
    assert (shard["new"], shard["infra"]) == (0, 1)


@pytest.mark.parametrize("name", [BC, DEFAULT])
def test_a_job_past_its_own_timeout_is_cancelled_for_backwards_compat_as_upstream(tmp_path, httpserver, fake, name):
    """A job past the job's `timeout-minutes` GitHub concludes `cancelled` (its log: `The job running on runner
    ... has exceeded the maximum execution time`, then `The operation was canceled.`): CANCELLED, to retry,
    as upstream lists it; a test shard's infra line makes it INFRA here, also to retry."""
    line = "##[error]The operation was canceled."
    row = timed_out(tmp_path, gh(httpserver), fake, name, "cancelled", line)
    assert (row["new"], row["cancelled"] + row["infra"]) == (0, 1)
    assert row["cancelled"] == (1 if name == BC else 0)


# ---- a job created and never started --------------------------------------------------------------


@pytest.mark.parametrize("hours, pending, infra", [(35, 1, 0), (37, 0, 1)])
def test_a_job_that_never_started_is_pending_then_abandoned_after_36_hours(tmp_path, hours, pending, infra):
    """A job id GitHub created that never got a runner nor a conclusion, and no other id of the same job
    in its run: pending, as upstream counts it for ever; after 36 hours (GitHub gives up on a queued job
    after 24, so its conclusion was lost and gap repair could not read it) INFRA, `abandoned`: a retry,
    not a failure of the code, and not a pull request pending for ever."""
    from resources.github import GitHubResource

    h = History()
    for i in (1, 2):
        h.job(h.push(i, at(i)), SMOKE, "success", run_id=10 * i, created=at(i))
    pull_request_50(h, at(3))
    h.job(PR_HEAD, SMOKE, None, status="queued", run_id=500, branch="u/50", created=at(3))
    row = comment(tmp_path, h, GitHubResource(api_url="http://127.0.0.1:9"), at(3) + dt.timedelta(hours=hours))
    assert (row["pending"], row["infra"], row["new"]) == (pending, infra, 0)
    if infra:
        assert "no conclusion for 36 hours: abandoned" in row["body"]
