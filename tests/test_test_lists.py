"""disabled-tests-condensed.json and slow-tests.json: PyTorch's formats, disabling and re-enabling rules."""

import json

import pyarrow as pa
from conftest import pytorch_bytes

from resources.lake import Lake
from resources.storage import Store
from torchci_assets.derived.flakiness.lists import (
    DISABLE_MIN_JOBS,
    DISABLED_TESTS_PATH,
    REENABLE_MIN_RUNS,
    REENABLED_TESTS_PATH,
    SLOW_TESTS_PATH,
    decide_disabled,
    disable_platforms,
    dumps,
    flaky_rows,
    publish_disabled_tests,
    publish_slow_tests,
    pytorch_key,
    stable_id,
)

D = "2026-11-14"


def row(name, verdict="flaky", events=5, runs=400, platforms=("linux", "win"), flaky=("win",), cls="TestX"):
    return {"file": "test_x.py", "classname": cls, "name": name, "verdict": verdict, "flake_events": events,
            "runs": runs, "platforms": list(platforms), "flaky_platforms": list(flaky)}


def test_keys_and_layout_are_pytorchs():
    assert pytorch_key("TestNN", "test_conv") == "test_conv (__main__.TestNN)"
    assert pytorch_key("test_nn.TestNN", "test_conv") == "test_conv (__main__.TestNN)"
    # the real published files round-trip byte for byte through our serializer
    for name in ("disabled-tests-condensed.2026-08-22.json", "slow-tests.2026-08-22.json"):
        raw = pytorch_bytes(name)
        assert dumps(json.loads(raw)) == raw


def test_platforms_are_where_it_flaked_and_empty_only_when_everywhere():
    assert disable_platforms(["win"], ["linux", "win"]) == ["win"]
    assert disable_platforms(["win", "linux"], ["linux", "win"]) == []
    assert disable_platforms(["linux"], ["linux"]) == ["linux"]  # one platform is not "everywhere"
    assert disable_platforms(["mac", "win"], ["linux", "mac", "win"]) == ["mac", "win"]
    # jobs of no known platform (webhooks that never came) say nothing of where
    assert disable_platforms(["linux", "unknown"], ["linux", "unknown"]) == ["linux"]
    assert disable_platforms(["linux", "win", "unknown"], ["linux", "win", "unknown"]) == []
    assert disable_platforms(["unknown"], ["linux", "unknown"]) == []


def test_flaky_tests_with_enough_jobs_are_disabled_with_a_stable_id():
    d = decide_disabled([row("test_a"), row("test_b", events=DISABLE_MIN_JOBS - 1),
                         row("test_c", verdict="broken", events=0), row("test_d", flaky=("linux", "win"))], {})
    key = "test_a (__main__.TestX)"
    assert d.disabled == {key: [stable_id(key), "", ["win"]], "test_d (__main__.TestX)": [
        stable_id("test_d (__main__.TestX)"), "", []]}
    assert stable_id(key) == stable_id("test_a (__main__.TestX)") != stable_id("test_b (__main__.TestX)")
    assert d.new == sorted(d.disabled) and d.reenabled == {}


def test_one_key_in_two_files_merges_platforms():
    a, b = row("test_a", flaky=("win",)), row("test_a", flaky=("mac",), platforms=("mac", "linux"))
    assert decide_disabled([a, b], {}).disabled["test_a (__main__.TestX)"][2] == ["mac", "win"]


def test_disabled_tests_stay_until_clean_for_a_whole_window():
    previous = {
        "test_fixed (__main__.TestX)": ["186910", "https://github.com/pytorch/pytorch/issues/186910", ["rocm"]],
        "test_unseen (__main__.TestX)": ["local-abc", "", []],
        "test_few (__main__.TestX)": ["local-def", "", ["win"]],
        "test_still (__main__.TestX)": ["190665", "https://github.com/pytorch/pytorch/issues/190665", ["mac"]],
        "test_again (__main__.TestX)": ["local-123", "", ["win"]],
    }
    rows = [row("test_fixed", verdict="healthy", events=0, runs=REENABLE_MIN_RUNS),
            row("test_few", verdict="healthy", events=0, runs=REENABLE_MIN_RUNS - 1),
            row("test_still", verdict="insufficient_data", events=1),
            row("test_again", flaky=("linux",))]
    d = decide_disabled(rows, previous)
    assert d.reenabled == {"test_fixed (__main__.TestX)": {"id": "186910", "runs": REENABLE_MIN_RUNS}}
    assert set(d.disabled) == set(previous) - {"test_fixed (__main__.TestX)"}
    assert d.disabled["test_still (__main__.TestX)"] == previous["test_still (__main__.TestX)"]
    # still flaky: keeps its issue, platforms follow today's evidence
    assert d.disabled["test_again (__main__.TestX)"] == ["local-123", "", ["linux"]]
    assert d.new == []


def test_publish_disabled_tests_writes_the_files_and_the_lake_table(tmp_path):
    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    out.write_bytes(DISABLED_TESTS_PATH, dumps({"test_fixed (__main__.TestX)": ["local-1", "", ["win"]]}))
    lake.write("flaky_tests", D, pa.Table.from_pylist([
        row("test_a"), row("test_fixed", verdict="healthy", events=0), row("test_ok", verdict="healthy", events=0)]))

    publish_disabled_tests(lake, out, D)

    published = json.loads(out.read_bytes(DISABLED_TESTS_PATH))
    assert published == {"test_a (__main__.TestX)": [stable_id("test_a (__main__.TestX)"), "", ["win"]]}
    assert json.loads(out.read_bytes(REENABLED_TESTS_PATH)) == {"test_fixed (__main__.TestX)": {"id": "local-1",
                                                                                               "runs": 400}}
    table = pa.parquet.read_table(str(tmp_path / "lake" / "disabled_tests" / f"day={D}" / "data.parquet")).to_pylist()
    assert [(r["test"], r["status"], r["flake_events"]) for r in table] == [
        ("test_a (__main__.TestX)", "disabled", 5), ("test_fixed (__main__.TestX)", "reenabled", 0)]


def test_an_unchanged_list_is_not_rewritten(tmp_path, monkeypatch):
    """CI downloads the list; a refresh every minute must not rewrite it when it says the same."""
    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    lake.write("flaky_tests", D, pa.Table.from_pylist([row("test_a"), row("test_ok", verdict="healthy", events=0)]))
    publish_disabled_tests(lake, out, D)
    written = []
    real = Store.write_bytes
    monkeypatch.setattr(Store, "write_bytes", lambda self, rel, data: (written.append(rel), real(self, rel, data)))
    publish_disabled_tests(lake, out, D)
    assert written == []
    lake.write("flaky_tests", D, pa.Table.from_pylist([row("test_a"), row("test_b")]))
    publish_disabled_tests(lake, out, D)
    assert written == [DISABLED_TESTS_PATH] and "test_b (__main__.TestX)" in json.loads(out.read_bytes(DISABLED_TESTS_PATH))


def test_the_rows_read_for_a_decision_decide_as_every_row_would(tmp_path):
    """Only tests that flaked or that a list names are read: every row of such a test (in any file,
    healthy or not), so the decision and the counts it records are those of the whole table."""
    lake = Lake.at(str(tmp_path / "lake"))
    in_file = lambda r, f: {**r, "file": f}  # noqa: E731
    rows = [row("test_a"), in_file(row("test_a", verdict="healthy", events=0, runs=7), "test_y.py"),
            row("test_flaked_once", verdict="healthy", events=1, runs=90),
            row("test_fixed", verdict="healthy", events=0, runs=REENABLE_MIN_RUNS),
            row("test_still", verdict="healthy", events=0, runs=3, cls="mod.TestZ"),
            row("test_ok", verdict="healthy", events=0), row("test_b", verdict="broken", events=0)]
    lake.write("flaky_tests", D, pa.Table.from_pylist(rows))
    previous = {pytorch_key("TestX", "test_fixed"): ["local-1", "", []],
                pytorch_key("TestZ", "test_still"): ["local-2", "", []],
                pytorch_key("TestX", "test_gone"): ["local-3", "", []]}

    read = flaky_rows(lake, D, keys=previous)

    everything = flaky_rows(lake, D)
    assert len(everything) == len(rows)
    assert sorted((r["file"], r["name"]) for r in read) == [
        ("test_x.py", "test_a"), ("test_x.py", "test_fixed"), ("test_x.py", "test_flaked_once"),
        ("test_x.py", "test_still"), ("test_y.py", "test_a")]
    assert decide_disabled(read, previous) == decide_disabled(everything, previous)
    assert lake.rows_in(lake.files("flaky_tests", [D])) == len(rows)
    lake.write("flaky_tests", D, pa.Table.from_pylist([], schema=pa.Table.from_pylist(rows).schema))
    assert flaky_rows(lake, D, keys=previous) == [] and lake.rows_in(lake.files("flaky_tests", [D])) == 0


def test_a_window_whose_tests_are_all_healthy_still_publishes(tmp_path):
    """No row needs reading, yet the window has tests: the list is decided (and re-enables), not kept."""
    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    out.write_bytes(DISABLED_TESTS_PATH, dumps({"test_fixed (__main__.TestX)": ["local-1", "", ["win"]]}))
    lake.write("flaky_tests", D, pa.Table.from_pylist([row("test_fixed", verdict="healthy", events=0),
                                                       row("test_ok", verdict="healthy", events=0)]))
    decision = publish_disabled_tests(lake, out, D)
    assert decision.nothing_new == "" and list(decision.reenabled) == ["test_fixed (__main__.TestX)"]
    assert json.loads(out.read_bytes(DISABLED_TESTS_PATH)) == {}


def stats_row(name, env, seconds, passes, branch="main", cls="TestX"):
    return {"classname": cls, "name": name, "build_env": env, "test_config": "default", "branch_class": branch,
            "pass_time": seconds * passes, "clean_passes": passes}


def test_slow_tests_average_clean_main_passes_over_the_window(tmp_path):
    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    lake.write("test_daily_stats", "2026-11-13", pa.Table.from_pylist([
        stats_row("test_slow", "linux", 70.0, 2), stats_row("test_slow", "win", 200.0, 1),
        stats_row("test_border", "linux", 59.0, 3), stats_row("test_pr_only", "linux", 300.0, 4, branch="other"),
        stats_row("test_old", "linux", 90.0, 5)]))
    lake.write("test_daily_stats", D, pa.Table.from_pylist([
        stats_row("test_slow", "linux", 40.0, 2), stats_row("test_border", "linux", 63.0, 1)]))
    lake.write("test_daily_stats", "2026-10-01", pa.Table.from_pylist([stats_row("test_ancient", "linux", 500.0, 9)]))

    assert publish_slow_tests(lake, out, D, 14) == (2, "", None)

    # test_slow: (140 + 200 + 80) / 5 = 84 s, the mean over every configuration's passes, as PyTorch's;
    # test_border: (177 + 63) / 4 = 60 s, not over; PR runs and days outside the window do not count
    assert json.loads(out.read_bytes(SLOW_TESTS_PATH)) == {"test_slow (__main__.TestX)": 84.0,
                                                           "test_old (__main__.TestX)": 90.0}


def test_a_quiet_window_keeps_the_published_lists(tmp_path):
    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    listed = {"test_flaky (__main__.TestX)": ["190665", "https://github.com/pytorch/pytorch/issues/190665", ["mac"]]}
    published = {DISABLED_TESTS_PATH: dumps(listed), REENABLED_TESTS_PATH: dumps({}),
                 SLOW_TESTS_PATH: dumps({"test_slow (__main__.TestX)": 80.0})}
    for path, data in published.items():
        out.write_bytes(path, data)
    no_tests = pa.Table.from_pylist([], schema=pa.Table.from_pylist([row("x")]).schema)
    lake.write("flaky_tests", D, no_tests)
    lake.write("test_daily_stats", D, pa.Table.from_pylist([stats_row("test_pr", "linux", 90.0, 3, branch="other")]))

    decision = publish_disabled_tests(lake, out, D)
    slow, why, later = publish_slow_tests(lake, out, D, 14)

    assert {path: out.read_bytes(path) for path in published} == published
    assert decision.nothing_new == (
        f"no test in flaky_tests for the window ending {D}: kept "
        f"{out.display(DISABLED_TESTS_PATH)}, {out.display(REENABLED_TESTS_PATH)} as published")
    assert (slow, later, why) == (0, None, f"no clean main-branch pass in the 14 days ending {D}: kept "
                              f"{out.display(SLOW_TESTS_PATH)} as published")
    # the lake records the list as it stands that day
    table = pa.parquet.read_table(str(tmp_path / "lake" / "disabled_tests" / f"day={D}" / "data.parquet")).to_pylist()
    assert [(r["test"], r["status"], r["id"]) for r in table] == [("test_flaky (__main__.TestX)", "disabled", "190665")]


def test_a_window_with_clean_passes_and_no_slow_test_publishes_an_empty_list(tmp_path):
    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    out.write_bytes(SLOW_TESTS_PATH, dumps({"test_slow (__main__.TestX)": 80.0}))
    lake.write("test_daily_stats", D, pa.Table.from_pylist([stats_row("test_slow", "linux", 12.0, 10)]))
    assert publish_slow_tests(lake, out, D, 14) == (0, "", None)  # measured, and fast now: a real answer
    assert json.loads(out.read_bytes(SLOW_TESTS_PATH)) == {}
