"""Downstream backend CI results, as the cross-repo relay forwards their callbacks.

Each fictional backend has a health profile that the level assessment should see through:
a healthy one (earns L3), one whose success rate warrants demotion, one with flaky
infrastructure (timeouts, jobs that never complete, failures with no tests run) and an
abusive one (bursts of hundreds of callbacks a minute).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from .model import Commit, iso_s

NAMES = ("acme-ai/torch-npu", "example-org/torch-tpu-backend", "fabrikam/torch-dpu",
         "contoso-labs/torch-vpu", "initech/torch-ipu-ext", "globex/torch-fpga",
         "umbrella-compute/torch-apu", "wayne-silicon/torch-rpu")
DEVICES = ("npu", "tpu", "dpu", "vpu", "ipu", "fpga", "apu", "rpu")


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


def _record(b: Backend, did: str, c: Commit, run_id: int, attempt: int, job_name: str, status: str,
            conclusion: str | None, started: int, completed: int | None, queue_s: float,
            tests: dict | None) -> dict:
    return {
        "trusted": {
            "verified_repo": b.repo, "downstream_repo_level": b.profile.current_level,
            "ci_metrics": {"queue_time": round(queue_s, 1),
                           "execution_time": round((completed - started) / 1000, 1) if completed else None},
        },
        "untrusted": {"callback_payload": {
            "event_type": "pytorch-upstream-ci", "delivery_id": did,
            "payload": {"upstream_repo": "pytorch/pytorch", "ref": "refs/heads/main", "head_sha": c.sha},
            "workflow": {"status": status, "conclusion": conclusion, "name": f"{b.device}-upstream-ci",
                         "run_id": run_id, "run_attempt": attempt, "job_name": job_name,
                         "started_at": iso_s(started), "completed_at": iso_s(completed) if completed else None,
                         "test_results": tests},
        }},
    }


def push_records(seed: int, b: Backend, c: Commit, delivery_id: str, pushed: int) -> list[tuple[int, dict]]:
    """(received ms, record) for every callback this backend sends about one main push."""
    rng = random.Random(f"{seed}|backend|{b.repo}|{c.sha}")
    p = b.profile
    out: list[tuple[int, dict]] = []
    run_id = 7_000_000_000 + int(c.sha[:8], 16) % 1_000_000_000 + NAMES.index(b.repo)
    dispatched = pushed + rng.randint(5_000, 60_000)
    shards = 2
    for shard in range(1, shards + 1):
        name = f"{b.device}-ci / test (default, {shard}, {shards}, linux.{b.device}.2)"
        queue_s = p.queue_median_s * math.exp(rng.gauss(0.0, 0.8))
        started = dispatched + int(queue_s * 1000)
        out.append((started + rng.randint(200, 3000),
                    _record(b, delivery_id, c, run_id, 1, name, "in_progress", None, started, None, queue_s, None)))
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
        rec = _record(b, delivery_id, c, run_id, 1, name, "completed", conclusion, started, completed, queue_s, tests)
        out.append((completed + rng.randint(200, 3000), rec))
        if rng.random() < p.burst / shards:
            # the same callback re-sent in a tight loop: hundreds within a minute
            t = completed
            for _ in range(rng.randint(200, 600)):
                t += rng.randint(50, 250)
                out.append((t, rec))
    return out
