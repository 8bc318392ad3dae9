"""`ci_metrics_daily`: the numbers the CI team tracks, one partition per day, from that day's data.

One table, one row per day and dimension (the other dimension columns null):
  `day`        the day's headline figures:
               - main commits pushed that day (`main_commits`);
               - red, flaky, green and pending commits, and `red_pct`/`flaky_pct` (of commits with a
                 signal, pending included, as test-infra's master_commit_red computes them), with
                 time to signal p50/p90 (`tts_p50_s`, `tts_p90_s`) of the commits green at the first
                 attempt. These are about the commits pushed SETTLE_DAYS before (`commits_day`), read
                 from this day's `commit_health` snapshot: a commit's CI and its reruns take hours, so a
                 commit is only judged once it had a day to settle, and each commit is counted once;
               - jobs completed that day, failed ones and the share of failures that are
                 infrastructure (`infra_failure_pct`), queue time p50/p90/max over all of them;
               - flaky, broken and disabled tests as of that day (`flaky_tests`, `disabled_tests`);
  `platform`   per platform: jobs and queue time p50/p90/max;
  `runner`     per platform and runner label: the same;
  `job_group`  per job group on the main branch: successful jobs and their duration p50/p90;
  `backend`    per downstream backend: judged jobs, success rate and callbacks received that day
               (a job whose `completed` callback never came is judged as on the backend pages:
               timed out, an infrastructure failure, after the relay's zombie timeout).

Every input is one day's partition (commit_health, workflow_job, test_jobs, flaky_tests,
disabled_tests, ci_result, ci_callback_minutes) plus the day before's job ids; a new day costs that
day. A job counts once, on the day its completion arrived: a copy of that delivery in a later day
(redelivered after midnight, or days later from GitHub's "Recent deliveries") is not counted again.
A completion cannot arrive before its job completed, so a copy's original is in a day from its
`completed_at` on: the day before's ids tell the copies of a job completed since the day before
began, and for a job completed earlier (a late completion: the gap repair's, or one redelivered
after an outage) the job ids of every day from the one it completed on are read too. Such days are
read only when the day holds such a completion, so an ordinary day still costs that day and the
day before; a job whose only completion arrived days late is counted on the day it arrived.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import pyarrow as pa

from resources.lake import Lake, connect
from resources.sql import SqlFiles, execute, relation
from torchci_assets.config import main_branch
from torchci_assets.derived.hud.downstream import define_downstream_macros, zombie_timeout
from torchci_assets.derived.hud.health import FAILING_CONCLUSIONS, register_pushes
from torchci_assets.derived.hud.inputs import define_runner_machine, register
from torchci_assets.ingest.ci_results import judged_as_of_ms

SETTLE_DAYS = 1
DIMENSIONS = ("day", "platform", "runner", "job_group", "backend")

METRICS_SCHEMA = pa.schema([
    ("dimension", pa.string()), ("platform", pa.string()), ("label", pa.string()), ("job_group", pa.string()),
    ("repo", pa.string()), ("commits_day", pa.date32()),
    ("main_commits", pa.int64()), ("commits", pa.int64()), ("red", pa.int64()), ("flaky", pa.int64()),
    ("green", pa.int64()), ("pending", pa.int64()), ("red_pct", pa.float64()), ("flaky_pct", pa.float64()),
    ("tts_p50_s", pa.float64()), ("tts_p90_s", pa.float64()), ("tts_commits", pa.int64()),
    ("jobs", pa.int64()), ("failed_jobs", pa.int64()), ("infra_failed_jobs", pa.int64()),
    ("infra_failure_pct", pa.float64()),
    ("queue_p50_s", pa.float64()), ("queue_p90_s", pa.float64()), ("queue_max_s", pa.float64()),
    ("duration_p50_s", pa.float64()), ("duration_p90_s", pa.float64()),
    ("flaky_tests", pa.int64()), ("broken_tests", pa.int64()), ("disabled_tests", pa.int64()),
    ("success_rate", pa.float64()), ("callbacks", pa.int64()),
])

SQL = SqlFiles(__file__)
# the columns read of the earlier days' jobs: which jobs they hold completed
JOB_IDS = {"id": "BIGINT", "run_attempt": "BIGINT", "status": "VARCHAR"}


@dataclass
class MetricsReport:
    day: str
    commits_day: str
    rows: int
    headline: dict  # the `day` row
    queue_p90_by_platform: dict[str, float]


def build_ci_metrics(lake: Lake, day: str, upstream_repo: str, branches: tuple[str, ...], now_ms: int | None = None,
                     zombie_timeout_s: int | None = None) -> MetricsReport:
    """Write `ci_metrics_daily` for `day` (see the module docstring); returns the headline figures.
    Of `branches`, only the main branch's commits and jobs count (`main_branch`), as in commit_health.
    Downstream jobs are judged at the end of `day` (or `now_ms`, default now, if earlier) as the backend
    pages judge them: one that never completed times out after `zombie_timeout_s` (default: the config's)."""
    commits_day = (dt.date.fromisoformat(day) - dt.timedelta(days=SETTLE_DAYS)).isoformat()
    before = (dt.date.fromisoformat(day) - dt.timedelta(days=1)).isoformat()
    con = connect()
    try:
        for table, days, view in (("commit_health", [day], "health"), ("workflow_job", [day], "jobs_today"),
                                  ("workflow_run", [before, day], "runs"),
                                  ("test_jobs", [before, day], "tjobs"), ("job_failure", [before, day], "jfail"),
                                  ("flaky_tests", [day], "flaky"), ("disabled_tests", [day], "disabled"),
                                  ("ci_result", [day], "ci"), ("ci_callback_minutes", [day], "callbacks")):
            register(con, lake, table, days, view)
        register(con, lake, "workflow_job", earlier_days(con, lake, before), "jobs_before", JOB_IDS)
        register_pushes(con, lake, [day], "pushes")
        main = main_branch(branches)  # main's commits and jobs, as commit_health has them
        define_downstream_macros(con)
        define_runner_machine(con)
        values = {"commits_day": dt.date.fromisoformat(commits_day), "upstream_repo": upstream_repo,
                  "branches": [main], "branch_names": [main.removeprefix("refs/heads/")],
                  "failing_conclusions": list(FAILING_CONCLUSIONS), "as_of_ms": judged_as_of_ms(day, now_ms),
                  "zombie_timeout_s": zombie_timeout(zombie_timeout_s)}
        table = _with_schema(relation(con, SQL["ci_metrics_daily"], values).to_arrow_table())
    finally:
        con.close()
    rows = lake.write("ci_metrics_daily", day, table)
    records = table.to_pylist()
    headline = next(r for r in records if r["dimension"] == "day")
    queue = {r["platform"]: r["queue_p90_s"] for r in records
             if r["dimension"] == "platform" and r["queue_p90_s"] is not None}
    return MetricsReport(day, commits_day, rows, headline, queue)


def earlier_days(con, lake: Lake, before: str) -> list[str]:
    """The days of `workflow_job` an earlier copy of a completion in view `jobs_today` may be in:
    `before` (the day before), and, when one of them completed before it, every day of the lake
    from the day that one completed on (a completion arrives after its job completed)."""
    first = execute(con, SQL["earliest_late_completion"], {"before": dt.date.fromisoformat(before)}).fetchone()[0]
    if first is None:
        return [before]
    return [d for d in lake.days("workflow_job") if first.isoformat() <= d < before] + [before]


def _with_schema(t: pa.Table) -> pa.Table:
    """The query's columns in METRICS_SCHEMA's order and types (missing ones null)."""
    cols = []
    for f in METRICS_SCHEMA:
        cols.append(t.column(f.name).cast(f.type) if f.name in t.column_names else pa.nulls(t.num_rows, f.type))
    return pa.Table.from_arrays(cols, schema=METRICS_SCHEMA)
