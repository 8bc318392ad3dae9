"""test_results (job join with late arrivals, branch class, infra suspects) and the daily aggregates."""

import datetime as dt
import math
import re
from pathlib import Path

import dagster as dg
import pyarrow as pa
from conftest import envelope, write_lines

import torchci_assets.derived.results.assets as assets
from resources.configured import LakeResource
from resources.lake import Lake, connect
from resources.storage import Store
from torchci_assets.derived.results.stats import (
    build_test_daily_stats,
    build_test_time_daily,
    build_test_results,
    define_seconds_sum,
)
from torchci_assets.ingest.junit import TEST_RUN_SCHEMA
from torchci_assets.ingest.webhooks import ingest_webhook_day

D = "2026-11-10"
REPO = {"full_name": "pytorch/pytorch"}
LINUX = "linux-jammy-py3.10-gcc11"


def day(offset: int) -> str:
    return (dt.date.fromisoformat(D) + dt.timedelta(days=offset)).isoformat()


def job_payload(job_id, run_id, sha, *, status="completed", conclusion="success", branch="main", attempt=1,
                env=LINUX, config="default", shard=1, shards=1, runner="linux.4xlarge"):
    return {"action": status, "repository": REPO, "workflow_job": {
        "id": job_id, "run_id": run_id, "run_attempt": attempt, "head_sha": sha, "head_branch": branch,
        "name": f"{env} / test ({config}, {shard}, {shards}, {runner})", "status": status,
        "conclusion": conclusion if status == "completed" else None, "workflow_name": "pull",
        "created_at": "2026-11-09T23:00:00Z", "started_at": "2026-11-09T23:10:00Z",
        "completed_at": "2026-11-10T00:40:00Z" if status == "completed" else None,
        "labels": [runner], "runner_name": "i-0abc"}}


def run_payload(run_id, sha, event, branch="main"):
    return {"action": "completed", "repository": REPO, "workflow_run": {
        "id": run_id, "run_attempt": 1, "name": "pull", "event": event, "head_sha": sha, "head_branch": branch,
        "status": "completed", "conclusion": "success", "created_at": "2026-11-10T00:00:00Z",
        "updated_at": "2026-11-10T01:00:00Z"}}


def webhooks(tmp_path, on_day: str, payloads: list[tuple[str, dict]]) -> None:
    """Archive the payloads as one webhook file of `on_day` and ingest that day."""
    lines = [envelope(event, f"{on_day}-{i}", p, f"{on_day}T12:00:{i % 60:02d}.000Z")
             for i, (event, p) in enumerate(payloads)]
    write_lines(tmp_path / "archive" / "webhooks" / f"day={on_day}" / "hooks.jsonl", lines)
    report = ingest_webhook_day(Store(str(tmp_path / "archive")), lake(tmp_path), on_day)
    assert report.rejects == []


def lake(tmp_path) -> Lake:
    return Lake.at(str(tmp_path / "lake"))


def run_row(job_id, run_id, name, status="passed", *, attempt=1, time=1.0, reruns=0, message=None,
             file="test_ops.py", classname="TestOps", invoking=None):
    return {"workflow_id": run_id, "workflow_run_attempt": attempt, "job_id": job_id,
            "invoking_file": invoking or file.removesuffix(".py").replace("/", "."), "file": file,
            "classname": classname, "name": name, "time": time, "status": status, "rerun_count": reruns,
            "message": message if message or status in ("passed", "skipped") else f"{name} failed"}


def write_test_run(tmp_path, on_day: str, rows: list[dict]) -> None:
    lake(tmp_path).write("test_run", on_day, pa.Table.from_pylist(rows, schema=TEST_RUN_SCHEMA))


def query(tmp_path, table: str, sql: str, days=(D,)) -> list[dict]:
    con = connect()
    lake(tmp_path).register(con, table, list(days), name="t")
    cur = con.execute(sql)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


# ---- the job join ----------------------------------------------------------------------------

def test_late_and_split_arrivals_within_the_window_find_their_job(tmp_path):
    webhooks(tmp_path, day(-1), [
        ("workflow_job", job_payload(1, 100, "a" * 40, status="queued")),
        ("workflow_job", job_payload(1, 100, "a" * 40)),                      # completed before midnight
        ("workflow_job", job_payload(2, 100, "a" * 40, status="in_progress")),
    ])
    webhooks(tmp_path, day(-3), [("workflow_job", job_payload(3, 100, "a" * 40))])  # beyond the look-back
    webhooks(tmp_path, day(0), [
        ("workflow_job", job_payload(2, 100, "a" * 40, conclusion="failure")),  # job 2 completes on D
    ])
    webhooks(tmp_path, day(1), [("workflow_job", job_payload(4, 100, "a" * 40, env="win-vs2022-cpu-py3"))])
    write_test_run(tmp_path, D, [run_row(1, 100, "test_a"), run_row(2, 100, "test_b", "failed"),
                            run_row(3, 100, "test_c"), run_row(4, 100, "test_d")])

    report = build_test_results(lake(tmp_path), D)

    rows = {r["name"]: r for r in query(tmp_path, "test_results", "SELECT * FROM t")}
    a = rows["test_a"]
    assert (a["job_found"], a["head_sha"], a["build_env"], a["branch_class"], a["job_conclusion"]) == \
        (True, "a" * 40, LINUX, "main", "success")
    # job 2: in_progress on D-1, completed on D: the highest state wins, whichever day
    assert (rows["test_b"]["job_conclusion"], rows["test_b"]["shard"]) == ("failure", 1)
    # job 4's webhooks came the day after its report: found through the look-ahead
    assert (rows["test_d"]["job_found"], rows["test_d"]["platform"]) == (True, "win")
    assert (rows["test_c"]["job_found"], rows["test_c"]["branch_class"], rows["test_c"]["build_env"]) == \
        (False, "unknown", None)
    assert rows["test_a"]["invoking_file"] == "test_ops"
    assert (report.rows, report.jobs_not_found, report.rows_without_job, report.job_partitions) == (4, 1, 1, 3)


def test_a_fork_pull_request_from_a_branch_named_main_is_not_main(tmp_path):
    webhooks(tmp_path, D, [
        ("workflow_job", job_payload(1, 100, "a" * 40)), ("workflow_run", run_payload(100, "a" * 40, "push")),
        ("workflow_job", job_payload(2, 200, "b" * 40)), ("workflow_run", run_payload(200, "b" * 40, "pull_request")),
        ("workflow_job", job_payload(3, 300, "c" * 40, branch="gh/someone/1/head")),
    ])
    write_test_run(tmp_path, D, [run_row(1, 100, "t"), run_row(2, 200, "t"), run_row(3, 300, "t")])
    build_test_results(lake(tmp_path), D)
    got = {r["job_id"]: r["branch_class"] for r in query(tmp_path, "test_results", "SELECT * FROM t")}
    assert got == {1: "main", 2: "other", 3: "other"}


# ---- infra suspects ---------------------------------------------------------------------------

def test_infra_suspects_follow_the_documented_rule(tmp_path):
    jobs = {
        1: "cancelled",  # job-died (a timeout is reported as cancelled)
        2: "failure",    # failed-outside-tests: runner lost, no test failed
        3: "failure",    # mass-failure: 12 of 20 tests failed, messages all different
        4: "failure",    # shared-message: 10 of 100 tests hit the same device error
        5: "failure",    # a real failure: 3 of 20 tests, not infra
        6: "failure",    # 9 of 100 with one message: below the threshold, not infra
    }
    webhooks(tmp_path, D, [("workflow_job", job_payload(j, 100 + j, "a" * 40, conclusion=c)) for j, c in jobs.items()])
    ima = "RuntimeError: CUDA error: an illegal memory access was encountered"
    rows = [run_row(1, 101, f"t{i}") for i in range(5)]
    rows += [run_row(2, 102, f"t{i}") for i in range(5)]
    rows += [run_row(3, 103, f"t{i}", "failed" if i < 12 else "passed") for i in range(20)]
    rows += [run_row(4, 104, f"t{i}", ("failed" if i == 90 else "error") if i >= 90 else "passed",
                      message=ima if i >= 90 else None) for i in range(100)]
    rows += [run_row(5, 105, f"t{i}", "failed" if i < 3 else "passed") for i in range(20)]
    rows += [run_row(6, 106, f"t{i}", "failed" if i >= 91 else "passed", message=ima if i >= 91 else None)
             for i in range(100)]
    write_test_run(tmp_path, D, rows)

    report = build_test_results(lake(tmp_path), D)

    got = {r["job_id"]: r["infra_reason"] for r in query(tmp_path, "test_jobs", "SELECT * FROM t")}
    assert got == {1: "job-died", 2: "failed-outside-tests", 3: "mass-failure", 4: "shared-message",
                   5: None, 6: None}
    flags = query(tmp_path, "test_results", "SELECT job_id, bool_and(infra_suspect) AS a, bool_or(infra_suspect) AS o "
                                            "FROM t GROUP BY ALL")
    assert {r["job_id"]: r["a"] for r in flags} == {1: True, 2: True, 3: True, 4: True, 5: False, 6: False}
    assert all(r["a"] == r["o"] for r in flags)  # the flag is per job
    assert report.infra_jobs == {"job-died": 1, "failed-outside-tests": 1, "mass-failure": 1, "shared-message": 1}


# ---- daily aggregates on a hand-made history -------------------------------------------------

def history(tmp_path):
    """Day D: commit A on main (2 shards, run re-attempted), commit B on main, a PR commit, an infra job.

    test_flaky: A attempt 1 fails, A attempt 2 passes (same-commit pair), passes on B after a
    rerun, fails on the PR; test_steady passes everywhere, 2 s a clean pass, 5 s after a rerun.
    """
    A, B, P = "a" * 40, "b" * 40, "p" * 40
    webhooks(tmp_path, D, [
        ("workflow_job", job_payload(11, 100, A, conclusion="failure", shard=1, shards=2)),
        ("workflow_job", job_payload(12, 100, A, shard=2, shards=2)),
        ("workflow_job", job_payload(21, 100, A, attempt=2, shard=1, shards=2)),
        ("workflow_job", job_payload(31, 300, B, shard=1, shards=2)),
        ("workflow_job", job_payload(32, 300, B, shard=2, shards=2)),
        ("workflow_job", job_payload(41, 400, P, branch="gh/x/1/head", conclusion="failure")),
        ("workflow_job", job_payload(51, 500, B, conclusion="cancelled", env="linux-jammy-py3.10-clang18")),
    ])
    write_test_run(tmp_path, D, [
        run_row(11, 100, "test_flaky", "failed", time=3.0, message="AssertionError: boom"),
        run_row(11, 100, "test_steady", time=2.0),
        run_row(12, 100, "test_other", time=4.0, file="nn/test_nn.py", classname="TestNN"),
        run_row(21, 100, "test_flaky", attempt=2, time=1.5),
        run_row(21, 100, "test_steady", attempt=2, time=2.0),
        run_row(31, 300, "test_flaky", time=2.5, reruns=1),
        run_row(31, 300, "test_steady", time=5.0, reruns=1),
        run_row(32, 300, "test_other", time=6.0, file="nn/test_nn.py", classname="TestNN"),
        run_row(41, 400, "test_flaky", "failed", time=1.0),
        run_row(41, 400, "test_steady", time=2.0),
        run_row(51, 500, "test_flaky", "failed", time=9.0),  # in a job that died: infra, not a failure
    ])
    return A, B, P


def test_daily_stats_numbers(tmp_path):
    A, B, P = history(tmp_path)
    build_test_results(lake(tmp_path), D)
    rows = build_test_daily_stats(lake(tmp_path), D).rows
    rows.update(build_test_time_daily(lake(tmp_path), D))

    stats = {(r["name"], r["build_env"], r["branch_class"]): r
             for r in query(tmp_path, "test_daily_stats", "SELECT * FROM t")}
    flaky = stats[("test_flaky", LINUX, "main")]
    assert {k: flaky[k] for k in ("runs", "passed", "failed", "errors", "skipped", "rerun_count", "rerun_passed",
                                  "clean_passes", "pass_time", "shas", "failing_shas", "jobs", "infra_runs")} == {
        "runs": 3, "passed": 2, "failed": 1, "errors": 0, "skipped": 0, "rerun_count": 1, "rerun_passed": 1,
        "clean_passes": 1, "pass_time": 1.5, "shas": 2, "failing_shas": 1, "jobs": 3, "infra_runs": 0}
    steady = stats[("test_steady", LINUX, "main")]
    assert (steady["runs"], steady["clean_passes"], steady["pass_time"], steady["avg_pass_time"],
            steady["max_pass_time"]) == (3, 2, 4.0, 2.0, 2.0)
    pr = stats[("test_flaky", LINUX, "other")]
    assert (pr["failed"], pr["platform"]) == (1, "linux")
    died = stats[("test_flaky", "linux-jammy-py3.10-clang18", "main")]
    assert (died["runs"], died["failed"], died["infra_runs"], died["infra_failures"]) == (0, 0, 1, 1)
    assert rows["test_daily_stats"] == len(stats) == 6

    shas = {(r["name"], r["head_sha"]): r for r in query(tmp_path, "test_sha_outcomes", "SELECT * FROM t")}
    # only where something failed or was rerun; the died job contributes nothing
    assert set(shas) == {("test_flaky", A), ("test_flaky", B), ("test_flaky", P), ("test_steady", B)}
    pair = shas[("test_flaky", A)]
    assert (pair["runs"], pair["passed"], pair["failed"], pair["failing_job_ids"]) == (2, 1, 1, [11])
    assert (shas[("test_flaky", B)]["rerun_passed"], shas[("test_flaky", B)]["failing_job_ids"]) == (1, [31])

    times = {(r["file"], r["classname"]): r
             for r in query(tmp_path, "test_time_daily", "SELECT * FROM t WHERE file IS NOT NULL")}
    # run 100 attempt 1 had a failed shard job: test_ops is out; attempt 2 counts. test_nn ran
    # in successful jobs of runs 100 and 300. The PR and the infra job never count.
    assert {k: (r["build_env"], r["runs"], r["time"]) for k, r in times.items()} == {
        ("test_ops", None): (LINUX, 2, 3.5 + 7.5),
        ("test_ops", "TestOps"): (LINUX, 2, 3.5 + 7.5),
        ("nn/test_nn", None): (LINUX, 2, 10.0),
        ("nn/test_nn", "TestNN"): (LINUX, 2, 10.0),
    }
    # and which runs: their reports on another day (a re-run after midnight) are not counted again
    markers = query(tmp_path, "test_time_daily", "SELECT workflow_id, runs FROM t WHERE file IS NULL")
    assert sorted((r["workflow_id"], r["runs"]) for r in markers) == [(100, 0), (300, 0)]
    # the same runs per commit: run 100 (attempt 2) is commit A, run 300 commit B
    per_sha = {(r["file"], r["head_sha"]): (r["runs"], r["time"])
               for r in query(tmp_path, "test_time_sha_daily", "SELECT * FROM t")}
    assert per_sha == {("test_ops", A): (1, 3.5), ("test_ops", B): (1, 7.5),
                       ("nn/test_nn", A): (1, 4.0), ("nn/test_nn", B): (1, 6.0)}
    assert rows["test_time_sha_daily"] == 4


def test_assets_materialize_with_checks(tmp_path):
    history(tmp_path)
    result = dg.materialize([assets.test_results_assets, assets.test_daily_stats_assets], partition_key=D,
                            resources={"lake": LakeResource(uri=str(tmp_path / "lake"))})
    assert result.success
    checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    assert checks == {"rows_have_their_job": True, "every_test_row_counted_once": True}
    meta = {e.asset_key.to_user_string(): e.materialization.metadata for e in result.get_asset_materialization_events()}
    assert meta["test_results"]["rows"].value == 11
    assert meta["test_jobs"]["infra_reasons"].value == {"job-died": 1}


def test_results_without_their_job_fail_the_check(tmp_path):
    write_test_run(tmp_path, D, [run_row(1, 100, "t")])
    result = dg.materialize([assets.test_results_assets], partition_key=D,
                            resources={"lake": LakeResource(uri=str(tmp_path / "lake"))})
    [check] = result.get_asset_check_evaluations()
    assert (check.check_name, check.passed) == ("rows_have_their_job", False)


def test_sha_outcomes_keep_exactly_the_groups_with_a_failure_or_a_rerun(tmp_path):
    """The aggregate only visits groups with a failure or a rerun (a speed-up); it must equal the
    plain definition, a GROUP BY over every row then HAVING, on rows with nulls in the grouping
    (a job name that is not PyTorch's has no build_env, test_config or platform)."""
    con = connect()
    con.execute("""
        CREATE TEMP TABLE tr AS SELECT
            i AS workflow_id, 1 AS workflow_run_attempt, i % 97 AS job_id, 'test_ops' AS invoking_file,
            'test_ops.py' AS file, 'TestOps' AS classname, 'test_' || (i % 13) AS name, 1.0 AS time,
            CASE WHEN hash(i, 's') % 11 = 0 THEN 'failed' WHEN hash(i, 's') % 17 = 0 THEN 'error'
                 WHEN hash(i, 's') % 7 = 0 THEN 'skipped' ELSE 'passed' END AS status,
            CASE WHEN hash(i, 'r') % 9 = 0 THEN 1 ELSE 0 END AS rerun_count, NULL::VARCHAR AS message,
            CASE WHEN i % 5 = 0 THEN NULL ELSE 'sha' || (i % 4) END AS head_sha, 'main' AS head_branch,
            CASE WHEN i % 3 = 0 THEN 'main' ELSE 'other' END AS branch_class,
            CASE WHEN i % 6 = 0 THEN NULL ELSE 'env' || (i % 2) END AS build_env,
            CASE WHEN i % 6 = 0 THEN NULL ELSE 'default' END AS test_config, 1 AS shard, 2 AS num_shards,
            CASE WHEN i % 6 = 0 THEN NULL ELSE 'linux' END AS platform, 'job' AS job_name,
            'success' AS job_conclusion, TIMESTAMPTZ '2026-11-20 10:00:00+00' + to_minutes(i::BIGINT) AS job_completed_at,
            true AS job_found, hash(i, 'i') % 23 = 0 AS infra_suspect
        FROM range(3000) r(i)""")
    lake(tmp_path).write("test_results", D, con.sql("SELECT * FROM tr").to_arrow_table())
    build_test_daily_stats(lake(tmp_path), D)
    expected = con.execute("""
        SELECT file, classname, name, build_env, test_config, platform, branch_class, head_sha, count(*) AS runs,
               count(*) FILTER (WHERE status = 'failed') AS failed, sum(rerun_count)::BIGINT AS rerun_count,
               count(DISTINCT job_id) AS jobs,
               list(DISTINCT job_id ORDER BY job_id) FILTER (WHERE status IN ('failed', 'error') OR rerun_count > 0)
        FROM tr WHERE NOT infra_suspect AND head_sha IS NOT NULL
        GROUP BY ALL HAVING count(*) FILTER (WHERE status IN ('failed', 'error')) > 0 OR sum(rerun_count) > 0
        ORDER BY ALL""").fetchall()
    got = [tuple(r.values()) for r in query(tmp_path, "test_sha_outcomes", """
        SELECT file, classname, name, build_env, test_config, platform, branch_class, head_sha, runs, failed,
               rerun_count, jobs, failing_job_ids FROM t ORDER BY ALL""")]
    assert len(expected) > 20 and any(r[3] is None for r in expected)
    assert got == expected


# ---- seconds_sum: the lake's one way of summing times -----------------------------------------

SQL_ROOT = Path(__file__).resolve().parent.parent / "torchci_assets"
MACRO_FILE = SQL_ROOT / "derived" / "results" / "sql" / "seconds_sum.sql"
# A time turned into microseconds by hand (`* 1e6`, `* 1000000`), or seconds summed as floats
# (`sum(time)`, `sum(r.pass_time)`).
_BY_HAND = re.compile(r"\*\s*(1e6|1000000|1_000_000)\b|(?<!\w)sum\(\s*(\w+\.)?\w*time\s*\)")
# test_run's fold adds the entries one job's reports hold for one test (one or two, as reported):
# the raw times stay as the reports give them, not rounded to the microsecond.
_RAW_TIMES = SQL_ROOT / "ingest" / "sql" / "test_run_fold.sql"


def test_no_sql_file_sums_seconds_but_through_seconds_sum():
    """Every query sums seconds through seconds_sum: a float sum's last bits follow the order
    DuckDB's threads add in (a job's time in test_jobs differed between two runs of the same day),
    and a copy that rounds otherwise would make one table's day differ from another's."""
    files = [p for p in sorted(SQL_ROOT.rglob("*.sql")) if p not in (MACRO_FILE, _RAW_TIMES)]
    by_hand = [f"{p.relative_to(SQL_ROOT)}:{n}" for p in files
               for n, line in enumerate(p.read_text().splitlines(), 1) if _BY_HAND.search(line.split("--")[0])]
    assert by_hand == []


def _seconds_sums(con, sql: str, times: list[float]) -> dict[str, float]:
    """`sql` over the times in their order and reversed (one thread, so a sum adds them in that order)."""
    out = {}
    for order, rows in (("forward", times), ("reversed", times[::-1])):
        con.register("t", pa.table({"time": rows, "keep": [round(r * 10) % 2 == 0 for r in rows]}))
        (out[order],), = con.execute(sql).fetchall()
    return out


def test_seconds_sum_adds_whole_microseconds_whatever_their_order():
    """A float sum of the same times in two orders differs in its last bits; seconds_sum's does not,
    and it is the sum of each time rounded to the microsecond (half away from zero, as DuckDB rounds)."""
    times = [0.1, 0.2, 0.3, 123456.789, 1e-6, 7.7, 0.0005004, 2.0000015]
    con = connect()
    con.execute("SET threads = 1")
    define_seconds_sum(con)
    assert len(set(_seconds_sums(con, "SELECT sum(time) FROM t", times).values())) == 2
    whole = _seconds_sums(con, "SELECT seconds_sum(time) FROM t", times)
    assert whole["forward"] == whole["reversed"] == sum(math.floor(t * 1e6 + 0.5) for t in times) / 1e6
    kept = _seconds_sums(con, "SELECT seconds_sum(time, keep) FROM t", times)
    expected = sum(math.floor(t * 1e6 + 0.5) for t in times if round(t * 10) % 2 == 0) / 1e6
    assert kept["forward"] == kept["reversed"] == expected != whole["forward"]
    assert con.execute("SELECT seconds_sum(time), seconds_sum(time, false) FROM t WHERE false").fetchall() == [(None, None)]
