"""`autorevert_events`: the append-only record of what the trunk guardian decided and did.

One row per step, each its own small immutable Parquet part (`<sha>-<action>-<id>.parquet` in
the day folder of its time), so concurrent or crashed runs never rewrite each other's rows.
An action that touches GitHub writes two rows sharing a `key`: `intent` before the call and
`done` after it. An `intent` with no `done` is a crash (or a kill) between the two; the next run
asks GitHub what became of it before deciding anything (see `actions.recover`). Dry-run actions
are one `done` row with `dry_run` true.

The ledger is the memory behind PyTorch's rules: restarts are paced and capped by counting its
rows, and a revert is proposed at most once per commit.
"""

from __future__ import annotations

import datetime as dt
import uuid

import pyarrow as pa
import pyarrow.parquet as pq

from resources.lake import Lake

TABLE = "autorevert_events"
# Restarts and reverts concern commits of the last day or two; a week covers any retry.
LOOKBACK_DAYS = 7
TS = pa.timestamp("ms", tz="UTC")

SCHEMA = pa.schema([
    ("ts", TS), ("at", TS), ("repo", pa.string()), ("action", pa.string()), ("commit_sha", pa.string()),
    ("workflow", pa.string()), ("workflows", pa.list_(pa.string())), ("source_signal_keys", pa.list_(pa.string())),
    ("run_id", pa.int64()), ("run_attempt", pa.int64()), ("pr_number", pa.int64()), ("key", pa.string()),
    ("phase", pa.string()), ("outcome", pa.string()), ("failed", pa.bool_()), ("dry_run", pa.bool_()),
    ("notes", pa.string()),
    # the notification issue a proposal's comment went to instead of the pull request (null: the
    # pull request); parts written before this column read it as null
    ("notify_issue", pa.int64()),
])
# outcomes of a `done` row; `not_sent` rows (a crash before the call) count for nothing, `refused`
# (GitHub's 422 on a proposal) is final
OUTCOMES = ("ok", "notified", "failed", "refused", "dry_run", "not_sent", "no_pr")


def new_key() -> str:
    return uuid.uuid4().hex


def append(lake: Lake, row: dict) -> dict:
    """Write one row (SCHEMA's columns; missing ones null) as its own part; returns the row."""
    full = {name: row.get(name) for name in SCHEMA.names}
    day = full["at"].astimezone(dt.timezone.utc).strftime("%Y-%m-%d")
    part = f"{full['commit_sha']}-{full['action']}-{uuid.uuid4().hex[:12]}"
    lake.write(TABLE, day, pa.Table.from_pylist([full], schema=SCHEMA), part=part)
    return full


def read(lake: Lake, now: dt.datetime, lookback_days: int = LOOKBACK_DAYS) -> list[dict]:
    """Every row of the last `lookback_days` days, oldest first."""
    days = [(now - dt.timedelta(days=back)).strftime("%Y-%m-%d") for back in range(lookback_days)]
    files = lake.files(TABLE, days)
    rows = [r for f in files for r in pq.read_table(f, filesystem=lake.store.fs, schema=SCHEMA).to_pylist()]
    return sorted(rows, key=lambda r: (r["at"], r["phase"] == "done"))


def actions(rows: list[dict]) -> list[dict]:
    """One record per action key: its intent row updated by its done row, timed by the first
    (when the call was made); `open` when the run that made it died before writing `done`."""
    by_key: dict[str, dict] = {}
    for r in rows:
        first = by_key.get(r["key"], {})
        merged = {**first, **{k: v for k, v in r.items() if v is not None}, "at": first.get("at", r["at"])}
        merged["open"] = r["phase"] == "intent" and merged.get("outcome") is None
        by_key[r["key"]] = merged
    return list(by_key.values())
