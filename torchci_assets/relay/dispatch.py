"""Relaying one upstream event (a push's head commit, a pull request's delivery) to every
allowlisted downstream, exactly once each.

Exactly once rests on the `dispatches` ledger, a lake table with one row per attempt, keyed
by commit: a push is acknowledged once per (sha, downstream), whatever delivery carried it; a
pull request once per (delivery, downstream), since `opened`, `synchronize` and `closed` of one
head are distinct events a downstream wants each of, and a delivery carrying the same content as
one already dispatched (the App's copy of a repository webhook's event) counts as that one.

Every send is bracketed by two rows. Before the POST, a `claimed` row; after GitHub's answer,
the outcome row (`ok`, `refused`, `failed`, `unanswered`) with the same `attempt_id`. So:
- A run that crashed, was retried or launched twice skips every downstream already `ok`.
- A send GitHub gave no answer for, or only 5xx answers, past the client's retries, is
  `unanswered`: GitHub often takes a dispatch it fails to acknowledge, so it may have landed. The
  run's retry sends it again (a dropped dispatch would go unnoticed), and meanwhile the receiver
  takes the downstream's callbacks on it (`dispatch_evidence`). Only an explicit refusal (a 4xx,
  `refused`, or a rate limit outlasting the retries, `failed`) says nothing was dispatched.
- A downstream whose last row is a `claimed` with no outcome is *in doubt*: the process died
  between the claim and recording GitHub's answer, and nobody can tell whether the dispatch
  landed (repository_dispatch has no idempotency key and no way to look it up). It is not
  sent again: the relay prefers a missed dispatch, visible as `in_doubt` in the run and in the
  ledger, to a second downstream CI run of the same event on scarce hardware. The downstream's
  callback, which the receiver accepts on the claim, shows it did land.
- Two writers racing on the same event both write a claim, wait `CLAIM_SETTLE_S` and read the
  ledger back: only the earliest claim (time, then id) without an outcome sends; the other
  stands down, as does a writer that finds the target acknowledged meanwhile. Claims are
  timestamped just before they are written, so the wait need only cover one write's latency
  and the clock difference between the replicas. A claim slower to write than that (a slow S3
  PUT) may land after a racer's read-back: when such a racer's claim is there, its writer
  withdraws (a `withdrawn` row) and leaves the target to the next attempt rather than send beside
  it (`settle_claim`). Targets are claimed one at a time, just before their own send, so a crash
  leaves at most one downstream in doubt.

Each row is its own small immutable Parquet part named `<sha>-<repo>-<uuid>.parquet`, so
writers never rewrite each other's rows, in a sub-folder of the day named by the sha's first two
hex digits (`day=D/<xx>/`). Finding a commit's rows means looking, in a few day folders, only at
the files of its sub-folder whose names start with its sha (`Store.list_named`): S3 lists a folder
whole, and a busy day holds tens of thousands of parts, where a sub-folder holds a 256th of them and
the day folder at most 256 sub-folders. Parts written in the day folder itself (lakes from before
the sub-folders) are still read.

Dry-run attempts (no credentials) are recorded as `dry_run` and do not count as acknowledged:
a later run with a token still sends them.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

from resources.github import GitHubError, GitHubResource, outage_line, refusal_fix, unavailable
from resources.lake import Lake
from torchci_assets.config import AllowlistEntry
from torchci_assets.relay.pushes import EVENT_TYPE, UpstreamCommit, client_payload

LEDGER_TABLE = "dispatches"
WITHDRAWN = "withdrawn"  # the outcome row of a claim its writer gave up before sending (settle_claim)
UNANSWERED = "unanswered"  # sent, and no answer but timeouts or 5xx: GitHub may have taken it
# The relay's event types: downstream workflows listen with `repository_dispatch: types: [push]`
# (trunk and nightly signal) or `types: [pull_request]` (the relay's README).
PR_EVENT_TYPE = "pull_request"
# How long a writer waits between writing its claims and reading them back (see the docstring).
CLAIM_SETTLE_S = 0.5
# Re-executions happen within hours; a week bounds the listing while covering any retry.
LEDGER_LOOKBACK_DAYS = 7
# A ledger part is one row, staged and renamed in milliseconds: a staging file this old was left by
# a writer killed mid-write (`sweep_ledger_staging`).
LEDGER_STAGING_MAX_AGE = dt.timedelta(hours=1)

LEDGER_SCHEMA = pa.schema([
    ("sha", pa.string()), ("upstream_repo", pa.string()), ("downstream_repo", pa.string()),
    ("level", pa.string()), ("event_type", pa.string()), ("delivery_id", pa.string()),
    ("source", pa.string()), ("attempted_at", pa.timestamp("ms", tz="UTC")),
    ("status_code", pa.int32()), ("outcome", pa.string()), ("error", pa.string()),
    ("http_attempts", pa.int32()), ("waited_s", pa.float64()), ("run_id", pa.string()),
    ("attempt_id", pa.string()), ("check_run_wanted", pa.bool_()), ("content_key", pa.string()),
])


@dataclass(frozen=True)
class RepoOutcome:
    """What happened to one downstream in this run.

    `outcome` is `ok` (GitHub acknowledged), `refused` (a final 4xx such as 403/404: retrying
    will not help), `failed` (a rate limit outlasted the retries, or the send could not be made:
    nothing reached GitHub), `unanswered` (timeouts or 5xx answers outlasted the retries: GitHub may
    have taken it), `dry_run` (no
    credentials, nothing sent), `already_acknowledged` (an earlier attempt was acknowledged,
    nothing was sent), `in_doubt` (an earlier writer claimed it and never recorded GitHub's
    answer: not sent again), `claimed_elsewhere` (a concurrent writer won the claim) or
    `deferred` (a sensor tick ran out of time before it, or this writer withdrew a claim too
    slow to write, recorded as a `withdrawn` row: a run sends it). Only the first five are
    outcome rows.
    """

    repo: str
    level: str
    outcome: str
    status_code: int | None = None
    error: str = ""
    http_attempts: int = 0
    waited_s: float = 0.0
    attempt_id: str = ""


def ledger_folder(sha: str) -> str:
    """The sub-folder of a day's ledger parts of `sha`: its first two hex digits, which spread a
    day's commits evenly; `other` for a row without a commit id."""
    head = sha[:2].lower()
    return head if len(head) == 2 and all(c in "0123456789abcdef" for c in head) else "other"


def _slug(repo: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "-", repo.replace("/", "--")).lower()


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def record_attempt(lake: Lake, row: dict, table: str = LEDGER_TABLE, schema: pa.Schema = LEDGER_SCHEMA) -> str:
    """Write one attempt as its own part of the ledger (or of another ledger `table` keyed the
    same way, by `sha` and `downstream_repo`); returns the part's path.

    `row` has the schema's columns; its `attempted_at` picks the day partition.
    """
    day = row["attempted_at"].astimezone(dt.timezone.utc).strftime("%Y-%m-%d")
    part = f"{ledger_folder(row['sha'])}/{row['sha']}-{_slug(row['downstream_repo'])}-{uuid.uuid4().hex[:12]}"
    lake.write(table, day, pa.Table.from_pylist([row], schema=schema), part=part)
    return lake.partition_path(table, day, part)


def ledger_rows(lake: Lake, sha: str, lookback_days: int = LEDGER_LOOKBACK_DAYS,
                now: dt.datetime | None = None, table: str = LEDGER_TABLE) -> list[dict]:
    """Every recorded attempt for `sha` in the last `lookback_days` days, oldest first."""
    now = now or _utc_now()
    store = lake.store
    rows: list[dict] = []
    for back in range(lookback_days):
        day = (now - dt.timedelta(days=back)).strftime("%Y-%m-%d")
        folder = f"{table}/day={day}"
        entries = store.list_named(folder, f"{sha}-", (".parquet",))  # written before the sub-folders
        entries += store.list_named(f"{folder}/{ledger_folder(sha)}", f"{sha}-", (".parquet",))
        for entry in entries:
            if not entry.refused:
                rows += pq.read_table(store.full(entry.path), filesystem=store.fs).to_pylist()
    return sorted(rows, key=lambda r: r["attempted_at"])


def sweep_ledger_staging(lake: Lake, table: str, days: Iterable[str],
                         max_age: dt.timedelta = LEDGER_STAGING_MAX_AGE) -> list[str]:
    """Remove the staging files a writer killed mid-write left in a ledger's `days` (their day
    folders and sub-folders) more than `max_age` ago; their paths. Readers skip them, but nothing
    else would ever remove them. Age, not the owner, decides: sensor ticks write the ledgers too,
    and no run list knows whether a tick is alive. On S3 a write is staged on the writer's own
    disk, never in the ledger's folders: nothing is listed there."""
    store = lake.store
    if not store.is_local:
        return []
    removed: list[str] = []
    for day in days:
        folder = f"{table}/day={day}"
        for sub in [folder, *(f"{folder}/{name}" for name in store.list_dirs(folder))]:
            removed += store.sweep_staging(sub, lambda owner: False, max_age.total_seconds())
    return removed


def dispatch_evidence(rows: list[dict]) -> list[dict]:
    """The ledger rows that show a dispatch may have reached the repository: acknowledged ones, and
    the claims of sends whose answer is unknown: never recorded (a crash in between, or a send still
    under way) or `unanswered` (timeouts, 5xx: GitHub often takes a dispatch it fails to
    acknowledge). The callback itself then shows it landed. An unanswered send counts from its claim,
    written just before it went out. A send refused (a 4xx), never made (`failed`), withdrawn before
    sending or made in dry run is not evidence."""
    outcome_of = {r.get("attempt_id"): r.get("outcome") for r in rows if r.get("outcome") != "claimed"}
    return [r for r in rows if r.get("attempted_at") is not None and (
        r.get("outcome") == "ok" or (r.get("outcome") == "claimed"
                                     and outcome_of.get(r.get("attempt_id"), UNANSWERED) == UNANSWERED))]


@dataclass(frozen=True)
class Dispatch:
    """One event to relay, whatever its kind: what the ledger keys it by and what is sent.

    `per_delivery` says whether each delivery is its own event (pull requests) or only the
    commit counts (pushes). `check_run_wanted` lists the downstreams (lower-cased) that get an
    upstream check run for this head whatever labels their callbacks echo: the relay's flag.
    `content_key` names what happened independently of the delivery that told it: GitHub sends
    one event once per webhook pointed at the receiver, each copy with its own delivery id, and a
    copy of an event already dispatched must not start a second downstream run.
    """

    sha: str
    upstream_repo: str
    event_type: str
    delivery_id: str
    source: str
    client_payload: dict
    per_delivery: bool = False
    check_run_wanted: frozenset[str] = field(default_factory=frozenset)
    content_key: str = ""


def push_dispatch(commit: UpstreamCommit) -> Dispatch:
    return Dispatch(commit.sha, commit.upstream_repo, EVENT_TYPE, client_payload(commit)["delivery_id"],
                    commit.source, client_payload(commit))


def event_rows(lake: Lake, event: Dispatch) -> list[dict]:
    """The ledger rows of this event (its commit and kind, and when per delivery its delivery, or
    another delivery of the same content)."""
    return [r for r in ledger_rows(lake, event.sha)
            if (r.get("event_type") or EVENT_TYPE) == event.event_type
            and (not event.per_delivery or r.get("delivery_id") == event.delivery_id
                 or (event.content_key != "" and r.get("content_key") == event.content_key))]


def target_states(rows: list[dict], field: str = "downstream_repo") -> dict[str, str]:
    """Per downstream (lower-cased; or per value of `field`): `ok` once acknowledged, `in_doubt`
    while a claim has no outcome row, else `open` (never tried, or refused/failed/unanswered/dry run)."""
    settled = {r.get("attempt_id") for r in rows if r["outcome"] != "claimed"}
    rank = {"open": 0, "in_doubt": 1, "ok": 2}
    states: dict[str, str] = {}
    for row in rows:
        repo = row[field].lower()
        state = ("ok" if row["outcome"] == "ok" else
                 "in_doubt" if row["outcome"] == "claimed" and row.get("attempt_id") not in settled else "open")
        if rank[state] >= rank[states.get(repo, "open")]:
            states[repo] = state
    return states


def acknowledged_repos(lake: Lake, sha: str, lookback_days: int = LEDGER_LOOKBACK_DAYS) -> set[str]:
    """Downstreams (lower-cased, as GitHub names are case-insensitive) that acknowledged `sha`."""
    return {r["downstream_repo"].lower() for r in ledger_rows(lake, sha, lookback_days)
            if r["outcome"] == "ok"}


@dataclass
class Outage:
    """What one pass (a run's try, a sensor tick) saw of GitHub. A write GitHub left unanswered, or
    answered only with 5xx, through all the client's retries means GitHub is down: every write after
    it would wait out the same retries, one after the other, to the same end. So the pass sends
    nothing more; what it leaves is in no ledger or in doubt there, and the run's retry (the ledgers
    skip what is done and look up what is in doubt) writes it, once."""

    cause: str = ""

    @property
    def down(self) -> bool:
        return bool(self.cause)

    def saw(self, cause: str) -> None:
        self.cause = self.cause or cause or "no answer"

    def line(self, waiting: int) -> str:
        """What the pass says, once."""
        return outage_line(self.cause[:300], f"{waiting} dispatch(es) or check run(s)", "the run's retry")


def github_unavailable(exc: BaseException) -> bool:
    """Whether an error is GitHub not answering, not a refusal: no answer or a 5xx through the client's
    retries (`resources.github.unavailable`), or a check run's create left in doubt (a write is not
    retried on a 5xx, and the lookup that settles it would meet the same outage)."""
    return unavailable(exc) or (isinstance(exc, GitHubError) and exc.ambiguous)


def unanswered(outcome: RepoOutcome) -> bool:
    """A dispatch GitHub did not answer through the client's retries, or a send failing on a 5xx."""
    return outcome.outcome == UNANSWERED or (outcome.outcome == "failed" and (outcome.status_code or 0) >= 500)


def unanswered_last(targets: list[AllowlistEntry], rows: list[dict]) -> list[AllowlistEntry]:
    """The targets, those GitHub left unanswered or failed before last: a pass stops at its first
    unanswered send, and a repository GitHub fails on alone must not hold the others back on every
    try."""
    tried = {r["downstream_repo"].lower() for r in rows if r["outcome"] in (UNANSWERED, "failed")}
    return sorted(targets, key=lambda t: t.repo.lower() in tried)


def dispatch_event(github: GitHubResource, lake: Lake, event: Dispatch,
                   targets: Iterable[AllowlistEntry], run_id: str,
                   log: Callable[[str], None] = lambda s: None,
                   settle_s: float = CLAIM_SETTLE_S, deadline: float | None = None,
                   outage: Outage | None = None) -> list[RepoOutcome]:
    """Send `event` to each target not yet acknowledged nor in doubt, recording every attempt.

    Targets go one after the other, each claimed just before its own send, so a crash leaves
    at most the one being sent in doubt. A refusal or failure of one downstream never stops
    the others; the caller decides what a `failed` or `unanswered` outcome means for the run (it
    retries them).
    Past `deadline` (time.monotonic()), as a sensor tick that must end has, no new target is
    started: the rest are `deferred`, for a run to send. So too once GitHub is seen down in this
    pass (`outage`, shared by the pass's events): the first dispatch it did not answer stops them.
    Targets an earlier pass left unanswered go last (`unanswered_last`).
    """
    rows, outage = event_rows(lake, event), outage or Outage()
    targets, states = unanswered_last(list(targets), rows), target_states(rows)
    skipped = {"ok": "already_acknowledged", "in_doubt": "in_doubt"}
    outcomes = []
    for target in targets:
        state = states.get(target.repo.lower(), "open")
        if state in skipped:
            outcomes.append(RepoOutcome(target.repo, target.level, skipped[state]))
            continue
        if outage.down or (deadline is not None and time.monotonic() > deadline):
            outcomes.append(RepoOutcome(target.repo, target.level, "deferred", error=outage.cause[:200]))
            continue
        attempt_id = uuid.uuid4().hex
        if not github.dry_run:
            lost = settle_claim(lambda outcome: _record(lake, event, target, outcome, run_id, attempt_id),
                                lambda: event_rows(lake, event), target.repo, attempt_id, settle_s)
            if lost:
                outcomes.append(RepoOutcome(target.repo, target.level, lost))
                continue
        outcome = _attempt(github, target, event, attempt_id)
        _log_outcome(github, event, target, outcome, log)
        _record(lake, event, target, outcome.outcome, run_id, attempt_id, outcome)
        outcomes.append(outcome)
        if unanswered(outcome):
            outage.saw(outcome.error)
    return outcomes


def _record(lake: Lake, event: Dispatch, target: AllowlistEntry, outcome: str, run_id: str,
            attempt_id: str, result: RepoOutcome | None = None) -> dict:
    row = {
        "sha": event.sha, "upstream_repo": event.upstream_repo,
        "downstream_repo": target.repo, "level": target.level, "event_type": event.event_type,
        "delivery_id": event.delivery_id, "source": event.source,
        "attempted_at": _utc_now(), "status_code": result.status_code if result else None,
        "outcome": outcome, "error": result.error if result else "",
        "http_attempts": result.http_attempts if result else 0,
        "waited_s": result.waited_s if result else 0.0, "run_id": run_id, "attempt_id": attempt_id,
        "check_run_wanted": target.repo.lower() in event.check_run_wanted,
        "content_key": event.content_key or None,
    }
    record_attempt(lake, row)
    return row


def settle_claim(write: Callable[[str], object], read: Callable[[], list[dict]], key: str, attempt_id: str,
                 settle_s: float, field: str = "downstream_repo", max_skew_s: float = CLAIM_SETTLE_S / 2) -> str:
    """Write this writer's claim (`write("claimed")`), wait `settle_s`, read the rows back (`read`):
    why it must not send (`claim_lost`), "" when it may. A claim that lost is withdrawn
    (`write(WITHDRAWN)`): left open, it would keep the target in doubt after the winner's own
    attempt failed, and nothing would send it again.

    Or "deferred", the claim withdrawn (`write(WITHDRAWN)`, which settles it) and the target left
    to the next attempt: this claim took so long to write that a racer stamped after it may have
    read the ledger before it was there (a racer's read comes `settle_s` after its stamp; clocks up
    to `max_skew_s` apart), and such a racer's claim is there. That racer thought itself first and
    sends; this writer must not. A slow write with no such racer sends, so a slow store only delays
    a race."""
    _load_time_zones()
    start = time.monotonic()
    write("claimed")
    took = dt.timedelta(seconds=time.monotonic() - start)
    time.sleep(settle_s)
    rows = [r for r in read() if r[field].lower() == key.lower()]
    lost = claim_lost(rows, key, attempt_id, field)
    if lost:
        write(WITHDRAWN)
        return lost
    mine = next(r["attempted_at"] for r in rows if r.get("attempt_id") == attempt_id)
    missed_until = mine + took - dt.timedelta(seconds=settle_s - max_skew_s)
    settled = {r.get("attempt_id") for r in rows if r["outcome"] != "claimed"}
    racers = [r for r in rows if r["outcome"] == "claimed" and r.get("attempt_id") not in settled | {attempt_id}
              and mine <= r["attempted_at"] < missed_until]
    if not racers:
        return ""
    write(WITHDRAWN)
    return "deferred"


@functools.cache
def _load_time_zones() -> None:
    """The first UTC timestamp a process puts in a table loads the zone database (~0.25 s), which
    would count as the claim's write time: loaded before the clock starts."""
    pa.Table.from_pylist([{"at": _utc_now()}], schema=pa.schema([("at", pa.timestamp("ms", tz="UTC"))]))


def claim_lost(rows: list[dict], repo: str, attempt_id: str, field: str = "downstream_repo") -> str:
    """Why this writer must not send after all ("" when its claim stands): another writer's
    attempt was acknowledged meanwhile, or an earlier claim has no outcome yet (a racer about
    to send, or one that died sending: in doubt either way)."""
    rows = [r for r in rows if r[field].lower() == repo.lower()]
    if any(r["outcome"] == "ok" for r in rows):
        return "already_acknowledged"
    settled = {r.get("attempt_id") for r in rows if r["outcome"] != "claimed"}
    open_claims = [r for r in rows if r["outcome"] == "claimed" and r.get("attempt_id") not in settled]
    first = min(open_claims, key=lambda r: (r["attempted_at"], r.get("attempt_id") or ""), default=None)
    return "" if first is not None and first.get("attempt_id") == attempt_id else "claimed_elsewhere"


def _log_outcome(github: GitHubResource, event: Dispatch, target: AllowlistEntry,
                 outcome: RepoOutcome, log: Callable[[str], None]) -> None:
    if outcome.outcome == "dry_run":
        log(f"DRY RUN: would POST {github.api_url.rstrip('/')}/repos/{target.repo}/dispatches "
            f"event_type={event.event_type} sha={event.sha} delivery={event.delivery_id} "
            f"({target.level}) (set GITHUB_TOKEN to send)")
        return
    detail = outcome.error or (f"HTTP {outcome.status_code}" if outcome.status_code else "")
    log(f"dispatch {event.event_type} {event.sha[:12]} -> {target.repo} ({target.level}): "
        f"{outcome.outcome}" + (f" ({detail})" if detail else ""))


def _attempt(github: GitHubResource, target: AllowlistEntry, event: Dispatch, attempt_id: str) -> RepoOutcome:
    try:
        result = github.dispatch(target.repo, event.event_type, event.client_payload)
    except ValueError as exc:  # a payload GitHub would reject: sending again cannot help
        return RepoOutcome(target.repo, target.level, "refused", None, str(exc), attempt_id=attempt_id)
    except GitHubError as exc:  # e.g. an App installation token that could not be minted
        return RepoOutcome(target.repo, target.level, "failed", exc.status, str(exc), attempt_id=attempt_id)
    if result.dry_run:
        outcome = "dry_run"
    elif result.ok:
        outcome = "ok"
    elif result.refused:
        outcome = "refused"
    else:
        outcome = UNANSWERED if result.unanswered else "failed"
    return RepoOutcome(target.repo, target.level, outcome, result.status, result.error,
                       result.attempts, result.waited_s, attempt_id)


def refusal_line(o: RepoOutcome, sha: str) -> str:
    """The warning of a refused dispatch, with what to change: a refusal answers the same every
    run until someone does (the credentials, their access, or the allowlist's name of a repository)."""
    error = GitHubError(o.status_code, o.error)
    fix = refusal_fix(error, o.repo, "Contents: read and write")
    if fix is None and o.status_code == 404:
        fix = (f"GitHub shows these credentials no repository {o.repo} (deleted, moved, or not visible to them: a "
               "private repository, or the GitHub App not installed there): correct its name in the allowlist, or "
               "give the credentials access to it")
    line = f"{o.repo} refused the dispatch of {sha} (HTTP {o.status_code}): {o.error}"
    return line + (f"; to fix: {fix}" if fix else "")


def outcome_table(outcomes: Iterable[RepoOutcome]) -> str:
    """A markdown table of the per-downstream outcomes, for the run's metadata."""
    lines = ["| downstream | level | outcome | HTTP | error |", "|---|---|---|---|---|"]
    for o in outcomes:
        error = o.error.replace("|", "\\|")[:120]
        lines.append(f"| {o.repo} | {o.level} | {o.outcome} | {o.status_code or ''} | {error} |")
    return "\n".join(lines)
