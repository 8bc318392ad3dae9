"""Shard plans for every build_env/test_config, from the day's test times.

For each config the plan covers every test file with a time in the window (the files CI is
running), over as many shards as CI ran that config with lately (the largest `num_shards` seen
in `workflow_job` over the window), or, for a config never seen sharded, enough shards for
about 40 minutes each (at most 16). Plans are published to
`shard-plans/<build_env>/<test_config>.json` (a build_env containing '/' is percent-encoded
into one folder name) and kept in the lake table `shard_plans`. A day without test times
publishes nothing and leaves the published plans as they are (see `torchci_assets.publishing`).

A plan file is rewritten only when the plan changed: most configurations plan the same from one
day to the next, and a rewrite would tell every reader and cache that something did. So the
files do not carry the day; `shard-plans/day.json` does (`publishing.record_day`), and a
re-run or backfill of a day earlier than it writes the lake table only.
"""

from __future__ import annotations

import json
import math
import urllib.parse
from dataclasses import dataclass

import pyarrow as pa

from resources.lake import Lake, connect
from resources.storage import Store
from torchci_assets.derived.sharding.planner import plan_shards, plan_to_dict
from torchci_assets.partitions import days_ending
from torchci_assets.publishing import later_day, record_day, write_if_changed

TARGET_SHARD_SECONDS = 2400.0
MAX_SHARDS = 16
SHARD_PLANS_DAY = "shard-plans/day.json"  # the day the plans are for (publishing.record_day)

SHARD_PLANS_SCHEMA = pa.schema([
    ("build_env", pa.string()), ("test_config", pa.string()), ("num_shards", pa.int32()),
    ("shard", pa.int32()), ("expected_seconds", pa.float64()), ("file", pa.string()),
    ("part", pa.int32()), ("parts", pa.int32()),
])


def plan_path(build_env: str, test_config: str) -> str:
    return f"shard-plans/{urllib.parse.quote(build_env, safe='')}/{urllib.parse.quote(test_config, safe='')}.json"


def default_shards(total_seconds: float) -> int:
    return max(1, min(MAX_SHARDS, math.ceil(total_seconds / TARGET_SHARD_SECONDS)))


@dataclass
class ShardPlansReport:
    configs: int
    files: int
    shards: int
    longest_expected_s: float
    nothing_new: str = ""  # why no plan was published, when none was
    written: int = 0  # plan files rewritten (the others did not change)
    later_day: str | None = None  # the later day the published plans are for, which this one left alone


def build_shard_plans(lake: Lake, outputs: Store, day: str, window_days: int = 14) -> ShardPlansReport:
    con = connect()
    try:
        if not lake.register(con, "test_times", [day]):
            raise FileNotFoundError(f"test_times has no partition for {day}: materialize test_times first")
        times: dict[tuple[str, str], dict[str, float]] = {}
        for env, config, file, seconds in con.execute(
                "SELECT build_env, test_config, file, time FROM test_times ORDER BY ALL").fetchall():
            times.setdefault((env, config), {})[file] = seconds
        shards_seen: dict[tuple[str, str], int] = {}
        if lake.register(con, "workflow_job", days_ending(day, window_days)):
            shards_seen = {(e, c): n for e, c, n in con.execute(
                "SELECT build_env, test_config, max(num_shards) FROM workflow_job "
                "WHERE test_config IS NOT NULL GROUP BY ALL").fetchall()}
    finally:
        con.close()

    later = later_day(outputs, SHARD_PLANS_DAY, day)
    rows, longest, shard_count, written = [], 0.0, 0, 0
    for (env, config), files in sorted(times.items()):
        n = shards_seen.get((env, config)) or default_shards(sum(files.values()))
        plan = plan_shards(files, sorted(files), n)
        if not later:
            doc = plan_to_dict(plan) | {"build_env": env, "test_config": config}
            written += write_if_changed(outputs, plan_path(env, config), json.dumps(doc, indent=1).encode())
        shard_count += n
        for shard in plan.shards:
            longest = max(longest, shard.expected_seconds)
            rows += [(env, config, n, shard.index, shard.expected_seconds, t.file, t.part, t.parts) for t in shard.tests]
    table = pa.Table.from_pylist([dict(zip(SHARD_PLANS_SCHEMA.names, r)) for r in rows], schema=SHARD_PLANS_SCHEMA)
    lake.write("shard_plans", day, table)
    if times and not later:
        record_day(outputs, SHARD_PLANS_DAY, day)
    quiet = "" if times else (f"no test times for {day} to plan from: the published plans under "
                              f"{outputs.display('shard-plans/')} stay as they are")
    return ShardPlansReport(len(times), sum(len(f) for f in times.values()), shard_count, longest, quiet,
                            written, later)
