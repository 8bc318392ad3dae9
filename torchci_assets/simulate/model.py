"""The simulated CI objects (commits, runs, jobs) and the timestamp formats GitHub uses.

Times are integer milliseconds since the epoch throughout: cheap to compare and sort
for hundreds of thousands of deliveries, and formatted only when a payload is written.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from .catalog import TestConfig, TestFile, TestTemplate

DAY_MS = 86_400_000
EPOCH_DAY = dt.date(2020, 1, 1)
_day_cache: dict[int, str] = {}


def day_start_ms(day: dt.date) -> int:
    return (day - dt.date(1970, 1, 1)).days * DAY_MS


def day_of(ms: int) -> dt.date:
    return dt.date(1970, 1, 1) + dt.timedelta(days=ms // DAY_MS)


def _date_prefix(ms: int) -> tuple[str, int]:
    d, rem = divmod(ms, DAY_MS)
    prefix = _day_cache.get(d)
    if prefix is None:
        prefix = _day_cache[d] = (dt.date(1970, 1, 1) + dt.timedelta(days=d)).isoformat()
    return prefix, rem


def iso_s(ms: int) -> str:
    """GitHub's REST timestamps: second precision, `Z`."""
    prefix, rem = _date_prefix(ms)
    s = rem // 1000
    return f"{prefix}T{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}Z"


def iso_ms(ms: int) -> str:
    """Millisecond precision, as step timestamps and the collector's received_at carry."""
    prefix, rem = _date_prefix(ms)
    s, milli = divmod(rem, 1000)
    return f"{prefix}T{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}.{milli:03d}Z"


@dataclass(slots=True)
class Commit:
    index: int  # position on main since the simulator's epoch: broken ranges refer to it
    sha: str
    parent: str
    time: int
    author: str
    message: str


@dataclass(slots=True)
class RunAttempt:
    run_id: int
    attempt: int
    workflow: str
    workflow_id: int
    run_number: int
    event: str  # push, pull_request, schedule
    head_sha: str
    head_branch: str
    head_commit: dict
    actor: str
    title: str
    pr_numbers: tuple[int, ...]
    created: int
    started: int = 0
    completed: int = 0
    conclusion: str = "success"
    code_index: int = -1  # the main commit whose code the run tests (a PR's: its base)


@dataclass(slots=True)
class Outcome:
    """What happened to one planted test in one job: one flag per try (True = failed)."""

    template: TestTemplate
    tries: list[bool]
    kind: str  # flaky, platform, broken, pr
    message: str


@dataclass(slots=True)
class Job:
    id: int
    run: RunAttempt
    name: str
    kind: str  # label, lint, build, test, docs
    labels: list[str]
    runner_name: str
    runner_id: int
    runner_group: str
    created: int
    started: int
    completed: int
    conclusion: str
    cfg: TestConfig | None = None
    shard: int = 0
    files: tuple[TestFile, ...] = ()
    outcomes: dict[TestTemplate, Outcome] = field(default_factory=dict)
    infra: str = ""  # runner_lost, cuda_illegal_memory_access, timeout
    cut: float = 1.0  # share of the shard's tests that ran (or ran healthy) before an infra failure
    waited: int = 0  # ms spent in `waiting` (environment-gated jobs)
    queued_event: bool = True  # skipped jobs go straight to completed
    slow: dict[str, float] = field(default_factory=dict)  # file path -> planted time factor
    reruns: dict[TestTemplate, int] | None = None  # a rerun_disabled_tests job: failed reruns per disabled test
