"""Columns added to the results tables after partitions were written, and how such a partition
is read: as if written today, the added columns NULL.

Why: the lake keeps every day it ever wrote; a window reaching back over the day the code changed
reads old and new partitions together (DuckDB's union_by_name gives NULLs to a mix, but a window of
old partitions only has no such column at all), and a day whose aggregates are rebuilt by newer
code may hold tables written by the older one. NULL means "not known then": an unknown workflow
is not periodic, so an old day counts as it did before the column existed.
"""

from __future__ import annotations

from collections.abc import Iterable

from resources.lake import Lake
from resources.sql import Columns, SqlFiles, compose

# test_jobs and test_results: the job's workflow (slow tests leave PyTorch's periodic one out)
JOB_COLUMNS_ADDED = Columns({"workflow_name": "VARCHAR"})
# the webhook tables' columns test_jobs.sql reads that a table written by other means (a fixture, a
# tool) may lack
WEBHOOK_COLUMNS_READ = {"workflow_job": Columns({"workflow_name": "VARCHAR"}),
                        "workflow_run": Columns({"name": "VARCHAR"})}
# test_time_daily: the rows of runs the days split, and their commit (test_time_regressions joins them per
# commit); a window of partitions from before them all holds runs summed on their day only
TIME_DAILY_RUN_COLUMNS = Columns({"workflow_id": "BIGINT", "shard": "INTEGER", "num_shards": "INTEGER",
                                  "attempt": "BIGINT", "clean": "BOOLEAN", "head_sha": "VARCHAR",
                                  "completed_at": "TIMESTAMPTZ"})
# test_daily_stats: the clean passes of periodic jobs, counted apart
STATS_COLUMNS_ADDED = Columns({"periodic_clean_passes": "BIGINT", "periodic_pass_time": "DOUBLE"})

_VIEWS = dict(SqlFiles(__file__).steps("current_views"))


def columns_of(con, view: str) -> set[str]:
    return {r[0] for r in con.execute(compose(_VIEWS["columns"], files=view)).fetchall()}


def register_current(con, lake: Lake, table: str, days: Iterable[str], name: str, added: Columns) -> int:
    """The table's partitions for `days` as view `name`, with the columns of `added` its files all
    lack as NULL (files in view `<name>_files`); returns the number of files (none: no view)."""
    files = f"{name}_files"
    n = lake.register(con, table, days, name=files)
    if n:
        missing = Columns({c: t for c, t in added.items() if c not in columns_of(con, files)})
        con.execute(compose(_VIEWS["with_added" if missing else "as_is"], view=name, files=files, added=missing))
    return n
