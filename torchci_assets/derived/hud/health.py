"""Greenness of upstream main commits (`commit_health`) and of pull requests' heads (`pr_jobs`).

PyTorch's semantics (test-infra `torchci/clickhouse_queries/master_commit_red/query.sql`):

* A **job group** is a job name with its shard numbers stripped
  (`linux-jammy / test (default, 2, 5, linux.4xlarge)` -> `test (default, linux.4xlarge)`),
  prefixed here with its workflow: the same job name in two workflows (a build in `pull` and in
  `trunk`) is two groups, where PyTorch's query would merge them.
* **Placeholder job ids collapse**: GitHub sometimes creates a job id at dispatch that never gets
  a runner nor a conclusion, then a second id for the same job that runs. Every id with the same
  (run, attempt, job name) is one job identity: `failed` if any id failed (or it is unresolved and
  older than STALE_HOURS: GitHub abandoned it), `resolved` if any id concluded or its workflow run
  completed, `pending` otherwise.
* An attempt of a group failed if any of its jobs did; a group is `failure` when **every** attempt
  failed (never recovered), `flaky` when some failed and a later one did not (recovered on rerun),
  `pending` while an attempt is in flight, else `success` (`skipped` when nothing ran).
* A commit is `pending` if any of its blocking groups is, else `red` if any blocking group is a
  failure, else `flaky` if any recovered, else `green`. Blocking groups are those of the
  workflows that gate viable/strict (BLOCKING_WORKFLOWS), minus jobs PyTorch ignores there
  (unstable, rerun_disabled_tests). A commit with too few blocking groups (PyTorch: more than
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
                    day's `commit_health`) when the job started, with the same failing tests or none
                    known on either side (a build broken on main);
  `known_flaky`     every failing test is `flaky` in `flaky_tests`.

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
from torchci_assets.derived.hud.inputs import register
from torchci_assets.partitions import days_around

LOOKBACK_DAYS = 2
STALE_HOURS = 36
# Workflows whose failures block viable/strict in PyTorch (HUD's metrics page uses the same list).
BLOCKING_WORKFLOWS = ("Lint", "pull", "trunk", "linux-aarch64", "docs-build")
# Time to signal: the workflows a developer waits for (test-infra time_to_signal).
SIGNAL_WORKFLOWS = ("pull", "trunk")
MIN_JOB_GROUPS = 11  # "HAVING COUNT(*) > 10": fewer groups means the commit ran nothing meaningful
FAILING_CONCLUSIONS = ("failure", "timed_out", "cancelled", "startup_failure")
IGNORED_NAME_PATTERNS = ("%unstable%", "%rerun_disabled_tests%", "ciflow_should_run", "generate-test-matrix")
MAX_LISTED_TESTS = 5
FAILURE_CLASSES = ("infra", "new", "broken_on_main", "known_flaky")
CONCLUSIONS = ("red", "flaky", "green", "pending", "no_signal")

TS = pa.timestamp("us", tz="UTC")

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
    ("workflow", pa.string()), ("job_group", pa.string()), ("blocking", pa.bool_()),
    ("attempts", pa.int64()), ("jobs", pa.int64()), ("state", pa.string()), ("failure_class", pa.string()),
    ("failing_jobs", pa.int64()), ("job_id", pa.int64()), ("run_id", pa.int64()), ("run_attempt", pa.int64()),
    ("job_name", pa.string()), ("duration_s", pa.float64()), ("infra_reason", pa.string()),
    ("failure_line", pa.string()), ("failing_tests", pa.list_(pa.string())), ("failing_test_count", pa.int64()),
    ("conclusion", pa.string()), ("blocking_groups", pa.int64()), ("time_to_signal_s", pa.float64()),
    ("signal_at", TS),
])

PR_JOBS_SCHEMA = pa.schema([
    ("number", pa.int64()), ("head_sha", pa.string()), ("pr_state", pa.string()), ("merged", pa.bool_()),
    ("head_ref", pa.string()), ("base_ref", pa.string()), ("labels", pa.list_(pa.string())),
    ("pr_updated_at", TS), ("as_of", TS), ("source", pa.string()), ("level", pa.string()),
    *_IDENTITY_FIELDS,
])


def sql_list(values) -> str:
    return "(" + ", ".join("'" + str(v).replace("'", "''") + "'" for v in values) + ")"


def as_of_instant(day: str, now: dt.datetime | None = None) -> dt.datetime:
    """The end of `day`, or now while the day is not over: what a partition judges at."""
    end = dt.datetime.fromisoformat(day).replace(tzinfo=dt.timezone.utc) + dt.timedelta(days=1)
    now = now or dt.datetime.now(dt.timezone.utc)
    return min(end, now)


def _ts(t: dt.datetime) -> str:
    return f"TIMESTAMPTZ '{t.isoformat()}'"


# ---- inputs ---------------------------------------------------------------------------------

_VIEWS = {"w_push": "push", "w_jobs": "workflow_job", "w_runs": "workflow_run", "w_tjobs": "test_jobs",
          "w_outcomes": "test_sha_outcomes", "w_flaky": "flaky_tests", "w_job_failure": "job_failure",
          "w_pr": "pull_request", "w_ci": "ci_result", "w_health": "commit_health"}


def register_inputs(con, lake: Lake, views: dict[str, list[str]]) -> dict[str, int]:
    """Each view over its table's partitions for the given days (empty when there is none); returns
    the files read per view."""
    return {view: register(con, lake, _VIEWS[view], days, view) for view, days in views.items()}


# ---- job identities: one per (run, attempt, job name); a run is of one commit and one workflow ----

_RUN_RANK = "CASE status WHEN 'completed' THEN 4 WHEN 'in_progress' THEN 3 WHEN 'waiting' THEN 2 ELSE 1 END"
_FAILING = sql_list(FAILING_CONCLUSIONS)


def _latest(columns: list[str], order: str) -> str:
    return ",\n".join(f"arg_max({c}, {order}) FILTER (WHERE {c} IS NOT NULL) AS {c}" for c in columns)


def _identity_steps(as_of: dt.datetime, stale_hours: int) -> list[tuple[str, str]]:
    """Temp tables from the `heads(sha)` table and the w_* views: the job identities of those heads,
    the failing tests and infrastructure evidence of the failed ones, and their failure class."""
    stale = f"{_ts(as_of)} - INTERVAL {int(stale_hours)} HOUR"
    return [
        # A job identity's rows (every id, attempt-day and delivery state of the window) aggregate
        # straight into its state: a conclusion appears only once a job completed and never changes,
        # so "any failing conclusion", "any conclusion" and the ids' latest fields are all order-free.
        ("identities", f"""
            WITH g AS (
                SELECT any_value(head_sha) AS sha, run_id, run_attempt, name, any_value(workflow_name) AS workflow_name,
                       coalesce(bool_or(conclusion IN {_FAILING}), false) AS failed,
                       coalesce(bool_or(coalesce(conclusion, '') <> ''), false) AS concluded,
                       coalesce(bool_and(conclusion IN ('skipped', 'neutral'))
                                FILTER (WHERE coalesce(conclusion, '') <> ''), false) AS skipped,
                       max(coalesce(created_at, started_at, received_at)) AS created_at,
                       -- the job to link to: a failing id first, else one that concluded, else one that started
                       arg_max(id, (coalesce(conclusion IN {_FAILING}, false)::BIGINT << 61)
                                   + ((coalesce(conclusion, '') <> '')::BIGINT << 60)
                                   + ((started_at IS NOT NULL)::BIGINT << 59) + id) AS job_id,
                       -- (list_distinct on the result: DISTINCT inside the aggregate is ten times slower)
                       list_distinct(list(id) FILTER (WHERE conclusion IN {_FAILING})) AS failing_ids,
                       max(duration_s) AS duration_s, min(started_at) AS started_at,
                       max(completed_at) AS completed_at,
                       any_value(build_env) AS build_env, any_value(test_config) AS test_config,
                       any_value(platform) AS platform
                FROM w_jobs WHERE head_sha IN (SELECT sha FROM heads)
                GROUP BY run_id, run_attempt, name  -- a run is of one commit
            ),
            runs AS (
                SELECT id AS run_id, run_attempt, {_latest(['name', 'event', 'status'],
                                                           f'({_RUN_RANK}, updated_at, day)')}
                FROM w_runs WHERE id IN (SELECT DISTINCT run_id FROM g) GROUP BY id, run_attempt
            ),
            i AS (
                SELECT g.* EXCLUDE (workflow_name), coalesce(g.workflow_name, r.name, 'unknown') AS workflow,
                       coalesce(r.status = 'completed', false) AS run_done
                FROM g LEFT JOIN runs r USING (run_id, run_attempt)
                WHERE coalesce(r.event, '') <> 'workflow_run'
            )
            SELECT *,
                workflow || ' / ' || regexp_replace(name, ', \\d+, \\d+(,|\\))', '\\1') AS job_group,
                CASE WHEN failed THEN 'failed' WHEN concluded OR run_done THEN 'resolved'
                     WHEN created_at < {stale} THEN 'failed' ELSE 'pending' END AS identity_state,
                NOT failed AND NOT concluded AND NOT run_done AND created_at < {stale} AS stale
            FROM i
        """),
        # failing tests of failing identities (final failures on that commit, by job id)
        ("identity_tests", """
            WITH ft AS (
                SELECT o.file, o.classname, o.name AS test, o.head_sha AS sha, unnest(o.failing_job_ids) AS job_id
                FROM w_outcomes o WHERE o.failed + o.errors > 0 AND o.head_sha IN (SELECT sha FROM heads)
            ),
            ids AS (SELECT sha, run_id, run_attempt, name, unnest(failing_ids) AS job_id
                    FROM identities WHERE failed)
            SELECT DISTINCT ids.sha, ids.run_id, ids.run_attempt, ids.name, ft.file, ft.classname, ft.test,
                   coalesce(f.verdict, 'unknown') AS verdict
            FROM ids JOIN ft USING (sha, job_id)
            LEFT JOIN w_flaky f ON f.file = ft.file AND f.classname = ft.classname AND f.name = ft.test
        """),
        # infrastructure evidence per failing job id
        ("identity_infra", """
            WITH ids AS (SELECT sha, run_id, run_attempt, name, test_config, unnest(failing_ids) AS job_id
                         FROM identities WHERE failed),
            tj AS (SELECT job_id, workflow_run_attempt AS run_attempt, bool_or(infra_suspect) AS infra,
                          any_value(infra_reason) FILTER (WHERE infra_suspect) AS reason
                   FROM w_tjobs GROUP BY ALL),
            jf AS (SELECT job_id, run_attempt, bool_or(infra) AS infra, any_value(line) AS line
                   FROM w_job_failure GROUP BY ALL)
            SELECT ids.sha, ids.run_id, ids.run_attempt, ids.name,
                   bool_and(coalesce(jf.infra, false) OR coalesce(tj.infra, false)
                            OR (tj.job_id IS NULL AND ids.test_config IS NOT NULL)) AS infra,
                   any_value(CASE WHEN jf.infra THEN 'log' WHEN tj.infra THEN tj.reason
                                  WHEN tj.job_id IS NULL AND ids.test_config IS NOT NULL THEN 'no-test-results'
                             END) AS infra_reason,
                   any_value(jf.line) AS failure_line
            FROM ids LEFT JOIN tj ON tj.job_id = ids.job_id AND tj.run_attempt = ids.run_attempt
            LEFT JOIN jf ON jf.job_id = ids.job_id AND jf.run_attempt = ids.run_attempt
            GROUP BY ALL
        """),
        ("identity_class", f"""
            WITH t AS (
                SELECT sha, run_id, run_attempt, name, count(*) AS tests,
                       count(*) FILTER (WHERE verdict NOT IN ('flaky', 'broken')) AS new_tests,
                       count(*) FILTER (WHERE verdict = 'broken') AS broken_tests,
                       list(classname || '.' || test || ' (' || file || ')'
                            ORDER BY verdict IN ('flaky', 'broken'), file, classname, test)[1:{MAX_LISTED_TESTS}]
                           AS failing_tests
                FROM identity_tests GROUP BY ALL
            )
            SELECT i.sha, i.run_id, i.run_attempt, i.name,
                CASE WHEN i.stale OR coalesce(x.infra, false) THEN 'infra'
                     WHEN coalesce(t.tests, 0) = 0 OR t.new_tests > 0 THEN 'new'
                     WHEN t.broken_tests > 0 THEN 'broken_on_main'
                     ELSE 'known_flaky' END AS failure_class,
                CASE WHEN i.stale THEN 'abandoned' ELSE x.infra_reason END AS infra_reason,
                x.failure_line, coalesce(t.failing_tests, []) AS failing_tests,
                coalesce(t.tests, 0) AS failing_test_count
            FROM identities i
            LEFT JOIN t USING (sha, run_id, run_attempt, name)
            LEFT JOIN identity_infra x USING (sha, run_id, run_attempt, name)
            WHERE i.identity_state = 'failed'
        """),
    ]


def _run_steps(con, steps: list[tuple[str, str]]) -> None:
    for name, sql in steps:
        con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS {sql}")


# ---- commit_health ------------------------------------------------------------------------


def _commit_steps(blocking: tuple[str, ...], min_groups: int, as_of: dt.datetime, stale_hours: int,
                  signal: tuple[str, ...]) -> list[tuple[str, str]]:
    ignored = " OR ".join(f"i.name LIKE '{p}'" for p in IGNORED_NAME_PATTERNS)
    return [
        # one row per attempt of a group, with what its cell would show if it is the latest: the
        # failing identities' classes combined (infra only when every failing job is; a real
        # failure anywhere makes it new), the job to link to, the longest job, the failing tests
        ("attempts", f"""
            SELECT i.sha, i.workflow, i.job_group, i.run_id, i.run_attempt,
                   bool_or(i.identity_state = 'failed') AS has_failure,
                   bool_or(i.identity_state = 'pending') AS has_pending,
                   bool_and(i.skipped) AS all_skipped,
                   bool_and(i.workflow IN {sql_list(blocking)} AND NOT ({ignored})) AS blocking,
                   count(*) AS jobs, count(*) FILTER (WHERE i.identity_state = 'failed') AS failing_jobs,
                   min(i.created_at) AS created_at,
                   CASE WHEN count(c.failure_class) = 0 THEN NULL
                        WHEN bool_and(c.failure_class = 'infra') THEN 'infra'
                        WHEN bool_or(c.failure_class = 'new') THEN 'new'
                        WHEN bool_or(c.failure_class = 'broken_on_main') THEN 'broken_on_main'
                        ELSE 'known_flaky' END AS failure_class,
                   arg_max(i.job_id, (c.failure_class IS NOT NULL, coalesce(i.duration_s, 0), i.name)) AS job_id,
                   arg_max(i.name, (c.failure_class IS NOT NULL, coalesce(i.duration_s, 0), i.name)) AS job_name,
                   max(i.duration_s) AS duration_s,
                   any_value(c.infra_reason) AS infra_reason, any_value(c.failure_line) AS failure_line,
                   list_distinct(flatten(list(c.failing_tests))) AS failing_tests,
                   coalesce(sum(c.failing_test_count), 0)::BIGINT AS failing_test_count
            FROM identities i
            LEFT JOIN identity_class c ON c.sha = i.sha AND c.run_id = i.run_id AND c.run_attempt = i.run_attempt
                 AND c.name = i.name
            GROUP BY i.sha, i.workflow, i.job_group, i.run_id, i.run_attempt
        """),
        # a group over its attempts; its cell is its latest attempt's
        ("group_rows", f"""
            WITH g AS (
                SELECT sha, workflow, job_group, count(*) AS attempts, bool_or(has_pending) AS has_pending,
                       bool_and(has_failure) AS all_failed, bool_or(has_failure) AS any_failed,
                       bool_and(all_skipped) AS all_skipped, bool_and(blocking) AS blocking,
                       {", ".join(f"arg_max({c}, epoch_ms(created_at) * 64 + least(run_attempt, 63)) AS {c}"
                                  for c in ("run_id", "run_attempt", "jobs", "failing_jobs", "failure_class",
                                            "job_id", "job_name", "duration_s", "infra_reason", "failure_line",
                                            "failing_tests", "failing_test_count"))}
                FROM attempts GROUP BY sha, workflow, job_group
            )
            SELECT sha, workflow, job_group, blocking, attempts, jobs,
                CASE WHEN has_pending THEN 'pending' WHEN all_failed THEN 'failure'
                     WHEN any_failed THEN 'flaky' WHEN all_skipped THEN 'skipped' ELSE 'success' END AS state,
                failing_jobs, job_id, run_id, run_attempt, job_name, duration_s, infra_reason, failure_line,
                failing_tests, failing_test_count,
                CASE WHEN all_failed AND NOT has_pending THEN coalesce(failure_class, 'new') END AS failure_class
            FROM g
        """),
        # time to signal (test-infra time_to_signal): the slowest signal workflow run, for commits
        # where every such run succeeded at its first attempt
        ("signal", f"""
            WITH r AS (
                SELECT id, run_attempt, {_latest(['name', 'status', 'conclusion', 'created_at', 'updated_at'],
                                                 f'({_RUN_RANK}, updated_at, day)')}
                FROM w_runs WHERE id IN (SELECT DISTINCT run_id FROM identities WHERE workflow IN {sql_list(signal)})
                GROUP BY id, run_attempt
            ),
            per_sha AS (
                SELECT DISTINCT i.sha, r.* FROM r JOIN identities i ON i.run_id = r.id
            )
            SELECT sha, max(epoch(updated_at) - epoch(created_at)) AS time_to_signal_s, max(updated_at) AS signal_at
            FROM per_sha WHERE name IN {sql_list(signal)}
            GROUP BY sha
            HAVING bool_and(run_attempt = 1 AND status = 'completed' AND conclusion = 'success')
        """),
        ("commit_conclusion", f"""
            SELECT h.sha,
                count(g.sha) FILTER (WHERE g.blocking) AS blocking_groups,
                CASE WHEN bool_or(g.blocking AND g.state = 'pending') THEN 'pending'
                     WHEN count(g.sha) FILTER (WHERE g.blocking) = 0 AND h.pushed_at >= {_ts(as_of)}
                          - INTERVAL {int(stale_hours)} HOUR THEN 'pending'
                     WHEN count(g.sha) FILTER (WHERE g.blocking) < {int(min_groups)} THEN 'no_signal'
                     WHEN bool_or(g.blocking AND g.state = 'failure') THEN 'red'
                     WHEN bool_or(g.blocking AND g.state = 'flaky') THEN 'flaky'
                     ELSE 'green' END AS conclusion
            FROM heads h LEFT JOIN group_rows g USING (sha)
            GROUP BY h.sha, h.pushed_at
        """),
    ]


@dataclass
class CommitHealthReport:
    day: str
    commits: int
    rows: int
    conclusions: dict[str, int]
    states: dict[str, int]
    failure_classes: dict[str, int]
    inputs: dict[str, int]


def build_commit_health(lake: Lake, day: str, upstream_repo: str, branches: tuple[str, ...],
                        blocking: tuple[str, ...] = BLOCKING_WORKFLOWS, min_groups: int = MIN_JOB_GROUPS,
                        stale_hours: int = STALE_HOURS, now: dt.datetime | None = None) -> CommitHealthReport:
    """Write `commit_health` for `day`: the commits pushed to `branches` of `upstream_repo` on
    day-LOOKBACK_DAYS..day and their job groups, as of the end of `day` (see the module docstring)."""
    as_of = as_of_instant(day, now)
    window = days_around(day, LOOKBACK_DAYS)
    con = connect()
    try:
        inputs = register_inputs(con, lake, {
            "w_push": window, "w_jobs": window, "w_runs": window, "w_tjobs": window, "w_outcomes": window,
            "w_flaky": [day], "w_job_failure": window})
        con.execute(f"""
            CREATE TEMP TABLE heads AS
            SELECT after AS sha, min(received_at) AS pushed_at FROM w_push
            WHERE ref IN {sql_list(branches)} AND (repo IS NULL OR lower(repo) = lower('{upstream_repo}'))
              AND NOT coalesce(deleted, false) AND after IS NOT NULL AND after <> '{'0' * 40}'
              AND received_at <= {_ts(as_of)}
            GROUP BY after
        """)
        _run_steps(con, _identity_steps(as_of, stale_hours))
        _run_steps(con, _commit_steps(blocking, min_groups, as_of, stale_hours, SIGNAL_WORKFLOWS))
        table = con.sql(f"""
            SELECT h.sha, h.pushed_at, h.pushed_at::DATE AS pushed_day, {_ts(as_of)} AS as_of,
                   g.workflow, g.job_group, g.blocking, g.attempts, g.jobs, g.state, g.failure_class, g.failing_jobs,
                   g.job_id, g.run_id, g.run_attempt, g.job_name, g.duration_s, g.infra_reason, g.failure_line,
                   g.failing_tests, g.failing_test_count,
                   c.conclusion, c.blocking_groups, s.time_to_signal_s, s.signal_at
            FROM heads h JOIN commit_conclusion c USING (sha)
            LEFT JOIN group_rows g USING (sha)
            LEFT JOIN signal s USING (sha)
            ORDER BY h.pushed_at DESC, h.sha, g.workflow, g.job_group
        """).to_arrow_table().cast(COMMIT_HEALTH_SCHEMA)
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
                              {c: int(classes.get(c, 0)) for c in FAILURE_CLASSES}, inputs)


# ---- pr_jobs --------------------------------------------------------------------------------


@dataclass
class PrJobsReport:
    day: str
    pull_requests: int
    rows: int
    downstream_rows: int
    failure_classes: dict[str, int]


_DOWNSTREAM_STATE = ("CASE failure_kind WHEN 'none' THEN 'success' WHEN 'pending' THEN 'pending' "
                     "ELSE 'failure' END")


def build_pr_jobs(lake: Lake, day: str, upstream_repo: str, downstream_levels: tuple[str, ...] = ("L3", "L4"),
                  stale_hours: int = STALE_HOURS, now: dt.datetime | None = None) -> PrJobsReport:
    """Write `pr_jobs` for `day`: for each pull request of `upstream_repo` active on
    day-LOOKBACK_DAYS..day, every job of its latest head (the latest attempt of each job name, with its
    failure class) and the downstream backends' results for that head (`source` = the backend repo,
    levels in `downstream_levels`), as of the end of `day`."""
    as_of = as_of_instant(day, now)
    window = days_around(day, LOOKBACK_DAYS)
    con = connect()
    try:
        register_inputs(con, lake, {
            "w_pr": window, "w_jobs": window, "w_runs": window, "w_tjobs": window, "w_outcomes": window,
            "w_flaky": [day], "w_job_failure": window, "w_ci": window, "w_health": [day]})
        con.execute(f"""
            CREATE TEMP TABLE prs AS
            SELECT number, {_latest(['head_sha', 'state', 'merged', 'head_ref', 'base_ref', 'labels'],
                                    '(coalesce(updated_at, received_at), received_at)')},
                   max(coalesce(updated_at, received_at)) AS pr_updated_at
            FROM w_pr WHERE (repo IS NULL OR lower(repo) = lower('{upstream_repo}')) AND number IS NOT NULL
              AND received_at <= {_ts(as_of)}
            GROUP BY number
        """)
        con.execute("CREATE TEMP TABLE heads AS SELECT DISTINCT head_sha AS sha FROM prs WHERE head_sha IS NOT NULL")
        _run_steps(con, _identity_steps(as_of, stale_hours))
        # each job name's latest attempt (an aggregate of whole rows: cheaper than a window's sort)
        con.execute("""
            CREATE TEMP TABLE latest_identities AS
            SELECT unnest(arg_max(i, (run_attempt::BIGINT << 44) + epoch_ms(created_at))), count(*) AS attempts
            FROM identities i GROUP BY sha, workflow, name
        """)
        levels = sql_list(downstream_levels)
        table = con.sql(f"""
            WITH github0 AS (
                SELECT i.sha AS head_sha, 'github' AS source, NULL::VARCHAR AS level, i.workflow, i.job_group, i.name,
                       CASE i.identity_state WHEN 'failed' THEN 'failure' WHEN 'pending' THEN 'pending'
                            ELSE CASE WHEN i.skipped THEN 'skipped' ELSE 'success' END END AS state,
                       c.failure_class, i.attempts, i.job_id, i.run_id, i.run_attempt, i.duration_s, i.started_at,
                       i.completed_at, i.build_env, i.test_config, i.platform, c.infra_reason, c.failure_line,
                       coalesce(c.failing_tests, []) AS failing_tests, coalesce(c.failing_test_count, 0) AS failing_test_count
                FROM latest_identities i LEFT JOIN identity_class c USING (sha, run_id, run_attempt, name)
            ),
            -- a new failure whose group was failing on main when the job started, with the same failing
            -- tests (or none known on either side: a build, a lint), came with main: broken on main
            main_states AS (
                SELECT job_group, pushed_at, state, failing_tests FROM w_health
                WHERE state IN ('failure', 'flaky', 'success')
            ),
            inherited AS (
                SELECT g.head_sha, g.workflow, g.name, m.state AS main_state, m.failing_tests AS main_tests
                FROM (SELECT *, coalesce(started_at, completed_at, {_ts(as_of)}) AS t FROM github0
                      WHERE state = 'failure' AND failure_class = 'new') g
                ASOF JOIN main_states m ON m.job_group = g.job_group AND g.t >= m.pushed_at
            ),
            github AS (
                SELECT g.* REPLACE (
                    CASE WHEN x.main_state = 'failure' AND (len(g.failing_tests) = 0 AND len(x.main_tests) = 0
                                                            OR list_has_any(g.failing_tests, x.main_tests))
                         THEN 'broken_on_main' ELSE g.failure_class END AS failure_class)
                FROM github0 g LEFT JOIN inherited x USING (head_sha, workflow, name)
            ),
            ci AS (
                SELECT * FROM (
                    SELECT *, row_number() OVER (PARTITION BY repo, head_sha, job_name
                                                 ORDER BY run_attempt DESC, callback_at DESC NULLS LAST, day DESC) AS rn,
                              count(DISTINCT run_attempt) OVER (PARTITION BY repo, head_sha, job_name) AS attempts
                    FROM w_ci WHERE head_sha IN (SELECT sha FROM heads) AND level IN {levels}
                ) WHERE rn = 1
            ),
            downstream AS (
                SELECT head_sha, repo AS source, level, workflow_name AS workflow,
                       workflow_name || ' / ' || job_name AS job_group, job_name AS name,
                       {_DOWNSTREAM_STATE} AS state,
                       CASE failure_kind WHEN 'infrastructure' THEN 'infra' WHEN 'test' THEN 'new' END AS failure_class,
                       attempts, NULL::BIGINT AS job_id, run_id, run_attempt, execution_s AS duration_s, started_at,
                       completed_at, NULL::VARCHAR AS build_env, NULL::VARCHAR AS test_config,
                       NULL::VARCHAR AS platform,
                       CASE WHEN failure_kind = 'infrastructure' THEN 'downstream-infra' END AS infra_reason,
                       NULL::VARCHAR AS failure_line, []::VARCHAR[] AS failing_tests,
                       coalesce(failed, 0) AS failing_test_count
                FROM ci
            )
            SELECT p.number, p.head_sha, p.state AS pr_state, p.merged, p.head_ref, p.base_ref, p.labels,
                   p.pr_updated_at, {_ts(as_of)} AS as_of, j.* EXCLUDE (head_sha)
            FROM prs p JOIN (SELECT * FROM github UNION ALL BY NAME SELECT * FROM downstream) j USING (head_sha)
            ORDER BY p.number, j.source, j.workflow, j.name
        """).to_arrow_table().cast(PR_JOBS_SCHEMA)
        rows = lake.write("pr_jobs", day, table)
        prs = con.execute("SELECT count(*) FROM prs").fetchone()[0]
    finally:
        con.close()
    counts = {v["values"]: v["counts"] for v in pc.value_counts(table["failure_class"]).to_pylist()}
    downstream = int(pc.sum(pc.not_equal(table["source"], "github")).as_py() or 0)
    return PrJobsReport(day, prs, rows, downstream, {c: int(counts.get(c, 0)) for c in FAILURE_CLASSES})

