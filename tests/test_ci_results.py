"""ci-results archive -> `ci_result` / `ci_callback_minutes`: identity, latest state, the 6 h rule, rejects."""

import datetime as dt
import random

import pyarrow.parquet as pq
import pytest

from conftest import write_lines
from resources.lake import Lake, connect
from resources.sql import compose, relation
from resources.storage import Store
from torchci_assets.ingest.ci_results import CI_RESULT_SCHEMA, _stage_view, ingest_ci_results_day, judgement

DAY = "2026-11-01"
REPO = "acme-ai/torch-npu"


def record(repo=REPO, delivery="d1", run_id=7001, job="npu-ci / test (default, 1, 2)", status="completed",
           conclusion="success", started="2026-11-01T10:00:00Z", completed="2026-11-01T10:30:00Z",
           tests=None, queue=42.0, attempt=1, received=None, **untrusted_extra) -> dict:
    workflow = {"status": status, "conclusion": conclusion, "name": "npu-upstream-ci", "run_id": run_id,
                "job_name": job, "started_at": started, "completed_at": completed,
                "test_results": {"passed": 100, "failed": 0, "skipped": 3} if tests is None else tests}
    if attempt is not None:
        workflow["run_attempt"] = attempt
    rec = {
        "trusted": {"verified_repo": repo, "downstream_repo_level": "L2",
                    "ci_metrics": {"queue_time": queue, "execution_time": 1800.0}},
        "untrusted": {"callback_payload": {"event_type": "pytorch-upstream-ci", "delivery_id": delivery,
                                           "payload": {"head_sha": "a" * 40, **untrusted_extra},
                                           "workflow": workflow}},
    }
    if received:
        rec["received_at"] = received
    return rec


def ingest(tmp_path, lines, day=DAY, name="relay-1.jsonl", now_ms=None):
    write_lines(tmp_path / "archive" / "ci-results" / f"day={day}" / name, lines)
    return ingest_ci_results_day(Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "lake")), day, now_ms)


def rows(tmp_path, table="ci_result", day=DAY, order="repo, delivery_id, run_attempt, job_name"):
    con = connect()
    try:
        assert Lake.at(str(tmp_path / "lake")).register(con, table, [day], name="t")
        cur = con.execute(f"SELECT * EXCLUDE (day) FROM t ORDER BY {order}")
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r)) for r in cur.fetchall()]
    finally:
        con.close()


def utc(text):
    return dt.datetime.fromisoformat(text).replace(tzinfo=dt.timezone.utc)


def test_identity_is_the_verified_repo_never_the_untrusted_claim(tmp_path):
    lying = record(repo="evil-corp/torch-xpu", repository="acme-ai/torch-npu", full_name="acme-ai/torch-npu")
    lying["untrusted"]["callback_payload"]["workflow"]["repository"] = {"full_name": REPO}
    honest = record()
    ingest(tmp_path, [lying, honest])
    got = rows(tmp_path)
    # same delivery, run and job names, yet two rows: each belongs to the repo the relay verified
    assert [r["repo"] for r in got] == [REPO, "evil-corp/torch-xpu"]
    assert all(r["level"] == "L2" and r["queue_s"] == 42.0 for r in got)


def test_latest_state_wins_over_arrival_order_and_duplicates_are_counted(tmp_path):
    done = record(status="completed", started=None)  # the completed callback left out started_at
    running = record(status="in_progress", conclusion=None, completed=None, tests={}, queue=None)
    running["trusted"]["ci_metrics"]["queue_time"] = 55.5
    report = ingest(tmp_path, [done, running, done, done])
    got = rows(tmp_path)
    assert len(got) == 1 and report.callbacks == 4
    row = got[0]
    assert row["status"] == "completed" and row["conclusion"] == "success" and row["callbacks"] == 4
    assert row["started_at"] == utc("2026-11-01T10:00:00")  # filled from the in_progress callback
    assert row["queue_s"] == 42.0 and row["passed"] == 100 and row["failure_kind"] == "none"


def test_of_two_completed_callbacks_the_later_one_is_kept(tmp_path):
    first = record(conclusion="failure", tests={"passed": 90, "failed": 10, "skipped": 0},
                   received="2026-11-01T10:31:00Z")
    resent = record(conclusion="success", received="2026-11-01T10:45:00Z")
    ingest(tmp_path, [resent, first])  # file order disagrees with receive order
    (row,) = rows(tmp_path)
    assert row["conclusion"] == "success" and row["received_at"] == utc("2026-11-01T10:45:00")
    assert row["callback_at"] == utc("2026-11-01T10:45:00")


def test_run_attempts_and_deliveries_are_separate_rows_and_missing_attempt_means_first(tmp_path):
    ingest(tmp_path, [record(attempt=None), record(attempt=2), record(delivery="d2")])
    got = rows(tmp_path)
    assert [(r["delivery_id"], r["run_attempt"]) for r in got] == [("d1", 1), ("d1", 2), ("d2", 1)]


def test_failure_kinds(tmp_path):
    no_tests = {"passed": 0, "failed": 0, "skipped": 0}
    ingest(tmp_path, [
        record(job="a-success"),
        record(job="b-test-failure", conclusion="failure", tests={"passed": 95, "failed": 5, "skipped": 0}),
        record(job="c-no-tests", conclusion="failure", tests=no_tests),
        record(job="d-no-test-results", conclusion="failure", tests={}),
        record(job="e-timeout", conclusion="timed_out", tests={"passed": 40, "failed": 0, "skipped": 0}),
        record(job="f-success-without-tests", tests=no_tests),
    ])
    kinds = {r["job_name"]: r["failure_kind"] for r in rows(tmp_path)}
    assert kinds == {"a-success": "none", "b-test-failure": "test", "c-no-tests": "infrastructure",
                     "d-no-test-results": "infrastructure", "e-timeout": "infrastructure",
                     "f-success-without-tests": "none"}


def test_six_hour_rule_within_the_day(tmp_path):
    running = dict(status="in_progress", conclusion=None, completed=None, tests={})
    ingest(tmp_path, [
        # no completion by the end of the day: lost when started at least 6 h before midnight
        record(job="run-17:59:59", started="2026-11-01T17:59:59Z", **running),
        record(job="run-18:00:00", started="2026-11-01T18:00:00Z", **running),
        record(job="run-18:00:01", started="2026-11-01T18:00:01Z", **running),
        # completed: within 6 h is judged on its conclusion, later is an infrastructure failure
        record(job="done-6h", started="2026-11-01T01:00:00Z", completed="2026-11-01T07:00:00Z"),
        record(job="done-6h+1s", started="2026-11-01T01:00:00Z", completed="2026-11-01T07:00:01Z"),
    ])
    kinds = {r["job_name"]: r["failure_kind"] for r in rows(tmp_path)}
    assert kinds == {"run-17:59:59": "infrastructure", "run-18:00:00": "infrastructure",
                     "run-18:00:01": "pending", "done-6h": "none", "done-6h+1s": "infrastructure"}


def test_a_day_still_in_progress_is_judged_at_now(tmp_path):
    running = dict(status="in_progress", conclusion=None, completed=None, tests={})
    now = utc("2026-11-01T15:00:00")
    ingest(tmp_path, [record(job="since-09:00", started="2026-11-01T09:00:00Z", **running),
                      record(job="since-09:00:01", started="2026-11-01T09:00:01Z", **running)],
           now_ms=int(now.timestamp() * 1000))
    kinds = {r["job_name"]: r["failure_kind"] for r in rows(tmp_path)}
    assert kinds == {"since-09:00": "infrastructure", "since-09:00:01": "pending"}


def test_a_job_completing_the_next_day_is_pending_then_completed(tmp_path):
    started = dict(started="2026-11-01T23:00:00Z")
    ingest(tmp_path, [record(status="in_progress", conclusion=None, completed=None, tests={}, **started)])
    ingest(tmp_path, [record(completed="2026-11-02T01:00:00Z", **started)], day="2026-11-02")
    assert rows(tmp_path)[0]["failure_kind"] == "pending"
    (next_day,) = rows(tmp_path, day="2026-11-02")
    assert next_day["status"] == "completed" and next_day["failure_kind"] == "none"


def test_callbacks_per_minute_count_every_callback(tmp_path):
    burst = record(received=None)  # no receive time: bucketed at its completed_at, 10:30
    ingest(tmp_path, [burst] * 5 + [
        record(delivery="d2", received="2026-11-01T10:30:59.999Z"),
        record(delivery="d3", received="2026-11-01T10:31:00.000Z"),
        record(delivery="d4", status="in_progress", conclusion=None, completed=None, tests={},
               started="2026-11-01T09:00:10Z"),
    ])
    got = [(r["repo"], r["minute"].strftime("%H:%M"), r["callbacks"])
           for r in rows(tmp_path, "ci_callback_minutes", order="minute")]
    assert got == [(REPO, "09:00", 1), (REPO, "10:30", 6), (REPO, "10:31", 1)]


def test_rejects_have_file_line_and_reason_and_good_lines_survive(tmp_path):
    no_repo = record()
    del no_repo["trusted"]["verified_repo"]
    bad_repo = record(repo="not a repo")
    str_run = record(run_id="7001x")
    str_count = record(tests={"passed": "lots", "failed": 0, "skipped": 0})
    bad_time = record(started="yesterday")
    bad_status = record(status="exploded")
    no_workflow = record()
    del no_workflow["untrusted"]["callback_payload"]["workflow"]
    bool_attempt = record(attempt=True)
    report = ingest(tmp_path, [record(), b"{not json", no_repo, bad_repo, str_run, str_count, bad_time,
                               bad_status, no_workflow, b"[1, 2]", bool_attempt, record(delivery="d9")])
    reasons = {int(r.location.rsplit(":", 1)[1]): r.reason for r in report.rejects}
    assert all(r.location.startswith("ci-results/day=2026-11-01/relay-1.jsonl:") for r in report.rejects)
    assert sorted(reasons) == list(range(2, 12))
    assert reasons[2].startswith("bad JSON")
    assert reasons[3] == "missing trusted.verified_repo"
    assert reasons[4].startswith("bad trusted.verified_repo")
    assert reasons[5] == "not a whole number: untrusted.callback_payload.workflow.run_id = '7001x'"
    assert reasons[6] == "not a whole number: untrusted.callback_payload.workflow.test_results.passed = 'lots'"
    assert reasons[7].startswith("bad timestamp: untrusted.callback_payload.workflow.started_at")
    assert reasons[8].startswith("unknown status")
    assert reasons[9] == "missing untrusted.callback_payload.workflow"
    assert reasons[10] == "not an object: list"
    assert reasons[11].startswith("wrong type: untrusted.callback_payload.workflow.run_attempt is bool")
    assert [r["delivery_id"] for r in rows(tmp_path)] == ["d1", "d9"]
    assert report.lines == 12 and report.callbacks == 2


def test_the_rejects_asset_shows_which_lines_were_refused_and_why(tmp_path):
    """ci_result_rejects' materialization previews its rejects as the other sources' rejects assets
    do: the place a user lands from a failed reject-rate check, without opening the lake."""
    import dagster as dg

    from resources.configured import ArchiveResource, LakeResource
    from torchci_assets.ingest.assets import ci_result_assets

    write_lines(tmp_path / "archive" / "ci-results" / f"day={DAY}" / "relay-1.jsonl", [record(), b"{not json"])
    result = dg.materialize([ci_result_assets], partition_key=DAY, resources={
        "archive": ArchiveResource(uri=str(tmp_path / "archive")), "lake": LakeResource(uri=str(tmp_path / "lake"))})
    meta = {m.asset_key.to_user_string(): m.materialization.metadata for m in result.get_asset_materialization_events()}
    preview = meta["ci_result_rejects"]["preview"].value
    assert f"ci-results/day={DAY}/relay-1.jsonl:2" in preview and "bad JSON" in preview


def test_empty_day_writes_empty_partitions_and_rerun_replaces(tmp_path):
    (tmp_path / "archive" / "ci-results" / f"day={DAY}").mkdir(parents=True)
    report = ingest_ci_results_day(Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "lake")), DAY)
    assert report.files == 0 and rows(tmp_path) == [] and rows(tmp_path, "ci_callback_minutes", order="1") == []
    ingest(tmp_path, [record(), record(delivery="d2")])
    ingest(tmp_path, [record()])
    assert len(rows(tmp_path)) == 1


def test_a_text_over_the_cap_is_a_reject_naming_the_field_and_the_file_goes_on(tmp_path):
    """Every text ci_result keeps holds at most 4,096 characters, as the webhooks' typed texts: a
    longer one (a line may be 32 MiB) is a reject naming the field, never a row or a held megabyte."""
    long, w = "x" * 4097, "untrusted.callback_payload.workflow"
    name = record(delivery="d-name")
    name["untrusted"]["callback_payload"]["workflow"]["name"] = long
    url = record(delivery="d-url")
    url["untrusted"]["callback_payload"]["workflow"]["url"] = long
    level = record(delivery="d-level")
    level["trusted"]["downstream_repo_level"] = long
    at_cap = record(delivery="d" * 4096, job="j" * 4096)
    report = ingest(tmp_path, [record(job=long), record(delivery=long), name, url, level,
                               record(delivery="d-sha", head_sha=long), at_cap, record(delivery="d-after")])
    assert [(int(r.location.rsplit(":", 1)[1]), r.reason) for r in report.rejects] == [
        (n, f"too long: {field} is 4097 characters, more than 4096") for n, field in [
            (1, f"{w}.job_name"), (2, "untrusted.callback_payload.delivery_id"), (3, f"{w}.name"), (4, f"{w}.url"),
            (5, "trusted.downstream_repo_level"), (6, "untrusted.callback_payload.payload.head_sha")]]
    assert sorted(len(r["delivery_id"]) for r in rows(tmp_path)) == [7, 4096]  # the file went on


# The reduction ci_result was defined by before jobs were chosen from fixed-width columns: a window
# over every callback of the day, then a sort. It held the texts of every callback at once; it is
# kept here as the definition the reduction must still agree with, row for row and in order.
WINDOW_REDUCTION = """
WITH ranked AS (
    SELECT *,
        row_number() OVER (PARTITION BY delivery_id, repo, run_id, run_attempt, job_name
            ORDER BY state_rank DESC, callback_at DESC NULLS LAST, archive_path DESC, archive_line DESC) AS rn,
        count(*) OVER (PARTITION BY delivery_id, repo, run_id, run_attempt, job_name) AS n_callbacks,
        min(started_at) OVER (PARTITION BY delivery_id, repo, run_id, run_attempt, job_name) AS any_started_at,
        max(queue_s) OVER (PARTITION BY delivery_id, repo, run_id, run_attempt, job_name) AS any_queue_s,
        max(head_sha) OVER (PARTITION BY delivery_id, repo, run_id, run_attempt, job_name) AS any_head_sha
    FROM stage
), winners AS (
    SELECT * REPLACE (merged_started_at(any_started_at, execution_s, completed_at) AS started_at,
                      coalesce(queue_s, any_queue_s) AS queue_s,
                      coalesce(head_sha, any_head_sha) AS head_sha)
    FROM ranked WHERE rn = 1
)
SELECT {{columns}},
       n_callbacks AS callbacks,
       failure_kind(status, conclusion, started_at, completed_at, callback_at, passed, failed, skipped,
                    $as_of_ms, $lost_after_ms, $success_conclusions) AS failure_kind
FROM winners ORDER BY repo, delivery_id, run_id, run_attempt, job_name
"""


def mixed_day(seed: int) -> dict[str, list]:
    """Three files of callbacks for 80 jobs: every state in any file order, re-sent ones, callbacks
    received at the same instant (the archive order decides), before 1970 or at none, head shas, queue and
    execution times some callbacks leave out, ids that are prefixes of others and not ASCII."""
    rnd = random.Random(seed)
    instants = [None, "1969-12-31T23:00:00Z"] + [f"2026-11-01T{h:02d}:{m:02d}:00Z"
                                                 for h in (9, 10, 23) for m in (0, 30)]
    ids = ["d1", "d10", "d1-x", "d2", "dé", "d\u00e9\u4e2d", "D1"]
    names = ["build", "build ", "test (1)", "test (10)", "test (1, 2)", "测试", "Build"]
    files = {"relay-b.jsonl": [], "relay-a.jsonl": [], "late/relay.jsonl": []}
    for n in range(80):
        job = dict(repo=rnd.choice([REPO, "acme-ai/torch-xpu", "zz/backend"]), delivery=rnd.choice(ids),
                   run_id=rnd.choice([7, 70, 7001]), attempt=rnd.choice([None, 1, 2]), job=rnd.choice(names))
        for _ in range(rnd.choice([1, 1, 2, 3, 5])):
            status = rnd.choice(["queued", "waiting", "in_progress", "completed", "completed"])
            rec = record(**job, status=status, conclusion=rnd.choice(["success", "failure", None]),
                         started=rnd.choice(instants), completed=rnd.choice(instants), received=rnd.choice(instants),
                         queue=rnd.choice([None, 12.5, 60.0]), tests=rnd.choice([{}, None]))
            if rnd.random() < 0.3:
                del rec["untrusted"]["callback_payload"]["payload"]["head_sha"]
            elif rnd.random() < 0.3:
                rec["untrusted"]["callback_payload"]["payload"]["head_sha"] = rnd.choice(["b" * 40, "c" * 40])
            rec["trusted"]["ci_metrics"]["execution_time"] = rnd.choice([None, 600.0, 1800.0])
            files[rnd.choice(list(files))].append(rec)
    # a callback dated before 1970 still beats an undated one, which the archive order favours
    edge = dict(delivery="d-1969", job="edge")
    files["relay-a.jsonl"].append(record(**edge, received="1969-12-31T23:00:00Z", conclusion="failure"))
    files["relay-b.jsonl"].append(record(**edge, started=None, completed=None))
    return files


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_reduction_equals_the_window_over_every_callback_row_for_row(tmp_path, seed):
    for name, lines in mixed_day(seed).items():
        write_lines(tmp_path / "archive" / "ci-results" / f"day={DAY}" / name, lines)
    now = int(utc("2026-11-01T20:00:00").timestamp() * 1000)
    report = ingest_ci_results_day(Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "lake")), DAY, now)
    partition = tmp_path / "lake" / "ci_result" / f"day={DAY}"
    got = pq.read_table(partition / "data.parquet")  # the rows as written, in the file's order
    con = connect()
    try:
        _stage_view(con, Lake.at(str(tmp_path / "lake")), str(partition / "_stage.pq"), [])
        columns = [f.name for f in CI_RESULT_SCHEMA if f.name not in ("callbacks", "failure_kind")]
        expected = relation(con, compose(WINDOW_REDUCTION, columns=columns), judgement(now)).fetchall()
    finally:
        con.close()
    assert report.rejects == [] and report.callbacks == sum(len(v) for v in mixed_day(seed).values())
    assert got.schema.names == CI_RESULT_SCHEMA.names
    assert [tuple(r.values()) for r in got.to_pylist()] == expected
    assert sum(r[-2] for r in expected) == report.callbacks and len(expected) > 30
