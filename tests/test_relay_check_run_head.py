"""The head an upstream check run goes on is the head the relay dispatched, never the one a
backend's callback names: a pull-request callback naming a head its delivery was not dispatched
for is refused at the receiver, so no check run can be put on another pull request's commit."""

import copy
import datetime as dt
import json
from pathlib import Path

import pytest
from conftest import write_lines

from jobs.relay_prs import check_run_job
from resources.configured import LakeResource
from resources.github import GitHubResource
from resources.lake import Lake
from resources.storage import Store
from tests.fake_github_relay import FakeRelayGitHub
from tests.receiving import L3_REPO, archived, config_file, served
from tests.relay_callbacks import action_env, build_payload, forwarded
from tests.test_receiver_callbacks import issuer, keys  # noqa: F401 (fixtures: a local OIDC issuer)
from torchci_assets.config import load_config
from torchci_assets.relay.acting import pr_dispatch
from torchci_assets.relay.check_runs import backfill_for_label
from torchci_assets.relay.dispatch import dispatch_event
from torchci_assets.relay.pull_requests import relay_event

TOKEN = "ghp_testtoken000000000000000000000000"
PR = copy.deepcopy(next(p for p in json.loads((Path(__file__).parent / "data" / "octokit" / "examples.json")
                                              .read_text())["api.github.com"]["pull_request"]
                        if p["action"] == "synchronize"))
PR["repository"]["full_name"] = "pytorch/pytorch"
PR["pull_request"]["labels"] = [{"name": "ciflow/crcr/tpu"}]
HEAD = PR["pull_request"]["head"]["sha"]
OTHER = "deadbeef" * 5  # a commit of some other pull request


@pytest.fixture
def dispatched(tmp_path, httpserver, monkeypatch):
    """The relay's real dispatch of one pull_request delivery to the L3 backend; the fake GitHub."""
    monkeypatch.setenv("TORCHCI_CONFIG", config_file(tmp_path))
    server = FakeRelayGitHub(httpserver)
    event, _ = relay_event("pull_request", "delivery-D", dt.datetime.now(dt.timezone.utc), PR, load_config())
    outcomes = dispatch_event(github(httpserver), Lake.at(str(tmp_path / "lake")), pr_dispatch(event, load_config()),
                              load_config().allowlist, "run-1", settle_s=0.01)
    assert {o.outcome for o in outcomes} == {"ok"}
    return server


def github(httpserver) -> GitHubResource:
    return GitHubResource(api_url=httpserver.url_for(""), token=TOKEN, write_interval_s=0)


def callback(head: str, sha: str | None = None) -> bytes:
    """A completed callback of the backend's job, echoing the dispatch with the given PR head
    (and, when given, this project's top-level `sha`)."""
    echoed = copy.deepcopy({"event_type": "pull_request", "delivery_id": "delivery-D", "payload": PR})
    echoed["payload"]["pull_request"]["head"]["sha"] = head
    if sha:
        echoed["sha"] = sha
    env = action_env("completed", repo=L3_REPO, run_id=99, job_name="build", conclusion="success",
                     client_payload=echoed)
    return build_payload(env, dt.datetime.now(dt.timezone.utc)).encode()


def check_runs_from(record: dict, tmp_path, httpserver, instance) -> None:
    result = check_run_job.execute_in_process(
        run_config={"ops": {"create_upstream_check_runs": {"config": {"events_json": json.dumps([record]),
                                                                       "claim_settle_s": 0.01}}}},
        instance=instance, resources={"github": github(httpserver), "lake": LakeResource(uri=str(tmp_path / "lake"))})
    assert result.success


@pytest.mark.parametrize("named", [HEAD, None], ids=["naming-the-dispatched-sha", "alone"])
def test_a_callback_naming_another_head_is_refused_and_gets_no_check_run(named, dispatched, tmp_path, issuer, keys):
    with served(tmp_path, keys=keys) as srv:
        answer = srv.post_callback(callback(OTHER, sha=named), issuer.token(L3_REPO))
    assert answer.status_code == 400 and "no dispatch" in answer.json()["detail"]
    assert archived(srv.archive, "ci-results") == []
    assert dispatched.check_runs == []


def test_the_honest_callback_puts_its_check_run_on_the_dispatched_head(dispatched, tmp_path, issuer, keys, httpserver,
                                                                       instance):
    with served(tmp_path, keys=keys) as srv:
        assert srv.post_callback(callback(HEAD), issuer.token(L3_REPO)).status_code == 200
    [record] = archived(srv.archive, "ci-results")
    check_runs_from(record, tmp_path, httpserver, instance)
    assert [(c["head_sha"], c["status"], c["conclusion"]) for c in dispatched.check_runs] == \
        [(HEAD, "completed", "success")]


def archived_before_the_check(head: str) -> dict:
    """The record a receiver from before the head check archived for a callback naming `head`
    (the relay's envelope, as `served` writes it, without any refusal)."""
    return forwarded(callback(head).decode(), L3_REPO, dt.datetime.now(dt.timezone.utc), level="L3")


def test_a_callback_archived_before_the_head_check_gets_no_check_run_on_another_head(dispatched, tmp_path, httpserver,
                                                                                    instance):
    check_runs_from(archived_before_the_check(OTHER), tmp_path, httpserver, instance)
    assert dispatched.check_runs == []
    check_runs_from(archived_before_the_check(HEAD), tmp_path, httpserver, instance)  # the honest one still does
    assert [(c["head_sha"], c["conclusion"]) for c in dispatched.check_runs] == [(HEAD, "success")]


def test_a_label_on_another_pull_request_backfills_nothing_from_a_callback_archived_before_the_check(
        dispatched, tmp_path, httpserver):
    write_lines(tmp_path / "archive" / "ci-results" / f"day={dt.date.today():%Y-%m-%d}" / "old-receiver.jsonl",
                [archived_before_the_check(OTHER)])
    labeled = copy.deepcopy(PR) | {"action": "labeled", "label": {"name": "ciflow/crcr/tpu"}}
    labeled["pull_request"]["head"]["sha"] = OTHER
    done = backfill_for_label(github(httpserver), Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "archive")),
                              load_config(), labeled, "delivery-L", "run-2", settle_s=0.01)
    assert dispatched.check_runs == [] and done == {L3_REPO: "wanted"}
