"""disabled-tests-condensed.json and slow-tests.json: PyTorch's formats, disabling and re-enabling rules."""

import datetime as dt
import json

import dagster as dg
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
    publish_disabled_from_issues,
    publish_disabled_tests,
    publish_slow_tests,
    pytorch_key,
    stable_id,
)
from torchci_assets.ingest.jobnames import parse_job_name

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


def test_non_ascii_is_escaped_as_pytorchs_json_dump_escapes_it():
    """update_disabled_issues.py writes with json.dump (ensure_ascii): a title with an accent, a
    symbol, an emoji beyond U+FFFF or DEL is published as it would be."""
    doc = {"test_caf\u00e9 (__main__.TestUnicode)": ["1", "https://github.com/pytorch/pytorch/issues/1", ["linux"]],
           "test_x (__main__.TestX)": ["2", "https://github.com/pytorch/pytorch/issues/2", []],
           "pull / linux \u2013 \U0001f600 / test\x7f\n": ["caf\u00e9-bot", "3", "", "pull", "linux", "\u00b5"]}
    assert dumps(doc) == json.dumps(doc, sort_keys=True, indent=2).encode()
    assert dumps(doc).isascii() and json.loads(dumps(doc)) == doc


def test_platforms_are_where_it_flaked_and_empty_only_when_everywhere():
    assert disable_platforms(["win"], ["linux", "win"]) == ["win"]
    assert disable_platforms(["win", "linux"], ["linux", "win"]) == []
    assert disable_platforms(["linux"], ["linux"]) == ["linux"]  # one platform is not "everywhere"
    assert disable_platforms(["mac", "win"], ["linux", "mac", "win"]) == ["mac", "win"]
    # jobs of no known platform (webhooks that never came) say nothing of where
    assert disable_platforms(["linux", "unknown"], ["linux", "unknown"]) == ["linux"]
    assert disable_platforms(["linux", "win", "unknown"], ["linux", "win", "unknown"]) == []
    assert disable_platforms(["unknown"], ["linux", "unknown"]) == []


def test_platforms_are_named_as_pytorchs_runner_names_them():
    """The ingest names aarch64 and s390x jobs' platforms itself; PyTorch's runner would drop those
    names and, with none left, disable the test everywhere. Both are its linux."""
    aarch64 = parse_job_name("linux-jammy-aarch64-py3.10 / test (default, 1, 3, linux.arm64.2xlarge)").platform
    s390x = parse_job_name("linux-manylinux-2_28-py3-cpu-s390x / test (default, 1, 10, linux.s390x)").platform
    assert (aarch64, s390x) == ("linux-aarch64", "s390x")
    assert disable_platforms([aarch64], ["linux", aarch64, "win"]) == ["linux"]
    assert disable_platforms([s390x], ["linux", s390x, "mac"]) == ["linux"]
    assert disable_platforms([aarch64, "win"], ["linux", aarch64, "win", "mac"]) == ["linux", "win"]
    # one PyTorch platform, linux, ran it: named, not [] (everywhere)
    assert disable_platforms(["linux", aarch64], ["linux", aarch64]) == ["linux"]
    assert disable_platforms([aarch64, "win"], [aarch64, "win"]) == []  # every platform that ran it


def test_a_carried_entry_gets_pytorchs_platform_names():
    """A list published with the ingest's own names keeps its tests disabled where they flaked."""
    previous = {"test_arm (__main__.TestX)": ["local-abc", "", ["linux-aarch64"]],
                "test_both (__main__.TestX)": ["local-def", "", ["linux-aarch64", "s390x", "win"]],
                "test_issue (__main__.TestX)": ["42", "https://github.com/pytorch/pytorch/issues/42", ["mac", "rocm"]]}
    d = decide_disabled([], previous)
    assert d.disabled == {"test_arm (__main__.TestX)": ["local-abc", "", ["linux"]],
                          "test_both (__main__.TestX)": ["local-def", "", ["linux", "win"]],
                          "test_issue (__main__.TestX)": previous["test_issue (__main__.TestX)"]}


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


DOTTED = "test_a (distributed.test_c10d.TestY)"  # as a maintainer may title the test's issue
DOTTED_ENTRY = ["1234", "https://github.com/pytorch/pytorch/issues/1234", ["linux"]]


def lake_table(tmp_path, day) -> list[tuple]:
    table = pa.parquet.read_table(str(tmp_path / "lake" / "disabled_tests" / f"day={day}" / "data.parquet"))
    return [(r["test"], r["status"], r["flake_events"], r["runs"]) for r in table.to_pylist()]


def test_an_entry_written_with_a_dotted_suite_is_the_tests_entry_kept_and_reenabled_under_its_name(tmp_path):
    """A list published from the issues names a test as its issue's title does, a dotted suite too;
    PyTorch's runner matches the class name alone, so that entry disables `test_a (__main__.TestY)`.
    Decided without credentials, the list carries it as the test's: the test flaking again keeps
    that one entry (never a second, local one beside it), and its clean runs re-enable it."""
    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    out.write_bytes(DISABLED_TESTS_PATH, dumps({DOTTED: DOTTED_ENTRY}))
    flaky, clean = row("test_a", cls="TestY"), row("test_a", cls="TestY", verdict="healthy", events=0)
    days = {"2026-11-14": flaky, "2026-11-15": clean}
    for day, test_a in days.items():
        lake.write("flaky_tests", day, pa.Table.from_pylist([test_a, row("test_ok", verdict="healthy", events=0)]))

    flaked = publish_disabled_tests(lake, out, "2026-11-14")
    assert json.loads(out.read_bytes(DISABLED_TESTS_PATH)) == {DOTTED: [*DOTTED_ENTRY[:2], ["win"]]}
    assert flaked.new == [] and lake_table(tmp_path, "2026-11-14") == [(DOTTED, "disabled", 5, 400)]

    reenabled = publish_disabled_tests(lake, out, "2026-11-15")
    assert json.loads(out.read_bytes(DISABLED_TESTS_PATH)) == {}
    assert json.loads(out.read_bytes(REENABLED_TESTS_PATH)) == {DOTTED: {"id": "1234", "runs": 400}}
    assert reenabled.new == [] and lake_table(tmp_path, "2026-11-15") == [(DOTTED, "reenabled", 0, 400)]


def test_a_test_disabled_by_an_issue_titled_with_a_dotted_suite_is_counted_on_its_runs(tmp_path):
    """From the issues, the list names the test as the issue's title does; the lake table counts
    the test's flakes and runs on that entry, and its re-enabling the runs it had."""
    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    issue = {"number": 1234, "title": f"DISABLED {DOTTED}", "body": "Platforms: linux", "state": "open",
             "html_url": DOTTED_ENTRY[1]}
    lake.write("flaky_tests", "2026-11-14", pa.Table.from_pylist([row("test_a", cls="TestY")]))
    lake.write("flaky_tests", "2026-11-15", pa.Table.from_pylist([row("test_a", cls="TestY", verdict="healthy",
                                                                      events=0)]))
    publish_disabled_from_issues(lake, out, "2026-11-14", [issue])
    assert json.loads(out.read_bytes(DISABLED_TESTS_PATH)) == {DOTTED: DOTTED_ENTRY}
    assert lake_table(tmp_path, "2026-11-14") == [(DOTTED, "disabled", 5, 400)]
    publish_disabled_from_issues(lake, out, "2026-11-15", [])  # a maintainer closed the issue
    assert json.loads(out.read_bytes(REENABLED_TESTS_PATH)) == {DOTTED: {"id": "1234", "runs": 400}}


def test_a_re_enabled_test_keeps_when_its_issue_closed_in_the_table_only_asked_once(tmp_path):
    """Dr. CI tells a failure of a test re-enabled after a merge base by its issue's close time: the
    table records GitHub's closed_at, asked once per test re-enabled on the day; reenabled-tests.json
    stays in PyTorch's format. Unknown, the test is re-enabled all the same."""
    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    issues = [{"number": n, "title": f"DISABLED test_{n} (__main__.TestX)", "body": "", "state": "open",
               "html_url": f"https://github.com/pytorch/pytorch/issues/{n}"} for n in (11, 12, 13)]
    publish_disabled_from_issues(lake, out, "2026-11-14", issues)
    closed = dt.datetime(2026, 11, 15, 15, 4, 5, tzinfo=dt.timezone.utc)
    asked = []

    def close_times(numbers):
        asked.append(numbers)
        return {"11": closed}  # 12: GitHub did not say (an outage, a lookup past the run's limit)

    publish_disabled_from_issues(lake, out, "2026-11-15", issues[2:], close_times=close_times)
    table = lambda: {r["test"]: r["closed_at"] for r in pa.parquet.read_table(  # noqa: E731
        str(tmp_path / "lake" / "disabled_tests" / "day=2026-11-15" / "data.parquet")).to_pylist()}
    assert asked == [["11", "12"]]
    assert table() == {"test_11 (__main__.TestX)": closed, "test_12 (__main__.TestX)": None,
                       "test_13 (__main__.TestX)": None}
    assert json.loads(out.read_bytes(REENABLED_TESTS_PATH)) == {
        "test_11 (__main__.TestX)": {"id": "11", "runs": 0}, "test_12 (__main__.TestX)": {"id": "12", "runs": 0}}
    # the day's next refresh: 11's time is kept from the table (its close is no longer in what it read),
    # and 12, asked once, is not asked again; 13's issue closing now is
    publish_disabled_from_issues(lake, out, "2026-11-15", [], close_times=close_times)
    assert asked == [["11", "12"], ["13"]] and table()["test_11 (__main__.TestX)"] == closed
    assert table()["test_12 (__main__.TestX)"] is None


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


# ---- a day's refreshes, the day at once, and re-runs of earlier days --------------------------------

YESTERDAY, TODAY = "2026-11-13", "2026-11-14"
FLAKY_A = "test_a (__main__.TestX)"


def publish_on(lake: Lake, out: Store, day: str, rows: list[dict]) -> dict:
    """Land `rows` as the day's `flaky_tests` (a refresh or the daily run) and publish; the list."""
    lake.write("flaky_tests", day, pa.Table.from_pylist(rows))
    publish_disabled_tests(lake, out, day)
    return json.loads(out.read_bytes(DISABLED_TESTS_PATH))


def test_a_test_a_refresh_disabled_is_decided_again_when_its_evidence_is_withdrawn(tmp_path):
    """Three main jobs in progress report test_a failing then passing on rerun: the refresh
    disables it. The jobs then end `cancelled` (or their logs are classified infrastructure), and
    flaky_tests no longer calls it flaky: the day's next refresh publishes what the day built at
    once publishes, without it and without listing it re-enabled."""
    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    publish_on(lake, out, YESTERDAY, [row("test_old")])  # yesterday's list: test_old, still listed today

    while_running = publish_on(lake, out, TODAY, [row("test_a"), row("test_old", verdict="healthy", events=0,
                                                                       runs=3)])
    assert FLAKY_A in while_running
    final = [row("test_a", verdict="healthy", events=0, runs=12), row("test_old", verdict="healthy", events=0, runs=3)]
    refreshed = publish_on(lake, out, TODAY, final)

    once_lake, once = Lake.at(str(tmp_path / "once-lake")), Store(str(tmp_path / "once"))
    publish_on(once_lake, once, YESTERDAY, [row("test_old")])
    at_once = publish_on(once_lake, once, TODAY, final)
    assert FLAKY_A not in at_once and refreshed == at_once == {
        "test_old (__main__.TestX)": [stable_id("test_old (__main__.TestX)"), "", ["win"]]}
    assert out.read_bytes(REENABLED_TESTS_PATH) == once.read_bytes(REENABLED_TESTS_PATH) == b"{}"
    # the test is decided again from each refresh's evidence: it flakes again, it is disabled again
    assert FLAKY_A in publish_on(lake, out, TODAY, [row("test_a")])


def test_a_first_publication_that_stopped_half_way_is_taken_up_against_the_same_list(tmp_path, monkeypatch):
    """Stopped after the list was written but before its day was: the day's next run still decides
    against the previous day's list, not against its own half-published one."""
    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    publish_on(lake, out, YESTERDAY, [row("test_old", verdict="healthy", events=0)])
    monkeypatch.setattr("torchci_assets.derived.flakiness.lists.record_day", lambda *a: None)
    assert FLAKY_A in publish_on(lake, out, TODAY, [row("test_a")])
    monkeypatch.undo()
    assert publish_on(lake, out, TODAY, [row("test_a", verdict="healthy", events=0, runs=12)]) == {}


def test_a_rerun_of_an_earlier_day_does_not_replace_the_published_disabled_list(tmp_path):
    """A backfill or re-execution of an earlier day writes its lake table and leaves the later
    day's lists as they are: replacing them would re-enable tests flaky now."""
    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    early, late = "2026-11-10", TODAY
    lake.write("flaky_tests", early, pa.Table.from_pylist([row("test_a", verdict="healthy", events=0,
                                                                 runs=REENABLE_MIN_RUNS)]))
    publish_on(lake, out, "2026-11-13", [row("test_a")])
    publish_on(lake, out, late, [row("test_a")])
    published = {p: out.read_bytes(p) for p in (DISABLED_TESTS_PATH, REENABLED_TESTS_PATH)}
    assert FLAKY_A in json.loads(published[DISABLED_TESTS_PATH])

    decision = publish_disabled_tests(lake, out, early)  # what a backfill / re-execution of the earlier day runs

    assert {p: out.read_bytes(p) for p in published} == published, "the earlier day re-enabled a test flaky later"
    assert decision.later_day == late
    assert lake.files("disabled_tests", [early])  # the day's own lake table is written
    # from issues alike: the later day's list stays, whatever the issues say now
    decision = publish_disabled_from_issues(lake, out, early, [])
    assert {p: out.read_bytes(p) for p in published} == published
    assert decision.later_day == late
    # the later day itself still publishes
    assert publish_disabled_tests(lake, out, late).later_day is None


def test_yesterdays_daily_run_after_todays_first_refresh_becomes_todays_baseline(tmp_path):
    """The daily run of yesterday at 00:30 comes after today's first refresh: it publishes nothing
    (today's list is out), but its settled list is what today is decided against, as it would be
    had it run first; today's next run publishes what the two days built at once publish."""
    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    publish_on(lake, out, YESTERDAY, [row("test_b")])  # yesterday's last refresh: test_b flaky then
    published = publish_on(lake, out, TODAY, [row("test_b", verdict="healthy", events=0, runs=5)])
    assert "test_b (__main__.TestX)" in published  # stays: yesterday's list had it

    # the daily run of yesterday: the jobs that made test_b flaky ended cancelled
    lake.write("flaky_tests", YESTERDAY, pa.Table.from_pylist([row("test_b", verdict="healthy", events=0, runs=5)]))
    decision = publish_disabled_tests(lake, out, YESTERDAY)
    assert json.loads(out.read_bytes(DISABLED_TESTS_PATH)) == published

    refreshed = publish_on(lake, out, TODAY, [row("test_b", verdict="healthy", events=0, runs=5)])
    once_lake, once = Lake.at(str(tmp_path / "once-lake")), Store(str(tmp_path / "once"))
    publish_on(once_lake, once, YESTERDAY, [row("test_b", verdict="healthy", events=0, runs=5)])
    assert refreshed == publish_on(once_lake, once, TODAY, [row("test_b", verdict="healthy", events=0, runs=5)]) == {}
    assert json.loads(out.read_bytes(REENABLED_TESTS_PATH)) == {}
    assert decision.later_day == TODAY


def test_a_rerun_of_an_earlier_day_says_it_published_nothing(tmp_path):
    from resources.configured import LakeResource, OutputsResource
    from resources.github import GitHubResource
    from torchci_assets.derived.flakiness.assets import disabled_tests_asset

    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    publish_on(lake, out, TODAY, [row("test_a")])
    lake.write("flaky_tests", YESTERDAY, pa.Table.from_pylist([row("test_ok", verdict="healthy", events=0)]))
    result = dg.materialize([disabled_tests_asset], partition_key=YESTERDAY, resources={
        "lake": LakeResource(uri=str(tmp_path / "lake")), "outputs": OutputsResource(uri=str(tmp_path / "out")),
        "github": GitHubResource()})  # no credentials: from the verdict
    [event] = result.get_asset_materialization_events()
    meta = {k: v.value for k, v in event.materialization.metadata.items()}
    assert meta["published"] is False
    assert meta["not_published"] == (f"{DISABLED_TESTS_PATH} and {REENABLED_TESTS_PATH} shows {TODAY}, later than "
                                     f"{YESTERDAY}: left as it is, as a re-run of an earlier day never replaces the "
                                     "current outputs")
    assert FLAKY_A in json.loads(out.read_bytes(DISABLED_TESTS_PATH))
