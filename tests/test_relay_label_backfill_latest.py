"""A `ciflow/crcr/<device>` label added after a pull request was closed and reopened on the same
head: the label's check runs show the newest downstream run, not the first one that reported."""

from resources.storage import Store
from tests.fake_github_relay import FakeRelayGitHub
from tests.test_relay_pull_requests import (  # noqa: F401 (fixtures)
    L3, archive_callbacks, callback_record, check_run, client_payload_of, dispatch, event_of, github, label,
    pr_payload, quick_ticks, relay_config, roots)
from torchci_assets.relay.check_runs import recorded_jobs

HEAD = pr_payload("opened")["pull_request"]["head"]["sha"]


def at(minute: int) -> str:
    return f"2026-11-25T10:{minute:02d}:00.000Z"


def dispatched_runs(httpserver, instance, roots, server, runs) -> list[dict]:
    """One dispatch per (action, run id, conclusion), each answered by its downstream run's two
    callbacks (no label yet, so no check run): the callback records, in arrival order."""
    records = []
    for n, (action, run_id, conclusion) in enumerate(runs):
        payload = pr_payload(action)
        payload["pull_request"]["head"]["sha"] = HEAD  # close + reopen: the same head
        assert dispatch(event_of("pull_request", payload), github(httpserver), roots, instance).success
        client_payload = client_payload_of(server, L3)
        for status in ("in_progress", "completed"):
            record = callback_record(L3, "L3", status, client_payload, run_id=run_id,
                                     conclusion=conclusion if status == "completed" else "")
            record["received_at"] = at(10 * n + (status == "completed"))
            assert check_run(record, github(httpserver), roots, instance).success
            records.append(record)
    assert server.check_runs == []
    return records


def test_a_label_after_close_and_reopen_shows_the_newest_run(httpserver, instance, roots):
    server = FakeRelayGitHub(httpserver)
    records = dispatched_runs(httpserver, instance, roots, server,
                              [("opened", 101, "failure"), ("reopened", 303, "success")])
    archive_callbacks(roots, records)
    assert label(httpserver, instance, roots).success
    shown = [(c["external_id"], c["status"], c["conclusion"]) for c in server.check_runs]
    assert shown == [(f"303:{pr_payload('reopened')['pull_request']['number']}", "completed", "success")]


def recorded(roots, *callbacks) -> list[tuple[int, int, str]]:
    """What the archive's record says of the job, from L3 callbacks archived in the given order:
    (run id, attempt, status, minute of arrival) each."""
    client_payload = {"event_type": "pull_request", "delivery_id": "d", "payload": pr_payload("opened")}
    records = []
    for run_id, attempt, status, minute in callbacks:
        record = callback_record(L3, "L3", status, client_payload, run_id=run_id, run_attempt=attempt,
                                 conclusion="success" if status == "completed" else "")
        record["received_at"] = at(minute)
        records.append(record)
    archive_callbacks(roots, records)
    return [(j.run_id, j.run_attempt, j.status) for j in recorded_jobs(Store(roots[1]), HEAD, L3, {"d"})]


def test_the_newest_run_wins_whatever_its_attempt_number(roots):
    assert recorded(roots, (303, 1, "in_progress", 20), (202, 2, "completed", 10), (101, 1, "completed", 5)) \
        == [(303, 1, "in_progress")]


def test_within_one_run_completed_beats_a_late_in_progress(roots):
    assert recorded(roots, (101, 1, "completed", 5), (303, 1, "completed", 20), (303, 1, "in_progress", 21)) \
        == [(303, 1, "completed")]
