"""`torchci backfill` against the fake GitHub API serving a simulated PyTorch-sized day.

The fake (tests/fake_github_actions.py) runs in its own process on 127.0.0.1 (a port in
3700-3799), filled from the simulator's world for one day (every configuration, 80 test files of
~115 tests: the freshness benchmark's day); the backfill reads that day, pull requests included,
into a fresh archive, --repeat times. Reported: the median wall time and so days per hour on this
machine, the API requests the day took by kind (blob downloads after GitHub's redirect do not
count against the budget), and that count against the hourly budget of a token (5,000) and of an
App installation (15,000). The same per-object costs are then scaled to PyTorch's volume
(~3,000 workflow runs and ~60,000 jobs a day, as bench_hud assumes) to answer whether a month of
history fits one day of an App installation's budget.

Run as `make bench-backfill` (python bench/bench_backfill.py [--repeat 3]).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing
import os
import resource
import socket
import statistics
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

DAY = dt.date(2026, 10, 1)
SIM = dict(seed=11, configs=36, test_files=80, tests_per_file=115)  # configs: the whole catalog
PYTORCH_RUNS, PYTORCH_JOBS = 3_000, 60_000
TOKEN_BUDGET, APP_BUDGET = 5_000, 15_000


def free_port(first: int = 3700) -> int:
    """A free port among the hundred from `first` (each benchmark its own hundred)."""
    for port in range(first, first + 100):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise SystemExit(f"no free port in {first}-{first + 99}")


def kind(path: str) -> str:
    for pattern, name in (("/_blob/", "blob (not counted)"), ("/logs", "log"), ("/artifacts/", "artifact zip"),
                          ("/artifacts", "artifact list"), ("/jobs", "attempt jobs"), ("/attempts/", "attempt run"),
                          ("/actions/runs", "run list"), ("/compare/", "push commits"), ("/commits", "commits"),
                          ("/activity", "pushes"),
                          ("/pulls", "pulls")):
        if pattern in path:
            return name
    return "repository"


def serve(port: int, ready) -> None:
    from pytest_httpserver import HTTPServer
    from werkzeug import Response

    from fake_github_actions import FakeActions, from_world
    from torchci_assets.simulate.world import Options, World

    import logging
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = HTTPServer(host="127.0.0.1", port=port)
    api = FakeActions(server)
    t = time.perf_counter()
    from_world(api, World(Options(**SIM)), [DAY])
    stats = lambda _r: Response(json.dumps({"requests": [p for p, _ in api.requests],  # noqa: E731
                                            "runs": len(api.runs), "jobs": sum(len(j) for j in api.jobs.values())}))
    server.expect_request("/_stats").respond_with_handler(stats)
    def reset(_request):  # a new hour's budget for each run
        api.requests.clear()
        api.remaining = api.limit
        return Response("ok")
    server.expect_request("/_reset").respond_with_handler(reset)
    server.start()
    ready.put(round(time.perf_counter() - t, 1))
    while True:
        time.sleep(3600)


def fetch(port: int, path: str) -> dict | str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}") as resp:
        body = resp.read()
    return json.loads(body) if path == "/_stats" else body.decode()


def one_backfill(port: int) -> float:
    from resources.github import GitHubResource
    from resources.storage import Store
    from torchci_assets.backfill.history import BackfillOptions, backfill

    fetch(port, "/_reset")
    gh = GitHubResource(api_url=f"http://127.0.0.1:{port}", token="bench")
    with tempfile.TemporaryDirectory(prefix="bench-backfill-") as tmp:
        t = time.perf_counter()
        backfill(gh, Store(tmp), BackfillOptions("pytorch/pytorch", DAY, DAY, prs=True), log=lambda s: None,
                 today=DAY + dt.timedelta(days=30))
        return time.perf_counter() - t


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    port = free_port()
    ready = multiprocessing.get_context("fork").Queue()
    server = multiprocessing.get_context("fork").Process(target=serve, args=(port, ready), daemon=True)
    server.start()
    print(f"building the fake API for a simulated PyTorch-sized day ({SIM}) ...", flush=True)
    print(f"  ready in {ready.get(timeout=3600)} s on port {port}", flush=True)
    times = []
    for i in range(args.repeat):
        times.append(one_backfill(port))
        print(f"  run {i + 1}: {times[-1]:.1f} s (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)",
              flush=True)
    stats = fetch(port, "/_stats")
    server.terminate()
    report(stats, times)
    return 0


def report(stats: dict, times: list[float]) -> None:
    by_kind = Counter(kind(p) for p in stats["requests"])
    api = sum(n for k, n in by_kind.items() if not k.startswith("blob"))
    wall = statistics.median(times)
    print(f"\nsimulated day: {stats['runs']:,} workflow runs, {stats['jobs']:,} jobs")
    print(f"wall time, median of {len(times)}: {wall:.1f} s  ->  {3600 / wall:.0f} days of history per hour "
          "(CPU-bound against a local fake; GitHub's own latency is the bound in practice, see below)")
    print(f"peak memory of the backfilling process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    print("API requests for the day:")
    for k, n in sorted(by_kind.items(), key=lambda kv: -kv[1]):
        print(f"  {k:<20} {n:>7,}")
    print(f"  {'total (counted)':<20} {api:>7,}  = {api / TOKEN_BUDGET:.0%} of a token's hourly budget, "
          f"{api / APP_BUDGET:.0%} of an App installation's")
    per_run = (api - by_kind["artifact zip"] - by_kind["log"]) / stats["runs"]
    per_job = (by_kind["artifact zip"] + by_kind["log"]) / stats["jobs"]
    scaled = PYTORCH_RUNS * per_run + PYTORCH_JOBS * per_job
    no_reports = scaled - PYTORCH_JOBS * by_kind["artifact zip"] / stats["jobs"]
    print(f"\nscaled to PyTorch ({PYTORCH_RUNS:,} runs, {PYTORCH_JOBS:,} jobs a day; {per_run:.2f} requests a run, "
          f"{per_job:.2f} a job):")
    print(f"  {scaled:,.0f} requests a day = {scaled / APP_BUDGET:.1f} hours of an App installation's budget; "
          f"a month: {30 * scaled:,.0f} = {30 * scaled / (24 * APP_BUDGET):.1f} days of it")
    print(f"  without test-report artifacts (one download per test job): {no_reports:,.0f} a day, a month "
          f"= {30 * no_reports / (24 * APP_BUDGET):.1f} days of budget")
    for latency in (0.1, 0.3):
        hours = scaled * latency / 3600
        print(f"  at {latency * 1000:.0f} ms a request, one at a time: {hours:.1f} h per day of history "
              f"({24 / hours:.1f} days of history per day)")


if __name__ == "__main__":
    sys.exit(main())
