"""A refresh that finds no new ci-results file still judges the day at its own instant: a job
pending at the last judgement that has since run past the lost rule is `infrastructure`, as the
same archive ingested at once says; and when no pending job can have crossed it, the refresh
writes nothing."""

import datetime as dt

from conftest import write_lines
from resources.lake import Lake, connect
from resources.storage import Store
from torchci_assets.ingest.ci_results import LOST_AFTER_MS, PENDING_SINCE, ingest_ci_results_day, rejudge_due
from torchci_assets.ingest.increments import Manifest
from test_ci_results import record

DAY = "2026-11-01"
RUNNING_JOB = "npu-ci / test (default, 1, 2)"


def ms(text: str) -> int:
    return int(dt.datetime.fromisoformat(text).replace(tzinfo=dt.timezone.utc).timestamp() * 1000)


def kinds(lake: Lake) -> list[tuple]:
    con = connect()
    try:
        lake.register(con, "ci_result", [DAY], name="t")
        return con.execute("SELECT job_name, status, failure_kind FROM t ORDER BY job_name").fetchall()
    finally:
        con.close()


def archive_with(tmp_path, started: str = "2026-11-01T01:00:00Z") -> Store:
    """A job in progress since `started` that never completes, and one that completed."""
    running = record(status="in_progress", conclusion=None, completed=None, tests={}, started=started,
                     received=started)
    done = record(job="npu-ci / build", received="2026-11-01T00:40:00Z", started="2026-11-01T00:10:00Z",
                  completed="2026-11-01T00:40:00Z")
    write_lines(tmp_path / "archive" / "ci-results" / f"day={DAY}" / "relay-1.jsonl", [running, done])
    return Store(str(tmp_path / "archive"))


def refresh(archive: Store, lake: Lake, at: str):
    return ingest_ci_results_day(archive, lake, DAY, now_ms=ms(at), incremental=True)


def at_once(tmp_path, archive: Store, at: str) -> list[tuple]:
    once = Lake.at(str(tmp_path / "once"))
    ingest_ci_results_day(archive, once, DAY, now_ms=ms(at))
    return kinds(once)


def test_a_refresh_without_new_files_judges_a_job_lost_since_the_last_one_as_at_once(tmp_path):
    archive, lake = archive_with(tmp_path), Lake.at(str(tmp_path / "lake"))
    refresh(archive, lake, "2026-11-01T05:00:00")  # 4 h after its start: pending
    assert ("npu-ci / test (default, 1, 2)", "in_progress", "pending") in kinds(lake)
    report = refresh(archive, lake, "2026-11-01T09:00:00")  # 8 h after: lost, though nothing new landed
    assert report.mode == "increment" and report.files == 0 and report.kinds == {"none": 1, "infrastructure": 1}
    assert kinds(lake) == at_once(tmp_path, archive, "2026-11-01T09:00:00")
    assert (RUNNING_JOB, "in_progress", "infrastructure") in kinds(lake)
    assert Manifest.load(lake, "ci_result", DAY).counts[PENDING_SINCE] is None  # nothing left to re-judge


def test_a_job_crossing_the_rule_exactly_at_the_refresh_is_lost_as_at_once(tmp_path):
    archive, lake = archive_with(tmp_path), Lake.at(str(tmp_path / "lake"))
    refresh(archive, lake, "2026-11-01T06:59:59")
    refresh(archive, lake, "2026-11-01T07:00:00")  # the macro's rule: start + 6 h <= the instant
    assert kinds(lake) == at_once(tmp_path, archive, "2026-11-01T07:00:00")
    assert (RUNNING_JOB, "in_progress", "infrastructure") in kinds(lake)


def test_a_refresh_without_new_files_writes_nothing_while_no_pending_job_can_have_crossed_the_rule(tmp_path):
    archive, lake = archive_with(tmp_path), Lake.at(str(tmp_path / "lake"))
    refresh(archive, lake, "2026-11-01T02:00:00")
    manifest = Manifest.load(lake, "ci_result", DAY)
    assert manifest.counts[PENDING_SINCE] == ms("2026-11-01T01:00:00")
    files = sorted((p.name, p.stat().st_mtime_ns) for p in (tmp_path / "lake").rglob("*") if p.is_file())
    report = refresh(archive, lake, "2026-11-01T06:59:59")  # a second short of the rule
    assert report.mode == "increment" and report.kinds == {} and report.rows == 2
    assert sorted((p.name, p.stat().st_mtime_ns) for p in (tmp_path / "lake").rglob("*") if p.is_file()) == files
    assert Manifest.load(lake, "ci_result", DAY).seq == manifest.seq


def test_a_job_that_cannot_be_lost_before_the_day_ends_is_never_judged_again(tmp_path):
    archive, lake = archive_with(tmp_path, started="2026-11-01T20:00:00Z"), Lake.at(str(tmp_path / "lake"))
    refresh(archive, lake, "2026-11-01T21:00:00")
    seq = Manifest.load(lake, "ci_result", DAY).seq
    refresh(archive, lake, "2026-11-02T03:00:00")  # after midnight: the day is judged at its end
    assert Manifest.load(lake, "ci_result", DAY).seq == seq
    assert (RUNNING_JOB, "in_progress", "pending") in kinds(lake)


def test_a_new_file_after_a_re_judgement_adds_its_callbacks_to_every_one_staged_before(tmp_path):
    archive, lake = archive_with(tmp_path), Lake.at(str(tmp_path / "lake"))
    refresh(archive, lake, "2026-11-01T05:00:00")
    refresh(archive, lake, "2026-11-01T09:00:00")  # re-judged: stages nothing
    late = record(delivery="d2", job="npu-ci / lint", received="2026-11-01T09:30:00Z",
                  started="2026-11-01T09:00:00Z", completed="2026-11-01T09:30:00Z")
    write_lines(tmp_path / "archive" / "ci-results" / f"day={DAY}" / "relay-2.jsonl", [late])
    report = refresh(archive, lake, "2026-11-01T10:00:00")
    assert report.mode == "increment" and report.files == 1 and report.day_lines == 3
    assert kinds(lake) == at_once(tmp_path, archive, "2026-11-01T10:00:00") and len(kinds(lake)) == 3


def test_when_a_day_is_judged_again_without_new_files():
    since = ms("2026-11-01T01:00:00")
    assert not rejudge_due({PENDING_SINCE: since}, since + LOST_AFTER_MS - 1)
    assert rejudge_due({PENDING_SINCE: since}, since + LOST_AFTER_MS)
    assert not rejudge_due({PENDING_SINCE: None}, ms("2026-11-02T00:00:00"))  # nothing pending
    assert rejudge_due({"rows": 2}, since)  # a manifest that does not say: judged once more, then it does
