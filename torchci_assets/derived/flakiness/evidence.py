"""The evidence a DISABLED issue carries, read from the flaky verdict's own inputs.

For each test to disable: its counts per platform on main from `flaky_test_platforms` (the same
day's partition, so the issue says exactly what the verdict saw; main's evidence is what disables
a test, other branches' flake events are kept apart) with when it last flaked on main (what
reopens or widens its issue), and its most recent failing jobs
from the window's `test_sha_outcomes` (`failing_job_ids`: jobs where it failed or needed a
rerun), linked through `workflow_job` (run id and repository) with `test_jobs` as the fallback
for jobs whose webhooks never arrived. Main-branch jobs come first, as PyTorch's bot links the
latest trunk job. Only the wanted tests are read: a few rows out of the window's aggregates.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

import pyarrow as pa

from resources.lake import Lake, connect
from resources.sql import Columns, SqlFiles, compose, execute
from torchci_assets.derived.flakiness.flaky import PLATFORM_COLUMNS_ADDED, WINDOW_DAYS
from torchci_assets.derived.results.columns import register_current
from torchci_assets.derived.flakiness.issue_text import (MAX_JOB_LINKS, Evidence, FailingJob, PlatformEvidence,
                                                         method_and_class)
from torchci_assets.partitions import days_around, days_ending

SQL = SqlFiles(__file__)
_EMPTY = dict(SQL.steps("evidence_empty"))


def job_url(web_url: str, repo: str, run_id: int | None, job_id: int) -> str:
    """GitHub's page of one job; without a run id, the check-run page PyTorch's bot links."""
    base = f"{web_url.rstrip('/')}/{repo}"
    return f"{base}/actions/runs/{run_id}/job/{job_id}" if run_id else f"{base}/runs/{job_id}"


def _register(con, lake: Lake, table: str, days: list[str], name: str, added: Columns | None = None) -> None:
    """View `name` over the table's partitions (the columns of `added` NULL where they lack them),
    or an empty one with the columns read."""
    n = register_current(con, lake, table, days, name, added) if added else lake.register(con, table, days, name=name)
    if n == 0:
        con.execute(compose(_EMPTY[table], view=name))


def gather_evidence(lake: Lake, day: str, tests: list[str], repo: str, web_url: str,
                    default_window_days: int = WINDOW_DAYS) -> dict[str, Evidence]:
    """Evidence per test of `tests` for the verdict of `day`, over the window that verdict read
    (its `window_start`); job links point into `repo` unless the job's own webhook names another."""
    if not tests:
        return {}
    con = connect()
    try:
        words = [method_and_class(t) for t in tests]
        con.register("wanted_arrow", pa.table({
            "test": tests, "name": [w[0] for w in words], "cls": [w[1] for w in words]}))
        con.execute("CREATE TEMP TABLE wanted AS SELECT * FROM wanted_arrow")
        _register(con, lake, "flaky_test_platforms", [day], "p", PLATFORM_COLUMNS_ADDED)
        (start,) = con.execute("SELECT min(window_start) FROM p").fetchone()
        window_days = (dt.date.fromisoformat(day) - start).days + 1 if start else default_window_days
        _register(con, lake, "test_sha_outcomes", days_ending(day, window_days), "o")
        _register(con, lake, "test_jobs", days_ending(day, window_days), "j")
        # a job's webhooks can land a day after its test report
        _register(con, lake, "workflow_job", days_around(day, window_days - 1, 1), "wjob_all")
        columns = {c[0] for c in con.execute("DESCRIBE wjob_all").fetchall()}
        con.execute(dict(SQL.steps("evidence_wjob"))["with_repo" if "repo" in columns else "without_repo"])
        platforms = con.execute(SQL["evidence_platforms"]).fetchall()
        jobs = execute(con, SQL["evidence_jobs"], {"max_job_links": MAX_JOB_LINKS}).fetchall()
    finally:
        con.close()
    out: dict[str, Evidence] = {t: Evidence(t) for t in tests}
    for test, platform, *counts, every_branch, file, start, end, flaked_at in platforms:
        e = out[test]
        main = PlatformEvidence(platform, *counts)
        out[test] = replace(e, file=e.file or file or "", window_start=e.window_start or start or "",
                            window_end=e.window_end or end or "",
                            platforms=[*e.platforms, replace(main, elsewhere=every_branch - main.flake_events)],
                            last_main_flake_at=max((t for t in (e.last_main_flake_at, flaked_at) if t), default=None))
    for test, job_id, run_id, job_repo, name, head_sha, on_main, at, failing, last in jobs:
        e = out[test]
        job = FailingJob(job_url(web_url, job_repo or repo, run_id, job_id), name, head_sha or "", bool(on_main), at)
        out[test] = replace(e, jobs=[*e.jobs, job], failing_jobs=failing, last_failure_at=last)
    return out
