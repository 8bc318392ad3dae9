"""Dagster's default run launcher, with runs forked from a warm process instead of spawned.

Why: Dagster's code server starts each run in a new Python process that loads everything again
(~1.7 CPU-s for this code location, a quarter of a run of the intra-day refresh). This launcher
keeps one `warm_worker` process per code location, started from the daemon (or whichever process
launches runs) on first use, and asks it to fork each run. A run executes as in Dagster's own run
process: same function, same instance, same events; the UI shows it like any other run, with
one more tag (`torchci/worker`, the run's process id and start time).

Only local Python code locations on Linux use it. Anything else, or a warm worker that cannot be
started, falls back to Dagster's `DefaultRunLauncher` (the code server), with an engine event on
the run saying why. Terminating a run signals its process, which Dagster's handler turns into a
cancellation; run monitoring asks `check_run_worker_health`, so a run whose process died is
marked failed.

A worker forks the definitions it loaded, so it is replaced whenever they may differ from the code
server's: when a source file changed (the worker says so), when the code location was reloaded
(Deployment > Code locations > Reload, which starts a new code server: the worker is keyed on the
server's id), and when a run is of a partition the worker's definitions lack (the worker says so;
the partitions of an archive that ended before today grow only on a reload).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time

from dagster._core.launcher import CheckRunHealthResult, DefaultRunLauncher, LaunchRunContext, WorkerStatus
from dagster._core.storage.dagster_run import DagsterRun
from dagster._core.storage.tags import (ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG,
                                        PARTITION_NAME_TAG)
from dagster._serdes import serialize_value

from torchci_assets.warm_worker import working_directory

WORKER_TAG = "torchci/worker"
START_TIMEOUT_S = 120.0  # loading the code location (~1-2 s here; a cold disk or a busy machine)
REPLY_TIMEOUT_S = 30.0  # a fork


class WorkerUnavailable(Exception):
    """The warm worker could not take the run. Nothing was started, unless the worker died between
    its fork and its answer: then the launch through the code server that follows finds the run
    started, and Dagster ignores it as a duplicate."""


def process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc), which tells a process from a
    later one given the same pid; None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    return fields[19] if len(fields) > 19 and fields[0] not in ("Z", "X") else None


def run_partitions(tags) -> list[str]:
    """The partition keys a run executes: its partition, or the ends of its range (a backfill's)."""
    return [tags[t] for t in (PARTITION_NAME_TAG, ASSET_PARTITION_RANGE_START_TAG, ASSET_PARTITION_RANGE_END_TAG)
            if tags.get(t)]


def code_server_id(workspace, location_name: str) -> str | None:
    """The id of the code server serving `location_name` now; None without one (an in-process
    location, one that failed to load, no workspace) or when it does not answer.

    A reload of the code location starts a new code server, with a new id. The id is asked of the
    server, not read from the workspace: the process launching the run (the daemon) may not have
    seen the reload the webserver made yet, and a run it launches from the old worker would
    execute the definitions from before the reload."""
    if workspace is None:
        return None
    try:
        location = workspace.get_code_location(location_name)
    except Exception:
        return None
    client = getattr(location, "client", None)
    if client is None:
        return None
    from dagster._api.get_server_id import sync_get_server_id

    try:
        return sync_get_server_id(client)
    except Exception:  # restarting: the worker in place is kept, and refuses a partition it lacks
        return None


class WarmWorker:
    """The client of one `warm_worker` process: start it, ask it to fork runs, stop it.
    `server_id`: the code server's id when it was started (see `code_server_id`)."""

    def __init__(self, origin, instance_ref=None, server_id: str | None = None):
        self.server_id = server_id
        first = json.dumps({"origin": serialize_value(origin),
                            "instance_ref": serialize_value(instance_ref) if instance_ref is not None else None})
        cwd = working_directory(origin)
        executable = origin.executable_path or sys.executable
        try:
            self.proc = subprocess.Popen([executable, "-m", "torchci_assets.warm_worker"], cwd=cwd,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        except OSError as exc:
            raise WorkerUnavailable(f"could not start a warm worker with {executable} in {cwd}: {exc}")
        self._buffer = b""
        try:
            self._send_line(first)
            ready = self._receive(START_TIMEOUT_S)
        except WorkerUnavailable:
            self.kill()
            raise
        if "ready" not in ready:
            self.kill()
            raise WorkerUnavailable(f"the warm worker could not load the code location:\n{ready.get('error', ready)}")

    def _send_line(self, line: str) -> None:
        try:
            self.proc.stdin.write(line.encode() + b"\n")
            self.proc.stdin.flush()
        except OSError as exc:
            raise WorkerUnavailable(f"the warm worker (pid {self.proc.pid}) is gone: {exc}") from exc

    def _receive(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise WorkerUnavailable(f"the warm worker (pid {self.proc.pid}) did not answer within {timeout:.0f} s")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise WorkerUnavailable(f"the warm worker (pid {self.proc.pid}) exited "
                                        f"(code {self.proc.poll()}); its error is in the launcher's stderr")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def fork_run(self, job_name: str, run_id: str, args: str, partitions: list[str] = ()) -> dict:
        """Ask for a child executing the run: `{"pid": n}`, or `{"stale": why}` (the worker exits)."""
        self._send_line(json.dumps({"job_name": job_name, "run_id": run_id, "args": args,
                                    "partitions": list(partitions)}))
        return self._receive(REPLY_TIMEOUT_S)

    def stop(self) -> None:
        """Close its requests: it exits once its runs have ended (they are never cut short)."""
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass

    def kill(self) -> None:
        """For a worker that never became ready: it has no runs."""
        self.proc.kill()
        self.proc.wait()
        self.stop()


class WarmRunLauncher(DefaultRunLauncher):
    """See the module's docstring. Configured in dagster.yaml as `run_launcher`, with no config."""

    def __init__(self, inst_data=None):
        super().__init__(inst_data=inst_data)
        self._workers: dict[str, WarmWorker] = {}
        self._workers_lock = threading.Lock()

    def launch_run(self, context: LaunchRunContext) -> None:
        run = context.dagster_run
        origin = run.job_code_origin
        if origin is None or run.remote_job_origin is None or not sys.platform.startswith("linux"):
            super().launch_run(context)
            return
        from dagster._grpc.types import ExecuteExternalJobArgs

        args = serialize_value(ExecuteExternalJobArgs(job_origin=run.remote_job_origin, run_id=run.run_id,
                                                      instance_ref=self._instance.get_ref()))
        server_id = code_server_id(context.workspace, run.remote_job_origin.location_name)
        try:
            pid = self._fork(origin, run.run_id, args, server_id, run_partitions(run.tags))
        except WorkerUnavailable as exc:
            self._instance.report_engine_event(
                f"{exc}. Launching the run through the code server instead.", run, cls=self.__class__)
            super().launch_run(context)
            return
        start = process_start(pid)
        self._instance.add_run_tags(run.run_id, {WORKER_TAG: f"{pid}:{start or ''}"})
        self._run_ids.add(run.run_id)

    def _fork(self, origin, run_id: str, args: str, server_id: str | None = None,
              partitions: list[str] = ()) -> int:
        """The pid of a child of the warm worker for `origin` executing the run. A worker started
        for another code server (before a reload) is let go first; a stale one is replaced once."""
        key = serialize_value(origin.repository_origin)
        with self._workers_lock:
            for _ in range(2):
                worker = self._workers.get(key)
                if worker is not None and server_id is not None and worker.server_id != server_id:
                    worker.stop()  # its runs go on; it exits after them
                    worker = None
                if worker is None or not worker.alive():
                    worker = self._workers[key] = WarmWorker(origin.repository_origin, self._instance.get_ref(),
                                                             server_id)
                try:
                    reply = worker.fork_run(origin.job_name, run_id, args, partitions)
                    if "pid" in reply and reply.get("run_id", run_id) != run_id:
                        raise WorkerUnavailable(f"the warm worker answered for run {reply['run_id']}")
                except WorkerUnavailable:
                    # Its answer may still come, late: read as the next run's, it would name this
                    # run's process. The worker is let go (its runs go on) and a new one started.
                    worker.stop()
                    del self._workers[key]
                    raise
                if "pid" in reply:
                    return reply["pid"]
                worker.stop()
                del self._workers[key]
            raise WorkerUnavailable(f"the warm worker was stale twice in a row: {reply.get('stale')}")

    def _worker_pid(self, run: DagsterRun) -> tuple[int, str] | None:
        tag = run.tags.get(WORKER_TAG)
        if not tag:
            return None
        pid, _, start = tag.partition(":")
        return int(pid), start

    def terminate(self, run_id: str) -> bool:
        run = self._instance.get_run_by_id(run_id) if self.has_instance else None
        worker = self._worker_pid(run) if run is not None and not run.is_finished else None
        if worker is None:
            return super().terminate(run_id)
        pid, start = worker
        self._instance.report_run_canceling(run)
        if not start or process_start(pid) != start:
            self._instance.report_engine_event(f"The run's process (pid {pid}) is no longer running.", run,
                                               cls=self.__class__)
            return False
        os.kill(pid, signal.SIGTERM)  # Dagster's handler in the run's process: a cancellation
        return True

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: DagsterRun) -> CheckRunHealthResult:
        worker = self._worker_pid(run)
        if worker is None:
            # Launched through the code server, which marks the run failed if its process dies.
            return CheckRunHealthResult(WorkerStatus.RUNNING, "launched through the code server, which watches it")
        pid, start = worker
        if start and process_start(pid) == start:
            return CheckRunHealthResult(WorkerStatus.RUNNING)
        return CheckRunHealthResult(WorkerStatus.FAILED, f"the run's process (pid {pid}) exited before the run ended")

    def dispose(self) -> None:
        with self._workers_lock:
            for worker in self._workers.values():
                worker.stop()
            self._workers.clear()
        super().dispose()
