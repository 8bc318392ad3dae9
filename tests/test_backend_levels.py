"""Backend health and relay levels on hand-built `ci_result` rows: every threshold exactly at,
just above and just below, one-step promotion from L2, immediate demotion on measured failures,
the L4 approval cap, no data (never a demotion), L1 (never measured), one repo under two letter
cases, the 6 h rule across days, the published files, and the Dagster assets end to end."""

import datetime as dt
import json

import dagster as dg
import pyarrow as pa
import pytest
import yaml
from conftest import write_lines
from test_ci_results import record

from resources.configured import ArchiveResource, LakeResource, OutputsResource
from resources.lake import Lake
from resources.storage import Store
from torchci_assets.config import parse_allowlist, parse_config
from torchci_assets.derived.backends.assets import backend_health_asset, backend_levels_asset, health_summary_md
from torchci_assets.ingest.assets import ci_result_assets
from torchci_assets.derived.backends.levels import (
    L1_REASON,
    LEVELS_FILE,
    PROPOSAL_FILE,
    allowlist_proposal,
    assess_backends,
    compute_health,
    levels_document,
    placeholder_device,
    publish_levels,
)
from torchci_assets.ingest.ci_results import CALLBACK_MINUTES_SCHEMA, CI_RESULT_SCHEMA

D = "2026-11-10"
REPO = "acme-ai/torch-npu"
T0 = dt.datetime(2026, 11, 10, tzinfo=dt.timezone.utc)


def config(allowlist=None, approved=(), thresholds=None):
    return parse_config({"allowlist": allowlist if allowlist is not None else {"L2": [REPO]},
                         "maintainer_approved": list(approved), "thresholds": thresholds}, "test-config.yaml")


APPROVED = config(approved=[REPO])


def job(i, repo=REPO, day_start=T0, delivery=None, queue_s=60.0, exec_s=1800.0, conclusion="success",
        failed=0, passed=100, status="completed", start_offset_s=None):
    """A ci_result row; job i starts i minutes into the day, two jobs per delivery."""
    started = day_start + dt.timedelta(seconds=60 * i if start_offset_s is None else start_offset_s)
    completed = started + dt.timedelta(seconds=exec_s) if status == "completed" else None
    return {"repo": repo, "level": "L2", "delivery_id": delivery or f"{day_start:%m%d}-{i // 2}",
            "head_sha": None, "workflow_name": "ci", "run_id": 1000 + i, "run_attempt": 1, "job_name": f"job-{i}",
            "status": status, "conclusion": conclusion if status == "completed" else None,
            "started_at": started, "completed_at": completed, "received_at": None, "queue_s": queue_s,
            "execution_s": exec_s if completed else None, "passed": passed, "failed": failed, "skipped": 0,
            "location": "hand-built", "callback_at": completed or started, "callbacks": 1,
            "failure_kind": None}  # deliberately unset: health re-judges every job itself


def healthy(n=100, **kw):
    return [job(i, **kw) for i in range(n)]


def fail_tests(rows, k):
    for r in rows[:k]:
        r.update(conclusion="failure", failed=3, passed=97)
    return rows


def fail_infra(rows, k):
    for r in rows[:k]:
        r.update(conclusion="failure", failed=0, passed=0)
    return rows


def write(lake, rows, minutes=None):
    """Write rows to the ci_result partition of the day their callback arrived; one callback per
    row unless `minutes` (repo, minute, callbacks, day) overrides the callback table."""
    by_day = {}
    for r in rows:
        by_day.setdefault(r["callback_at"].date().isoformat(), []).append(r)
    for day, rs in by_day.items():
        lake.write("ci_result", day, pa.Table.from_pylist(rs, schema=CI_RESULT_SCHEMA))
    if minutes is None:
        minutes = [(r["repo"], r["callback_at"].replace(second=0), 1, r["callback_at"].date().isoformat())
                   for r in rows]
    per_day = {}
    for repo, minute, n, day in minutes:
        per_day.setdefault(day, []).append({"repo": repo, "minute": minute, "callbacks": n})
    for day, ms in per_day.items():
        lake.write("ci_callback_minutes", day, pa.Table.from_pylist(ms, schema=CALLBACK_MINUTES_SCHEMA))


def assess(tmp_path, rows, cfg=APPROVED, minutes=None, day=D):
    lake = Lake.at(str(tmp_path / "lake"))
    write(lake, rows, minutes)
    health = compute_health(lake, day, (cfg.thresholds.L2.window_days, cfg.thresholds.L4.window_days))
    return {a.repo: a for a in assess_backends(health.to_pylist(), cfg)}


def level_of(tmp_path, rows, **kw):
    return assess(tmp_path, rows, **kw)[REPO].eligible_level


def test_a_healthy_approved_backend_earns_l4(tmp_path):
    a = assess(tmp_path, healthy())[REPO]
    assert a.eligible_level == "L4" and all(c.met for c in a.criteria)
    short = a.health[7]
    assert (short["jobs"], short["completed_jobs"], short["success_rate"], short["infra_availability"]) == \
        (100, 100, 1.0, 1.0)
    # a delivery's two jobs start a minute apart: 60 s queue + 60 s + 1800 s
    assert short["commit_time_p95_s"] == 1920.0 and short["queue_p90_s"] == 60.0
    assert short["callback_peak_per_minute"] == 1


# ---- every threshold: just below, exactly at, just above -------------------------------------

def _set(field, value):
    def apply(rows):
        for r in rows:
            r[field] = value
        return rows
    return apply


def _commit_time(seconds):
    """Every delivery's second job ends `seconds` after its first job entered the queue."""
    def apply(rows):
        for first, second in zip(rows[::2], rows[1::2]):
            first.update(queue_s=0.0, exec_s=None)
            second.update(queue_s=0.0, started_at=first["started_at"] + dt.timedelta(seconds=60))
            second["completed_at"] = first["started_at"] + dt.timedelta(seconds=seconds)
            second["callback_at"] = second["completed_at"]
        return rows
    return apply


@pytest.mark.parametrize("name, make, expected", [
    # L2 completed jobs (20): the 7-day window needs 20 completed jobs
    ("jobs 19", lambda: healthy(19), "L1"),
    ("jobs 20", lambda: healthy(20), "L4"),
    ("jobs 21", lambda: healthy(21), "L4"),
    # L2 success rate (0.70), with test failures so availability stays 100%
    ("L2 success 0.69", lambda: fail_tests(healthy(), 31), "L1"),
    ("L2 success 0.70", lambda: fail_tests(healthy(), 30), "L2"),
    ("L2 success 0.71", lambda: fail_tests(healthy(), 29), "L2"),
    # L3 success rate (0.90)
    ("L3 success 0.89", lambda: fail_tests(healthy(), 11), "L2"),
    ("L3 success 0.90", lambda: fail_tests(healthy(), 10), "L3"),
    ("L3 success 0.91", lambda: fail_tests(healthy(), 9), "L3"),
    # L3 infrastructure availability (0.95): failures with no tests run
    ("availability 0.94", lambda: fail_infra(healthy(), 6), "L2"),
    ("availability 0.95", lambda: fail_infra(healthy(), 5), "L4"),
    ("availability 0.96", lambda: fail_infra(healthy(), 4), "L4"),
    # L3 queue time p90 (1800 s)
    ("queue p90 1801", lambda: _set("queue_s", 1801.0)(healthy()), "L2"),
    ("queue p90 1800", lambda: _set("queue_s", 1800.0)(healthy()), "L4"),
    ("queue p90 1799", lambda: _set("queue_s", 1799.0)(healthy()), "L4"),
    # L2 per-commit total time p95 (10800 s), measured across a delivery's jobs
    ("commit p95 10801", lambda: _commit_time(10801)(healthy()), "L1"),
    ("commit p95 10800", lambda: _commit_time(10800)(healthy()), "L4"),
    ("commit p95 10799", lambda: _commit_time(10799)(healthy()), "L4"),
])
def test_threshold(tmp_path, name, make, expected):
    assert level_of(tmp_path, make()) == expected, name


def test_queue_time_criterion_is_the_90th_percentile(tmp_path):
    # 100 jobs: p90 interpolates between the 90th and 91st fastest
    slow_10 = healthy()
    for r in slow_10[:10]:
        r["queue_s"] = 5000.0
    a = assess(tmp_path, slow_10)[REPO]
    assert a.health[7]["queue_p90_s"] == pytest.approx(60 + 0.1 * 4940) and a.eligible_level == "L4"
    slow_11 = healthy()
    for r in slow_11[:11]:
        r["queue_s"] = 5000.0
    assert level_of(tmp_path / "b", slow_11) == "L2"


@pytest.mark.parametrize("peak, expected", [(59, "L4"), (60, "L4"), (61, "L1")])
def test_callback_peak_threshold(tmp_path, peak, expected):
    rows = healthy()
    minute = T0 + dt.timedelta(hours=20)
    assert level_of(tmp_path, rows, minutes=[(REPO, minute, peak, D)]) == expected


def test_a_minute_split_across_two_partitions_is_summed(tmp_path):
    minute = T0 + dt.timedelta(minutes=5)
    split = [(REPO, minute, 30, "2026-11-09"), (REPO, minute, 31, D)]
    a = assess(tmp_path, healthy(), minutes=split)[REPO]
    assert a.health[7]["callback_peak_per_minute"] == 61 and a.eligible_level == "L1"


def _with_old_failures(k):
    """100 recent successes plus 100 jobs 20 days ago (outside 7 days, inside 28) with k failures."""
    old = fail_tests(healthy(day_start=T0 - dt.timedelta(days=20)), k)
    return healthy() + old


@pytest.mark.parametrize("failures, expected", [(11, "L3"), (10, "L4"), (9, "L4")])
def test_l4_success_rate_over_28_days(tmp_path, failures, expected):
    a = assess(tmp_path, _with_old_failures(failures))[REPO]
    assert a.health[7]["success_rate"] == 1.0 and a.health[28]["jobs"] == 200
    assert a.health[28]["success_rate"] == pytest.approx((200 - failures) / 200)
    assert a.eligible_level == expected


def test_days_before_the_window_are_not_read(tmp_path):
    rows = healthy() + fail_tests(healthy(day_start=T0 - dt.timedelta(days=28)), 100)
    a = assess(tmp_path, rows)[REPO]
    assert a.health[28]["jobs"] == 100 and a.eligible_level == "L4"


def test_thresholds_come_from_the_config(tmp_path):
    strict = config(approved=[REPO], thresholds={"L2": {"min_completed_jobs": 5, "window_days": 3},
                                                 "L3": {"max_queue_time_p90_s": 30}})
    rows = healthy(5) + fail_tests(healthy(50, day_start=T0 - dt.timedelta(days=5)), 50)
    a = assess(tmp_path, rows, cfg=strict)[REPO]
    assert 3 in a.health and a.health[3]["jobs"] == 5
    assert a.eligible_level == "L2"  # queue 60 s > 30 s; the failures 5 days ago are outside 3 days
    assert [c.name for c in a.criteria if not c.met] == ["max_queue_time_p90_s", "min_success_rate"]


def test_partitions_written_before_the_callback_columns_existed_are_still_read(tmp_path):
    lake = Lake.at(str(tmp_path / "lake"))
    write(lake, healthy(30))
    old_schema = pa.schema([f for f in CI_RESULT_SCHEMA if f.name not in
                            ("event_type", "check_run_id", "workflow_url", "artifact_url")])
    older = healthy(30, day_start=T0 - dt.timedelta(days=1))
    lake.write("ci_result", "2026-11-09", pa.Table.from_pylist(older, schema=old_schema))
    for days in (["2026-11-09"], [D, "2026-11-09"]):  # only old partitions, and old and new ones
        health = compute_health(lake, days[0], (7,)).to_pylist()
        assert [(r["jobs"], r["successes"]) for r in health] == [(30 * len(days), 30 * len(days))]


# ---- approval, promotion, demotion, no data -------------------------------------------------

def test_l4_without_approval_is_capped_at_l3_with_the_reason(tmp_path):
    a = assess(tmp_path, healthy(), cfg=config({"L3": {"npu": {REPO: ["@oncall"]}}}))[REPO]
    assert (a.eligible_level, a.recommended_level, a.change) == ("L3", "L3", "keep")
    assert any("not in maintainer_approved: capped at L3" in r for r in a.reasons)


@pytest.mark.parametrize("current, expected", [("L2", "L3"), ("L3", "L4")])
def test_promotion_is_one_level_at_a_time(tmp_path, current, expected):
    allow = {current: {"npu": {REPO: []}}} if current == "L3" else {current: [REPO]}
    a = assess(tmp_path, healthy(), cfg=config(allow, approved=[REPO]))[REPO]
    assert (a.eligible_level, a.recommended_level, a.change) == ("L4", expected, "promote")


def test_demotion_is_immediate_and_may_skip_levels(tmp_path):
    cfg = config({"L4": [REPO]}, approved=[REPO])
    a = assess(tmp_path, fail_tests(healthy(), 40), cfg=cfg)[REPO]
    assert (a.current_level, a.eligible_level, a.recommended_level, a.change) == ("L4", "L1", "L1", "demote")
    assert "L2 min_success_rate: success_rate over 7 days is 0.6, needs >= 0.7" in a.reasons


def test_allowlisted_repo_without_data_is_assessed_and_kept(tmp_path):
    cfg = config({"L3": {"npu": {REPO: []}}, "L1": ["quiet/torch-zpu"]})
    got = assess(tmp_path, [job(0, repo="other/torch-xyz")], cfg=cfg)
    a = got[REPO]
    assert a.health == {} and a.eligible_level == "L1" and (a.recommended_level, a.change) == ("L3", "keep")
    assert a.reasons[:2] == ["no evidence in the last 7 days: not demoted", "no judged jobs in the last 7 days"]
    assert got["quiet/torch-zpu"].change == "keep"
    unlisted = got["other/torch-xyz"]
    assert unlisted.current_level is None and unlisted.recommended_level is None
    assert unlisted.change == "not_allowlisted" and "not in the allowlist" in unlisted.reasons[0]


def test_an_l4_backend_without_results_this_week_is_not_demoted(tmp_path):
    # another backend reports, so the asset's "no results at all" guard does not apply
    cfg = config({"L4": [REPO], "L2": ["other/torch-xpu"]}, approved=[REPO])
    a = assess(tmp_path, healthy(100, repo="other/torch-xpu"), cfg=cfg)[REPO]
    assert (a.eligible_level, a.recommended_level, a.change) == ("L1", "L4", "keep")
    assert a.reasons[0] == "no evidence in the last 7 days: not demoted"


def test_nightly_self_reports_alone_are_no_evidence_to_demote_on(tmp_path):
    cfg = config({"L4": [REPO]}, approved=[REPO])
    nightly = [job(i, status="completed") | {"event_type": "nightly", "delivery_id": f"n{i}"} for i in range(5)]
    a = assess(tmp_path, nightly, cfg=cfg)[REPO]
    assert a.health[7]["jobs"] == 0 and a.health[7]["callbacks"] == 5
    assert (a.recommended_level, a.change) == ("L4", "keep")
    assert "L2 min_completed_jobs: completed_jobs over 7 days is no data, needs >= 20" in a.reasons


def test_a_demotion_goes_no_lower_than_the_measured_failures(tmp_path):
    # the jobs' queue times were never measured (no in_progress callback): the L3 queue criterion has
    # no data, so the measured 85% success rate demotes L4 to L2, and no further
    rows = fail_tests(_set("queue_s", None)(healthy()), 15)
    a = assess(tmp_path, rows, cfg=config({"L4": [REPO]}, approved=[REPO]))[REPO]
    assert (a.eligible_level, a.recommended_level, a.change) == ("L2", "L2", "demote")
    rows = _set("queue_s", None)(healthy())
    a = assess(tmp_path / "b", rows, cfg=config({"L4": [REPO]}, approved=[REPO]))[REPO]
    assert (a.eligible_level, a.recommended_level, a.change) == ("L2", "L4", "keep")
    assert a.reasons[0] == "not demoted: the L4 criteria it misses have no data in the window"


def test_an_l1_backend_is_not_promoted_l2_is_a_maintainers_decision(tmp_path):
    """The relay takes no callbacks from L1 (as upstream), so there is never evidence to promote on."""
    cfg = config({"L1": [REPO], "L2": ["other/torch-xpu"]})
    a = assess(tmp_path, healthy(100, repo="other/torch-xpu"), cfg=cfg)[REPO]
    assert (a.eligible_level, a.recommended_level, a.change) == ("L1", "L1", "keep")
    assert a.reasons == [L1_REASON]
    assert "callbacks" in a.reasons[0] and "maintainer" in a.reasons[0]


def test_a_repo_seen_under_two_letter_cases_is_one_backend(tmp_path):
    # GitHub's names are case-insensitive, and the OIDC `repository` claim follows a rename: a
    # case-only rename inside the window leaves both spellings in ci_result
    rows = healthy(60) + [job(i, repo="Acme-AI/torch-npu") for i in range(60, 120)]
    rows += [job(i, repo="Stranger/Torch-QPU") for i in range(5)] + [job(5, repo="stranger/torch-qpu")]
    rows[-1]["callback_at"] += dt.timedelta(hours=1)  # the spelling seen last names an unlisted repo
    got = assess(tmp_path, rows)
    assert sorted(got) == [REPO, "stranger/torch-qpu"]  # the allowlist's spelling for a listed repo
    assert got[REPO].health[7]["jobs"] == 120 and got["stranger/torch-qpu"].health[7]["jobs"] == 6
    entries = parse_allowlist(yaml.safe_load(allowlist_proposal(list(got.values()), D, APPROVED)))
    assert [(e.repo, e.level) for e in entries] == [(REPO, "L3")]


def test_health_rows_under_two_spellings_are_folded(tmp_path):
    """backend_health written before names were folded may hold both spellings: one assessment."""
    rows = [{"repo": "Acme-AI/torch-npu", "window_days": 7, "jobs": 3}, {"repo": REPO, "window_days": 7, "jobs": 0}]
    (a,) = assess_backends(rows, APPROVED)
    assert a.repo == REPO and a.health[7]["jobs"] == 3


# ---- the 6 h rule across days ---------------------------------------------------------------

def test_jobs_spanning_midnight_are_merged_and_judged_at_the_window_end(tmp_path):
    prev = T0 - dt.timedelta(days=1)
    h = 3600

    def named(name, **kw):
        return job(0, **kw) | {"job_name": name, "delivery_id": name}

    rows = healthy(20) + [
        # in progress on the 9th at 22:00, its completion (5 h later) arrives on the 10th: a success
        named("span", day_start=prev, start_offset_s=22 * h, status="in_progress"),
        named("span", day_start=prev, start_offset_s=22 * h, exec_s=5 * h),
        # completes on the 10th, 7 h after starting on the 9th: an infrastructure failure
        named("late", day_start=prev, start_offset_s=20 * h, exec_s=7 * h),
        # started on the 9th at 12:00 and never completed: lost
        named("lost", day_start=prev, start_offset_s=12 * h, status="in_progress"),
        # started on the 10th at 19:00, still running at midnight: pending, not judged
        named("pending", start_offset_s=19 * h, status="in_progress"),
    ]
    health = assess(tmp_path, rows)[REPO].health[7]
    assert (health["jobs"], health["completed_jobs"], health["successes"]) == (23, 22, 21)
    assert (health["infra_failures"], health["lost"], health["pending"]) == (2, 1, 1)
    assert health["commits"] == 13  # 10 healthy deliveries, span, late and lost; pending is left out


def test_the_window_ending_today_judges_at_now(tmp_path):
    rows = healthy(20) + [job(0, start_offset_s=17 * 3600, status="in_progress") | {"job_name": "running"}]
    lake = Lake.at(str(tmp_path / "lake"))
    write(lake, rows)
    at_11pm = compute_health(lake, D, (7,), now_ms=int((T0 + dt.timedelta(hours=23)).timestamp() * 1000))
    at_10pm = compute_health(lake, D, (7,), now_ms=int((T0 + dt.timedelta(hours=22)).timestamp() * 1000))
    assert [(r["jobs"], r["lost"], r["pending"]) for r in at_11pm.to_pylist()] == [(21, 1, 0)]
    assert [(r["jobs"], r["lost"], r["pending"]) for r in at_10pm.to_pylist()] == [(20, 0, 1)]


def test_a_job_lost_for_good_counts_6_hours_in_its_commit_time(tmp_path):
    rows = healthy(40)
    rows[0].update(status="in_progress", completed_at=None, conclusion=None, queue_s=0.0,
                   callback_at=rows[0]["started_at"])
    health = assess(tmp_path, rows)[REPO].health[7]
    assert health["lost"] == 1 and health["infra_availability"] == 39 / 40
    # 19 deliveries take 1920 s, the lost one 6 h from its first job's start; p95 interpolates
    assert health["commit_time_p95_s"] == pytest.approx(1920 + 0.05 * (6 * 3600 - 1920))


# ---- published files --------------------------------------------------------------------------

def test_levels_document_lists_every_criterion_with_value_and_threshold(tmp_path):
    got = assess(tmp_path, fail_tests(healthy(), 20), cfg=config({"L3": {"npu": {REPO: []}}}))
    doc = levels_document(list(got.values()), D, config())
    (b,) = doc["backends"]
    assert (b["current_level"], b["eligible_level"], b["recommended_level"]) == ("L3", "L2", "L2")
    crit = {(c["level"], c["name"]): c for c in b["criteria"]}
    assert len(crit) == 9
    assert crit[("L3", "min_success_rate")] == {"level": "L3", "name": "min_success_rate", "metric": "success_rate",
                                                "window_days": 7, "value": 0.8, "threshold": 0.9, "op": ">=",
                                                "met": False}
    assert crit[("L4", "min_success_rate")]["window_days"] == 28
    assert b["health"]["7"]["jobs"] == 100 and json.loads(json.dumps(doc)) == doc


def test_allowlist_proposal_is_the_relay_format_with_devices(tmp_path):
    cfg = config({"L1": ["newco/torch-gpu-backend"], "L2": ["demoted/torch-old"],
                  "L3": {"npu": {REPO: ["@npu-oncall"]}, "tpu": {"fallen/torch-tpu": []}}}, approved=[REPO])
    rows = (healthy() + fail_tests(healthy(repo="demoted/torch-old"), 40)
            + fail_tests(healthy(repo="fallen/torch-tpu"), 20) + healthy(repo="stranger/torch-qpu"))
    got = assess(tmp_path, rows, cfg=cfg)
    text = allowlist_proposal(list(got.values()), D, cfg)
    entries = {e.repo: e for e in parse_allowlist(yaml.safe_load(text))}
    assert set(entries) == {REPO, "newco/torch-gpu-backend", "demoted/torch-old", "fallen/torch-tpu"}
    assert (entries[REPO].level, entries[REPO].device, entries[REPO].oncalls) == ("L4", None, ("@npu-oncall",))
    assert yaml.safe_load(text)["L4"] == [{REPO: "@npu-oncall"}]  # the relay's list, oncalls as one string
    assert entries["newco/torch-gpu-backend"].level == "L1"  # reports nothing at L1: kept
    assert (entries["fallen/torch-tpu"].level, entries["fallen/torch-tpu"].device) == ("L2", None)
    assert entries["demoted/torch-old"].level == "L1"
    assert "# fallen/torch-tpu: L3 -> L2 (demote)" in text


def test_a_repo_promoted_to_l3_gets_a_placeholder_device(tmp_path):
    got = assess(tmp_path, healthy(repo="newco/torch-gpu-backend"), cfg=config({"L2": ["newco/torch-gpu-backend"]}))
    a = got["newco/torch-gpu-backend"]
    assert (a.recommended_level, a.device, a.device_placeholder) == ("L3", "gpu", True)
    text = allowlist_proposal([a], D, config({"L2": ["newco/torch-gpu-backend"]}))
    assert yaml.safe_load(text) == {"L3": {"gpu": {"newco/torch-gpu-backend": []}}}
    assert "placeholder" in text


@pytest.mark.parametrize("repo, device", [("acme-ai/torch-npu", "npu"), ("example-org/torch-tpu-backend", "tpu"),
                                          ("x/pytorch_ext_mtia", "mtia"), ("x/torch", "torch")])
def test_placeholder_device(repo, device):
    assert placeholder_device(repo) == device


def test_publishing_an_older_day_does_not_replace_a_newer_one(tmp_path):
    store = Store(str(tmp_path / "out"))
    assert publish_levels(store, "2026-11-10", b'{"day": "2026-11-10"}', "L1: []\n")
    assert not publish_levels(store, "2026-11-09", b'{"day": "2026-11-09"}', "old\n")
    assert publish_levels(store, "2026-11-10", b'{"day": "2026-11-10", "again": 1}', "L2: []\n")
    assert json.loads(store.read_bytes(LEVELS_FILE)) == {"day": "2026-11-10", "again": 1}
    assert store.read_bytes(PROPOSAL_FILE) == b"L2: []\n"


# ---- as Dagster assets ----------------------------------------------------------------------

def test_assets_materialize_from_archive_to_published_files(tmp_path, monkeypatch):
    cfg_path = tmp_path / "relay.yaml"
    cfg_path.write_text(yaml.safe_dump({"allowlist": {"L2": [REPO, "quiet/torch-zpu"]}}))
    monkeypatch.setenv("TORCHCI_CONFIG", str(cfg_path))
    lines = []
    for i in range(12):
        for shard in (1, 2):
            lines.append(record(delivery=f"d{i}", run_id=9000 + i, job=f"shard {shard}",
                                started=f"2026-11-10T{i:02d}:00:00Z", completed=f"2026-11-10T{i:02d}:40:00Z"))
    lines.append(record(repo="stranger/torch-qpu"))
    lines.append(b"{broken")
    write_lines(tmp_path / "archive" / "ci-results" / f"day={D}" / "relay.jsonl.gz", lines)
    resources = {"archive": ArchiveResource(uri=str(tmp_path / "archive")),
                 "lake": LakeResource(uri=str(tmp_path / "lake")),
                 "outputs": OutputsResource(uri=str(tmp_path / "outputs"))}
    result = dg.materialize([ci_result_assets, backend_health_asset, backend_levels_asset], partition_key=D,
                            resources=resources, raise_on_error=False)
    assert result.success
    checks = {(c.asset_key.to_user_string(), c.check_name): c.passed for c in result.get_asset_check_evaluations()}
    assert checks[("ci_result", "reject_rate_below_threshold")] is False  # 1 bad line in 26
    assert checks[("ci_result", "unique_delivery_id_repo_run_id_run_attempt_job_name")]
    assert checks[("backend_health", "unique_repo_window_days")]
    doc = json.loads((tmp_path / "outputs" / LEVELS_FILE).read_text())
    levels = {b["repo"]: (b["current_level"], b["eligible_level"], b["recommended_level"]) for b in doc["backends"]}
    assert levels == {REPO: ("L2", "L3", "L3"), "quiet/torch-zpu": ("L2", "L1", "L2"),
                      "stranger/torch-qpu": (None, "L1", None)}
    proposal = yaml.safe_load((tmp_path / "outputs" / PROPOSAL_FILE).read_text())
    assert proposal == {"L2": ["quiet/torch-zpu"], "L3": {"npu": {REPO: []}}}
    assert sorted(p.name for p in (tmp_path / "lake").iterdir()) == [
        "backend_health", "backend_levels", "ci_callback_minutes", "ci_result", "rejects"]
    # re-running D once a later day is published leaves the files, and says why beside `published`
    later = b'{"day": "2026-11-30", "backends": []}'
    (tmp_path / "outputs" / LEVELS_FILE).write_bytes(later)
    again = dg.materialize([backend_levels_asset], partition_key=D, resources=resources)
    [meta] = [e.materialization.metadata for e in again.get_asset_materialization_events()]
    assert meta["published"].value is False and (tmp_path / "outputs" / LEVELS_FILE).read_bytes() == later
    assert meta["not_published"].value == (f"{LEVELS_FILE} is for a later day than {D}: left as it is, as a re-run "
                                           "of an earlier day never replaces the current outputs")
    assert meta["dagster/row_count"].value == 3  # the lake partition is written all the same


def test_no_downstream_result_in_the_windows_keeps_the_published_levels(tmp_path, monkeypatch):
    """No backend reported for 28 days: a collection outage looks the same, so nobody is demoted."""
    cfg_path = tmp_path / "relay.yaml"
    cfg_path.write_text(yaml.safe_dump({"allowlist": {"L3": {"npu": {REPO: []}}}}))
    monkeypatch.setenv("TORCHCI_CONFIG", str(cfg_path))
    outputs = Store(str(tmp_path / "outputs"))
    published = {LEVELS_FILE: b'{"day": "2026-11-09", "backends": []}', PROPOSAL_FILE: b"L3:\n  npu:\n    x/y: []\n"}
    for path, data in published.items():
        outputs.write_bytes(path, data)
    (tmp_path / "archive" / "ci-results" / f"day={D}").mkdir(parents=True)
    result = dg.materialize([ci_result_assets, backend_health_asset, backend_levels_asset], partition_key=D, resources={
        "archive": ArchiveResource(uri=str(tmp_path / "archive")), "lake": LakeResource(uri=str(tmp_path / "lake")),
        "outputs": OutputsResource(uri=str(tmp_path / "outputs"))})
    assert result.success
    [levels] = [e for e in result.get_asset_materialization_events()
                if e.asset_key.to_user_string() == "backend_levels"]
    assert levels.materialization.metadata["nothing_new"].value == (
        f"no downstream results in the 28 days ending {D}: kept {outputs.display(LEVELS_FILE)}, "
        f"{outputs.display(PROPOSAL_FILE)} as published")
    assert {path: outputs.read_bytes(path) for path in published} == published
    assert Lake.at(str(tmp_path / "lake")).files("backend_levels", [D])  # the day is materialized: nothing assessed


def test_the_health_summary_shows_times_in_whole_seconds_and_a_zero_as_zero():
    """The summary on backend_health's materialization is read at a glance: a queue p90 of 0 s (a
    runner was always free) is 0, not "-" (no data), and times are whole seconds, not 195.0973000000001."""
    row = {"repo": "acme/torch-npu", "jobs": 142, "success_rate": 0.965, "infra_availability": 1.0,
           "queue_p90_s": 0.0, "commit_time_p95_s": 3357.0215, "callback_peak_per_minute": 3}
    slow = {**row, "repo": "acme/torch-tpu", "queue_p90_s": 195.0973000000001, "commit_time_p95_s": None}
    lines = health_summary_md([row, slow], 7).splitlines()
    assert lines[2] == "| acme/torch-npu | 142 | 96.5% | 100.0% | 0 | 3357 | 3 |"
    assert lines[3] == "| acme/torch-tpu | 142 | 96.5% | 100.0% | 195 | - | 3 |"
