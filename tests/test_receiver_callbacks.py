"""`POST /relay/callback` on a real receiver: GitHub Actions OIDC tokens from a throwaway issuer whose
key set pytest-httpserver serves on 127.0.0.1, bodies built by pytorch/test-infra's own report_callback.py
(vendored), dispatches from the real `dispatches` ledger, and the archive record the ingest reads."""

import datetime as dt
import hashlib
import hmac
import importlib.util
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from unittest import mock

import pytest
import requests
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from werkzeug import Response

from receiving import L1_REPO, L2_REPO, L3_REPO, Issuer, archived, jwt, served
from relay_callbacks import action_env
from resources.lake import Lake, connect
from torchci_assets.ingest.ci_results import ingest_ci_results_day
from torchci_assets.receiver.oidc import KeySet
from torchci_assets.relay.dispatch import client_payload, record_attempt
from torchci_assets.relay.pushes import UpstreamCommit

VENDORED = Path(__file__).parent / "vendor" / "report_callback.py"
_spec = importlib.util.spec_from_file_location("report_callback", VENDORED)
report_callback = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report_callback)

SHA = "c0ffee" + "0" * 34
DELIVERY = "72d3162e-cc78-11e3-81ab-4c9367dc0958"
JWKS_PATH = "/.well-known/jwks"
PKCS1_SHA256 = (padding.PKCS1v15(), hashes.SHA256())


def dispatched_commit(sha=SHA, delivery=DELIVERY) -> UpstreamCommit:
    return UpstreamCommit("pytorch/pytorch", sha, "refs/heads/main", "b" * 40, False, delivery,
                          "2026-11-01T12:00:00.000Z", "webhook",
                          {"ref": "refs/heads/main", "after": sha, "repository": {"full_name": "pytorch/pytorch"}})


def report(status, *, repo=L2_REPO, run_id=9001, run_attempt=1, job_name="npu-test", conclusion="",
           test_results=None, commit=None, delivery_id="", event_type="") -> bytes:
    """The body report_callback.py POSTs, with the env its composite action (action.yml) sets."""
    env = {
        "SCHEMA_VERSION": "1", "STATUS": status, "CONCLUSION": conclusion, "WORKFLOW_NAME": "npu-upstream-ci",
        "WORKFLOW_URL": f"https://github.com/{repo}/actions/runs/{run_id}",
        "TEST_RESULTS": json.dumps(test_results) if test_results else "", "ARTIFACT_URL": "",
        "CLIENT_PAYLOAD": json.dumps(client_payload(commit or dispatched_commit()) if not delivery_id else None),
        "OIDC_TOKEN": "unused", "CALLBACK_URL": "unused", "JOB_NAME": job_name, "CHECK_RUN_ID": "",
        "RUN_ID": str(run_id), "RUN_ATTEMPT": str(run_attempt), "MAX_TIME": "10",
        "DELIVERY_ID_OVERRIDE": delivery_id, "EVENT_TYPE_OVERRIDE": event_type,
    }
    with mock.patch.dict(os.environ, env, clear=True):
        return report_callback.build_payload().encode()


def record_dispatch(tmp_path, repo=L2_REPO, ago_s=90.0, sha=SHA, delivery=DELIVERY, outcome="ok") -> float:
    at = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=ago_s)
    record_attempt(Lake.at(str(tmp_path / "lake")), {
        "sha": sha, "upstream_repo": "pytorch/pytorch", "downstream_repo": repo, "level": "L2", "event_type": "push",
        "delivery_id": delivery, "source": "webhook", "attempted_at": at, "status_code": 204, "outcome": outcome,
        "error": "", "http_attempts": 1, "waited_s": 0.0, "run_id": "dagster-run"})
    return at.timestamp()


@pytest.fixture(scope="module")
def issuer():
    return Issuer()


@pytest.fixture
def keys(httpserver, issuer):
    httpserver.expect_request(JWKS_PATH).respond_with_json(issuer.jwks(["key-1"]))
    return KeySet(httpserver.url_for(JWKS_PATH), min_refresh_s=0.0)


def jwks_fetches(httpserver) -> int:
    return sum(1 for request, _ in httpserver.log if request.path == JWKS_PATH)


def test_in_progress_then_completed_carry_the_relays_queue_and_execution_times(tmp_path, issuer, keys):
    dispatched = record_dispatch(tmp_path, ago_s=90.0)
    started = report("in_progress")
    done = report("completed", conclusion="success", test_results={"passed": 40, "failed": 2, "skipped": 1})
    with served(tmp_path, keys=keys) as srv:
        t0 = time.time()
        first = srv.post_callback(started, issuer.token(L2_REPO))
        time.sleep(0.4)
        second = srv.post_callback(done, issuer.token(L2_REPO))
        t1 = time.time()
        assert (first.status_code, first.json()) == (200, {"ok": True, "status": "in_progress"})
        assert (second.status_code, second.json()) == (200, {"ok": True, "status": "completed"})
    lines = archived(srv.archive, "ci-results")
    assert [set(line) for line in lines] == [{"trusted", "untrusted", "received_at"}] * 2
    assert [line["untrusted"] for line in lines] == [{"callback_payload": json.loads(b)} for b in (started, done)]
    assert [line["trusted"]["verified_repo"] for line in lines] == [L2_REPO] * 2
    assert [line["trusted"]["downstream_repo_level"] for line in lines] == ["L2"] * 2
    queue, execution = lines[0]["trusted"]["ci_metrics"], lines[1]["trusted"]["ci_metrics"]
    assert queue["execution_time"] is None and execution["queue_time"] is None
    assert t0 - dispatched - 0.01 <= queue["queue_time"] <= t1 - dispatched
    assert 0.4 <= execution["execution_time"] <= t1 - t0
    received = [dt.datetime.fromisoformat(line["received_at"]) for line in lines]
    assert received[0] < received[1] and received[0].utcoffset() == dt.timedelta(0)


@pytest.mark.parametrize("case", ["expired", "wrong_audience", "wrong_issuer", "alg_none", "hs256_public_key",
                                  "other_key_same_kid", "no_header", "not_a_jwt", "future_iat", "no_repository"])
def test_tokens_that_prove_nothing_get_401(tmp_path, issuer, keys, case):
    record_dispatch(tmp_path)
    now = int(time.time())
    claims = issuer.claims(L2_REPO)
    pem = issuer.public_pem("key-1")
    tokens = {
        "expired": lambda: issuer.token(L2_REPO, iat=now - 900, nbf=now - 900, exp=now - 300),
        "wrong_audience": lambda: issuer.token(L2_REPO, aud="sigstore"),
        "wrong_issuer": lambda: issuer.token(L2_REPO, iss="https://token.actions.example.com"),
        "alg_none": lambda: jwt({"alg": "none", "kid": "key-1"}, claims, lambda data: b""),
        # the classic confusion: an HMAC keyed with the (public) RSA key, which any caller can fetch
        "hs256_public_key": lambda: jwt({"alg": "HS256", "kid": "key-1", "typ": "JWT"}, claims,
                                        lambda data: hmac.new(pem, data, hashlib.sha256).digest()),
        "other_key_same_kid": lambda: _signed_by_stranger(claims),
        "no_header": lambda: None,
        "not_a_jwt": lambda: "not.a-jwt",
        "future_iat": lambda: issuer.token(L2_REPO, iat=now + 3600, nbf=None),
        "no_repository": lambda: issuer.token(L2_REPO, repository=None),
    }
    with served(tmp_path, keys=keys) as srv:
        resp = srv.post_callback(report("in_progress"), tokens[case]())
        assert resp.status_code == 401, resp.text
        assert resp.headers["WWW-Authenticate"] == "Bearer"
        # a good token still works on the same server
        assert srv.post_callback(report("in_progress"), issuer.token(L2_REPO)).status_code == 200
    assert len(archived(srv.archive, "ci-results")) == 1


def _signed_by_stranger(claims):
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return jwt({"alg": "RS256", "kid": "key-1"}, claims, lambda data: stranger.sign(data, *PKCS1_SHA256))


def test_alg_none_and_hs256_are_refused_before_any_key_lookup(tmp_path, issuer, httpserver):
    httpserver.expect_request(JWKS_PATH).respond_with_json(issuer.jwks())
    keys = KeySet(httpserver.url_for(JWKS_PATH), min_refresh_s=0.0)
    claims = issuer.claims(L2_REPO)
    with served(tmp_path, keys=keys) as srv:
        none = srv.post_callback(report("in_progress"), jwt({"alg": "none"}, claims, lambda d: b""))
        hs = srv.post_callback(report("in_progress"), jwt({"alg": "HS256", "kid": "key-1"}, claims,
                                                          lambda d: hmac.new(b"k", d, hashlib.sha256).digest()))
        assert [none.status_code, hs.status_code] == [401, 401]
        assert "only RS256" in none.json()["detail"] and "only RS256" in hs.json()["detail"]
        assert jwks_fetches(httpserver) == 0
        assert srv.receiver.metrics.counter("torchci_receiver_rejected_total", endpoint="callback",
                                            reason="token_algorithm") == 2


def test_an_unknown_kid_refreshes_the_keys_and_a_rotated_key_is_then_accepted(tmp_path, issuer, httpserver):
    issuer.add_key("key-2")
    httpserver.expect_request(JWKS_PATH).respond_with_json(issuer.jwks(["key-1"]))
    keys = KeySet(httpserver.url_for(JWKS_PATH), min_refresh_s=0.0)
    record_dispatch(tmp_path)
    with served(tmp_path, keys=keys) as srv:
        assert srv.post_callback(report("in_progress", job_name="a"), issuer.token(L2_REPO, kid="key-1")).status_code == 200
        assert srv.post_callback(report("in_progress", job_name="b"), issuer.token(L2_REPO, kid="key-1")).status_code == 200
        assert jwks_fetches(httpserver) == 1  # cached
        unknown = srv.post_callback(report("in_progress", job_name="c"), issuer.token(L2_REPO, kid="key-2"))
        assert unknown.status_code == 401 and "key-2" in unknown.json()["detail"]
        assert jwks_fetches(httpserver) == 2  # the unknown kid made it look again
        # GitHub rotates: the key set now has both keys
        httpserver.clear_all_handlers()
        httpserver.expect_request(JWKS_PATH).respond_with_json(issuer.jwks(["key-1", "key-2"]))
        assert srv.post_callback(report("in_progress", job_name="c"), issuer.token(L2_REPO, kid="key-2")).status_code == 200
        assert srv.post_callback(report("in_progress", job_name="d"), issuer.token(L2_REPO, kid="key-1")).status_code == 200
        assert jwks_fetches(httpserver) == 3
    assert len(archived(srv.archive, "ci-results")) == 4


def test_requests_arriving_during_the_first_key_fetch_wait_for_it(tmp_path, issuer, httpserver):
    def slow_jwks(request):
        time.sleep(0.5)
        return Response(json.dumps(issuer.jwks(["key-1"])), content_type="application/json")

    httpserver.expect_request(JWKS_PATH).respond_with_handler(slow_jwks)
    keys = KeySet(httpserver.url_for(JWKS_PATH), min_refresh_s=60.0)
    record_dispatch(tmp_path)
    with served(tmp_path, keys=keys) as srv, ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(lambda i: srv.post_callback(report("in_progress", job_name=f"c{i}"),
                                                          issuer.token(L2_REPO)).status_code, range(8)))
    assert codes == [200] * 8
    assert jwks_fetches(httpserver) == 1


def test_unknown_kids_cannot_make_it_hammer_the_issuer(tmp_path, issuer, httpserver):
    httpserver.expect_request(JWKS_PATH).respond_with_json(issuer.jwks(["key-1"]))
    keys = KeySet(httpserver.url_for(JWKS_PATH), min_refresh_s=60.0)
    claims = issuer.claims(L2_REPO)
    key = issuer.keys["key-1"]
    with served(tmp_path, keys=keys) as srv:
        for i in range(5):
            token = jwt({"alg": "RS256", "kid": f"random-{i}"}, claims, lambda d: key.sign(d, *PKCS1_SHA256))
            assert srv.post_callback(report("in_progress"), token).status_code == 401
    assert jwks_fetches(httpserver) == 1


def test_an_unreachable_issuer_is_503_not_401(tmp_path, issuer, httpserver):
    httpserver.expect_request(JWKS_PATH).respond_with_data("down", status=502)
    keys = KeySet(httpserver.url_for(JWKS_PATH), min_refresh_s=0.0)
    with served(tmp_path, keys=keys) as srv:
        resp = srv.post_callback(report("in_progress"), issuer.token(L2_REPO))
        assert resp.status_code == 503 and resp.headers["Retry-After"] == "30"


def test_only_repositories_allowlisted_at_l2_or_above_may_report(tmp_path, issuer, keys):
    """Below L2 (or not allowlisted) a callback is answered as the relay answers it, 200 `ignored`,
    and nothing is kept; a token that proves nothing is still 401."""
    record_dispatch(tmp_path, repo=L3_REPO)
    record_dispatch(tmp_path, repo=L1_REPO)
    with served(tmp_path, keys=keys) as srv:
        l1 = srv.post_callback(report("in_progress", repo=L1_REPO), issuer.token(L1_REPO))
        stranger = srv.post_callback(report("in_progress", repo="evil-corp/torch-xpu"), issuer.token("evil-corp/torch-xpu"))
        l3 = srv.post_callback(report("in_progress", repo=L3_REPO), issuer.token(L3_REPO))
        forged = srv.post_callback(report("in_progress", repo=L1_REPO), issuer.token(L1_REPO, aud="sigstore"))
        assert [l1.status_code, stranger.status_code, l3.status_code, forged.status_code] == [200, 200, 200, 401]
        assert l1.json() == stranger.json() == {"ok": True, "status": "ignored"}
        metrics = requests.get(f"{srv.url}/metrics", timeout=10).text
    assert 'torchci_receiver_ignored_total{endpoint="callback",reason="below_l2"} 1' in metrics
    assert 'torchci_receiver_ignored_total{endpoint="callback",reason="not_allowlisted"} 1' in metrics
    [line] = archived(srv.archive, "ci-results")
    assert line["trusted"]["verified_repo"] == L3_REPO and line["trusted"]["downstream_repo_level"] == "L3"


def run_action(srv, token: str, repo: str, path: str = "/relay/callback") -> subprocess.CompletedProcess:
    """The callback step of a downstream job: pytorch/test-infra's report_callback.py run as its composite
    action runs it, with the job's OIDC token, POSTing with real curl (`--fail-with-body`)."""
    env = action_env("in_progress", repo=repo, run_id=9001, job_name="npu-test",
                     client_payload=client_payload(dispatched_commit()))
    env.update(OIDC_TOKEN=token, CALLBACK_URL=f"{srv.url}{path}", PATH=os.environ["PATH"])
    return subprocess.run([sys.executable, str(VENDORED)], env=env, capture_output=True, text=True, timeout=60)


def test_an_l1_backends_callback_step_stays_green(tmp_path, issuer, keys):
    """An L1 repository is dispatched to and may run the callback action like any other: its step must
    pass (the relay answers it 200 `ignored`), while its result is not kept."""
    record_dispatch(tmp_path, repo=L1_REPO)
    record_dispatch(tmp_path, repo=L2_REPO)
    with served(tmp_path, keys=keys) as srv:
        l1 = run_action(srv, issuer.token(L1_REPO), L1_REPO)
        l2 = run_action(srv, issuer.token(L2_REPO), L2_REPO)
    assert (l1.returncode, l2.returncode) == (0, 0), l1.stderr
    assert "HTTP: 200" in l1.stdout
    [line] = archived(srv.archive, "ci-results")
    assert line["trusted"]["verified_repo"] == L2_REPO


def test_a_callback_url_with_the_relays_own_path_is_answered_as_ours(tmp_path, issuer, keys):
    """The relay serves its callbacks at `/github/callback` (the action's default `callback-url` ends
    in `/github/callback/`): a workflow that kept that path and changed only the host must not turn red
    on a 404 and lose its results."""
    record_dispatch(tmp_path)
    with served(tmp_path, keys=keys) as srv:
        done = run_action(srv, issuer.token(L2_REPO), L2_REPO, path="/github/callback/")
    assert done.returncode == 0, done.stderr
    [line] = archived(srv.archive, "ci-results")
    assert line["trusted"]["verified_repo"] == L2_REPO


def test_each_repository_is_rate_limited_with_retry_after(tmp_path, issuer, keys):
    record_dispatch(tmp_path)
    record_dispatch(tmp_path, repo=L3_REPO)
    with served(tmp_path, keys=keys, callbacks_per_minute=3.0) as srv:
        codes = [srv.post_callback(report("in_progress", job_name=f"j{i}"), issuer.token(L2_REPO)).status_code
                 for i in range(4)]
        assert codes == [200, 200, 200, 429]
        limited = srv.post_callback(report("in_progress", job_name="j9"), issuer.token(L2_REPO))
        assert limited.status_code == 429 and 1 <= int(limited.headers["Retry-After"]) <= 20
        assert srv.post_callback(report("in_progress", repo=L3_REPO), issuer.token(L3_REPO)).status_code == 200
    assert len(archived(srv.archive, "ci-results")) == 4


def test_a_callback_over_the_size_limit_gets_413(tmp_path, issuer, keys):
    record_dispatch(tmp_path)
    body = report("completed", conclusion="success", test_results={"passed": 1, "failed": 0, "skipped": 0,
                                                                   "note": "x" * 4096})
    with served(tmp_path, keys=keys, callback_max_bytes=4096) as srv:
        assert srv.post_callback(body, issuer.token(L2_REPO)).status_code == 413
        assert srv.post_callback(body, None).status_code == 413  # before authentication: nothing is read
        assert srv.post_callback(report("in_progress"), issuer.token(L2_REPO)).status_code == 200


def test_bodies_breaking_the_contract_get_400_with_the_field(tmp_path, issuer, keys):
    record_dispatch(tmp_path)
    good = json.loads(report("in_progress"))
    cases = {
        b"{not json": "not JSON",
        json.dumps({k: v for k, v in good.items() if k != "delivery_id"}).encode(): "delivery_id",
        json.dumps({**good, "workflow": {**good["workflow"], "status": "queued"}}).encode(): "status",
        json.dumps({**good, "workflow": {**good["workflow"], "run_id": "12ab"}}).encode(): "run_id",
        json.dumps({**good, "workflow": {**good["workflow"], "job_name": None}}).encode(): "job_name",
        json.dumps({**good, "workflow": {**good["workflow"], "started_at": "yesterday"}}).encode(): "started_at",
        json.dumps({**good, "event_type": "nightly", "delivery_id": SHA}).encode(): "nightly",
        json.dumps([good]).encode(): "JSON object",
    }
    with served(tmp_path, keys=keys) as srv:
        for body, field in cases.items():
            resp = srv.post_callback(body, issuer.token(L2_REPO))
            assert resp.status_code == 400 and field in resp.json()["detail"], (field, resp.text)
    assert archived(srv.archive, "ci-results") == []


def test_a_callback_for_work_never_dispatched_to_the_caller_is_refused(tmp_path, issuer, keys):
    record_dispatch(tmp_path, repo="fabrikam/torch-dpu")  # dispatched to another repository
    record_dispatch(tmp_path, delivery="another-delivery")  # a different delivery of the same commit
    record_dispatch(tmp_path, sha="d" * 40, outcome="dry_run")  # never sent
    with served(tmp_path, keys=keys) as srv:
        resp = srv.post_callback(report("in_progress"), issuer.token(L2_REPO))
        assert resp.status_code == 400 and "no dispatch" in resp.json()["detail"]
        dry = srv.post_callback(report("in_progress", commit=dispatched_commit(sha="d" * 40)), issuer.token(L2_REPO))
        assert dry.status_code == 400
        record_dispatch(tmp_path)  # the dispatch lands (a callback raced its ledger row): accepted after recheck
        srv.receiver.ledger.recheck_s = 0.0
        assert srv.post_callback(report("in_progress"), issuer.token(L2_REPO)).status_code == 200


def test_a_dispatch_github_left_unanswered_is_taken_as_landed_a_refused_one_is_not(tmp_path, issuer, keys,
                                                                                  httpserver):
    """GitHub answers a dispatch with 5xx past the client's retries (it often took it anyway): the
    downstream run it started reports, and its callbacks are accepted, timed from the send's claim.
    A dispatch GitHub refused (404) started nothing: a callback naming it is refused."""
    from resources.github import GitHubResource
    from torchci_assets.config import AllowlistEntry
    from torchci_assets.relay.dispatch import dispatch_event, ledger_rows, push_dispatch

    other = "fabrikam/torch-dpu"
    httpserver.expect_request(f"/repos/{L2_REPO}/dispatches", method="POST").respond_with_data("", status=502)
    httpserver.expect_request(f"/repos/{other}/dispatches", method="POST").respond_with_json({"message": "x"}, 404)
    gh = GitHubResource(api_url=httpserver.url_for(""), token="ghp_x", max_retries=1, backoff_base_s=0.01,
                        write_interval_s=0)
    lake = Lake.at(str(tmp_path / "lake"))
    # the refusal first: an unanswered send stops the pass (GitHub taken as down)
    outcomes = dispatch_event(gh, lake, push_dispatch(dispatched_commit()),
                              [AllowlistEntry(other, "L2"), AllowlistEntry(L2_REPO, "L2")], "run-1", settle_s=0.01)
    assert [o.outcome for o in outcomes] == ["refused", "unanswered"]
    claimed = min(r["attempted_at"] for r in ledger_rows(lake, SHA) if r["downstream_repo"] == L2_REPO).timestamp()
    with served(tmp_path, keys=keys) as srv:
        t0 = time.time()
        landed = srv.post_callback(report("in_progress"), issuer.token(L2_REPO))
        t1 = time.time()
        refused = srv.post_callback(report("in_progress", repo=other), issuer.token(other))
    assert landed.status_code == 200 and refused.status_code == 400
    [line] = archived(srv.archive, "ci-results")
    assert t0 - claimed - 0.01 <= line["trusted"]["ci_metrics"]["queue_time"] <= t1 - claimed


def test_what_counts_as_a_dispatch_that_may_have_landed():
    from torchci_assets.relay.dispatch import dispatch_evidence

    at = dt.datetime(2026, 11, 1, 12, 0, tzinfo=dt.timezone.utc)
    rows = [{"attempt_id": a, "outcome": o, "attempted_at": at, "downstream_repo": a} for a, outcomes in {
        "acked": ["claimed", "ok"], "unanswered": ["claimed", "unanswered"], "open": ["claimed"],
        "refused": ["claimed", "refused"], "failed": ["claimed", "failed"], "withdrawn": ["claimed", "withdrawn"],
        "dry": ["dry_run"]}.items() for o in outcomes]
    assert [(r["attempt_id"], r["outcome"]) for r in dispatch_evidence(rows)] == [
        ("acked", "ok"), ("unanswered", "claimed"), ("open", "claimed")]


def test_nightly_self_reports_need_no_dispatch_and_carry_no_timings(tmp_path, issuer, keys):
    body = report("completed", conclusion="success", delivery_id=SHA, event_type="nightly")
    with served(tmp_path, keys=keys) as srv:
        assert srv.post_callback(body, issuer.token(L2_REPO)).status_code == 200
    [line] = archived(srv.archive, "ci-results")
    assert line["trusted"]["ci_metrics"] == {"queue_time": None, "execution_time": None}
    assert line["untrusted"]["callback_payload"]["event_type"] == "nightly"


def test_repeats_and_reruns(tmp_path, issuer, keys):
    """A repeated in_progress keeps the first one's queue time; a re-run's in_progress (same
    delivery, run_attempt 2) has no queue time; a completed whose in_progress never came is
    kept with a null execution time."""
    record_dispatch(tmp_path, ago_s=60.0)
    with served(tmp_path, keys=keys) as srv:
        token = issuer.token(L2_REPO)
        assert srv.post_callback(report("in_progress"), token).status_code == 200
        time.sleep(0.3)
        assert srv.post_callback(report("in_progress"), token).status_code == 200
        assert srv.post_callback(report("in_progress", run_attempt=2), token).status_code == 200
        assert srv.post_callback(report("completed", job_name="lonely", conclusion="failure"), token).status_code == 200
    metrics = [line["trusted"]["ci_metrics"] for line in archived(srv.archive, "ci-results")]
    assert metrics[0]["queue_time"] == metrics[1]["queue_time"] and 60 <= metrics[0]["queue_time"] < 70
    assert metrics[2] == {"queue_time": None, "execution_time": None}
    assert metrics[3] == {"queue_time": None, "execution_time": None}


def test_execution_time_survives_a_restart(tmp_path, issuer, keys):
    record_dispatch(tmp_path)
    with served(tmp_path, keys=keys) as srv:
        t0 = time.time()
        assert srv.post_callback(report("in_progress"), issuer.token(L2_REPO)).status_code == 200
    time.sleep(0.3)
    with served(tmp_path, keys=keys) as srv:  # a new process: its job starts come from the archive
        assert len(srv.receiver.starts) == 1
        assert srv.post_callback(report("completed", conclusion="success"), issuer.token(L2_REPO)).status_code == 200
        t1 = time.time()
    completed = archived(srv.archive, "ci-results")[-1]
    assert completed["untrusted"]["callback_payload"]["workflow"]["status"] == "completed"
    assert 0.3 <= completed["trusted"]["ci_metrics"]["execution_time"] <= t1 - t0


def test_callbacks_flow_through_the_ci_result_ingest(tmp_path, issuer, keys):
    """Receiver -> archive -> `ci_result`, with report_callback.py's real body (string run_id and
    run_attempt, a completed callback without started_at). Needs the ingest of the real relay
    format (branch robust-relay)."""
    record_dispatch(tmp_path, ago_s=120.0)
    with served(tmp_path, keys=keys) as srv:
        assert srv.post_callback(report("in_progress", run_id=4242, run_attempt=1), issuer.token(L2_REPO)).status_code == 200
        time.sleep(0.2)
        done = report("completed", run_id=4242, conclusion="success",
                      test_results={"passed": 40, "failed": 0, "skipped": 2})
        assert json.loads(done)["workflow"]["started_at"] is None and json.loads(done)["workflow"]["run_id"] == "4242"
        assert srv.post_callback(done, issuer.token(L2_REPO)).status_code == 200
    [entry] = srv.archive.list_files("ci-results", (".gz",))
    day = entry.path.split("/")[1][len("day="):]
    report_ = ingest_ci_results_day(srv.archive, Lake.at(str(tmp_path / "lake")), day)
    assert report_.rejects == [] and report_.rows == 1
    con = connect()
    try:
        Lake.at(str(tmp_path / "lake")).register(con, "ci_result", [day], name="r")
        row = con.execute("SELECT repo, level, delivery_id, run_id, run_attempt, status, conclusion, queue_s, "
                          "execution_s, passed, skipped, started_at IS NOT NULL FROM r").fetchone()
    finally:
        con.close()
    assert row[:7] == (L2_REPO, "L2", DELIVERY, 4242, 1, "completed", "success")
    assert 120 <= row[7] < 130 and 0.2 <= row[8] < 10
    assert row[9:] == (40, 2, True)
