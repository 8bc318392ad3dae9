"""Benchmark `torchci serve`: signed 10 KB webhooks and OIDC-verified callbacks, acknowledged after fsync.

Targets (issue 11, on 2 cores): at least 2,000 webhook deliveries/s sustained with p99
acknowledgement latency <= 50 ms, and at least 500 verified callbacks/s; both reported with the
fsync cost.

The receiver is the real command (`torchci serve`, a separate process) with its default roll
settings; the load comes from this process, over keep-alive connections to 127.0.0.1 only, on the
same 2 cores. Each phase is a bounded loop:
- open loop: deliveries are scheduled at a fixed rate and each latency is measured from its
  scheduled time, so a stalled server is charged for the requests waiting behind it
  (no coordinated omission);
- closed loop: as fast as N connections go, for the ceiling.
Webhook bodies are the real 10 KB `workflow_job` example of @octokit/webhooks-examples (with a
per-delivery marker), signed like GitHub signs them. Callback bodies have the shape
report_callback.py sends; each carries a distinct RS256 token from a throwaway issuer whose key set
a local HTTP server serves, and names a commit the `dispatches` ledger holds. One repository
sends them all, so its rate limit is lifted for the run.

The fsync cost is read from the receiver's own /metrics (write + fdatasync per group of
records), next to the cost of one fdatasync per 10 KB record measured on the same disk: what
acknowledging each delivery on its own would cost.

Under attack: the webhook open loop again at 200/s, first alone, then while 40 clients each send a 24 MiB body with a made-up
signature and withhold its last byte, and 200 send their headers one byte a second (slowloris),
every one reconnecting as soon as the receiver closes it (from another process). Reported: the signed deliveries' latency,
the receiver's largest RSS during the phase (sampled every 100 ms from /proc) and what it closed.

Run as `make bench-serve`; it keeps nothing (its folders under ./var/bench-serve are removed).
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import hashlib
import hmac
import http.server
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from slow_clients import slowloris, withheld_body  # noqa: E402  (the tests' hostile clients)

WORK = ROOT / "var" / "bench-serve"
TORCHCI = str(Path(sys.executable).parent / "torchci")
SECRET = b"bench-secret"
REPO = "acme-ai/torch-npu"
AUDIENCE = "pytorch-cross-repo-ci-relay"
ISSUER = "https://token.actions.githubusercontent.com"

WEBHOOK_RATE, WEBHOOK_SECONDS = 2000, 15
CALLBACK_RATE, CALLBACK_SECONDS = 500, 10
CLOSED_SECONDS, CONNECTIONS = 8, 32
TOKENS = 600
ATTACK_BODIES, ATTACK_BODY_BYTES, SLOWLORIS = 40, 24 << 20, 200
ATTACK_RATE = 200  # signed deliveries a second during the attack: the latency of a busy day, not a ceiling
ATTACK_ONLY = "--attack-only" in sys.argv  # skip the other phases (for repeated runs of the attack)
TARGETS = {"webhooks_per_s": 2000, "webhook_p99_ms": 50.0, "callbacks_per_s": 500}


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- the load -----------------------------------------------------------------------------


class Phase:
    def __init__(self, name: str):
        self.name = name
        self.latencies: list[float] = []
        self.codes: dict[int, int] = {}
        self.acked: list[str] = []
        self.started = self.ended = 0.0
        self.server_p99 = self.server_lag = "-"
        self.client_lag = 0.0
        self.refused: dict[str, int] = {}

    def summary(self) -> dict:
        lat = sorted(self.latencies)
        q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1000 if lat else float("nan")  # noqa: E731
        ok = self.codes.get(200, 0)
        return {"phase": self.name, "sent": len(lat), "ok": ok, "codes": self.codes,
                "seconds": round(self.ended - self.started, 2), "ok_per_s": round(ok / (self.ended - self.started), 1),
                "p50_ms": round(q(0.50), 2), "p95_ms": round(q(0.95), 2), "p99_ms": round(q(0.99), 2),
                "max_ms": round(lat[-1] * 1000, 2) if lat else None}


async def _read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    m = re.search(rb"(?i)content-length:\s*(\d+)", head)
    await reader.readexactly(int(m.group(1)) if m else 0)
    return status


async def _connection(port: int, next_job, phase: Phase) -> None:
    """One keep-alive connection sending `await next_job()` -> (timed from, request, delivery)
    until it returns None."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while (job := await next_job()) is not None:
            since, request, delivery = job
            writer.write(request)
            status = await _read_response(reader)
            phase.latencies.append(time.perf_counter() - since)
            phase.codes[status] = phase.codes.get(status, 0) + 1
            if status == 200:
                phase.acked.append(delivery)
    finally:
        writer.close()


async def open_loop(port: int, make_request, rate: int, seconds: float, name: str) -> Phase:
    """`rate` requests a second for `seconds`, each timed from when it was due."""
    phase, jobs = Phase(name), asyncio.Queue()
    workers = [asyncio.create_task(_connection(port, jobs.get, phase)) for _ in range(CONNECTIONS)]
    total = int(rate * seconds)
    phase.started = start = time.perf_counter()
    for i in range(total):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        elif i % 16 == 0:
            await asyncio.sleep(0)  # behind schedule: still let the connections run
        jobs.put_nowait((due, *make_request(i)))
    for _ in workers:
        jobs.put_nowait(None)
    await asyncio.gather(*workers)
    phase.ended = time.perf_counter()
    return phase


async def closed_loop(port: int, make_request, seconds: float, name: str) -> Phase:
    """Every connection sends its next request as soon as the last is answered, for `seconds`."""
    phase = Phase(name)
    deadline = time.perf_counter() + seconds
    counter = iter(range(10**9))

    async def next_job():
        now = time.perf_counter()
        return (now, *make_request(next(counter))) if now < deadline else None

    phase.started = time.perf_counter()
    await asyncio.gather(*(_connection(port, next_job, phase) for _ in range(CONNECTIONS)))
    phase.ended = time.perf_counter()
    return phase


async def attackers(port: int, until: float) -> dict[str, int]:
    """The attack's clients, each reconnecting when closed, until `until`; how their connections ended."""
    ended: dict[str, int] = {}

    async def again(attack) -> None:
        while time.perf_counter() < until:
            try:
                outcome = await attack()
            except OSError:
                outcome = None
            key = "refused to connect" if outcome is None else str(outcome.status)
            ended[key] = ended.get(key, 0) + 1

    await asyncio.gather(*(again(lambda: withheld_body(port, ATTACK_BODY_BYTES, give_up_s=60))
                           for _ in range(ATTACK_BODIES)),
                         *(again(lambda: slowloris(port, every_s=1.0, give_up_s=60)) for _ in range(SLOWLORIS)))
    return ended


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024 / 1e6
    return float("nan")


def attacker_main(port: int, seconds: float) -> int:
    """`bench_serve.py --attacker PORT SECONDS`: the attack in its own process, so its clients do
    not stall the event loop timing the signed deliveries; prints how the connections ended."""
    ended = asyncio.run(attackers(port, time.perf_counter() + seconds))
    print(json.dumps(ended))
    return 0


async def under_attack(port: int, make_request, pid: int, name: str) -> Phase:
    """The webhook open loop while the attack runs; the receiver's RSS sampled throughout."""
    rss = [rss_mb(pid)]

    async def sample() -> None:
        while True:
            rss.append(rss_mb(pid))
            await asyncio.sleep(0.1)

    sampler = asyncio.create_task(sample())
    attack = await asyncio.create_subprocess_exec(sys.executable, __file__, "--attacker", str(port),
                                                  str(WEBHOOK_SECONDS + 2.0), stdout=asyncio.subprocess.PIPE)
    await asyncio.sleep(2.0)  # the attack is established
    phase = await open_loop(port, make_request, ATTACK_RATE, WEBHOOK_SECONDS, name)
    out, _ = await attack.communicate()
    phase.attack_ended = json.loads(out)
    await asyncio.sleep(1.0)
    sampler.cancel()
    phase.rss = (rss[0], max(rss), rss[-1])
    return phase


# ---- the inputs ---------------------------------------------------------------------------


def webhook_requests(port: int):
    examples = json.loads((ROOT / "tests/data/octokit/examples.json").read_text())["api.github.com"]["workflow_job"]
    base = max(examples, key=lambda p: len(json.dumps(p)))  # the 10 KB `completed` example
    bodies = []
    for i in range(64):  # signed once each; every request gets its own delivery id
        body = json.dumps({**base, "bench_marker": i}).encode()
        bodies.append((body, "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest()))
    size = statistics.mean(len(b) for b, _ in bodies)

    def make(i: int) -> tuple[bytes, str]:
        body, signature = bodies[i % len(bodies)]
        delivery = str(uuid.UUID(int=i + (1 << 64)))
        head = (f"POST /github/webhook HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: GitHub-Hookshot/bench\r\n"
                f"Content-Type: application/json\r\nX-GitHub-Event: workflow_job\r\nX-GitHub-Delivery: {delivery}\r\n"
                f"X-Hub-Signature-256: {signature}\r\nContent-Length: {len(body)}\r\n\r\n").encode()
        return head + body, delivery

    return make, size


class Issuer:
    def __init__(self):
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        n = self.key.public_key().public_numbers().n
        self.jwks = {"keys": [{"kty": "RSA", "alg": "RS256", "use": "sig", "kid": "bench",
                               "n": b64url(n.to_bytes(256, "big")), "e": b64url((65537).to_bytes(3, "big"))}]}

    def token(self, i: int) -> str:
        now = int(time.time())
        header = b64url(json.dumps({"typ": "JWT", "alg": "RS256", "kid": "bench"}).encode())
        claims = b64url(json.dumps({"iss": ISSUER, "aud": AUDIENCE, "repository": REPO, "run_id": str(i),
                                    "jti": uuid.uuid4().hex, "iat": now, "nbf": now, "exp": now + 3600}).encode())
        signature = self.key.sign(f"{header}.{claims}".encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{header}.{claims}.{b64url(signature)}"


def serve_jwks(issuer: Issuer, port: int = 0) -> tuple[http.server.HTTPServer, str]:
    body = json.dumps(issuer.jwks).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/.well-known/jwks"


def write_dispatches(lake_uri: str, shas: list[str]) -> None:
    from resources.lake import Lake
    from torchci_assets.relay.dispatch import record_attempt

    lake = Lake.at(lake_uri)
    for sha in shas:
        record_attempt(lake, {
            "sha": sha, "upstream_repo": "pytorch/pytorch", "downstream_repo": REPO, "level": "L2",
            "event_type": "push", "delivery_id": f"delivery-{sha[:8]}", "source": "webhook",
            "attempted_at": dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=3), "status_code": 204,
            "outcome": "ok", "error": "", "http_attempts": 1, "waited_s": 0.0, "run_id": "bench"})


def callback_requests(port: int, tokens: list[str], shas: list[str]):
    def make(i: int) -> tuple[bytes, str]:
        sha = shas[i % len(shas)]
        status = "in_progress" if i % 2 == 0 else "completed"
        now = dt.datetime.now(dt.timezone.utc).isoformat().replace("+00:00", "Z")
        body = json.dumps({
            "event_type": "push", "delivery_id": f"delivery-{sha[:8]}", "sha": sha,
            "payload": {"ref": "refs/heads/main", "after": sha, "repository": {"full_name": "pytorch/pytorch"}},
            "workflow": {"schema_version": "1", "status": status,
                         "conclusion": "success" if status == "completed" else None, "name": "npu-upstream-ci",
                         "url": f"https://github.com/{REPO}/actions/runs/{1000 + i // 2}",
                         "run_attempt": "1", "job_name": "test", "check_run_id": f"{1000 + i // 2}-1",
                         "run_id": str(1000 + i // 2), "started_at": now if status == "in_progress" else None,
                         "completed_at": now if status == "completed" else None,
                         **({"test_results": {"passed": 120, "failed": 0, "skipped": 4}} if status == "completed" else {})},
        }).encode()
        head = (f"POST /relay/callback HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
                f"Authorization: Bearer {tokens[i % len(tokens)]}\r\nContent-Length: {len(body)}\r\n\r\n").encode()
        return head + body, f"cb-{i}"

    return make


# ---- the receiver and its numbers -----------------------------------------------------------


def metrics(port: int) -> dict[str, float]:
    import urllib.request
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def refusals(before: dict, after: dict) -> dict:
    """Refused requests of the phase by reason, from the receiver's counters."""
    out = {}
    for key, value in after.items():
        if key.startswith("torchci_receiver_rejected_total") and value - before.get(key, 0.0):
            out[re.search(r'reason="([^"]+)"', key).group(1)] = int(value - before.get(key, 0.0))
    return out


def server_ack_p99(before: dict, after: dict, endpoint: str) -> str:
    """The receiver's own p99 answer time for the phase (bucket upper bound)."""
    prefix = f'torchci_receiver_ack_seconds_bucket{{endpoint="{endpoint}",le="'
    buckets = sorted((float(k[len(prefix):-2]), v - before.get(k, 0.0)) for k, v in after.items()
                     if k.startswith(prefix) and not k.endswith('+Inf"}'))
    total = after.get(f'torchci_receiver_ack_seconds_count{{endpoint="{endpoint}"}}', 0.0) - before.get(
        f'torchci_receiver_ack_seconds_count{{endpoint="{endpoint}"}}', 0.0)
    for bound, count in buckets:
        if total and count >= 0.99 * total:
            return f"<= {bound * 1000:g} ms"
    return "> 10 s" if total else "-"


def lag_max(before: dict, after: dict) -> str:
    """The largest event-loop lag bucket the receiver saw during the phase."""
    prefix = 'torchci_receiver_loop_lag_seconds_bucket{le="'
    total = after.get("torchci_receiver_loop_lag_seconds_count", 0) - before.get("torchci_receiver_loop_lag_seconds_count", 0)
    for key in sorted((k for k in after if k.startswith(prefix) and "+Inf" not in k), key=lambda k: float(k[len(prefix):-2])):
        if after[key] - before.get(key, 0) >= total:
            return f"<= {float(key[len(prefix):-2]) * 1000:g} ms"
    return "> 10 s"


def fsync_summary(before: dict, after: dict) -> dict:
    d = lambda k: after.get(k, 0.0) - before.get(k, 0.0)  # noqa: E731
    count, total = d("torchci_receiver_fsync_seconds_count"), d("torchci_receiver_fsync_seconds_sum")
    records = d("torchci_receiver_fsync_batch_records_sum")
    p99 = None
    for le in ("0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5"):
        if count and d(f'torchci_receiver_fsync_seconds_bucket{{le="{le}"}}') >= 0.99 * count:
            p99 = f"<= {float(le) * 1000:g} ms"
            break
    return {"fsyncs": int(count), "records_per_fsync": round(records / count, 1) if count else None,
            "mean_fsync_ms": round(total / count * 1000, 3) if count else None, "p99_fsync": p99,
            "fsync_busy_s": round(total, 2)}


def fsync_per_record(folder: Path, n: int = 300, size: int = 10_000) -> dict:
    """One write + fdatasync per 10 KB record, on the spool's disk: acknowledging without group commit."""
    path = folder / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    data, times = b"x" * (size - 1) + b"\n", []
    try:
        for _ in range(n):
            t = time.perf_counter()
            os.write(fd, data)
            os.fdatasync(fd)
            times.append(time.perf_counter() - t)
    finally:
        os.close(fd)
        path.unlink()
    times.sort()
    mean = statistics.mean(times)
    return {"mean_ms": round(mean * 1000, 3), "p99_ms": round(times[int(0.99 * n)] * 1000, 3),
            "max_records_per_s": round(1 / mean)}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def archived_deliveries(archive: Path) -> set[str]:
    import gzip
    found = set()
    for path in archive.glob("webhooks/day=*/*.jsonl.gz"):
        for line in gzip.decompress(path.read_bytes()).splitlines():
            found.add(json.loads(line)["delivery_id"])
    return found


def print_attack(phase: Phase) -> None:
    print(f"attack: {ATTACK_BODIES} clients withholding the last byte of {ATTACK_BODY_BYTES >> 20} MiB bodies and "
          f"{SLOWLORIS} slowloris clients, reconnecting when closed")
    print(f"  receiver RSS: {phase.rss[0]:.0f} MB before, {phase.rss[1]:.0f} MB at most, "
          f"{phase.rss[2]:.0f} MB 1 s after; their connections ended by status: {phase.attack_ended}")
    print()


def throughput_targets(web: dict, cb: dict) -> list[tuple[str, bool]]:
    return [
        (f"webhooks >= {TARGETS['webhooks_per_s']}/s sustained", web["ok_per_s"] >= 0.98 * WEBHOOK_RATE
         and web["ok"] == web["sent"]),
        (f"webhook p99 ack <= {TARGETS['webhook_p99_ms']:g} ms", web["p99_ms"] <= TARGETS["webhook_p99_ms"]),
        (f"callbacks >= {TARGETS['callbacks_per_s']}/s sustained", cb["ok_per_s"] >= 0.98 * CALLBACK_RATE
         and cb["ok"] == cb["sent"]),
    ]


def main() -> int:
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    issuer = Issuer()
    jwks_server, jwks_url = serve_jwks(issuer)
    shas = [hashlib.sha1(f"commit-{i}".encode()).hexdigest() for i in range(20)]
    write_dispatches(str(WORK / "lake"), shas)
    config = WORK / "relay.yaml"
    config.write_text(f"upstream: {{repo: pytorch/pytorch}}\npoll_commits: false\nallowlist:\n  L2: [{REPO}]\n")
    port = free_port()
    env = {**os.environ, "TORCHCI_ARCHIVE_URI": str(WORK / "archive"), "TORCHCI_LAKE_URI": str(WORK / "lake"),
           "TORCHCI_SPOOL_DIR": str(WORK / "spool"), "TORCHCI_WEBHOOK_SECRETS": SECRET.decode(),
           "TORCHCI_CONFIG": str(config), "TORCHCI_OIDC_JWKS_URL": jwks_url,
           "TORCHCI_CALLBACK_RATE_LIMIT": "1000000000", "TORCHCI_RECEIVER_HOST": "bench"}
    log = open(WORK / "serve.log", "wb")
    proc = subprocess.Popen([TORCHCI, "serve", "--port", str(port), "--log-level", "warning"], env=env,
                            stdout=log, stderr=log, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"torchci serve did not start; see {WORK / 'serve.log'}")
            time.sleep(0.1)
        print(f"minting {TOKENS} OIDC tokens ...", flush=True)
        tokens = [issuer.token(i) for i in range(TOKENS)]
        make_webhook, body_size = webhook_requests(port)
        make_callback = callback_requests(port, tokens, shas)
        print(f"receiver pid {proc.pid} on 127.0.0.1:{port}; webhook body {body_size / 1000:.1f} KB; "
              f"{os.cpu_count()} cores shared by server and load", flush=True)

        client_lag: list[float] = []

        async def watch_client_loop() -> None:
            while True:
                t = time.perf_counter()
                await asyncio.sleep(0.1)
                client_lag.append(time.perf_counter() - t - 0.1)

        async def run() -> list[tuple[Phase, dict, float]]:
            out = []
            watcher = asyncio.create_task(watch_client_loop())
            await closed_loop(port, make_webhook, 2.0, "warm-up")
            phases = [
                ("webhooks open loop", lambda: open_loop(port, make_webhook, WEBHOOK_RATE, WEBHOOK_SECONDS,
                                                         f"webhooks, {WEBHOOK_RATE}/s scheduled")),
                ("webhooks closed loop", lambda: closed_loop(port, make_webhook, CLOSED_SECONDS,
                                                             f"webhooks, {CONNECTIONS} connections flat out")),
                ("callbacks open loop", lambda: open_loop(port, make_callback, CALLBACK_RATE, CALLBACK_SECONDS,
                                                          f"callbacks, {CALLBACK_RATE}/s scheduled")),
                ("callbacks closed loop", lambda: closed_loop(port, make_callback, CLOSED_SECONDS,
                                                              f"callbacks, {CONNECTIONS} connections flat out")),
                ("webhooks before the attack", lambda: open_loop(port, make_webhook, ATTACK_RATE, WEBHOOK_SECONDS,
                                                                 f"webhooks, {ATTACK_RATE}/s, no attack")),
                ("webhooks under attack", lambda: under_attack(port, make_webhook, proc.pid,
                                                               f"webhooks, {ATTACK_RATE}/s, under attack")),
            ]
            for name, runner in phases[-2:] if ATTACK_ONLY else phases:
                before, cpu0 = metrics(port), cpu_seconds(proc.pid)
                len_before = len(client_lag)
                phase = await runner()
                after, cpu1 = metrics(port), cpu_seconds(proc.pid)
                endpoint = "webhook" if name.startswith("webhooks") else "callback"
                phase.server_p99 = server_ack_p99(before, after, endpoint)
                phase.server_lag = lag_max(before, after)
                phase.client_lag = max(client_lag[len_before:], default=0.0)
                phase.refused = refusals(before, after)
                out.append((phase, fsync_summary(before, after), (cpu1 - cpu0) / (phase.ended - phase.started)))
            watcher.cancel()
            return out

        try:
            import uvloop
            results = uvloop.run(run())
        except ImportError:
            results = asyncio.run(run())
        probe = fsync_per_record(WORK / "spool")
        acked = {d for phase, _, _ in results for d in phase.acked if not d.startswith("cb-")}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
        log.close()
        jwks_server.shutdown()
    found = archived_deliveries(WORK / "archive")
    print()
    print("latency: client side, from when each request was due (open loop) or sent (closed loop); "
          "server p99: the receiver's own answer time")
    print(f"{'phase':40} {'ok':>7} {'ok/s':>8} {'p50 ms':>7} {'p95 ms':>7} {'p99 ms':>7} {'max ms':>7} "
          f"{'server p99':>11} {'server CPU':>10} {'loop lag: server':>17} {'client':>7}  refused")
    for phase, fs, cpu in results:
        s = phase.summary()
        print(f"{s['phase']:40} {s['ok']:>7} {s['ok_per_s']:>8} {s['p50_ms']:>7} {s['p95_ms']:>7} {s['p99_ms']:>7} "
              f"{s['max_ms']:>7} {phase.server_p99:>11} {cpu:>9.2f}c {phase.server_lag:>17} "
              f"{phase.client_lag * 1000:>5.0f}ms  {phase.refused or '-'}")
    print()
    print("fsync (receiver's /metrics; one write + fdatasync per group of records):")
    for phase, fs, _ in results:
        print(f"  {phase.name:44} {fs}")
    print(f"  one fdatasync per 10 KB record instead, same disk: {probe}")
    print()
    attacked = results[-1][0]
    print_attack(attacked)
    lost = acked - found
    print(f"archive: {len(found):,} webhook deliveries rolled; acknowledged but missing: {len(lost)}")
    targets = [("nothing acknowledged is lost", not lost),
               ("under attack: every signed delivery acknowledged, RSS < 600 MB",
                attacked.codes == {200: len(attacked.latencies)} and attacked.rss[1] < 600)]
    if not ATTACK_ONLY:
        targets += throughput_targets(results[0][0].summary(), results[2][0].summary())
    print("targets: " + "; ".join(f"{name}: {'met' if ok else 'NOT met'}" for name, ok in targets))
    shutil.rmtree(WORK, ignore_errors=True)
    return 0 if all(ok for _, ok in targets) else 1


if __name__ == "__main__":
    if "--attacker" in sys.argv:
        at = sys.argv.index("--attacker")
        sys.exit(attacker_main(int(sys.argv[at + 1]), float(sys.argv[at + 2])))
    sys.exit(main())
