"""Finding new upstream head commits: push webhooks as archive files land, and branch polling.

The relay sends one `repository_dispatch` per push, for the push's head commit (`after`),
exactly like the cross-repo CI relay: a ghstack landing of five commits is one push and one
downstream CI run, not five. Intermediate commits of a push are therefore not dispatched.

What this module decides, and why:
- A branch deletion (`deleted`, `after` = 000...0) has no commit to test: it is skipped and
  reported. A force-push's new head is a new commit like any other and is dispatched, marked
  `forced` so downstreams can tell history was rewritten. A branch creation dispatches its head.
- The archive is read incrementally. The cursor remembers, for the newest few `day=` folders
  only, each file already read and its size; a file is read again only if its size changed
  (a collector still appending). Older days are forgotten, so the cursor stays bounded.
- Deliveries are at-least-once and archive files can overlap, so the same head can be found
  several times: within a tick by sha, and across ticks through a bounded list of the run keys
  already requested. Dagster's run-key dedup is a further net, not the only one.
- A cursor that does not exist yet means "start from now": the files already present are
  marked read without dispatching, so enabling the relay never replays the archive's history
  to every downstream. Their heads are remembered as already requested, so a file that was
  there at the start and grows later yields only its new pushes.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from resources.github import MAX_PAYLOAD_BYTES, payload_bytes
from resources.listing_cache import KeptListings
from resources.storage import Store
from torchci_assets.config import TorchciConfig
from torchci_assets.ingest.lines import iter_lines
from torchci_assets.ingest.payloads import FieldError, from_rest, parse_envelope, push_row
from torchci_assets.ingest.rejects import Reject

EVENT_TYPE = "push"  # downstream workflows listen with `repository_dispatch: types: [push]`
ZERO_SHA = "0" * 40
SHA_RE = re.compile(r"^[0-9a-f]{40}$")
WEBHOOK_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz")
# Day folders the cursor follows: today's and yesterday's, since a file rolled just before
# midnight can land in yesterday's folder a little after it.
LOOKBACK_DAYS = 2
# A few days of PyTorch pushes to its branches; overlapping archive files are hours apart at most.
RECENT_KEYS = 1000
# Sensors must finish in 60 s; files left unread are read on the next tick.
TICK_READ_BUDGET_S = 20.0
# Commit messages can be megabytes; downstreams need the subject and some context.
MESSAGE_CHARS = 2000
MAX_COMMIT_IDS = 20


@dataclass(frozen=True)
class UpstreamCommit:
    """A new head of an upstream branch, with what the dispatch tells downstreams about it."""

    upstream_repo: str
    sha: str
    ref: str
    before: str
    forced: bool
    delivery_id: str
    received_at: str
    source: str  # "webhook" or "poll"
    payload: dict  # what the dispatch carries under `payload`: the push webhook's, or a poll's summary

    @property
    def run_key(self) -> str:
        return f"{self.upstream_repo}@{self.sha}"


@dataclass
class RelayCursor:
    """The sensor's memory between ticks (serialized as compact JSON)."""

    files: dict[str, dict[str, int]] = field(default_factory=dict)  # day -> file path -> size
    recent: list[str] = field(default_factory=list)  # run keys requested, oldest first
    heads: dict[str, str] = field(default_factory=dict)  # ref -> head sha seen by polling
    polled_at: float | None = None

    def to_json(self) -> str:
        return json.dumps({"files": self.files, "recent": self.recent, "heads": self.heads,
                           "polled_at": self.polled_at}, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> "RelayCursor | None":
        """The cursor, or None when there is none yet (the first tick)."""
        if not text:
            return None
        raw = json.loads(text)
        return cls(files=raw.get("files") or {}, recent=raw.get("recent") or [],
                   heads=raw.get("heads") or {}, polled_at=raw.get("polled_at"))

    def remember(self, keys: list[str]) -> None:
        self.recent = (self.recent + keys)[-RECENT_KEYS:]


@dataclass
class ScanReport:
    """What one pass over the archive found, for the sensor's log line."""

    files_read: list[str] = field(default_factory=list)
    files_deferred: int = 0
    push_events: int = 0
    commits: list[UpstreamCommit] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # why a push was not dispatched
    rejects: list[Reject] = field(default_factory=list)


def client_payload(commit: UpstreamCommit) -> dict:
    """The relay's client_payload: `event_type`, `delivery_id` and the GitHub `payload`, which
    downstream validators read, plus the commit's identity at the top level for workflow
    expressions. Nine keys, within GitHub's ten."""
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


def fits_dispatch(body: dict) -> bool:
    """Whether GitHub takes `body` whole as a client_payload, measured on the bytes the client
    sends (`resources.github.payload_bytes`)."""
    try:
        return len(payload_bytes(body)) <= MAX_PAYLOAD_BYTES
    except (TypeError, ValueError):
        return False


def trim_push_payload(payload: dict) -> dict:
    """The push payload without what downstreams do not need, bounded in size, for a push whose
    webhook payload does not fit the dispatch.

    GitHub's push payload is mostly the repository object and up to 20 full commits, and
    repository_dispatch allows 64 KB: keep the fields a downstream workflow reads (ref,
    before/after, flags, the head commit, the repository's name) and only the ids of the
    other commits.
    """
    head = payload.get("head_commit") if isinstance(payload.get("head_commit"), dict) else None
    commits = payload.get("commits") if isinstance(payload.get("commits"), list) else []
    repo = payload.get("repository") if isinstance(payload.get("repository"), dict) else {}
    out = {k: payload.get(k) for k in ("ref", "before", "after", "created", "deleted", "forced",
                                       "base_ref", "compare")}
    out["repository"] = {k: repo.get(k) for k in ("full_name", "html_url", "default_branch")
                         if repo.get(k) is not None}
    pusher = payload.get("pusher")
    if isinstance(pusher, dict):
        out["pusher"] = {"name": pusher.get("name")}
    out["head_commit"] = None if head is None else {
        "id": head.get("id"), "timestamp": head.get("timestamp"), "url": head.get("url"),
        "message": str(head.get("message") or "")[:MESSAGE_CHARS],
        "author": _person(head.get("author")), "committer": _person(head.get("committer")),
    }
    out["commit_count"] = len(commits)
    out["commit_ids"] = [c.get("id") for c in commits[-MAX_COMMIT_IDS:] if isinstance(c, dict)]
    return out


def _person(value) -> dict | None:
    if not isinstance(value, dict):
        return None
    return {k: value.get(k) for k in ("name", "username") if value.get(k) is not None}


def push_commit(payload: dict, delivery_id: str, received_at: dt.datetime,
                config: TorchciConfig) -> tuple[UpstreamCommit | None, str]:
    """The commit a push delivery asks to dispatch, or None and why not ("" when the push is
    simply not for the upstream's configured branches)."""
    try:
        repo, ref, before, after, forced, _created, deleted, *_ = push_row(payload)
    except FieldError as exc:
        return None, f"push {delivery_id}: unreadable: {exc}"
    if (repo or "").lower() != config.upstream_repo.lower() or ref not in config.branches:
        return None, ""
    if deleted or after == ZERO_SHA:
        return None, f"push {delivery_id}: {ref} deleted (before {before}); nothing to dispatch"
    sha = (after or "").lower()
    if not SHA_RE.match(sha):
        return None, f"push {delivery_id}: {ref} has no valid 'after' sha ({after!r})"
    received = received_at.astimezone(dt.timezone.utc).isoformat().replace("+00:00", "Z")
    commit = UpstreamCommit(config.upstream_repo, sha, ref, (before or "").lower(), forced,
                            delivery_id, received, "webhook", payload)
    if not fits_dispatch(client_payload(commit)):  # the relay sends it whole; GitHub would refuse it
        commit = dataclasses.replace(commit, payload=trim_push_payload(payload))
    return commit, ""


def recent_days(store: Store, lookback_days: int = LOOKBACK_DAYS, stream: str = "webhooks") -> list[str]:
    """The newest `lookback_days` day folders of an archive stream.

    Chosen by folder name, not by the wall clock, so a replayed or simulated archive whose
    days are not today's is followed the same way.
    """
    return store.list_days(stream)[-lookback_days:]


def pick_push(line: bytes, config: TorchciConfig) -> tuple[bool, UpstreamCommit | None, str]:
    """For scan_archive: (is a push, the commit to dispatch or None, why not)."""
    event, delivery_id, received_at, payload, env = parse_envelope(line)
    if event != "push":
        return False, None, ""
    if why := from_rest(env):
        return True, None, f"push {delivery_id}: {why}"
    commit, why = push_commit(payload, delivery_id, received_at, config)
    return True, commit, why


# (line, config) -> (counted, item with run_key/received_at/delivery_id or None, why not);
# raises ValueError for an unreadable line.
Picker = Callable[[bytes, TorchciConfig], tuple[bool, object, str]]


def scan_archive(store: Store, cursor: RelayCursor | None, config: TorchciConfig,
                 budget_s: float = TICK_READ_BUDGET_S,
                 clock: Callable[[], float] = time.monotonic,
                 pick: Picker = pick_push, stream: str = "webhooks",
                 max_items: int | None = None,
                 listings: KeptListings | None = None) -> tuple[ScanReport, RelayCursor]:
    """New pushes to the configured branches in files not read before; and the next cursor.

    With no cursor, the files present are recorded as read and nothing is returned (see the
    module's docstring). Files are read in path order until `budget_s` is spent, or until
    `max_items` were found (a tick that acts on what it finds takes no more than it can do);
    the others are left out of the next cursor so the next tick reads them. `pick` says what a
    line asks for (pushes by default: other relay events use their own picker over the same files).
    `listings`: the day folders' earlier walks, for a caller that scans every second or so.
    """
    report = ScanReport()
    days = recent_days(store, stream=stream)
    first_tick = cursor is None
    cursor = cursor or RelayCursor()
    files = {d: dict(cursor.files.get(d, {})) for d in days}
    seen_keys = set(cursor.recent)
    found: dict[str, UpstreamCommit] = {}
    baseline: dict[str, UpstreamCommit] = {}  # heads already in the archive on the first tick
    start = clock()
    for day in days:
        prefix = f"{stream}/day={day}"
        listed = listings.list_files(store, prefix, WEBHOOK_SUFFIXES) if listings else \
            store.list_files(prefix, WEBHOOK_SUFFIXES)
        for entry in listed:
            name = entry.path.split("/", 2)[2]
            if files[day].get(name) == entry.size:
                continue
            if first_tick:
                # Read (within the budget) only to remember the heads already there: if the
                # file grows later, its old pushes are then known and not dispatched.
                if clock() - start <= budget_s:
                    _read_file(store, entry.path, config, ScanReport(), baseline, seen_keys, pick, stream)
                files[day][name] = entry.size
                continue
            if clock() - start > budget_s or (max_items is not None and len(found) >= max_items):
                report.files_deferred += 1
                continue
            _read_file(store, entry.path, config, report, found, seen_keys, pick, stream)
            files[day][name] = entry.size
            report.files_read.append(entry.path)
    report.commits = sorted(found.values(), key=lambda c: (c.received_at, c.delivery_id))
    next_cursor = RelayCursor(files=files, recent=list(cursor.recent), heads=dict(cursor.heads),
                              polled_at=cursor.polled_at)
    next_cursor.remember([c.run_key for c in sorted(baseline.values(), key=lambda c: (c.received_at, c.delivery_id))])
    next_cursor.remember([c.run_key for c in report.commits])
    return report, next_cursor


def _read_file(store: Store, path: str, config: TorchciConfig, report: ScanReport,
               found: dict[str, UpstreamCommit], seen_keys: set[str], pick: Picker = pick_push,
               stream: str = "webhooks") -> None:
    for lineno, line in iter_lines(store, path, stream, report.rejects):
        try:
            counted, item, why = pick(line, config)
        except ValueError as exc:
            report.rejects.append(Reject(stream, f"{path}:{lineno}", str(exc), Reject.sample_of(line)))
            continue
        if not counted:
            continue
        report.push_events += 1
        if item is None:
            if why:
                report.skipped.append(why)
            continue
        if item.run_key in seen_keys:
            continue
        earlier = found.get(item.run_key)
        # The first delivery wins, so a redelivery does not change the delivery id.
        if earlier is None or (item.received_at, item.delivery_id) < (earlier.received_at, earlier.delivery_id):
            found[item.run_key] = item


def poll_commit(github, config: TorchciConfig, ref: str, previous_head: str | None,
                now: dt.datetime) -> UpstreamCommit | None:
    """The branch's head if it moved since `previous_head` (polled with one small request).

    Only the head is dispatched: the commits list does not show where one push ended and the
    next began, and dispatching every commit would double the downstream runs whenever
    webhooks work. The branch's newest head is always relayed; heads a lost webhook would
    have carried between two polls are not reconstructed. One page of one commit is asked
    for, so polling costs one request per branch whatever the branch's history.
    """
    branch = ref[len("refs/heads/"):]
    resp = github.request("GET", f"/repos/{config.upstream_repo}/commits",
                          params={"sha": branch, "per_page": 1})
    commits = resp.json()
    if not commits:
        return None
    head = commits[0]
    sha = str(head.get("sha", "")).lower()
    if not SHA_RE.match(sha) or sha == previous_head:
        return None
    info = head.get("commit") or {}
    author, committer = info.get("author") or {}, info.get("committer") or {}
    payload = {
        "ref": ref, "before": previous_head or "", "after": sha, "created": False, "deleted": False,
        "forced": False, "base_ref": None, "compare": None,
        "repository": {"full_name": config.upstream_repo},
        "head_commit": {"id": sha, "timestamp": committer.get("date"), "url": head.get("html_url"),
                        "message": str(info.get("message") or "")[:MESSAGE_CHARS],
                        "author": {"name": author.get("name")},
                        "committer": {"name": committer.get("name")}},
        "commit_count": 1, "commit_ids": [sha],
    }
    received = now.astimezone(dt.timezone.utc).isoformat().replace("+00:00", "Z")
    return UpstreamCommit(config.upstream_repo, sha, ref, previous_head or "", False, sha,
                          received, "poll", payload)
