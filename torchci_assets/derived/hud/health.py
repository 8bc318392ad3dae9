"""Greenness of upstream main commits (`commit_health`) and of pull requests' heads (`pr_jobs`).

PyTorch's semantics (test-infra `torchci/clickhouse_queries/master_commit_red/query.sql`), but for
the job groups:

* A **job group** is a job name with its shard numbers stripped
  (`linux-jammy / test (default, 2, 5, linux.4xlarge)` -> `linux-jammy / test (default, linux.4xlarge)`),
  prefixed with its workflow. PyTorch's query strips the whole `(...)` suffix (`linux-jammy / test`,
  every config one group) and ignores the workflow (a build in `pull` and in `trunk` is one group);
  here each config and each workflow is a group of its own (the grid shows a failure in its
  config's column). So the groups differ in number from PyTorch's, and so can what is counted
  against MIN_JOB_GROUPS and a group's rerun history (flaky or failure). This grouping is kept.
* **Placeholder job ids collapse**: GitHub sometimes creates a job id at dispatch that never gets
  a runner nor a conclusion, then a second id for the same job that runs. Every id with the same
  (run, attempt, job name) is one job identity: `failed` if any id failed (or it is unresolved and
  older than STALE_HOURS: GitHub abandoned it), `resolved` if any id concluded, `pending` otherwise.
* **A job without conclusion in a completed run** (its `completed` webhook lost) is `pending`, as
  PyTorch's HUD and Dr. CI show a job without conclusion, unless the run's conclusion rules out its
  failure: a run that succeeded (or was skipped) resolves it, and a run cancelled before the job
  started resolves it as `skipped` (nothing ran). In a failed run it may be the failure: it stays
  pending until gap repair brings GitHub's answer, and is abandoned after STALE_HOURS like any
  other. (PyTorch's `master_commit_red` counts every job of a completed run as resolved, so its red
  share can count such a commit green where this one waits.)
* An attempt of a group failed if any of its jobs did; a group is `failure` when **every** attempt
  failed (never recovered), `flaky` when some failed and a later one did not (recovered on rerun),
  `pending` while an attempt is in flight, else `success` (`skipped` when nothing ran).
* A commit is `pending` if any of its blocking groups is, else `red` if any blocking group is a
  failure, else `flaky` if any recovered, else `green`. Blocking groups are those of the
  workflows that gate viable/strict (BLOCKING_WORKFLOWS; another repository's config names its
  own, every workflow by default), minus jobs PyTorch ignores there
  (rerun_disabled_tests, and unstable jobs: `unstable` in the name or an open UNSTABLE issue,
  unstable.py); a group all of whose jobs are unstable is marked `unstable`, and the HUD shows
  its failure as such. A commit with too few blocking groups (PyTorch: more than
  10 are needed) ran nothing meaningful: `no_signal`, left out of the red and flaky shares.

Failures are told apart (`failure_class`), first rule that applies to the failing jobs of a
group's latest attempt:
  `infra`           every failing job is an infrastructure failure: an infra-suspect job in
                    `test_jobs` (died, failed outside tests, mass failure), a test job that failed
                    without any test result, a job abandoned for STALE_HOURS, or a `job_failure`
                    row marked infra (the log classifier, when its table exists);
  `new`             a failing job without failing tests (build, lint), or a failing test that is
                    neither flaky nor broken in `flaky_tests`;
  `broken_on_main`  every failing test is `broken` (or flaky) in `flaky_tests`, and one is broken;
                    on a pull request also a new failure whose group was failing on main (in that
                    day's `commit_health`) when the job started, with every one of its failing tests
                    failing there too (all listed: a list cut at MAX_LISTED_TESTS is not enough), or
                    none known on either side (a build broken on main);
  `known_flaky`     every failing test is `flaky` in `flaky_tests`.
A cancelled job is a failure, as PyTorch's HUD counts it (`isFailedJob`). On a pull request, a
job whose every failing id was cancelled is also marked `cancelled` in `pr_jobs`: PyTorch's Dr. CI
lists such a job apart, to be retried, not as the pull request's failure. On main, a group whose
every failed attempt failed by cancellation alone is marked `cancelled` in `commit_health`: the
trunk guardians read it as no word on the code (cancelling trunk runs during an incident must not
pin a culprit nor keep an alert open), as PyTorch's autorevert and alerts read a cancelled job.

Windows, and why a partition is a snapshot. Day D's partition holds the commits pushed on
D-LOOKBACK_DAYS..D, judged with everything that arrived by the end of D (or now, for today):
their jobs, runs, test reports and test aggregates of those days. A commit's CI runs for hours
after its push and reruns come later, so its state keeps changing for a day or two; the
newest partition that includes it has its latest word, and the partition of its push day plus
LOOKBACK_DAYS its final one. Each partition reads a fixed number of days, so a new day costs
the same whatever the history; nothing reads beyond D, so days can be processed in order.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from resources.lake import Lake, connect
from resources.sql import Columns, SqlFiles, compose, execute, relation, run_steps
from torchci_assets.config import PYTORCH_HUD, main_branch
from torchci_assets.derived.hud.downstream import define_downstream_macros, epoch_ms, zombie_timeout
from torchci_assets.derived.hud.inputs import COLUMNS, register
from torchci_assets.ingest.ci_results import define_callback_macros
from torchci_assets.ingest.payloads import PUSH_COLUMNS_ADDED
from torchci_assets.partitions import days_around

LOOKBACK_DAYS = 2
STALE_HOURS = 36
# Workflows whose failures block viable/strict in PyTorch (HUD's metrics page uses the same list);
# time to signal: the workflows a developer waits for (test-infra time_to_signal); "HAVING COUNT(*) >
# 10": fewer groups means the commit ran nothing meaningful. Another repository's come from its
# config's `hud` section (HudConfig: every workflow by default).
BLOCKING_WORKFLOWS = PYTORCH_HUD.blocking_workflows
SIGNAL_WORKFLOWS = PYTORCH_HUD.signal_workflows
MIN_JOB_GROUPS = PYTORCH_HUD.min_job_groups
FAILING_CONCLUSIONS = ("failure", "timed_out", "cancelled", "startup_failure")
MAX_LISTED_TESTS = 5
FAILURE_CLASSES = ("infra", "new", "broken_on_main", "known_flaky")
CONCLUSIONS = ("red", "flaky", "green", "pending", "no_signal")

TS = pa.timestamp("us", tz="UTC")
SQL = SqlFiles(__file__)
# commit_groups.sql's steps up to each group's attempts (what the trunk guardians read)
ATTEMPT_STEPS = ("unstable_rule", "unstable", "first_occurrences", "attempts")

_IDENTITY_FIELDS = [
    ("workflow", pa.string()), ("job_group", pa.string()), ("name", pa.string()),
    ("state", pa.string()), ("failure_class", pa.string()), ("attempts", pa.int64()),
    ("job_id", pa.int64()), ("run_id", pa.int64()), ("run_attempt", pa.int64()),
    ("duration_s", pa.float64()), ("started_at", TS), ("completed_at", TS),
    ("build_env", pa.string()), ("test_config", pa.string()), ("platform", pa.string()),
    ("infra_reason", pa.string()), ("failure_line", pa.string()),
    ("failing_tests", pa.list_(pa.string())), ("failing_test_count", pa.int64()),
]

COMMIT_HEALTH_SCHEMA = pa.schema([
    ("sha", pa.string()), ("pushed_at", TS), ("pushed_day", pa.date32()), ("as_of", TS),
    ("workflow", pa.string()), ("job_group", pa.string()), ("blocking", pa.bool_()), ("unstable", pa.bool_()),
    ("attempts", pa.int64()), ("jobs", pa.int64()), ("state", pa.string()), ("failure_class", pa.string()),
    ("failing_jobs", pa.int64()), ("job_id", pa.int64()), ("run_id", pa.int64()), ("run_attempt", pa.int64()),
    ("job_name", pa.string()), ("duration_s", pa.float64()), ("infra_reason", pa.string()),
    ("failure_line", pa.string()), ("failing_tests", pa.list_(pa.string())), ("failing_test_count", pa.int64()),
    ("conclusion", pa.string()), ("blocking_groups", pa.int64()), ("time_to_signal_s", pa.float64()),
    ("signal_at", TS),
    # every failed attempt of the group failed by cancellation alone (the trunk guardians' no evidence)
    ("cancelled", pa.bool_()),
    # what the cell's tooltip counts: each failing job of the latest attempt, the linked one first
    ("failing_kinds", pa.list_(pa.struct([("failure_class", pa.string()), ("infra_reason", pa.string()),
                                          ("job_id", pa.int64())]))),
    # a flaky group's latest failed attempt, which its cell shows and links to
    ("failed_attempt", pa.struct([
        ("run_id", pa.int64()), ("run_attempt", pa.int64()), ("job_id", pa.int64()), ("job_name", pa.string()),
        ("failing_jobs", pa.int64()), ("infra_reason", pa.string()), ("failure_line", pa.string()),
        ("failing_tests", pa.list_(pa.string())), ("failing_test_count", pa.int64())])),
])

PR_JOBS_SCHEMA = pa.schema([
    ("number", pa.int64()), ("head_sha", pa.string()), ("pr_state", pa.string()), ("merged", pa.bool_()),
    ("head_ref", pa.string()), ("base_ref", pa.string()), ("labels", pa.list_(pa.string())),
    ("pr_updated_at", TS), ("as_of", TS), ("source", pa.string()), ("level", pa.string()),
    *_IDENTITY_FIELDS,
    ("cancelled", pa.bool_()),  # a failure whose every failing job was cancelled: Dr. CI's CANCELLED, not NEW
    ("unstable", pa.bool_()),  # a job of an open UNSTABLE issue (unstable.py): Dr. CI's UNSTABLE, as main's U
])


def as_of_instant(day: str, now: dt.datetime | None = None) -> dt.datetime:
    """The end of `day`, or now while the day is not over: what a partition judges at."""
    end = dt.datetime.fromisoformat(day).replace(tzinfo=dt.timezone.utc) + dt.timedelta(days=1)
    now = now or dt.datetime.now(dt.timezone.utc)
    return min(end, now)


# ---- inputs ---------------------------------------------------------------------------------

_VIEWS = {"w_push": "push", "w_jobs": "workflow_job", "w_runs": "workflow_run", "w_tjobs": "test_jobs",
          "w_outcomes": "test_sha_outcomes", "w_flaky": "flaky_tests", "w_job_failure": "job_failure",
          "w_pr": "pull_request", "w_ci": "ci_result", "w_health": "commit_health"}


def register_inputs(con, lake: Lake, views: dict[str, list[str]]) -> dict[str, int]:
    """Each view over its table's partitions for the given days (empty when there is none); returns
    the files read per view."""
    return {view: register(con, lake, _VIEWS[view], days, view) for view, days in views.items()}


def register_pushes(con, lake: Lake, days: list[str], view: str = "w_push") -> int:
    """View `view` with the commits each push lists (`commit_heads.sql`), which partitions written
    before the push table kept them lack; returns the files read."""
    files = lake.register(con, "push", days, name=f"{view}__files")
    columns = {**COLUMNS["push"], **PUSH_COLUMNS_ADDED}
    step = dict(SQL.steps("commit_heads"))["pushes" if files else "no_pushes"]
    con.execute(compose(step, view=view, source=f"{view}__files", added=PUSH_COLUMNS_ADDED,
                        columns=list(columns) if files else Columns(columns)))
    return files


def job_identities(con, as_of: dt.datetime, stale_hours: int) -> None:
    """Temp tables from the `heads(sha)` table and the w_* views: the job identities of those heads,
    the failing tests and infrastructure evidence of the failed ones, and their failure class."""
    run_steps(con, SQL.steps("job_identities"), {
        "stale_before": as_of - dt.timedelta(hours=int(stale_hours)),
        "failing_conclusions": list(FAILING_CONCLUSIONS), "max_listed_tests": MAX_LISTED_TESTS})


@dataclass
class CommitHealthReport:
    day: str
    commits: int
    rows: int
    conclusions: dict[str, int]
    states: dict[str, int]
    failure_classes: dict[str, int]
    inputs: dict[str, int]  # table -> files of its window read


def build_commit_health(lake: Lake, day: str, upstream_repo: str, branches: tuple[str, ...],
                        blocking: tuple[str, ...] = BLOCKING_WORKFLOWS, min_groups: int = MIN_JOB_GROUPS,
                        stale_hours: int = STALE_HOURS, now: dt.datetime | None = None,
                        unstable_jobs: list[str] | None = None,
                        signal: tuple[str, ...] = SIGNAL_WORKFLOWS) -> CommitHealthReport:
    """Write `commit_health` for `day`: the commits pushed to the main branch of `branches`
    (`main_branch`) of `upstream_repo` on day-LOOKBACK_DAYS..day and their job groups, as of the end
    of `day` (see the module docstring).
    `unstable_jobs`: the jobs of the open UNSTABLE issues (unstable.py); `blocking` and `signal`
    empty: every workflow."""
    as_of = as_of_instant(day, now)
    window = days_around(day, LOOKBACK_DAYS)
    con = connect()
    try:
        inputs = {"w_push": register_pushes(con, lake, window), **register_inputs(con, lake, {
            "w_jobs": window, "w_runs": window, "w_tjobs": window, "w_outcomes": window,
            "w_flaky": [day], "w_job_failure": window})}
        values = {"upstream_repo": upstream_repo, "branch": main_branch(branches), "as_of": as_of,
                  "blocking": list(blocking), "signal": list(signal), "min_groups": int(min_groups),
                  "stale_before": as_of - dt.timedelta(hours=int(stale_hours)),
                  "unstable": list(unstable_jobs or [])}
        execute(con, dict(SQL.steps("commit_heads"))["heads"], values)
        job_identities(con, as_of, stale_hours)
        run_steps(con, SQL.steps("commit_groups"), values)
        table = relation(con, SQL["commit_health"], values).to_arrow_table().cast(COMMIT_HEALTH_SCHEMA)
        rows = lake.write("commit_health", day, table)
        conclusions = dict(con.execute("SELECT conclusion, count(*) FROM commit_conclusion GROUP BY ALL").fetchall())
        states = dict(con.execute("SELECT state, count(*) FROM group_rows GROUP BY ALL").fetchall())
        classes = dict(con.execute("SELECT failure_class, count(*) FROM group_rows "
                                   "WHERE failure_class IS NOT NULL GROUP BY ALL").fetchall())
        commits = con.execute("SELECT count(*) FROM heads").fetchone()[0]
    finally:
        con.close()
    return CommitHealthReport(day, commits, rows, {c: int(conclusions.get(c, 0)) for c in CONCLUSIONS},
                              {k: int(v) for k, v in states.items()},
                              {c: int(classes.get(c, 0)) for c in FAILURE_CLASSES},
                              {_VIEWS[view]: files for view, files in inputs.items()})


# ---- pr_jobs --------------------------------------------------------------------------------


@dataclass
class PrJobsReport:
    day: str
    pull_requests: int
    rows: int
    downstream_rows: int
    failure_classes: dict[str, int]


def build_pr_jobs(lake: Lake, day: str, upstream_repo: str, downstream_levels: tuple[str, ...] = ("L3", "L4"),
                  stale_hours: int = STALE_HOURS, now: dt.datetime | None = None,
                  unstable_jobs: list[str] | None = None, zombie_timeout_s: int | None = None) -> PrJobsReport:
    """Write `pr_jobs` for `day`: for each pull request of `upstream_repo` active on
    day-LOOKBACK_DAYS..day, every job of its latest head (the latest attempt of each job name, with its
    failure class) and the downstream backends' results for that head (`source` = the backend repo,
    levels in `downstream_levels`), as of the end of `day`; one row with no job for a head without
    any. `unstable_jobs` as for `build_commit_health`: a pull request's job is unstable as it would
    be on main. A downstream job that never completed times out after `zombie_timeout_s` (default:
    the config's `zombie_timeout_seconds`), as on the backend pages (downstream.py)."""
    as_of = as_of_instant(day, now)
    window = days_around(day, LOOKBACK_DAYS)
    con = connect()
    try:
        register_inputs(con, lake, {
            "w_pr": window, "w_jobs": window, "w_runs": window, "w_tjobs": window, "w_outcomes": window,
            "w_flaky": [day], "w_job_failure": window, "w_ci": window, "w_health": [day]})
        values = {"upstream_repo": upstream_repo, "as_of": as_of, "levels": list(downstream_levels),
                  "unstable": list(unstable_jobs or []), "as_of_ms": epoch_ms(as_of),
                  "zombie_timeout_s": zombie_timeout(zombie_timeout_s)}
        define_callback_macros(con)
        define_downstream_macros(con)
        run_steps(con, SQL.steps("pr_heads"), values)
        job_identities(con, as_of, stale_hours)
        run_steps(con, [s for s in SQL.steps("commit_groups") if s[0] in ("unstable_rule", "unstable")], values)
        # the previous day's rows carry a head whose CI ran before this window (see pr_jobs.sql, `carried`)
        carry = lake.register(con, "pr_jobs", [days_around(day, 1)[0]], name="prev_pr_jobs") > 0
        run_steps(con, [s for s in SQL.steps("pr_jobs") if carry or s[0] != "carried"], values)
        table = con.sql("SELECT * FROM pr_job_rows").to_arrow_table().cast(PR_JOBS_SCHEMA)
        rows = lake.write("pr_jobs", day, table)
        prs = con.execute("SELECT count(*) FROM prs").fetchone()[0]
    finally:
        con.close()
    counts = {v["values"]: v["counts"] for v in pc.value_counts(table["failure_class"]).to_pylist()}
    downstream = int(pc.sum(pc.not_equal(table["source"], "github")).as_py() or 0)
    return PrJobsReport(day, prs, rows, downstream, {c: int(counts.get(c, 0)) for c in FAILURE_CLASSES})

