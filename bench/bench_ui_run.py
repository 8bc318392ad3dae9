"""A day run launched from the Dagster UI against the same day from `torchci run`.

Data: `make run`'s archive (`torchci simulate`, default options, 3 days) under var/bench-ui-run,
processed once by `torchci run`. Then `dagster dev` (webserver, daemon, run queue, as `make dev`)
runs on the same instance while the last day is re-run, alternately:
  * from the shell: `torchci run --from D --to D`, wall time of the whole command (imports included);
  * from the UI: `launchRun` of `all_assets_daily` for partition D over the webserver's GraphQL API
    (what the Materialize button sends), wall time from the launch to the run's success as the UI
    reports it (queue, run worker start-up and the steps).
Medians of --repeats. The machine is shared (2 cores): the load is printed with the figures.
Run as `make bench-ui-run`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from dagster_dev import BIN, DagsterDev, dev_env  # noqa: E402  (the tests' `make dev` driver)

WORK = ROOT / "var" / "bench-ui-run"
DAYS = ("2026-10-05", "2026-10-06", "2026-10-07")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchci_run(env: dict, day: str) -> float:
    t0 = time.monotonic()
    done = subprocess.run([str(BIN / "torchci"), "run", "--from", day, "--to", day], env=env, cwd=WORK,
                          capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"torchci run failed:\n{done.stderr[-3000:]}")
    return time.monotonic() - t0


def ui_run(server: DagsterDev, day: str) -> tuple[float, float]:
    """(launch -> success as the UI reports it, the run's own start -> end)."""
    t0 = time.time()
    run = server.wait_run(server.launch_day("all_assets_daily", day))
    if run["status"] != "SUCCESS":
        sys.exit(f"the UI's run of {day} ended {run['status']}: see {server.log}")
    return run["endTime"] - t0, run["endTime"] - run["startTime"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    env = dev_env(WORK, TORCHCI_REFRESH_MINUTES="0")  # no sensor run in the way of the measured ones
    subprocess.run([str(BIN / "torchci"), "simulate", "--out", str(WORK / "archive"), "--days", "3",
                    "--start", DAYS[0]], env=env, check=True, capture_output=True)
    subprocess.run([str(BIN / "torchci"), "run"], env=env, cwd=WORK, check=True, capture_output=True)
    day = DAYS[-1]
    server = DagsterDev(env, free_port(), WORK / "dagster-dev.log")
    cli, ui, ui_own = [], [], []
    try:
        server.wait_loaded()
        for i in range(args.repeats):
            cli.append(torchci_run(env, day))
            wall, own = ui_run(server, day)
            ui.append(wall)
            ui_own.append(own)
            print(f"  repeat {i + 1}: torchci run {cli[-1]:.1f} s, UI launch->success {wall:.1f} s "
                  f"(run {own:.1f} s), load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        server.stop()
    c, u = statistics.median(cli), statistics.median(ui)
    print(f"day {day} of `make run`'s archive, median of {args.repeats} on {os.cpu_count()} shared cores "
          f"(load average {os.getloadavg()[1]:.1f}):")
    print(f"  torchci run --from D --to D : {c:6.1f} s (whole command)")
    print(f"  UI launchRun -> SUCCESS     : {u:6.1f} s (run start->end {statistics.median(ui_own):.1f} s)")
    print(f"  ratio UI / CLI              : {u / c:6.2f}x (target <= 1.5x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
