"""Relay latency for pull requests, end to end, with `dagster dev` and `torchci serve` running:

1. a signed `pull_request` delivery acknowledged by `torchci serve` -> its repository_dispatch
   received by the GitHub API (the last of the allowlisted downstreams);
2. a downstream's `completed` callback acknowledged by `torchci serve` -> its upstream check run
   received by the GitHub API.

Target (issue 25): p95 <= 15 s for both, over at least 50 events.

The GitHub API is a small fake on 127.0.0.1 (answers 204 to dispatches and 201 to check runs,
and records when each arrived), so the relay really sends (a dummy GITHUB_TOKEN, GITHUB_API_URL
pointing at the fake). The callbacks are signed by a bench OIDC issuer whose keys the receiver
reads from TORCHCI_OIDC_JWKS_URL. The allowlist has one L2 and one L4 downstream; for every
dispatch to the L4 one, the bench plays its workflow: an `in_progress` callback, then a
`completed` one a second later, echoing the dispatch's client_payload as report_callback.py does.

Where the time goes: acknowledged -> in the archive (the receiver's roll: the archive file's
time), archive -> the first write claimed in the ledger (waiting for a sensor tick, and for the
writes before it in that tick), first claim -> GitHub's receipt (the sends: claim, settle,
GitHub's one write a second); who sent it (a sensor tick or a run, from the ledger's run ids);
and how far apart the sensors' ticks started (the instance's tick history).

Run as `make bench-relay-latency` (with the push benchmark). Servers use ports 3400-3499 (or
BENCH_PORTS=first-last) on 127.0.0.1 only; everything started is stopped and
./var/bench-relay-prs removed at the end.
"""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import hmac
import http.server
import json
import os
import random
import shutil
import signal
import statistics
import sys
import threading
import time
import urllib.request
import uuid
from collections import Counter
from pathlib import Path

from bench_serve import AUDIENCE, ISSUER, Issuer, b64url, serve_jwks
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding
from relay_servers import fresh_instance, port_in_range, sensor_cursors, start, stop, wait_for, wait_until_up

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "var" / "bench-relay-prs"
SECRET = b"bench-secret"
EVENTS = 50
# Each event makes four GitHub writes (two dispatches, two check runs): 0.5-4 s apart is about
# 107 writes a minute, more than the 80 content-creating requests a minute GitHub allows an App,
# so a burst harder than GitHub would take; 1-6 s apart (69 a minute) is within it.
SPACING = (0.5, 4.0)
TARGET_P95_S = 15.0
L2, L4 = "fabrikam/torch-dpu", "big-co/torch-gpu"


class FakeGitHub(http.server.BaseHTTPRequestHandler):
    """Records when each dispatch and check run arrived; never fails."""

    dispatches: dict[tuple[str, str], tuple[float, dict]] = {}  # (delivery, repo) -> (time, client_payload)
    check_runs: dict[tuple[str, str], float] = {}  # (head sha, status) -> time
    received: Counter = Counter()  # every write, by its key: more than one is a write sent twice
    lock = threading.Lock()
    on_dispatch = None

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        now = time.time()
        if self.path.endswith("/dispatches"):
            repo = self.path[len("/repos/"):-len("/dispatches")]
            with self.lock:
                self.dispatches.setdefault((body["client_payload"]["delivery_id"], repo), (now, body["client_payload"]))
                self.received[("dispatch", body["client_payload"]["delivery_id"], repo)] += 1
            self._answer(204, None)
            if repo == L4 and FakeGitHub.on_dispatch:
                FakeGitHub.on_dispatch(body["client_payload"])
        elif self.path.endswith("/check-runs"):
            with self.lock:
                self.check_runs.setdefault((body["head_sha"], body["status"]), now)
                self.received[("check run", body["head_sha"], body["status"])] += 1
            self._answer(201, {"id": len(self.check_runs), **body})
        else:
            self._answer(404, {"message": "Not Found"})

    def do_GET(self):  # noqa: N802
        self._answer(200, {"total_count": 0, "check_runs": []})

    def _answer(self, status: int, body) -> None:
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def token(issuer: Issuer, repo: str) -> str:
    now = int(time.time())
    header = b64url(json.dumps({"typ": "JWT", "alg": "RS256", "kid": "bench"}).encode())
    claims = b64url(json.dumps({"iss": ISSUER, "aud": AUDIENCE, "repository": repo, "jti": uuid.uuid4().hex,
                                "iat": now, "nbf": now, "exp": now + 3600}).encode())
    signature = issuer.key.sign(f"{header}.{claims}".encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{header}.{claims}.{b64url(signature)}"


def pr_body(i: int) -> tuple[bytes, str]:
    examples = json.loads((ROOT / "tests/data/octokit/examples.json").read_text())["api.github.com"]["pull_request"]
    payload = json.loads(json.dumps(next(p for p in examples if p["action"] == "synchronize")))
    sha = hashlib.sha1(f"pr-head-{i}-{uuid.uuid4()}".encode()).hexdigest()
    payload["repository"] = {**payload["repository"], "full_name": "pytorch/pytorch"}
    payload["pull_request"]["head"]["sha"] = sha
    payload["pull_request"]["number"] = 1000 + i
    return json.dumps(payload).encode(), sha


def post(url: str, body: bytes, headers: dict) -> float:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json", **headers})
    with urllib.request.urlopen(request, timeout=30) as resp:
        assert resp.status == 200, resp.status
    return time.time()


def callback(client_payload: dict, status: str, run_id: int) -> bytes:
    """The body report_callback.py builds for a job started by our dispatch."""
    now = dt.datetime.now(dt.timezone.utc).isoformat().replace("+00:00", "Z")
    return json.dumps({**client_payload, "workflow": {
        "schema_version": "1", "status": status, "conclusion": "success" if status == "completed" else None,
        "name": "gpu-upstream-ci", "url": f"https://github.com/{L4}/actions/runs/{run_id}", "run_id": str(run_id),
        "run_attempt": "1", "job_name": "test", "check_run_id": str(run_id),
        "started_at": now if status == "in_progress" else None,
        "completed_at": now if status == "completed" else None}}).encode()


def percentiles(xs: list[float]) -> str:
    xs = sorted(xs)
    p95 = xs[min(len(xs) - 1, int(0.95 * len(xs)))]
    return (f"n {len(xs)}  min {xs[0]:.1f}s  p50 {statistics.median(xs):.1f}s  p95 {p95:.1f}s  "
            f"max {xs[-1]:.1f}s")


def p95(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(0.95 * len(xs)))]


def play_downstream(serve_port: int, issuer: Issuer, completed_acks: dict, errors: list):
    """For each L4 dispatch: in_progress, then completed a second later (in their own threads)."""
    runs = iter(range(50_000, 10**9))

    def job(client_payload: dict) -> None:
        run_id, sha = next(runs), client_payload["payload"]["pull_request"]["head"]["sha"]
        url = f"http://127.0.0.1:{serve_port}/relay/callback"
        try:
            post(url, callback(client_payload, "in_progress", run_id), {"Authorization": f"Bearer {token(issuer, L4)}"})
            time.sleep(1.0)
            completed_acks[sha] = post(url, callback(client_payload, "completed", run_id),
                                       {"Authorization": f"Bearer {token(issuer, L4)}"})
        except Exception as exc:  # reported at the end: a refused callback is a finding
            errors.append(f"{sha[:12]}: {exc}")

    return lambda cp: threading.Thread(target=job, args=(cp,), daemon=True).start()


def rolled_at(stream: str, key_of) -> dict[str, float]:
    """When each record reached the archive (its file's modification time), by `key_of(record)`."""
    out: dict[str, float] = {}
    for path in (WORK / "archive" / stream).glob("day=*/*.jsonl.gz"):
        with gzip.open(path, "rt") as lines:
            for line in lines:
                key = key_of(json.loads(line))
                if key:
                    out.setdefault(key, path.stat().st_mtime)
    return out


def ticks_of(instance, sensor: str) -> list:
    state = next(s for s in instance.all_instigator_state() if s.name == sensor)
    return sorted(instance.get_ticks(state.instigator_origin_id, state.selector_id, limit=10_000),
                  key=lambda t: t.timestamp)


def first_claims(table: str, key_of) -> dict[str, tuple[float, str]]:
    """Event -> (when its first write was claimed, by whom: a sensor tick or a run), from the ledger."""
    import pyarrow.dataset as ds

    rows = ds.dataset(str(WORK / "lake" / table), format="parquet", partitioning="hive").to_table().to_pylist()
    out: dict[str, tuple[float, str]] = {}
    for row in sorted(rows, key=lambda r: r["attempted_at"]):
        key = key_of(row)
        if row["outcome"] == "claimed" and key and key not in out:
            out[key] = (row["attempted_at"].timestamp(), "tick" if "_sensor@" in row["run_id"] else "run")
    return out


def breakdown(acks: dict[str, float], rolled: dict[str, float], claims: dict[str, tuple[float, str]],
              github: dict[str, float]) -> dict[str, str]:
    """p50 and p95 of each stage: the receiver's roll into the archive, waiting for a sensor tick
    (and for the writes before it in that tick), and the sends themselves (claim, settle, pacing)."""
    parts: dict[str, list[float]] = {"ack -> in the archive": [], "archive -> first write claimed": [],
                                     "first claim -> GitHub received": []}
    for key, ack in acks.items():
        if key in rolled and key in claims and key in github:
            parts["ack -> in the archive"].append(rolled[key] - ack)
            parts["archive -> first write claimed"].append(claims[key][0] - rolled[key])
            parts["first claim -> GitHub received"].append(github[key] - claims[key][0])
    out = {k: f"p50 {statistics.median(v):.1f}s p95 {p95(v):.1f}s" for k, v in parts.items() if v}
    by = [claims[k][1] for k in acks if k in claims]
    out["sent by"] = f"a sensor tick {by.count('tick')}, a run {by.count('run')}, of {len(acks)}"
    return out


def tick_spacing(instance, sensor: str) -> str:
    ticks = ticks_of(instance, sensor)
    starts = [t.timestamp for t in ticks]
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    statuses = Counter(t.status.value.lower() for t in ticks)
    return (f"{sensor}: {len(starts)} ticks ({', '.join(f'{n} {k}' for k, n in sorted(statuses.items()))}), "
            f"starts p50 {statistics.median(gaps):.1f}s p95 {p95(gaps):.1f}s apart")


def callback_key(record: dict) -> str | None:
    body = (record.get("untrusted") or {}).get("callback_payload") or {}
    if (body.get("workflow") or {}).get("status") != "completed":
        return None
    return body["payload"]["pull_request"]["head"]["sha"]


def environment(github_port: int, jwks_url: str) -> dict:
    """What `dagster dev` and `torchci serve` run with: this bench's folders, allowlist, fake
    GitHub (a dummy token, so the relay really sends) and OIDC issuer."""
    config = WORK / "relay.yaml"
    config.write_text(f"upstream: {{repo: pytorch/pytorch, branches: [main]}}\npoll_commits: false\n"
                      f"allowlist:\n  L2: [{L2}]\n  L4:\n    - {L4}: gpu-oncall\nmaintainer_approved: [{L4}]\n")
    env = {**os.environ, "DAGSTER_HOME": str(WORK / "dagster"), "TORCHCI_ARCHIVE_URI": str(WORK / "archive"),
           "TORCHCI_LAKE_URI": str(WORK / "lake"), "TORCHCI_OUTPUTS_URI": str(WORK / "outputs"),
           "TORCHCI_SPOOL_DIR": str(WORK / "spool"), "TORCHCI_WEBHOOK_SECRETS": SECRET.decode(),
           "TORCHCI_CONFIG": str(config), "TORCHCI_OIDC_JWKS_URL": jwks_url,
           "GITHUB_TOKEN": "bench-not-a-token", "GITHUB_API_URL": f"http://127.0.0.1:{github_port}"}
    for name in ("GITHUB_APP_ID", "GITHUB_APP_PRIVATE_KEY", "GITHUB_APP_INSTALLATION_ID"):
        env.pop(name, None)
    return env


def spacing() -> tuple[float, float]:
    """Seconds between two deliveries, drawn uniformly (BENCH_PR_SPACING=low-high to change)."""
    low, _, high = os.environ.get("BENCH_PR_SPACING", f"{SPACING[0]}-{SPACING[1]}").partition("-")
    return float(low), float(high)


def deliver_events(serve_port: int) -> dict[str, float]:
    """EVENTS signed pull_request deliveries, spaced as `spacing()`; when each was acknowledged."""
    seed = int(time.time())
    rng = random.Random(seed)
    low, high = spacing()
    print(f"delivering {EVENTS} pull_request events {low:g}-{high:g} s apart (mean {(low + high) / 2:g} s: "
          f"{4 * 60 / ((low + high) / 2):.0f} GitHub writes a minute), spaced with seed {seed}", flush=True)
    acks: dict[str, float] = {}
    for i in range(EVENTS):
        body, _sha = pr_body(i)
        delivery = str(uuid.uuid4())
        acks[delivery] = post(f"http://127.0.0.1:{serve_port}/github/webhook", body, {
            "X-GitHub-Event": "pull_request", "X-GitHub-Delivery": delivery,
            "X-Hub-Signature-256": "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest()})
        time.sleep(rng.uniform(low, high))
    return acks


def report(dispatch_s: list[float], where_dispatch: dict, check_s: list[float], where_check: dict,
           spacing: list[str], errors: list[str]) -> bool:
    print()
    print(f"pull_request delivery acknowledged -> dispatch received by GitHub (the last of 2 downstreams), "
          f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC:")
    print(f"  {percentiles(dispatch_s)}")
    for stage, figure in where_dispatch.items():
        print(f"    {stage:<34} {figure}")
    print("completed callback acknowledged -> upstream check run received by GitHub:")
    print(f"  {percentiles(check_s)}")
    for stage, figure in where_check.items():
        print(f"    {stage:<34} {figure}")
    for line in spacing:
        print(f"  {line}")
    print(f"  callbacks refused: {len(errors)}" + (f" ({errors[:3]})" if errors else ""))
    twice = sum(n > 1 for n in FakeGitHub.received.values())
    print(f"  writes GitHub received more than once: {twice} of {len(FakeGitHub.received)}")
    ok = p95(dispatch_s) <= TARGET_P95_S and p95(check_s) <= TARGET_P95_S and not errors and not twice
    print(f"target p95 <= {TARGET_P95_S:g}s for both: {'met' if ok else 'NOT met'}; "
          f"load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    return ok


def main() -> int:
    # A TERM (make interrupted, a timeout) still stops what this script started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(f"stopped by SIGTERM; see {WORK}"))
    fresh_instance(WORK)
    ports: set[int] = set()
    github_port, jwks_port = port_in_range(ports), port_in_range(ports)
    github = http.server.ThreadingHTTPServer(("127.0.0.1", github_port), FakeGitHub)
    threading.Thread(target=github.serve_forever, daemon=True).start()
    issuer = Issuer()
    jwks, jwks_url = serve_jwks(issuer, port=jwks_port)
    env = environment(github_port, jwks_url)
    os.environ["DAGSTER_HOME"] = env["DAGSTER_HOME"]
    procs, logs, ui_port, serve_port = start(env, WORK, ports)
    completed_acks: dict[str, float] = {}
    errors: list[str] = []
    FakeGitHub.on_dispatch = play_downstream(serve_port, issuer, completed_acks, errors)
    try:
        from dagster import DagsterInstance

        wait_until_up(ui_port, serve_port)
        instance = DagsterInstance.get()
        t = time.monotonic()
        wait_for("the relay sensors' first ticks",
                 lambda: {"pull_request_sensor", "check_run_sensor"} <= set(sensor_cursors(instance)), 240)
        print(f"dagster dev and torchci serve up; the sensors' first ticks seen after {time.monotonic() - t:.0f}s",
              flush=True)
        acks = deliver_events(serve_port)
        wait_for("every dispatch", lambda: len(FakeGitHub.dispatches) >= 2 * EVENTS, 900, every=1.0)
        wait_for("every completed check run", lambda: sum(s == "completed" for _, s in FakeGitHub.check_runs)
                 + len(errors) >= EVENTS, 900, every=1.0)
        sent = {d: max(FakeGitHub.dispatches[(d, r)][0] for r in (L2, L4)) for d in acks}
        created = {sha: at for (sha, status), at in FakeGitHub.check_runs.items() if status == "completed"}
        dispatch_s = [sent[d] - ack for d, ack in acks.items()]
        check_s = [created[sha] - at for sha, at in completed_acks.items() if sha in created]
        where_dispatch = breakdown(acks, rolled_at("webhooks", lambda r: r.get("delivery_id")),
                                   first_claims("dispatches", lambda r: r["delivery_id"]), sent)
        completed = first_claims("relay_actions", lambda r: r["sha"] if r["status"] == "completed" else None)
        where_check = breakdown(completed_acks, rolled_at("ci-results", callback_key), completed, created)
        spacing = [tick_spacing(instance, s) for s in ("pull_request_sensor", "check_run_sensor")]
    finally:
        stop(procs, logs)
        github.shutdown()
        jwks.shutdown()
    ok = report(dispatch_s, where_dispatch, check_s, where_check, spacing, errors)
    shutil.rmtree(WORK, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
