"""Asset checks that read back what was written, partition by partition.

They query the Parquet files themselves rather than trusting the writer's counters, so a
bug in the writer shows up as a failed check in the UI.
"""

from __future__ import annotations

import os

import dagster as dg

from resources.lake import Lake, connect

# A day's share of unreadable records above which ingest is flagged: real archives have a
# handful of truncated uploads, not percent-level damage.
MAX_REJECT_RATE = 0.01
MAX_REJECT_RATE_VAR = "TORCHCI_MAX_REJECT_RATE"


def max_reject_rate() -> float:
    """$TORCHCI_MAX_REJECT_RATE, else MAX_REJECT_RATE; read when a check runs, so a bad value fails
    with its name (and the code location's preflight reports it before anything runs)."""
    text = (os.environ.get(MAX_REJECT_RATE_VAR) or "").strip()
    if not text:
        return MAX_REJECT_RATE
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1:
        raise ValueError(f"{MAX_REJECT_RATE_VAR}={text!r}: expected a fraction in [0, 1], such as 0.01 for 1%")
    return value


def unique_key_check(lake: Lake, table: str, day: str, key: list[str]) -> dg.AssetCheckResult:
    con = connect()
    try:
        lake.register(con, table, [day], name="t")
        cols = ", ".join(key)
        total, dupes = con.execute(
            f"SELECT count(*), count(*) - (SELECT count(*) FROM (SELECT DISTINCT {cols} FROM t)) FROM t"
        ).fetchone()
        sample = con.execute(
            f"SELECT {cols}, count(*) AS n FROM t GROUP BY ALL HAVING n > 1 ORDER BY n DESC LIMIT 5"
        ).fetchall()
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
        counts = con.execute(
            "SELECT " + ", ".join(f"count(*) FILTER (WHERE {c} IS NULL)" for c in columns) + " FROM t"
        ).fetchone()
    finally:
        con.close()
    nulls = {c: int(n) for c, n in zip(columns, counts)}
    return dg.AssetCheckResult(
        asset_key=table, check_name="required_columns_not_null", passed=not any(nulls.values()),
        metadata={f"nulls_{c}": n for c, n in nulls.items()},
    )


def reject_rate_check(table: str, rejects: int, records: int) -> dg.AssetCheckResult:
    rate = rejects / records if records else 0.0
    threshold = max_reject_rate()
    return dg.AssetCheckResult(
        asset_key=table, check_name="reject_rate_below_threshold", passed=rate <= threshold,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={"rejects": rejects, "records": records, "reject_rate": round(rate, 6),
                  "threshold": threshold},
    )
