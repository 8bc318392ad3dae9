"""The real cross-repo relay's callbacks, end to end: bodies built by pytorch/test-infra's own
report_callback.py (vendored, run with its action's environment), wrapped as the relay forwards
them to HUD, ingested into `ci_result` and assessed into relay levels; and the simulator writes
exactly that format."""

from __future__ import annotations

import datetime as dt
import gzip
import json
from pathlib import Path

import pytest
from conftest import write_lines
from relay_callbacks import action_env, build_payload, forwarded, job_callbacks

from resources.lake import Lake, connect
from resources.storage import Store
from torchci_assets.config import parse_config
from torchci_assets.derived.backends.levels import assess_backends, compute_health
from torchci_assets.ingest.ci_results import ingest_ci_results_day
from torchci_assets.relay.dispatch import client_payload
from torchci_assets.relay.pushes import UpstreamCommit
from torchci_assets.simulate.generate import generate_archive
from torchci_assets.simulate.world import Options

UTC = dt.timezone.utc
D = "2026-11-10"
T0 = dt.datetime(2026, 11, 10, tzinfo=UTC)
REPO = "acme-ai/torch-npu"
SHA = "3f2a9c1e5b7d4f6a8c0e2b4d6f8a1c3e5b7d9f0a"
DISPATCH = client_payload(UpstreamCommit("pytorch/pytorch", SHA, "refs/heads/main", "9" * 40, False,
                                         "5e1d7c40-b1f2-11f0-8a3e-1c2d3e4f5a6b", "2026-11-10T08:59:58.000Z",
                                         "webhook", {"after": SHA, "ref": "refs/heads/main"}))


def ingest(tmp_path, lines, day=D, name="relay.jsonl.gz"):
    write_lines(tmp_path / "archive" / "ci-results" / f"day={day}" / name, lines)
    return ingest_ci_results_day(Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "lake")), day)


def rows(tmp_path, day=D):
    con = connect()
    try:
        assert Lake.at(str(tmp_path / "lake")).register(con, "ci_result", [day], name="t")
        cur = con.execute("SELECT * EXCLUDE (day) FROM t ORDER BY job_name, run_attempt")
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r)) for r in cur.fetchall()]
    finally:
        con.close()


def test_the_script_sends_strings_and_no_start_on_completion():
    """What the ingest has to accept, as the vendored script really builds it."""
    env = action_env("completed", repo=REPO, run_id=19283746501, run_attempt=2, job_name="test-npu",
                     conclusion="failure", client_payload=DISPATCH)
    body = json.loads(build_payload(env, T0 + dt.timedelta(hours=9, microseconds=123456)))
    wf = body["workflow"]
    assert (wf["run_id"], wf["run_attempt"], wf["schema_version"], wf["check_run_id"]) == \
        ("19283746501", "2", "1", "19283746501-2")
    assert wf["started_at"] is None and wf["completed_at"] == "2026-11-10T09:00:00.123456Z"
    assert "test_results" not in wf and "artifact_url" not in wf
    assert body["delivery_id"] == DISPATCH["delivery_id"] and body["sha"] == SHA


def test_a_dispatched_job_becomes_one_ci_result_row(tmp_path):
    dispatched = T0 + dt.timedelta(hours=9)
    lines = job_callbacks(REPO, dispatched, run_id=19283746501, run_attempt=2, job_name="test (default, 1, 2)",
                          queue_s=95.25, exec_s=2400.0, conclusion="failure", client_payload=DISPATCH,
                          test_results={"passed": 2870, "failed": 3, "skipped": 41, "total": 2914})
    report = ingest(tmp_path, lines)
    assert report.rejects == [] and report.callbacks == 2
    (row,) = rows(tmp_path)
    started = dispatched + dt.timedelta(seconds=95.25)
    assert {k: row[k] for k in ("repo", "level", "event_type", "delivery_id", "head_sha", "workflow_name",
                                "run_id", "run_attempt", "job_name", "check_run_id", "status", "conclusion",
                                "started_at", "completed_at", "passed", "failed", "skipped", "failure_kind",
                                "callbacks", "workflow_url")} == {
        "repo": REPO, "level": "L2", "event_type": "push", "delivery_id": DISPATCH["delivery_id"],
        "head_sha": SHA, "workflow_name": "npu-upstream-ci", "run_id": 19283746501, "run_attempt": 2,
        "job_name": "test (default, 1, 2)", "check_run_id": "19283746501-2", "status": "completed",
        "conclusion": "failure", "started_at": started, "completed_at": started + dt.timedelta(seconds=2400),
        "passed": 2870, "failed": 3, "skipped": 41, "failure_kind": "test", "callbacks": 2,
        "workflow_url": f"https://github.com/{REPO}/actions/runs/19283746501",
    }
    # the relay's measures: queue on the in_progress callback, execution on the completed one
    assert row["queue_s"] == pytest.approx(95.75) and row["execution_s"] == 2400.0
    assert row["received_at"] == started + dt.timedelta(seconds=2400.5)


def test_a_completed_callback_alone_starts_at_completion_minus_the_relays_execution_time(tmp_path):
    _, done = job_callbacks(REPO, T0 + dt.timedelta(hours=3), run_id=555, job_name="build", exec_s=1234.5,
                            queue_s=10.0)
    lint_env = action_env("completed", repo=REPO, run_id=556, job_name="lint", conclusion="success",
                          check_run_id="58123456789", artifact_url="https://x.test/a")
    at = T0 + dt.timedelta(hours=4)
    other = forwarded(build_payload(lint_env, at), REPO, at)
    ingest(tmp_path, [done, other])
    build, lint = rows(tmp_path)
    assert build["started_at"] == T0 + dt.timedelta(hours=3, seconds=10.0)
    assert build["completed_at"] - build["started_at"] == dt.timedelta(seconds=1234.5)
    # no in_progress and no relay measure: the start is unknown, the job is judged on its conclusion
    assert lint["started_at"] is None and lint["failure_kind"] == "none"
    assert (lint["check_run_id"], lint["artifact_url"]) == ("58123456789", "https://x.test/a")


def test_the_start_reported_in_progress_wins_even_from_the_day_before(tmp_path):
    """In progress at 18:00 on D-1, completed at 00:30 on D: 6.5 h, an infrastructure failure.
    The relay's execution time says 5 h (it saw the in_progress callback late): D's partition,
    which cannot see D-1, derives its start from it; the health window merges both days and
    takes the start the job reported."""
    dispatched = T0 - dt.timedelta(hours=6, seconds=60)
    running, done = job_callbacks(REPO, dispatched, run_id=777, job_name="slow", queue_s=60.0,
                                  exec_s=6.5 * 3600)
    done["trusted"]["ci_metrics"]["execution_time"] = 5 * 3600.0
    ingest(tmp_path, [running], day="2026-11-09")
    ingest(tmp_path, [done])
    (today,) = rows(tmp_path)
    assert today["started_at"] == T0 - dt.timedelta(hours=4, minutes=30) and today["failure_kind"] == "none"
    health = compute_health(Lake.at(str(tmp_path / "lake")), D, (7,))
    (h,) = health.to_pylist()
    assert (h["jobs"], h["infra_failures"], h["successes"]) == (1, 1, 0)


def test_a_nightly_self_report_is_kept_but_left_out_of_the_relay_measures(tmp_path):
    nightly = action_env("completed", repo=REPO, run_id=991, job_name="nightly", conclusion="failure",
                         delivery_id=SHA, event_type="nightly")
    lines = job_callbacks(REPO, T0 + dt.timedelta(hours=1), run_id=990, job_name="pr-job") + [
        forwarded(build_payload(nightly, T0 + dt.timedelta(hours=5)), REPO, T0 + dt.timedelta(hours=5))]
    ingest(tmp_path, lines)
    got = {r["job_name"]: r for r in rows(tmp_path)}
    n = got["nightly"]
    assert (n["event_type"], n["delivery_id"], n["head_sha"], n["status"], n["conclusion"]) == \
        ("nightly", SHA, SHA, "completed", "failure")
    # the script stamps a self-report's start with the instant it sends it, as its completion
    assert n["queue_s"] is None and n["execution_s"] is None and n["started_at"] == n["completed_at"]
    (h,) = compute_health(Lake.at(str(tmp_path / "lake")), D, (7,)).to_pylist()
    assert (h["jobs"], h["successes"], h["commits"], h["callbacks"]) == (1, 1, 1, 3)


def test_what_the_relay_could_not_read_either_is_rejected_with_its_reason(tmp_path):
    def completed(**kw):
        env = action_env("completed", repo=REPO, job_name="j", conclusion="success", **kw)
        return forwarded(build_payload(env, T0 + dt.timedelta(hours=2)), REPO, T0 + dt.timedelta(hours=2))

    buildkite = completed(run_id="01890f6e-7b3a-4c1e-9d2f-3a4b5c6d7e8f")  # BUILDKITE_BUILD_ID is a UUID
    huge = completed(run_id="9" * 25)
    zeroth = completed(run_id=5, run_attempt=0)
    bad_version = completed(run_id=6)
    bad_version["untrusted"]["callback_payload"]["workflow"]["schema_version"] = "v1"
    report = ingest(tmp_path, [completed(run_id=4), buildkite, huge, zeroth, bad_version])
    wf = "untrusted.callback_payload.workflow"
    assert [r.reason for r in report.rejects] == [
        f"not a whole number: {wf}.run_id = '01890f6e-7b3a-4c1e-9d2f-3a4b5c6d7e8f'",
        f"out of range: {wf}.run_id = {'9' * 25}, expected 0..{2**63 - 1}",
        f"bad {wf}.run_attempt: 0",
        f"not a whole number: {wf}.schema_version = 'v1'",
    ]
    assert [r["run_id"] for r in rows(tmp_path)] == [4]


# ---- levels from real callbacks: each threshold just below, at and just above -------------------

APPROVED = parse_config({"allowlist": {"L2": [REPO]}, "maintainer_approved": [REPO]}, "test-config.yaml")


def level(tmp_path, jobs: int = 100, failures: int = 0, queue_s: float = 60.0) -> str:
    """The eligible level of REPO after `jobs` dispatched jobs on D (one delivery each, 1800 s),
    the first `failures` failing tests, every job queued `queue_s` by the relay's measure."""
    lines = []
    for i in range(jobs):
        fails = i < failures
        lines += job_callbacks(REPO, T0 + dt.timedelta(minutes=10 * i), run_id=1000 + i, job_name="test",
                               queue_s=queue_s, latency_s=0.0, conclusion="failure" if fails else "success",
                               test_results={"passed": 97, "failed": 3 if fails else 0, "skipped": 0})
    report = ingest(tmp_path, lines)
    assert report.rejects == [] and report.rows == jobs
    health = compute_health(Lake.at(str(tmp_path / "lake")), D, (7, 28))
    (a,) = assess_backends(health.to_pylist(), APPROVED)
    return a.eligible_level


@pytest.mark.parametrize("jobs, expected", [(19, "L1"), (20, "L4"), (21, "L4")])
def test_completed_jobs_threshold(tmp_path, jobs, expected):
    assert level(tmp_path, jobs=jobs) == expected


@pytest.mark.parametrize("failures, expected", [(31, "L1"), (30, "L2"), (29, "L2"), (11, "L2"), (10, "L3"),
                                                (9, "L3")])
def test_success_rate_thresholds(tmp_path, failures, expected):
    # L2 needs 0.70, L3 0.90 over 7 days; L4 0.95 over 28 days (the same 100 jobs)
    assert level(tmp_path, failures=failures) == expected


@pytest.mark.parametrize("queue_s, expected", [(1799.0, "L4"), (1800.0, "L4"), (1801.0, "L2")])
def test_queue_time_threshold(tmp_path, queue_s, expected):
    assert level(tmp_path, queue_s=queue_s) == expected


# ---- the simulator writes exactly this format -----------------------------------------------------

@pytest.fixture(scope="module")
def simulated(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sim")
    opts = Options(prs_per_day=2, configs=4, test_files=8, tests_per_file=5, test_reports=False)
    generate_archive(out, [dt.date(2026, 11, 7), dt.date(2026, 11, 8), dt.date(2026, 11, 9)], opts,
                     log=lambda _: None)
    return out


def _env_of(body: dict, repo: str) -> tuple[dict, dt.datetime]:
    """The action environment that would make the script build `body`, and when it ran."""
    wf = body["workflow"]
    at = wf["started_at"] or wf["completed_at"]
    self_report = body["event_type"] in ("nightly", "periodic")
    dispatch = {k: v for k, v in body.items() if k != "workflow"}
    env = action_env(wf["status"], repo=repo, run_id=wf["run_id"], run_attempt=wf["run_attempt"],
                     job_name=wf["job_name"], workflow=wf["name"], conclusion=wf["conclusion"] or "",
                     client_payload=None if self_report else dispatch, test_results=wf.get("test_results"),
                     artifact_url=wf.get("artifact_url", ""),
                     delivery_id=body["delivery_id"] if self_report else "",
                     event_type=body["event_type"] if self_report else "")
    return env, dt.datetime.fromisoformat(at)


def test_every_simulated_callback_is_what_the_real_script_builds(simulated):
    kinds = set()
    for f in sorted((simulated / "ci-results").glob("day=*/*.jsonl.gz")):
        with gzip.open(f, "rt") as fh:
            for line in fh:
                rec = json.loads(line)
                assert list(rec) == ["trusted", "untrusted", "received_at"]
                body, trusted = rec["untrusted"]["callback_payload"], rec["trusted"]
                env, at = _env_of(body, trusted["verified_repo"])
                assert json.dumps(body) == build_payload(env, at)
                # the relay measures the queue on in_progress, execution on completion, neither for self-reports
                metrics, status = trusted["ci_metrics"], body["workflow"]["status"]
                kind = "self-report" if body["event_type"] == "nightly" else status
                measured = {k for k, v in metrics.items() if v is not None}
                assert measured == {"self-report": set(), "in_progress": {"queue_time"},
                                    "completed": {"execution_time"}}[kind]
                assert dt.datetime.fromisoformat(rec["received_at"]) >= at
                kinds.add(kind)
    assert kinds == {"self-report", "in_progress", "completed"}


def test_simulated_backends_land_on_the_levels_the_simulator_intends(simulated):
    truth = json.loads((simulated / "ground-truth.json").read_text())
    store, lake = Store(str(simulated)), Lake.at(str(simulated / "lake"))
    days = store.list_days("ci-results")
    for day in days:
        assert ingest_ci_results_day(store, lake, day).rejects == []
    allowlist: dict = {}
    for b in truth["backends"]:
        if b["current_level"] in ("L3", "L4"):
            allowlist.setdefault(b["current_level"], {}).setdefault("device", {})[b["repo"]] = []
        else:
            allowlist.setdefault(b["current_level"], []).append(b["repo"])
    cfg = parse_config({"allowlist": allowlist}, "simulated")
    health = compute_health(lake, days[-1], (7, 28))
    got = {a.repo: a.eligible_level for a in assess_backends(health.to_pylist(), cfg)}
    assert got == {b["repo"]: b["expected_level"] for b in truth["backends"]}
    assert len(got) == 4
