"""Main's grid cells whose failure is a test job whose reports may still land: shown as awaiting them,
not as infrastructure, until Dr. CI would call the job INFRA (`classify.results_overdue`).

`commit_health` calls a failed test job without any test report infrastructure at once (the trunk
guardians read it so: no evidence on the code), but PyTorch uploads a run's reports only once the
whole run completed, so a shard that failed early in a four-hour run has none for hours. The grid
is rendered at each refresh, so it judges the cells at the page's time with Dr. CI's very functions:
the lake's `workflow_run` for the run's end (`settle_runs` when its `completed` delivery is late or
lost), and the job's own end when nothing was heard of the run. A cell is judged by the job it links
to (its tooltip's), the failing job `commit_health` names for the group: the one that tells the most,
so a shard whose log already matched an infrastructure rule, or another shard's new failure, decides
the cell before a shard whose reports are not in. Each failing job the cell's tooltip counts is judged
the same way, so the count calls a shard awaiting its reports what the cell would call it.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from resources.lake import Lake
from resources.sql import SqlFiles
from torchci_assets.derived.drci import inputs as drci_inputs
from torchci_assets.derived.drci.classify import NO_TEST_RESULTS, HeadJob, awaiting_results, results_due_at, settle_runs
from torchci_assets.derived.hud.inputs import register
from torchci_assets.partitions import days_ending

SQL = SqlFiles(__file__)
_JOB_TIMES = {"id": "BIGINT", "started_at": "TIMESTAMPTZ", "completed_at": "TIMESTAMPTZ"}


def may_await(r: dict) -> bool:
    """A failed cell whose failure `commit_health` calls infrastructure for want of test reports."""
    return (r["state"] == "failure" and r["failure_class"] == "infra" and r["infra_reason"] == NO_TEST_RESULTS
            and not r.get("unstable"))


def _head_job(r: dict) -> HeadJob:
    return HeadJob(name=r["job_name"] or r["job_group"], job_group=r["job_group"], state=r["state"],
                   failure_class=r["failure_class"], job_id=r["job_id"], run_id=r["run_id"],
                   run_attempt=r["run_attempt"], infra_reason=r["infra_reason"])


def _attach_times(con, lake: Lake, day: str, jobs: list[HeadJob]) -> None:
    """Each job's start and end, and its failing run attempt's status and end, as the lake has them."""
    ids = sorted({j.job_id for j in jobs if j.job_id is not None})
    register(con, lake, "workflow_job", days_ending(day, drci_inputs.WINDOW_DAYS), "ends_jobs", _JOB_TIMES)
    con.register("grid_jobs", pa.table({"job_id": pa.array(ids, pa.int64())}))
    cur = con.execute(SQL["job_ends"])
    times = {job_id: (started, completed) for job_id, started, completed in cur.fetchall()}
    for j in jobs:
        j.started_at, j.completed_at = times.get(j.job_id, (None, None))
    if drci_inputs.register_runs(con, lake, day):
        drci_inputs.attach_run_ends(con, jobs)


def awaitable_kinds(r: dict) -> list[dict]:
    """The failing jobs a cell's tooltip counts (`failing_kinds`) whose failure `commit_health` calls
    infrastructure for want of test reports; none from a partition written before their ids were kept."""
    return [k for k in r.get("failing_kinds") or []
            if k["failure_class"] == "infra" and k["infra_reason"] == NO_TEST_RESULTS and k.get("job_id") is not None]


def _kind_job(r: dict, kind: dict) -> HeadJob:
    """A counted job of the cell's attempt: it ran in the run attempt the cell is about."""
    return HeadJob(name=r["job_group"], job_group=r["job_group"], state="failure", failure_class="infra",
                   job_id=kind["job_id"], run_id=r["run_id"], run_attempt=r["run_attempt"],
                   infra_reason=NO_TEST_RESULTS)


def mark(con, lake: Lake, day: str, cells: dict, now: dt.datetime) -> int:
    """Mark the cells (`load_grid`'s, changed in place) whose test reports may still land at `now`:
    `awaiting_reports`, with `reports_due` when they are due (None while the run runs), and so each job
    their tooltips count (`failing_kinds`), judged alike. Returns how many cells."""
    commits = {r["sha"] for r in cells.values() if may_await(r) or awaitable_kinds(r)}
    rows = [r for r in cells.values() if r["sha"] in commits]
    if not rows:
        return 0
    jobs = [_head_job(r) for r in rows]
    kinds = [(r["sha"], k, _kind_job(r, k)) for r in rows for k in awaitable_kinds(r)]
    _attach_times(con, lake, day, jobs + [j for _, _, j in kinds])
    for sha in commits:
        settle_runs([j for r, j in zip(rows, jobs) if r["sha"] == sha] + [j for s, _, j in kinds if s == sha])
    for _, kind, job in kinds:
        kind["awaiting_reports"] = awaiting_results(job, now)
    marked = 0
    for r, job in zip(rows, jobs):
        if may_await(r) and awaiting_results(job, now):
            r["awaiting_reports"], r["reports_due"] = True, results_due_at(job)
            marked += 1
    return marked
