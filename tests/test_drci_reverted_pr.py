"""Dr. CI on a pull request that landed, broke main and was reverted: its own commit's failure on main
is not the trunk's (PyTorch's Dr. CI rejects a pull request's merge commits), and a failure seen on a
main commit next to the merge base is worded as such, not as the merge base's. Run through the real
lake builders (commit_health, pr_jobs, drci_comments) and the fake GitHub compare API."""

import datetime as dt
import json

import pyarrow as pa
import pytest
from fake_github_pulls import FakePullRequests
from hud_lake import DAY, REPO, T0, History, sha
from test_drci import gh

from resources.lake import Lake
from torchci_assets.derived.drci.build import build_comments
from torchci_assets.derived.hud.health import build_commit_health, build_pr_jobs
from torchci_assets.ingest.webhook_scan import WEBHOOK_EVENTS_SCHEMA

PR_HEAD = "cd" * 20
SEGV = "RuntimeError: test_ops 1/1 failed! Received signal: SIGSEGV"
JOB = "linux-jammy / test (default, 1, 1, linux.4xlarge)"


@pytest.fixture
def fake(httpserver):
    return FakePullRequests(httpserver, REPO)


def main_history(h: History, failing_at=()) -> None:
    """Main commits sha(1)..sha(8), an hour apart, each running JOB and a cuda job; JOB fails (SEGV) on `failing_at`."""
    for i in range(1, 9):
        at = T0 + dt.timedelta(hours=i)
        h.push(i, at)
        for name in (JOB, "linux-focal-cuda12.6 / test (default, 1, 1, linux.4xlarge)"):
            failed = i in failing_at and name == JOB
            jid = h.job(sha(i), name, "failure" if failed else "success", run_id=10 * i, created=at)
            if failed:
                h.add("job_failure", DAY, job_id=jid, run_attempt=1, infra=False, line=SEGV)


def pr50_failing(h: History) -> None:
    """PR 50, open again, its head (merge base sha(5)) failing JOB with SEGV."""
    h.add("pull_request", DAY, repo=REPO, number=50, state="open", head_sha=PR_HEAD, head_ref="u/50",
          base_ref="main", labels=[], merged=None, updated_at=T0, received_at=T0)
    j = h.job(PR_HEAD, JOB, "failure", run_id=500, branch="u/50", created=T0 + dt.timedelta(hours=9), job_id=5001)
    h.add("job_failure", DAY, job_id=j, run_attempt=1, infra=False, line=SEGV)


def webhooks(lake: Lake, *deliveries: tuple[str, str | None, dict]) -> None:
    rows = [{"event": event, "action": action, "delivery_id": f"d{i}", "received_at": T0 + dt.timedelta(hours=6),
             "repo": REPO, "payload": json.dumps(payload)} for i, (event, action, payload) in enumerate(deliveries)]
    lake.write("webhook_events", DAY, pa.Table.from_pylist(rows, schema=WEBHOOK_EVENTS_SCHEMA), part="part-test")


def landed_by_merge_bot(number: int, commit: str) -> tuple[str, None, dict]:
    """The push of PyTorch's merge bot landing pull request `number` as `commit`."""
    message = (f"[inductor] Fix the thing (#{number})\n\nSummary.\n\nPull Request resolved: "
               f"https://github.com/{REPO}/pull/{number}\nApproved by: https://github.com/someone")
    return "push", None, {"ref": "refs/heads/main", "after": commit, "commits": [{"id": commit, "message": message}]}


def landed_by_github(number: int, commit: str) -> tuple[str, str, dict]:
    """GitHub's pull_request webhook of a merge through its button."""
    return "pull_request", "closed", {"action": "closed", "number": number, "pull_request": {
        "number": number, "state": "closed", "merged": True, "merge_commit_sha": commit,
        "head": {"sha": "ef" * 20, "ref": f"u/{number}"}, "base": {"sha": sha(5), "ref": "main"}}}


def comment(tmp_path, httpserver, h: History, *deliveries, unstable: dict | None = None) -> dict:
    now = T0.replace(hour=20)
    lake = Lake.at(str(tmp_path / "lake"))
    h.write(lake)
    if deliveries:
        webhooks(lake, *deliveries)
    build_commit_health(lake, DAY, REPO, ("refs/heads/main",), min_groups=1, now=now)
    build_pr_jobs(lake, DAY, REPO, now=now)
    return build_comments(lake, gh(httpserver), DAY, REPO, now=now, unstable=unstable).rows[0]


def pr50_comment(tmp_path, httpserver, fake, failing_at: tuple[int, ...], landed) -> dict:
    """PR 50's comment, its merge base sha(5), main failing on `failing_at`, `landed` the evidence of
    which main commit landed which pull request."""
    h = History()
    main_history(h, failing_at=failing_at)
    pr50_failing(h)
    fake.merge_bases[PR_HEAD] = sha(5)
    return comment(tmp_path, httpserver, h, landed)


@pytest.mark.parametrize("landing", [landed_by_merge_bot, landed_by_github])
def test_a_reverted_pull_request_s_own_failure_on_main_is_new(tmp_path, httpserver, fake, landing):
    """PR 50 (merge base sha(5), green) landed as sha(6), which broke JOB; sha(7) reverted it. Pushed
    again, it fails the same way: that is its own failure, not a broken trunk to merge over."""
    row = pr50_comment(tmp_path, httpserver, fake, (6,), landing(50, sha(6)))
    assert (row["new"], row["broken_trunk"]) == (1, 0), row["body"]
    assert "You can merge normally" not in row["body"]


def test_commits_after_the_pull_request_s_landing_are_its_own_too(tmp_path, httpserver, fake):
    """Landed as sha(6), still failing on sha(7) (another pull request landed before the revert): the
    failure there is the pull request's change too."""
    row = pr50_comment(tmp_path, httpserver, fake, (6, 7), landed_by_merge_bot(50, sha(6)))
    assert (row["new"], row["broken_trunk"]) == (1, 0), row["body"]


def test_another_pull_request_s_landing_still_counts_as_the_trunk_s(tmp_path, httpserver, fake):
    """sha(6) landed PR 49, not 50: its failure right after the merge base is the trunk's, and the comment
    says where it was seen, not that the merge base had it."""
    row = pr50_comment(tmp_path, httpserver, fake, (6,), landed_by_merge_bot(49, sha(6)))
    assert (row["new"], row["broken_trunk"]) == (0, 1), row["body"]
    assert "present on the merge base" not in row["body"]
    assert "present on main at or next to the merge base" in row["body"]
    assert f"on main, 1 commit after the merge base: {sha(6)[:10]}" in row["body"]
