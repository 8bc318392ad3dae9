"""Upstream check runs whose downstream job never reported `completed`, finalized as timed out.

A downstream runner that dies, is cancelled before its `if: always()` step, or loses its network
sends no `completed` callback, and its upstream check run would stay in progress on the pull
request for good, blocking a merge that waits on it. The relay's sweeper (`cleanup_handler.py`)
finalizes such check runs after `ZOMBIE_TIMEOUT_SECONDS` (6 h) with the conclusion `timed_out`;
this is its counterpart, read from the `relay_actions` ledger instead of a Redis set: a check run
created in progress longer ago than the timeout, with no completed one of the same name, run and
attempt, and not superseded by a newer check run of its name on the head.

Each is completed through `create_check_run` with a synthesized `completed` job state, so the
ledger's claim, look-up and exactly-once rules apply as to a real callback, dry run included; the
level and label rules are applied again (the repository must still be L3/L4, an L3 one still want
check runs on that head), as the relay's sweeper does. A `completed` callback arriving after the
timeout finds its check run already created (the key has no conclusion) and changes nothing, as the
relay refuses a callback once its sweeper completed the job.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from resources.lake import Lake, connect
from resources.sql import SqlFiles, execute
from torchci_assets.relay.acting import Writer
from torchci_assets.relay.check_runs import ACTIONS_TABLE, JobState, create_check_run, wants_check_run
from torchci_assets.relay.pull_requests import CHECK_RUN_PREFIX

SQL = SqlFiles(__file__)
# The relay's ZOMBIE_TIMEOUT_SECONDS: longer than any downstream job is allowed to run.
ZOMBIE_TIMEOUT = dt.timedelta(hours=6)
# Check runs opened this many days back (and today) are looked at: a sweep that was stopped for
# that long leaves older ones in progress.
ZOMBIE_LOOKBACK_DAYS = 3
TIMED_OUT = "timed_out"


def zombie_jobs(lake: Lake, now: dt.datetime, timeout: dt.timedelta = ZOMBIE_TIMEOUT,
                lookback_days: int = ZOMBIE_LOOKBACK_DAYS) -> list[JobState]:
    """The completed, `timed_out` job state of every check run left in progress since before
    `now - timeout` (sql/zombie_check_runs.sql), oldest first."""
    days = [(now - dt.timedelta(days=back)).strftime("%Y-%m-%d") for back in range(lookback_days + 1)]
    con = connect()
    try:
        if not lake.register(con, ACTIONS_TABLE, days):
            return []
        cursor = execute(con, SQL["zombie_check_runs"], {"cutoff": now - timeout})
        columns = [d[0] for d in cursor.description]
        rows = [dict(zip(columns, row)) for row in cursor.fetchall()]
    finally:
        con.close()
    return [job for job in map(timed_out_job, rows) if job is not None]


def timed_out_job(row: dict) -> JobState | None:
    """The job state a `completed` callback with conclusion `timed_out` would have given, from the
    ledger row of its in-progress check run (named `crcr/<repo>/<workflow>/<job>`, keyed
    `<name>|<run id>|<attempt>|in_progress`); None for a row not shaped so."""
    name, repo = row["name"] or "", row["downstream_repo"] or ""
    parts = (row["key"] or "").rsplit("|", 3)
    prefix = f"{CHECK_RUN_PREFIX}{repo}/"
    if len(parts) != 4 or not parts[1].isdigit() or not parts[2].isdigit() or not name.startswith(prefix) \
            or "/" not in name[len(prefix):]:
        return None
    workflow_name, job_name = name[len(prefix):].rsplit("/", 1)
    return JobState(repo, "", row["sha"], row["pr_number"], row["delivery_id"] or "", workflow_name, job_name,
                    int(parts[1]), int(parts[2]), "completed", TIMED_OUT, frozenset())


def time_out(job: JobState, w: Writer) -> dict[str, str]:
    """Complete one zombie's check run as `timed_out`, when its repository still gets check runs."""
    entry = w.relay.entry_for(job.downstream_repo)
    job = dataclasses.replace(job, level=entry.level if entry else "")
    if not wants_check_run(w.lake, w.relay, job):
        w.log(f"{job.name} on {job.head_sha[:12]}: in progress past the timeout, but {job.downstream_repo} "
              f"({job.level or 'not allowlisted'}) no longer gets check runs on it; left as it is")
        return {job.key: "not_wanted"}
    w.log(f"{job.name} (run {job.run_id}, attempt {job.run_attempt}) on {job.head_sha[:12]}: no `completed` "
          "callback came; completing its check run as timed_out")
    return {job.key: create_check_run(w.github, w.lake, w.relay, job, w.run_id, w.log, w.settle_s)}
