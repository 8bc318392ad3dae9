"""What both relay benchmarks start and stop: `dagster dev` (UI and daemon) and `torchci serve`,
as a user runs them, on a fresh instance under the benchmark's own folder, on free ports of the
range this machine's benchmarks keep to (3400-3499, or BENCH_PORTS=first-last)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def port_range() -> range:
    first, _, last = os.environ.get("BENCH_PORTS", "3400-3499").partition("-")
    return range(int(first), int(last) + 1)


def port_in_range(used: set[int]) -> int:
    """A free port of the benchmarks' range; `used` holds the ones this run took already."""
    for port in port_range():
        if port in used:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        used.add(port)
        return port
    raise SystemExit(f"no free port in {port_range()}")


def wait_for(what: str, check, timeout: float, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}")


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def fresh_instance(work: Path) -> None:
    """An empty benchmark folder with the project's dagster.yaml as the instance's."""
    shutil.rmtree(work, ignore_errors=True)
    (work / "dagster").mkdir(parents=True)
    shutil.copy(ROOT / "dagster.yaml", work / "dagster" / "dagster.yaml")


def start(env: dict, work: Path, ports: set[int]) -> tuple[dict, dict, int, int]:
    """`dagster dev` and `torchci serve`, each in its own session; (procs, logs, UI port, serve port)."""
    ui_port, serve_port = port_in_range(ports), port_in_range(ports)
    logs = {name: open(work / f"{name}.log", "wb") for name in ("dev", "serve")}
    procs = {
        "dev": subprocess.Popen([str(BIN / "dagster"), "dev", "-w", "workspace.yaml", "-h", "127.0.0.1",
                                 "-p", str(ui_port)], cwd=ROOT, env=env, stdout=logs["dev"], stderr=logs["dev"],
                                start_new_session=True),
        "serve": subprocess.Popen([str(BIN / "torchci"), "serve", "--port", str(serve_port)], cwd=ROOT, env=env,
                                  stdout=logs["serve"], stderr=logs["serve"], start_new_session=True),
    }
    return procs, logs, ui_port, serve_port


def stop(procs: dict, logs: dict) -> None:
    """TERM to each process group this script started (dagster dev's code servers included)."""
    for proc in procs.values():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    for name, proc in procs.items():
        try:
            proc.wait(90)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # whatever of its session is left
        logs[name].close()


def wait_until_up(ui_port: int, serve_port: int) -> None:
    wait_for("torchci serve", lambda: listening(serve_port), 60)
    wait_for("dagster dev", lambda: listening(ui_port), 180)


def sensor_cursors(instance) -> dict[str, str]:
    """Sensor name -> cursor, for the sensors that have ticked."""
    return {s.name: s.instigator_data.cursor for s in instance.all_instigator_state()
            if getattr(s.instigator_data, "cursor", None)}
