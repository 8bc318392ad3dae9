"""Verdicts of `flaky_tests` on small hand-made CI histories, through the real daily aggregates.

Each history is written as the lake's `test_run`, `workflow_job` and `workflow_run` tables,
then `test_results`/`test_jobs` and the daily aggregates are built by `test_stats`, and
`build_flaky_tests` reads only those aggregates, as in production.
"""

import datetime as dt
import itertools

import dagster as dg
import orjson
import pyarrow as pa
from midnight import utc_today

from resources.configured import LakeResource, OutputsResource
from resources.github import GitHubResource
from resources.lake import Lake, connect
from torchci_assets.derived.flakiness.assets import FLAKINESS_ASSETS
from torchci_assets.derived.flakiness.evidence import gather_evidence
from torchci_assets.derived.flakiness.flaky import (
    FLAKY_COLUMNS_ADDED,
    MIN_FLAKE_EVENTS,
    MIN_RUNS,
    PLATFORM_COLUMNS_ADDED,
    build_flaky_tests,
)
from torchci_assets.derived.flakiness.issue_text import render_body
from torchci_assets.derived.flakiness.lists import decide_disabled, flaky_rows
from torchci_assets.derived.results.stats import (
    build_test_daily_stats,
    build_test_results,
)
from torchci_assets.ingest.increments import REFRESH_TAG, REFRESH_VALUE
from torchci_assets.ingest.junit import TEST_RUN_SCHEMA

# The history starts 31 days before the real clock's day: the issue tests date DISABLED issues and
# their events by the real clock ("closed 60 days ago", "filed before the history's flakes").
# Days of slack either side: a run crossing midnight needs no wait (margin 0).
START = dt.datetime.combine(utc_today(dt.timedelta(0)) - dt.timedelta(days=31), dt.time(), dt.timezone.utc)
LINUX = ("linux-jammy-py3.10-gcc11", "default", "linux")
CLANG = ("linux-jammy-py3.10-clang18", "default", "linux")
WIN = ("win-vs2022-cpu-py3", "default", "win")
# status and rerun_count of a test row
OUTCOMES = {"pass": ("passed", 0), "flake": ("passed", 1), "fail": ("failed", 2), "crash": ("failed", 0),
            "skip": ("skipped", 0)}

JOB_SCHEMA = pa.schema([
    ("id", pa.int64()), ("run_id", pa.int64()), ("run_attempt", pa.int64()), ("name", pa.string()),
    ("head_sha", pa.string()), ("head_branch", pa.string()), ("status", pa.string()), ("conclusion", pa.string()),
    ("build_env", pa.string()), ("test_config", pa.string()), ("shard", pa.int32()), ("num_shards", pa.int32()),
    ("platform", pa.string()), ("started_at", pa.timestamp("us", tz="UTC")),
    ("completed_at", pa.timestamp("us", tz="UTC")), ("received_at", pa.timestamp("us", tz="UTC")),
])
RUN_SCHEMA = pa.schema([("id", pa.int64()), ("event", pa.string()), ("updated_at", pa.timestamp("us", tz="UTC"))])
PUSH_SCHEMA = pa.schema([("ref", pa.string()), ("after", pa.string()), ("received_at", pa.timestamp("us", tz="UTC"))])


def sha(commit: int) -> str:
    return f"{commit:040x}"


class History:
    """Jobs of hand-made CI runs. Main commit i is pushed at START + i hours; every job runs
    `tests`, which pass unless `outcomes` says otherwise (see OUTCOMES; "absent" leaves a test out)."""

    def __init__(self, tests: list[str]):
        self.tests = tests
        self.ids = itertools.count(1)
        self.jobs: list[dict] = []
        self.rows: dict[str, list[dict]] = {}
        self.runs: dict[str, list[dict]] = {}
        self.pushes: dict[str, dict] = {}

    def run(self, commit: int, config=LINUX, outcomes: dict | None = None, *, branch: str = "main",
            run_id: int | None = None, attempt: int = 1, later_hours: float = 0.5, conclusion: str | None = None,
            head: str | None = None, webhook: bool = True) -> int:
        """One test job; returns its run id (pass it back with attempt=2 for a re-attempt).
        `webhook=False`: its reports landed, its job's webhooks never did."""
        outcomes = outcomes or {}
        run_id = run_id or 10_000 + next(self.ids)
        job_id = 100_000 + next(self.ids)
        started = START + dt.timedelta(hours=commit + later_hours)
        completed = started + dt.timedelta(minutes=20)
        day = completed.date().isoformat()
        env, cfg, platform = config
        failing = any(outcomes.get(t, "pass") in ("fail", "crash") for t in self.tests)
        if branch == "main":
            pushed = START + dt.timedelta(hours=commit)
            self.pushes[sha(commit)] = {"ref": "refs/heads/main", "after": sha(commit), "received_at": pushed}
        self.jobs.append({"webhook": webhook,
            "id": job_id, "run_id": run_id, "run_attempt": attempt, "name": f"{env} / test ({cfg}, 1, 1, runner)",
            "head_sha": head or sha(commit), "head_branch": branch, "status": "completed",
            "conclusion": conclusion or ("failure" if failing else "success"), "build_env": env, "test_config": cfg,
            "shard": 1, "num_shards": 1, "platform": platform, "started_at": started, "completed_at": completed,
            "received_at": completed, "day": day})
        self.runs.setdefault(day, []).append({"id": run_id, "event": "push" if branch == "main" else "pull_request",
                                              "updated_at": completed})
        for t in self.tests:
            o = outcomes.get(t, "pass")
            if o == "absent":
                continue
            status, reruns = OUTCOMES[o]
            self.rows.setdefault(day, []).append({
                "workflow_id": run_id, "workflow_run_attempt": attempt, "job_id": job_id, "invoking_file": "test_x",
                "file": "test_x.py", "classname": "TestX", "name": t, "time": 1.0, "status": status,
                "rerun_count": reruns, "message": None if status == "passed" else f"{t}: AssertionError"})
        return run_id

    def build(self, lake: Lake) -> list[str]:
        """Write the raw tables, build test_results and the daily aggregates; returns the days."""
        days = sorted(self.rows)
        for day in days:
            lake.write("test_run", day, pa.Table.from_pylist(self.rows[day], schema=TEST_RUN_SCHEMA))
            jobs = [{k: v for k, v in j.items() if k not in ("day", "webhook")} for j in self.jobs
                    if j["day"] == day and j["webhook"]]
            lake.write("workflow_job", day, pa.Table.from_pylist(jobs, schema=JOB_SCHEMA))
            lake.write("workflow_run", day, pa.Table.from_pylist(self.runs[day], schema=RUN_SCHEMA))
            pushes = [p for p in self.pushes.values() if p["received_at"].date().isoformat() == day]
            lake.write("push", day, pa.Table.from_pylist(pushes, schema=PUSH_SCHEMA))
        for day in days:
            build_test_results(lake, day)
            build_test_daily_stats(lake, day)
        return days


def verdicts(tmp_path, h: History, window_days: int = 14) -> dict[str, dict]:
    lake = Lake.at(str(tmp_path / "lake"))
    days = h.build(lake)
    build_flaky_tests(lake, days[-1], window_days)
    con = connect()
    lake.register(con, "flaky_tests", [days[-1]], name="f")
    cur = con.execute("SELECT * FROM f")
    names = [d[0] for d in cur.description]
    return {r[names.index("name")]: dict(zip(names, r)) for r in cur.fetchall()}


def main_history(tests: list[str], commits: int, special: dict[int, dict], configs=(LINUX,)) -> History:
    """Every main commit runs every config once; `special[i]` gives commit i's outcomes on LINUX."""
    h = History(tests)
    for i in range(commits):
        for c in configs:
            h.run(i, c, special.get(i) if c == LINUX else None)
    return h


def test_reruns_that_pass_make_a_test_flaky(tmp_path):
    h = main_history(["test_flaky", "test_ok"], 40, {5: {"test_flaky": "flake"}, 17: {"test_flaky": "flake"},
                                                    30: {"test_flaky": "flake"}})
    v = verdicts(tmp_path, h)
    f = v["test_flaky"]
    assert (f["verdict"], f["runs"], f["rerun_passes"], f["failures"], f["flake_events"]) == ("flaky", 40, 3, 0, 3)
    assert f["flaky_platforms"] == ["linux"] and f["platforms"] == ["linux"]
    assert abs(f["flake_rate"] - 3 / 40) < 1e-9 and f["flake_rate_low"] < 3 / 40 < f["flake_rate_high"]
    assert f["first_seen"] < f["last_seen"]
    assert v["test_ok"]["verdict"] == "healthy" and v["test_ok"]["flake_events"] == 0


def test_pass_and_fail_on_the_same_commit_across_attempts_is_flaky(tmp_path):
    h = main_history(["test_pair", "test_ok"], 40, {})
    for i in (6, 18, 23):
        run = h.run(i, outcomes={"test_pair": "fail"}, later_hours=0.9)
        # the re-attempt of the same run passes, on the next day for the last one
        h.run(i, run_id=run, attempt=2, later_hours=0.95 if i != 23 else 2.0)
    v = verdicts(tmp_path, h)
    p = v["test_pair"]
    assert (p["verdict"], p["same_commit_pairs"], p["failures"], p["flake_events"], p["flips"]) == \
        ("flaky", 3, 3, 3, 0)
    assert p["rerun_failures"] == 3 and p["rerun_passes"] == 0


def test_isolated_failures_between_passing_main_commits_are_flips(tmp_path):
    h = main_history(["test_flip"], 40, {i: {"test_flip": "fail"} for i in (4, 15, 29)})
    f = verdicts(tmp_path, h)["test_flip"]
    assert (f["verdict"], f["flips"], f["same_commit_pairs"], f["flake_events"], f["broken_ranges"]) == \
        ("flaky", 3, 0, 3, 0)


def test_commits_where_the_test_was_skipped_are_neither_passes_nor_failures_for_flips(tmp_path):
    """test_skipped fails on commits 10, 20 and 30 and is skipped on the two commits after each (a
    skip decorator, a DISABLED issue): the shard ran, the test did not, so its next run is three
    commits on, too far for a flip, and the two skips are no failures either (no broken range).
    test_once_skipped is skipped on one commit after each failure: its runs around them are two
    commits apart, still flips. Counting skips as passes made both flaky with three flips."""
    special: dict[int, dict] = {}
    for i in (10, 20, 30):
        special[i] = {"test_skipped": "fail", "test_once_skipped": "fail"}
        special[i + 1] = {"test_skipped": "skip", "test_once_skipped": "skip"}
        special[i + 2] = {"test_skipped": "skip"}
    v = verdicts(tmp_path, main_history(["test_skipped", "test_once_skipped", "test_other"], 40, special))
    s, o = v["test_skipped"], v["test_once_skipped"]
    assert (s["verdict"], s["failures"], s["flips"], s["flake_events"], s["broken_ranges"]) == ("healthy", 3, 0, 0, 0)
    assert (o["verdict"], o["failures"], o["flips"], o["flake_events"], o["broken_ranges"]) == ("flaky", 3, 3, 3, 0)


def test_a_commit_failing_every_configuration_that_ran_the_test_is_no_flip(tmp_path):
    """Commit 12 breaks test_reverted on all three configurations (reruns failing too) and commit 13
    reverts it: a break, not three flakes; test_flake fails commit 12 on one configuration only,
    and commits 4 and 20 likewise: flips, as before."""
    h = History(["test_reverted", "test_flake"])
    for i in range(30):
        for c in (LINUX, CLANG, WIN):
            fails = {"test_reverted": "fail"} if i == 12 else {}
            if i in (4, 12, 20) and c == LINUX:
                fails["test_flake"] = "fail"
            h.run(i, c, fails or None)
    v = verdicts(tmp_path, h)
    assert (v["test_reverted"]["verdict"], v["test_reverted"]["failures"], v["test_reverted"]["flips"]) == \
        ("healthy", 3, 0)
    assert (v["test_flake"]["verdict"], v["test_flake"]["flips"]) == ("flaky", 3)


def test_flips_need_adjacent_commits_and_credible_failures(tmp_path):
    # test_sparse fails on a config that runs every sixth commit: its neighbours are not
    # consecutive commits; test_crash died without the rerun its config gives failing tests
    h = History(["test_sparse", "test_crash", "test_other"])
    for i in range(40):
        h.run(i, LINUX, {"test_crash": "crash"} if i in (5, 17, 29) else {"test_other": "flake"} if i == 2 else None)
        if i % 6 == 0:
            h.run(i, CLANG, {"test_sparse": "fail"} if i in (6, 18, 30) else None)
    v = verdicts(tmp_path, h)
    assert [(v[t]["verdict"], v[t]["failures"], v[t]["flips"]) for t in ("test_sparse", "test_crash")] == \
        [("healthy", 3, 0), ("healthy", 3, 0)]


def test_consistent_failures_from_a_commit_until_its_fix_are_broken_not_flaky(tmp_path):
    # broken on commits 10..14 on both configs; every retry fails too; a periodic config that
    # ran only commit 12 of the range sees one failure between passes, which is no flip
    h = History(["test_broken", "test_ok"])
    for i in range(40):
        bad = {"test_broken": "fail"} if 10 <= i < 15 else None
        for c in (LINUX, WIN):
            run = h.run(i, c, bad)
            if bad and c == LINUX:
                h.run(i, c, bad, run_id=run, attempt=2, later_hours=0.8)
        if i % 6 == 0:
            h.run(i, CLANG, {"test_broken": "fail"} if i == 12 else None)
    b = verdicts(tmp_path, h)["test_broken"]
    assert (b["verdict"], b["broken_from_sha"], b["broken_fixed_sha"]) == ("broken", sha(10), sha(15))
    assert (b["flake_events"], b["flips"], b["same_commit_pairs"]) == (0, 0, 0)
    assert b["failures"] == 5 * 3 + 1 and b["broken_ranges"] == 2  # one range per dense config


def test_main_commits_are_ordered_by_push_not_by_when_their_jobs_ran(tmp_path):
    # broken on commits 10 and 11; the jobs of the fix (12) ran before those of 11, so in job
    # order 11 would look like an isolated failure between passes, on each of three configs
    h = History(["test_broken"])
    for i in range(30):
        for c in (LINUX, CLANG, WIN):
            h.run(i, c, {"test_broken": "fail"} if i in (10, 11) else None, later_hours=2.5 if i == 11 else 0.5)
    b = verdicts(tmp_path, h)["test_broken"]
    assert (b["verdict"], b["flips"], b["broken_from_sha"], b["broken_fixed_sha"]) == ("broken", 0, sha(10), sha(12))


def test_a_test_still_failing_at_the_end_of_the_window_has_no_fix(tmp_path):
    h = main_history(["test_broken"], 30, {i: {"test_broken": "fail"} for i in range(26, 30)})
    b = verdicts(tmp_path, h)["test_broken"]
    assert (b["verdict"], b["broken_from_sha"], b["broken_fixed_sha"]) == ("broken", sha(26), None)


def test_broken_for_a_while_and_flaky_on_another_platform_is_flaky(tmp_path):
    # the broken range gives no flake evidence, the rerun passes on Windows do
    h = History(["test_both"])
    for i in range(40):
        h.run(i, LINUX, {"test_both": "fail"} if 10 <= i < 14 else None)
        h.run(i, WIN, {"test_both": "flake"} if i in (3, 20, 33) else None)
    b = verdicts(tmp_path, h)["test_both"]
    assert (b["verdict"], b["flaky_platforms"], b["broken_ranges"], b["rerun_passes"]) == ("flaky", ["win"], 1, 3)


def test_failures_in_infra_jobs_are_not_counted(tmp_path):
    # three jobs died (cancelled); their failing tests say nothing; a re-attempt passes
    h = main_history(["test_victim"], 40, {})
    for i in (7, 19, 31):
        run = h.run(i, outcomes={"test_victim": "fail"}, conclusion="cancelled", later_hours=0.9)
        h.run(i, run_id=run, attempt=2, later_hours=0.95)
    v = verdicts(tmp_path, h)["test_victim"]
    assert (v["verdict"], v["failures"], v["infra_runs"], v["infra_failures"], v["flake_events"]) == \
        ("healthy", 0, 3, 3, 0)


def test_a_failure_that_was_never_rerun_where_reruns_happen_is_no_flake_evidence(tmp_path):
    # the config reruns failing tests (test_other's rerun passes), but test_crash's three
    # failures had no rerun: the process died under it; a re-attempt passes each time
    h = main_history(["test_crash", "test_other"], 40, {2: {"test_other": "flake"}})
    for i in (8, 21, 34):
        run = h.run(i, outcomes={"test_crash": "crash"}, later_hours=0.9)
        h.run(i, run_id=run, attempt=2, later_hours=0.95)
    c = verdicts(tmp_path, h)["test_crash"]
    assert (c["verdict"], c["failures"], c["same_commit_pairs"], c["flake_events"]) == ("healthy", 3, 3, 0)


def test_without_reruns_anywhere_plain_failures_are_evidence(tmp_path):
    # a CI without a rerun plugin: no rerun in the window, so a pass and a fail on one commit count
    h = main_history(["test_pair"], 40, {})
    for i in (8, 21, 34):
        run = h.run(i, outcomes={"test_pair": "crash"}, later_hours=0.9)
        h.run(i, run_id=run, attempt=2, later_hours=0.95)
    assert verdicts(tmp_path, h)["test_pair"]["verdict"] == "flaky"


def test_few_runs_or_too_little_evidence_is_insufficient_data(tmp_path):
    h = History(["test_rare", "test_once", "test_twice"])
    for i in range(40):
        outcomes = {} if i < MIN_RUNS - 5 else {"test_rare": "absent"}
        if i == 12:
            outcomes["test_once"] = "flake"
        if i in (3, 30):
            outcomes["test_twice"] = "flake"
        h.run(i, outcomes=outcomes)
    v = verdicts(tmp_path, h)
    assert (v["test_rare"]["verdict"], v["test_rare"]["runs"]) == ("insufficient_data", MIN_RUNS - 5)
    assert (v["test_once"]["verdict"], v["test_once"]["flake_events"]) == ("insufficient_data", 1)
    assert v["test_twice"]["flake_events"] == MIN_FLAKE_EVENTS - 1 and v["test_twice"]["verdict"] == "insufficient_data"


def test_consistent_failures_on_a_pull_request_are_neither_flaky_nor_broken(tmp_path):
    h = main_history(["test_pr"], 40, {})
    for k, i in enumerate((5, 6, 7)):  # three pushes to a PR that breaks the test, each re-attempted
        run = h.run(i, outcomes={"test_pr": "fail"}, branch="gh/someone/1/head", head=f"{k + 1:x}" * 40,
                    later_hours=0.9)
        h.run(i, outcomes={"test_pr": "fail"}, branch="gh/someone/1/head", head=f"{k + 1:x}" * 40,
              run_id=run, attempt=2, later_hours=0.95)
    p = verdicts(tmp_path, h)["test_pr"]
    assert (p["verdict"], p["failures"], p["flake_events"], p["broken_ranges"]) == ("healthy", 6, 0, 0)


def test_only_main_branch_flakes_are_main_evidence(tmp_path):
    """The verdict counts every branch (Dr. CI wants to know a test is flaky anywhere); disabling,
    reopening and widening read main's evidence only: its events, platforms and when it last
    flaked there. A pull request's flake or break is none of those."""
    h = main_history(["test_a", "test_ok"], 40, {5: {"test_a": "flake"}, 17: {"test_a": "fail"}})  # a flip at 17
    h.run(20, WIN, {"test_a": "flake"}, branch="gh/someone/1/head", head="a" * 40, later_hours=0.9)
    h.run(38, LINUX, {"test_a": "fail"}, branch="gh/someone/2/head", head="b" * 40, later_hours=0.9)
    v = verdicts(tmp_path, h)["test_a"]
    assert (v["verdict"], v["flake_events"], v["flaky_platforms"]) == ("flaky", 3, ["linux", "win"])
    assert (v["main_flake_events"], v["main_flaky_platforms"]) == (2, ["linux"])
    # the flip's job at commit 17, not the pull request's break at 38
    assert START + dt.timedelta(hours=17) < v["last_main_flake_at"] < START + dt.timedelta(hours=19)


def test_a_new_issue_reports_mains_evidence_and_other_branches_apart(tmp_path):
    """Main's evidence disables a test, so its new issue reports main's: pull requests' flakes are
    told apart, in a sentence, and their runs and platforms are not main's."""
    h = main_history(["test_a", "test_ok"], 40,
                     {5: {"test_a": "flake"}, 17: {"test_a": "fail"}, 26: {"test_a": "flake"}})
    h.run(20, WIN, {"test_a": "flake"}, branch="gh/someone/1/head", head="a" * 40, later_hours=0.9)
    h.run(30, LINUX, {"test_a": "flake"}, branch="gh/someone/2/head", head="b" * 40, later_hours=0.9)
    lake = Lake.at(str(tmp_path / "lake"))
    day = h.build(lake)[-1]
    build_flaky_tests(lake, day)
    key = "test_a (__main__.TestX)"
    evidence = gather_evidence(lake, day, [key], "pytorch/pytorch", "https://github.com")[key]
    body = render_body(evidence, ["linux"])
    # main: rerun passes at 5 and 26 and a flip at 17, in the 40 runs of linux on main
    assert "it had 3 flake event(s) in 40 run(s) on main, on linux." in body
    assert "| linux | 40 | 1 | 3 | 2 | 0 | 1 |" in body.splitlines()
    assert "| win |" not in body  # it ran on Windows only on a pull request
    assert "Pull requests and other branches had 2 more flake event(s) in the window" in body


def test_a_partition_written_before_main_evidence_was_counted_is_read_as_then(tmp_path):
    """A day's flaky_tests written by the code before main's evidence was counted has none of its
    columns: the disabled list and the issues' evidence still read it, NULL for what was not
    counted, and decide as they did then (on every branch's evidence)."""
    h = main_history(["test_a", "test_ok"], 40, {i: {"test_a": "flake"} for i in (5, 17, 30)})
    lake = Lake.at(str(tmp_path / "lake"))
    day = h.build(lake)[-1]
    build_flaky_tests(lake, day)
    con = connect()
    for table, added in (("flaky_tests", FLAKY_COLUMNS_ADDED), ("flaky_test_platforms", PLATFORM_COLUMNS_ADDED)):
        lake.register(con, table, [day], name="t")
        old = con.sql(f"SELECT * EXCLUDE ({', '.join(added)}) FROM t").to_arrow_table()
        lake.write(table, day, old.drop_columns([c for c in old.column_names if c == "day"]))
    con.close()
    rows = flaky_rows(lake, day)
    assert [(r["name"], r["main_flake_events"]) for r in rows if r["name"] == "test_a"] == [("test_a", None)]
    assert decide_disabled(rows, {}).disabled["test_a (__main__.TestX)"][2] == ["linux"]
    evidence = gather_evidence(lake, day, ["test_a (__main__.TestX)"], "pytorch/pytorch", "https://github.com")
    assert evidence["test_a (__main__.TestX)"].flake_events == 3
    assert evidence["test_a (__main__.TestX)"].last_main_flake_at is None


def test_evidence_older_than_the_window_is_not_read(tmp_path):
    # 3 days of history, 24 commits a day; the rerun passes are all on the first day
    h = main_history(["test_old"], 72, {i: {"test_old": "flake"} for i in (2, 9, 15)})
    assert verdicts(tmp_path, h, window_days=3)["test_old"]["verdict"] == "flaky"
    assert verdicts(tmp_path, h, window_days=2)["test_old"]["verdict"] == "healthy"


def test_platform_exclusive_failing_commits(tmp_path):
    h = History(["test_win", "test_both"])
    for i in range(30):
        h.run(i, LINUX, {"test_both": "fail"} if i in (4, 9) else None)
        h.run(i, WIN, {"test_win": "fail", "test_both": "fail"} if i in (4, 9, 14) else None)
    lake = Lake.at(str(tmp_path / "lake"))
    days = h.build(lake)
    build_flaky_tests(lake, days[-1])
    con = connect()
    lake.register(con, "flaky_test_platforms", [days[-1]], name="p")
    got = {(n, p): (f, s, x) for n, p, f, s, x in con.execute(
        "SELECT name, platform, failures, failing_shas, exclusive_failing_shas FROM p").fetchall()}
    assert got[("test_win", "win")] == (3, 3, 3)
    assert got[("test_both", "win")] == (3, 3, 1) and got[("test_both", "linux")] == (2, 2, 0)


def test_assets_materialize_and_publish(tmp_path):
    h = main_history(["test_flaky", "test_ok"], 40, {i: {"test_flaky": "flake"} for i in (5, 17, 30)},
                     configs=(LINUX, WIN))
    days = h.build(Lake.at(str(tmp_path / "lake")))
    result = dg.materialize(FLAKINESS_ASSETS, partition_key=days[-1], resources={
        "lake": LakeResource(uri=str(tmp_path / "lake")), "outputs": OutputsResource(uri=str(tmp_path / "out")),
        "github": GitHubResource()})  # no credentials: the DISABLED-issue loop is a dry run
    assert result.success
    checks = {(c.asset_key.to_user_string(), c.check_name): c.passed for c in result.get_asset_check_evaluations()}
    assert set(checks) == {("flaky_tests", "unique_file_classname_name"),
                           ("disabled_issues", "every_disabled_test_has_an_issue"),
                           ("disabled_tests", "read_from_the_open_issues"),
                           ("unstable_jobs", "read_from_the_open_issues")} and all(checks.values())
    meta = {e.asset_key.to_user_string(): e.materialization.metadata for e in result.get_asset_materialization_events()}
    assert meta["flaky_tests"]["verdict_flaky"].value == 1 and meta["flaky_tests"]["verdict_healthy"].value == 1
    assert meta["disabled_tests"]["disabled"].value == 1
    assert (tmp_path / "out" / "stats" / "disabled-tests-condensed.json").exists()
    assert sorted(p.name for p in (tmp_path / "out" / "smoke-tests").iterdir()) == ["linux.json", "win.json"]
    # an intra-day refresh with no input changed leaves flaky_tests as written, and says so
    again = dg.materialize(FLAKINESS_ASSETS[:3], partition_key=days[-1], tags={REFRESH_TAG: REFRESH_VALUE}, resources={
        "lake": LakeResource(uri=str(tmp_path / "lake")), "outputs": OutputsResource(uri=str(tmp_path / "out")),
        "github": GitHubResource()})
    meta = {e.asset_key.to_user_string(): e.materialization.metadata for e in again.get_asset_materialization_events()}
    assert again.success and meta["flaky_tests"]["unchanged_inputs"].value is True
    assert meta["flaky_tests"]["verdict_flaky"].value == 1 and meta["disabled_issues"]["unchanged_since"].value


def test_in_a_dry_run_the_filing_check_says_no_issue_was_filed(tmp_path):
    """A dry run files nothing: the filing check passes (nothing for a human to do), but its result
    says it was a dry run and how many tests got no issue, instead of "every test was found or filed"."""
    h = main_history(["test_flaky", "test_ok"], 40, {i: {"test_flaky": "flake"} for i in (5, 17, 30)})
    days = h.build(Lake.at(str(tmp_path / "lake")))
    result = dg.materialize(FLAKINESS_ASSETS[:3], partition_key=days[-1], resources={
        "lake": LakeResource(uri=str(tmp_path / "lake")), "outputs": OutputsResource(uri=str(tmp_path / "out")),
        "github": GitHubResource()})  # no credentials: a dry run
    check = next(c for c in result.get_asset_check_evaluations() if c.check_name == "every_disabled_test_has_an_issue")
    assert check.passed and check.metadata["dry_run"].value is True
    assert check.metadata["tests_without_issue"].value == 1
    assert check.description.startswith("Dry run") and "no DISABLED issue was searched or filed" in check.description


def test_failures_in_jobs_whose_webhooks_never_came_count_on_an_unknown_platform(tmp_path):
    """Such a job has no platform (nor build environment): its rows are still evidence, under
    the platform "unknown", and every output that lists platforms is built."""
    h = main_history(["test_flaky", "test_ok"], 40, {i: {"test_flaky": "flake"} for i in (5, 17, 30)})
    for i in (8, 21, 34):
        h.run(i, LINUX, {"test_flaky": "flake"}, webhook=False, later_hours=0.7)
    days = h.build(Lake.at(str(tmp_path / "lake")))
    v = verdicts(tmp_path, h)["test_flaky"]
    assert (v["verdict"], v["flaky_platforms"], v["platforms"], v["rerun_passes"]) == \
        ("flaky", ["linux", "unknown"], ["linux", "unknown"], 6)
    result = dg.materialize(FLAKINESS_ASSETS, partition_key=days[-1], resources={
        "lake": LakeResource(uri=str(tmp_path / "lake")), "outputs": OutputsResource(uri=str(tmp_path / "out")),
        "github": GitHubResource()})
    assert result.success
    # PyTorch's runner knows no platform "unknown": the test is disabled where it is known to flake
    condensed = orjson.loads((tmp_path / "out" / "stats" / "disabled-tests-condensed.json").read_bytes())
    assert [platforms for _, _, platforms in condensed.values()] == [["linux"]]
    assert sorted(p.name for p in (tmp_path / "out" / "smoke-tests").iterdir()) == ["linux.json"]


def _table(lake: Lake, table: str, day: str) -> list[tuple]:
    con = connect()
    lake.register(con, table, [day], name="t")
    rows = sorted(con.execute("SELECT * EXCLUDE (day) FROM t").fetchall(), key=repr)
    con.close()
    return rows


def test_a_refresh_leaves_the_verdicts_as_they_are_only_while_no_input_changed(tmp_path, monkeypatch):
    h = main_history(["test_flaky", "test_ok"], 30, {5: {"test_flaky": "flake"}, 17: {"test_flaky": "flake"}})
    lake = Lake.at(str(tmp_path / "lake"))
    days = h.build(lake)
    day = days[-1]
    first = build_flaky_tests(lake, day)
    assert not first.unchanged
    again = build_flaky_tests(lake, day, skip_if_unchanged=True)
    assert again.unchanged and (again.tests, again.verdicts) == (first.tests, first.verdicts)
    # a non-refresh run recomputes whatever the record says
    assert not build_flaky_tests(lake, day).unchanged
    # new results move the day's aggregates: the refresh recomputes, and equals a run from scratch
    h2 = main_history(["test_flaky", "test_ok"], 30, {5: {"test_flaky": "flake"}, 17: {"test_flaky": "flake"},
                                                    25: {"test_flaky": "flake"}})
    h2.build(lake)
    refreshed = build_flaky_tests(lake, day, skip_if_unchanged=True)
    assert not refreshed.unchanged and refreshed.verdicts["flaky"] == 1
    got = {t: _table(lake, t, day) for t in ("flaky_tests", "flaky_test_platforms")}
    scratch = Lake.at(str(tmp_path / "scratch"))
    h2.build(scratch)
    build_flaky_tests(scratch, day)
    assert got == {t: _table(scratch, t, day) for t in ("flaky_tests", "flaky_test_platforms")}
    # a run killed between the tables and the record leaves no record: the next refresh recomputes
    monkeypatch.setattr("torchci_assets.derived.flakiness.flaky.remember", lambda *a: None)
    build_flaky_tests(lake, day)
    assert not build_flaky_tests(lake, day, skip_if_unchanged=True).unchanged
