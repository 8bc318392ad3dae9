"""The intra-day refresh: the archive fingerprint, the sensor's rules, the run queue's one run per
partition, and a test report landing -> the disabled list, end to end."""

import datetime as dt
import json
import uuid
from pathlib import Path

import dagster as dg
import orjson
import pytest
from conftest import ram_instance

from jobs import refresh
from jobs.daily import FINGERPRINT_TAG
from jobs.refresh import (PARTITION_TAG, TICK_SECONDS, DayFingerprint, Decision, RefreshCursor, Seen,
                          archive_refresh_job, archive_refresh_sensor, baseline, decide, watched_days)
from resources.configured import ArchiveResource, LakeResource, OutputsResource
from resources.github import GitHubResource
from resources.lake import Lake, connect
from resources.storage import Store
from torchci_assets.cadence import REFRESH_MINUTES_VAR, refresh_interval_s, updates_every
from torchci_assets.ingest.landed import day_fingerprint
from torchci_assets.simulate.generate import generate_archive
from torchci_assets.simulate.landing import land_flaky_test
from torchci_assets.simulate.world import Options

ROOT = Path(__file__).resolve().parent.parent
DAY, YESTERDAY = "2026-11-20", "2026-11-19"
NOON = dt.datetime(2026, 11, 20, 12, 0, tzinfo=dt.timezone.utc).timestamp()
MIN = 60.0


def fp(digest: str = "a" * 64, files: int = 3, day: str = DAY) -> DayFingerprint:
    return DayFingerprint(day, files, 1000 * files, digest)


# ---- the fingerprint ---------------------------------------------------------------------------


def test_the_fingerprint_changes_with_a_new_file_or_a_growing_one_and_nothing_else(roots):
    """Local and S3 alike: names and sizes of every source's day folder, hidden staging files left out."""
    store = roots.archive
    empty = day_fingerprint(store, DAY)
    assert empty.files == 0
    roots.write_bytes(f"webhooks/day={DAY}/a.jsonl", b"{}\n")
    roots.write_bytes(f"test-reports/day={DAY}/1/1/7/test/r.xml", b"<testsuites/>")
    first = day_fingerprint(store, DAY)
    assert (first.files, first.bytes) == (2, 16) and first.digest != empty.digest
    assert day_fingerprint(store, DAY) == first  # listing twice: the same
    roots.write_bytes(f"webhooks/day={YESTERDAY}/old.jsonl", b"{}\n")  # another day
    roots.write_bytes(f"webhooks/day={DAY}/.a.jsonl.tmp-run1-{'0' * 32}", b"partial")  # a writer's staging file
    assert day_fingerprint(store, DAY) == first
    for rel in (f"logs/day={DAY}/55.log", f"ci-results/day={DAY}/c.jsonl", f"test-runs/day={DAY}/t.jsonl"):
        roots.write_bytes(rel, b"x\n")
        changed = day_fingerprint(store, DAY)
        assert changed.digest != first.digest
        first = changed
    roots.write_bytes(f"webhooks/day={DAY}/a.jsonl", b"{}\n{}\n")  # a file still being appended to
    assert day_fingerprint(store, DAY).digest != first.digest


# ---- the rules, as plain functions --------------------------------------------------------------


def test_the_interval_comes_from_the_environment_in_minutes():
    assert refresh_interval_s({}) == 1.5 * MIN  # the default keeps landing -> outputs within minutes
    assert refresh_interval_s({REFRESH_MINUTES_VAR: "2.5"}) == 150
    assert refresh_interval_s({REFRESH_MINUTES_VAR: "0"}) == 0
    for bad in ("soon", "-1", "nan", "inf"):
        with pytest.raises(ValueError, match=REFRESH_MINUTES_VAR):
            refresh_interval_s({REFRESH_MINUTES_VAR: bad})


def test_the_interval_is_said_in_words_as_the_dr_ci_comment_tells_it():
    assert [updates_every(s) for s in (90, 60, 900, 30, 0)] == [
        "every 1.5 minutes", "every minute", "every 15 minutes", "every 30 seconds", "once a day"]


def test_the_receiver_rolls_its_segments_often_enough_for_the_refresh_cadence():
    """Landing -> outputs adds the roll's wait: half a minute at most by default, still a setting."""
    from torchci_assets.receiver.settings import ReceiverSettings

    assert ReceiverSettings.from_env({}).roll_interval_s == 30
    assert ReceiverSettings().roll_interval_s == 30
    assert ReceiverSettings.from_env({"TORCHCI_ROLL_INTERVAL_S": "60"}).roll_interval_s == 60
    assert archive_refresh_sensor.minimum_interval_seconds <= 30


def test_watched_days_are_yesterday_and_today_from_the_first_partition_on():
    just_after_midnight = dt.datetime(2026, 11, 21, 0, 5, tzinfo=dt.timezone.utc).timestamp()
    assert watched_days(just_after_midnight, "2026-01-01") == ["2026-11-20", "2026-11-21"]
    assert watched_days(just_after_midnight, "2026-11-21") == ["2026-11-21"]
    assert watched_days(NOON, "2026-12-01") == []


def test_decide_requests_only_when_something_new_landed_outside_the_interval_and_no_run_is_in_flight():
    now = NOON
    new, old = fp("b" * 64), Seen("a" * 16, now - 20 * MIN)
    assert decide(new, old, old, None, now, 15 * MIN).request
    assert decide(new, None, None, None, now, 15 * MIN) == Decision(DAY, True, f"{DAY}: 3 files, 0.0 MB (first refresh)")
    same = decide(fp("a" * 64), old, old, None, now, 15 * MIN)
    assert not same.request and "nothing new since 2026-11-20 11:40 UTC" in same.reason
    flying = decide(new, old, old, "run-7", now, 15 * MIN)
    assert not flying.request and "run run-7 of this partition is in flight" in flying.reason
    recent = Seen("a" * 16, now - 5 * MIN)
    early = decide(new, recent, recent, None, now, 15 * MIN)
    assert not early.request and "next refresh in 10.0 min" in early.reason
    assert decide(new, recent, recent, None, now, 5 * MIN).request  # the interval is the setting's
    assert not decide(fp(files=0), None, None, None, now, 15 * MIN).request  # nothing landed yet


def test_the_tick_nearest_the_end_of_the_interval_requests_even_a_little_early():
    """Ticks are TICK_SECONDS apart give or take their own time: a tick landing just before the
    interval's end must not push the refresh to the next tick, a whole tick late."""
    new, now = fp("b" * 64), NOON
    for interval in (1 * MIN, 2 * MIN, 15 * MIN):
        just_before = Seen("a" * 16, now - (interval - 1))
        assert decide(new, just_before, just_before, None, now, interval).request, interval
        a_tick_before = Seen("a" * 16, now - (interval - TICK_SECONDS))
        early = decide(new, a_tick_before, a_tick_before, None, now, interval)
        assert not early.request and "next refresh in 0.5 min" in early.reason, interval


def test_the_baseline_is_the_latest_request_the_sensors_or_the_daily_schedules():
    mine, nightly = Seen("a" * 16, NOON - 60 * MIN), Seen("b" * 16, NOON - 10 * MIN)
    assert baseline(mine, nightly) == nightly and baseline(nightly, None) == nightly
    assert baseline(None, mine) == mine and baseline(None, None) is None


def test_the_cursor_round_trips_and_keeps_only_the_watched_days():
    cursor = RefreshCursor({"2026-11-18": Seen("a" * 16, 1.0), YESTERDAY: Seen("b" * 16, 2.0)})
    again = RefreshCursor.from_json(cursor.to_json())
    assert again == cursor and RefreshCursor.from_json(None) == RefreshCursor({})
    moved = cursor.advanced([(DAY, "c" * 16)], 3.0, [YESTERDAY, DAY])
    assert moved.days == {YESTERDAY: Seen("b" * 16, 2.0), DAY: Seen("c" * 16, 3.0)}


# ---- the sensor, on a real instance and a real local archive ------------------------------------


@pytest.fixture
def at(monkeypatch):
    """Set the sensor's clock: at(seconds since epoch)."""
    def set_to(now: float) -> None:
        monkeypatch.setattr(refresh, "clock", lambda: now)
    set_to(NOON)
    return set_to


def tick(instance, archive: Path, cursor: str | None):
    with dg.build_sensor_context(instance=instance, cursor=cursor,
                                 resources={"archive": ArchiveResource(uri=str(archive))}) as ctx:
        return archive_refresh_sensor(ctx)


def land(archive: Path, rel: str, data: bytes = b"{}\n") -> None:
    Store(str(archive)).write_bytes(rel, data)


def add_run(instance, day: str, status: dg.DagsterRunStatus, job: str = "archive_refresh", **tags) -> dg.DagsterRun:
    """A run of `day`'s partition as the daemon would see it (a queued run needs its code location's origin)."""
    from dagster._core.remote_origin import RegisteredCodeLocationOrigin, RemoteJobOrigin, RemoteRepositoryOrigin

    origin = RemoteJobOrigin(RemoteRepositoryOrigin(RegisteredCodeLocationOrigin("torchci"), "__repository__"), job)
    return instance.add_run(dg.DagsterRun(job_name=job, run_id=str(uuid.uuid4()), status=status,
                                          tags={PARTITION_TAG: day, **tags}, remote_job_origin=origin))


def test_within_its_interval_a_day_is_not_listed_and_once_it_ends_it_is(instance, tmp_path, at, monkeypatch):
    """A listing of a PyTorch-sized day is ~1 s and a few requests on S3: a tick that could request
    nothing whatever landed does not make it."""
    monkeypatch.setenv(REFRESH_MINUTES_VAR, "15")
    land(tmp_path, f"webhooks/day={DAY}/h-0900.jsonl.gz")
    land(tmp_path, f"webhooks/day={YESTERDAY}/h-2300.jsonl.gz")
    first = tick(instance, tmp_path, None)
    assert sorted(r.partition_key for r in first.run_requests) == [YESTERDAY, DAY]
    listed = []
    monkeypatch.setattr(refresh, "day_fingerprint", lambda store, day: listed.append(day) or day_fingerprint(store, day))
    land(tmp_path, f"test-reports/day={DAY}/5/1/9/test/r.xml", b"<testsuites/>")
    for minutes in (0.5, 4, 14):  # the last is half a tick and more before the interval's end
        at(NOON + minutes * MIN)
        waiting = tick(instance, tmp_path, first.cursor)
        assert isinstance(waiting, dg.SkipReason) and listed == [], minutes
        assert f"{DAY}: refreshed at 2026-11-20 12:00 UTC; next refresh in {15 - minutes:.1f} min" in waiting.skip_message
    at(NOON + 14.75 * MIN)  # the tick nearest the interval's end lists both days and takes the new file
    later = tick(instance, tmp_path, first.cursor)
    assert sorted(listed) == [YESTERDAY, DAY] and [r.partition_key for r in later.run_requests] == [DAY]
    assert RefreshCursor.from_json(later.cursor).days[YESTERDAY] == RefreshCursor.from_json(first.cursor).days[YESTERDAY]


def test_new_files_request_one_refresh_of_todays_partition_and_nothing_new_skips(instance, tmp_path, at):
    land(tmp_path, f"webhooks/day={DAY}/h-0900.jsonl.gz")
    first = tick(instance, tmp_path, None)
    (request,) = first.run_requests
    expected = day_fingerprint(Store(str(tmp_path)), DAY)
    assert request.partition_key == DAY and request.run_key == f"{DAY}:{expected.short}"
    assert request.tags[FINGERPRINT_TAG] == expected.short and archive_refresh_sensor.job_name == "archive_refresh"
    assert RefreshCursor.from_json(first.cursor).days == {DAY: Seen(expected.short, NOON)}

    at(NOON + 30 * MIN)
    quiet = tick(instance, tmp_path, first.cursor)
    assert isinstance(quiet, dg.SkipReason) and f"{DAY}: nothing new since 2026-11-20 12:00 UTC" in quiet.skip_message


def test_within_the_interval_new_files_wait_and_are_refreshed_once_it_has_passed(instance, tmp_path, at, monkeypatch):
    monkeypatch.setenv(REFRESH_MINUTES_VAR, "15")  # an operator trading freshness for cost
    land(tmp_path, f"webhooks/day={DAY}/h-0900.jsonl.gz")
    first = tick(instance, tmp_path, None)
    at(NOON + 4 * MIN)
    land(tmp_path, f"test-reports/day={DAY}/5/1/9/test/r.xml", b"<testsuites/>")
    waiting = tick(instance, tmp_path, first.cursor)
    assert isinstance(waiting, dg.SkipReason) and "next refresh in 11.0 min" in waiting.skip_message
    at(NOON + 15 * MIN)
    land(tmp_path, f"test-reports/day={DAY}/5/1/10/test/r.xml", b"<testsuites/>")  # more landed meanwhile
    later = tick(instance, tmp_path, first.cursor)  # a skip never moved the cursor
    (request,) = later.run_requests
    now = day_fingerprint(Store(str(tmp_path)), DAY)
    assert request.run_key == f"{DAY}:{now.short}" and request.run_key != first.run_requests[0].run_key
    assert RefreshCursor.from_json(later.cursor).days[DAY] == Seen(now.short, NOON + 15 * MIN)


def test_a_run_of_the_partition_in_flight_defers_the_refresh_until_it_ends(instance, tmp_path, at):
    land(tmp_path, f"webhooks/day={DAY}/h-0900.jsonl.gz")
    flying = add_run(instance, DAY, dg.DagsterRunStatus.STARTED)
    add_run(instance, YESTERDAY, dg.DagsterRunStatus.QUEUED)  # another day's run does not matter
    deferred = tick(instance, tmp_path, None)
    assert isinstance(deferred, dg.SkipReason)
    assert f"run {flying.run_id} of this partition is in flight" in deferred.skip_message
    instance.report_run_failed(flying)
    (request,) = tick(instance, tmp_path, None).run_requests
    assert request.partition_key == DAY


def test_yesterdays_late_files_are_refreshed_but_not_what_the_daily_run_already_read(instance, tmp_path, at):
    at(dt.datetime(2026, 11, 21, 0, 40, tzinfo=dt.timezone.utc).timestamp())  # DAY is yesterday now
    land(tmp_path, f"webhooks/day={DAY}/h-2359.jsonl.gz")
    seen = day_fingerprint(Store(str(tmp_path)), DAY).short
    add_run(instance, DAY, dg.DagsterRunStatus.SUCCESS, job="all_assets_daily", **{FINGERPRINT_TAG: seen})
    skipped = tick(instance, tmp_path, None)
    assert isinstance(skipped, dg.SkipReason) and f"{DAY}: nothing new" in skipped.skip_message
    land(tmp_path, f"webhooks/day={DAY}/h-2359-late.jsonl.gz")  # rolled after the daily run began
    (request,) = tick(instance, tmp_path, None).run_requests
    assert request.partition_key == DAY


def test_files_landing_in_a_day_past_the_partitions_say_the_code_location_needs_a_reload(
        instance, tmp_path, at, monkeypatch):
    # A sample archive that ended yesterday when the code location loaded: its partitions end there.
    monkeypatch.setattr(refresh, "last_partition", lambda: YESTERDAY)
    quiet = tick(instance, tmp_path, None)
    assert isinstance(quiet, dg.SkipReason) and DAY not in quiet.skip_message  # nothing landed today: nothing to say
    land(tmp_path, f"webhooks/day={DAY}/h-0900.jsonl.gz")
    stuck = tick(instance, tmp_path, None)
    assert isinstance(stuck, dg.SkipReason)
    assert f"{DAY}: 1 file landed, but the daily partitions end on {YESTERDAY}" in stuck.skip_message
    assert "reload the code location" in stuck.skip_message and "TORCHCI_FIRST_DAY" in stuck.skip_message
    land(tmp_path, f"webhooks/day={YESTERDAY}/h-2359.jsonl.gz")  # yesterday is still refreshed
    (request,) = tick(instance, tmp_path, None).run_requests
    assert request.partition_key == YESTERDAY


def test_refresh_minutes_zero_turns_it_off(instance, tmp_path, at, monkeypatch):
    land(tmp_path, f"webhooks/day={DAY}/h-0900.jsonl.gz")
    monkeypatch.setenv(REFRESH_MINUTES_VAR, "0")
    off = tick(instance, tmp_path, None)
    assert isinstance(off, dg.SkipReason) and "off" in off.skip_message


def test_the_sensor_is_on_by_default_and_ticks_every_half_minute():
    assert archive_refresh_sensor.default_status == dg.DefaultSensorStatus.RUNNING
    assert archive_refresh_sensor.minimum_interval_seconds == 30


# ---- the run queue: one run per day partition --------------------------------------------------


def test_the_run_queue_starts_one_run_per_day_partition_with_the_projects_dagster_yaml():
    """The daemon's own dequeue logic, with dagster.yaml's limits: a refresh queued behind the
    daily run of the same day waits; another day's run starts."""
    import yaml
    from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import QueuedRunCoordinatorDaemon

    settings = yaml.safe_load((ROOT / "dagster.yaml").read_text())
    overrides = {"concurrency": settings["concurrency"],
                 "run_coordinator": {"module": "dagster._core.run_coordinator", "class": "QueuedRunCoordinator"}}
    with ram_instance(overrides=overrides) as instance:
        add_run(instance, DAY, dg.DagsterRunStatus.STARTED, job="all_assets_daily")
        same_day = add_run(instance, DAY, dg.DagsterRunStatus.QUEUED)
        other_day = add_run(instance, YESTERDAY, dg.DagsterRunStatus.QUEUED)
        daemon = QueuedRunCoordinatorDaemon(interval_seconds=1)
        dequeued = daemon._get_runs_to_dequeue(instance, instance.get_concurrency_config(), None)
        assert [r.run_id for r in dequeued] == [other_day.run_id]
        assert same_day.run_id not in {r.run_id for r in dequeued}


# ---- end to end: a report lands, the sensor's run publishes the new flaky test -----------------

SIM = Options(seed=5, commits_per_day=6, prs_per_day=2, configs=4, test_files=8, tests_per_file=6,
              backends=1, platform_failures=0)
NEW_TEST = ("test_freshness", "TestFreshness", "test_lands_during_the_day")


@pytest.fixture(scope="module")
def refreshed(tmp_path_factory):
    """A simulated day processed by the sensor's first refresh; then a report of a new flaky test
    lands in three of its jobs, and the next tick's run is executed in process."""
    root = tmp_path_factory.mktemp("refresh")
    archive, lake, outputs = root / "archive", root / "lake", root / "outputs"
    generate_archive(archive, [dt.date.fromisoformat(DAY)], SIM, log=lambda _: None)
    from torchci_assets.definitions import DOMAINS

    assets = [a for d in DOMAINS for a in d.defs.assets if isinstance(a, dg.AssetsDefinition)]
    defs = dg.Definitions(assets=assets, jobs=[archive_refresh_job], resources={
        "archive": ArchiveResource(uri=str(archive)), "lake": LakeResource(uri=str(lake)),
        "outputs": OutputsResource(uri=str(outputs)), "github": GitHubResource()})  # dry run
    job = defs.resolve_job_def(archive_refresh_job.name)
    mp = pytest.MonkeyPatch()
    try:
        with ram_instance() as instance:
            mp.setattr(refresh, "clock", lambda: NOON)
            first = tick(instance, archive, None)
            (request,) = first.run_requests
            assert job.execute_in_process(partition_key=request.partition_key, tags=request.tags,
                                          instance=instance).success
            before = orjson.loads((outputs / "stats/disabled-tests-condensed.json").read_bytes())
            landed = land_flaky_test(Store(str(archive)), DAY, main_test_jobs(Lake.at(str(lake)), 3), *NEW_TEST)
            mp.setattr(refresh, "clock", lambda: NOON + 16 * MIN)
            second = tick(instance, archive, first.cursor)
            (again,) = second.run_requests
            run = job.execute_in_process(partition_key=again.partition_key, tags=again.tags, instance=instance)
            assert run.success
            yield {"before": before, "landed": landed, "request": again, "first": request, "outputs": outputs,
                   "after": orjson.loads((outputs / "stats/disabled-tests-condensed.json").read_bytes()),
                   "tags": instance.get_run_by_id(run.run_id).tags}
    finally:
        mp.undo()


def main_test_jobs(lake: Lake, n: int) -> list[tuple[int, int, int]]:
    """(run_id, attempt, job_id) of n successful, non-infra main-branch test jobs on one platform."""
    con = connect()
    try:
        lake.register(con, "test_jobs", [DAY], name="j")
        rows = con.execute("""
            SELECT workflow_id, workflow_run_attempt, job_id FROM j
            WHERE branch_class = 'main' AND job_conclusion = 'success' AND NOT infra_suspect AND platform = 'linux'
            ORDER BY job_id LIMIT ?""", [n]).fetchall()
    finally:
        con.close()
    assert len(rows) == n
    return rows


def test_a_landed_report_reaches_the_disabled_list_through_the_sensors_refresh(refreshed):
    key = "test_lands_during_the_day (__main__.TestFreshness)"
    assert key not in refreshed["before"]
    assert refreshed["after"][key][2] == ["linux"]  # disabled on the platform where it flaked
    assert len(refreshed["landed"]) == 3
    request = refreshed["request"]
    assert request.partition_key == DAY and request.run_key != refreshed["first"].run_key
    assert refreshed["tags"][FINGERPRINT_TAG] == request.tags[FINGERPRINT_TAG]
    assert refreshed["tags"]["torchci/refresh"] == "archive"
    tests_page = (refreshed["outputs"] / "hud" / "tests.html").read_text()
    assert "test_lands_during_the_day" in tests_page  # the HUD shows it too


def test_the_refresh_replaced_the_partition_rather_than_adding_to_it(refreshed, tmp_path):
    """The second refresh added the landed reports to the day: each landed report's test is in test_run once."""
    lake = Lake.at(str(refreshed["outputs"].parent / "lake"))
    con = connect()
    try:
        lake.register(con, "test_run", [DAY], name="t")
        n, dupes = con.execute(f"""
            SELECT count(*) FILTER (WHERE name = '{NEW_TEST[2]}'),
                   count(*) - count(DISTINCT (workflow_id, workflow_run_attempt, job_id, invoking_file, file,
                                              classname, name)) FROM t""").fetchone()
    finally:
        con.close()
    assert (n, dupes) == (3, 0)
    assert json.loads(json.dumps(refreshed["after"]))  # valid JSON in PyTorch's layout
