"""Downstream backend CI results, as the cross-repo relay forwards their callbacks.

Each fictional backend has a health profile that the level assessment should see through:
a healthy one (earns L3), one whose success rate warrants demotion, one with flaky
infrastructure (timeouts, jobs that never complete, failures with no tests run) and an
abusive one (bursts of hundreds of callbacks a minute).

The lines are in the real format end to end (ARCHITECTURE, Wave 2): the body is what
pytorch/test-infra's `report_callback.py` builds on the downstream job (the dispatch's
client_payload, here this project's own `relay.dispatch.client_payload`, plus a `workflow`
object of strings, `started_at` only on `in_progress`, `completed_at` only on `completed`);
the record around it is what the relay forwards to HUD (`trusted` with the queue time it
measured on in_progress and the execution time on completed, `untrusted.callback_payload`);
and `received_at` is when the receiver got it. Nightly self-reports (a single completed
callback about an upstream sha, started and completed at the instant it is sent, no relay
timings) come once a simulated day per backend.
tests/test_relay_callbacks.py checks every simulated line against the vendored script.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from torchci_assets.relay.dispatch import client_payload
from torchci_assets.relay.pushes import UpstreamCommit, trim_push_payload

from .model import Commit, iso_ms
from .payloads import commit_object

NAMES = ("acme-ai/torch-npu", "example-org/torch-tpu-backend", "fabrikam/torch-dpu",
         "contoso-labs/torch-vpu", "initech/torch-ipu-ext", "globex/torch-fpga",
         "umbrella-compute/torch-apu", "wayne-silicon/torch-rpu")
DEVICES = ("npu", "tpu", "dpu", "vpu", "ipu", "fpga", "apu", "rpu")
UPSTREAM = "pytorch/pytorch"
SCHEMA_VERSION = "1"


@dataclass(frozen=True)
class Profile:
    name: str
    current_level: str  # what the relay's allowlist says today
    expected_level: str  # what the measured health should earn
    success: float
    queue_median_s: float
    never_complete: float = 0.0
    timed_out: float = 0.0
    no_tests: float = 0.0
    burst: float = 0.0  # chance a push triggers a callback burst


PROFILES = (
    Profile("healthy", "L2", "L3", 0.97, 60.0),
    Profile("demote", "L3", "L1", 0.60, 300.0),  # 60% success is below L2's 70%: straight down
    Profile("flaky_infrastructure", "L2", "L1", 0.90, 900.0, never_complete=0.12, timed_out=0.10,
            no_tests=0.10),
    Profile("abusive", "L2", "L1", 0.88, 120.0, burst=0.35),
)


@dataclass(frozen=True)
class Backend:
    repo: str
    device: str
    profile: Profile


def backends(n: int) -> list[Backend]:
    if not 0 <= n <= len(NAMES):
        raise ValueError(f"--backends must be between 0 and {len(NAMES)}")
    return [Backend(NAMES[i], DEVICES[i], PROFILES[i % len(PROFILES)]) for i in range(n)]


def _isoformat_z(ms: int) -> str:
    """`datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")` at `ms`, as the script
    writes it: microseconds, left out when zero."""
    text = iso_ms(ms)
    return text.replace(".000Z", "Z") if ms % 1000 == 0 else text.replace("Z", "000Z")


def dispatch_payload(c: Commit, delivery_id: str, received: int) -> dict:
    """The client_payload this project's relay sends downstream for a main push of `c`."""
    push = {"ref": "refs/heads/main", "before": c.parent, "after": c.sha, "created": False, "deleted": False,
            "forced": False, "base_ref": None,
            "compare": f"https://github.com/{UPSTREAM}/compare/{c.parent[:12]}...{c.sha[:12]}",
            "repository": {"full_name": UPSTREAM},
            "pusher": {"name": "pytorchmergebot"}, "commits": [commit_object(c.sha, c.message, c.time, c.author)]}
    push["head_commit"] = push["commits"][-1]
    return client_payload(UpstreamCommit(UPSTREAM, c.sha, "refs/heads/main", c.parent, False, delivery_id,
                                         iso_ms(received), "webhook", trim_push_payload(push)))


def callback_body(dispatch: dict | None, status: str, conclusion: str | None, workflow_name: str,
                  workflow_url: str, run_id: int, attempt: int, job_name: str, sent: int,
                  tests: dict | None = None, artifact_url: str = "", self_report: tuple[str, str] | None = None
                  ) -> dict:
    """The body report_callback.py's build_payload() returns on a GitHub-hosted job (no
    CHECK_RUN_ID given), sent at `sent` ms; `self_report` is (event_type, upstream sha)."""
    if self_report:
        event_type, sha = self_report
        body = {"event_type": event_type, "delivery_id": sha,
                "payload": {"repository": {"full_name": UPSTREAM}, "head_sha": sha}}
    else:
        body = dict(dispatch or {})
    now = _isoformat_z(sent)
    workflow = {
        "schema_version": SCHEMA_VERSION, "status": status,
        "conclusion": None if status == "in_progress" else conclusion,
        "name": workflow_name, "url": workflow_url, "run_attempt": str(attempt), "job_name": job_name,
        "check_run_id": f"{run_id}-{attempt}", "run_id": str(run_id),
        "started_at": now if self_report else None if status == "completed" else now,
        "completed_at": None if status == "in_progress" else now,
    }
    if tests:
        workflow["test_results"] = tests
    if artifact_url:
        workflow["artifact_url"] = artifact_url
    body["workflow"] = workflow
    return body


def forwarded(b: Backend, body: dict, received: int, queue_time: float | None = None,
              execution_time: float | None = None) -> dict:
    """The archive line: the relay's record for HUD (callback_handler.py's `_build_trusted`,
    hud.py's `{"trusted", "untrusted"}`) and the receiver's `received_at`."""
    return {
        "trusted": {"ci_metrics": {"queue_time": queue_time, "execution_time": execution_time},
                    "verified_repo": b.repo, "downstream_repo_level": b.profile.current_level},
        "untrusted": {"callback_payload": body},
        "received_at": iso_ms(received),
    }


def _seconds(ms: int) -> float:
    """The relay's `_safe_delta`: seconds rounded to the millisecond, never negative."""
    return max(0.0, round(ms / 1000, 3))


def push_records(seed: int, b: Backend, c: Commit, delivery_id: str, pushed: int) -> list[tuple[int, dict]]:
    """(received ms, record) for every callback this backend sends about one main push."""
    rng = random.Random(f"{seed}|backend|{b.repo}|{c.sha}")
    p = b.profile
    out: list[tuple[int, dict]] = []
    run_id = 7_000_000_000 + int(c.sha[:8], 16) % 1_000_000_000 + NAMES.index(b.repo)
    dispatched = pushed + rng.randint(5_000, 60_000)
    dispatch = dispatch_payload(c, delivery_id, pushed)
    workflow, url = f"{b.device}-upstream-ci", f"https://github.com/{b.repo}/actions/runs/{run_id}"
    shards = 2
    for shard in range(1, shards + 1):
        name = f"{b.device}-ci / test (default, {shard}, {shards}, linux.{b.device}.2)"
        queue_s = p.queue_median_s * math.exp(rng.gauss(0.0, 0.8))
        started = dispatched + int(queue_s * 1000)
        received = started + rng.randint(200, 3000)
        body = callback_body(dispatch, "in_progress", None, workflow, url, run_id, 1, name, started)
        out.append((received, forwarded(b, body, received, queue_time=_seconds(received - dispatched))))
        in_progress_received = received
        r = rng.random()
        if r < p.never_complete:
            continue
        total = rng.randint(1800, 3200)
        exec_ms = int(rng.uniform(20, 55) * 60_000)
        if r < p.never_complete + p.timed_out:
            exec_ms = 180 * 60_000
            ran = rng.randint(0, total // 2)
            conclusion, tests = "timed_out", {"passed": ran, "failed": 0, "skipped": 0}
        elif r < p.never_complete + p.timed_out + p.no_tests:
            exec_ms = rng.randint(60_000, 300_000)
            conclusion, tests = "failure", {"passed": 0, "failed": 0, "skipped": 0}
        elif rng.random() < p.success:
            conclusion, tests = "success", {"passed": total - 40, "failed": 0, "skipped": 40}
        else:
            failed = rng.randint(1, 25)
            conclusion, tests = "failure", {"passed": total - 40 - failed, "failed": failed, "skipped": 40}
        completed = started + exec_ms
        sends = [completed]
        if rng.random() < p.burst / shards:
            # the callback step re-run in a tight loop: hundreds within a minute, each built anew
            t = completed
            for _ in range(rng.randint(200, 600)):
                t += rng.randint(50, 250)
                sends.append(t)
        for sent in sends:
            received = sent + rng.randint(200, 3000)
            body = callback_body(dispatch, "completed", conclusion, workflow, url, run_id, 1, name, sent,
                                 tests, artifact_url=f"{url}/artifacts")
            out.append((received, forwarded(b, body, received,
                                            execution_time=_seconds(received - in_progress_received))))
    return out


def nightly_records(seed: int, b: Backend, c: Commit) -> list[tuple[int, dict]]:
    """(received ms, record) of the nightly self-report this backend sends about upstream `c`:
    one completed callback, no dispatch behind it and so no relay timings."""
    rng = random.Random(f"{seed}|nightly|{b.repo}|{c.sha}")
    run_id = 8_000_000_000 + int(c.sha[:8], 16) % 1_000_000_000 + NAMES.index(b.repo)
    sent = c.time + rng.randint(2 * 3600_000, 4 * 3600_000)
    conclusion = "success" if rng.random() < b.profile.success else "failure"
    body = callback_body(None, "completed", conclusion, f"{b.device}-nightly",
                         f"https://github.com/{b.repo}/actions/runs/{run_id}", run_id, 1, "nightly", sent,
                         self_report=("nightly", c.sha))
    received = sent + rng.randint(200, 3000)
    return [(received, forwarded(b, body, received))]
