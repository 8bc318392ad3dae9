"""What a push dispatch carries: the push webhook's payload unchanged, as the cross-repo relay
sends it, when it fits GitHub's 64 KB client_payload; cut to what downstream workflows read only
when it does not. Through the relay's sensor and dispatch_job against a fake GitHub."""

import copy
import json
from pathlib import Path

import dagster as dg
import pytest

from jobs.relay import dispatch_job, upstream_commit_sensor
from resources.configured import ArchiveResource, LakeResource
from resources.github import GitHubResource, validate_dispatch
from tests.conftest import envelope, write_lines
from tests.fake_github_relay import FakeRelayGitHub

DATA = Path(__file__).parent / "data" / "octokit"
TOKEN = "ghp_testtoken000000000000000000000000"
DOWNSTREAM = "org-two/torch-tpu"
PUSH = next(p for p in json.loads((DATA / "examples.json").read_text())["api.github.com"]["push"]
            if p["ref"] == "refs/heads/master")


@pytest.fixture(autouse=True)
def relay_config(tmp_path, monkeypatch):
    path = tmp_path / "relay.yaml"
    path.write_text("upstream: {repo: Codertocat/Hello-World, branches: [master]}\npoll_commits: false\n"
                    f"allowlist:\n  L2: [{DOWNSTREAM}]\n")
    monkeypatch.setenv("TORCHCI_CONFIG", str(path))


def dispatched(push: dict, tmp_path, httpserver, instance) -> dict:
    """The client_payload the downstream got for a push webhook that landed in the archive."""
    server = FakeRelayGitHub(httpserver)
    day = tmp_path / "archive" / "webhooks" / "day=2026-11-01"
    write_lines(day / "a.jsonl", [envelope("ping", "p0", {})])
    resources = {"archive": ArchiveResource(uri=str(tmp_path / "archive")),
                 "github": GitHubResource(api_url=httpserver.url_for(""), token=TOKEN)}
    with dg.build_sensor_context(instance=instance, resources=resources) as ctx:
        first = upstream_commit_sensor(ctx)
    write_lines(day / "b.jsonl", [envelope("push", "delivery-push-1", push)])
    with dg.build_sensor_context(instance=instance, cursor=first.cursor, resources=resources) as ctx:
        [request] = upstream_commit_sensor(ctx).run_requests
    result = dispatch_job.execute_in_process(run_config=request.run_config, instance=instance, resources={
        "github": GitHubResource(api_url=httpserver.url_for(""), token=TOKEN, write_interval_s=0),
        "lake": LakeResource(uri=str(tmp_path / "lake"))})
    assert result.success
    [(repo, body)] = server.dispatches()
    assert repo == DOWNSTREAM
    return body["client_payload"]


def test_a_push_webhook_that_fits_is_dispatched_unchanged(tmp_path, httpserver, instance):
    sent = dispatched(PUSH, tmp_path, httpserver, instance)
    assert sent["payload"] == PUSH
    assert (sent["sha"], sent["delivery_id"]) == (PUSH["after"], "delivery-push-1")


def test_a_push_over_githubs_limit_is_cut_to_fit(tmp_path, httpserver, instance):
    push = copy.deepcopy(PUSH)
    push["commits"] = [{**push["head_commit"], "id": f"{i:040x}", "message": "x" * 5000} for i in range(19)] \
        + [push["head_commit"]]
    sent = dispatched(push, tmp_path, httpserver, instance)
    validate_dispatch(DOWNSTREAM, "push", sent)  # GitHub takes it
    payload = sent["payload"]
    assert "commits" not in payload and payload["commit_count"] == 20
    assert payload["commit_ids"][-1] == push["head_commit"]["id"] and payload["after"] == push["after"]
