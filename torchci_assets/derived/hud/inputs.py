"""Lake tables as DuckDB views of exactly the columns the HUD reads, empty when not materialized.

A quiet day (webhooks only, no test reports), the lake's first days and tables not materialized for
a day (`job_failure` on a day without logs, `test_time_regressions` when only part of the graph
ran) must not fail the HUD: each view is then typed and empty, so every query runs and simply
finds nothing. Selecting the columns
also keeps older partitions, written before a column was added, readable with newer ones.
"""

from __future__ import annotations

import pyarrow as pa

from resources.lake import Lake
from resources.sql import Columns, SqlFiles, compose, execute

# table -> the columns read, with the type an empty view gives them
COLUMNS: dict[str, dict[str, str]] = {
    "push": {"repo": "VARCHAR", "ref": "VARCHAR", "after": "VARCHAR", "deleted": "BOOLEAN",
             "received_at": "TIMESTAMPTZ"},
    "workflow_job": {"id": "BIGINT", "run_id": "BIGINT", "run_attempt": "BIGINT", "workflow_name": "VARCHAR",
                     "name": "VARCHAR", "head_sha": "VARCHAR", "head_branch": "VARCHAR", "status": "VARCHAR",
                     "conclusion": "VARCHAR", "created_at": "TIMESTAMPTZ", "started_at": "TIMESTAMPTZ",
                     "completed_at": "TIMESTAMPTZ", "labels": "VARCHAR[]", "queue_s": "DOUBLE",
                     "duration_s": "DOUBLE", "build_env": "VARCHAR", "test_config": "VARCHAR",
                     "platform": "VARCHAR", "received_at": "TIMESTAMPTZ"},
    "workflow_run": {"id": "BIGINT", "run_attempt": "BIGINT", "name": "VARCHAR", "event": "VARCHAR",
                     "status": "VARCHAR", "conclusion": "VARCHAR", "created_at": "TIMESTAMPTZ",
                     "updated_at": "TIMESTAMPTZ", "day": "DATE"},
    "pull_request": {"repo": "VARCHAR", "number": "BIGINT", "state": "VARCHAR", "head_sha": "VARCHAR",
                     "head_ref": "VARCHAR", "base_ref": "VARCHAR", "labels": "VARCHAR[]", "merged": "BOOLEAN",
                     "updated_at": "TIMESTAMPTZ", "received_at": "TIMESTAMPTZ"},
    "test_jobs": {"job_id": "BIGINT", "workflow_run_attempt": "BIGINT", "infra_suspect": "BOOLEAN",
                  "infra_reason": "VARCHAR", "day": "DATE"},
    "test_sha_outcomes": {"file": "VARCHAR", "classname": "VARCHAR", "name": "VARCHAR", "head_sha": "VARCHAR",
                          "failed": "BIGINT", "errors": "BIGINT", "failing_job_ids": "BIGINT[]"},
    "flaky_tests": {"file": "VARCHAR", "classname": "VARCHAR", "name": "VARCHAR", "verdict": "VARCHAR",
                    "runs": "BIGINT", "flake_events": "BIGINT", "rerun_passes": "BIGINT", "same_commit_pairs": "BIGINT",
                    "flips": "BIGINT", "flake_rate": "DOUBLE", "flake_rate_low": "DOUBLE", "flake_rate_high": "DOUBLE",
                    "platforms": "VARCHAR[]", "flaky_platforms": "VARCHAR[]", "broken_ranges": "BIGINT",
                    "broken_failures": "BIGINT", "broken_from_sha": "VARCHAR", "broken_fixed_sha": "VARCHAR"},
    "disabled_tests": {"test": "VARCHAR", "id": "VARCHAR", "url": "VARCHAR", "platforms": "VARCHAR[]",
                       "status": "VARCHAR", "flake_events": "BIGINT", "runs": "BIGINT"},
    # the log classifier's table (ARCHITECTURE "Wave 2"): used as soon as it exists
    "job_failure": {"job_id": "BIGINT", "run_attempt": "BIGINT", "infra": "BOOLEAN", "line": "VARCHAR", "day": "DATE"},
    # the sharding domain's table of test files that got slower (ARCHITECTURE "Wave 2"), shown once it exists
    "test_time_regressions": {"build_env": "VARCHAR", "test_config": "VARCHAR", "file": "VARCHAR",
                              "before_s": "DOUBLE", "after_s": "DOUBLE", "first_slow_sha": "VARCHAR"},
    "ci_result": {"repo": "VARCHAR", "level": "VARCHAR", "head_sha": "VARCHAR", "workflow_name": "VARCHAR",
                  "run_id": "BIGINT", "run_attempt": "BIGINT", "job_name": "VARCHAR", "status": "VARCHAR",
                  "conclusion": "VARCHAR", "started_at": "TIMESTAMPTZ", "completed_at": "TIMESTAMPTZ",
                  "execution_s": "DOUBLE", "failed": "BIGINT", "callback_at": "TIMESTAMPTZ",
                  "failure_kind": "VARCHAR", "day": "DATE"},
    "ci_callback_minutes": {"repo": "VARCHAR", "callbacks": "BIGINT"},
    "commit_health": {"sha": "VARCHAR", "pushed_at": "TIMESTAMPTZ", "pushed_day": "DATE", "job_group": "VARCHAR",
                      "state": "VARCHAR", "failing_tests": "VARCHAR[]", "conclusion": "VARCHAR",
                      "time_to_signal_s": "DOUBLE"},
}


# the Arrow type of each type name above (the tests write their tables with these)
ARROW_TYPES = {"VARCHAR": pa.string(), "BIGINT": pa.int64(), "BOOLEAN": pa.bool_(), "DOUBLE": pa.float64(),
               "TIMESTAMPTZ": pa.timestamp("us", tz="UTC"), "DATE": pa.date32(),
               "VARCHAR[]": pa.list_(pa.string()), "BIGINT[]": pa.list_(pa.int64())}
SHARED_SQL = SqlFiles(__file__, "../../sql")  # torchci_assets/sql: what several domains' queries share
_VIEW = "CREATE OR REPLACE TEMP VIEW {{view}} AS SELECT {{columns}} FROM {{source}}"
_EMPTY_VIEW = "CREATE OR REPLACE TEMP VIEW {{view}} AS SELECT {{columns}} WHERE false"


def arrow_schema(table: str) -> pa.Schema:
    return pa.schema([(c, ARROW_TYPES[t]) for c, t in COLUMNS[table].items()])


def register(con, lake: Lake, table: str, days: list[str], view: str, columns: dict[str, str] | None = None) -> int:
    """View `view` over `table`'s partitions for `days` with COLUMNS[table] (or `columns`); returns
    the files read."""
    columns = columns or COLUMNS[table]
    files = lake.register(con, table, days, name=f"{view}__all")
    if files:
        con.execute(compose(_VIEW, view=view, columns=list(columns), source=f"{view}__all"))
    else:
        con.execute(compose(_EMPTY_VIEW, view=view, columns=Columns(columns)))
    return files


def define_runner_machine(con) -> None:
    """The macro runner_machine(labels) (sql/runner_machine.sql), in `con`: the metrics' runner rows
    and the guardians' queue alerts group jobs by the same machine."""
    execute(con, SHARED_SQL["runner_machine"])
