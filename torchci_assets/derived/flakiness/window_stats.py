"""The window's test_daily_stats summed per test and platform and per configuration, the form
flaky_tests.sql reads them in (tables w_test_stats and w_config_reruns, `sql/window_stats.sql`).

Why the days before the window's last are summed apart: sums, minima and maxima add up, and those
days do not change while the last one is refreshed. A refresh of today (every minute or so) would
otherwise read all 14 days' aggregates, ~160,000 rows a day on PyTorch's scale, to change one
day's share. So the day's first refresh keeps the sums of the days before beside flaky_tests'
partition (`_window_past_tests.parquet` and `_window_past_configs.parquet`: the leading `_` hides
them from readers of the table), and the next refreshes sum only the day itself and add them.

Each kept file names in its footer a digest of the files it was summed from (their footers, see
`Lake.files_digest`) and of the SQL that summed them: a backfill of one of those days, or
another version of the SQL, gives another digest, and the sums are made and kept again. A file
that is missing, unreadable or names another digest is never used. Other runs (the daily run, a
backfill), and refreshes of a window with fewer than KEEP_FROM_DAYS earlier days, sum the whole
window in one pass and keep nothing.
"""

from __future__ import annotations

import pyarrow as pa

from resources.lake import Lake
from resources.sql import SqlFiles, execute, relation

SQL = SqlFiles(__file__)
KEPT_WITH = "flaky_tests"  # the table whose partition folder holds the kept sums
KEPT = {"tests": "_window_past_tests", "configs": "_window_past_configs"}
DIGEST_KEY = b"torchci.inputs_digest"
# Kept sums pay from this many earlier days with stats on: summing one or two days again costs a
# refresh less than reading kept sums and adding them (bench/README.md, "Intra-day refresh").
KEEP_FROM_DAYS = 3


def register(con, lake: Lake, day: str, past_days: list[str], keep: bool = False) -> bool:
    """Create w_test_stats and w_config_reruns in `con` from the test_daily_stats of `past_days`
    and `day` (whose partition must exist). With `keep` (a refresh of `day`), the sums of
    `past_days` come from what an earlier refresh kept when their files are the same, or are made
    and kept for the next (from KEEP_FROM_DAYS days with stats on). Returns whether kept sums were
    used."""
    steps = dict(SQL.steps("window_stats"))
    past, today = lake.files("test_daily_stats", past_days), lake.files("test_daily_stats", [day])
    used = kept = False
    if keep and len(past) >= KEEP_FROM_DAYS:
        digest = lake.files_digest(sorted(past), {"sql": SQL["window_stats"]})
        used = kept = _kept(con, lake, day, digest)
        if not kept:
            _sums(con, lake, past, steps)
            _keep(lake, day, digest, {kind: relation(con, steps[f"kept_{kind}"]).to_arrow_table() for kind in KEPT})
            kept = _kept(con, lake, day, digest)
    # with kept sums, the day alone, added to them; else (not a refresh, few earlier days) the window
    _sums(con, lake, today if kept else past + today, steps)
    for kind in KEPT:
        execute(con, steps[f"added_{kind}" if kept else f"whole_{kind}"])
    return used


def _sums(con, lake: Lake, files: list[str], steps: dict[str, str]) -> None:
    """Views test_sums and config_sums over these test_daily_stats files."""
    lake.register_files(con, files, "stats_files")
    for step in ("stats", "test_sums", "config_sums"):
        execute(con, steps[step])


def _kept(con, lake: Lake, day: str, digest: str) -> bool:
    """Views past_tests and past_configs over the sums a refresh kept for `day`, if both files are
    there and name `digest` in their footers (a file that cannot be read names none)."""
    paths = {kind: lake.store.full(lake.partition_path(KEPT_WITH, day, part)) for kind, part in KEPT.items()}
    for path in paths.values():
        try:
            metadata = lake.footer(path).metadata or {}
        except (OSError, pa.ArrowException):  # missing (FileNotFoundError is an OSError) or unreadable
            return False
        if metadata.get(DIGEST_KEY) != digest.encode():
            return False
    for kind, path in paths.items():
        lake.register_files(con, [path], f"past_{kind}")
    return True


def _keep(lake: Lake, day: str, digest: str, sums: dict[str, pa.Table]) -> None:
    """Keep the past days' sums for the day's next refreshes, each file naming `digest`."""
    for kind, part in KEPT.items():
        lake.write(KEPT_WITH, day, sums[kind].replace_schema_metadata({DIGEST_KEY: digest.encode()}), part=part)
