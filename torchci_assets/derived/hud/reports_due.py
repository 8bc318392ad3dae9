"""When a test job's reports are due: the one rule Dr. CI (a pull request's INFRA) and main's HUD grid
(a failure awaiting its reports) share, so the two never disagree on a job.

PyTorch uploads a run's test reports from upload-test-stats, a workflow GitHub starts on the run's
`completed` (`on: workflow_run`): it waits for a runner, downloads the run's artifacts and uploads
them, then the archive is read in: usually minutes. So a test job without any report is evidence of
an infrastructure failure only once its run completed and that time has passed; before then the
reports may simply not have landed (a shard that failed early in a four-hour run).
"""

from __future__ import annotations

import datetime as dt

# How long after a test job's workflow run completed its reports may still land. An hour leaves room
# for a queue of runners or of archive reads, at the cost of a true infrastructure failure showing as
# awaiting its reports that long before it shows as infrastructure. When nothing was heard of the
# run, it is counted from the job's own end.
REPORTS_DUE = dt.timedelta(hours=1)


def run_running(run_status: str | None, run_ended_at: dt.datetime | None) -> bool:
    """True when the job's run attempt was heard running and its end is not known: its reports are
    not due before it ends, however long ago the job itself ended."""
    return run_status not in (None, "completed") and run_ended_at is None


def reports_due_at(run_ended_at: dt.datetime | None, job_end: dt.datetime | None) -> dt.datetime | None:
    """When a job's reports are due (its run not running): REPORTS_DUE after its run's end, else after
    the job's own end; None when no time is known (they are then taken as due)."""
    end = run_ended_at or job_end
    return None if end is None else end + REPORTS_DUE


def reports_overdue(now: dt.datetime | None, run_status: str | None, run_ended_at: dt.datetime | None,
                    job_end: dt.datetime | None) -> bool:
    """True when a test job's reports would have landed by `now` had it produced any (never while its
    run runs). Without `now`, they are taken as overdue, as `pr_jobs` and `commit_health` take them."""
    if now is None:
        return True
    if run_running(run_status, run_ended_at):
        return False
    due = reports_due_at(run_ended_at, job_end)
    return due is None or now >= due
