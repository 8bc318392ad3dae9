"""The flakiness window's daily stats, summed with the earlier days' sums a refresh kept: the same
verdicts as summing the whole window, and kept sums used only while the files they came from are
the same. Through the real daily aggregates of hand-made CI histories (see test_flaky)."""

import os
import shutil

import pyarrow.parquet as pq
import pytest
from test_flaky import CLANG, LINUX, WIN, History, _table

from resources.lake import Lake, connect
from torchci_assets.derived.flakiness import window_stats
from torchci_assets.derived.flakiness.flaky import build_flaky_tests, compute, register_window
from torchci_assets.derived.flakiness.unchanged import forget

TESTS = ["test_flaky", "test_broken", "test_ok", "test_win_only"]


def history(extra_flake_on_day_one: bool = False) -> History:
    """100 main commits, one an hour (five days), on three configurations: flakes by rerun, by
    same-commit pairs and by flips on several days, a test broken for a stretch, a test that runs on
    Windows only, reruns on one configuration only, and a job whose webhooks never came."""
    h = History(TESTS)
    for i in range(100):
        for config in (LINUX, CLANG, WIN):
            outcomes = {"test_win_only": "absent"} if config != WIN else {}
            if config == LINUX and i in (3, 27, 50, 90):
                outcomes["test_flaky"] = "flake"                  # failed, passed on rerun
            if config == CLANG and i in (12, 40, 75):
                outcomes["test_flaky"] = "crash"                  # a flip: neighbours pass
            if config == LINUX and 30 <= i < 34:
                outcomes["test_broken"] = "fail"
            if config == WIN and i == 44:
                outcomes["test_win_only"] = "fail"
            if extra_flake_on_day_one and config == WIN and i == 5:
                outcomes["test_ok"] = "flake"
            h.run(i, config, outcomes)
        if i == 20:  # a same-commit pair: a second job on the commit fails where the first passed
            h.run(i, LINUX, {"test_ok": "crash"}, later_hours=0.7)
        if i == 45:
            h.run(i, CLANG, {"test_flaky": "crash"}, webhook=False)
    return h


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[bool, tuple[str, list[str]]]:
    """Each history built once for the module (a build is most of a test's CPU): whether the first day
    has the extra flake -> (its lake's root, its days). A test copies the lake it starts from."""
    out = {}
    for extra in (False, True):
        root = str(tmp_path_factory.mktemp("built") / "lake")
        out[extra] = (root, history(extra_flake_on_day_one=extra).build(Lake.at(root)))
    return out


def copy_of(built, where, extra: bool = False) -> tuple[Lake, list[str]]:
    """A lake of its own, as `history(extra).build` leaves it, and its days."""
    root, days = built[extra]
    shutil.copytree(root, where)
    return Lake.at(str(where)), days


def window(lake: Lake, day: str, window_days: int, keep: bool) -> tuple[bool, dict]:
    """Whether the kept sums were used (their files were there and were not written again), and
    the flakiness tables computed from the window."""
    before = kept_stamps(lake, day)
    con = connect()
    try:
        register_window(con, lake, day, window_days, keep_past_sums=keep)
        compute(con)
        tables = {t: sorted(con.execute(f"SELECT * FROM {t}").fetchall(), key=repr)
                  for t in ("w_test_stats", "w_config_reruns", "platform_evidence", "verdicts")}
    finally:
        con.close()
    return bool(before) and kept_stamps(lake, day) == before, tables


def kept_stamps(lake: Lake, day: str) -> dict[str, tuple[int, int]]:
    """The kept files of the day, with their inode and modification time (a rewrite is a new file)."""
    folder = lake.store.full(f"flaky_tests/day={day}")
    out = {}
    for name in window_stats.KEPT.values():
        path = os.path.join(folder, f"{name}.parquet")
        if os.path.exists(path):
            st = os.stat(path)
            out[name] = (st.st_ino, st.st_mtime_ns)
    return out


def test_kept_sums_give_what_summing_the_whole_window_gives(tmp_path, built):
    lake, days = copy_of(built, tmp_path / "lake")
    assert len(days) == 5
    day = days[-1]
    used, whole = window(lake, day, 14, keep=False)
    assert not used and kept_stamps(lake, day) == {}  # a run that is no refresh keeps nothing
    verdicts = {r[2]: r for r in whole["verdicts"]}
    assert set(verdicts) == set(TESTS)
    # the evidence spans the five days: what is summed apart and then together must say the same
    assert {r[3] for r in whole["w_test_stats"]} == {"linux", "win", "unknown"}
    reruns = {(env, config): n for env, config, n in whole["w_config_reruns"]}
    assert reruns[LINUX[:2]] == 4 * 1 + 4 * 2 and reruns[WIN[:2]] == 2 and reruns[CLANG[:2]] == 0  # OUTCOMES

    used, first = window(lake, day, 14, keep=True)
    assert not used and first == whole
    assert sorted(kept_stamps(lake, day)) == ["_window_past_configs", "_window_past_tests"]
    used, again = window(lake, day, 14, keep=True)
    assert used and again == whole
    # what was kept is the four earlier days' sums, and names the digest of their files
    kept = pq.read_table(lake.store.full(f"flaky_tests/day={day}/_window_past_tests.parquet"))
    assert kept.schema.metadata[window_stats.DIGEST_KEY]
    con = connect()
    lake.register(con, "test_daily_stats", days[:-1], name="earlier")
    [(earlier_runs,)] = con.execute("SELECT sum(runs - skipped) FROM earlier").fetchall()
    con.close()
    assert earlier_runs and sum(kept.column("runs").to_pylist()) == earlier_runs


def test_kept_sums_are_made_again_when_an_earlier_day_changes_or_they_cannot_be_read(tmp_path, built):
    lake, days = copy_of(built, tmp_path / "lake")
    day = days[-1]
    before = window(lake, day, 14, keep=False)[1]
    window(lake, day, 14, keep=True)
    assert window(lake, day, 14, keep=True)[0]

    # a backfill of the first day with one more flake there: the kept sums are not used. (Its
    # test_daily_stats file differs in one row, and its footer's sizes and statistics do not.)
    first_day = lake.files("test_daily_stats", [days[0]])[0]
    footer = pq.read_metadata(first_day).to_dict()
    history(extra_flake_on_day_one=True).build(lake)
    assert pq.read_metadata(first_day).to_dict() == footer
    used, refreshed = window(lake, day, 14, keep=True)
    scratch, _ = copy_of(built, tmp_path / "scratch", extra=True)
    assert not used and refreshed == window(scratch, day, 14, keep=False)[1]
    assert refreshed != before  # the flake of the first day counts
    assert window(lake, day, 14, keep=True)[0]  # and kept again

    # another window (four days, not five): another set of earlier days, another digest
    used, short = window(lake, day, 4, keep=True)
    assert not used and short == window(lake, day, 4, keep=False)[1]
    assert window(lake, day, 4, keep=True)[0]
    # with fewer earlier days than KEEP_FROM_DAYS, the window is summed in one pass: nothing is kept
    stamps, few = kept_stamps(lake, day), window_stats.KEEP_FROM_DAYS
    con = connect()
    assert not window_stats.register(con, lake, day, days[-few:-1], keep=True)
    con.close()
    assert window(lake, day, few, keep=True)[1] == window(lake, day, few, keep=False)[1]
    assert kept_stamps(lake, day) == stamps

    # a kept file that cannot be read is not used, and is replaced
    (tmp_path / "lake" / "flaky_tests" / f"day={day}" / "_window_past_configs.parquet").write_bytes(b"not parquet")
    used, mended = window(lake, day, 4, keep=True)
    assert not used and mended == short
    assert window(lake, day, 4, keep=True)[0]


def test_a_refresh_of_flaky_tests_writes_what_the_daily_run_writes(tmp_path, built):
    lake, days = copy_of(built, tmp_path / "lake")
    day = days[-1]
    build_flaky_tests(lake, day)
    daily = {t: _table(lake, t, day) for t in ("flaky_tests", "flaky_test_platforms")}
    for _ in range(2):  # the first refresh keeps the earlier days' sums, the second adds to them
        forget(lake, "flaky_tests", day)  # as if the day's stats had moved
        assert not build_flaky_tests(lake, day, skip_if_unchanged=True).unchanged
        assert {t: _table(lake, t, day) for t in daily} == daily
    assert sorted(kept_stamps(lake, day)) == ["_window_past_configs", "_window_past_tests"]


def test_a_refresh_sees_an_earlier_day_rewritten_with_a_footer_of_the_same_sizes_and_statistics(tmp_path, built):
    lake, days = copy_of(built, tmp_path / "lake")
    day = days[-1]
    build_flaky_tests(lake, day, skip_if_unchanged=True)
    assert build_flaky_tests(lake, day, skip_if_unchanged=True).unchanged
    first_day = lake.files("test_daily_stats", [days[0]])[0]
    before = lake.file_digest(first_day)
    history(extra_flake_on_day_one=True).build(lake)  # one more rerun counted on the first day
    assert lake.file_digest(first_day) != before
    refreshed = build_flaky_tests(lake, day, skip_if_unchanged=True)
    assert not refreshed.unchanged
    scratch, _ = copy_of(built, tmp_path / "scratch", extra=True)
    build_flaky_tests(scratch, day)
    assert {t: _table(lake, t, day) for t in ("flaky_tests", "flaky_test_platforms")} == \
        {t: _table(scratch, t, day) for t in ("flaky_tests", "flaky_test_platforms")}
