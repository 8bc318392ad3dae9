"""Cancelled jobs on main are no evidence for the trunk guardians: cancelling trunk runs during an
incident must neither pin a culprit nor open a "recurrently failing" alert (upstream's autorevert
treats a cancelled attempt as missing; its alert counts failed jobs, not cancelled ones). The
lakes are built by the project's code from the job tables, as the refresh builds them."""

import pyarrow as pa
from hud_lake import DAY, REPO, sha
from test_guardians_attempts import GROUP, JOB, NOW, at, lake_of, trunk, verdicts

from resources.github import GitHubResource
from resources.lake import Lake
from tests.trunk_history import history, row
from torchci_assets.derived.guardians.alert_conditions import recurrently_failing
from torchci_assets.derived.guardians.culprits import judge_all
from torchci_assets.derived.guardians.inputs import main_signal_rows
from torchci_assets.derived.guardians.passes import autorevert_pass
from torchci_assets.derived.guardians.signals import build_history
from torchci_assets.derived.hud.health import COMMIT_HEALTH_SCHEMA
from torchci_assets.guardian_config import AutorevertConfig

GREENS = ((1, "success", 1), (2, "success", 11), (2, "success", 100, 2))


def outcomes(v) -> dict:
    return {sha: ev.outcome for sha, ev in v.signal.events.items()}


def test_runs_cancelled_on_two_commits_pin_no_culprit(tmp_path):
    # an operator cancels the trunk runs of commits 3 and 4; the re-run of commit 3 is cancelled too
    h = trunk(*GREENS, (3, "cancelled", 21), (3, "cancelled", 70, 2), (4, "cancelled", 31))
    lake = lake_of(tmp_path, h)
    v = verdicts(lake)[GROUP]
    assert outcomes(v) == {sha(1): "pass", sha(2): "pass", sha(3): "unknown", sha(4): "unknown"}
    assert (v.kind, v.culprit) == ("ineligible", None)
    summary = autorevert_pass(GitHubResource(), lake, REPO, AutorevertConfig(), NOW)
    assert not summary.confirmed and not summary.taken


def test_a_cancelled_attempt_then_a_success_is_no_flaky_recovery(tmp_path):
    # commit 2's first run was cancelled, its re-run passed: nothing failed there, so the
    # breakage from commit 3 on is still blamed (a flaky signal would blame no one)
    h = trunk((1, "success", 1), (2, "cancelled", 11), (2, "success", 40, 2), (3, "failure", 21),
              (3, "failure", 60, 2), (4, "failure", 31))
    v = verdicts(lake_of(tmp_path, h))[GROUP]
    assert not v.signal.events[sha(2)].mixed and v.signal.events[sha(2)].outcome == "pass"
    assert (v.kind, v.culprit) == ("confirmed", sha(3))


def test_an_infrastructure_failure_then_a_cancelled_re_run_is_no_evidence_either(tmp_path):
    h = trunk(*GREENS)
    for i in (3, 4):
        job = h.job(sha(i), JOB, "failure", workflow="trunk", run_id=100 + i, created=at(10 * i + 1), minutes=20)
        h.test_job(job, 1, infra_reason="runner lost")
        h.job(sha(i), JOB, "cancelled", workflow="trunk", run_id=100 + i, attempt=2, created=at(70 + i), minutes=5)
    v = verdicts(lake_of(tmp_path, h))[GROUP]
    assert outcomes(v)[sha(3)] == outcomes(v)[sha(4)] == "unknown"
    assert (v.kind, v.culprit) == ("ineligible", None)


def test_a_real_failure_then_a_cancelled_re_run_stays_a_failure(tmp_path):
    h = trunk(*GREENS, (3, "failure", 21), (3, "cancelled", 70, 2), (4, "failure", 31))
    v = verdicts(lake_of(tmp_path, h))[GROUP]
    ev = v.signal.events[sha(3)]
    assert (ev.outcome, ev.count("fail"), ev.count("unknown")) == ("fail", 1, 1)
    assert v.culprit == sha(3)


def test_without_the_job_tables_commit_healths_flag_says_the_same():
    cancelled = [{**row(3, "failure"), "cancelled": True}, {**row(4, "failure"), "cancelled": True}]
    (v,) = judge_all(build_history(history("gg") + cancelled))
    assert (v.kind, v.culprit) == ("ineligible", None)
    recovered = [{**row(2, "flaky"), "cancelled": True}, row(3, "failure", attempts=2), row(4, "failure", attempts=2)]
    (v,) = judge_all(build_history(history("gg") + recovered))
    assert (v.kind, v.culprit) == ("confirmed", sha(3))


def test_cancelled_commits_keep_no_recurrently_failing_alert_open(tmp_path):
    cancelled = lake_of(tmp_path / "cancelled", trunk(*GREENS, (3, "cancelled", 21), (4, "cancelled", 31)))
    assert not recurrently_failing(main_signal_rows(cancelled, NOW), REPO, 2).firing
    # passed over, as a pending commit is: failures on either side still make a chain
    mixed = lake_of(tmp_path / "mixed", trunk(*GREENS, (3, "failure", 21), (4, "cancelled", 31),
                                              (4, "failure", 60, 2)))
    assert [r["cancelled"] for r in main_signal_rows(mixed, NOW) if r["sha"] == sha(4)] == [False]
    h = trunk(*GREENS, (3, "failure", 21), (4, "cancelled", 31))
    h.push(5, at(50))
    h.run(105, "trunk", created=at(51))
    h.job(sha(5), JOB, "failure", workflow="trunk", run_id=105, created=at(51), minutes=20)
    alert = recurrently_failing(main_signal_rows(lake_of(tmp_path / "chain", h), NOW), REPO, 2)
    assert alert.lines == (GROUP,)


def test_commit_health_written_before_the_cancelled_flag_is_still_read(tmp_path):
    lake = Lake.at(str(tmp_path / "lake"))
    old = pa.schema([f for f in COMMIT_HEALTH_SCHEMA if f.name != "cancelled"])
    rows = [{**r, "pushed_at": NOW.replace(hour=9), "blocking": True} for r in history("gr")]
    lake.write("commit_health", DAY, pa.Table.from_pylist(rows, schema=old))
    read = main_signal_rows(lake, NOW)
    assert [(r["sha"], r["state"], r.get("cancelled")) for r in read] == [(sha(0), "success", None),
                                                                           (sha(1), "failure", None)]
