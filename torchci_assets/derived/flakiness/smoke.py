"""Platform smoke sets: the tests that fail on one platform significantly more than elsewhere.

PyTorch's first Windows smoke list (2021) ranked tests by raw failure counts on Windows and
filled up with flaky distributed tests that failed everywhere. Here a test enters the set of
platform P only with real, platform-specific evidence, all read from `flaky_test_platforms`
(the window's per test and platform evidence written by `flaky.build_flaky_tests`):

  * it ran at least SMOKE_MIN_RUNS times on P and at least once elsewhere (a test seen on one
    platform only cannot fail there "more than elsewhere");
  * it failed (final status, outside infra jobs) on at least SMOKE_MIN_EXCLUSIVE_SHAS distinct
    commits where it failed on no other platform while other platforms were tested: one bad
    commit or one pull request is not a pattern;
  * the Wilson lower bound of its failure rate on P exceeds the Wilson upper bound of its
    failure rate on the other platforms together (significantly more, with few runs the
    intervals overlap), and that lower bound is at least SMOKE_MIN_FAILURE_RATE: the test
    fails P's jobs demonstrably often, not at flake level (a test that passes on rerun is
    a flaky test for the disabled list, not a smoke test);
  * it is not flaky elsewhere: fewer than MIN_FLAKE_EVENTS flake events on the other
    platforms together, so tests flaky everywhere never qualify.

Ranked by the margin between those two bounds (`score`).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from resources.lake import Lake, connect
from resources.sql import SqlFiles, execute
from resources.storage import Store
from torchci_assets.derived.flakiness.flaky import MIN_FLAKE_EVENTS, Z
from torchci_assets.derived.flakiness.lists import UNKNOWN_PLATFORM, dumps, pytorch_key
from torchci_assets.publishing import later_day, record_day, write_if_changed

SMOKE_MIN_RUNS = 30
SMOKE_MIN_EXCLUSIVE_SHAS = 3
SMOKE_MIN_FAILURE_RATE = 0.05
SMOKE_DIR = "smoke-tests"
SMOKE_DAY = "stats/smoke-tests.day.json"  # the day the sets are for (publishing.record_day)

SMOKE_SCHEMA = pa.schema(
    [("platform", pa.string()), ("rank", pa.int64()), ("file", pa.string()), ("classname", pa.string()),
     ("name", pa.string())]
    + [(c, pa.int64()) for c in ("runs", "failures")]
    + [(c, pa.float64()) for c in ("failure_rate", "failure_rate_low")]
    + [(c, pa.int64()) for c in ("runs_elsewhere", "failures_elsewhere")]
    + [(c, pa.float64()) for c in ("failure_rate_elsewhere", "failure_rate_elsewhere_high")]
    + [(c, pa.int64()) for c in ("failing_shas", "exclusive_failing_shas", "flake_events", "flake_events_elsewhere")]
    + [("score", pa.float64())])

SQL = SqlFiles(__file__)


def smoke_rows(lake: Lake, day: str) -> tuple[list[str], list[dict], tuple[str, str]]:
    """(every platform in the window's evidence, the smoke rows ranked per platform, the window's
    first and last day) for `day`."""
    con = connect()
    try:
        if lake.register(con, "flaky_test_platforms", [day], name="ev") == 0:
            raise FileNotFoundError(f"flaky_test_platforms has no partition for {day}: materialize flaky_tests first")
        if lake.register(con, "flaky_tests", [day], name="fv") == 0:  # written with flaky_test_platforms
            con.execute(SQL["smoke_no_verdicts"])
        platforms = [p for (p,) in con.execute(
            "SELECT DISTINCT platform FROM ev WHERE platform <> ? ORDER BY 1", [UNKNOWN_PLATFORM]).fetchall()]
        start, end = con.execute("SELECT min(window_start)::VARCHAR, max(window_end)::VARCHAR FROM ev").fetchone()
        con.execute(SQL["wilson"])
        cur = execute(con, SQL["smoke_tests"], {
            "z": Z, "min_runs": SMOKE_MIN_RUNS, "min_exclusive_shas": SMOKE_MIN_EXCLUSIVE_SHAS,
            "min_failure_rate": SMOKE_MIN_FAILURE_RATE, "min_flake_events": MIN_FLAKE_EVENTS})
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, r)) for r in cur.fetchall()]
    finally:
        con.close()
    return platforms, rows, (start or day, end or day)


def smoke_document(platform: str, rows: list[dict], start: str, end: str) -> dict:
    """smoke-tests/<platform>.json: the criteria, then the ranked tests with their evidence."""
    tests = []
    for r in rows:
        tests.append({"test": pytorch_key(r["classname"], r["name"]), **{k: r[k] for k in (
            "file", "classname", "name", "rank", "failures", "runs", "failure_rate", "failure_rate_low",
            "failures_elsewhere", "runs_elsewhere", "failure_rate_elsewhere", "failure_rate_elsewhere_high",
            "failing_shas", "exclusive_failing_shas", "flake_events", "score")}})
    return {
        "platform": platform,
        "window": {"start": start, "end": end},
        "criteria": {"min_runs": SMOKE_MIN_RUNS, "min_exclusive_failing_shas": SMOKE_MIN_EXCLUSIVE_SHAS,
                     "min_failure_rate_low": SMOKE_MIN_FAILURE_RATE,
                     "max_flake_events_elsewhere": MIN_FLAKE_EVENTS - 1,
                     "statistic": "Wilson 95% lower bound of the failure rate on the platform minus the upper "
                                  "bound elsewhere"},
        "tests": tests,
    }


@dataclass
class SmokeReport:
    day: str
    platforms: dict[str, int]  # tests in each platform's set
    paths: list[str]
    nothing_new: str = ""  # why nothing was published, when nothing was
    later_day: str | None = None  # the later day the published sets are for, which this day left as they are


def empty_sets(counts: dict[str, int]) -> str:
    """Why the platforms of `counts` with no test have an empty set, for the catalog: "" when none is
    empty. An empty file with no word reads as a failure; it is the usual answer on a small CI."""
    empty = sorted(p for p, n in counts.items() if not n)
    if not empty:
        return ""
    return (f"{', '.join(empty)}: no test failed there significantly more than elsewhere (at least {SMOKE_MIN_RUNS} "
            f"runs there, failing on at least {SMOKE_MIN_EXCLUSIVE_SHAS} commits no other platform failed it on, "
            f"at a rate of {SMOKE_MIN_FAILURE_RATE:.0%} or more, not flaky elsewhere); an empty set is an answer, "
            "not an error")


def publish_smoke_tests(lake: Lake, outputs: Store, day: str) -> SmokeReport:
    """Write the `smoke_tests` lake table for `day` and publish smoke-tests/<platform>.json for
    every platform of the window (an empty set is published too: it is an answer), unless the
    published sets are for a later day (`SMOKE_DAY`): a re-run or backfill of an earlier day writes
    the lake table only, as CI must not be sent back to an older window."""
    platforms, rows, (start, end) = smoke_rows(lake, day)
    lake.write("smoke_tests", day, pa.Table.from_pylist(rows, schema=SMOKE_SCHEMA))
    counts = {p: sum(1 for r in rows if r["platform"] == p) for p in platforms}
    if not platforms:
        return SmokeReport(day, counts, [], f"no platform ran tests in the window ending {day}: the published sets "
                                            f"under {outputs.display(SMOKE_DIR + '/')} stay as they are")
    later = later_day(outputs, SMOKE_DAY, day)
    if later:
        return SmokeReport(day, counts, [], later_day=later)
    paths = []
    for p in platforms:
        path = f"{SMOKE_DIR}/{p}.json"
        write_if_changed(outputs, path, dumps(smoke_document(p, [r for r in rows if r["platform"] == p], start, end)))
        paths.append(path)
    record_day(outputs, SMOKE_DAY, day)
    return SmokeReport(day, counts, paths)
