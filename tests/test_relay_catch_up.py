"""A relay run that failed because GitHub stayed down past its retries is run again by itself, later
and later, until one run succeeds: nothing it was to send waits for a person, and each dispatch is
still sent once. The decision (`plan`) on hand-made run records at chosen instants; then real runs
of `pull_request_dispatch_job` in a real Dagster instance against the fake GitHub on 127.0.0.1, down
and then back, and the sensor itself."""

import datetime as dt

import dagster as dg
import pytest

from jobs.relay_catch_up import catch_up_requests, relay_catch_up_sensor
from jobs.relay_prs import pull_request_dispatch_job
from resources.configured import ArchiveResource, LakeResource
from tests.fake_github_relay import FakeRelayGitHub
from tests.test_relay_outage import RETRIES, Down, deliveries
from tests.test_relay_pull_requests import (  # noqa: F401  (relay_config, quick_ticks: autouse)
    REPOS,
    event_item,
    events,
    github,
    quick_ticks,
    relay_config,
    roots,
)
from torchci_assets.relay.catch_up import CATCH_UP, CATCH_UP_OF, CATCH_UP_WAITS, MAX_CATCH_UPS, RunState, plan

T = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.timezone.utc)
JOB = "pull_request_dispatch_job"
JOBS = frozenset({JOB, "dispatch_job"})
CONFIG = {"ops": {"dispatch_pull_requests": {"config": {"events_json": "[]"}}}}
MIN = dt.timedelta(minutes=1)


def run(run_id: str, status: str = "FAILURE", ended: dt.datetime | None = T, job: str = JOB, **tags) -> RunState:
    return RunState(run_id, job, status, {"torchci/dispatch": "relay", "dagster/sensor_name": "pull_request_sensor",
                                         **tags}, ended if status in ("SUCCESS", "FAILURE", "CANCELED") else None,
                    CONFIG)


def catch_up(root: str, n: int, status: str = "FAILURE", ended: dt.datetime | None = T, **tags) -> RunState:
    return run(f"{root}-c{n}", status, ended, **{CATCH_UP_OF: root, CATCH_UP: str(n)}, **tags)


def test_a_failed_run_is_run_again_five_minutes_after_it_ended_with_its_config_and_its_own_tags():
    assert plan([run("a")], T + 5 * MIN - dt.timedelta(seconds=1), JOBS).due == []
    [due] = plan([run("a")], T + 5 * MIN, JOBS).due
    assert (due.root.run_id, due.number, due.run_key, due.root.run_config) == ("a", 1, "catch-up:a:1", CONFIG)
    # the sensor's tags described the root's launch; the chain's name the root
    assert due.tags() == {"torchci/dispatch": "relay", CATCH_UP_OF: "a", CATCH_UP: "1"}


def test_each_catch_up_waits_longer_after_the_last_one_failed():
    chain = [run("a", ended=T)]
    at = T
    for n, wait in enumerate(CATCH_UP_WAITS, start=1):
        assert plan(chain, at + wait - MIN, JOBS).due == []
        [due] = plan(chain, at + wait, JOBS).due
        assert due.number == n
        at = at + wait + 3 * MIN  # the catch-up ran its retries and failed
        chain.append(catch_up("a", n, ended=at))
    assert [w.total_seconds() / 60 for w in CATCH_UP_WAITS] == [5, 10, 20, 40, 80, 120]
    found = plan(chain, at + dt.timedelta(days=1), JOBS)
    assert found.due == [] and len(found.given_up) == 1
    assert found.given_up[0].startswith(f"a ({JOB}): {MAX_CATCH_UPS} catch-ups failed; ")
    assert "re-execute it from the UI" in found.given_up[0]


@pytest.mark.parametrize("after", [
    [catch_up("a", 1, "SUCCESS")],
    [run("ui", "SUCCESS", **{"dagster/root_run_id": "a", "dagster/parent_run_id": "a"})],  # re-executed by a person
    # a person re-executed the failed catch-up: Dagster names the catch-up its root
    [catch_up("a", 1), run("ui", "SUCCESS", **{"dagster/root_run_id": "a-c1", "dagster/parent_run_id": "a-c1"})],
])
def test_a_chain_with_a_run_that_succeeded_is_settled(after):
    found = plan([run("a"), *after], T + dt.timedelta(hours=5), JOBS)
    assert (found.due, found.waiting, found.given_up) == ([], [], [])


def test_a_run_in_flight_waits_and_a_canceled_or_succeeded_root_or_another_job_s_is_left_alone():
    found = plan([run("a"), catch_up("a", 1, "STARTED", ended=None), run("b", "CANCELED"), run("c", "SUCCESS"),
                  run("d", job="all_assets_daily")], T + dt.timedelta(hours=5), JOBS)
    assert found.due == [] and found.waiting == [f"a ({JOB}): a run of it is queued or running"]


def test_the_oldest_failure_is_caught_up_first():
    due = plan([run("late", ended=T + MIN), run("early", ended=T)], T + dt.timedelta(hours=1), JOBS).due
    assert [d.root.run_id for d in due] == ["early", "late"]


def dispatch_run(config: dict, gh, roots, instance, tags: dict | None = None):
    lake_uri, archive_uri = roots
    return pull_request_dispatch_job.execute_in_process(
        run_config=config, instance=instance, raise_on_error=False, tags=tags,
        resources={"github": gh, "lake": LakeResource(uri=lake_uri), "archive": ArchiveResource(uri=archive_uri)})


def test_after_an_outage_longer_than_the_run_s_retries_its_catch_up_sends_each_dispatch_once(
        httpserver, instance, roots):
    server = FakeRelayGitHub(httpserver)
    down = Down(server, httpserver)
    found = deliveries(2)
    config = {"ops": {"dispatch_pull_requests": {"config": {
        **events(*map(event_item, found)), "max_retries": 0, "claim_settle_s": 0.01, "retry_wait_s": 0.05}}}}
    failed = dispatch_run(config, github(httpserver, max_retries=RETRIES), roots, instance,
                          {"torchci/dispatch": "relay", "dagster/priority": "10"})
    assert not failed.success and down.refused
    now = dt.datetime.now(dt.timezone.utc)

    assert catch_up_requests(instance, now + MIN)[0] == []  # its first wait has not passed
    skipped = relay_catch_up_sensor(dg.build_sensor_context(instance=instance))  # the sensor, at the real time
    assert isinstance(skipped, dg.SkipReason)
    assert f"waiting: {failed.run_id} ({JOB}): catch-up 1 at " in skipped.skip_message

    [request], _ = catch_up_requests(instance, now + CATCH_UP_WAITS[0] + MIN)
    assert (request.job_name, request.run_key, request.run_config) == (JOB, f"catch-up:{failed.run_id}:1", config)
    assert request.tags[CATCH_UP_OF] == failed.run_id and request.tags["torchci/dispatch"] == "relay"

    down.on = False  # GitHub is back
    assert dispatch_run(request.run_config, github(httpserver), roots, instance, request.tags).success
    sent = sorted((repo, body["client_payload"]["delivery_id"]) for repo, body in server.dispatches())
    assert sent == sorted((repo, e.delivery_id) for e in found for repo in REPOS)  # each once
    later, look = catch_up_requests(instance, now + dt.timedelta(hours=6))
    assert later == [] and look.waiting == [] and look.given_up == []  # settled


def test_a_failed_run_a_person_re_executed_with_success_is_not_caught_up(httpserver, instance, roots):
    server = FakeRelayGitHub(httpserver)
    down = Down(server, httpserver)
    config = {"ops": {"dispatch_pull_requests": {"config": {
        **events(*map(event_item, deliveries(1))), "max_retries": 0, "claim_settle_s": 0.01, "retry_wait_s": 0.05}}}}
    failed = dispatch_run(config, github(httpserver, max_retries=RETRIES), roots, instance)
    assert not failed.success
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
    assert [r.run_key for r in catch_up_requests(instance, later)[0]] == [f"catch-up:{failed.run_id}:1"]
    down.on = False
    # the tags the UI gives a re-execution of the failed run
    again = {"dagster/root_run_id": failed.run_id, "dagster/parent_run_id": failed.run_id}
    assert dispatch_run(config, github(httpserver), roots, instance, again).success
    assert catch_up_requests(instance, later)[0] == []
    assert len(server.dispatches()) == len(REPOS)


def test_a_catch_up_tag_someone_edited_counts_as_none_and_the_chain_goes_on():
    """A tick that raised on it would catch up nothing at all."""
    found = plan([run("a"), run("a-c1", **{CATCH_UP_OF: "a", CATCH_UP: "first"})], T + dt.timedelta(hours=1), JOBS)
    assert [(d.root.run_id, d.number) for d in found.due] == [("a", 1)]
