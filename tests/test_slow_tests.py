"""slow-tests.json: PyTorch's rule (one mean over configurations, ASAN left out) and its day."""

import json

import pyarrow as pa

from resources.lake import Lake
from resources.storage import Store
from torchci_assets.derived.flakiness.lists import SLOW_TESTS_PATH, dumps, publish_slow_tests

D = "2026-11-14"
ASAN = "linux-jammy-py3.10-clang18-asan"


def stats_row(name, env, seconds, passes, cls="TestX", config="default"):
    return {"classname": cls, "name": name, "build_env": env, "test_config": config, "branch_class": "main",
            "pass_time": seconds * passes, "clean_passes": passes}


def test_slow_tests_average_over_configurations_without_asan(tmp_path):
    """test-infra's slow_tests query: AVG over the jobs of every non-ASAN configuration, > 60 s."""
    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    lake.write("test_daily_stats", D, pa.Table.from_pylist([
        stats_row("test_big", "linux-jammy-py3.10-gcc11", 40.0, 1), stats_row("test_big", "win", 40.0, 2),
        stats_row("test_big", ASAN, 70.0, 5),  # 70 s under ASAN only: not slow
        stats_row("test_slow", "linux-jammy-py3.10-gcc11", 50.0, 1), stats_row("test_slow", "win", 100.0, 1),
        stats_row("test_dotted", "win", 80.0, 1, cls="test_mod.TestY"), stats_row("test_dotted", "mac", 40.0, 1,
                                                                                  cls="TestY"),
    ]))
    assert publish_slow_tests(lake, out, D, 14) == (1, "", None)
    # test_slow: (50 + 100) / 2 = 75 s; test_dotted (one PyTorch id for both classnames): 60 s, not over
    assert json.loads(out.read_bytes(SLOW_TESTS_PATH)) == {"test_slow (__main__.TestX)": 75.0}
    [row] = pa.parquet.read_table(str(tmp_path / "lake" / "slow_tests" / f"day={D}" / "data.parquet")).to_pylist()
    assert (row["build_env"], row["clean_passes"]) == ("win", 2)  # where it is slowest, and every pass


def test_a_rerun_of_an_earlier_day_leaves_the_later_list(tmp_path):
    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    earlier = "2026-10-20"
    lake.write("test_daily_stats", earlier, pa.Table.from_pylist([stats_row("test_old", "linux", 90.0, 3)]))
    lake.write("test_daily_stats", D, pa.Table.from_pylist([stats_row("test_new", "linux", 90.0, 3)]))
    assert publish_slow_tests(lake, out, D, 14) == (1, "", None)
    published = out.read_bytes(SLOW_TESTS_PATH)

    assert publish_slow_tests(lake, out, earlier, 14) == (1, "", D)
    assert out.read_bytes(SLOW_TESTS_PATH) == published == dumps({"test_new (__main__.TestX)": 90.0})
    assert publish_slow_tests(lake, out, D, 14) == (1, "", None)  # the same day publishes again
