"""Where a refresh's DuckDB time goes, statement by statement, and how much of the flaky-test window
a refresh's new reports touch: what decides whether an output can follow what landed.

The default day of `bench_freshness.py` (its cache, today without its last 15 minutes), a first
refresh in its own process, then one refresh per 5-minute slice run in this process with every
statement timed (CPU seconds of the calls that run SQL through `resources.sql` and of the DuckDB
relations fetched): the statements' totals per refresh, the largest, and the share of the window's
tests whose rows the slice brought.

    .venv/bin/python bench/bench_refresh_statements.py    # ~5 min on 2 cores
"""
from __future__ import annotations

import collections
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))
import bench_freshness as bf  # noqa: E402

TOP = 25
SECONDS: dict[tuple[str, str], float] = collections.defaultdict(float)
CALLS: collections.Counter = collections.Counter()


def statement(sql: str) -> str:
    """A statement's name: the temp table, view or macro it creates, else its first words."""
    m = re.search(r"(TABLE|VIEW|MACRO)\s+(\w+)", sql)
    return m.group(2) if m else re.sub(r"\s+", " ", sql.strip())[:60]


def caller() -> str:
    f = sys._getframe(2)
    while f and ("resources/sql.py" in f.f_code.co_filename or f"{os.sep}duckdb{os.sep}" in f.f_code.co_filename):
        f = f.f_back
    return f"{os.path.basename(f.f_code.co_filename)}:{f.f_code.co_name}" if f else "?"


def time_statements() -> None:
    """Wrap `resources.sql.execute` (wherever a module imported it) and the relation fetches."""
    import duckdb
    import resources.sql as sql

    plain = sql.execute

    def timed(con, text, values=None):
        t = time.process_time()
        try:
            return plain(con, text, values)
        finally:
            SECONDS[caller(), statement(text)] += time.process_time() - t
            CALLS[caller(), statement(text)] += 1

    for module in list(sys.modules.values()):
        if getattr(module, "execute", None) is plain:
            module.execute = timed
    for name in ("to_arrow_table", "to_arrow_reader", "fetchall"):
        fetch = getattr(duckdb.DuckDBPyRelation, name)

        def timed_fetch(self, *a, _fetch=fetch, **k):
            t = time.process_time()
            try:
                return _fetch(self, *a, **k)
            finally:
                key = (caller(), "relation: " + statement(self.sql_query()))
                SECONDS[key] += time.process_time() - t
                CALLS[key] += 1

        setattr(duckdb.DuckDBPyRelation, name, timed_fetch)


def touched_tests(today: str) -> tuple[int, int]:
    """(tests of the day's last 5 minutes of jobs, tests of the flaky window's verdicts)."""
    from resources.lake import Lake, connect

    lake, con = Lake.at(str(bf.RUN / "lake")), connect()
    try:
        lake.register(con, "test_results", [today])
        lake.register(con, "flaky_tests", [today])
        recent = con.execute(
            "WITH j AS (SELECT job_id, max(job_completed_at) AS t FROM test_results GROUP BY 1) "
            "SELECT count(DISTINCT (file, classname, name)) FROM test_results "
            "WHERE job_id IN (SELECT job_id FROM j WHERE t >= (SELECT max(t) FROM j) - INTERVAL 5 MINUTE)").fetchall()
        return recent[0][0], con.execute("SELECT count(*) FROM flaky_tests").fetchall()[0][0]
    finally:
        con.close()


def main() -> int:
    bf.ensure_cache()
    yesterday, today = bf.utc_days()
    slices = bf.prepare_run(yesterday, today)
    env = bf.env_for(yesterday)
    bf.seed_yesterday(env, yesterday)
    bf.wait_until_quiet()
    first, cursor = bf.refresh_once(env, today, "")
    print(f"first refresh, day up to 23:45: {first['cpu_s']:.1f} CPU-s ({bf.load()})", flush=True)

    os.environ.update(env)
    import dagster as dg

    from torchci_assets.definitions import defs

    time_statements()
    instance, job = dg.DagsterInstance.get(), defs.resolve_job_def("archive_refresh")
    cpu = []
    for k, files in enumerate(slices):
        bf.land_slice(files)
        tick, request = bf.request_refresh(env, today, cursor)
        cursor = tick["cursor"]
        t = time.process_time()
        job.execute_in_process(partition_key=today, tags=request["tags"], instance=instance,
                               run_config={"loggers": {"console": {"config": {"log_level": "ERROR"}}}})
        cpu.append(time.process_time() - t)
        print(f"refresh {k + 1}/{len(slices)} (+{bf.SLICE_MIN} min, {len(files)} files): {cpu[-1]:.2f} CPU-s "
              "in this process", flush=True)
    n = len(slices)
    total = sum(SECONDS.values()) / n
    print(f"\nDuckDB statements: {total:.2f} CPU-s of a refresh's {bf.median(cpu):.2f} (median), "
          f"{sum(CALLS.values()) // n} statements; the {TOP} largest (CPU-s per refresh, calls):")
    for key, s in sorted(SECONDS.items(), key=lambda kv: -kv[1])[:TOP]:
        print(f"  {s / n:6.3f} {CALLS[key] // n:3d}  {key[0]:<36} {key[1]}")
    recent, window = touched_tests(today)
    print(f"\ntests in the day's last 5 minutes of jobs: {recent:,} of the flaky window's {window:,} "
          f"({100 * recent / window:.0f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
