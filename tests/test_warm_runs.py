"""Runs launched by WarmRunLauncher: forked from a warm worker, executed as Dagster's own run
process would, cancelled by terminate, failed by run monitoring when their process dies, never
run with code older than what is on disk, and launched through the code server when no warm
worker can load the code location. Each test uses a small code location written to tmp_path,
a real Dagster instance and workspace (with its gRPC code server)."""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path

import dagster as dg
import pytest
from conftest import ram_instance
from dagster._core.launcher import WorkerStatus
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import ModuleTarget

from torchci_assets.warm_runs import WORKER_TAG, process_start

LOCATION = """
import os, time
import dagster as dg

VERSION = {version}
OUT = os.environ["WARM_TEST_OUT"]

if os.environ.get("WARM_TEST_FAIL_IN_WORKER") and os.environ.get("WARM_TEST_IN_WORKER"):
    raise RuntimeError("this code location refuses to load in the warm worker")

@dg.op
def record(context):
    with open(os.path.join(OUT, context.run_id), "w") as f:
        f.write(f"{{os.getpid()}} {{os.getppid()}} {{VERSION}}")

@dg.op
def wait(context):
    with open(os.path.join(OUT, context.run_id), "w") as f:
        f.write(f"{{os.getpid()}} {{os.getppid()}} {{VERSION}}")
    time.sleep(120)

@dg.job
def record_job():
    record()

@dg.job
def wait_job():
    wait()

defs = dg.Definitions(jobs=[record_job, wait_job], executor=dg.in_process_executor)
"""


def write_location(folder: Path, version: int) -> None:
    path = folder / "warm_location.py"
    path.write_text(textwrap.dedent(LOCATION.format(version=version)))
    os.utime(path, ns=(time.time_ns(), time.time_ns() + version))  # a new mtime even within one tick


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(instance, workspace process context, code folder, output folder): one instance and one code
    server for the module's tests (starting a code server costs ~2.5 CPU-s); each test gets its own
    warm workers (see `location`)."""
    root = tmp_path_factory.mktemp("warm")
    code, out = root / "code", root / "out"
    code.mkdir()
    out.mkdir()
    write_location(code, 1)
    env = pytest.MonkeyPatch()
    env.setenv("WARM_TEST_OUT", str(out))  # before the code server starts: its processes read it
    overrides = {"run_launcher": {"module": "torchci_assets.warm_runs", "class": "WarmRunLauncher"}}
    try:
        with ram_instance(overrides=overrides) as instance:
            target = ModuleTarget(module_name="warm_location", attribute="defs", working_directory=str(code),
                                  location_name="warm")
            with WorkspaceProcessContext(instance, target) as context:
                yield instance, context, code, out
    finally:
        env.undo()


@pytest.fixture
def location(served):
    """(instance, workspace process context, output folder) for a code location at version 1, with
    no warm worker yet: the launcher starts one at the test's first run, as a new daemon would."""
    instance, context, code, out = served
    if location_version(code) != 1:  # a previous test changed it
        write_location(code, 1)
    yield instance, context, out
    instance.run_launcher.dispose()  # its workers exit once their runs have ended


def location_version(code: Path) -> int:
    return int(re.search(r"^VERSION = (\d+)$", (code / "warm_location.py").read_text(), re.M).group(1))


def launch(instance, context, job_name: str) -> str:
    workspace = context.create_request_context()
    location = workspace.get_code_location("warm")
    remote_job = location.get_repository("__repository__").get_full_job(job_name)
    plan = location.get_execution_plan(remote_job, {}, step_keys_to_execute=None, known_state=None, instance=instance)
    run = instance.create_run(  # as Dagster's webserver and daemon create a run of a remote job
        job_name=job_name, run_id=None, run_config={}, resolved_op_selection=None, step_keys_to_execute=None,
        status=dg.DagsterRunStatus.NOT_STARTED, tags={}, root_run_id=None, parent_run_id=None,
        job_snapshot=remote_job.job_snapshot, execution_plan_snapshot=plan.execution_plan_snapshot,
        parent_job_snapshot=remote_job.parent_job_snapshot, op_selection=None, asset_selection=None,
        asset_check_selection=None, remote_job_origin=remote_job.get_remote_origin(),
        job_code_origin=remote_job.get_python_origin(), asset_graph=workspace.asset_graph,
    )
    instance.launch_run(run.run_id, workspace)
    return run.run_id


def wait_for(instance, run_id: str, statuses, timeout: float = 60.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        run = instance.get_run_by_id(run_id)
        if run.status in statuses:
            return run
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} is {instance.get_run_by_id(run_id).status}, not one of {statuses}")


def recorded(out: Path, run_id: str, timeout: float = 30.0) -> tuple[int, int, int]:
    path = out / run_id
    deadline = time.time() + timeout
    while not (path.exists() and path.read_text()) and time.time() < deadline:
        time.sleep(0.05)
    pid, ppid, version = map(int, path.read_text().split())
    return pid, ppid, version


def test_runs_fork_from_one_warm_worker_and_succeed(location, capfd):
    instance, context, out = location
    first = launch(instance, context, "record_job")
    second = launch(instance, context, "record_job")
    for run_id in (first, second):
        assert wait_for(instance, run_id, {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE}).status == \
            dg.DagsterRunStatus.SUCCESS
    (pid1, ppid1, _), (pid2, ppid2, _) = recorded(out, first), recorded(out, second)
    assert ppid1 == ppid2  # both children of the same warm worker
    assert pid1 != pid2
    run = instance.get_run_by_id(first)
    assert run.tags[WORKER_TAG].split(":")[0] == str(pid1)
    messages = [e.message for e in instance.all_logs(first)]
    assert any(f"Started process for run (pid: {pid1})" in m for m in messages)
    assert not any("code server instead" in (m or "") for m in messages)
    # both runs' lines: the two run at once, and the first may end after the second
    err, deadline = "", time.time() + 10
    while not all(f"run {r} " in err for r in (first, second)) and time.time() < deadline:
        time.sleep(0.1)
        err += capfd.readouterr().err
    for run_id, pid in ((first, pid1), (second, pid2)):  # the worker reports each run's cost
        assert re.search(rf"run {run_id} of record_job \(pid {pid}\) exited 0 after [0-9.]+ s, [0-9.]+ CPU-s", err), err


def test_a_changed_code_location_gets_a_new_worker(location):
    instance, context, out = location
    first = launch(instance, context, "record_job")
    wait_for(instance, first, {dg.DagsterRunStatus.SUCCESS})
    write_location(Path(os.environ["WARM_TEST_OUT"]).parent / "code", 2)
    second = launch(instance, context, "record_job")
    wait_for(instance, second, {dg.DagsterRunStatus.SUCCESS})
    (_, ppid1, version1), (_, ppid2, version2) = recorded(out, first), recorded(out, second)
    assert (version1, version2) == (1, 2)
    assert ppid1 != ppid2


def test_a_reloaded_code_location_gets_a_new_worker(location):
    """Deployment > Code locations > Reload starts a new code server: definitions built from more
    than the source files (partitions from the archive's days) may differ from the worker's."""
    instance, context, out = location
    first = launch(instance, context, "record_job")
    wait_for(instance, first, {dg.DagsterRunStatus.SUCCESS})
    context.reload_code_location("warm")
    second = launch(instance, context, "record_job")
    wait_for(instance, second, {dg.DagsterRunStatus.SUCCESS})
    (_, ppid1, _), (_, ppid2, _) = recorded(out, first), recorded(out, second)
    assert ppid1 != ppid2
    assert WORKER_TAG in instance.get_run_by_id(second).tags


def test_terminate_cancels_the_run(location):
    instance, context, out = location
    run_id = launch(instance, context, "wait_job")
    wait_for(instance, run_id, {dg.DagsterRunStatus.STARTED})
    pid, _, _ = recorded(out, run_id)
    assert instance.run_launcher.check_run_worker_health(instance.get_run_by_id(run_id)).status == WorkerStatus.RUNNING
    assert instance.run_launcher.terminate(run_id)
    assert wait_for(instance, run_id, {dg.DagsterRunStatus.CANCELED, dg.DagsterRunStatus.FAILURE}).status == \
        dg.DagsterRunStatus.CANCELED


def test_health_is_failed_when_the_run_process_died(location):
    instance, context, out = location
    run_id = launch(instance, context, "wait_job")
    wait_for(instance, run_id, {dg.DagsterRunStatus.STARTED})
    pid, _, _ = recorded(out, run_id)
    os.kill(pid, signal.SIGKILL)
    deadline = time.time() + 10
    while process_start(pid) is not None and time.time() < deadline:
        time.sleep(0.05)
    run = instance.get_run_by_id(run_id)
    assert run.status == dg.DagsterRunStatus.STARTED
    health = instance.run_launcher.check_run_worker_health(run)
    assert health.status == WorkerStatus.FAILED and f"pid {pid}" in health.msg, health
    assert not instance.run_launcher.terminate(run_id)  # never signals a pid the run no longer owns
    instance.report_run_failed(run, health.msg)  # what run monitoring does with that answer


def test_falls_back_to_the_code_server(location, monkeypatch):
    instance, context, out = location
    monkeypatch.setenv("WARM_TEST_FAIL_IN_WORKER", "1")
    monkeypatch.setenv("WARM_TEST_IN_WORKER", "1")  # the code server was started without it
    run_id = launch(instance, context, "record_job")
    assert wait_for(instance, run_id, {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE}).status == \
        dg.DagsterRunStatus.SUCCESS
    messages = [e.message or "" for e in instance.all_logs(run_id)]
    assert any("refuses to load in the warm worker" in m and "code server instead" in m for m in messages)
    assert WORKER_TAG not in instance.get_run_by_id(run_id).tags


def test_the_worker_watches_the_code_where_it_was_imported_from_whatever_its_folder(tmp_path):
    """Under `make dev` the processes run in $DAGSTER_HOME and the workspace's working directory "."
    is passed on as is, while the code is imported from the project: the worker must still see an
    edit there, or runs would fork old code until the daemon restarts."""
    from dagster._core.code_pointer import ModuleCodePointer
    from dagster._core.origin import RepositoryPythonOrigin
    from dagster._serdes import serialize_value

    code, home = tmp_path / "code", tmp_path / "home"
    code.mkdir()
    home.mkdir()
    write_location(code, 1)
    origin = RepositoryPythonOrigin(sys.executable, ModuleCodePointer("warm_location", "defs", working_directory="."))
    env = {**os.environ, "WARM_TEST_OUT": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(code), *filter(None, [os.environ.get("PYTHONPATH")])])}
    worker = subprocess.Popen([sys.executable, "-m", "torchci_assets.warm_worker"], cwd=home, env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        worker.stdin.write(json.dumps({"origin": serialize_value(origin), "instance_ref": None}).encode() + b"\n")
        worker.stdin.flush()
        assert json.loads(worker.stdout.readline())["files"] == 1  # warm_location.py, not $DAGSTER_HOME's nothing
        write_location(code, 2)
        worker.stdin.write(json.dumps({"job_name": "record_job", "run_id": "r", "args": "{}"}).encode() + b"\n")
        worker.stdin.flush()
        assert json.loads(worker.stdout.readline()) == {"stale": str((code / "warm_location.py").resolve())}
    finally:
        worker.stdin.close()
        worker.wait(30)


PARTITIONED = """
import dagster as dg

PARTS = dg.DailyPartitionsDefinition(start_date="2026-01-01", end_date="2026-01-03")

@dg.asset(partitions_def=PARTS)
def day_asset():
    return None

defs = dg.Definitions(assets=[day_asset], jobs=[dg.define_asset_job("day_job", [day_asset], partitions_def=PARTS)])
"""


def test_the_worker_forks_no_run_of_a_partition_its_definitions_lack(tmp_path):
    """Partitions that end on an archive's last day grow when the code location is reloaded after
    a new day lands: a run of that day forked from definitions loaded before would fail. Whatever
    the launcher knows of reloads, the worker refuses it, and the launcher starts a new one."""
    from dagster._core.code_pointer import ModuleCodePointer
    from dagster._core.origin import RepositoryPythonOrigin
    from dagster._serdes import serialize_value

    (tmp_path / "days_location.py").write_text(textwrap.dedent(PARTITIONED))
    origin = RepositoryPythonOrigin(sys.executable, ModuleCodePointer("days_location", "defs",
                                                                      working_directory=str(tmp_path)))
    worker = subprocess.Popen([sys.executable, "-m", "torchci_assets.warm_worker"], cwd=tmp_path,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        worker.stdin.write(json.dumps({"origin": serialize_value(origin), "instance_ref": None}).encode() + b"\n")
        worker.stdin.flush()
        assert "ready" in json.loads(worker.stdout.readline())
        request = {"job_name": "day_job", "run_id": "r", "args": "{}", "partitions": ["2026-01-03"]}
        worker.stdin.write(json.dumps(request).encode() + b"\n")
        worker.stdin.flush()
        assert json.loads(worker.stdout.readline()) == {
            "stale": "partition 2026-01-03 of day_job, which the loaded definitions do not have"}
        assert worker.wait(30) == 0  # it exits instead of forking
    finally:
        worker.stdin.close()
        if worker.poll() is None:
            worker.kill()


FAKE_WORKER = """#!{python}
# The warm worker's protocol, its fork for run-1 slower than the launcher waits (a busy machine).
import json, sys, time
sys.stdin.readline()
print(json.dumps({{"ready": 1, "files": 0}}), flush=True)
for line in sys.stdin:
    run_id = json.loads(line)["run_id"]
    if run_id == "run-1":
        time.sleep(2.5)
    print(json.dumps({{"pid": 1000 + int(run_id.split("-")[1]), "run_id": run_id}}), flush=True)
"""


def test_a_late_answer_is_never_taken_for_the_next_run(tmp_path, monkeypatch):
    """A fork answered after the launcher gave up on it: read as the next run's answer, that run
    would be tagged with (and terminated through) the previous run's process."""
    from torchci_assets import warm_runs

    fake = tmp_path / "fake_worker.py"
    fake.write_text(FAKE_WORKER.format(python=sys.executable))
    fake.chmod(0o755)
    monkeypatch.setattr(warm_runs, "REPLY_TIMEOUT_S", 1.0)
    real_serialize = warm_runs.serialize_value
    monkeypatch.setattr(warm_runs, "serialize_value",
                        lambda v: "fake" if isinstance(v, types.SimpleNamespace) else real_serialize(v))
    origin = types.SimpleNamespace(job_name="record_job", repository_origin=types.SimpleNamespace(
        executable_path=str(fake), code_pointer=types.SimpleNamespace(working_directory=str(tmp_path))))
    with ram_instance() as instance:
        launcher = warm_runs.WarmRunLauncher()
        launcher.register_instance(instance)
        with pytest.raises(warm_runs.WorkerUnavailable, match="did not answer"):
            launcher._fork(origin, "run-1", "{}")
        time.sleep(2)  # the late answer has come by now
        assert [launcher._fork(origin, f"run-{n}", "{}") for n in (2, 3)] == [1002, 1003]
        for worker in launcher._workers.values():
            worker.stop()
