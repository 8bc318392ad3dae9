"""The evidence a DISABLED issue carries, read from the flaky verdict's own inputs.

For each test to disable: its counts per platform from `flaky_test_platforms` (the same day's
partition, so the issue says exactly what the verdict saw), and its most recent failing jobs
from the window's `test_sha_outcomes` (`failing_job_ids`: jobs where it failed or needed a
rerun), linked through `workflow_job` (run id and repository) with `test_jobs` as the fallback
for jobs whose webhooks never arrived. Main-branch jobs come first, as PyTorch's bot links the
latest trunk job. Only the wanted tests are read: a few rows out of the window's aggregates.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from resources.lake import Lake, connect
from torchci_assets.derived.flakiness.flaky import WINDOW_DAYS
from torchci_assets.derived.flakiness.issue_text import MAX_JOB_LINKS, Evidence, FailingJob, PlatformEvidence
from torchci_assets.partitions import days_around, days_ending

_EMPTY = {
    "flaky_test_platforms": "SELECT NULL::VARCHAR AS file, NULL::VARCHAR AS classname, NULL::VARCHAR AS name, "
                            "NULL::VARCHAR AS platform, 0::BIGINT AS runs, 0::BIGINT AS failures, "
                            "0::BIGINT AS flake_events, 0::BIGINT AS rerun_passes, 0::BIGINT AS same_commit_pairs, "
                            "0::BIGINT AS flips, NULL::DATE AS window_start, NULL::DATE AS window_end WHERE false",
    "test_sha_outcomes": "SELECT NULL::VARCHAR AS classname, NULL::VARCHAR AS name, NULL::VARCHAR AS branch_class, "
                         "NULL::VARCHAR AS head_sha, []::BIGINT[] AS failing_job_ids, "
                         "NULL::TIMESTAMPTZ AS last_at WHERE false",
    "test_jobs": "SELECT NULL::BIGINT AS job_id, NULL::BIGINT AS workflow_id, NULL::VARCHAR AS job_name, "
                 "NULL::TIMESTAMPTZ AS job_completed_at WHERE false",
    "workflow_job": "SELECT NULL::BIGINT AS id, NULL::BIGINT AS run_id, NULL::VARCHAR AS repo, "
                    "NULL::VARCHAR AS name, NULL::TIMESTAMPTZ AS completed_at WHERE false",
}

# `wanted` holds (test, name, cls): a test key is "name (__main__.cls)", and a dotted classname
# matches on its last part, as `lists.pytorch_key` builds keys.
_MATCH = "w.name = x.name AND string_split(x.classname, '.')[-1] = w.cls"

_PLATFORMS_SQL = f"""
    SELECT w.test, x.platform, sum(x.runs)::BIGINT, sum(x.failures)::BIGINT, sum(x.flake_events)::BIGINT,
           sum(x.rerun_passes)::BIGINT, sum(x.same_commit_pairs)::BIGINT, sum(x.flips)::BIGINT,
           any_value(x.file), min(x.window_start)::VARCHAR, max(x.window_end)::VARCHAR
    FROM p x JOIN wanted w ON {_MATCH}
    GROUP BY ALL ORDER BY w.test, x.platform
"""

_JOBS_SQL = f"""
    WITH failing AS (
        SELECT w.test, x.branch_class = 'main' AS on_main, x.head_sha, x.last_at, unnest(x.failing_job_ids) AS job_id
        FROM o x JOIN wanted w ON {_MATCH}
    ),
    per_job AS (
        SELECT test, job_id, bool_or(on_main) AS on_main, any_value(head_sha) AS head_sha, max(last_at) AS last_at
        FROM failing GROUP BY ALL
    ),
    tj AS (
        SELECT job_id, any_value(workflow_id) AS run_id, any_value(job_name) AS job_name,
               max(job_completed_at) AS completed_at
        FROM j WHERE job_id IN (SELECT job_id FROM per_job) GROUP BY job_id
    ),
    wj AS (
        SELECT id, any_value(run_id) AS run_id, any_value(repo) AS repo, any_value(name) AS name,
               max(completed_at) AS completed_at
        FROM wjob WHERE id IN (SELECT job_id FROM per_job) GROUP BY id
    )
    SELECT f.test, f.job_id, coalesce(wj.run_id, tj.run_id) AS run_id, wj.repo,
           coalesce(wj.name, tj.job_name, '') AS job_name, f.head_sha, f.on_main,
           coalesce(wj.completed_at, tj.completed_at, f.last_at) AS failed_at,
           count(*) OVER (PARTITION BY f.test) AS failing_jobs,
           max(coalesce(wj.completed_at, tj.completed_at, f.last_at)) OVER (PARTITION BY f.test) AS last_failure_at
    FROM per_job f LEFT JOIN tj USING (job_id) LEFT JOIN wj ON wj.id = f.job_id
    QUALIFY row_number() OVER (PARTITION BY f.test ORDER BY f.on_main DESC, failed_at DESC NULLS LAST, f.job_id DESC)
            <= {MAX_JOB_LINKS}
    ORDER BY f.test, f.on_main DESC, failed_at DESC NULLS LAST, f.job_id DESC
"""


def split_test(test: str) -> tuple[str, str]:
    """("test_x", "TestY") from "test_x (__main__.TestY)"."""
    name, _, rest = test.rpartition(" (")
    return name, rest.rstrip(")").rsplit(".", 1)[-1]


def job_url(web_url: str, repo: str, run_id: int | None, job_id: int) -> str:
    """GitHub's page of one job; without a run id, the check-run page PyTorch's bot links."""
    base = f"{web_url.rstrip('/')}/{repo}"
    return f"{base}/actions/runs/{run_id}/job/{job_id}" if run_id else f"{base}/runs/{job_id}"


def _register(con, lake: Lake, table: str, days: list[str], name: str) -> None:
    if lake.register(con, table, days, name=name) == 0:
        con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS {_EMPTY[table]}")


def gather_evidence(lake: Lake, day: str, tests: list[str], repo: str, web_url: str,
                    default_window_days: int = WINDOW_DAYS) -> dict[str, Evidence]:
    """Evidence per test of `tests` for the verdict of `day`, over the window that verdict read
    (its `window_start`); job links point into `repo` unless the job's own webhook names another."""
    if not tests:
        return {}
    con = connect()
    try:
        con.register("wanted_arrow", pa.table({
            "test": tests, "name": [split_test(t)[0] for t in tests], "cls": [split_test(t)[1] for t in tests]}))
        con.execute("CREATE TEMP TABLE wanted AS SELECT * FROM wanted_arrow")
        _register(con, lake, "flaky_test_platforms", [day], "p")
        (start,) = con.execute("SELECT min(window_start) FROM p").fetchone()
        window_days = (dt.date.fromisoformat(day) - start).days + 1 if start else default_window_days
        _register(con, lake, "test_sha_outcomes", days_ending(day, window_days), "o")
        _register(con, lake, "test_jobs", days_ending(day, window_days), "j")
        # a job's webhooks can land a day after its test report
        _register(con, lake, "workflow_job", days_around(day, window_days - 1, 1), "wjob_all")
        columns = {c[0] for c in con.execute("DESCRIBE wjob_all").fetchall()}
        con.execute("CREATE TEMP VIEW wjob AS SELECT id, run_id, name, completed_at, "
                    f"{'repo' if 'repo' in columns else 'NULL::VARCHAR AS repo'} FROM wjob_all")
        platforms = con.execute(_PLATFORMS_SQL).fetchall()
        jobs = con.execute(_JOBS_SQL).fetchall()
    finally:
        con.close()
    out: dict[str, Evidence] = {t: Evidence(t) for t in tests}
    for test, platform, runs, failures, events, reruns, pairs, flips, file, start, end in platforms:
        e = out[test]
        out[test] = Evidence(test, e.file or file or "", e.window_start or start or "", e.window_end or end or "",
                             [*e.platforms, PlatformEvidence(platform, runs, failures, events, reruns, pairs, flips)])
    for test, job_id, run_id, job_repo, name, head_sha, on_main, at, failing, last in jobs:
        e = out[test]
        job = FailingJob(job_url(web_url, job_repo or repo, run_id, job_id), name, head_sha or "", bool(on_main), at)
        out[test] = Evidence(test, e.file, e.window_start, e.window_end, e.platforms, [*e.jobs, job], failing, last)
    return out
