"""Readiness of a real receiver (uvicorn on 127.0.0.1) whose settings refuse every webhook: a
replica without a webhook secret answers every delivery 503, so it must not look ready."""

import json

import requests

from receiving import served
from torchci_assets.receiver.settings import Secrets


def test_a_receiver_without_a_webhook_secret_is_not_ready(tmp_path):
    body = json.dumps({"action": "queued", "workflow_job": {"id": 7}}).encode()
    with served(tmp_path, webhook_secrets=Secrets(())) as srv:
        refused = srv.post_webhook(body, delivery="no-secret")
        ready = requests.get(f"{srv.url}/readyz", timeout=10)
        health = requests.get(f"{srv.url}/healthz", timeout=10)
        metrics_text = requests.get(f"{srv.url}/metrics", timeout=10).text
    assert refused.status_code == 503 and "TORCHCI_WEBHOOK_SECRETS" in refused.json()["detail"]
    assert ready.status_code == 503 and ready.json()["ready"] is False
    (reason,) = ready.json()["reasons"]
    assert "no webhook secret" in reason and "set TORCHCI_WEBHOOK_SECRETS" in reason
    assert health.status_code == 200  # alive: a restart with the same settings would not help
    assert "torchci_receiver_ready 0" in metrics_text


def test_the_same_receiver_with_a_secret_is_ready(tmp_path):
    with served(tmp_path) as srv:
        ready = requests.get(f"{srv.url}/readyz", timeout=10)
    assert ready.status_code == 200 and ready.json() == {"ready": True, "reasons": []}
