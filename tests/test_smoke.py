"""Platform smoke sets: the statistic on its corner cases, ranking, and the published documents."""

import json

import pyarrow as pa
import test_flaky as hist

from resources.lake import Lake
from resources.storage import Store
from torchci_assets.derived.flakiness.flaky import build_flaky_tests
from torchci_assets.derived.flakiness.smoke import (
    SMOKE_MIN_EXCLUSIVE_SHAS,
    SMOKE_MIN_RUNS,
    publish_smoke_tests,
    smoke_rows,
)

D = "2026-11-14"
PLATFORMS = ("linux", "win", "mac")


def ev(name, platform, runs, failures, exclusive=None, flake_events=0):
    """A flaky_test_platforms row; failing commits = failures, exclusive ones as given (default all)."""
    return {"file": "test_x.py", "classname": "TestX", "name": name, "platform": platform, "runs": runs,
            "failures": failures, "failing_shas": failures,
            "exclusive_failing_shas": failures if exclusive is None else exclusive, "flake_events": flake_events,
            "window_start": "2026-11-01", "window_end": D}


def selected(tmp_path, rows) -> dict[str, list[str]]:
    lake = Lake.at(str(tmp_path / "lake"))
    lake.write("flaky_test_platforms", D, pa.Table.from_pylist(rows))
    platforms, out, _ = smoke_rows(lake, D)
    return {p: [r["name"] for r in out if r["platform"] == p] for p in platforms}


def test_a_test_failing_on_one_platform_only_is_selected_there(tmp_path):
    got = selected(tmp_path, [ev("test_win", "win", 300, 90), ev("test_win", "linux", 900, 0),
                              ev("test_win", "mac", 300, 0)])
    assert got == {"linux": [], "mac": [], "win": ["test_win"]}


def test_a_test_seen_on_one_platform_only_has_nothing_to_compare_with(tmp_path):
    got = selected(tmp_path, [ev("test_only_win", "win", 300, 200), ev("test_other", "linux", 300, 0)])
    assert got["win"] == []


def test_few_runs_or_few_commits_are_not_evidence(tmp_path):
    got = selected(tmp_path, [
        ev("test_few_runs", "win", SMOKE_MIN_RUNS - 1, SMOKE_MIN_RUNS - 1), ev("test_few_runs", "linux", 900, 0),
        # fails half the time on Windows, but always together with other platforms but twice
        ev("test_few_shas", "win", 300, 150, exclusive=SMOKE_MIN_EXCLUSIVE_SHAS - 1),
        ev("test_few_shas", "linux", 900, 0),
        # 4 failures in 40 runs: the interval is too wide to say it is demonstrably frequent
        ev("test_small", "win", 40, 4), ev("test_small", "linux", 900, 0),
    ])
    assert got["win"] == []


def test_flaky_everywhere_or_at_flake_level_is_not_a_smoke_test(tmp_path):
    got = selected(tmp_path, [
        # fails 10% everywhere: no more on Windows than elsewhere
        *[ev("test_everywhere", p, 500, 50) for p in PLATFORMS],
        # fails much more on Windows, but is also flaky elsewhere
        ev("test_dist", "win", 500, 150, flake_events=100), ev("test_dist", "linux", 500, 10, flake_events=12),
        # a Windows-only flake: passes on rerun, fails the job 2% of the time
        ev("test_winflake", "win", 1000, 20, flake_events=200), ev("test_winflake", "linux", 2000, 0),
    ])
    assert got == {"linux": [], "mac": [], "win": []}


def test_sets_are_ranked_by_the_margin_between_the_bounds(tmp_path):
    got = selected(tmp_path, [
        ev("test_sometimes", "mac", 300, 60), ev("test_sometimes", "linux", 900, 1),
        ev("test_always", "mac", 300, 240), ev("test_always", "linux", 900, 0),
        ev("test_often", "mac", 300, 150), ev("test_often", "win", 200, 0),
    ])
    assert got["mac"] == ["test_always", "test_often", "test_sometimes"]


def test_published_documents_carry_the_evidence(tmp_path):
    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    lake.write("flaky_test_platforms", D, pa.Table.from_pylist([
        ev("test_win", "win", 300, 90), ev("test_win", "linux", 900, 0), ev("test_ok", "mac", 300, 0)]))
    report = publish_smoke_tests(lake, out, D)
    assert report.platforms == {"linux": 0, "mac": 0, "win": 1}
    doc = json.loads(out.read_bytes("smoke-tests/win.json"))
    assert doc["platform"] == "win" and doc["window"] == {"start": "2026-11-01", "end": D}
    [t] = doc["tests"]
    assert {k: t[k] for k in ("test", "rank", "failures", "runs", "failures_elsewhere", "runs_elsewhere",
                              "exclusive_failing_shas")} == {
        "test": "test_win (__main__.TestX)", "rank": 1, "failures": 90, "runs": 300, "failures_elsewhere": 0,
        "runs_elsewhere": 900, "exclusive_failing_shas": 90}
    assert 0 < t["failure_rate_low"] < 0.3 < t["failure_rate"] + 1e-9 and t["score"] > 0
    assert json.loads(out.read_bytes("smoke-tests/mac.json"))["tests"] == []


def test_a_rerun_of_an_earlier_day_leaves_the_later_sets(tmp_path):
    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    earlier = "2026-10-20"
    lake.write("flaky_test_platforms", earlier, pa.Table.from_pylist([
        ev("test_old", "win", 300, 90), ev("test_old", "linux", 900, 0)]))
    lake.write("flaky_test_platforms", D, pa.Table.from_pylist([
        ev("test_new", "win", 300, 90), ev("test_new", "linux", 900, 0)]))
    assert publish_smoke_tests(lake, out, D).paths == ["smoke-tests/linux.json", "smoke-tests/win.json"]
    published = out.read_bytes("smoke-tests/win.json")

    report = publish_smoke_tests(lake, out, earlier)
    assert (report.paths, report.later_day, report.platforms) == ([], D, {"linux": 0, "win": 1})
    assert out.read_bytes("smoke-tests/win.json") == published  # still test_new's set
    assert [r["name"] for r in lake.read_files(lake.files("smoke_tests", [earlier])).to_pylist()] == ["test_old"]
    assert publish_smoke_tests(lake, out, D).later_day is None  # the same day publishes again


def test_the_catalog_says_an_earlier_day_published_nothing(tmp_path):
    """docs/operations.md: a re-run of an old day shows `published: false` beside `not_published`."""
    from torchci_assets.derived.flakiness.assets import smoke_tests_asset

    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    earlier = "2026-10-20"
    for day, name in ((earlier, "test_old"), (D, "test_new")):
        lake.write("flaky_test_platforms", day, pa.Table.from_pylist([ev(name, "win", 300, 90),
                                                                      ev(name, "linux", 900, 0)]))
    assert _materialize(smoke_tests_asset, tmp_path, D)["published"] is True
    meta = _materialize(smoke_tests_asset, tmp_path, earlier)
    assert meta["published"] is False and f"shows {D}, later than {earlier}" in meta["not_published"]
    assert meta["output"] == out.display("smoke-tests/") and meta["files_published"] == []


def test_the_catalog_says_why_a_platform_set_is_empty(tmp_path):
    """An empty smoke-tests/<platform>.json is an answer: the materialization says which sets are
    empty and what a test would need to be in one, and says nothing of a set that is not empty."""
    from torchci_assets.derived.flakiness.assets import smoke_tests_asset

    Lake.at(str(tmp_path / "lake")).write("flaky_test_platforms", D, pa.Table.from_pylist(
        [ev("test_win", "win", 300, 90), ev("test_win", "linux", 900, 0), ev("test_win", "mac", 300, 0)]))
    meta = _materialize(smoke_tests_asset, tmp_path, D)
    assert meta["tests_per_platform"] == {"linux": 0, "mac": 0, "win": 1}
    assert meta["empty_sets"].startswith("linux, mac: no test failed there significantly more than elsewhere")
    assert f"at least {SMOKE_MIN_RUNS} runs" in meta["empty_sets"] and "win" not in meta["empty_sets"]


def _materialize(asset, tmp_path, day):
    """The asset's metadata for `day`, materialized as Dagster does (lake and outputs under tmp_path)."""
    import dagster as dg

    from resources.configured import LakeResource, OutputsResource

    result = dg.materialize([asset], partition_key=day, resources={
        "lake": LakeResource(uri=str(tmp_path / "lake")), "outputs": OutputsResource(uri=str(tmp_path / "out"))})
    [event] = result.get_asset_materialization_events()
    return {k: v.value for k, v in event.materialization.metadata.items()}


def test_end_to_end_from_a_history(tmp_path):
    # test_win fails on Windows on one commit in three, never on Linux; test_flaky flakes
    # (passes on rerun) on both platforms
    h = hist.History(["test_win", "test_flaky"])
    for i in range(60):
        h.run(i, hist.LINUX, {"test_flaky": "flake"} if i % 10 == 0 else None)
        h.run(i, hist.WIN, {"test_win": "fail"} if i % 3 == 0 else {"test_flaky": "flake"} if i % 10 == 5 else None)
    lake = Lake.at(str(tmp_path / "lake"))
    days = h.build(lake)
    build_flaky_tests(lake, days[-1])
    platforms, rows, _ = smoke_rows(lake, days[-1])
    assert platforms == ["linux", "win"]
    assert [(r["platform"], r["name"], r["failures"], r["runs"], r["exclusive_failing_shas"]) for r in rows] == [
        ("win", "test_win", 20, 60, 20)]


def test_a_test_broken_everywhere_for_a_while_is_no_platform_smoke_test(tmp_path):
    """test_broken was broken on main on both platforms, longer on Windows (commits 10-29 there,
    10-14 on Linux): its Windows rate looks worse only because of those commits. test_win_only was
    broken on Windows alone (commits 35-49): that is what a Windows smoke set is for."""
    h = hist.History(["test_broken", "test_win_only"])
    for i in range(60):
        h.run(i, hist.LINUX, {"test_broken": "fail"} if 10 <= i <= 14 else None)
        fails = {**({"test_broken": "fail"} if 10 <= i <= 29 else {}),
                 **({"test_win_only": "fail"} if 35 <= i <= 49 else {})}
        h.run(i, hist.WIN, fails or None)
    lake = Lake.at(str(tmp_path / "lake"))
    days = h.build(lake)
    build_flaky_tests(lake, days[-1])
    _, rows, _ = smoke_rows(lake, days[-1])
    assert [(r["platform"], r["name"]) for r in rows] == [("win", "test_win_only")]
