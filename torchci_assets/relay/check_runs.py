"""Upstream check runs for L3/L4 downstreams, as the cross-repo CI relay creates them.

One check run per downstream job, named `crcr/<downstream_repo>/<workflow_name>/<job_name>`,
on the pull request's head, created from the job's callbacks: `in_progress` gives an
in-progress check run linking the downstream run, `completed` a completed one with the job's
conclusion; `external_id` is `<run_id>:<pr number>`, as the relay writes it (a re-run request
finds the downstream run by the part before the colon).
Check runs are created, never edited: GitHub shows the newest of a name, so each supersedes the
previous one. L4 always gets them; L3 only when the pull request carries the
`ciflow/crcr/<device>` label of the repository's device, or when the relay recorded that it
wants them for this head (the `check_run_wanted` flag of the dispatch, or a `labeled` event):
the downstream echoes the dispatch-time payload, whose labels can be stale (a reopen).

Exactly once per (head, name, run, attempt, status) rests on the `relay_actions` ledger, with
the dispatch ledger's claim protocol. Unlike a dispatch, a check run can be looked up: a claim
left without an outcome (a crash between GitHub's answer and the ledger write) is resolved by
listing the head's check runs of that name, and the check run is created only if GitHub does
not have it.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import orjson
import pyarrow as pa

from resources.github import GitHubError, GitHubResource
from resources.lake import Lake
from resources.storage import Store
from torchci_assets.config import TorchciConfig
from torchci_assets.ingest.ci_results import SELF_REPORT_EVENTS
from torchci_assets.ingest.lines import iter_lines
from torchci_assets.relay.dispatch import (CLAIM_SETTLE_S, dispatch_evidence, ledger_rows, record_attempt,
                                             settle_claim, target_states)
from torchci_assets.relay.pull_requests import LABEL_PREFIX, check_run_name, needs_check_run, pr_labels
from torchci_assets.relay.pushes import WEBHOOK_SUFFIXES, recent_days

ACTIONS_TABLE = "relay_actions"
ACTIONS_SCHEMA = pa.schema([
    ("action", pa.string()), ("key", pa.string()), ("sha", pa.string()), ("upstream_repo", pa.string()),
    ("downstream_repo", pa.string()), ("pr_number", pa.int64()), ("name", pa.string()),
    ("status", pa.string()), ("conclusion", pa.string()), ("external_id", pa.string()),
    ("details_url", pa.string()), ("github_id", pa.int64()), ("delivery_id", pa.string()),
    ("attempted_at", pa.timestamp("ms", tz="UTC")), ("outcome", pa.string()), ("error", pa.string()),
    ("run_id", pa.string()), ("attempt_id", pa.string()),
    # when the receiver took the callback a check run answers: a zombie's clock (zombies.py), as the
    # relay's; null in rows written before it was kept
    ("heard_at", pa.timestamp("ms", tz="UTC")),
])
STATUS_RANK = {"in_progress": 0, "completed": 1}
# A claim younger than this may belong to a writer still waiting on GitHub (one call with its
# retries); an older one without an outcome was left by a crash.
IN_FLIGHT_S = 120.0
# Callbacks of a pull request's head arrive within days of its dispatch.
JOB_LOOKBACK_DAYS = 3


@dataclass(frozen=True)
class JobState:
    """A downstream job's state on an upstream pull request's head, from one callback."""

    downstream_repo: str
    level: str
    head_sha: str
    pr_number: int | None
    delivery_id: str
    workflow_name: str
    job_name: str
    run_id: int
    run_attempt: int
    status: str
    conclusion: str | None
    labels: frozenset[str]
    received_at: str = ""  # the receiver's clock, ISO 8601: which of a job's callbacks is newest

    @property
    def name(self) -> str:
        return check_run_name(self.downstream_repo, self.workflow_name, self.job_name)

    @property
    def key(self) -> str:
        return f"{self.name}|{self.run_id}|{self.run_attempt}|{self.status}"

    @property
    def run_key(self) -> str:
        return f"check:{self.head_sha}:{self.key}"


def job_state(record: dict) -> JobState | None:
    """The job state of a ci-results archive record when it is an L3/L4 callback about a pull
    request with a head sha, else None (L2 results, pushes and self-reports get no check run).
    The head it names is the backend's word until `dispatched_deliveries` confirms it: the
    receiver refuses a callback naming a head its delivery was not dispatched for, but the archive
    also holds what receivers archived before they checked that. A nightly or periodic
    self-report is accepted without any dispatch, so the pull request it names is the
    repository's word alone: believing it would let a backend put a check run on any commit it
    likes (the relay grants self-reports no check runs either)."""
    trusted, untrusted = record.get("trusted") or {}, record.get("untrusted") or {}
    body = untrusted.get("callback_payload") if isinstance(untrusted, dict) else None
    if not isinstance(trusted, dict) or not isinstance(body, dict) or body.get("event_type") in SELF_REPORT_EVENTS:
        return None
    level, repo = trusted.get("downstream_repo_level"), trusted.get("verified_repo")
    workflow = body.get("workflow") if isinstance(body.get("workflow"), dict) else {}
    pr = (body.get("payload") or {}).get("pull_request") if isinstance(body.get("payload"), dict) else None
    head = str(((pr or {}).get("head") or {}).get("sha") or "").lower() if isinstance(pr, dict) else ""
    run_id, attempt = str(workflow.get("run_id") or ""), str(workflow.get("run_attempt") or "1")
    if level not in ("L3", "L4") or not isinstance(repo, str) or len(head) != 40 \
            or workflow.get("status") not in STATUS_RANK or not run_id.isdigit() or not attempt.isdigit():
        return None
    number = pr.get("number")
    return JobState(repo, level, head, number if isinstance(number, int) else None,
                    str(body.get("delivery_id") or ""), str(workflow.get("name") or ""),
                    str(workflow.get("job_name") or ""), int(run_id), int(attempt), workflow["status"],
                    workflow.get("conclusion") or None, frozenset(pr_labels(body)),
                    str(record.get("received_at") or ""))


def dispatched_deliveries(lake: Lake, head_sha: str, repo: str) -> set[str]:
    """The deliveries dispatched to `repo` for `head_sha` (acknowledged or in doubt, as the receiver
    counts them): the only ones whose callbacks may put a check run on that head. The receiver
    checks this at receipt; checked again here, a callback archived before it did (the label
    backfill reads three days of archive) cannot put a check run on a commit its backend was never
    asked to test, another pull request's included."""
    return {r["delivery_id"] for r in dispatch_evidence(ledger_rows(lake, head_sha))
            if r["downstream_repo"].lower() == repo.lower()}


def check_run_wanted(lake: Lake, head_sha: str, repo: str) -> bool:
    """The relay's per-commit flag: set at dispatch (label already there, or L4) or by a label."""
    wanted = [r for r in ledger_rows(lake, head_sha) if r.get("check_run_wanted")]
    wanted += [r for r in ledger_rows(lake, head_sha, table=ACTIONS_TABLE) if r["action"] == "wanted"]
    return any(r["downstream_repo"].lower() == repo.lower() for r in wanted)


def mark_wanted(lake: Lake, config: TorchciConfig, head_sha: str, repo: str, delivery_id: str, run_id: str) -> None:
    record_action(lake, {"action": "wanted", "key": f"wanted|{repo.lower()}", "sha": head_sha,
                   "upstream_repo": config.upstream_repo, "downstream_repo": repo,
                   "delivery_id": delivery_id, "outcome": "ok", "run_id": run_id})


def record_action(lake: Lake, row: dict) -> None:
    """One row of the relay_actions ledger; columns not given are null."""
    full = {name: None for name in ACTIONS_SCHEMA.names}
    full.update(row, attempted_at=dt.datetime.now(dt.timezone.utc))
    record_attempt(lake, full, ACTIONS_TABLE, ACTIONS_SCHEMA)


def stale_claims(rows: list[dict], key: str, now: dt.datetime | None = None, mine: str | None = None) -> set | None:
    """The attempt ids of `key`'s claims that have no outcome and are old enough to be a dead
    writer's; None while one is younger than IN_FLIGHT_S (its writer may be at work: wait). A claim
    of this very run (`mine`, its run id) is dead whatever its age: the run acts on one item at a
    time, so it was left by an earlier try of the step, which failed without an answer."""
    now = now or dt.datetime.now(dt.timezone.utc)
    settled = {r.get("attempt_id") for r in rows if r["outcome"] != "claimed"}
    open_claims = [r for r in rows if r["key"].lower() == key.lower() and r["outcome"] == "claimed"
                   and r.get("attempt_id") not in settled]
    if any((now - r["attempted_at"]).total_seconds() < IN_FLIGHT_S and (mine is None or r.get("run_id") != mine)
           for r in open_claims):
        return None
    return {r.get("attempt_id") for r in open_claims}


def wants_check_run(lake: Lake, config: TorchciConfig, job: JobState) -> bool:
    entry = config.entry_for(job.downstream_repo)
    if entry is None or entry.level not in ("L3", "L4"):
        return False
    return needs_check_run(entry, set(job.labels)) or check_run_wanted(lake, job.head_sha, job.downstream_repo)


def request_body(job: JobState, web_url: str = "https://github.com") -> dict:
    """The POST /check-runs body, as the relay's create_check_run and build_check_run_output."""
    details_url = f"{web_url.rstrip('/')}/{job.downstream_repo}/actions/runs/{job.run_id}"
    title = ("In progress" if job.status != "completed"
             else job.conclusion.capitalize() if job.conclusion else "Completed")
    body = {"name": job.name, "head_sha": job.head_sha, "status": job.status, "details_url": details_url,
            "external_id": external_id(job),
            "output": {"title": title, "summary": f"{job.downstream_repo} workflow: {details_url} "
                                                  f"(attempt {job.run_attempt})"}}
    if job.status == "completed" and job.conclusion:
        body["conclusion"] = job.conclusion
    return body


def external_id(job: JobState) -> str:
    """A check run's `external_id` as the relay writes it: the downstream run id, then `:` and the
    pull request's number when the callback names one. Whatever reads the relay's check runs (its
    re-run handlers, a backend's own tools) takes the run id from before the colon."""
    return f"{job.run_id}:{job.pr_number}" if job.pr_number else str(job.run_id)


def action_row(job: JobState, upstream_repo: str, run_id: str) -> dict:
    """A job's check-run row of the `relay_actions` ledger, without its outcome."""
    return {"action": "check_run", "key": job.key, "sha": job.head_sha, "upstream_repo": upstream_repo,
            "downstream_repo": job.downstream_repo, "pr_number": job.pr_number, "name": job.name,
            "status": job.status, "conclusion": job.conclusion, "external_id": str(job.run_id),
            "delivery_id": job.delivery_id, "run_id": run_id, "heard_at": heard_at(job.received_at)}


def create_check_run(github: GitHubResource, lake: Lake, config: TorchciConfig, job: JobState, run_id: str,
                     log: Callable[[str], None] = lambda s: None, settle_s: float = CLAIM_SETTLE_S) -> str:
    """Create the check run for `job` unless done already; returns what happened."""
    rows = [r for r in ledger_rows(lake, job.head_sha, table=ACTIONS_TABLE) if r["action"] == "check_run"]
    if job.status == "in_progress" and any(
            r["outcome"] == "ok" and r["key"] == job.key.replace("|in_progress", "|completed") for r in rows):
        return "superseded"  # the completed one is there: an in-progress one would hide it
    state = target_states(rows, field="key").get(job.key.lower(), "open")
    if state == "ok":
        return "already_created"
    body = request_body(job, github.web_url)
    base = {**action_row(job, config.upstream_repo, run_id), "details_url": body["details_url"]}
    stale: set = set()
    if state == "in_doubt":
        found = _find(github, config, job, {r.get("github_id") for r in rows if r.get("github_id")})
        if found is not None:
            record_action(lake, {**base, "outcome": "ok", "github_id": found, "error": "found on GitHub"})
            return "found"
        stale = stale_claims(rows, job.key, mine=run_id)
        if stale is None:
            return "in_flight"
    if github.dry_run:
        log(f"DRY RUN: would POST {github.api_url.rstrip('/')}/repos/{config.upstream_repo}/check-runs "
            f"name={job.name} status={job.status} conclusion={job.conclusion} (set GITHUB_TOKEN to send)")
        github.request("POST", f"/repos/{config.upstream_repo}/check-runs", json_body=body)
        record_action(lake, {**base, "outcome": "dry_run"})
        return "dry_run"
    attempt_id = uuid.uuid4().hex
    lost = settle_claim(lambda outcome: record_action(lake, {**base, "outcome": outcome, "attempt_id": attempt_id}),
                        lambda: [r for r in ledger_rows(lake, job.head_sha, table=ACTIONS_TABLE)
                                 if r["action"] == "check_run" and r.get("attempt_id") not in stale],
                        job.key, attempt_id, settle_s, field="key")
    if lost:
        return lost
    return _send(github, lake, config, job, body, base, attempt_id, log)


def _send(github: GitHubResource, lake: Lake, config: TorchciConfig, job: JobState, body: dict, base: dict,
          attempt_id: str, log: Callable[[str], None]) -> str:
    try:
        resp = github.request("POST", f"/repos/{config.upstream_repo}/check-runs", json_body=body,
                              retry_ambiguous=False)
    except GitHubError as exc:
        if exc.ambiguous:
            raise  # no answer: the claim stays in doubt and the retry looks the check run up first
        outcome = "refused" if exc.status is not None and 400 <= exc.status < 500 else "failed"
        record_action(lake, {**base, "outcome": outcome, "error": str(exc)[:500], "attempt_id": attempt_id})
        if outcome == "failed":
            raise
        log(f"check run {job.name} on {job.head_sha[:12]} refused: {exc}")
        return "refused"
    created = resp.json().get("id")
    record_action(lake, {**base, "outcome": "ok", "github_id": created, "attempt_id": attempt_id})
    log(f"check run {job.name} ({job.status}) created on {job.head_sha[:12]}: id {created}")
    return "created"


def _find(github: GitHubResource, config: TorchciConfig, job: JobState, known: set) -> int | None:
    """The id of a check run GitHub has for `job` that the ledger does not know yet, or None."""
    resp = github.request("GET", f"/repos/{config.upstream_repo}/commits/{job.head_sha}/check-runs",
                          params={"check_name": job.name, "filter": "all", "per_page": 100})
    for run in resp.json().get("check_runs", []):
        # the bare run id is how check runs were created before they took the relay's form
        if (run.get("external_id") in (external_id(job), str(job.run_id)) and run.get("status") == job.status
                and (job.status != "completed" or run.get("conclusion") == job.conclusion)
                and run.get("id") not in known):
            return run.get("id")
    return None


def recorded_jobs(store: Store, head_sha: str, repo: str, deliveries: set[str],
                  lookback_days: int = JOB_LOOKBACK_DAYS) -> list[JobState]:
    """The latest state of each job of `repo` on `head_sha`, from the callbacks in the archive
    (the relay's `crcr:dispatch_job:<head_sha>:<repo>` cache, which every callback overwrites),
    counting only the callbacks of `deliveries` (`dispatched_deliveries`)."""
    found: list[JobState] = []
    for day in recent_days(store, lookback_days, stream="ci-results"):
        for entry in store.list_files(f"ci-results/day={day}", WEBHOOK_SUFFIXES):
            for _, line in iter_lines(store, entry.path, "ci-results", []):
                try:
                    job = job_state(orjson.loads(line))
                except (orjson.JSONDecodeError, TypeError, ValueError, AttributeError):
                    continue
                if job is not None and job.head_sha == head_sha and job.downstream_repo.lower() == repo.lower() \
                        and job.delivery_id in deliveries:
                    found.append(job)
    return latest_jobs(found)


def latest_jobs(jobs: list[JobState]) -> list[JobState]:
    """Per (workflow, job), the state of its newest run: the run whose last callback arrived last,
    as the relay's cache ends up after every callback overwrote it. A close and reopen of one head
    dispatches again, and its downstream run must not lose to the older run's result, whose
    attempt number is the same. Within one run a completed state beats an in-progress one that
    arrived after it (the relay refuses that in-progress callback)."""
    runs: dict[tuple, list[JobState]] = {}
    for job in jobs:
        runs.setdefault((job.workflow_name, job.job_name, job.run_id, job.run_attempt), []).append(job)
    latest: dict[tuple[str, str], tuple] = {}
    for (workflow, name, run_id, attempt), states in runs.items():
        newest = max(_arrival(j.received_at) for j in states)
        state = max(states, key=lambda j: (STATUS_RANK[j.status], _arrival(j.received_at)))
        rank = (newest, attempt, run_id)
        if (workflow, name) not in latest or rank > latest[(workflow, name)][0]:
            latest[(workflow, name)] = (rank, state)
    return sorted((state for _, state in latest.values()), key=lambda j: j.name)


def heard_at(received_at: str) -> dt.datetime | None:
    """When the receiver took a callback, None when the record does not say."""
    at = _arrival(received_at)
    return None if at.year == dt.MINYEAR else at


def _arrival(received_at: str) -> dt.datetime:
    """When the receiver took a callback; the oldest possible time when the record does not say."""
    try:
        at = dt.datetime.fromisoformat(received_at)
    except ValueError:
        return dt.datetime.min.replace(tzinfo=dt.timezone.utc)
    return at if at.tzinfo else at.replace(tzinfo=dt.timezone.utc)


def backfill_for_label(github: GitHubResource, lake: Lake, store: Store, config: TorchciConfig, payload: dict,
                       delivery_id: str, run_id: str, log: Callable[[str], None] = lambda s: None,
                       settle_s: float = CLAIM_SETTLE_S) -> dict[str, str]:
    """A `ciflow/crcr/<device>` label: every L3 repository of the device wants check runs on this
    head from now on, and gets one now for each job that already reported (in progress or
    completed, whichever it is at). Returns what happened per check run name (or repo)."""
    device = str((payload.get("label") or {}).get("name", "")).removeprefix(LABEL_PREFIX)
    head_sha = str(((payload.get("pull_request") or {}).get("head") or {}).get("sha") or "").lower()
    done: dict[str, str] = {}
    for entry in config.allowlist:
        if entry.level != "L3" or entry.device != device:
            continue
        mark_wanted(lake, config, head_sha, entry.repo, delivery_id, run_id)
        jobs = recorded_jobs(store, head_sha, entry.repo, dispatched_deliveries(lake, head_sha, entry.repo))
        if not jobs:
            done[entry.repo] = "wanted"
            log(f"{entry.repo}: no job reported yet on {head_sha[:12]}; its callbacks will create the check runs")
        for job in jobs:
            done[job.name] = create_check_run(github, lake, config, job, run_id, log, settle_s)
    return done
