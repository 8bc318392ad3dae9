"""What the guardians read from the lake, as plain rows, and the SQL behind it (loaded once)."""

from __future__ import annotations

import datetime as dt
from functools import cache
from pathlib import Path

from resources.lake import Lake, connect
from resources.sql import SqlFiles, relation, run_steps
from torchci_assets.derived.hud import health
from torchci_assets.derived.hud.inputs import define_runner_machine
from torchci_assets.guardian_config import MainWindow

SQL_DIR = Path(__file__).with_name("sql")
STEPS = SqlFiles(__file__)  # files of several `-- step:` statements
# Main commits of the last two days are always watched (`MainWindow` says when older ones are too).
WINDOW = dt.timedelta(days=MainWindow().days)


@cache
def sql(name: str) -> str:
    return (SQL_DIR / f"{name}.sql").read_text(encoding="utf-8")


def days_back(now: dt.datetime, days: int) -> list[str]:
    return [(now - dt.timedelta(days=back)).strftime("%Y-%m-%d") for back in range(days + 1)]


def query(lake: Lake, tables: dict[str, int], name: str, params: dict, now: dt.datetime) -> list[dict] | None:
    """Rows of sql/<name>.sql over `tables` (table -> days back from `now`); None when a table
    has no partition in its window (nothing to judge)."""
    con = connect()
    try:
        define_runner_machine(con)  # the queue alerts' machines are the metrics' runner labels
        for table, days in tables.items():
            if not lake.register(con, table, days_back(now, days)):
                return None
        rel = con.execute(sql(name), params)
        columns = [d[0] for d in rel.description]
        return [dict(zip(columns, row)) for row in rel.fetchall()]
    finally:
        con.close()


def main_signal_rows(lake: Lake, now: dt.datetime, window: MainWindow = MainWindow()) -> list[dict]:
    """commit_health rows of the main commits `window` takes as of `now`. The older partitions are
    read only when its days hold fewer commits than it asks for, so a busy repository's read is its
    days' alone."""
    rows = _pushed_since(lake, now, window.days)
    if window.days_read() == window.days or len({r["sha"] for r in rows}) >= window.commits:
        return rows
    return newest_commits(_pushed_since(lake, now, window.days_read()), window.commits,
                          now - dt.timedelta(days=window.days))


def _pushed_since(lake: Lake, now: dt.datetime, days: int) -> list[dict]:
    since = now - dt.timedelta(days=days)
    return query(lake, {"commit_health": days + 1}, "main_signals", {"since": since}, now) or []


def newest_commits(rows: list[dict], commits: int, since: dt.datetime) -> list[dict]:
    """The rows of the newest `commits` commits, and of every commit pushed from `since` on."""
    order = sorted({(r["pushed_at"], r["sha"]) for r in rows}, reverse=True)
    keep = {sha for at, sha in order[:commits]} | {sha for at, sha in order if at >= since}
    return [r for r in rows if r["sha"] in keep]


def push_days(rows: list[dict], now: dt.datetime) -> int:
    """How many days back from `now`'s these main rows were pushed on (WINDOW's at least): the job
    tables' days their attempts are read from, their jobs being created from their push on."""
    oldest = min((r["pushed_at"] for r in rows), default=now)
    return max(WINDOW.days, (now.date() - oldest.astimezone(now.tzinfo).date()).days)


def known_flaky_tests(lake: Lake, now: dt.datetime) -> frozenset[str]:
    """Tests the newest flaky verdicts call flaky, as commit_health names failing tests."""
    return frozenset(r["test"] for r in query(lake, {"flaky_tests": 2}, "known_flaky_tests", {}, now) or [])


def main_attempt_rows(lake: Lake, now: dt.datetime, shas: list[str], days_read: int = WINDOW.days) -> list[dict] | None:
    """One row per attempt of each job group on the commits `shas` (sql/main_attempts.sql): its
    outcome as the HUD classifies it, its failing tests and its start, from the job tables of
    `days_read` days back (`push_days`). None when the lake has no job table in them (a lake of
    commit_health alone): the guardians then judge by
    commit_health's latest attempts only.

    The attempts are the HUD's own (its identities and failure classes, as of now, with the
    flaky verdicts of today as commit_health's partition of today reads them), so an attempt
    here and commit_health's latest attempt of a group never disagree on what a failure is."""
    days = days_back(now, days_read)
    if not shas or not lake.files("workflow_job", days):
        return None
    con = connect()
    try:
        health.register_inputs(con, lake, {"w_jobs": days, "w_runs": days, "w_tjobs": days, "w_outcomes": days,
                                           "w_flaky": days_back(now, 0), "w_job_failure": days})
        steps = dict(STEPS.steps("main_attempts"))
        run_steps(con, [("heads", steps["heads"])], {"shas": sorted(set(shas))})
        health.job_identities(con, now, health.STALE_HOURS)
        # the group steps up to each group's attempts (no unstable jobs: whether a job blocks is not read here)
        groups = [s for s in health.SQL.steps("commit_groups") if s[0] in health.ATTEMPT_STEPS]
        run_steps(con, groups, {"unstable": [], "blocking": list(health.BLOCKING_WORKFLOWS)})
        rel = relation(con, steps["attempt_rows"])
        columns = rel.columns
        return [dict(zip(columns, row)) for row in rel.fetchall()]
    finally:
        con.close()
