"""Relay latency end to end: a push delivered to `torchci serve` -> its `dispatch_job` run.

Target (issue 11): with `make dev` and `torchci serve` running, a push must produce its
dispatch_job run within 30 s at p95.

This starts both, exactly as a user would (`dagster dev -w workspace.yaml` with the daemon, and
`torchci serve`), on a fresh instance and archive under ./var/bench-relay, waits for the
upstream_commit_sensor's first tick, then delivers PUSHES signed pushes to pytorch/pytorch main
(new head commits, a random 2-12 s apart so they land at every point of the sensor's 15 s
interval) and reads from the Dagster instance when each push's run was created (run tag
`torchci/sha`). Latency = run creation - the receiver's acknowledgement of the push.

The path: the receiver recognises a push the relay follows (the config's upstream repository and
branches) and seals its spool segment within TORCHCI_PUSH_ROLL_S (1 s) instead of the 60 s roll;
the roller publishes it to webhooks/day=D/; the sensor, ticking every 15 s, lists the newest day
folders and reads only files it has not read. So the expected latency is ~1 s + up to 15 s +
the tick's own time. No GitHub credentials: the runs are dry runs.

Run as `make bench-relay-latency` (about 5 minutes). Only 127.0.0.1 is contacted, on ports 3400-3499
(or BENCH_PORTS=first-last). Everything it
started is stopped, and ./var/bench-relay removed, at the end.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import os
import random
import shutil
import statistics
import sys
import time
import urllib.request
import uuid
from pathlib import Path

from relay_servers import fresh_instance, sensor_cursors, start, stop, wait_for, wait_until_up

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "var" / "bench-relay"
SECRET = b"bench-secret"
PUSHES = 20
TARGET_P95_S = 30.0


def push_body(sha: str, before: str) -> bytes:
    examples = json.loads((ROOT / "tests/data/octokit/examples.json").read_text())["api.github.com"]["push"]
    payload = dict(examples[0])
    payload.update(ref="refs/heads/main", before=before, after=sha, created=False, deleted=False, forced=False,
                   repository={**payload["repository"], "full_name": "pytorch/pytorch", "name": "pytorch"},
                   head_commit={**(payload.get("head_commit") or {}), "id": sha})
    return json.dumps(payload).encode()


def deliver(port: int, body: bytes) -> float:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/github/webhook", data=body, headers={
        "X-GitHub-Event": "push", "X-GitHub-Delivery": str(uuid.uuid4()), "Content-Type": "application/json",
        "X-Hub-Signature-256": "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest()})
    with urllib.request.urlopen(request, timeout=10) as resp:
        assert resp.status == 200, resp.status
    return time.time()


def main() -> int:
    fresh_instance(WORK)
    env = {**os.environ, "DAGSTER_HOME": str(WORK / "dagster"), "TORCHCI_ARCHIVE_URI": str(WORK / "archive"),
           "TORCHCI_LAKE_URI": str(WORK / "lake"), "TORCHCI_OUTPUTS_URI": str(WORK / "outputs"),
           "TORCHCI_SPOOL_DIR": str(WORK / "spool"), "TORCHCI_WEBHOOK_SECRETS": SECRET.decode()}
    for name in ("GITHUB_TOKEN", "GITHUB_APP_ID", "GITHUB_APP_PRIVATE_KEY", "GITHUB_APP_INSTALLATION_ID"):
        env.pop(name, None)  # dry run: nothing is sent to GitHub
    os.environ.update({k: env[k] for k in ("DAGSTER_HOME",)})
    procs, logs, ui_port, serve_port = start(env, WORK, set())
    try:
        from dagster import DagsterInstance, RunsFilter

        wait_until_up(ui_port, serve_port)
        instance = DagsterInstance.get()

        t = time.monotonic()
        wait_for("the relay sensor's first tick", lambda: "upstream_commit_sensor" in sensor_cursors(instance), 180)
        print(f"dagster dev and torchci serve up; the sensor's first tick seen after {time.monotonic() - t:.0f}s",
              flush=True)
        seed = int(time.time())  # a new seed each run: the pushes land at other points of the tick cycle
        rng = random.Random(seed)
        print(f"spacing the pushes with seed {seed}", flush=True)
        sent: dict[str, float] = {}
        before = hashlib.sha1(b"start").hexdigest()
        for i in range(PUSHES):
            sha = hashlib.sha1(f"push-{i}-{uuid.uuid4()}".encode()).hexdigest()
            sent[sha] = deliver(serve_port, push_body(sha, before))
            before = sha
            print(f"  push {i + 1}/{PUSHES} {sha[:12]} delivered", flush=True)
            time.sleep(rng.uniform(2.0, 12.0))

        def created() -> dict[str, float]:
            out = {}
            for sha in sent:
                records = instance.get_run_records(RunsFilter(tags={"torchci/sha": sha}), limit=1)
                if records:
                    out[sha] = records[0].create_timestamp.timestamp()
            return out

        def all_created() -> dict[str, float] | None:
            found = created()
            return found if len(found) == len(sent) else None

        runs = wait_for(f"{PUSHES} dispatch_job runs", all_created, 120, every=1.0)
        latencies = sorted(runs[sha] - sent[sha] for sha in sent)
        one_run_each = all(len(instance.get_run_records(RunsFilter(tags={"torchci/sha": sha}))) == 1 for sha in sent)
    finally:
        stop(procs, logs)
    p95 = latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))]
    print()
    print(f"push acknowledged -> dispatch_job run created, {len(latencies)} pushes "
          f"({dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC):")
    print(f"  min {latencies[0]:.1f}s  p50 {statistics.median(latencies):.1f}s  p95 {p95:.1f}s  "
          f"max {latencies[-1]:.1f}s  mean {statistics.mean(latencies):.1f}s")
    print(f"  every latency (s): {', '.join(f'{x:.1f}' for x in latencies)}")
    print(f"  one run per push: {one_run_each}")
    ok = p95 <= TARGET_P95_S and one_run_each
    print(f"target p95 <= {TARGET_P95_S:g}s: {'met' if ok else 'NOT met'}")
    shutil.rmtree(WORK, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
