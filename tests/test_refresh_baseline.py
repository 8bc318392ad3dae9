"""The refresh sensor's baseline of a day: only what a run of the day succeeded on, so a daily run
that failed (or a refresh that failed, then a daily run that failed) never hides files from the
refresh. The real sensor, on a real Dagster instance and a real local archive."""

import datetime as dt

import dagster as dg

from jobs.daily import FINGERPRINT_TAG
from jobs.refresh import RefreshCursor, Seen, daily_run_seen, failed_daily_run
from resources.storage import Store
from torchci_assets.ingest.landed import day_fingerprint
from test_archive_refresh import DAY, MIN, add_run, at, land, tick  # noqa: F401 (at: a fixture)

LAST_REFRESH = dt.datetime(2026, 11, 20, 23, 50, tzinfo=dt.timezone.utc).timestamp()
AFTER_DAILY = dt.datetime(2026, 11, 21, 0, 45, tzinfo=dt.timezone.utc).timestamp()


def last_refresh_of_the_day(instance, tmp_path, at, outcome: dg.DagsterRunStatus):
    """The sensor's last request of DAY at 23:50, and its run ending with `outcome`."""
    at(LAST_REFRESH)
    land(tmp_path, f"webhooks/day={DAY}/h-2340.jsonl.gz")
    first = tick(instance, tmp_path, None)
    (request,) = first.run_requests
    add_run(instance, DAY, outcome, **request.tags, **{"dagster/run_key": request.run_key})
    return first, request


def test_a_failed_daily_run_is_no_baseline_and_the_files_it_saw_are_refreshed(instance, tmp_path, at):
    first, request = last_refresh_of_the_day(instance, tmp_path, at, dg.DagsterRunStatus.SUCCESS)
    land(tmp_path, f"webhooks/day={DAY}/h-2359.jsonl.gz")  # lands after the last refresh
    seen = day_fingerprint(Store(str(tmp_path)), DAY).short
    assert seen != request.tags[FINGERPRINT_TAG]
    failed = add_run(instance, DAY, dg.DagsterRunStatus.FAILURE, job="all_assets_daily", **{FINGERPRINT_TAG: seen})
    assert daily_run_seen(instance, DAY) is None
    at(AFTER_DAILY)
    result = tick(instance, tmp_path, first.cursor)
    assert not isinstance(result, dg.SkipReason), result.skip_message
    (again,) = result.run_requests
    assert again.partition_key == DAY and again.tags[FINGERPRINT_TAG] == seen
    assert again.run_key == f"{DAY}:{seen}:after-{failed.run_id}"
    at(AFTER_DAILY + 1.5 * MIN)  # the interval over, the day is listed again: nothing new, the failed run answered
    quiet = tick(instance, tmp_path, result.cursor)  # once: the cursor remembers the failed run it answered
    assert isinstance(quiet, dg.SkipReason) and f"{DAY}: nothing new" in quiet.skip_message


def test_a_successful_daily_run_is_the_baseline_and_one_in_flight_defers_until_it_ends(instance, tmp_path, at):
    first, _ = last_refresh_of_the_day(instance, tmp_path, at, dg.DagsterRunStatus.SUCCESS)
    land(tmp_path, f"webhooks/day={DAY}/h-2359.jsonl.gz")
    seen = day_fingerprint(Store(str(tmp_path)), DAY).short
    daily = add_run(instance, DAY, dg.DagsterRunStatus.STARTED, job="all_assets_daily", **{FINGERPRINT_TAG: seen})
    at(AFTER_DAILY)
    waiting = tick(instance, tmp_path, first.cursor)
    assert isinstance(waiting, dg.SkipReason) and f"run {daily.run_id} of this partition is in flight" in \
        waiting.skip_message
    instance.report_dagster_event(dg.DagsterEvent(event_type_value="PIPELINE_SUCCESS", job_name="all_assets_daily"),
                                  run_id=daily.run_id)  # as the run itself reports its end
    assert daily_run_seen(instance, DAY).fingerprint == seen
    quiet = tick(instance, tmp_path, first.cursor)
    assert isinstance(quiet, dg.SkipReason) and f"{DAY}: nothing new" in quiet.skip_message


def test_a_failed_refresh_then_a_failed_daily_run_refresh_the_same_files_once_more(instance, tmp_path, at):
    first, request = last_refresh_of_the_day(instance, tmp_path, at, dg.DagsterRunStatus.FAILURE)
    at(AFTER_DAILY)  # nothing landed since: the daily run saw what the failed refresh was asked for
    failed = add_run(instance, DAY, dg.DagsterRunStatus.FAILURE, job="all_assets_daily",
                     **{FINGERPRINT_TAG: request.tags[FINGERPRINT_TAG]})
    result = tick(instance, tmp_path, first.cursor)
    assert not isinstance(result, dg.SkipReason), result.skip_message
    (again,) = result.run_requests
    assert again.run_key == f"{request.run_key}:after-{failed.run_id}" != request.run_key  # a key Dagster has not seen
    assert RefreshCursor.from_json(result.cursor).days[DAY] == Seen(request.tags[FINGERPRINT_TAG], AFTER_DAILY,
                                                                    failed.run_id)
    at(AFTER_DAILY + 1.5 * MIN)  # the interval over, the day is listed again: nothing new, the failed run answered
    quiet = tick(instance, tmp_path, result.cursor)
    assert isinstance(quiet, dg.SkipReason) and f"{DAY}: nothing new" in quiet.skip_message


def test_a_failed_daily_run_calls_for_one_refresh_whatever_lands_after_it(instance, tmp_path, at):
    first, request = last_refresh_of_the_day(instance, tmp_path, at, dg.DagsterRunStatus.SUCCESS)
    add_run(instance, DAY, dg.DagsterRunStatus.FAILURE, job="all_assets_daily",
            **{FINGERPRINT_TAG: request.tags[FINGERPRINT_TAG]})
    at(AFTER_DAILY)
    answered = tick(instance, tmp_path, first.cursor)
    assert answered.run_requests
    at(AFTER_DAILY + 10 * 60)
    land(tmp_path, f"webhooks/day={DAY}/h-0050.jsonl.gz")  # rolled late: an ordinary refresh
    later = tick(instance, tmp_path, answered.cursor)
    assert [r.run_key for r in later.run_requests] == [f"{DAY}:{day_fingerprint(Store(str(tmp_path)), DAY).short}"]
    at(AFTER_DAILY + 20 * 60)
    quiet = tick(instance, tmp_path, later.cursor)  # the failure stays answered
    assert isinstance(quiet, dg.SkipReason) and f"{DAY}: nothing new" in quiet.skip_message


def test_the_cursor_keeps_the_failed_run_it_answered_and_reads_a_cursor_without_one():
    cursor = RefreshCursor({DAY: Seen("a" * 16, 1.0, "run-1")})
    assert RefreshCursor.from_json(cursor.to_json()) == cursor
    assert RefreshCursor.from_json('{"%s":{"fingerprint":"%s","at":2.0}}' % (DAY, "b" * 16)).days == {
        DAY: Seen("b" * 16, 2.0)}


def test_only_the_latest_finished_daily_run_can_call_for_a_refresh(instance):
    assert failed_daily_run(instance, DAY) is None
    failed = add_run(instance, DAY, dg.DagsterRunStatus.FAILURE, job="all_assets_daily")
    add_run(instance, DAY, dg.DagsterRunStatus.FAILURE)  # a refresh's failure is not the daily run's
    assert failed_daily_run(instance, DAY) == failed.run_id
    canceled = add_run(instance, DAY, dg.DagsterRunStatus.CANCELED, job="all_assets_daily")
    assert failed_daily_run(instance, DAY) == canceled.run_id
    add_run(instance, DAY, dg.DagsterRunStatus.STARTED, job="all_assets_daily")  # in flight: in_flight_run's
    assert failed_daily_run(instance, DAY) == canceled.run_id
    add_run(instance, DAY, dg.DagsterRunStatus.SUCCESS, job="all_assets_daily")  # re-executed, and it worked
    assert failed_daily_run(instance, DAY) is None
