"""deploy/: what can be checked without a cluster. The Helm values carry the settings the
official chart reads and agree with dagster.yaml and the Dockerfile; the image's command
starts the code location here and answers the gRPC health check."""

import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
import yaml

from conftest import free_port

ROOT = Path(__file__).resolve().parent.parent
DAGSTER = str(Path(sys.executable).parent / "dagster")


@pytest.fixture(scope="module")
def values() -> dict:
    return yaml.safe_load((ROOT / "deploy/helm/values.yaml").read_text())


def dockerfile_cmd() -> list[str]:
    [cmd] = re.findall(r"^CMD (\[.*\])$", (ROOT / "deploy/Dockerfile").read_text(), flags=re.M)
    return json.loads(cmd)


def test_user_code_deployment_serves_the_definitions_with_s3_and_github_settings(values):
    [deployment] = values["dagster-user-deployments"]["deployments"]
    assert values["dagster-user-deployments"]["enabled"] is True
    assert set(deployment["image"]) >= {"repository", "tag", "pullPolicy"}
    # the chart runs `dagster api grpc -h 0.0.0.0 -p <port> <dagsterApiGrpcArgs>`: the image's own command
    cmd = dockerfile_cmd()
    assert cmd[:3] == ["dagster", "api", "grpc"]
    assert cmd[cmd.index("-p") + 1] == str(deployment["port"])
    assert cmd[cmd.index("-p") + 2:] == deployment["dagsterApiGrpcArgs"]
    env = {e["name"]: e["value"] for e in deployment["env"]}
    for name in ("TORCHCI_ARCHIVE_URI", "TORCHCI_LAKE_URI", "TORCHCI_OUTPUTS_URI"):
        assert env[name].startswith("s3://")
    assert "AWS_REGION" in env
    # every process loads the definitions: with a fixed first partition they agree without listing S3
    assert dt.date.fromisoformat(env["TORCHCI_FIRST_DAY"])
    secrets = {s["name"] for s in deployment["envSecrets"]}
    assert {"torchci-github", "torchci-s3"} <= secrets
    assert deployment["includeConfigInLaunchedRuns"]["enabled"] is True


def test_runs_go_to_kubernetes_and_the_instance_to_postgres_with_dagster_yaml_limits(values):
    launcher = values["runLauncher"]
    assert launcher["type"] == "K8sRunLauncher"
    assert {s["name"] for s in launcher["config"]["k8sRunLauncher"]["envSecrets"]} >= {"torchci-github", "torchci-s3"}
    pg = values["postgresql"]
    assert pg["postgresqlScheme"] == "postgresql+psycopg2"  # SQLAlchemy 2.1 needs the driver named
    assert pg["enabled"] is False and pg["postgresqlHost"] and values["global"]["postgresqlSecretName"]
    assert values["generatePostgresqlPasswordSecret"] is False
    local = yaml.safe_load((ROOT / "dagster.yaml").read_text())["concurrency"]["runs"]
    queued = values["dagsterDaemon"]["runCoordinator"]
    assert queued["type"] == "QueuedRunCoordinator"
    config = queued["config"]["queuedRunCoordinator"]
    assert config["maxConcurrentRuns"] == local["max_concurrent_runs"]
    assert config["tagConcurrencyLimits"] == local["tag_concurrency_limits"]
    sensors = yaml.safe_load((ROOT / "dagster.yaml").read_text())["sensors"]
    assert values["dagsterDaemon"]["sensors"] == {"useThreads": sensors["use_threads"], "numWorkers": sensors["num_workers"]}
    # the chart writes the pools into the instance only when enabled (and never run limits twice)
    pools = yaml.safe_load((ROOT / "dagster.yaml").read_text())["concurrency"]["pools"]
    assert values["concurrency"] == {"enabled": True, "pools": {"defaultLimit": pools["default_limit"]}}


def test_the_image_copies_every_package_the_project_installs():
    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {p.rstrip("*") for p in include}
    copied = set(re.findall(r"^COPY (\w+) \./\1$", (ROOT / "deploy/Dockerfile").read_text(), flags=re.M))
    assert copied == packages


def test_the_image_command_starts_the_code_location_and_answers_the_health_check(tmp_path):
    port = free_port()
    cmd = dockerfile_cmd()
    cmd[cmd.index("-h") + 1] = "127.0.0.1"  # the container binds 0.0.0.0; here only loopback
    cmd[cmd.index("-p") + 1] = str(port)
    log_path = tmp_path / "server.log"
    # the image's own empty DAGSTER_HOME (its ENV), not the one `make test` exports for this checkout
    (home := tmp_path / "dagster_home").mkdir()
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    with open(log_path, "wb") as out:  # a file, not a pipe: a full pipe would stall the server
        server = subprocess.Popen([DAGSTER, *cmd[1:]], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    try:
        deadline, answer = time.monotonic() + 90, None
        while time.monotonic() < deadline and server.poll() is None:
            check = subprocess.run([DAGSTER, "api", "grpc-health-check", "-p", str(port)],
                                   capture_output=True, text=True)
            answer = check.stdout + check.stderr
            if check.returncode == 0:
                break
            time.sleep(0.5)
        assert server.poll() is None, log_path.read_text()[-2000:]
        assert check.returncode == 0 and "successful" in answer
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the server and any process it started
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(10)
    # it served because the definitions loaded, not in spite of an import error
    log = log_path.read_text()
    assert "Started Dagster code server for module torchci_assets.definitions" in log, log[-2000:]


def test_make_keeps_an_instance_yaml_that_is_not_its_template(tmp_path):
    """`cp dagster.postgres.yaml $DAGSTER_HOME/dagster.yaml` (docs/operations.md) must survive a
    `git pull` that changes the repository's dagster.yaml: make installs the template only over
    its own copy."""
    home = tmp_path / "home"
    target = home / "dagster.yaml"

    def make():
        os.utime(target, (1, 1)) if target.exists() else None  # older than the template: make acts
        return subprocess.run(["make", "-s", f"DAGSTER_HOME={home}", str(target)], cwd=ROOT, capture_output=True,
                              text=True, timeout=60)

    assert make().returncode == 0 and target.read_text() == (ROOT / "dagster.yaml").read_text()
    # an instance make installed before it kept its copy: still make's, unless it is a PostgreSQL one
    (home / ".dagster.yaml.installed").unlink()
    target.write_text("an older template\n")
    assert make().returncode == 0 and target.read_text() == (ROOT / "dagster.yaml").read_text()
    (home / ".dagster.yaml.installed").unlink()
    target.write_text((ROOT / "dagster.postgres.yaml").read_text())
    assert "keeping" in make().stdout and target.read_text() == (ROOT / "dagster.postgres.yaml").read_text()
    make()
    (home / ".dagster.yaml.installed").write_text((ROOT / "dagster.yaml").read_text())
    target.write_text((ROOT / "dagster.postgres.yaml").read_text())
    done = make()
    assert done.returncode == 0 and "keeping" in done.stdout
    assert target.read_text() == (ROOT / "dagster.postgres.yaml").read_text()
