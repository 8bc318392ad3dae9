"""Upstream check runs whose downstream job never reported `completed`, finalized as timed out.

A downstream runner that dies, is cancelled before its `if: always()` step, or loses its network
sends no `completed` callback, and its upstream check run would stay in progress on the pull
request for good, blocking a merge that waits on it. The relay's sweeper (`cleanup_handler.py`)
finalizes such check runs after `ZOMBIE_TIMEOUT_SECONDS` (6 h) with the conclusion `timed_out`;
this is its counterpart, read from the `relay_actions` ledger instead of a Redis set: a check run
created in progress longer ago than the timeout, with no completed one of the same name, run and
attempt, and not superseded by a newer check run of its name on the head. A completed one GitHub
refused counts as none: a `completed` callback with a conclusion GitHub does not take (the action's
`conclusion` input left out) created nothing, and the relay's sweeper, which drops the job at that
callback, would leave its in-progress check run for good. The sweep's own refused `timed_out` does
count, or every sweep would send it again. A create left in doubt
counts as created: a run whose every try GitHub left unanswered (timeouts, 5xx) gives up with its
claim open, and GitHub may well have taken it; completing one GitHub never took still shows what the
relay would have shown, a job that started and never reported. A sweep's own `timed_out` left in
doubt is tried again by the next sweep, which looks it up before sending.

Each is completed through `create_check_run` with a synthesized `completed` job state, so the
ledger's claim, look-up and exactly-once rules apply as to a real callback, dry run included. The
repository must still be L3/L4, as the relay's sweeper requires. Its labels are not asked again:
the relay's sweeper reads them from the job's own callback, which the ledger does not keep, and
the in-progress check run created from that callback already proves they wanted one (the flag a
dispatch sets misses a repository promoted to L3 after it). Unlike the relay, a check run created
at L4 is thus completed after a move to L3 rather than left in progress for want of a label.
One left as it is, because its repository left L3/L4, is recorded as decided (a `not_wanted`
completion) and not looked at again, as the relay's sweeper drops it from its set. A `completed`
callback arriving after the timeout finds its check run already created (the key has no
conclusion) and changes nothing, as the relay refuses a callback once its sweeper completed the job.

The clock starts when the receiver took the job's `in_progress` callback, as the relay's does
(the ledger keeps it, `heard_at`): that callback, sent by the job once it runs, is what creates the
check run, so time spent queued downstream never counts, and a check run created later than its
callback (a label added while the job ran) is timed out when the HUD times the job out, not a full
timeout after its creation. Rows written before `heard_at` was kept count from the creation.

The timeout is `zombie_timeout_seconds` of the relay's config file (the relay's own
`ZOMBIE_TIMEOUT_SECONDS`, 6 h by default), so the sweeps a schedule starts follow it; a run's own
`timeout_s` overrides it for that run.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from resources.lake import Lake, connect
from resources.sql import SqlFiles, execute
from torchci_assets.config import MAX_ZOMBIE_TIMEOUT_S, ZOMBIE_TIMEOUT_S, TorchciConfig
from torchci_assets.relay.acting import Writer
from torchci_assets.relay.check_runs import ACTIONS_TABLE, JobState, action_row, create_check_run, record_action
from torchci_assets.relay.dispatch import LEDGER_TABLE, sweep_ledger_staging
from torchci_assets.relay.pull_requests import CHECK_RUN_PREFIX

SQL = SqlFiles(__file__)
# The relay's default ZOMBIE_TIMEOUT_SECONDS: longer than any downstream job is allowed to run.
ZOMBIE_TIMEOUT = dt.timedelta(seconds=ZOMBIE_TIMEOUT_S)
# Check runs opened this many days back (and today) are looked at: a sweep that was stopped for
# that long leaves older ones in progress.
ZOMBIE_LOOKBACK_DAYS = 3
TIMED_OUT = "timed_out"


def sweep_timeout(relay: TorchciConfig, timeout_s: float | None = None) -> dt.timedelta:
    """The timeout of one sweep: the run's own `timeout_s` when it sets one (a sweep started by
    hand), else the config file's, which the schedule's sweeps follow."""
    if timeout_s is None:
        return dt.timedelta(seconds=relay.zombie_timeout_seconds)
    if not 0 < timeout_s <= MAX_ZOMBIE_TIMEOUT_S:
        # past the maximum, a check run due would be older than the sweep looks back: none found
        raise ValueError(f"timeout_s must be a positive number of seconds, at most {MAX_ZOMBIE_TIMEOUT_S} "
                         f"(2 days), got {timeout_s:g}")
    return dt.timedelta(seconds=timeout_s)


def sweep_ledgers(lake: Lake, now: dt.datetime, lookback_days: int = ZOMBIE_LOOKBACK_DAYS) -> list[str]:
    """Remove what writers killed mid-write left in both relay ledgers over the days the sweep looks
    at (`sweep_ledger_staging`): the relay's own housekeeping, which the relay sensors' ticks do
    every ten minutes, with or without credentials (jobs/relay_prs.py)."""
    days = [(now - dt.timedelta(days=back)).strftime("%Y-%m-%d") for back in range(lookback_days + 1)]
    return [path for table in (LEDGER_TABLE, ACTIONS_TABLE) for path in sweep_ledger_staging(lake, table, days)]


def zombie_jobs(lake: Lake, now: dt.datetime, timeout: dt.timedelta = ZOMBIE_TIMEOUT,
                lookback_days: int = ZOMBIE_LOOKBACK_DAYS) -> list[JobState]:
    """The completed, `timed_out` job state of every check run left in progress since before
    `now - timeout` (sql/zombie_check_runs.sql), oldest first."""
    days = [(now - dt.timedelta(days=back)).strftime("%Y-%m-%d") for back in range(lookback_days + 1)]
    con = connect()
    try:
        if not lake.register(con, ACTIONS_TABLE, days):
            return []
        kept = "heard_at" in con.table(ACTIONS_TABLE).columns
        execute(con, dict(SQL.steps("actions_view"))["with_heard_at" if kept else "without_heard_at"])
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
    """Complete one zombie's check run as `timed_out`, while its repository is still L3/L4."""
    entry = w.relay.entry_for(job.downstream_repo)
    if entry is None or entry.level not in ("L3", "L4"):
        w.log(f"{job.name} on {job.head_sha[:12]}: in progress past the timeout, but {job.downstream_repo} "
              f"({entry.level if entry else 'not allowlisted'}) no longer gets check runs; left as it is")
        # recorded, so that the next sweeps pass it by (sql/zombie_check_runs.sql) instead of logging
        # the same decision every ten minutes for days
        record_action(w.lake, {**action_row(job, w.relay.upstream_repo, w.run_id), "outcome": "not_wanted"})
        return {job.key: "not_wanted"}
    job = dataclasses.replace(job, level=entry.level)
    w.log(f"{job.name} (run {job.run_id}, attempt {job.run_attempt}) on {job.head_sha[:12]}: no `completed` "
          "callback came; completing its check run as timed_out")
    return {job.key: create_check_run(w.github, w.lake, w.relay, job, w.run_id, w.log, w.settle_s)}
