"""`POST /relay/callback` for pull-request dispatches: the callback state machine's first check
(a dispatch of that delivery to the caller) against `dispatches` ledger rows the pull-request
dispatch writes, with bodies built by the vendored report_callback.py from an octokit payload."""

import copy
import datetime as dt
import json
from pathlib import Path


from resources.lake import Lake
from tests.receiving import L2_REPO, L3_REPO, archived, served
from tests.relay_callbacks import action_env, build_payload
from tests.test_receiver_callbacks import issuer, keys  # noqa: F401 (the fixtures: a local OIDC issuer)
from torchci_assets.relay.dispatch import LEDGER_SCHEMA, record_attempt

DELIVERY = "3f1e8b2a-pr-delivery"
PAYLOAD = copy.deepcopy(next(p for p in json.loads((Path(__file__).parent / "data" / "octokit" / "examples.json")
                                                   .read_text())["api.github.com"]["pull_request"]
                             if p["action"] == "synchronize"))
HEAD = PAYLOAD["pull_request"]["head"]["sha"]


def record(tmp_path, repo: str, outcome: str, attempt_id: str = "a1", ago_s: float = 30.0) -> None:
    row = {name: None for name in LEDGER_SCHEMA.names}
    row.update(sha=HEAD, upstream_repo="pytorch/pytorch", downstream_repo=repo, level="L2",
               event_type="pull_request", delivery_id=DELIVERY, source="webhook", outcome=outcome,
               attempted_at=dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=ago_s), attempt_id=attempt_id)
    record_attempt(Lake.at(str(tmp_path / "lake")), row)


def body(status: str, repo: str = L2_REPO) -> bytes:
    env = action_env(status, repo=repo, run_id=4242, job_name="build",
                     client_payload={"event_type": "pull_request", "delivery_id": DELIVERY, "payload": PAYLOAD})
    return build_payload(env, dt.datetime.now(dt.timezone.utc)).encode()


def test_a_pull_request_callback_is_accepted_with_its_queue_time(tmp_path, issuer, keys):
    record(tmp_path, L2_REPO, "claimed", ago_s=600.0)
    record(tmp_path, L2_REPO, "ok", ago_s=30.0)
    with served(tmp_path, keys=keys) as srv:
        answer = srv.post_callback(body("in_progress"), issuer.token(L2_REPO))
    assert answer.status_code == 200
    (line,) = archived(srv.archive, "ci-results")
    assert line["untrusted"]["callback_payload"]["event_type"] == "pull_request"
    # From GitHub's acknowledgement, as the relay's DISPATCHED record (not the claim before the send).
    # The claim is ten minutes older, so a slow server start on a loaded machine cannot blur the two.
    assert 30.0 <= line["trusted"]["ci_metrics"]["queue_time"] < 600.0


def test_a_callback_for_a_delivery_dispatched_to_another_repo_is_refused(tmp_path, issuer, keys):
    record(tmp_path, L3_REPO, "ok")
    with served(tmp_path, keys=keys) as srv:
        answer = srv.post_callback(body("in_progress"), issuer.token(L2_REPO))
    assert answer.status_code == 400 and "no dispatch" in answer.json()["detail"]


def test_a_dispatch_in_doubt_is_shown_to_have_landed_by_its_callback(tmp_path, issuer, keys):
    record(tmp_path, L2_REPO, "claimed")  # the relay died between GitHub's answer and the ledger
    with served(tmp_path, keys=keys) as srv:
        assert srv.post_callback(body("in_progress"), issuer.token(L2_REPO)).status_code == 200


def test_a_claim_github_refused_is_no_dispatch(tmp_path, issuer, keys):
    record(tmp_path, L2_REPO, "claimed", attempt_id="a1", ago_s=31.0)
    record(tmp_path, L2_REPO, "refused", attempt_id="a1", ago_s=30.0)
    with served(tmp_path, keys=keys) as srv:
        assert srv.post_callback(body("in_progress"), issuer.token(L2_REPO)).status_code == 400
