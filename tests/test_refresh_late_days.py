"""A spool segment rolled more than a day late (the archive was down, the receiver crash-looped over
a weekend): its deliveries were acknowledged, so GitHub will not send them again, and its day is
neither watched by the refresh sensor nor run daily any more. The real roller marks the day in the
archive, and the real sensor, on a real Dagster instance, refreshes that day once per new state
until a run has succeeded on it; the real refresh job then has the late delivery in the lake."""

import asyncio
import datetime as dt
import json
import logging
import os
import signal
import subprocess
import sys
import time

import dagster as dg
import pytest

from conftest import envelope
from jobs import refresh
from jobs.daily import FINGERPRINT_TAG
from jobs.refresh import RefreshCursor, archive_refresh_job, late_days, late_markers
from receiving import served
from resources.configured import ArchiveResource, LakeResource, OutputsResource
from resources.github import GitHubResource
from resources.lake import Lake, connect
from resources.storage import Store
from test_archive_refresh import add_run, land, tick
from torchci_assets.ingest.landed import day_fingerprint
from torchci_assets.receiver.metrics import Metrics
from torchci_assets.receiver.spool import LATE_FOLDER, Roller, SpoolWriter, is_late, sealed_segments

UTC = dt.timezone.utc
# The runs a test adds are stamped by the wall clock, as the sensor compares them with its own
# requests: the receiver comes back now, with segments of three days ago.
NOW = dt.datetime.now(UTC)
LATE_DAY = (NOW - dt.timedelta(days=3)).date().isoformat()


def job_line(octokit: dict, delivery: str, job_id: int, received: dt.datetime) -> bytes:
    payload = json.loads(json.dumps(octokit["api.github.com"]["workflow_job"][1]))
    payload["workflow_job"]["id"] = job_id
    stamp = received.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return json.dumps(envelope("workflow_job", delivery, payload, received_at=stamp)).encode() + b"\n"


def spool_and_roll(tmp_path, lines: list[tuple[bytes, dt.datetime]], now: dt.datetime, metrics: Metrics):
    """The receiver's writer appends `lines` (as received then), seals, and its roller publishes at `now`."""
    root = tmp_path / "spool"
    roller = Roller(root, Store(str(tmp_path / "archive")), metrics, clock=now.timestamp)
    writer = SpoolWriter(root, "webhooks", "host-a", metrics, roll_interval_s=3600, on_sealed=roller.sealed)
    writer.start()

    async def send():
        for data, received in lines:
            await writer.append(data, received)

    asyncio.run(send())
    writer.close()
    sealed = len(sealed_segments(root))
    assert roller.roll_pending() == (sealed, 0) and sealed_segments(root) == []


# ---- the receiver's side: the marker ----------------------------------------------------------


def test_lateness_is_older_than_yesterday_by_the_utc_day():
    at = dt.datetime(2026, 11, 22, 0, 0, 30, tzinfo=UTC).timestamp()
    assert [is_late(d, at) for d in ("2026-11-20", "2026-11-21", "2026-11-22")] == [True, False, False]


def at_time(day: str, hh: int, mm: int) -> dt.datetime:
    return dt.datetime.fromisoformat(day).replace(hour=hh, minute=mm, tzinfo=UTC)


def test_a_segment_rolled_into_a_day_older_than_yesterday_is_marked_counted_and_logged(tmp_path, octokit, caplog):
    metrics = Metrics()
    received = at_time(LATE_DAY, 23, 50)
    with caplog.at_level(logging.WARNING, logger="torchci.receiver"):
        spool_and_roll(tmp_path, [(job_line(octokit, "late-1", 1, received), received)], NOW, metrics)
    archive = Store(str(tmp_path / "archive"))
    [published] = archive.list_files(f"webhooks/day={LATE_DAY}", (".jsonl.gz",))
    marker = json.loads(archive.read_bytes(f"{LATE_FOLDER}/{LATE_DAY}"))
    assert marker["day"] == LATE_DAY and marker["file"] == published.path
    assert metrics.counter("torchci_receiver_late_segments_total", stream="webhooks") == 1
    assert "torchci_receiver_late_segments_total{stream=\"webhooks\"} 1" in metrics.render()
    assert any(published.path in r.getMessage() and "more than a day late" in r.getMessage() for r in caplog.records)
    # the marker is outside every day folder: it changes no day's fingerprint
    assert day_fingerprint(archive, LATE_DAY).files == 1


def test_a_segment_of_yesterday_leaves_no_marker(tmp_path, octokit):
    metrics = Metrics()
    received = at_time((NOW - dt.timedelta(days=1)).date().isoformat(), 0, 1)  # yesterday: the sensor watches it
    spool_and_roll(tmp_path, [(job_line(octokit, "in-time", 1, received), received)], NOW, metrics)
    assert not (tmp_path / "archive" / LATE_FOLDER).exists()
    assert metrics.counter("torchci_receiver_late_segments_total", stream="webhooks") == 0


def test_a_marker_that_cannot_be_written_keeps_the_segment_until_it_can(tmp_path, octokit):
    """The marker is written before the spool copy goes: no late file is ever left unmarked."""
    (tmp_path / "archive").mkdir()
    blocker = tmp_path / "archive" / LATE_FOLDER
    blocker.write_text("a file where the markers' folder should be")
    root, metrics = tmp_path / "spool", Metrics()
    roller = Roller(root, Store(str(tmp_path / "archive")), metrics, clock=NOW.timestamp)
    writer = SpoolWriter(root, "webhooks", "host-a", metrics, roll_interval_s=3600)
    writer.start()
    received = at_time(LATE_DAY, 23, 50)
    asyncio.run(writer.append(job_line(octokit, "late-1", 1, received), received))
    writer.close()
    assert roller.roll_pending() == (0, 1) and len(sealed_segments(root)) == 1  # kept, to be rolled again
    blocker.unlink()
    assert roller.roll_pending() == (1, 0) and sealed_segments(root) == []
    assert late_markers(Store(str(tmp_path / "archive"))).keys() == {LATE_DAY}
    assert [e.path.rsplit("/", 1)[1] for e in Store(str(tmp_path / "archive")).list_files(
        f"webhooks/day={LATE_DAY}", (".jsonl.gz",))] == [f"host-a-{received.strftime('%Y%m%dT%H%M%S%fZ')}.jsonl.gz"]


def test_the_receiver_marks_what_it_rolls_at_start_from_a_spool_left_days_ago(tmp_path, octokit):
    """`torchci serve`'s own roller (the wall clock): a segment a crash left three days ago is
    published at start, and its day marked."""
    long_ago = dt.datetime.now(UTC) - dt.timedelta(days=3)
    folder = tmp_path / "spool" / "webhooks"
    folder.mkdir(parents=True)
    name = f"test-host-{long_ago.strftime('%Y%m%dT%H%M%S%fZ')}"
    (folder / f"{name}.jsonl.open").write_bytes(job_line(octokit, "left", 5, long_ago))
    with served(tmp_path) as srv:
        day = long_ago.date().isoformat()
        assert Store(str(tmp_path / "archive")).exists(f"{LATE_FOLDER}/{day}")
        assert srv.receiver.metrics.counter("torchci_receiver_late_segments_total", stream="webhooks") == 1


# ---- the sensor's side ---------------------------------------------------------------------------


def test_only_unsettled_marked_days_within_the_partitions_and_not_watched_are_looked_at(tmp_path):
    store = Store(str(tmp_path))
    for day in ("2025-12-30", "2026-11-19", "2026-11-20", "2026-11-22"):
        store.write_bytes(f"{LATE_FOLDER}/{day}", b"{}\n")
    store.write_bytes(f"{LATE_FOLDER}/notes.txt", b"an operator's note\n")
    markers = late_markers(store)
    assert sorted(markers) == ["2025-12-30", "2026-11-19", "2026-11-20", "2026-11-22"]
    watched = ["2026-11-22", "2026-11-23"]
    assert late_days(markers, {}, watched, "2026-01-01", "2026-11-23") == ["2026-11-19", "2026-11-20"]
    settled = {"2026-11-20": markers["2026-11-20"], "2026-11-19": "an older marker"}
    assert late_days(markers, settled, watched, "2026-01-01", "2026-11-23") == ["2026-11-19"]


@pytest.fixture
def later(monkeypatch):
    """Move the sensor's clock `minutes` ahead of the wall clock (the refresh interval counts on it)."""
    def set_to(minutes: float) -> None:
        monkeypatch.setattr(refresh, "clock", lambda: time.time() + minutes * 60)
    set_to(0)
    return set_to


def daily_run_of_the_late_day(instance, archive, octokit):
    """LATE_DAY as its daily run found it at 00:30 the day after (one delivery), and succeeded."""
    received = at_time(LATE_DAY, 10, 0)
    land(archive, f"webhooks/day={LATE_DAY}/host-a-{received.strftime('%Y%m%dT%H%M%S%fZ')}.jsonl",
         job_line(octokit, "in-time", 1, received))
    seen = day_fingerprint(Store(str(archive)), LATE_DAY).short
    add_run(instance, LATE_DAY, dg.DagsterRunStatus.SUCCESS, job="all_assets_daily", **{FINGERPRINT_TAG: seen})
    return seen


def roll_late(tmp_path, octokit, delivery: str, job_id: int) -> None:
    received = at_time(LATE_DAY, 23, 0) + dt.timedelta(seconds=job_id)
    spool_and_roll(tmp_path, [(job_line(octokit, delivery, job_id, received), received)], dt.datetime.now(UTC),
                   Metrics())


def test_a_marked_day_is_refreshed_once_per_state_until_a_run_succeeds_then_left_alone(
        instance, tmp_path, octokit, later):
    archive = tmp_path / "archive"
    daily_run_of_the_late_day(instance, archive, octokit)
    quiet = tick(instance, archive, None)
    assert isinstance(quiet, dg.SkipReason) and LATE_DAY not in quiet.skip_message  # not watched

    roll_late(tmp_path, octokit, "late-1", 2)
    first = tick(instance, archive, None)
    (request,) = first.run_requests
    fp = day_fingerprint(Store(str(archive)), LATE_DAY).short
    assert request.partition_key == LATE_DAY and request.run_key == f"{LATE_DAY}:{fp}:late"
    assert request.tags[FINGERPRINT_TAG] == fp

    later(5)
    run = add_run(instance, LATE_DAY, dg.DagsterRunStatus.STARTED, **request.tags)
    waiting = tick(instance, archive, first.cursor)  # the same state is never requested twice
    assert isinstance(waiting, dg.SkipReason) and f"run {run.run_id} of this partition is in flight" in \
        waiting.skip_message
    instance.report_dagster_event(dg.DagsterEvent(event_type_value="PIPELINE_SUCCESS", job_name=run.job_name),
                                  run_id=run.run_id)
    settles = tick(instance, archive, first.cursor)
    assert not settles.run_requests and f"{LATE_DAY}: late files refreshed" in settles.skip_reason.skip_message
    cursor = RefreshCursor.from_json(settles.cursor)
    assert late_markers(Store(str(archive))) == {} and LATE_DAY not in cursor.days  # the marker is forgotten

    left_alone = tick(instance, archive, settles.cursor)
    assert isinstance(left_alone, dg.SkipReason) and LATE_DAY not in left_alone.skip_message

    later(10)
    roll_late(tmp_path, octokit, "late-2", 3)  # another late segment: a new state
    again = tick(instance, archive, settles.cursor)
    (second,) = again.run_requests
    assert second.partition_key == LATE_DAY and second.run_key != request.run_key
    assert second.tags[FINGERPRINT_TAG] == day_fingerprint(Store(str(archive)), LATE_DAY).short


def test_a_failed_refresh_of_a_marked_day_is_retried_after_1_2_4_8_intervals_then_left_to_an_operator(
        instance, tmp_path, octokit, later):
    """A killed run or an S3 blip heals without anyone; a day that always fails costs 5 runs, then
    the warning names the run to re-execute. The failures end now (wall clock); the sensor's clock
    is moved past each backoff."""
    archive = tmp_path / "archive"
    daily_run_of_the_late_day(instance, archive, octokit)
    roll_late(tmp_path, octokit, "late-1", 2)
    result = tick(instance, archive, None)
    (request,) = result.run_requests
    keys = [request.run_key]
    for attempt in range(1, refresh.MAX_LATE_ATTEMPTS):
        failed = add_run(instance, LATE_DAY, dg.DagsterRunStatus.FAILURE, **request.tags)
        later(1.5 * 2 ** (attempt - 1) - 0.5)  # the backoff not over yet
        early = tick(instance, archive, result.cursor)
        assert isinstance(early, dg.SkipReason), attempt
        assert f"its refresh, run {failed.run_id}, failed; retry {attempt} of {refresh.MAX_LATE_ATTEMPTS - 1} in" \
            in early.skip_message
        later(1.5 * 2 ** (attempt - 1))
        result = tick(instance, archive, result.cursor)
        (request,) = result.run_requests
        assert request.partition_key == LATE_DAY and request.run_key == f"{keys[0]}:retry-{attempt}"
        assert request.tags[FINGERPRINT_TAG] == day_fingerprint(Store(str(archive)), LATE_DAY).short
        keys.append(request.run_key)
    last = add_run(instance, LATE_DAY, dg.DagsterRunStatus.FAILURE, **request.tags)
    later(24 * 60)
    stuck = tick(instance, archive, result.cursor)
    assert isinstance(stuck, dg.SkipReason)
    assert f"{refresh.MAX_LATE_ATTEMPTS} runs failed on them, the last run {last.run_id}: re-execute it" \
        in stuck.skip_message
    assert len(set(keys)) == refresh.MAX_LATE_ATTEMPTS == 5
    assert late_markers(Store(str(archive))).keys() == {LATE_DAY}  # still marked


def test_a_run_of_the_whole_day_after_the_sensors_request_settles_a_marked_day_without_a_retry(
        instance, tmp_path, octokit, later):
    """A backfill (no fingerprint tag) launched after the sensor requested the day as it is now read
    every file of it: the marker is forgotten and the failed refresh is not retried."""
    archive = tmp_path / "archive"
    daily_run_of_the_late_day(instance, archive, octokit)
    roll_late(tmp_path, octokit, "late-1", 2)
    later(-1)  # the request is a minute before the backfill is created
    first = tick(instance, archive, None)
    (request,) = first.run_requests
    add_run(instance, LATE_DAY, dg.DagsterRunStatus.FAILURE, **request.tags)
    add_run(instance, LATE_DAY, dg.DagsterRunStatus.SUCCESS, job="all_assets_daily")
    later(30)
    settles = tick(instance, archive, first.cursor)
    assert not settles.run_requests and f"{LATE_DAY}: late files refreshed" in settles.skip_reason.skip_message
    assert late_markers(Store(str(archive))) == {}


def test_a_run_of_the_whole_day_created_before_the_sensors_request_does_not_settle_it(
        instance, tmp_path, octokit, later):
    archive = tmp_path / "archive"
    daily_run_of_the_late_day(instance, archive, octokit)
    roll_late(tmp_path, octokit, "late-1", 2)
    later(1)  # the request is a minute after the backfill was created
    first = tick(instance, archive, None)
    (request,) = first.run_requests
    add_run(instance, LATE_DAY, dg.DagsterRunStatus.SUCCESS, job="all_assets_daily")
    add_run(instance, LATE_DAY, dg.DagsterRunStatus.FAILURE, **request.tags)
    later(30)
    retried = tick(instance, archive, first.cursor)
    assert [r.run_key for r in retried.run_requests] == [f"{request.run_key}:retry-1"]
    assert late_markers(Store(str(archive))).keys() == {LATE_DAY}


def test_a_marker_rewritten_after_the_run_began_survives_its_success(instance, tmp_path, octokit, later):
    archive = tmp_path / "archive"
    daily_run_of_the_late_day(instance, archive, octokit)
    roll_late(tmp_path, octokit, "late-1", 2)
    first = tick(instance, archive, None)
    (request,) = first.run_requests
    run = add_run(instance, LATE_DAY, dg.DagsterRunStatus.STARTED, **request.tags)
    roll_late(tmp_path, octokit, "late-2", 3)  # while the run reads the day
    marker = late_markers(Store(str(archive)))
    instance.report_dagster_event(dg.DagsterEvent(event_type_value="PIPELINE_SUCCESS", job_name=run.job_name),
                                  run_id=run.run_id)
    later(5)
    again = tick(instance, archive, first.cursor)
    (second,) = again.run_requests
    assert second.tags[FINGERPRINT_TAG] == day_fingerprint(Store(str(archive)), LATE_DAY).short != request.tags[
        FINGERPRINT_TAG]
    assert late_markers(Store(str(archive))) == marker


class RollingWhileDeleting(Store):
    """The archive as a sensor sees it when the receiver rolls another late segment of the day (its
    file, then its marker) between the sensor's check and its delete of the marker."""

    def __init__(self, uri: str, roll):
        super().__init__(uri)
        self.roll = roll

    def delete(self, rel: str) -> None:
        if rel.startswith(f"{LATE_FOLDER}/"):
            self.roll()
        super().delete(rel)


def test_a_marker_the_receiver_rewrites_while_the_sensor_deletes_it_is_written_back(tmp_path, octokit):
    archive = tmp_path / "archive"
    roll_late(tmp_path, octokit, "late-1", 2)
    settled_on = day_fingerprint(Store(str(archive)), LATE_DAY).short
    store = RollingWhileDeleting(str(archive), lambda: roll_late(tmp_path, octokit, "late-2", 3))
    assert refresh.forget_marker(store, LATE_DAY, settled_on) is False
    assert late_markers(Store(str(archive))).keys() == {LATE_DAY}
    assert refresh.forget_marker(Store(str(archive)), LATE_DAY, settled_on) is False  # still not what was settled
    now = day_fingerprint(Store(str(archive)), LATE_DAY).short
    assert refresh.forget_marker(Store(str(archive)), LATE_DAY, now) is True
    assert late_markers(Store(str(archive))) == {}


def test_a_late_file_the_daily_run_already_read_needs_no_refresh(instance, tmp_path, octokit, later):
    """A receiver whose clock ran ahead marked a day whose daily run had the file: settled at once."""
    archive = tmp_path / "archive"
    roll_late(tmp_path, octokit, "late-1", 2)
    seen = day_fingerprint(Store(str(archive)), LATE_DAY).short
    add_run(instance, LATE_DAY, dg.DagsterRunStatus.SUCCESS, job="all_assets_daily", **{FINGERPRINT_TAG: seen})
    result = tick(instance, archive, None)
    assert not result.run_requests and late_markers(Store(str(archive))) == {}


def test_the_sensors_refresh_of_a_marked_day_brings_the_late_delivery_into_the_lake(
        instance, tmp_path, octokit, later):
    """The real refresh job, executed as the sensor requested it: the late job is in workflow_job of
    its day, and the next tick settles the marker."""
    archive, lake, outputs = tmp_path / "archive", tmp_path / "lake", tmp_path / "outputs"
    daily_run_of_the_late_day(instance, archive, octokit)
    roll_late(tmp_path, octokit, "late-1", 2)
    first = tick(instance, archive, None)
    (request,) = first.run_requests
    from torchci_assets.definitions import DOMAINS

    assets = [a for d in DOMAINS for a in d.defs.assets if isinstance(a, dg.AssetsDefinition)]
    defs = dg.Definitions(assets=assets, jobs=[archive_refresh_job], resources={
        "archive": ArchiveResource(uri=str(archive)), "lake": LakeResource(uri=str(lake)),
        "outputs": OutputsResource(uri=str(outputs)), "github": GitHubResource()})  # dry run
    job = defs.resolve_job_def(archive_refresh_job.name)
    assert job.execute_in_process(partition_key=request.partition_key, tags=request.tags, instance=instance).success
    con = connect()
    try:
        Lake.at(str(lake)).register(con, "workflow_job", [LATE_DAY], name="j")
        assert con.execute("SELECT list(id ORDER BY id) FROM j").fetchone()[0] == [1, 2]
    finally:
        con.close()
    later(2)
    settles = tick(instance, archive, first.cursor)
    assert not settles.run_requests and late_markers(Store(str(archive))) == {}


def test_after_a_long_outage_a_tick_looks_at_the_oldest_marked_days_first_and_a_bounded_number(
        instance, tmp_path, octokit, later):
    archive = tmp_path / "archive"
    days = [(NOW - dt.timedelta(days=n)).date().isoformat() for n in range(refresh.MAX_LATE_DAYS + 4, 2, -1)]
    for day in days:
        received = at_time(day, 12, 0)
        land(archive, f"webhooks/day={day}/host-a-{received.strftime('%Y%m%dT%H%M%S%fZ')}.jsonl",
             job_line(octokit, f"d-{day}", 1, received))
        Store(str(archive)).write_bytes(f"{LATE_FOLDER}/{day}", b"{}\n")
    first = tick(instance, archive, None)
    assert [r.partition_key for r in first.run_requests] == days[:refresh.MAX_LATE_DAYS]
    for request in first.run_requests:  # they all succeed: settled, then the waiting days come next
        add_run(instance, request.partition_key, dg.DagsterRunStatus.SUCCESS, **request.tags)
    settles = tick(instance, archive, first.cursor)
    assert not settles.run_requests
    assert sorted(late_markers(Store(str(archive)))) == days[refresh.MAX_LATE_DAYS:]
    rest = tick(instance, archive, settles.cursor)
    assert [r.partition_key for r in rest.run_requests] == days[refresh.MAX_LATE_DAYS:]


class RefusingTheWriteBack(RollingWhileDeleting):
    """As above, and then the archive refuses the sensor's writes of markers (a storage blip, a
    policy changed): the marker it deletes cannot be written back."""

    def write_bytes(self, rel: str, data: bytes) -> None:
        if rel.startswith(f"{LATE_FOLDER}/") and not self.exists(f"{LATE_FOLDER}/{LATE_DAY}"):
            raise OSError("the archive refused the write")
        super().write_bytes(rel, data)


def test_a_marker_whose_write_back_fails_after_its_delete_still_marks_the_day(tmp_path, octokit):
    archive = tmp_path / "archive"
    roll_late(tmp_path, octokit, "late-1", 2)
    settled_on = day_fingerprint(Store(str(archive)), LATE_DAY).short
    before = late_markers(Store(str(archive)))
    store = RefusingTheWriteBack(str(archive), lambda: roll_late(tmp_path, octokit, "late-2", 3))
    with pytest.raises(OSError):
        refresh.forget_marker(store, LATE_DAY, settled_on)
    # the sensor's cursor remembers the marker it saw as settled (`settle`): the day's late-2 file
    # must still show as a marker that is not that one, or the day is never refreshed again
    after = late_markers(Store(str(archive)))
    assert late_days(after, before, [], "2026-01-01", LATE_DAY) == [LATE_DAY]


KILLED_WHILE_FORGETTING = """
import sys, time
from jobs import refresh
from resources.storage import Store

class Paused(Store):
    def delete(self, rel):
        if rel == sys.argv[3]:
            print("deleting", flush=True)
            sys.stdin.readline()  # the receiver rolls a late file meanwhile
        super().delete(rel)
        if rel == sys.argv[3]:
            print("deleted", flush=True)
            time.sleep(60)

refresh.forget_marker(Paused(sys.argv[1]), sys.argv[2], sys.argv[4])
"""


def test_a_sensor_killed_between_a_markers_delete_and_its_write_back_leaves_the_day_marked(tmp_path, octokit):
    archive = tmp_path / "archive"
    roll_late(tmp_path, octokit, "late-1", 2)
    settled_on = day_fingerprint(Store(str(archive)), LATE_DAY).short
    before = late_markers(Store(str(archive)))
    child = subprocess.Popen([sys.executable, "-c", KILLED_WHILE_FORGETTING, str(archive), LATE_DAY,
                              f"{LATE_FOLDER}/{LATE_DAY}", settled_on],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "deleting\n"
        roll_late(tmp_path, octokit, "late-2", 3)  # its file, then its marker, before the delete
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline() == "deleted\n"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    after = late_markers(Store(str(archive)))
    assert late_days(after, before, [], "2026-01-01", LATE_DAY) == [LATE_DAY]


def test_a_run_of_selected_assets_of_the_day_does_not_settle_a_marked_day(instance, tmp_path, octokit, later):
    """Even every asset the refresh updates, materialized from the asset graph: a selection may leave
    out the ingest or one of them, so the day stays marked and its refresh is still requested."""
    from dagster._core.remote_origin import RegisteredCodeLocationOrigin, RemoteJobOrigin, RemoteRepositoryOrigin

    archive = tmp_path / "archive"
    daily_run_of_the_late_day(instance, archive, octokit)
    roll_late(tmp_path, octokit, "late-1", 2)
    later(-1)
    first = tick(instance, archive, None)
    origin = RemoteJobOrigin(RemoteRepositoryOrigin(RegisteredCodeLocationOrigin("torchci"), "__repository__"),
                             "__ASSET_JOB")
    instance.add_run(dg.DagsterRun(job_name="__ASSET_JOB", run_id="selected", status=dg.DagsterRunStatus.SUCCESS,
                                   tags={refresh.PARTITION_TAG: LATE_DAY}, remote_job_origin=origin,
                                   asset_selection=frozenset(dg.AssetKey(k) for k in refresh.REFRESH_ASSETS)))
    later(30)
    again = tick(instance, archive, first.cursor)
    assert [r.partition_key for r in again.run_requests] == [LATE_DAY]  # its refresh still wanted
    assert late_markers(Store(str(archive))).keys() == {LATE_DAY}
