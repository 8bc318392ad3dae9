"""Downstream CI callbacks (`POST /relay/callback`): validation, relay timings, the archive record.

The body is what pytorch/test-infra's `report_callback.py` builds: the dispatch's
`client_payload` (`event_type`, `delivery_id`, `payload`, and this project's `sha`) plus a
`workflow` object whose `run_id`, `run_attempt` and `schema_version` are strings. It is
archived verbatim under `untrusted.callback_payload`; what the receiver vouches for goes
under `trusted`, as the relay's callback handler forwards it to HUD:

    {"trusted": {"verified_repo", "downstream_repo_level", "ci_metrics": {"queue_time", "execution_time"}},
     "untrusted": {"callback_payload": <body>}, "received_at": "<receipt, UTC>"}

Timings are measured as the relay measures them, on the receiver's clock:
- `queue_time`: from the dispatch (the first acknowledged attempt in the `dispatches` ledger
  for this commit, repository and delivery; for a dispatch in doubt or unanswered, its claim,
  written just before the send) to the job's first `in_progress` callback. A
  re-run (`run_attempt` > 1) reuses the original delivery, so its "queue" would span the
  first run: it gets null rather than a misleading number.
- `execution_time`: from the job's first `in_progress` callback to its `completed` one.
The job is `(delivery_id, repo, run_id, run_attempt, job_name)`. First `in_progress` times
are kept in memory, bounded in age and count, and rebuilt on start from the archive (every
acknowledged callback is there or in the spool, which is rolled first), so a restart, or a
second replica whose callbacks land in the archive, does not lose them.

Where this receiver differs from the relay's state machine, on purpose: a repeated callback
(a retry whose first answer was lost) and a `completed` without an earlier `in_progress`
(whose report failed) are accepted, the first with the first one's timings and the second with
a null `execution_time`, because refusing them loses results while the ingest deduplicates
repeats. A callback for work never dispatched to the caller is refused (400) like the relay
does, so a backend's record holds only what the relay asked of it. A pull-request callback must
name the head its delivery was dispatched for, since its upstream check run goes on that head
(the relay checks only the delivery, and so lets a backend put a check run on any commit).
Nightly and periodic self-reports (`event_type` `nightly`/`periodic`) have no dispatch: they
must be `completed` and carry no timings. A `completed` callback must carry a conclusion GitHub
takes for a check run, which the relay does not check (`_conclusion`).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import orjson

from resources.lake import Lake
from resources.storage import Store
from torchci_assets.ingest.ci_results import SELF_REPORT_EVENTS
from torchci_assets.ingest.lines import iter_lines
from torchci_assets.relay.dispatch import dispatch_evidence, ledger_rows

log = logging.getLogger("torchci.receiver")

STATUSES = ("in_progress", "completed")
# The conclusions GitHub creates a check run with (`stale` is GitHub's own to set): what the relay's
# callback action asks for ("must be a value GitHub accepts"), and what a `completed` callback carries.
CONCLUSIONS = ("action_required", "cancelled", "failure", "neutral", "skipped", "success", "timed_out")
SHA_RE = re.compile(r"^[0-9a-f]{40}$")
MAX_ID_CHARS = 200
JobKey = tuple[str, str, int, int, str]


class BodyError(ValueError):
    """A callback body that breaks the contract (HTTP 400); the message says which field."""


@dataclass(frozen=True)
class Callback:
    delivery_id: str
    event_type: str | None
    status: str
    run_id: int
    run_attempt: int
    workflow_name: str
    job_name: str
    commit_shas: tuple[str, ...]  # where the dispatch ledger may have this callback's commit

    @property
    def self_report(self) -> bool:
        return self.event_type in SELF_REPORT_EVENTS

    def job(self, repo: str) -> JobKey:
        return (self.delivery_id, repo.lower(), self.run_id, self.run_attempt, self.job_name)


def _text(obj: dict, key: str, where: str, required: bool = True) -> str | None:
    value = obj.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value.strip()):
        raise BodyError(f"{where}.{key} must be a non-empty string")
    if len(value) > MAX_ID_CHARS:
        raise BodyError(f"{where}.{key} is longer than {MAX_ID_CHARS} characters")
    return value


def _whole(obj: dict, key: str, where: str, default: int | None = None) -> int:
    """A positive whole number given as a JSON number or its decimal string (report_callback.py
    takes them from environment variables), as the relay reads it with int()."""
    value = obj.get(key)
    if value is None and default is not None:
        return default
    text = value.strip() if isinstance(value, str) else value
    if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(text, str) and text.isascii()
                                                                  and text.isdigit() and len(text) <= 19)):
        raise BodyError(f"{where}.{key} must be a whole number (or its decimal string), got {str(value)[:40]!r}")
    number = int(text)
    if not 1 <= number < 2**63:
        raise BodyError(f"{where}.{key} is out of range: {number}")
    return number


def _timestamp(obj: dict, key: str, where: str) -> None:
    value = obj.get(key)
    if value is None:
        return
    try:
        if not isinstance(value, str):
            raise TypeError
        dt.datetime.fromisoformat(value)
    except (TypeError, ValueError):
        raise BodyError(f"{where}.{key} must be an ISO 8601 time or null, got {str(value)[:40]!r}") from None


def _commit_shas(body: dict) -> tuple[str, ...]:
    """Commit ids the body names, for finding its dispatch: this project's `sha`, a push's `after`,
    a self-report's `head_sha`, or a polled commit's id used as delivery. A body naming a pull
    request's head is found by that head alone: the upstream check run goes on it, so it must be
    the head the delivery was dispatched for, whatever other commit the body names (a
    `synchronize` payload carries `after` too, and the body is the backend's to write)."""
    payload = body.get("payload") if isinstance(body.get("payload"), dict) else {}
    pr = payload.get("pull_request") if isinstance(payload.get("pull_request"), dict) else {}
    head = pr.get("head") if isinstance(pr.get("head"), dict) else {}
    if head.get("sha") is not None:
        candidates = (head.get("sha"),)
    else:
        candidates = (body.get("sha"), payload.get("after"), payload.get("head_sha"), body.get("delivery_id"))
    found: list[str] = []
    for value in candidates:
        if isinstance(value, str) and SHA_RE.match(value.lower()) and value.lower() not in found:
            found.append(value.lower())
    return tuple(found)


def _conclusion(conclusion: object, status: str) -> None:
    """A `completed` callback carries a conclusion GitHub takes. The relay takes any and then fails to
    create the job's check run (GitHub answers 422, which it logs and drops): the pull request keeps
    the in-progress one for good, and the job's result says nothing. Refused here, the backend's
    callback step turns red, naming the field."""
    if conclusion is not None and not isinstance(conclusion, str):
        raise BodyError("body.workflow.conclusion must be a string or null")
    if status == "completed" and conclusion not in CONCLUSIONS:
        raise BodyError(f"body.workflow.conclusion of a completed callback must be one of {', '.join(CONCLUSIONS)} "
                        f"(the action's `conclusion` input, e.g. job.status), got {json.dumps(conclusion)[:40]}")


def parse_callback(body: object) -> Callback:
    """The fields the receiver acts on; BodyError when the body is not what report_callback.py sends."""
    if not isinstance(body, dict):
        raise BodyError(f"the body must be a JSON object, got {type(body).__name__}")
    delivery_id = _text(body, "delivery_id", "body")
    event_type = _text(body, "event_type", "body", required=False)
    workflow = body.get("workflow")
    if not isinstance(workflow, dict):
        raise BodyError("body.workflow must be an object")
    status = workflow.get("status")
    if status not in STATUSES:
        raise BodyError(f"body.workflow.status must be one of {', '.join(STATUSES)}, got {str(status)[:40]!r}")
    if event_type in SELF_REPORT_EVENTS and status != "completed":
        raise BodyError(f"{event_type} callbacks must have status 'completed', got {status!r}")
    _conclusion(workflow.get("conclusion"), status)
    for key in ("started_at", "completed_at"):
        _timestamp(workflow, key, "body.workflow")
    tests = workflow.get("test_results")
    if tests is not None and not isinstance(tests, dict):
        raise BodyError("body.workflow.test_results must be an object")
    return Callback(
        delivery_id=delivery_id,
        event_type=event_type,
        status=status,
        run_id=_whole(workflow, "run_id", "body.workflow"),
        run_attempt=_whole(workflow, "run_attempt", "body.workflow", default=1),
        workflow_name=_text(workflow, "name", "body.workflow"),
        job_name=_text(workflow, "job_name", "body.workflow"),
        commit_shas=_commit_shas(body),
    )


def seconds_between(start: float | None, end: float | None) -> float | None:
    """end - start in seconds, rounded to ms; a small negative (clock skew) is 0, as the relay does."""
    if start is None or end is None:
        return None
    return max(0.0, round(end - start, 3))


class JobStarts:
    """The first `in_progress` receipt of each job, bounded by age and count.

    Updated from the event loop and from the archive catch-up thread, hence the lock.
    """

    def __init__(self, ttl_s: float = 3 * 86400.0, max_jobs: int = 200_000):
        self.ttl_s, self.max_jobs = ttl_s, max_jobs
        self._starts: OrderedDict[JobKey, float] = OrderedDict()
        self._lock = threading.Lock()
        self._seen_files: dict[str, set[str]] = {}  # archive day -> files already read

    def __len__(self) -> int:
        return len(self._starts)

    def get(self, job: JobKey) -> float | None:
        return self._starts.get(job)

    def record(self, job: JobKey, at: float) -> float:
        """Remember `at` unless an earlier start is known; returns the first start."""
        with self._lock:
            first = self._starts.get(job)
            if first is not None and first <= at:
                return first
            self._starts[job] = at
            self._evict(time.time())
            return at

    def _evict(self, now: float) -> None:
        # Insertion order is (nearly) time order: evict from the front.
        while self._starts and (len(self._starts) > self.max_jobs
                                or next(iter(self._starts.values())) < now - self.ttl_s):
            self._starts.popitem(last=False)

    def mark_read(self, path: str) -> None:
        """An archive file whose callbacks are already known (this receiver just rolled it)."""
        day = path.split("/")[1][len("day="):]
        self._seen_files.setdefault(day, set()).add(path)

    def catch_up(self, store: Store, lookback_days: int = 3) -> int:
        """Read the `in_progress` callbacks of archive files not read yet (the newest
        `lookback_days` day folders); returns how many files were read."""
        days = store.list_days("ci-results")[-lookback_days:]
        self._seen_files = {d: self._seen_files.get(d, set()) for d in days}
        read = 0
        for day in days:
            for entry in store.list_files(f"ci-results/day={day}", (".jsonl", ".jsonl.gz")):
                if entry.path in self._seen_files[day]:
                    continue
                for _, line in iter_lines(store, entry.path, "ci-results", []):
                    self._learn(line)
                self._seen_files[day].add(entry.path)
                read += 1
        return read

    def _learn(self, line: bytes) -> None:
        try:
            record = orjson.loads(line)
            repo = record["trusted"]["verified_repo"]
            callback = parse_callback(record["untrusted"]["callback_payload"])
            at = dt.datetime.fromisoformat(record["received_at"]).timestamp()
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return  # not ours to judge here: the ingest rejects it with a reason
        if callback.status == "in_progress" and not callback.self_report and isinstance(repo, str):
            self.record(callback.job(repo), at)


class LedgerUnavailable(Exception):
    """The dispatches ledger could not be read (HTTP 503: not the caller's fault)."""


class DispatchLedger:
    """When each commit was dispatched to each repository, from the `dispatches` lake table.

    Reads are cached per commit (the ledger only grows): a match is final; a miss is read again
    only after `recheck_s`, so a callback racing its own dispatch row, or a flood of callbacks
    naming an unknown commit, costs one read per commit and interval.
    """

    def __init__(self, lake: Lake, max_commits: int = 4096, recheck_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic,
                 read: Callable[[Lake, str], list[dict]] = ledger_rows):
        self.lake, self.max_commits, self.recheck_s, self._clock, self._read_rows = lake, max_commits, recheck_s, clock, read
        self._cache: OrderedDict[str, tuple[float, list[tuple[str, str, float]]]] = OrderedDict()
        self._inflight: dict[str, asyncio.Future] = {}
        self.reads = 0

    async def dispatched_at(self, shas: Iterable[str], repo: str, delivery_id: str) -> float | None:
        """Epoch seconds of the first acknowledged dispatch of one of `shas` to `repo` with
        `delivery_id`, or None when the ledger has none."""
        for sha in shas:
            at = _first_ack(await self._acks(sha, repo, delivery_id), repo, delivery_id)
            if at is not None:
                return at
        return None

    async def _acks(self, sha: str, repo: str, delivery_id: str) -> list[tuple[str, str, float]]:
        cached = self._cache.get(sha)
        if cached is not None:
            self._cache.move_to_end(sha)
            fetched, acks = cached
            if _first_ack(acks, repo, delivery_id) is not None or self._clock() - fetched < self.recheck_s:
                return acks
        pending = self._inflight.get(sha)
        if pending is None:
            pending = self._inflight[sha] = asyncio.ensure_future(asyncio.to_thread(self._read, sha))
            pending.add_done_callback(lambda _f: self._inflight.pop(sha, None))
        acks = await asyncio.shield(pending)
        self._cache[sha] = (self._clock(), acks)
        self._cache.move_to_end(sha)
        while len(self._cache) > self.max_commits:
            self._cache.popitem(last=False)
        return acks

    def _read(self, sha: str) -> list[tuple[str, str, float]]:
        self.reads += 1
        try:
            rows = self._read_rows(self.lake, sha)
        except Exception as exc:  # an unreachable lake (S3 down), a broken part
            raise LedgerUnavailable(f"the dispatches ledger is unreadable: {exc}") from exc
        return [(r["downstream_repo"].lower(), r["delivery_id"], r["attempted_at"].timestamp())
                for r in dispatch_evidence(rows)]


def _first_ack(acks: list[tuple[str, str, float]], repo: str, delivery_id: str) -> float | None:
    times = [at for r, d, at in acks if r == repo.lower() and d == delivery_id]
    return min(times) if times else None


class RateLimiter:
    """A token bucket per key: `per_minute` on average, bursts up to `per_minute`.

    Keys are allowlisted repositories only (the allowlist is checked first), so the buckets
    are bounded by the allowlist. Limits are per process.
    """

    def __init__(self, per_minute: float, clock: Callable[[], float] = time.monotonic):
        self.capacity, self.rate, self._clock = per_minute, per_minute / 60.0, clock
        self._buckets: dict[str, tuple[float, float]] = {}

    def retry_after(self, key: str) -> float:
        """0 when a request of `key` may go now (and takes a token), else the seconds to wait."""
        now = self._clock()
        tokens, updated = self._buckets.get(key, (self.capacity, now))
        tokens = min(self.capacity, tokens + (now - updated) * self.rate)
        if tokens >= 1.0:
            self._buckets[key] = (tokens - 1.0, now)
            return 0.0
        self._buckets[key] = (tokens, now)
        return (1.0 - tokens) / self.rate
