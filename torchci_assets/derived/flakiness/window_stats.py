"""The window's test_daily_stats summed per test and platform and per configuration, the form
flaky_tests.sql reads them in (tables w_test_stats and w_config_reruns, `sql/window_stats.sql`).

Why the days before the window's last are summed apart: sums, minima and maxima add up, and those
days do not change while the last one is refreshed. A refresh of today (every minute or so) would
otherwise read all 14 days' aggregates, ~160,000 rows a day on PyTorch's scale, to change one
day's share. So the day's first refresh keeps the sums of the days before beside flaky_tests'
partition (`_window_past_tests.parquet` and `_window_past_configs.parquet`: the leading `_` hides
them from readers of the table), and the next refreshes sum only the day itself and add them.

Each kept file names in its footer a digest of the files it was summed from (their footers, see
`unchanged.inputs_digest`) and of the SQL that summed them: a backfill of one of those days, or
another version of the SQL, gives another digest, and the sums are made and kept again. A file
that is missing, unreadable or names another digest is never used. Other runs (the daily run, a
backfill) sum the whole window and keep nothing.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from resources.lake import Lake
from resources.sql import SqlFiles, execute, relation
from torchci_assets.derived.flakiness.unchanged import inputs_digest

SQL = SqlFiles(__file__)
KEPT_WITH = "flaky_tests"  # the table whose partition folder holds the kept sums
KEPT = {"tests": "_window_past_tests", "configs": "_window_past_configs"}
DIGEST_KEY = b"torchci.inputs_digest"


def register(con, lake: Lake, day: str, past_days: list[str], keep: bool = False) -> bool:
    """Create w_test_stats and w_config_reruns in `con` from the test_daily_stats of `past_days`
    and `day` (whose partition must exist). With `keep` (a refresh of `day`), the sums of
    `past_days` come from what an earlier refresh kept when their files are the same, or are made
    and kept for the next. Returns whether kept sums were used."""
    steps = dict(SQL.steps("window_stats"))
    today = _sums(con, lake, [day], steps)
    digest = past = None
    if keep:
        digest = inputs_digest(lake, {"test_daily_stats": past_days}, {"sql": SQL["window_stats"]})
        past = _kept(lake, day, digest)
    used = past is not None
    if past is None:
        past = _sums(con, lake, past_days, steps) or {k: t.slice(0, 0) for k, t in today.items()}
        if keep:
            _keep(lake, day, digest, past)
    for kind in KEPT:
        con.register(f"past_{kind}", past[kind])
        con.register(f"day_{kind}", today[kind])
    execute(con, steps["w_test_stats"])
    execute(con, steps["w_config_reruns"])
    return used


def _sums(con, lake: Lake, days: list[str], steps: dict[str, str]) -> dict[str, pa.Table] | None:
    """The test and configuration sums of the days' test_daily_stats; None when they have none."""
    if not days or not lake.register(con, "test_daily_stats", days, name="stats_files"):
        return None
    execute(con, steps["stats"])
    return {"tests": relation(con, steps["test_sums"]).to_arrow_table(),
            "configs": relation(con, steps["config_sums"]).to_arrow_table()}


def _kept(lake: Lake, day: str, digest: str) -> dict[str, pa.Table] | None:
    """The sums a refresh kept for `day`, if both files are there, readable and of `digest`."""
    tables = {}
    for kind, part in KEPT.items():
        path = lake.store.full(lake.partition_path(KEPT_WITH, day, part))
        try:
            with lake.store.fs.open_input_file(path) as f:
                table = pq.read_table(f)
        except (OSError, pa.ArrowException):  # missing (FileNotFoundError is an OSError) or unreadable
            return None
        if (table.schema.metadata or {}).get(DIGEST_KEY) != digest.encode():
            return None
        tables[kind] = table.replace_schema_metadata(None)
    return tables


def _keep(lake: Lake, day: str, digest: str, sums: dict[str, pa.Table]) -> None:
    """Keep the past days' sums for the day's next refreshes, each file naming `digest`."""
    for kind, part in KEPT.items():
        lake.write(KEPT_WITH, day, sums[kind].replace_schema_metadata({DIGEST_KEY: digest.encode()}), part=part)
