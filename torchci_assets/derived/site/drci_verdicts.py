"""Dr. CI's class of each failing job of a head, as the HUD's kinds.

A pull request's HUD page carries the Dr. CI comment of its head: its jobs table must not call a
job "broken on main" that the comment, a few lines below, calls a new failure (pr_jobs judges by
main's state when the job started, Dr. CI by the merge base and its neighbours). `drci_comments`
keeps each failing job's class beside the body (its `jobs` column), every job of the head, also
those a very long body leaves out. A row written before that column existed lists none, and its
jobs keep pr_jobs' own judgement until the next refresh writes the row again.
"""

from __future__ import annotations

import pyarrow as pa

from torchci_assets.derived.drci import classify as drci

# Dr. CI's class -> the HUD's kind of the same failure (runs awaiting approval are not jobs)
CLASS_KINDS = {drci.NEW: "new", drci.BROKEN_TRUNK: "broken_on_main", drci.FLAKY: "known_flaky",
               drci.UNSTABLE: "unstable", drci.INFRA: "infra", drci.CANCELLED: "cancelled",
               # not known to be unrelated: a failure of the pull request's until shown otherwise
               drci.UNCLASSIFIED: "new"}
KINDS_SCHEMA = pa.schema([("number", pa.int64()), ("head_sha", pa.string()), ("job_id", pa.int64()),
                          ("name", pa.string()), ("kind", pa.string())])


def kinds_table(comments: dict[int, dict]) -> pa.Table:
    """drci_kinds: (number, head_sha, job_id, name, kind) of every failing job the day's comments
    classify (`drci.build.load_comments` rows), for site/sql/pr_rows.sql, which applies them to the
    same head and job only."""
    rows = [{"number": number, "head_sha": row.get("head_sha"), "job_id": job["job_id"], "name": job["name"],
             "kind": CLASS_KINDS[job["class"]]}
            for number, row in comments.items() for job in row.get("jobs") or []
            if job.get("job_id") is not None and job.get("class") in CLASS_KINDS]
    return pa.Table.from_pylist(rows, schema=KINDS_SCHEMA)
