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
"""

from __future__ import annotations

import datetime as dt
import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa

from resources.github import GitHubError, GitHubResource
from resources.lake import Lake, connect
from resources.storage import Store
from torchci_assets.derived.drci.inputs import rows
from torchci_assets.derived.drci.post import StopPosting, upsert
from torchci_assets.publishing import write_if_changed

LEDGER = "drci_posts"
OUTPUT_DIR = "drci"
LEDGER_SCHEMA = pa.schema([
    ("pr", pa.int64()), ("head_sha", pa.string()), ("action", pa.string()), ("comment_id", pa.int64()),
    ("body_sha256", pa.string()), ("error", pa.string()), ("at", pa.timestamp("ms", tz="UTC")),
])
LEDGER_LOOKBACK_DAYS = 14


@dataclass
class PublishReport:
    dry_run: bool
    actions: dict[str, int] = field(default_factory=dict)
    files: int = 0
    unchanged_files: int = 0  # of `files`: left as they were (same body)
    failed: dict[int, str] = field(default_factory=dict)

    def add(self, action: str) -> None:
        self.actions[action] = self.actions.get(action, 0) + 1


def body_hash(body: str) -> str:
    return hashlib.sha256(body.encode()).hexdigest()


def last_posted(lake: Lake, day: str) -> dict[int, str]:
    """pr -> the body hash its latest successful ledger row recorded."""
    first = (dt.date.fromisoformat(day) - dt.timedelta(days=LEDGER_LOOKBACK_DAYS)).isoformat()
    days = [d for d in lake.days(LEDGER) if d >= first]
    if not days:
        return {}
    con = connect()
    try:
        if not lake.register(con, LEDGER, days, name="lp"):
            return {}
        return {r["pr"]: r["body_sha256"] for r in rows(con, "last_posted")}
    finally:
        con.close()


def _post_all(github: GitHubResource, repo: str, rows: list[dict], done: dict[int, str], report: PublishReport,
              log: Callable[[str], None], author: str | None) -> list[dict]:
    ledger, now = [], dt.datetime.now(dt.timezone.utc)
    for i, r in enumerate(rows):
        digest = body_hash(r["body"])
        if done.get(r["pr"]) == digest:
            report.add("recorded")
            continue
        entry = {"pr": r["pr"], "head_sha": r["head_sha"], "body_sha256": digest, "at": now}
        try:
            posted = upsert(github, repo, r["pr"], r["body"], author)
        except StopPosting as e:
            left = len(rows) - i
            log(f"GitHub refused ({e}); {left} pull request(s) wait for the next run")
            report.failed.update({x["pr"]: f"stopped: HTTP {e.status}" for x in rows[i:]})
            ledger.append({**entry, "action": "failed", "error": str(e)[:500]})
            break
        except GitHubError as e:
            log(f"PR #{r['pr']}: the comment could not be posted: {e}")
            report.failed[r["pr"]] = str(e)
            ledger.append({**entry, "action": "failed", "error": str(e)[:500]})
            continue
        report.add(posted.action)
        if posted.removed:
            report.add("duplicates_removed")
        ledger.append({**entry, "action": posted.action, "comment_id": posted.comment_id})
    return ledger


def publish(lake: Lake, outputs: Store, github: GitHubResource, day: str, repo: str, rows: list[dict],
            enabled: bool, log: Callable[[str], None] = lambda s: None, author: str | None = None,
            today: dt.date | None = None) -> PublishReport:
    """Write `drci/<pr>.md` for every open pull request and post the changed bodies (see the module
    docstring); returns what was done."""
    open_rows = [r for r in rows if r["pr_state"] == "open"]
    report = PublishReport(dry_run=github.dry_run or not enabled)
    today = today or dt.datetime.now(dt.timezone.utc).date()
    if dt.date.fromisoformat(day) < today - dt.timedelta(days=1):
        log(f"{day} is older than yesterday (a backfill): drci_comments recomputed, nothing posted or written")
        report.actions["backfill"] = len(open_rows)
        return report
    report.actions["closed"] = len(rows) - len(open_rows)
    for r in open_rows:
        report.files += 1
        if not write_if_changed(outputs, f"{OUTPUT_DIR}/{r['pr']}.md", r["body"].encode()):
            report.unchanged_files += 1
    if not enabled:
        log(f"drci.enabled is false: {len(open_rows)} comment(s) written under {outputs.display(OUTPUT_DIR)}/ only")
        return report
    if github.dry_run:
        for r in open_rows:
            path = outputs.display(f"{OUTPUT_DIR}/{r['pr']}.md")
            log(f"DRY RUN (no GitHub credentials): would post or edit the Dr. CI comment on {repo}#{r['pr']} ({path})")
        report.add("dry_run")
        return report
    ledger = _post_all(github, repo, open_rows, last_posted(lake, day), report, log, author)
    if ledger:
        lake.write(LEDGER, day, pa.Table.from_pylist(ledger, schema=LEDGER_SCHEMA),
                   part=f"part-{uuid.uuid4().hex[:12]}")
    return report
