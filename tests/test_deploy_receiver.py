"""deploy/receiver.yaml: what can be checked without a cluster. The Deployment runs the code
location's image with `torchci serve`, wired to its Service, probes, spool and settings; and that
command, run here with the Deployment's own environment (local folders for S3), serves /healthz."""

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import requests
import yaml

from conftest import free_port, wait_for_port
from receiving import config_file
from torchci_assets.receiver.settings import ENV_VARS, parse_size

ROOT = Path(__file__).resolve().parent.parent
TORCHCI = str(Path(sys.executable).parent / "torchci")
STORAGE_VARS = {"AWS_REGION", "TORCHCI_S3_ENDPOINT", "TORCHCI_CONFIG"}


@pytest.fixture(scope="module")
def manifests() -> dict:
    docs = list(yaml.safe_load_all((ROOT / "deploy/receiver.yaml").read_text()))
    return {d["kind"]: d for d in docs}


def container(manifests) -> dict:
    [c] = manifests["Deployment"]["spec"]["template"]["spec"]["containers"]
    return c


def test_the_deployment_runs_torchci_serve_from_the_code_location_image(manifests):
    c = container(manifests)
    assert c["command"][:2] == ["torchci", "serve"] and c["command"][c["command"].index("--host") + 1] == "0.0.0.0"
    port = int(c["command"][c["command"].index("--port") + 1])
    assert c["ports"] == [{"name": "http", "containerPort": port}]
    helm = yaml.safe_load((ROOT / "deploy/helm/values.yaml").read_text())
    [code_location] = helm["dagster-user-deployments"]["deployments"]
    assert c["image"] == f"{code_location['image']['repository']}:{code_location['image']['tag']}"
    # the image's user owns the spool
    assert manifests["Deployment"]["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == 10001
    assert "USER 10001" in (ROOT / "deploy/Dockerfile").read_text()


def test_service_probes_spool_and_settings_fit_together(manifests):
    deployment, service = manifests["Deployment"], manifests["Service"]
    pod = deployment["spec"]["template"]
    c = container(manifests)
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert pod["metadata"]["labels"].items() >= service["spec"]["selector"].items()
    assert service["spec"]["ports"][0]["targetPort"] == c["ports"][0]["name"]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    env = {e["name"]: e for e in c["env"]}
    assert set(env) <= set(ENV_VARS) | STORAGE_VARS, set(env) - set(ENV_VARS) - STORAGE_VARS
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert mounts["spool"] == env["TORCHCI_SPOOL_DIR"]["value"]
    # the receiver refuses deliveries before its spool reaches the volume's limit (an overrun evicts the pod)
    [spool_volume] = [v for v in pod["spec"]["volumes"] if v["name"] == "spool"]
    high_water = parse_size(env["TORCHCI_SPOOL_HIGH_WATER"]["value"], "TORCHCI_SPOOL_HIGH_WATER")
    assert high_water < parse_size(spool_volume["emptyDir"]["sizeLimit"], "sizeLimit")
    assert os.path.dirname(env["TORCHCI_CONFIG"]["value"]) == mounts["relay-config"]
    assert env["TORCHCI_RECEIVER_HOST"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert {"secretRef": {"name": "torchci-receiver"}} in c["envFrom"]  # TORCHCI_WEBHOOK_SECRETS, never inline
    assert "TORCHCI_WEBHOOK_SECRETS" not in env
    # room for uvicorn's 30 s graceful stop and the 20 s shutdown roll
    assert pod["spec"]["terminationGracePeriodSeconds"] >= 55


def test_the_deployments_command_serves_healthz_and_readyz_with_its_environment(manifests, tmp_path):
    c = container(manifests)
    env = {**os.environ, **{e["name"]: e["value"] for e in c["env"] if "value" in e},
           "TORCHCI_ARCHIVE_URI": str(tmp_path / "archive"), "TORCHCI_LAKE_URI": str(tmp_path / "lake"),
           "TORCHCI_SPOOL_DIR": str(tmp_path / "spool"), "TORCHCI_CONFIG": config_file(tmp_path),
           "TORCHCI_RECEIVER_HOST": "torchci-receiver-abc12", "TORCHCI_WEBHOOK_SECRETS": "s"}
    port = free_port()
    cmd = [TORCHCI, *c["command"][1:]]
    cmd[cmd.index("--host") + 1] = "127.0.0.1"  # the pod binds 0.0.0.0; here only loopback
    cmd[cmd.index("--port") + 1] = str(port)
    log_path = tmp_path / "serve.log"
    with open(log_path, "wb") as out:
        server = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for_port(port, server, timeout=60)
        health = requests.get(f"http://127.0.0.1:{port}/healthz", timeout=10)
        assert health.status_code == 200 and health.json()["ok"] is True
        ready = requests.get(f"http://127.0.0.1:{port}/readyz", timeout=10)
        assert ready.status_code == 200 and ready.json() == {"ready": True, "reasons": []}
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(60)
    assert "Application shutdown complete" in log_path.read_text()


def test_a_second_process_on_the_same_spool_is_refused_with_a_clear_message(tmp_path):
    env = {**os.environ, "TORCHCI_SPOOL_DIR": str(tmp_path / "spool"), "TORCHCI_CONFIG": config_file(tmp_path),
           "TORCHCI_ARCHIVE_URI": str(tmp_path / "archive")}
    port = free_port()
    first = subprocess.Popen([TORCHCI, "serve", "--port", str(port)], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for_port(port, first, timeout=60)
        second = subprocess.run([TORCHCI, "serve", "--port", str(free_port())], env=env, capture_output=True,
                                text=True, timeout=60)
        assert second.returncode == 2
        assert re.search(r"spool .* is in use by another receiver process", second.stderr), second.stderr
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(60)


def test_a_bad_setting_stops_serve_before_it_listens(tmp_path):
    env = {**os.environ, "TORCHCI_ROLL_BYTES": "lots", "TORCHCI_SPOOL_DIR": str(tmp_path / "spool")}
    run = subprocess.run([TORCHCI, "serve", "--port", str(free_port())], env=env, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 2 and "TORCHCI_ROLL_BYTES='lots'" in run.stderr
