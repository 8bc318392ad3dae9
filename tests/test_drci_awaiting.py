"""Dr. CI on a first-time contributor's pull request, whose workflow runs wait for a maintainer's
approval (conclusion `action_required`) and have no job: PyTorch's Dr. CI says `⚠️ N Awaiting
Approval` and lists the workflows, rather than `✅ No Failures` or nothing at all.

The lake is made by ingesting real webhook payloads (@octokit/webhooks-examples, tests/data/octokit):
the `pull_request` opened example and the `workflow_run` example GitHub sends for a run that needs
approval, moved onto that pull request's head. The REST path reads the same state from the fake
Actions API (fake_github_pulls.py).
"""

import copy
import datetime as dt
import re

from conftest import write_lines
from fake_github_pulls import FakePullRequests
from resources.github import GitHubResource
from resources.lake import Lake
from resources.storage import Store
from test_drci import gh
from torchci_assets.derived.drci import classify as c
from torchci_assets.derived.drci.build import build_comments
from torchci_assets.derived.drci.comment import Head, render
from torchci_assets.derived.drci.page import to_html
from torchci_assets.derived.hud.health import build_pr_jobs
from torchci_assets.ingest.webhooks import ingest_webhook_day

DAY = "2019-05-15"  # the pull_request example's day
NOW = dt.datetime(2019, 5, 15, 16, 0, tzinfo=dt.timezone.utc)
REPO = "Codertocat/Hello-World"
RUN = 289782451  # the workflow_run example's id


def envelope(event: str, received_at: str, payload: dict) -> dict:
    return {"event": event, "delivery_id": f"gh-{event}-{received_at}", "received_at": received_at,
            "payload": payload}


def opened_and_awaiting(octokit) -> tuple[dict, dict]:
    """The pull request opened, and its `pull` workflow run as GitHub reports one that needs approval."""
    hooks = octokit["api.github.com"]
    opened = copy.deepcopy(next(p for p in hooks["pull_request"] if p["action"] == "opened"))
    run = copy.deepcopy(next(p for p in hooks["workflow_run"]
                             if p["workflow_run"].get("conclusion") == "action_required"))
    pr = opened["pull_request"]
    run["repository"] = opened["repository"]
    run["workflow_run"].update(name="pull", event="pull_request", head_sha=pr["head"]["sha"],
                               head_branch=pr["head"]["ref"], created_at="2019-05-15T15:20:40Z",
                               updated_at="2019-05-15T15:20:40Z")
    return opened, run


def ingest(tmp_path, hooks: list[dict]) -> Lake:
    write_lines(tmp_path / "archive" / "webhooks" / f"day={DAY}" / f"hooks-{len(hooks)}.jsonl", hooks, gz=False)
    lake = Lake.at(str(tmp_path / "lake"))
    ingest_webhook_day(Store(str(tmp_path / "archive")), lake, DAY, workers=1)
    build_pr_jobs(lake, DAY, REPO, now=NOW)
    return lake


def test_a_workflow_awaiting_approval_is_listed_and_the_head_is_not_green(tmp_path, octokit):
    opened, run = opened_and_awaiting(octokit)
    lake = ingest(tmp_path, [envelope("pull_request", "2019-05-15T15:20:34Z", opened),
                             envelope("workflow_run", "2019-05-15T15:20:41Z", run)])
    dry = GitHubResource(api_url="http://127.0.0.1:9")
    [row] = build_comments(lake, dry, DAY, REPO, now=NOW).rows
    text = row["body"]
    assert (row["pr"], row["awaiting_approval"], row["new"], row["pending"]) == (2, 1, 0, 0)
    assert "\n## :warning: 1 Awaiting Approval\n" in text
    assert ("<details open><summary><b>AWAITING APPROVAL</b> - The following workflow needs approval before CI "
            "can run:</summary>") in text
    assert f"* [pull]({dry.web_url}/{REPO}/actions/runs/{RUN})\n" in text  # the run, to approve it there
    assert "No Failures" not in text and ":green_heart:" not in text and ":white_check_mark:" not in text
    # the HUD's PR page shows the same text
    shown = re.sub(r"<[^>]+>", "", to_html(text))
    assert "⚠️ 1 Awaiting Approval" in shown and "AWAITING APPROVAL" in shown

    # approved: the run's jobs arrive, and they speak for it
    job = copy.deepcopy(next(p for p in octokit["api.github.com"]["workflow_job"] if p["action"] == "in_progress"))
    job["repository"] = opened["repository"]
    job["workflow_job"].update(run_id=RUN, run_attempt=1, head_sha=run["workflow_run"]["head_sha"],
                               workflow_name="pull", created_at="2019-05-15T15:30:00Z",
                               started_at="2019-05-15T15:30:05Z")
    lake = ingest(tmp_path, [envelope("pull_request", "2019-05-15T15:20:34Z", opened),
                             envelope("workflow_run", "2019-05-15T15:20:41Z", run),
                             envelope("workflow_job", "2019-05-15T15:30:06Z", job)])
    [row] = build_comments(lake, dry, DAY, REPO, now=NOW).rows
    assert (row["awaiting_approval"], row["pending"]) == (0, 1)
    assert "\n## :hourglass_flowing_sand: No Failures, 1 Pending\n" in row["body"]


def test_awaiting_approval_beside_failures_shows_both_and_keeps_the_x():
    """As PyTorch's Dr. CI words it: the approval first, then the failures; ❌ when something failed."""
    run = c.HeadJob("trunk", "trunk", "awaiting", run_id=9, workflow="trunk")
    failed = c.HeadJob("linux-jammy / build", "pull / linux-jammy / build", "failure", job_id=7, run_id=3,
                       workflow="pull")
    verdicts, pending = c.classify_head([run, failed, c.HeadJob("lint", "Lint / lint", "pending")], c.Trunk(),
                                        c.Flaky())
    assert [v.cls for v in verdicts] == [c.AWAITING_APPROVAL, c.NEW] and pending == 1
    text = render(Head("pytorch/pytorch", 5, "ab" * 20, "cd" * 20), verdicts + [verdicts[0]], pending)
    assert "\n## :x: 2 Awaiting Approval, 1 New Failure, 1 Pending\n" in text
    assert "The following workflows need approval before CI can run" in text
    assert text.index("AWAITING APPROVAL") < text.index("NEW FAILURE")


def test_a_head_without_jobs_is_read_from_the_rest_api_and_found_awaiting_approval(tmp_path, httpserver, octokit):
    """The run's webhook was lost too: 30 minutes after the pull request's last update its head is
    read from GitHub, whose only run has no job and waits for approval."""
    opened, _ = opened_and_awaiting(octokit)
    lake = ingest(tmp_path, [envelope("pull_request", "2019-05-15T15:20:34Z", opened)])
    fake = FakePullRequests(httpserver, REPO)
    head = opened["pull_request"]["head"]["sha"]
    fake.runs[head] = [{"id": RUN, "name": "pull", "head_sha": head, "status": "completed",
                        "conclusion": "action_required"}]
    report = build_comments(lake, gh(httpserver), DAY, REPO, now=NOW)
    [row] = report.rows
    assert report.refreshed_heads == 1 and row["awaiting_approval"] == 1 and row["refreshed_jobs"] == 1
    assert "\n## :warning: 1 Awaiting Approval\n" in row["body"] and "REST API" not in row["body"]
    assert report.refresh_requests == 2  # the head's runs, then the run's jobs (none)


def two_workflows_named_ci(octokit) -> tuple[dict, dict, dict]:
    """The pull request opened, and two workflows both named `CI` (two files, as `name: CI` in each)
    whose runs on its head wait for approval: the example's run of its workflow (2823525), and a
    later run of the manually triggered example's workflow (16340987)."""
    opened, first = opened_and_awaiting(octokit)
    first["workflow_run"]["name"] = "CI"
    manual = next(p["workflow_run"] for p in octokit["api.github.com"]["workflow_run"]
                  if p["workflow_run"]["workflow_id"] != first["workflow_run"]["workflow_id"])
    second = copy.deepcopy(first)
    second["workflow_run"].update(id=manual["id"], workflow_id=manual["workflow_id"], path=".github/workflows/lint.yml",
                                  created_at="2019-05-15T15:21:40Z", updated_at="2019-05-15T15:21:40Z")
    return opened, first, second


def test_two_workflows_of_the_same_name_each_have_their_awaiting_run_listed(tmp_path, octokit):
    """As PyTorch's Dr. CI keeps them: each workflow's newest run by the workflow's id, so a later run
    of another workflow of the same name hides nothing; a later run of the same workflow does."""
    opened, first, second = two_workflows_named_ci(octokit)
    hooks = [envelope("pull_request", "2019-05-15T15:20:34Z", opened),
             envelope("workflow_run", "2019-05-15T15:20:41Z", first),
             envelope("workflow_run", "2019-05-15T15:21:41Z", second)]
    dry = GitHubResource(api_url="http://127.0.0.1:9")
    [row] = build_comments(ingest(tmp_path, hooks), dry, DAY, REPO, now=NOW).rows
    assert row["awaiting_approval"] == 2 and "\n## :warning: 2 Awaiting Approval\n" in row["body"]
    for run in (first, second):
        assert f"* [CI]({dry.web_url}/{REPO}/actions/runs/{run['workflow_run']['id']})\n" in row["body"]

    rerun = copy.deepcopy(first)  # the first workflow runs again, approved and passing
    rerun["workflow_run"].update(id=second["workflow_run"]["id"] + 1, conclusion="success",
                                 updated_at="2019-05-15T15:40:00Z")
    [row] = build_comments(ingest(tmp_path, [*hooks, envelope("workflow_run", "2019-05-15T15:40:01Z", rerun)]),
                           dry, DAY, REPO, now=NOW).rows
    assert row["awaiting_approval"] == 1
    assert f"* [CI]({dry.web_url}/{REPO}/actions/runs/{second['workflow_run']['id']})\n" in row["body"]


def test_two_workflows_of_the_same_name_read_from_the_rest_api_each_have_their_awaiting_run_listed(
        tmp_path, httpserver, octokit):
    opened, first, second = two_workflows_named_ci(octokit)
    lake = ingest(tmp_path, [envelope("pull_request", "2019-05-15T15:20:34Z", opened)])
    fake = FakePullRequests(httpserver, REPO)
    head = opened["pull_request"]["head"]["sha"]
    fake.runs[head] = [{k: run["workflow_run"][k] for k in ("id", "workflow_id", "name", "head_sha", "status",
                                                            "conclusion")}
                       for run in (second, first)]
    [row] = build_comments(lake, gh(httpserver), DAY, REPO, now=NOW).rows
    assert row["awaiting_approval"] == 2 and row["refreshed_jobs"] == 2
    for run in (first, second):
        assert f"/actions/runs/{run['workflow_run']['id']})\n" in row["body"]


def test_a_run_awaiting_approval_read_from_the_rest_api_is_recorded_and_read_once(tmp_path, httpserver, octokit):
    """The run's webhook was lost: what GitHub showed of it (its example, as the REST API answers a run
    that needs approval) is written into the archive, so the next refresh has it from the lake and asks
    GitHub nothing, as for a job read that way."""
    opened, run = opened_and_awaiting(octokit)
    hooks = [envelope("pull_request", "2019-05-15T15:20:34Z", opened)]
    lake = ingest(tmp_path, hooks)
    fake = FakePullRequests(httpserver, REPO)
    rest_run = {**run["workflow_run"], "repository": opened["repository"], "run_started_at": "2019-05-15T15:20:40Z"}
    fake.runs[rest_run["head_sha"]] = [rest_run]
    archive = Store(str(tmp_path / "archive"))
    report = build_comments(lake, gh(httpserver), DAY, REPO, now=NOW, archive=archive)
    assert report.refreshed_heads == 1 and report.rows[0]["awaiting_approval"] == 1

    lake = ingest(tmp_path, hooks)  # the refresh ingests the day again, with what Dr. CI wrote
    fake.requests.clear()
    again = build_comments(lake, gh(httpserver), DAY, REPO, now=NOW + dt.timedelta(minutes=5), archive=archive)
    assert again.refresh_requests == 0 and fake.count("GET", "/actions/") == 0
    [row] = again.rows
    assert row["awaiting_approval"] == 1 and "\n## :warning: 1 Awaiting Approval\n" in row["body"]
    assert f"/actions/runs/{RUN})\n" in row["body"]
