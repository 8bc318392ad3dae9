"""Where the comments go: GitHub (with credentials and `drci.enabled`), and always `drci/<pr>.md`.

Only open pull requests are written, and only when the body changed (a refresh every few
minutes leaves an unchanged `drci/<pr>.md` as it is); a closed one keeps its last comment. Only the partitions of
today and yesterday (UTC) write anything: a backfill of older days recomputes `drci_comments`
but must not put an old day's verdicts back on pull requests, nor over a newer `drci/<pr>.md`. Every post is a row of
the `drci_posts` ledger (pr, head_sha, action, comment_id, body_sha256, error). The ledger saves
requests, not correctness: a pull request whose last recorded body is the one about to be posted
is skipped without a request, and anything else goes through `post.upsert`, which finds the
comment on GitHub itself. So a body costs one list request and at most one write when it changed,
and nothing while it does not.

A comment a maintainer deleted is posted again, once: GitHub sends an `issue_comment` webhook
(action `deleted`) that the lake keeps in `webhook_events`, and a pull request whose last recorded
comment is among the deleted ones is not skipped (counted `restored`): `upsert` finds none and
creates it, and the ledger then records the new comment, so the deletion is acted on once. Asking
GitHub instead whether each comment is still there at every refresh would cost a request per pull
request per refresh; the webhooks cost none. A deletion whose webhook was lost (or not subscribed)
is found by a look instead: the comments the ledger has not seen for VERIFY_AFTER (posted, or looked
at), at most VERIFY_PER_RUN a run, the longest unseen first, are asked about in one GraphQL `nodes`
query by the node ids their posts recorded (`post.shown`; a row written before the ledger kept node
ids gets one GET, which gives the id), with those unseen for RIDE_ALONG_AFTER riding along. Found
with its body, a `verified` row restarts the wait; gone (GitHub no longer resolves it) or showing
another body, it goes through `upsert` like any change, which lists the comments before it writes,
so a crash or a rerun still posts once. So a lost deletion costs the pull request its comment for
VERIFY_AFTER at most (plus the runs the per-run bound delays it), and the looks cost a query per
VERIFY_PER_RUN comments due: 500 open pull requests, about 20 requests a day (a GET each cost about
2 000; `make bench-drci`). Conditional GETs (a 304 is free) would not do: an ETag holds for the
token that read it, and an App's installation token changes every hour.

A partition older than the newest one (yesterday's, recomputed by the daily run after midnight or by
a late file's refresh) speaks for yesterday's heads as of the end of yesterday. A pull request that
a newer `drci_comments` or `pr_jobs` partition lists is that partition's to publish: when its head
or state there differs (pushed again, closed since) yesterday's comment is outdated, and when it is
the same the newer partition's comment is the one to show. Either way it is skipped and counted
(`outdated`, `superseded`), so yesterday never overwrites today's comment, nor posts on a pull
request closed since. Before any newer partition exists, a `pull_request` webhook received after
the day that gives another head or state makes the row `outdated` as well.

When GitHub answers a create as another account than `drci.author` (post.WrongAuthor: the comment
is deleted again), the ledger keeps a `wrong_author` row with the author, the account GitHub
answered as and a digest of the credentials (never the secret). Later runs that have the same
author and credentials post nothing and say what to set, instead of creating and deleting a
comment on every refresh (each one notifying the pull request's subscribers); setting the author
GitHub answered as, or other credentials, resumes posting. The stop must hold however long no run
happened (a paused deployment's first run back would otherwise create and delete a comment), so it is
not looked for in the ledger's lookback: the newest stop per author and credentials is kept in a
small file of its own beside the ledger (`AUTHOR_STOPS`), written before the ledger row, and read by
every run in place of the ledger. A file per stop, so that no run ever rewrites a stop another run
wrote (two runs, a refresh and a daily run, may post at once). The ledger stays the truth: a ledger
written before these files, or a stop's file damaged, makes one read of every day of the ledger.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa

from resources.github import GitHubError, GitHubResource, outage_line, refusal_fix
from resources.lake import Lake, connect
from resources.sql import Columns
from resources.storage import Store
from torchci_assets.derived.drci.build import TABLE as COMMENTS
from torchci_assets.derived.drci.extracts import DELETED_SOURCE, deleted_comment_ids
from torchci_assets.derived.drci.inputs import register_with, rows
from torchci_assets.derived.drci.post import StopPosting, WrongAuthor, shown, shows, upsert, utc_now
from torchci_assets.publishing import write_if_changed

LEDGER = "drci_posts"
OUTPUT_DIR = "drci"
LEDGER_SCHEMA = pa.schema([
    ("pr", pa.int64()), ("head_sha", pa.string()), ("action", pa.string()), ("comment_id", pa.int64()),
    ("body_sha256", pa.string()), ("error", pa.string()), ("at", pa.timestamp("ms", tz="UTC")),
    # of a `wrong_author` row: drci.author, the account GitHub answered as, the credentials' digest
    ("author", pa.string()), ("answered_as", pa.string()), ("credentials", pa.string()),
    # of a post or a look: the comment's GraphQL node id, which the looks ask by (`post.shown`)
    ("node_id", pa.string()),
])
LEDGER_LOOKBACK_DAYS = 14
# the action of a post that met another run's comment: the next run lists the comments and corrects the body
RACED = "raced"
# a look (one GET) found the recorded comment with its body; each pull request's is looked at once per
# VERIFY_AFTER without a post, at most VERIFY_PER_RUN a run (see the module docstring)
VERIFIED = "verified"
VERIFY_AFTER = dt.timedelta(hours=6)
VERIFY_PER_RUN = 100  # one GraphQL query (post.LOOK_BATCH)
# unseen this long, a comment is looked at with those due (`due_looks`)
RIDE_ALONG_AFTER = VERIFY_AFTER / 2
# the ledger's columns added after partitions were written (read as NULL from those)
LEDGER_ADDED = Columns({"author": "VARCHAR", "answered_as": "VARCHAR", "credentials": "VARCHAR", "node_id": "VARCHAR"})
# the newest wrong-author stop per author and credentials, over the whole ledger, a file each (see the
# module docstring), and the mark that the ledger's stops were written there (a ledger older than they)
AUTHOR_STOPS = f"{LEDGER}/_author_stops"
AUTHOR_STOPS_SCANNED = f"{AUTHOR_STOPS}/_scanned.json"
# The newer partitions that take a pull request over from an older one, and the query listing their heads.
NEWER_VIEWS = ((COMMENTS, "newer_comments"), ("pr_jobs", "newer_pr_jobs"))


@dataclass
class PublishReport:
    dry_run: bool
    actions: dict[str, int] = field(default_factory=dict)
    files: int = 0
    unchanged_files: int = 0  # of `files`: left as they were (same body)
    failed: dict[int, str] = field(default_factory=dict)
    stopped: str = ""  # why posting stopped for every pull request in this run, if it did
    dry_run_reason: str = ""  # why nothing was posted: no credentials, or drci.enabled is false

    def add(self, action: str) -> None:
        self.actions[action] = self.actions.get(action, 0) + 1


# The actions that count pull requests left alone (no post, no file), not posts.
SKIPS = ("closed", "outdated", "superseded", "backfill")


def publish_metadata(report: PublishReport) -> dict:
    """The report's counts as the UI shows them, named for what was done: `prs_skipped_<why>` for
    pull requests left alone (`posts_closed` would read as posts that closed something), what a dry run
    would post, and `posts_<outcome>` for the posts made."""
    def key(action: str) -> str:
        if action in SKIPS:
            return f"prs_skipped_{action}"
        return "dry_run_would_post_or_edit" if action == "dry_run" else f"posts_{action}"
    return {key(a): n for a, n in sorted(report.actions.items())}


def body_hash(body: str) -> str:
    return hashlib.sha256(body.encode()).hexdigest()


def credentials_key(github: GitHubResource) -> str:
    """Which credentials post, as a digest (the ledger never holds a secret): a stop found with
    one set of credentials says nothing of another."""
    ident = f"app:{github.app_id}" if github.app_id else f"token:{github.token or ''}"
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class AuthorStop:
    """A `wrong_author` row of the ledger: these credentials post as `answered_as`, not as `author`."""

    author: str
    answered_as: str
    pr: int
    day: dt.date
    error: str

    def message(self) -> str:
        return (f"drci.author is {self.author!r}, but these credentials post as {self.answered_as!r} (found on "
                f"{self.day}, PR #{self.pr}, the comment deleted again): set drci.author to {self.answered_as!r}, "
                f"or post with {self.author!r}'s credentials; nothing is posted until then")


def _stop_key(author: str, credentials: str) -> str:
    return f"{author.lower()} {credentials}"


def _scan_author_stops(lake: Lake) -> dict[str, dict]:
    """The newest `wrong_author` row per author and credentials in every day of the ledger: what the
    stops' files are rebuilt from, at a cost of a read of the whole ledger (once, not every run)."""
    con = connect()
    try:
        if not register_with(con, lake, LEDGER, lake.days(LEDGER), "lp", LEDGER_ADDED):
            return {}
        found = rows(con, "author_stop")
    finally:
        con.close()
    return {_stop_key(r["author"], r["credentials"]): {
        "pr": r["pr"], "answered_as": r["answered_as"], "error": r["error"] or "", "day": str(r["day"]),
        "at": r["at"].isoformat() if r["at"] else ""} for r in found}


def stop_path(key: str) -> str:
    """The file of the stop of one author and credentials (`_stop_key`), named by a digest of it."""
    return f"{AUTHOR_STOPS}/{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"


def _parse_stop(data: bytes) -> dict:
    stop = json.loads(data)
    if not isinstance(stop, dict) or not isinstance(stop["answered_as"], str) or not isinstance(stop["pr"], int):
        raise ValueError("not a wrong-author stop")
    return stop


def _keep_stops(lake: Lake, stops: dict[str, dict]) -> None:
    """Each stop in its own file: a run writes only the stops it learned, never another's."""
    for key, stop in stops.items():
        lake.store.write_bytes(stop_path(key), json.dumps({**stop, "key": key}, sort_keys=True).encode())


def _rebuilt(lake: Lake) -> None:
    """Every stop the ledger holds written to its file, then the mark that this was done."""
    _keep_stops(lake, _scan_author_stops(lake))
    lake.store.write_bytes(AUTHOR_STOPS_SCANNED, b"{}")


def remember_stops(lake: Lake, ledger: list[dict]) -> None:
    """Keep the ledger rows' wrong-author stops (before the rows themselves are written: a crash
    between the two leaves the stop remembered, the safe side)."""
    _keep_stops(lake, {_stop_key(r["author"], r["credentials"]): {
        "pr": r["pr"], "answered_as": r["answered_as"], "error": r.get("error") or "", "day": r["day"],
        "at": r["at"].isoformat()} for r in ledger if r.get("action") == "wrong_author"})


def author_stop(lake: Lake, day: str, author: str | None, credentials: str) -> AuthorStop | None:
    """The newest stop for this author and these credentials, however old, or None. `day` is the
    partition publishing (a stop found since applies to it too)."""
    if author is None:
        return None
    path = stop_path(_stop_key(author, credentials))
    if not lake.store.exists(AUTHOR_STOPS_SCANNED) and lake.days(LEDGER):
        _rebuilt(lake)  # a ledger older than the stops' files: its stops are looked for once
    r = lake.read_record(path, _parse_stop)
    if r is None and lake.store.exists(path):  # damaged: the ledger says again
        _rebuilt(lake)
        r = lake.read_record(path, _parse_stop)
    if r is None:
        return None
    return AuthorStop(author, r["answered_as"], r["pr"], dt.date.fromisoformat(r["day"]), r.get("error") or "")


def _stopped(stop: AuthorStop, open_rows: list[dict], report: PublishReport, log: Callable[[str], None]) -> None:
    """A run the remembered stop holds: nothing posted, the reason said."""
    report.stopped = stop.message()
    report.failed.update({r["pr"]: "stopped: wrong author" for r in open_rows})
    log(f"Dr. CI posting STOPPED: {report.stopped}")


def _stop_fields(e: StopPosting, credentials: str) -> dict:
    """The ledger fields of the row a stop writes: `wrong_author`, remembered by later runs, or `failed`."""
    if isinstance(e, WrongAuthor):
        return {"action": "wrong_author", "comment_id": e.comment_id, "error": str(e)[:500], "author": e.author,
                "answered_as": e.login, "credentials": credentials}
    return {"action": "failed", "error": str(e)[:500]}


@dataclass(frozen=True)
class LastPost:
    """A pull request's latest successful ledger row: what was posted, and where."""

    body_sha256: str
    comment_id: int | None
    at: dt.datetime | None = None   # when the ledger last saw the comment: posted, or looked at
    node_id: str | None = None      # its GraphQL id (None in a row written before the ledger kept it)


def last_posted(lake: Lake, day: str) -> dict[int, LastPost]:
    """pr -> the body hash and comment id its latest successful ledger row recorded (no body after a
    raced post: GitHub may show the other run's)."""
    first = (dt.date.fromisoformat(day) - dt.timedelta(days=LEDGER_LOOKBACK_DAYS)).isoformat()
    days = [d for d in lake.days(LEDGER) if d >= first]
    if not days:
        return {}
    con = connect()
    try:
        if not register_with(con, lake, LEDGER, days, "lp", LEDGER_ADDED):
            return {}
        return {r["pr"]: LastPost("" if r["action"] == RACED else r["body_sha256"], r["comment_id"], r["at"],
                                  r["node_id"]) for r in rows(con, "last_posted")}
    finally:
        con.close()


def deleted_comments(lake: Lake, day: str, comment_ids: set[int]) -> set[int]:
    """Those of `comment_ids` whose deletion GitHub's webhooks reported over the ledger's lookback
    (a ledger row older than that is not read, so neither is an older deletion). Every publish asks,
    so the files read before are not read again (`extracts.deleted_comment_ids`)."""
    first = (dt.date.fromisoformat(day) - dt.timedelta(days=LEDGER_LOOKBACK_DAYS)).isoformat()
    days = [d for d in lake.days(DELETED_SOURCE) if first <= d <= day]
    if not comment_ids or not days:
        return set()
    return comment_ids & deleted_comment_ids(lake, days)


@dataclass
class Recorded:
    """What the ledger and the webhooks say of the rows about to be posted (`unchanged_posts`)."""

    done: dict[int, str]          # pr -> body hash of each comment already showing its row's body
    deleted: set[int]             # the pull requests whose comment with this very body was deleted
    # of `done`, pr -> the comment id and node id to look at (`due_looks`)
    due: dict[int, tuple[int, str | None]] = field(default_factory=dict)


def unchanged_posts(lake: Lake, day: str, open_rows: list[dict], now: dt.datetime) -> Recorded:
    """The rows whose comment already shows their body (posted last, per the ledger, and not deleted
    since, per the webhooks; those cost no request but a look when due), and the pull requests whose
    comment with this very body was deleted (posted again: restored)."""
    done = last_posted(lake, day)
    same = {r["pr"]: done[r["pr"]] for r in open_rows
            if r["pr"] in done and done[r["pr"]].body_sha256 == body_hash(r["body"])}
    gone = deleted_comments(lake, day, {p.comment_id for p in same.values() if p.comment_id is not None})
    kept = {pr: p for pr, p in same.items() if p.comment_id not in gone}
    return Recorded({pr: p.body_sha256 for pr, p in kept.items()}, {pr for pr, p in same.items() if p.comment_id in gone},
                    due_looks(kept, now))


def due_looks(posts: dict[int, LastPost], now: dt.datetime) -> dict[int, tuple[int, str | None]]:
    """pr -> comment id and node id of the posts unseen for VERIFY_AFTER, the VERIFY_PER_RUN longest
    unseen; when any is due, those with a node id unseen for RIDE_ALONG_AFTER come in the same GraphQL
    query (free beside it): looks due one by one across runs would otherwise cost a query each."""
    seen = sorted((p.at, pr) for pr, p in posts.items() if p.comment_id is not None and p.at is not None)
    if not seen or now - seen[0][0] < VERIFY_AFTER:
        return {}
    due = [pr for at, pr in seen if now - at >= VERIFY_AFTER
           or (now - at >= RIDE_ALONG_AFTER and posts[pr].node_id is not None)]
    return {pr: (posts[pr].comment_id, posts[pr].node_id) for pr in due[:VERIFY_PER_RUN]}


def newer_heads(lake: Lake, day: str) -> dict[int, set[tuple[str, str]]]:
    """pr -> its (head_sha, pr_state) in the newest `drci_comments` and `pr_jobs` partitions after
    `day` (empty when `day` is the newest of both): what a newer partition already covers."""
    found: dict[int, set[tuple[str, str]]] = {}
    con = connect()
    try:
        for table, query in NEWER_VIEWS:
            newest = max(lake.days(table), default=day)
            if newest > day and lake.register(con, table, [newest], name="nh"):
                for r in rows(con, query):
                    found.setdefault(r["pr"], set()).add((r["head_sha"], r["pr_state"]))
    finally:
        con.close()
    return found


def later_webhooks(lake: Lake, day: str, repo: str) -> dict[int, tuple[str, str]]:
    """pr -> (head_sha, state) of its latest `pull_request` webhook of the days after `day`: a push
    or a close the newer partitions may not have seen yet."""
    days = [d for d in lake.days("pull_request") if d > day]
    con = connect()
    try:
        if not days or not lake.register(con, "pull_request", days, name="nw"):
            return {}
        return {r["pr"]: (r["head_sha"], r["pr_state"]) for r in rows(con, "newer_webhooks", {"repo": repo})}
    finally:
        con.close()


def not_superseded(lake: Lake, day: str, repo: str, open_rows: list[dict], report: PublishReport,
                   log: Callable[[str], None]) -> list[dict]:
    """The rows no newer partition covers; the others are counted as `outdated` (head or state
    changed since) or `superseded` (same head, still open) and left to the newer partition."""
    newer, since = newer_heads(lake, day), later_webhooks(lake, day, repo)
    kept = []
    for r in open_rows:
        mine, seen = (r["head_sha"], "open"), newer.get(r["pr"])
        if since.get(r["pr"], mine) != mine or seen not in (None, {mine}):
            report.add("outdated")
        elif seen is None:
            kept.append(r)
        else:
            report.add("superseded")
    if len(kept) < len(open_rows):
        log(f"{day}: {len(open_rows) - len(kept)} pull request(s) pushed, closed or covered since: left to the newer "
            "partition")
    return kept


def look(github: GitHubResource, repo: str, rows: list[dict],
         seen: Recorded) -> dict[int, tuple[bool | None, str | None]]:
    """pr -> whether its recorded comment shows its row's body, and the comment's node id, for the rows
    due a look (`seen.due`) whose body is the one recorded: those recorded with a node id in one GraphQL
    query per post.LOOK_BATCH (`post.shown`), those recorded without one (by a ledger older than node
    ids) a GET each (`post.shows`), which gives the node id for the next looks."""
    due = {r["pr"]: (*seen.due[r["pr"]], r["body"]) for r in rows
           if r["pr"] in seen.due and seen.done.get(r["pr"]) == body_hash(r["body"])}
    by_node = shown(github, repo, {cid: (node, body) for cid, node, body in due.values() if node})
    return {pr: (by_node[cid], node) if node else shows(github, repo, cid, body)
            for pr, (cid, node, body) in due.items()}


def _looked(r: dict, seen: Recorded, answers: dict[int, tuple[bool | None, str | None]],
            log: Callable[[str], None]) -> str:
    """A recorded row's comment, looked at when due (`look`): `recorded` (not due, or no clear answer:
    looked at again by a later run), `verified` (there, with its body), or `changed` (gone or edited:
    post it)."""
    if r["pr"] not in answers:
        return "recorded"
    there = answers[r["pr"]][0]
    if there is None:
        log(f"PR #{r['pr']}: could not look at its Dr. CI comment {seen.due[r['pr']][0]}; a later run looks again")
        return "recorded"
    return VERIFIED if there else "changed"


def _post_all(github: GitHubResource, repo: str, rows: list[dict], seen: Recorded, report: PublishReport,
              log: Callable[[str], None], author: str | None, credentials: str,
              clock: Callable[[], dt.datetime]) -> list[dict]:
    """Post each row but those `seen.done` lists, unless a look finds its comment gone (`_looked`)."""
    ledger, deleted, answers = [], set(seen.deleted), look(github, repo, rows, seen)
    for i, r in enumerate(rows):
        digest = body_hash(r["body"])
        # a post's row is stamped once it listed the comments (`upsert`), a look's, a stop's or a failure's now
        entry = {"pr": r["pr"], "head_sha": r["head_sha"], "body_sha256": digest, "at": clock()}
        looked = _looked(r, seen, answers, log) if seen.done.get(r["pr"]) == digest else None
        if looked in ("recorded", VERIFIED):
            report.add(looked)
            if looked == VERIFIED:
                ledger.append({**entry, "action": VERIFIED, "comment_id": seen.due[r["pr"]][0],
                               "node_id": answers[r["pr"]][1]})
            continue
        if looked == "changed":
            deleted.add(r["pr"])
        if r["pr"] in deleted:
            log(f"PR #{r['pr']}: its Dr. CI comment was deleted (or edited) on GitHub; posting it again")
        try:
            posted = upsert(github, repo, r["pr"], r["body"], author, clock)
        except StopPosting as e:
            report.stopped = stop_message(e, repo, len(rows) - i)
            log(f"Dr. CI posting STOPPED for this run: {report.stopped}")
            reason = f"HTTP {e.status}" if e.status else str(e)
            report.failed.update({x["pr"]: f"stopped: {reason}" for x in rows[i:]})
            ledger.append({**entry, **_stop_fields(e, credentials)})
            break
        except GitHubError as e:
            log(f"PR #{r['pr']}: the comment could not be posted: {e}")
            report.failed[r["pr"]] = str(e)
            ledger.append({**entry, "action": "failed", "error": str(e)[:500]})
            continue
        report.add(posted.action)
        if r["pr"] in deleted:
            report.add("restored")
        if posted.removed:
            report.add("duplicates_removed")
        ledger.append(_posted_row(entry, posted, report, clock))
    return ledger


def stop_message(e: StopPosting, repo: str, waiting: int) -> str:
    """Why posting stopped, what to do when it does not pass by itself, and how many pull requests
    wait: one line for the run, however many pull requests it holds back."""
    if e.unavailable:
        return outage_line(e, f"{waiting} pull request(s)", "the next run, which posts them")
    fix = refusal_fix(e, repo, "Pull requests: read and write")
    return str(e) + (f"; to fix: {fix}" if fix else "") + f"; {waiting} pull request(s) wait for the next run"


def _posted_row(entry: dict, posted, report: PublishReport, clock: Callable[[], dt.datetime]) -> dict:
    """The ledger row of a post: a raced one (post.Posted.raced) is stamped when it ended, after
    whatever the other run wrote before it, and never vouches for the body (`last_posted`)."""
    if not posted.raced:
        return {**entry, "action": posted.action, "comment_id": posted.comment_id, "node_id": posted.node_id,
                "at": posted.listed_at or entry["at"]}
    report.add("raced")
    return {**entry, "action": RACED, "comment_id": posted.comment_id, "node_id": posted.node_id, "at": clock()}


def _dry_run(outputs: Store, repo: str, open_rows: list[dict], report: PublishReport, enabled: bool,
             log: Callable[[str], None]) -> PublishReport:
    """A dry run counts what a live run would post or edit, whichever of its two causes holds: the
    Dagster UI shows the same count and reason for a missing token as for a switched-off Dr. CI. A
    switched-off Dr. CI is the default, so it logs one line, not one per pull request."""
    why = "no GitHub credentials" if enabled else "drci.enabled is false"
    if enabled:
        for r in open_rows:
            path = outputs.display(f"{OUTPUT_DIR}/{r['pr']}.md")
            log(f"DRY RUN ({why}): would post or edit the Dr. CI comment on {repo}#{r['pr']} ({path})")
    else:
        log(f"DRY RUN ({why}): would post or edit {len(open_rows)} Dr. CI comment(s); written under "
            f"{outputs.display(OUTPUT_DIR)}/ only")
    report.actions["dry_run"] = len(open_rows)
    report.dry_run_reason = why
    return report


def publish(lake: Lake, outputs: Store, github: GitHubResource, day: str, repo: str, rows: list[dict],
            enabled: bool, log: Callable[[str], None] = lambda s: None, author: str | None = None,
            today: dt.date | None = None, clock: Callable[[], dt.datetime] = utc_now) -> PublishReport:
    """Write `drci/<pr>.md` for every open pull request and post the changed bodies (see the module
    docstring); returns what was done. `clock`: the time the ledger's rows are stamped with."""
    open_rows = [r for r in rows if r["pr_state"] == "open"]
    report = PublishReport(dry_run=github.dry_run or not enabled)
    today = today or dt.datetime.now(dt.timezone.utc).date()
    if dt.date.fromisoformat(day) < today - dt.timedelta(days=1):
        log(f"{day} is older than yesterday (a backfill): drci_comments recomputed, nothing posted or written")
        report.actions["backfill"] = len(open_rows)
        return report
    report.actions["closed"] = len(rows) - len(open_rows)
    if dt.date.fromisoformat(day) < today:  # today's partition is the newest: nothing can supersede it
        open_rows = not_superseded(lake, day, repo, open_rows, report, log)
    for r in open_rows:
        report.files += 1
        if not write_if_changed(outputs, f"{OUTPUT_DIR}/{r['pr']}.md", r["body"].encode()):
            report.unchanged_files += 1
    if report.dry_run:
        return _dry_run(outputs, repo, open_rows, report, enabled, log)
    credentials = credentials_key(github)
    stop = author_stop(lake, day, author, credentials)
    if stop is not None:
        _stopped(stop, open_rows, report, log)
        return report
    seen = unchanged_posts(lake, day, open_rows, clock())
    ledger = _post_all(github, repo, open_rows, seen, report, log, author, credentials, clock)
    remember_stops(lake, [{**r, "day": day} for r in ledger])
    if ledger:
        lake.write(LEDGER, day, pa.Table.from_pylist(ledger, schema=LEDGER_SCHEMA),
                   part=f"part-{uuid.uuid4().hex[:12]}")
    return report
