"""`make dev` for tests and benchmarks: `dagster dev` (webserver, daemon, code server) on an archive,
and the webserver's GraphQL API to read what the UI shows and to launch runs as the UI does."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
LOCATION = {"repositoryLocationName": "torchci", "repositoryName": "__repository__"}


def dev_env(root: Path, **extra: str) -> dict:
    """The environment `make dev` and `make run` share, with every folder under `root`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHCI_", "DAGSTER_"))}
    env.update({"DAGSTER_HOME": str(root / "dagster"), "TORCHCI_ARCHIVE_URI": str(root / "archive"),
                "TORCHCI_LAKE_URI": str(root / "lake"), "TORCHCI_OUTPUTS_URI": str(root / "outputs"), **extra})
    (root / "dagster").mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "dagster.yaml", root / "dagster" / "dagster.yaml")
    return env


def answers(url: str) -> bool:
    """Whether the server at `url` answers at all (with the UI's own info endpoint, or the
    receiver's liveness)."""
    try:
        return requests.get(f"{url}/server_info", timeout=5).ok or requests.get(f"{url}/healthz", timeout=5).ok
    except requests.RequestException:
        return False


def group_pids(pgid: int) -> list[int]:
    """The processes of process group `pgid` still running (zombies aside: they are only waiting
    for their parent to read their exit status)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            pids.append(int(entry.name))
    return pids


def ignores(pid: int, signum: int) -> bool:
    """Whether process `pid` has `signum` ignored (its SigIgn mask)."""
    mask = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("SigIgn:"))
    return bool(int(mask.split()[1], 16) >> (signum - 1) & 1)


class DagsterDev:
    """A running `dagster dev` in its own process group, started as `make dev` starts it."""

    def __init__(self, env: dict, port: int, log: Path):
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [str(BIN / "dagster"), "dev", "-w", str(ROOT / "workspace.yaml"), "-h", "127.0.0.1", "-p", str(port)],
                cwd=env["DAGSTER_HOME"], env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def graphql(self, query: str, **variables) -> dict:
        r = requests.post(f"{self.url}/graphql", json={"query": query, "variables": variables}, timeout=60)
        r.raise_for_status()
        body = r.json()
        assert "errors" not in body, body["errors"]
        return body["data"]

    def wait_loaded(self, timeout: float = 240.0) -> None:
        """Until the webserver answers and the code location is loaded."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"dagster dev exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                data = self.graphql("{ workspaceOrError { ... on Workspace { locationEntries { name "
                                    "locationOrLoadError { __typename } } } } }")
                entries = data["workspaceOrError"]["locationEntries"]
                if entries and entries[0]["locationOrLoadError"] and \
                        entries[0]["locationOrLoadError"]["__typename"] == "RepositoryLocation":
                    return
            except requests.RequestException:
                pass
            time.sleep(0.25)
        raise RuntimeError(f"dagster dev did not load the code location in {timeout:.0f} s")

    def sensor_ticks(self, name: str) -> list[dict]:
        data = self.graphql("""query($s: SensorSelector!) { sensorOrError(sensorSelector: $s) {
            ... on Sensor { sensorState { ticks(limit: 10) { status skipReason runIds timestamp } } } } }""",
                            s={**LOCATION, "sensorName": name})
        return data["sensorOrError"]["sensorState"]["ticks"]

    def wait_for_tick(self, name: str, timeout: float = 240.0) -> dict:
        """The sensor's first finished tick (the daemon evaluates a new sensor at once)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done = [t for t in self.sensor_ticks(name) if t["status"] != "STARTED"]
            if done:
                return done[-1]
            time.sleep(0.5)
        raise RuntimeError(f"no tick of {name} in {timeout:.0f} s:\n{self.log.read_text()[-3000:]}")

    def runs(self) -> list[dict]:
        data = self.graphql("""{ runsOrError { ... on Runs { results { runId jobName status pipelineSnapshotId
            repositoryOrigin { repositoryLocationName repositoryName } tags { key value } } } } }""")
        return data["runsOrError"]["results"]

    def job_snapshot_id(self, job: str) -> str:
        data = self.graphql("""query($p: PipelineSelector!) { pipelineOrError(params: $p) {
            ... on Pipeline { pipelineSnapshotId } } }""", p={**LOCATION, "pipelineName": job})
        return data["pipelineOrError"]["pipelineSnapshotId"]

    def launch_day(self, job: str, day: str, assets: list[str] | None = None) -> str:
        """A run of `job` for the `day` partition, launched as the UI's Materialize button does
        (of the `assets` only, when given)."""
        selector = {**LOCATION, "pipelineName": job}
        if assets:
            selector["assetSelection"] = [{"path": [a]} for a in assets]
        data = self.graphql("""mutation($p: ExecutionParams!) { launchRun(executionParams: $p) {
            __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }""",
                            p={"selector": selector,
                               "executionMetadata": {"tags": [{"key": "dagster/partition", "value": day}]}})
        launched = data["launchRun"]
        assert launched["__typename"] == "LaunchRunSuccess", launched
        return launched["run"]["runId"]

    def reload(self) -> None:
        """Deployment > Code locations > Reload: the code location loaded again by a new code server."""
        data = self.graphql("""mutation { reloadRepositoryLocation(repositoryLocationName: "torchci") {
            __typename ... on WorkspaceLocationEntry { loadStatus } ... on PythonError { message } } }""")
        assert data["reloadRepositoryLocation"]["__typename"] == "WorkspaceLocationEntry", data
        self.wait_loaded()

    def wait_run(self, run_id: str, timeout: float = 600.0) -> dict:
        query = """query($id: ID!) { runOrError(runId: $id) { ... on Run { status startTime endTime } } }"""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            run = self.graphql(query, id=run_id)["runOrError"]
            if run["status"] in ("SUCCESS", "FAILURE", "CANCELED"):
                return run
            time.sleep(0.5)
        raise RuntimeError(f"run {run_id} did not finish in {timeout:.0f} s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                # The webserver and the daemon stop within seconds; the code server then waits up to
                # 60 s for a sensor evaluation the daemon left in flight, which no test or benchmark
                # needs (tests/test_ops_make_dev.py checks the whole stop).
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
