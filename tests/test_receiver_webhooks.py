"""`POST /github/webhook` on a real receiver (uvicorn on 127.0.0.1): signatures, limits, events,
and what reaches the archive (then the ingest and the relay sensor)."""

import json
import time

import pytest
import requests

from receiving import SECRET, archived, served, webhook_headers
from resources.lake import Lake, connect
from torchci_assets.config import load_config
from torchci_assets.ingest.webhooks import ingest_webhook_day
from torchci_assets.receiver.settings import MIB, ReceiverSettings, Secrets, SettingsError
from torchci_assets.receiver.signatures import signature_for, signature_matches
from torchci_assets.relay.pushes import RelayCursor, scan_archive


def payload_of(octokit, event, action=None):
    return next(e for e in octokit["api.github.com"][event] if action is None or e.get("action") == action)


def test_signature_matches_githubs_documented_example():
    # docs.github.com, "Validating webhook deliveries": the test values GitHub publishes
    expected = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    assert signature_for(b"It's a Secret to Everybody", b"Hello, World!") == expected
    assert signature_matches((b"It's a Secret to Everybody",), b"Hello, World!", expected)
    assert not signature_matches((b"It's a Secret to Everybody",), b"Hello, World?", expected)
    assert not signature_matches((b"It's a Secret to Everybody",), b"Hello, World!", expected[len("sha256="):])


def test_a_signed_delivery_is_archived_verbatim_and_ingested(tmp_path, octokit):
    payload = payload_of(octokit, "workflow_job", "completed")
    body = json.dumps(payload).encode()
    with served(tmp_path) as srv:
        resp = srv.post_webhook(body, event="workflow_job", delivery="d-valid-1")
        assert resp.status_code == 200, resp.text
        assert resp.json() == {"ok": True, "delivery_id": "d-valid-1"}
    [line] = archived(srv.archive, "webhooks")
    assert line["event"] == "workflow_job" and line["delivery_id"] == "d-valid-1"
    assert line["payload"] == payload
    assert list(line) == ["event", "delivery_id", "received_at", "payload"]
    [entry] = srv.archive.list_files("webhooks", (".gz",))
    day = line["received_at"][:10]
    assert entry.path.startswith(f"webhooks/day={day}/test-host-{day.replace('-', '')}T")
    # the ingest reads what the receiver wrote, as any other archive file
    report = ingest_webhook_day(srv.archive, Lake.at(str(tmp_path / "lake")), day)
    assert (report.deliveries, len(report.rejects)) == (1, 0)
    con = connect()
    try:
        Lake.at(str(tmp_path / "lake")).register(con, "workflow_job", [day], name="j")
        assert con.execute("SELECT id, status FROM j").fetchall() == [(payload["workflow_job"]["id"], "completed")]
    finally:
        con.close()


def test_wrong_secret_missing_header_and_tampered_body_are_refused(tmp_path, octokit):
    body = json.dumps(payload_of(octokit, "workflow_job")).encode()
    with served(tmp_path) as srv:
        wrong = srv.post_webhook(body, secret="not-the-secret")
        headers = webhook_headers(body)
        del headers["X-Hub-Signature-256"]
        missing = requests.post(f"{srv.url}/github/webhook", data=body, headers=headers, timeout=10)
        tampered_body = body.replace(b'"queued"', b'"complet"', 1) if b'"queued"' in body else body + b" "
        assert tampered_body != body
        tampered = requests.post(f"{srv.url}/github/webhook", data=tampered_body, headers=webhook_headers(body),
                                 timeout=10)
        sha1_only = requests.post(f"{srv.url}/github/webhook", data=body, timeout=10, headers={
            **headers, "X-Hub-Signature": "sha1=" + "0" * 40})
        assert [r.status_code for r in (wrong, missing, tampered, sha1_only)] == [401, 401, 401, 401]
        metrics = srv.receiver.metrics
        assert metrics.counter("torchci_receiver_rejected_total", endpoint="webhook", reason="bad_signature") == 2
        assert metrics.counter("torchci_receiver_rejected_total", endpoint="webhook", reason="missing_signature") == 2
    assert archived(srv.archive, "webhooks") == []


def test_rotated_secrets_are_all_accepted_until_dropped(tmp_path, octokit):
    body = json.dumps(payload_of(octokit, "workflow_run")).encode()
    both = Secrets((b"new-secret", SECRET.encode()))
    with served(tmp_path, webhook_secrets=both) as srv:
        assert srv.post_webhook(body, event="workflow_run", secret=SECRET).status_code == 200
        assert srv.post_webhook(body, event="workflow_run", secret="new-secret").status_code == 200
        assert srv.post_webhook(body, event="workflow_run", secret="third").status_code == 401
    with served(tmp_path, webhook_secrets=Secrets((b"new-secret",))) as srv:
        assert srv.post_webhook(body, event="workflow_run", secret=SECRET).status_code == 401
        assert srv.post_webhook(body, event="workflow_run", secret="new-secret").status_code == 200
    assert len(archived(srv.archive, "webhooks")) == 3


def test_no_secret_configured_refuses_everything(tmp_path):
    with served(tmp_path, webhook_secrets=Secrets(())) as srv:
        body = b'{"action": "queued"}'
        resp = srv.post_webhook(body)
        assert resp.status_code == 503 and "TORCHCI_WEBHOOK_SECRETS" in resp.json()["detail"]


def test_size_limit_with_and_without_content_length(tmp_path):
    limit = 64 * 1024
    big = json.dumps({"action": "queued", "pad": "x" * limit}).encode()
    assert len(big) > limit
    fits = json.dumps({"action": "queued", "pad": "x" * (limit - 100)}).encode()
    with served(tmp_path, webhook_max_bytes=limit) as srv:
        assert srv.post_webhook(big).status_code == 413
        # chunked: no Content-Length, the limit is enforced while reading
        chunked = requests.post(f"{srv.url}/github/webhook", data=iter([big[:40000], big[40000:]]),
                                headers=webhook_headers(big), timeout=10)
        assert chunked.status_code == 413
        assert srv.post_webhook(fits).status_code == 200
    assert len(archived(srv.archive, "webhooks")) == 1


def test_default_limit_is_githubs_25_mb():
    assert ReceiverSettings.from_env({}).webhook_max_bytes == 25 * MIB


def test_bodies_that_are_not_a_json_object_and_missing_headers_get_400(tmp_path):
    with served(tmp_path) as srv:
        assert srv.post_webhook(b"payload=%7B%7D").status_code == 400
        assert srv.post_webhook(b"[1, 2]").status_code == 400
        assert srv.post_webhook(b'{"action": "queued"').status_code == 400
        body = b'{"action": "queued"}'
        headers = webhook_headers(body)
        del headers["X-GitHub-Delivery"]
        assert requests.post(f"{srv.url}/github/webhook", data=body, headers=headers, timeout=10).status_code == 400
        form = requests.post(f"{srv.url}/github/webhook", data=body, timeout=10, headers={
            **webhook_headers(body), "Content-Type": "application/x-www-form-urlencoded"})
        assert form.status_code == 400 and "application/json" in form.json()["detail"]
    assert archived(srv.archive, "webhooks") == []


def test_ping_is_answered_and_unlisted_events_are_acknowledged_but_not_kept(tmp_path, octokit):
    ping = json.dumps({"zen": "Design for failure.", "hook_id": 1, "hook": {"type": "App"}}).encode()
    pr = json.dumps(payload_of(octokit, "pull_request")).encode()
    with served(tmp_path, events=frozenset({"workflow_job"})) as srv:
        pong = srv.post_webhook(ping, event="ping")
        assert pong.status_code == 200 and pong.json()["pong"] is True
        dropped = srv.post_webhook(pr, event="pull_request")
        assert dropped.status_code == 200 and "not configured" in dropped.json()["dropped"]
        assert srv.post_webhook(pr, event="pull_request", secret="bad").status_code == 401  # still authenticated
        assert srv.receiver.metrics.counter("torchci_receiver_dropped_total", event="pull_request") == 1
        assert srv.post_webhook(b'{"action": "queued"}', event="workflow_job").status_code == 200
    assert [line["event"] for line in archived(srv.archive, "webhooks")] == ["workflow_job"]


def test_pretty_printed_payload_becomes_one_line_with_the_same_value(tmp_path, octokit):
    payload = payload_of(octokit, "pull_request")
    body = json.dumps(payload, indent=2).encode().replace(b"\n", b"\r\n")
    with served(tmp_path) as srv:
        assert srv.post_webhook(body, event="pull_request", delivery="d-pretty").status_code == 200
    [line] = archived(srv.archive, "webhooks")
    assert line["payload"] == payload


def test_an_upstream_push_reaches_the_archive_at_once_for_the_relay_sensor(tmp_path, octokit):
    """The roll interval is an hour, yet a push to the relay's branch is rolled within
    push_roll_s; a push to another branch waits for the roll."""
    push = dict(payload_of(octokit, "push"))
    push["repository"] = {**push["repository"], "full_name": "pytorch/pytorch"}
    main = {**push, "ref": "refs/heads/main", "after": "a" * 40, "deleted": False}
    other = {**push, "ref": "refs/heads/feature", "after": "b" * 40, "deleted": False}
    with served(tmp_path, roll_interval_s=3600.0, push_roll_s=0.2) as srv:
        config = load_config(str(tmp_path / "relay.yaml"))
        _, cursor = scan_archive(srv.archive, None, config)  # the sensor's first tick: nothing yet
        assert srv.post_webhook(json.dumps(other).encode(), event="push", delivery="p-other").status_code == 200
        time.sleep(0.5)
        assert srv.archive.list_files("webhooks", (".gz",)) == []  # not a relay push: waits for the roll
        sent = time.monotonic()
        assert srv.post_webhook(json.dumps(main).encode(), event="push", delivery="p-main").status_code == 200
        while not srv.archive.list_files("webhooks", (".gz",)):
            assert time.monotonic() - sent < 5, "the push was not rolled"
            time.sleep(0.05)
        report, cursor = scan_archive(srv.archive, RelayCursor.from_json(cursor.to_json()), config)
        assert [c.sha for c in report.commits] == ["a" * 40]
        assert report.commits[0].delivery_id == "p-main"
    # the segment holding both pushes was rolled once: each delivery is in the archive once
    assert sorted(line["delivery_id"] for line in archived(srv.archive, "webhooks")) == ["p-main", "p-other"]


def test_healthz_and_metrics(tmp_path, octokit):
    body = json.dumps(payload_of(octokit, "workflow_job")).encode()
    with served(tmp_path) as srv:
        for i in range(3):
            assert srv.post_webhook(body, delivery=f"m-{i}").status_code == 200
        assert srv.post_webhook(body, secret="bad").status_code == 401
        health = requests.get(f"{srv.url}/healthz", timeout=10)
        assert health.status_code == 200 and health.json()["ok"] is True
        assert health.json()["spool"]["webhooks"]["segments"] == 1
        text = requests.get(f"{srv.url}/metrics", timeout=10).text
    assert 'torchci_receiver_requests_total{code="200",endpoint="webhook"} 3' in text
    assert 'torchci_receiver_rejected_total{endpoint="webhook",reason="bad_signature"} 1' in text
    assert 'torchci_receiver_written_total{stream="webhooks"} 3' in text
    assert "torchci_receiver_fsync_seconds_count" in text and 'torchci_receiver_spool_bytes{stream="webhooks"}' in text
    assert "# TYPE torchci_receiver_ack_seconds histogram" in text


def test_settings_from_the_environment_never_show_the_secret():
    s = ReceiverSettings.from_env({"TORCHCI_WEBHOOK_SECRETS": " new-one , old-one ,", "TORCHCI_WEBHOOK_EVENTS": "*",
                                   "TORCHCI_ROLL_BYTES": "8MiB", "TORCHCI_OIDC_ISSUER": "https://issuer.example/",
                                   "TORCHCI_RECEIVER_HOST": "pod/with spaces"})
    assert s.webhook_secrets.values == (b"new-one", b"old-one")
    assert "new-one" not in repr(s) and "old-one" not in repr(s)
    assert s.events is None and s.roll_bytes == 8 * MIB
    assert s.oidc_jwks_url == "https://issuer.example/.well-known/jwks" and s.host == "pod_with_spaces"
    default = ReceiverSettings.from_env({})
    assert default.oidc_audience == "pytorch-cross-repo-ci-relay" and "push" in default.events
    with pytest.raises(SettingsError, match="TORCHCI_CALLBACK_RATE_LIMIT"):
        ReceiverSettings.from_env({"TORCHCI_CALLBACK_RATE_LIMIT": "0"})
    # a list naming no event would acknowledge every delivery and keep none
    with pytest.raises(SettingsError, match="TORCHCI_WEBHOOK_EVENTS=',': names no event"):
        ReceiverSettings.from_env({"TORCHCI_WEBHOOK_EVENTS": " , "})


def test_a_secret_with_commas_and_edge_spaces_comes_from_the_secrets_file(tmp_path, octokit):
    """GitHub takes any text as a webhook secret; the comma-separated variable cannot carry one with a
    comma or an edge space, the file (a mounted Secret, one a line) keeps it byte for byte."""
    odd = " a,b c "
    path = tmp_path / "secrets"
    path.write_bytes(f"{odd}\r\nrotated-out\n\n".encode())
    s = ReceiverSettings.from_env({"TORCHCI_WEBHOOK_SECRETS_FILE": str(path), "TORCHCI_WEBHOOK_SECRETS": "env-one"})
    assert s.webhook_secrets.values == (b"env-one", odd.encode(), b"rotated-out")
    assert "a,b c" not in repr(s)
    body = json.dumps(payload_of(octokit, "workflow_run")).encode()
    with served(tmp_path, webhook_secrets=s.webhook_secrets) as srv:
        assert srv.post_webhook(body, event="workflow_run", secret=odd).status_code == 200
        assert srv.post_webhook(body, event="workflow_run", secret="env-one").status_code == 200
        assert srv.post_webhook(body, event="workflow_run", secret="a").status_code == 401
        assert srv.post_webhook(body, event="workflow_run", secret=odd.strip()).status_code == 401
    with pytest.raises(SettingsError, match="TORCHCI_WEBHOOK_SECRETS_FILE=.*cannot be read"):
        ReceiverSettings.from_env({"TORCHCI_WEBHOOK_SECRETS_FILE": str(tmp_path / "missing")})
