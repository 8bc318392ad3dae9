"""Relaying one upstream commit to every allowlisted downstream, exactly once each.

Exactly once rests on the `dispatches` ledger, a lake table with one row per attempt:
before sending, the ledger is read for this sha and every downstream that already
acknowledged it (HTTP 2xx) is skipped; after each attempt its row is written, atomically and
before the next send. So a run that crashed half-way, was retried, or was launched twice sends
only what GitHub has not acknowledged. The one window left is between GitHub's 204 and the
ledger write (milliseconds): a crash exactly there re-sends that one dispatch, which the
payload's `delivery_id` lets the downstream recognize; the alternative, writing first, would
lose dispatches instead.

Each attempt is its own small immutable Parquet part named `<sha>-<repo>-<uuid>.parquet`, so
writers never rewrite each other's rows and finding a commit's rows means listing a few day
folders and opening only the files whose names start with its sha.

Dry-run attempts (no credentials) are recorded as `dry_run` and do not count as acknowledged:
a later run with a token still sends them.
"""

from __future__ import annotations

import datetime as dt
import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from resources.github import GitHubError, GitHubResource
from resources.lake import Lake
from torchci_assets.config import AllowlistEntry
from torchci_assets.relay.pushes import UpstreamCommit

LEDGER_TABLE = "dispatches"
# The relay's event type: downstream workflows listen with `repository_dispatch: types: [push]`.
EVENT_TYPE = "push"
# Re-executions happen within hours; a week bounds the listing while covering any retry.
LEDGER_LOOKBACK_DAYS = 7

LEDGER_SCHEMA = pa.schema([
    ("sha", pa.string()), ("upstream_repo", pa.string()), ("downstream_repo", pa.string()),
    ("level", pa.string()), ("event_type", pa.string()), ("delivery_id", pa.string()),
    ("source", pa.string()), ("attempted_at", pa.timestamp("ms", tz="UTC")),
    ("status_code", pa.int32()), ("outcome", pa.string()), ("error", pa.string()),
    ("http_attempts", pa.int32()), ("waited_s", pa.float64()), ("run_id", pa.string()),
])


@dataclass(frozen=True)
class RepoOutcome:
    """What happened to one downstream in this run.

    `outcome` is `ok` (GitHub acknowledged), `refused` (a final 4xx such as 403/404: retrying
    will not help), `failed` (transient errors outlasted the retries), `dry_run` (no
    credentials, nothing sent), or `already_acknowledged` (an earlier attempt was acknowledged,
    nothing was sent). Only the first four are ledger rows.
    """

    repo: str
    level: str
    outcome: str
    status_code: int | None = None
    error: str = ""
    http_attempts: int = 0
    waited_s: float = 0.0


def client_payload(commit: UpstreamCommit) -> dict:
    """The relay's client_payload: `event_type`, `delivery_id` and the (trimmed) GitHub
    `payload`, which downstream validators read, plus the commit's identity at the top level
    for workflow expressions. Nine keys, within GitHub's ten."""
    return {
        "event_type": EVENT_TYPE,
        "delivery_id": commit.delivery_id or commit.sha,
        "upstream_repo": commit.upstream_repo,
        "ref": commit.ref,
        "sha": commit.sha,
        "before": commit.before,
        "forced": commit.forced,
        "source": commit.source,
        "payload": commit.payload,
    }


def _slug(repo: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "-", repo.replace("/", "--")).lower()


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def record_attempt(lake: Lake, row: dict) -> str:
    """Write one attempt as its own part of the ledger; returns the part's path.

    `row` has the LEDGER_SCHEMA columns; its `attempted_at` picks the day partition.
    """
    day = row["attempted_at"].astimezone(dt.timezone.utc).strftime("%Y-%m-%d")
    part = f"{row['sha']}-{_slug(row['downstream_repo'])}-{uuid.uuid4().hex[:12]}"
    lake.write(LEDGER_TABLE, day, pa.Table.from_pylist([row], schema=LEDGER_SCHEMA), part=part)
    return lake.partition_path(LEDGER_TABLE, day, part)


def ledger_rows(lake: Lake, sha: str, lookback_days: int = LEDGER_LOOKBACK_DAYS,
                now: dt.datetime | None = None) -> list[dict]:
    """Every recorded attempt for `sha` in the last `lookback_days` days, oldest first."""
    now = now or _utc_now()
    store = lake.store
    rows: list[dict] = []
    for back in range(lookback_days):
        day = (now - dt.timedelta(days=back)).strftime("%Y-%m-%d")
        for entry in store.list_files(f"{LEDGER_TABLE}/day={day}", (".parquet",)):
            if not entry.refused and entry.path.rsplit("/", 1)[-1].startswith(f"{sha}-"):
                rows += pq.read_table(store.full(entry.path), filesystem=store.fs).to_pylist()
    return sorted(rows, key=lambda r: r["attempted_at"])


def acknowledged_repos(lake: Lake, sha: str, lookback_days: int = LEDGER_LOOKBACK_DAYS) -> set[str]:
    """Downstreams (lower-cased, as GitHub names are case-insensitive) that acknowledged `sha`."""
    return {r["downstream_repo"].lower() for r in ledger_rows(lake, sha, lookback_days)
            if r["outcome"] == "ok"}


def dispatch_commit(github: GitHubResource, lake: Lake, commit: UpstreamCommit,
                    targets: Iterable[AllowlistEntry], run_id: str,
                    log: Callable[[str], None] = lambda s: None) -> list[RepoOutcome]:
    """Send `commit` to each target not yet acknowledged, recording every attempt.

    A refusal or failure of one downstream never stops the others; the caller decides what a
    `failed` outcome means for the run (it retries them).
    """
    acked = acknowledged_repos(lake, commit.sha)
    payload = client_payload(commit)
    outcomes = []
    for target in targets:
        if target.repo.lower() in acked:
            outcomes.append(RepoOutcome(target.repo, target.level, "already_acknowledged"))
            continue
        outcome = _attempt(github, target, payload)
        if outcome.outcome == "dry_run":
            log(f"DRY RUN: would POST {github.api_url.rstrip('/')}/repos/{target.repo}/dispatches "
                f"event_type={EVENT_TYPE} sha={commit.sha} ({target.level}) "
                "(set GITHUB_TOKEN to send)")
        else:
            detail = outcome.error or (f"HTTP {outcome.status_code}" if outcome.status_code else "")
            log(f"dispatch {commit.sha[:12]} -> {target.repo} ({target.level}): {outcome.outcome}"
                + (f" ({detail})" if detail else ""))
        record_attempt(lake, {
            "sha": commit.sha, "upstream_repo": commit.upstream_repo,
            "downstream_repo": target.repo, "level": target.level, "event_type": EVENT_TYPE,
            "delivery_id": payload["delivery_id"], "source": commit.source,
            "attempted_at": _utc_now(), "status_code": outcome.status_code,
            "outcome": outcome.outcome, "error": outcome.error,
            "http_attempts": outcome.http_attempts, "waited_s": outcome.waited_s,
            "run_id": run_id,
        })
        outcomes.append(outcome)
    return outcomes


def _attempt(github: GitHubResource, target: AllowlistEntry, payload: dict) -> RepoOutcome:
    try:
        result = github.dispatch(target.repo, EVENT_TYPE, payload)
    except ValueError as exc:  # a payload GitHub would reject: sending again cannot help
        return RepoOutcome(target.repo, target.level, "refused", None, str(exc))
    except GitHubError as exc:  # e.g. an App installation token that could not be minted
        return RepoOutcome(target.repo, target.level, "failed", exc.status, str(exc))
    if result.dry_run:
        outcome = "dry_run"
    elif result.ok:
        outcome = "ok"
    elif result.refused:
        outcome = "refused"
    else:
        outcome = "failed"
    return RepoOutcome(target.repo, target.level, outcome, result.status, result.error,
                       result.attempts, result.waited_s)


def outcome_table(outcomes: Iterable[RepoOutcome]) -> str:
    """A markdown table of the per-downstream outcomes, for the run's metadata."""
    lines = ["| downstream | level | outcome | HTTP | error |", "|---|---|---|---|---|"]
    for o in outcomes:
        error = o.error.replace("|", "\\|")[:120]
        lines.append(f"| {o.repo} | {o.level} | {o.outcome} | {o.status_code or ''} | {error} |")
    return "\n".join(lines)
