"""Asset checks that read back what was written, partition by partition.

They query the Parquet files themselves rather than trusting the writer's counters, so a
bug in the writer shows up as a failed check in the UI.
"""

from __future__ import annotations

import os
import warnings

import dagster as dg

from resources.lake import Lake, connect
from resources.sql import SqlFiles, compose
from torchci_assets.partitions import daily_partitions
from torchci_assets.shown import readable

SQL = SqlFiles(__file__)

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


# Why each check exists, as the UI shows it beside the result. Checks of a table's key without an
# entry share one sentence naming the key's columns (`unique_key_spec`).
DESCRIPTIONS = {
    "required_columns_not_null": "The columns every reader relies on (ids, status, times) are never null: a null "
                                 "there means the payload changed shape or the parser has a bug.",
    "unique_test_per_job": "One row per test and job attempt: a test counted twice would skew pass rates and times.",
    "unique_sha_job_group": "One row per commit and job group, as the HUD grid draws one cell for each.",
    "unique_repo_window_days": "One row per downstream repo and window (`repo`, `window_days`): two would give "
                               "the repo two sets of figures to earn its relay level on.",
    "pages_under_2mb": "Every HUD page stays under 2 MB, so it opens quickly from a static site.",
    "unique_file_classname_name": "One flaky verdict per test: two would file or disable it twice.",
    "every_disabled_test_has_an_issue": "Every test the verdict disables was found or filed as a DISABLED issue "
                                        "(GitHub errors leave it for the next run; a test whose name PyTorch's "
                                        "title parser cannot read gets none, for a human to disable). A dry run files "
                                        "nothing and passes, its result saying so.",
    "rows_have_their_job": "Test rows whose job is unknown stay rare: their platform and branch cannot be told.",
    "every_test_row_counted_once": "The daily aggregates count each test row exactly once.",
    "regression_cost_below_share": "WARN when one file's jump adds more than max_cost_share of its config's total "
                                   "test time.",
}


REJECT_RATE_TEXT = ("Records that could not be read stay under TORCHCI_MAX_REJECT_RATE (1%) of the day's: a handful "
                    "of truncated uploads is normal, more means a broken writer or a format change ({rejects} "
                    "lists each with its file, its line in a line-per-record file, and why).")


def reject_rate_spec(asset: str, rejects: dg.AssetKey) -> dg.AssetCheckSpec:
    """The reject-rate check of `asset`, naming `rejects`, the asset a user opens to see what was refused."""
    return check_spec("reject_rate_below_threshold", asset,
                      description=REJECT_RATE_TEXT.format(rejects=rejects.to_user_string()))


UNIQUE_KEY_TEXT = ("No two rows share the table's key ({key}): a duplicate means a record was ingested twice and "
                   "would be counted twice downstream.")


def unique_key_spec(asset: str, key: list[str], blocking: bool = False) -> dg.AssetCheckSpec:
    """The check `unique_key_check` reports for `key`, its description naming the key's columns (a
    name such as `unique_job_id_run_attempt` does not say where one column ends)."""
    name = f"unique_{'_'.join(key)}"
    return check_spec(name, asset, blocking, description=DESCRIPTIONS.get(name) or UNIQUE_KEY_TEXT.format(
        key=", ".join(f"`{column}`" for column in key)))


def check_spec(name: str, asset, blocking: bool = False, description: str | None = None) -> dg.AssetCheckSpec:
    """A check of one day partition, with its description (`description`, else DESCRIPTIONS' for
    the name: one name may mean a different thing on each asset). `blocking` for checks whose failure
    means the table itself is wrong (duplicates, missing ids): downstream assets do not run on it."""
    description = description or DESCRIPTIONS[name]
    # Per-partition check results are a preview feature, worth it here: the UI shows each day's
    # result on that day, not one result for the asset; the warning would repeat in every process.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.PreviewWarning)
        return dg.AssetCheckSpec(name, asset=asset, description=description, blocking=blocking,
                                 partitions_def=daily_partitions)


def _register(con, lake: Lake, table: str, day: str, parts: list[str] | None) -> str:
    """View t: the partition, or only its `parts` (file names) when given; what it holds, in words."""
    if parts is None:
        lake.register(con, table, [day], name="t")
        return "the whole partition"
    lake.register_files(con, [f for f in lake.files(table, [day]) if f.rsplit("/", 1)[-1] in parts], "t")
    return "the parts this run added: " + ", ".join(parts)


def unique_key_check(lake: Lake, table: str, day: str, key: list[str],
                     parts: list[str] | None = None) -> dg.AssetCheckResult:
    """No key twice in the partition, or in its `parts` (an increment's, whose keys the ingest
    found in no earlier part before adding them)."""
    name = f"unique_{'_'.join(key)}"
    if parts == []:
        return dg.AssetCheckResult(asset_key=table, check_name=name, passed=True,
                                   metadata={"rows": 0, "duplicate_rows": 0, "scope": "nothing added"})
    con = connect()
    try:
        scope = _register(con, lake, table, day, parts)
        total, dupes = con.execute(compose(SQL["duplicate_keys"], key=key)).fetchone()
        sample = con.execute(compose(SQL["duplicate_key_examples"], key=key)).fetchall()
    finally:
        con.close()
    return dg.AssetCheckResult(
        asset_key=table, check_name=name, passed=dupes == 0,
        metadata={"rows": total, "duplicate_rows": dupes, "examples": str(sample), "scope": scope},
    )


def not_null_check(lake: Lake, table: str, day: str, columns: list[str],
                   parts: list[str] | None = None) -> dg.AssetCheckResult:
    if parts == []:
        return dg.AssetCheckResult(asset_key=table, check_name="required_columns_not_null", passed=True,
                                   metadata={"scope": "nothing added"})
    con = connect()
    try:
        scope = _register(con, lake, table, day, parts)
        counts = con.execute(compose(SQL["null_counts"], columns=columns)).fetchone()
    finally:
        con.close()
    nulls = {c: int(n) for c, n in zip(columns, counts)}
    return dg.AssetCheckResult(
        asset_key=table, check_name="required_columns_not_null", passed=not any(nulls.values()),
        metadata={**{f"nulls_{c}": n for c, n in nulls.items()}, "scope": scope},
    )


def reject_rate_check(table: str, rejects: int, records: int) -> dg.AssetCheckResult:
    rate = rejects / records if records else 0.0
    threshold = max_reject_rate()
    return dg.AssetCheckResult(
        asset_key=table, check_name="reject_rate_below_threshold", passed=rate <= threshold,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={"rejects": rejects, "records": records, "reject_rate": readable(rate, 6),
                  "threshold": threshold},
    )
