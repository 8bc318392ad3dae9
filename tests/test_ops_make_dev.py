"""`make dev` and `make serve` started in the background by a script stop on `kill -TERM`.

A script's background job inherits SIGINT ignored from the non-interactive shell that started it,
and Dagster answers SIGTERM with whatever handles SIGINT: unless `make dev` resets SIGINT, the UI
and the daemon ignore `kill -TERM` and keep the port until killed (the receiver's server handles
SIGTERM itself). Here the real targets are started as such a script starts them,
`(set -m; make dev DEV_PORT=... & echo $! > pid)`, run in the background of a non-interactive shell.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

from conftest import free_port
from dagster_dev import BIN, ROOT, answers, dev_env, group_pids, ignores

STARTUP_S = 240.0  # the shared machine: the webserver's first answer can take a while
STOP_S = 60.0  # it stops in about 20 s, most of it a sensor evaluation the code server lets finish


def start_in_background(tmp_path, env: dict, target: str, port_var: str, port: int) -> int:
    """The pid of `make <target>`, started by a script a non-interactive shell ran in the background."""
    script, pidfile = tmp_path / f"start-{target}.sh", tmp_path / f"{target}.pid"
    # -o install: the test's own environment, not a pip install in the middle of a test run
    script.write_text(f'(set -m; make -s -o install {target} {port_var}={port} BIN="{BIN}" > "{tmp_path}/{target}.log" '
                      f'2>&1 & echo $! > "{pidfile}")\n')
    subprocess.run(["bash", "-c", f'bash "{script}" & wait'], cwd=ROOT, env=env, check=True, timeout=60)
    return int(pidfile.read_text())


def stops_on_sigterm(tmp_path, pid: int, url: str, processes: int) -> None:
    """Once `url` answers, `kill -TERM pid` ends every process of its group; all killed in any case."""
    try:
        assert ignores(pid, signal.SIGINT), "not started as a script's background job"
        deadline = time.monotonic() + STARTUP_S
        while not answers(url):
            assert group_pids(pid), f"it exited:\n{next(tmp_path.glob('*.log')).read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"{url} did not answer"
            time.sleep(1.0)
        assert len(group_pids(pid)) >= processes
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_S
        while (left := group_pids(pid)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not left, f"still running {STOP_S:.0f} s after kill -TERM {pid}: {left}"
        assert not answers(url)
    finally:
        if group_pids(pid):
            os.killpg(pid, signal.SIGKILL)


def test_make_dev_started_in_the_background_stops_on_sigterm(tmp_path):
    port = free_port()
    pid = start_in_background(tmp_path, dev_env(tmp_path), "dev", "DEV_PORT", port)
    # make, dagster dev, the webserver, the daemon (and the code server)
    stops_on_sigterm(tmp_path, pid, f"http://127.0.0.1:{port}", processes=4)


def test_make_serve_started_in_the_background_stops_on_sigterm(tmp_path):
    port = free_port()
    env = dev_env(tmp_path, TORCHCI_SPOOL_DIR=str(tmp_path / "spool"), TORCHCI_WEBHOOK_SECRETS="s")
    pid = start_in_background(tmp_path, env, "serve", "SERVE_PORT", port)
    stops_on_sigterm(tmp_path, pid, f"http://127.0.0.1:{port}", processes=2)  # make, torchci serve
