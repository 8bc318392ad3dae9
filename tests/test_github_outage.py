"""GitHub down (every request a 5xx, or no connection, after the client's retries): a pass of Dr.
CI stops at the first request that gave up, says so in one line with how many pull requests wait,
and the next run, GitHub back, posts each comment exactly once. A 4xx for one pull request still
fails that pull request only.

Against the fake comments API on 127.0.0.1 (fake_github_pulls.py), with every request answered 503
from the `down_from`-th on (the `outage` fixture of github_outage.py), as GitHub's front end answers
during an outage.
"""

import datetime as dt
import socket

from fake_github_issues import Scripted, json_response
from fake_github_pulls import FakePullRequests
from github_outage import ATTEMPTS, outage  # noqa: F401 (the fixture)
from resources.github import GitHubResource
from resources.lake import Lake
from resources.storage import Store
from test_drci import GROUP, HEAD, MAIN, REPO, TODAY, TOKEN, body, gh
from torchci_assets.derived.drci import classify as c
from torchci_assets.derived.drci.inputs import PullRequest
from torchci_assets.derived.drci.merge_base import resolve
from torchci_assets.derived.drci.publish import publish
from torchci_assets.derived.drci.refresh import RefreshLimits, refresh_heads

PRS = (5, 6, 7, 8)


def run(client: GitHubResource, tmp_path, prs=PRS, logged: list | None = None):
    """One Dr. CI run posting on `prs` over the same lake (the ledger carries over between runs)."""
    lake, outputs = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    rows = [{"pr": n, "head_sha": HEAD, "pr_state": "open", "body": body()} for n in prs]
    return publish(lake, outputs, client, TODAY.isoformat(), REPO, rows, enabled=True, today=TODAY,
                   log=(logged if logged is not None else []).append)


def test_github_down_from_the_start_stops_the_pass_at_the_first_request_and_the_next_run_posts_each_once(
        httpserver, tmp_path, outage):
    fake = FakePullRequests(httpserver, REPO)
    logged: list[str] = []
    report = run(gh(httpserver), tmp_path, logged=logged)
    assert len(outage.requests) == ATTEMPTS  # PR 5's list, retried to the end; 6, 7 and 8 not tried
    assert "GitHub was unavailable" in report.stopped and "HTTP 503" in report.stopped
    assert "4 pull request(s) wait" in report.stopped and "nothing lost" in report.stopped
    assert sorted(report.failed) == list(PRS)
    assert sum("STOPPED" in line for line in logged) == 1
    outage.down_from = None
    again = run(gh(httpserver), tmp_path)
    assert again.actions["created"] == 4 and not again.stopped and not again.failed
    assert all(fake.bodies(n) == [body()] for n in PRS)


def test_github_going_down_mid_pass_keeps_what_was_posted_and_posts_the_rest_once_when_back(httpserver, tmp_path,
                                                                                           outage):
    fake = FakePullRequests(httpserver, REPO)
    outage.down_from = 7  # PR 5 and PR 6 cost a list, a create and a list each; PR 7's list meets the outage
    report = run(gh(httpserver), tmp_path)
    assert report.actions["created"] == 2 and fake.bodies(5) == fake.bodies(6) == [body()]
    assert len(outage.requests) == 6 + ATTEMPTS and 8 not in fake.comments
    assert sorted(report.failed) == [7, 8] and "2 pull request(s) wait" in report.stopped
    outage.down_from = None
    before = len(outage.requests)
    again = run(gh(httpserver), tmp_path)
    assert again.actions["created"] == 2 and again.actions["recorded"] == 2 and not again.failed
    assert all(fake.bodies(n) == [body()] for n in PRS)
    assert len(outage.requests) - before == 6  # 5 and 6 cost nothing (the ledger), 7 and 8 three each


def test_a_comment_github_made_as_it_went_down_is_adopted_not_posted_again(httpserver, tmp_path, outage):
    """PR 7's create takes effect but GitHub answers 503 (not resent: it may have been made), and the
    list looking for it meets the outage: the next run finds the comment rather than adding one."""
    fake = FakePullRequests(httpserver, REPO)
    fake.fail("create", Scripted(json_response(503, {"message": "Service Unavailable"}), after_effect=True))
    outage.down_from = 3  # PR 7's list, its create, then the list after it
    report = run(gh(httpserver), tmp_path, prs=(7, 8))
    assert fake.bodies(7) == [body()] and sorted(report.failed) == [7, 8] and "GitHub was unavailable" in report.stopped
    assert len(outage.requests) == 2 + ATTEMPTS
    outage.down_from = None
    again = run(gh(httpserver), tmp_path, prs=(7, 8))
    assert again.actions["unchanged"] == 1 and again.actions["created"] == 1 and not again.failed
    assert fake.bodies(7) == fake.bodies(8) == [body()]


def test_no_connection_to_github_stops_the_pass_at_the_first_request(tmp_path):
    with socket.socket() as s:  # a port nothing listens on: every connection refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = GitHubResource(api_url=f"http://127.0.0.1:{port}", token=TOKEN, backoff_base_s=0.01,
                            write_interval_s=0, search_interval_s=0)
    attempts: list[float] = []
    client._sleep = attempts.append
    report = run(client, tmp_path)
    assert len(attempts) == ATTEMPTS - 1  # one request's retries, not one per pull request
    assert "GitHub was unavailable" in report.stopped and "4 pull request(s) wait" in report.stopped
    assert sorted(report.failed) == list(PRS)


def test_a_deleted_pull_request_fails_alone_while_the_others_post(httpserver, tmp_path):
    fake = FakePullRequests(httpserver, REPO)
    fake.fail("list", json_response(404, {"message": "Not Found"}))
    report = run(gh(httpserver), tmp_path)
    assert list(report.failed) == [5] and "404" in report.failed[5] and not report.stopped
    assert report.actions["created"] == 3 and all(fake.bodies(n) == [body()] for n in PRS[1:])


# ---- the reads before the posts: merge bases and stuck heads ----------------------------------


HEADS = [f"{n:02x}" * 20 for n in (0xa1, 0xa2, 0xa3)]


def test_github_down_estimates_every_merge_base_after_one_compare(httpserver, tmp_path, outage):
    found = resolve(Lake.at(str(tmp_path / "lake")), gh(httpserver), TODAY.isoformat(), REPO,
                    [(h, MAIN[6]) for h in HEADS])
    assert len(outage.requests) == ATTEMPTS  # the first head's compare; the others not asked
    assert all(found[h].sha == MAIN[6] and not found[h].exact for h in HEADS)
    assert all("GitHub unavailable" in found[h].note for h in HEADS[1:])


def test_github_down_reads_one_stuck_head_then_leaves_the_others_to_the_lake(httpserver, outage):
    now = dt.datetime(2026, 11, 2, 12, tzinfo=dt.timezone.utc)
    prs = {n: PullRequest(n, h, "open", "main", "b", now - dt.timedelta(hours=6),
                          [c.HeadJob("linux / test (default, 1, 2, linux.4xlarge)", GROUP, "pending", workflow="pull",
                                     started_at=now - dt.timedelta(hours=6))]) for n, h in zip(PRS, HEADS)}
    logged: list[str] = []
    changed, _ = refresh_heads(gh(httpserver), REPO, prs, RefreshLimits(), now, log=logged.append)
    assert changed == {} and len(outage.requests) == ATTEMPTS
    assert len(logged) == 1 and "GitHub was unavailable" in logged[0] and "3 stale head(s)" in logged[0]
