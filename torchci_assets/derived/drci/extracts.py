"""What Dr. CI reads of the day's big tables, extracted once per file (`resources.lake_extracts`):
a refresh scans only the files that are new or rewritten since the last run, not the window.

Dr. CI reads a few thousand rows of `test_results` (the failures, sql/test_failures.sql), of
`webhook_events` (the pull requests' base shas, sql/pr_bases.sql, and the commits that landed them,
sql/pr_merges.sql) and of `workflow_job` (the
failed jobs' conclusions, sql/job_failures.sql) out of millions, over a window of days, every few
minutes. Their extracts are kept beside the comments, under `drci_comments`.

The comments deleted on GitHub (sql/deleted_comments.sql) are read over the posts ledger's 14
days of `webhook_events` at every publish, and they are a handful: naming an extract per file
reads every file's footer, some 700 reads a refresh on S3 for nothing new. So their ids are kept
in one small record instead (`deleted_comment_ids`), per source file as its listing shows it
(size and version, once settled: `lake_extracts.settled_version`), and only a file new or
rewritten since is read: a refresh lists the window's folders and reads the files that landed
since the last one.
"""

from __future__ import annotations

import hashlib
import json
import time

from resources.lake import Lake, connect
from resources import lake_extracts
from resources.lake_extracts import Extract, settled_version
from resources.sql import SqlFiles, relation

SQL = SqlFiles(__file__)
HOME = "drci_comments"  # the table beside whose partitions the extracts are kept

FAILURES = Extract("test_failures", "test_results", HOME, SQL)
PR_BASES = Extract("pr_bases", "webhook_events", HOME, SQL)
JOB_FAILURES = Extract("job_failures", "workflow_job", HOME, SQL)
PR_MERGES = Extract("pr_merges", "webhook_events", HOME, SQL)
# extracts an earlier version kept here and no version reads now: their files go when a build lists
# their folder (`lake_extracts.ExtractPass`). The deleted comments' ids are kept in a record instead.
RETIRED = frozenset({"deleted_comments"})

DELETED_SOURCE = "webhook_events"
# the record of the deleted comments' ids per webhook_events file (hidden from drci_comments' readers)
DELETED_RECORD = f"{HOME}/_deleted_comments.json"


def deleted_comment_ids(lake: Lake, days: list[str]) -> set[int]:
    """The ids of the comments GitHub's `issue_comment` webhooks (action `deleted`) say were
    deleted, over `days` of webhook_events. A file whose size and version are those the record
    keeps is not read; the record is rewritten when a file came, changed or went. It is a cache:
    lost, stale or written by a run racing this one, it costs a read of the files it does not
    vouch for, never a wrong answer."""
    query = hashlib.sha256(SQL["deleted_comments"].encode()).hexdigest()[:16]
    before = lake.read_record(DELETED_RECORD, _parse_record) or {}
    kept = before.get("files", {}) if before.get("query") == query else {}
    listed: dict[str, list] = {}
    settled_before_ns = time.time_ns() - lake_extracts.SETTLED_S * 1_000_000_000
    for day in days:
        for entry in lake.store.list_files(f"{DELETED_SOURCE}/day={day}", (".parquet",)):
            if not entry.refused:
                version = settled_version(entry, settled_before_ns)  # None: read it, keep nothing of it
                seen = kept.get(entry.path) if version else None
                listed[entry.path] = seen if seen is not None and seen[0] == version else [version, None]
    unread = [path for path, (_, ids) in listed.items() if ids is None]
    if unread:
        for path, ids in read_deleted(lake, unread).items():
            listed[path][1] = ids
    # the days after these (today's, while yesterday's partition publishes) stay for their next look
    now = {**{p: v for p, v in kept.items() if _day_of(p) > max(days, default="")},
           **{p: v for p, v in listed.items() if v[0] is not None}}
    if now != kept or before.get("query") != query:
        lake.store.write_bytes(DELETED_RECORD, json.dumps({"query": query, "files": now}, sort_keys=True).encode())
    return {i for _, ids in listed.values() for i in ids}


def _day_of(path: str) -> str:
    """The day of a webhook_events file's path (webhook_events/day=D/...)."""
    return path.split("/day=", 1)[-1].split("/", 1)[0]


def read_deleted(lake: Lake, paths: list[str]) -> dict[str, list[int]]:
    """Per webhook_events file (a path in the lake), the sorted ids of the comments it says were deleted."""
    out = {}
    con = connect()
    try:
        for path in paths:
            lake.register_files(con, [lake.store.full(path)], "src")
            ids = relation(con, SQL["deleted_comments"]).fetchall()
            out[path] = sorted({int(r[0]) for r in ids if r[0] is not None})
    finally:
        con.close()
    return out


def _parse_record(data: bytes) -> dict:
    record = json.loads(data)
    files = record["files"]
    if not isinstance(record["query"], str) or not all(
            isinstance(v, list) and len(v) == 2 and isinstance(v[0], str) and isinstance(v[1], list)
            and all(isinstance(i, int) for i in v[1]) for v in files.values()):
        raise ValueError("not a record of deleted comments")
    return record
