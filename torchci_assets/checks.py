"""Asset checks that read back what was written, partition by partition.

They query the Parquet files themselves rather than trusting the writer's counters, so a
bug in the writer shows up as a failed check in the UI.
"""

from __future__ import annotations

import os

import dagster as dg

from resources.lake import Lake, connect
from resources.sql import SqlFiles, compose

SQL = SqlFiles(__file__)

# A day's share of unreadable records above which ingest is flagged: real archives have a
# handful of truncated uploads, not percent-level damage.
MAX_REJECT_RATE = float(os.environ.get("TORCHCI_MAX_REJECT_RATE", "0.01"))


def unique_key_check(lake: Lake, table: str, day: str, key: list[str]) -> dg.AssetCheckResult:
    con = connect()
    try:
        lake.register(con, table, [day], name="t")
        total, dupes = con.execute(compose(SQL["duplicate_keys"], key=key)).fetchone()
        sample = con.execute(compose(SQL["duplicate_key_examples"], key=key)).fetchall()
    finally:
        con.close()
    return dg.AssetCheckResult(
        asset_key=table, check_name=f"unique_{'_'.join(key)}", passed=dupes == 0,
        metadata={"rows": total, "duplicate_rows": dupes, "examples": str(sample)},
    )


def not_null_check(lake: Lake, table: str, day: str, columns: list[str]) -> dg.AssetCheckResult:
    con = connect()
    try:
        lake.register(con, table, [day], name="t")
        counts = con.execute(compose(SQL["null_counts"], columns=columns)).fetchone()
    finally:
        con.close()
    nulls = {c: int(n) for c, n in zip(columns, counts)}
    return dg.AssetCheckResult(
        asset_key=table, check_name="required_columns_not_null", passed=not any(nulls.values()),
        metadata={f"nulls_{c}": n for c, n in nulls.items()},
    )


def reject_rate_check(table: str, rejects: int, records: int) -> dg.AssetCheckResult:
    rate = rejects / records if records else 0.0
    return dg.AssetCheckResult(
        asset_key=table, check_name="reject_rate_below_threshold", passed=rate <= MAX_REJECT_RATE,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={"rejects": rejects, "records": records, "reject_rate": round(rate, 6),
                  "threshold": MAX_REJECT_RATE},
    )
