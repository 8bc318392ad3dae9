"""A published file is the same bytes whenever its input is: test-times.json, test-class-times.json
and slow-tests.json computed twice from the same reports, by DuckDB on several threads (which add a
group's terms in whatever order its threads finish), must not differ in their last digits, or a
re-run, a refresh or a quiet night writes a new object that CI downloads again."""

import json
import random

import pyarrow as pa
import pytest
from test_slow_tests import stats_row
from test_test_stats import day, job_payload, lake, run_row, webhooks

from resources.lake import set_run_threads
from resources.storage import Store
from torchci_assets.derived.flakiness.lists import SLOW_TESTS_PATH, publish_slow_tests
from torchci_assets.derived.results.stats import build_test_daily_stats, build_test_results, build_test_time_daily
from torchci_assets.derived.sharding.times import TEST_CLASS_TIMES_PATH, TEST_TIMES_PATH, publish_test_times
from torchci_assets.ingest.junit import TEST_RUN_SCHEMA

DAYS = [day(-3), day(-2), day(-1), day(0)]
SHARDS, FILES, CLASSES, TESTS, PARTS = 3, 4, 3, 400, 4  # ~58,000 test rows over the days
PUBLISHED = (TEST_TIMES_PATH, TEST_CLASS_TIMES_PATH, SLOW_TESTS_PATH)


@pytest.fixture
def four_threads():
    """DuckDB on four threads whatever the machine's cores: the order of a sum only varies with them."""
    set_run_threads(4)
    yield
    set_run_threads(None)


def _reports(tmp_path, rng: random.Random, on_day: str, n: int) -> None:
    """A main-branch run of SHARDS shards on `on_day`, each shard's reports in PARTS parts (as its
    report files come in: a file's tests over several of them); times in milliseconds as PyTorch's
    reports give them, every test of file 0 slow (> 60 s)."""
    run = 1000 + n
    jobs = [10 * run + s for s in range(1, SHARDS + 1)]
    webhooks(tmp_path, on_day, [("workflow_job", job_payload(j, run, f"{n:040x}", shard=s, shards=SHARDS))
                                for s, j in enumerate(jobs, 1)])
    for job in jobs:
        for part in range(PARTS):
            rows = [run_row(job, run, f"test_{f}_{t}", time=round(rng.uniform(55, 75) if f == 0 else rng.uniform(0, 2), 3),
                            file=f"test_f{f}.py", classname=f"TestC{c}")
                    for f in range(FILES) for c in range(CLASSES) for t in range(part, TESTS, PARTS)]
            lake(tmp_path).write("test_run", on_day, pa.Table.from_pylist(rows, schema=TEST_RUN_SCHEMA),
                                 part=f"job{job}-{part}")


def _publish(tmp_path, out: Store) -> dict[str, bytes]:
    """Build the days' aggregates from their test_results anew and publish the three files into `out`."""
    for d in DAYS:
        build_test_time_daily(lake(tmp_path), d)
        build_test_daily_stats(lake(tmp_path), d)
    publish_test_times(lake(tmp_path), out, DAYS[-1])
    publish_slow_tests(lake(tmp_path), out, DAYS[-1], 14)
    return {path: out.read_bytes(path) for path in PUBLISHED}


def test_the_same_reports_publish_the_same_bytes(tmp_path, four_threads):
    rng = random.Random(7)
    for n, d in enumerate(DAYS):
        _reports(tmp_path, rng, d, n)
        build_test_results(lake(tmp_path), d)
    first = _publish(tmp_path, Store(str(tmp_path / "first")))
    assert all(len(json.loads(doc)) > 0 for doc in first.values())
    for attempt in range(3):
        again = _publish(tmp_path, Store(str(tmp_path / f"again{attempt}")))
        assert [path for path in PUBLISHED if again[path] != first[path]] == []


def test_the_same_window_publishes_the_same_slow_list(tmp_path, four_threads):
    """slow-tests.json alone, from a fortnight of test_daily_stats, three configurations per test:
    its mean adds up 42 times per test, in whatever order the threads deliver them."""
    rng = random.Random(11)
    days = [day(-n) for n in range(14)]
    for d in days:
        lake(tmp_path).write("test_daily_stats", d, pa.Table.from_pylist([
            stats_row(f"test_{t}", env, round(rng.uniform(60, 80), 3), passes)
            for t in range(500) for env, passes in (("linux", 3), ("win", 2), ("mac", 1))]))
    published = set()
    for attempt in range(4):
        out = Store(str(tmp_path / f"out{attempt}"))
        publish_slow_tests(lake(tmp_path), out, days[0], 14)
        published.add(out.read_bytes(SLOW_TESTS_PATH))
    assert len(published) == 1 and len(json.loads(published.pop())) == 500
