"""What the guardians read from the lake, as plain rows, and the SQL behind it (loaded once)."""

from __future__ import annotations

import datetime as dt
from functools import cache
from pathlib import Path

from resources.lake import Lake, connect

SQL_DIR = Path(__file__).with_name("sql")
# Main commits of the last two days are watched: a breakage older than that is a human's by now.
WINDOW = dt.timedelta(days=2)


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
        for table, days in tables.items():
            if not lake.register(con, table, days_back(now, days)):
                return None
        rel = con.execute(sql(name), params)
        columns = [d[0] for d in rel.description]
        return [dict(zip(columns, row)) for row in rel.fetchall()]
    finally:
        con.close()


def main_signal_rows(lake: Lake, now: dt.datetime, window: dt.timedelta = WINDOW) -> list[dict]:
    """commit_health rows of main commits pushed within `window` of `now`."""
    return query(lake, {"commit_health": window.days + 1}, "main_signals", {"since": now - window}, now) or []


def known_flaky_tests(lake: Lake, now: dt.datetime) -> frozenset[str]:
    """Tests the newest flaky verdicts call flaky, as commit_health names failing tests."""
    return frozenset(r["test"] for r in query(lake, {"flaky_tests": 2}, "known_flaky_tests", {}, now) or [])
