"""A process that has loaded the code location once and forks one child per run.

Why: Dagster's code server starts every run in a fresh process (multiprocessing "spawn"), which
imports Python's packages, Dagster, DuckDB and pyarrow and loads the code location again: ~1.7 of
the ~7 CPU-s of a run of the intra-day refresh, paid every minute all day. A child forked from
this process starts with all of that done.

`WarmRunLauncher` (warm_runs.py) starts it with the code location's origin and talks to it over
its stdin and stdout, one JSON line each way:
- it reads `{"origin": <the serialized RepositoryPythonOrigin>, "instance_ref": <the serialized
  InstanceRef>}` and answers `{"ready": <pid>}` once the code location is loaded, or
  `{"error": ...}`;
- then for each `{"job_name": ..., "args": <Dagster's serialized ExecuteExternalJobArgs>,
  "partitions": [<the run's partition keys>]}` it forks a child that executes the run exactly as
  Dagster's code server does (`start_run_in_subprocess`), and answers `{"pid": <child>, "run_id":
  <the run's>}`;
- if a source file of the code location changed since it was loaded, or the run is of a
  partition the definitions it loaded do not have, it answers `{"stale": <why>}` and exits
  instead: the launcher starts a new one, so a run never executes code older than what is on disk
  (as with Dagster's spawned processes), nor definitions older than the code server's. The
  launcher also replaces it when the code location is reloaded (warm_runs.py); the partition
  check is for what that cannot see.
It exits when its stdin closes (the launcher's process ended), once its runs have ended. For each
run that ends it writes one line to stderr: exit code, seconds, CPU-seconds and peak memory.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import select
import signal
import sys
import time
import traceback

REAP_EVERY_S = 0.5
# Imported by every run: pandas (by pyarrow, at its first conversion from Python objects), pyarrow's
# datasets (by DuckDB, to scan Arrow data), the migrations' helpers (by Dagster's SQL storages, when
# they check their schema at start: ~0.25 CPU-s), Dagster's .env loader and universal-pathlib (by the
# definitions-state storage of every instance Dagster makes: ~0.03 CPU-s). A missing one is skipped.
PRELOAD = ("pandas", "pyarrow.dataset", "dagster._core.storage.migration.utils", "dagster._core.secrets.env_file",
           "upath.core")


def working_directory(origin) -> str:
    """Where a code location's origin is loaded from (the worker runs there)."""
    return getattr(origin.code_pointer, "working_directory", None) or os.getcwd()


def code_root(origin) -> str:
    """The folder holding the code location's top-level package (or its file): where its source
    is, whatever folder the processes run in. A workspace's relative `working_directory` is passed
    on unresolved, so under `make dev` (started in $DAGSTER_HOME) it names the wrong folder."""
    pointer = origin.code_pointer
    module = getattr(pointer, "module", None) or getattr(pointer, "package_name", None)
    top = sys.modules.get(module.split(".")[0]) if module else None
    path = getattr(top, "__file__", None) or getattr(pointer, "python_file", None)
    if not path:
        return working_directory(origin)
    path = os.path.realpath(path)
    return os.path.dirname(os.path.dirname(path) if os.path.basename(path) == "__init__.py" else path)


def _source_files(folder: str) -> dict[str, int]:
    """The loaded modules' files below the code location's folder (not installed packages), by
    modification time."""
    root = os.path.realpath(folder) + os.sep
    files = {}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if not path:
            continue
        path = os.path.realpath(path)
        if path.startswith(root) and "site-packages" not in path:
            try:
                files[path] = os.stat(path).st_mtime_ns
            except OSError:
                continue
    return files


def _changed(files: dict[str, int]) -> str | None:
    for path, mtime in files.items():
        try:
            if os.stat(path).st_mtime_ns != mtime:
                return path
        except OSError:
            return path
    return None


def outside_partitions(recon_repo, job_name: str, keys) -> str | None:
    """Why the run cannot execute with the definitions loaded here: one of its partition keys is
    not among the job's partitions; None when they all are (or the job has none to check).

    Why: definitions depend on more than source files. The daily partitions of an archive that
    ended before today end on its last day; once files land in a new day and the code location is
    reloaded, the code server has that day's partition and a worker loaded before the reload does
    not, so a run forked from it would fail ("Partition key range end ... is after the partitions
    definition end time"). A worker loaded now has it."""
    if not keys:
        return None
    try:
        partitions_def = recon_repo.get_definition().get_job(job_name).partitions_def
        missing = [k for k in keys if partitions_def is not None and not partitions_def.has_partition_key(k)]
    except Exception:  # partitions this cannot read (dynamic ones need the instance): the run reports its own errors
        return None
    return f"partition {missing[0]} of {job_name}, which the loaded definitions do not have" if missing else None


def _reply(out, message: dict) -> None:
    out.write(json.dumps(message).encode() + b"\n")
    out.flush()


class _StatusLog:
    """Where Dagster's run process reports its setup (a queue to the code server there): an
    error before the run could start goes to stderr, like the code server's log."""

    def put(self, event) -> None:
        error = getattr(event, "serializable_error_info", None)
        if error is not None:
            print(f"torchci warm worker (pid {os.getpid()}): {event.message}\n{error.to_string()}",
                  file=sys.stderr, flush=True)


def _run_child(recon_repo, job_name: str, args: str) -> None:
    """In the forked child: execute the run, then exit without running the parent's cleanups."""
    code = 1
    try:
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)  # the parent's request pipe
        os.dup2(2, 1)  # the parent's reply pipe: what the run prints goes where its errors go
        os.close(devnull)
        gc.unfreeze()
        import multiprocessing

        from dagster._grpc.impl import start_run_in_subprocess

        start_run_in_subprocess(args, recon_repo.get_reconstructable_job(job_name), _StatusLog(),
                                multiprocessing.get_context("fork").Event())
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def load(origin_json: str, instance_ref_json: str | None = None):
    """The code location named by `origin_json` (a serialized RepositoryPythonOrigin), loaded, with
    what every run imports next; and its source files' modification times.

    What every run imports next: Dagster's run execution, the instance's classes (its storages,
    compute log manager... named by the serialized InstanceRef; imported, not kept instantiated, so
    that no connection is shared with the children), and PRELOAD (~0.6 CPU-s of each run of the
    intra-day refresh). And what every run checks first: the schemas of the instance's SQLite
    databases, and the template of a run's database (`sqlite_storage.check_before_forks`, whose
    connections are closed before it returns; ~0.1 CPU-s a run)."""
    from dagster._core.instance.ref import InstanceRef
    from dagster._core.origin import RepositoryPythonOrigin
    from dagster._serdes import ConfigurableClassData, deserialize_value
    from dagster._utils.hosted_user_process import recon_repository_from_origin

    origin = deserialize_value(origin_json, RepositoryPythonOrigin)
    recon_repo = recon_repository_from_origin(origin)
    recon_repo.get_definition()
    import dagster._core.execution.api  # noqa: F401
    import dagster._core.instance.factory  # noqa: F401
    import dagster._grpc.impl  # noqa: F401

    if instance_ref_json:
        ref = deserialize_value(instance_ref_json, InstanceRef)
        for value in ref:
            if isinstance(value, ConfigurableClassData):
                importlib.import_module(value.module_name)
        from torchci_assets.sqlite_storage import check_before_forks

        try:
            check_before_forks(ref)
        except Exception:  # a database busy or unreadable now: each run checks it, as it would without this
            print(f"torchci warm worker (pid {os.getpid()}): the instance's databases not checked before forking "
                  f"runs; each run checks them\n{traceback.format_exc(limit=5)}", file=sys.stderr, flush=True)
    for module in PRELOAD:
        try:
            importlib.import_module(module)
        except ImportError:
            pass

    return recon_repo, _source_files(code_root(origin))


def freeze() -> None:
    """Before forking: the children share these objects' memory pages until they write to them,
    and a frozen object is never visited by a child's collector, which would touch (and copy)
    each page."""
    gc.collect()
    gc.freeze()


class _Runs:
    """The children running, reaped as they end, each with one line on stderr: what a run cost."""

    def __init__(self):
        self.running: dict[int, tuple[str, str, float]] = {}

    def add(self, pid: int, job_name: str, run_id: str) -> None:
        self.running[pid] = (job_name, run_id, time.monotonic())

    def reap(self) -> None:
        while self.running:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            job_name, run_id, started = self.running.pop(pid, ("?", "?", time.monotonic()))
            code = os.waitstatus_to_exitcode(status)
            print(f"torchci warm worker: run {run_id} of {job_name} (pid {pid}) exited {code} after "
                  f"{time.monotonic() - started:.1f} s, {usage.ru_utime + usage.ru_stime:.2f} CPU-s, "
                  f"peak RSS {usage.ru_maxrss // 1024} MB", file=sys.stderr, flush=True)


def _lines(fd: int, runs: _Runs):
    """The requests, one per line, reaping finished runs while waiting; ends when `fd` closes."""
    buffer = b""
    while True:
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield line
        if not select.select([fd], [], [], REAP_EVERY_S)[0]:
            runs.reap()
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return
        buffer += chunk


def serve(requests_fd: int, replies) -> None:
    """Load the code location named by the first line, then fork a child per request until the
    requests end, a source file changes or a run needs partitions loaded after this process."""
    runs = _Runs()
    lines = _lines(requests_fd, runs)
    try:
        first = json.loads(next(lines))
        recon_repo, files = load(first["origin"], first.get("instance_ref"))
    except Exception:
        _reply(replies, {"error": traceback.format_exc(limit=20)})
        return
    freeze()
    _reply(replies, {"ready": os.getpid(), "files": len(files)})
    for line in lines:
        request = json.loads(line)
        stale = _changed(files) or outside_partitions(recon_repo, request["job_name"], request.get("partitions"))
        if stale:
            _reply(replies, {"stale": stale})
            break
        pid = os.fork()
        if pid == 0:
            _run_child(recon_repo, request["job_name"], request["args"])
        runs.add(pid, request["job_name"], request.get("run_id", "?"))
        _reply(replies, {"pid": pid, "run_id": request.get("run_id")})
        runs.reap()
    while runs.running:  # the launcher is gone or replaced this worker: report the last runs
        time.sleep(REAP_EVERY_S)
        runs.reap()


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C in a terminal is for the launcher
    serve(sys.stdin.fileno(), sys.stdout.buffer)


if __name__ == "__main__":
    main()
