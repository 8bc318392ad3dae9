"""The upstream check runs' `external_id` in the cross-repo CI relay's form, `<run_id>:<pr number>`
(`callback_handler._create_upstream_check_run`, `event_handler._handle_pr_labeled`), and the check runs
an earlier version of this relay created with the bare `<run_id>` still found, completed and re-run.
GitHub is the real HTTP server of tests/fake_github_relay.py on 127.0.0.1."""

from jobs.relay_prs import rerun_job
from resources.lake import Lake
from tests.fake_github_relay import FakeRelayGitHub
from tests.test_relay_pull_requests import (  # noqa: F401  (relay_config, quick_ticks: autouse)
    L3,
    L4,
    UPSTREAM,
    archive_callbacks,
    callback_record,
    check_run,
    checks_example,
    client_payload_of,
    dispatched,
    event_item,
    event_of,
    events,
    execute,
    github,
    label,
    quick_ticks,
    relay_config,
    roots,
    sweep,
)
from torchci_assets.relay import check_runs
from torchci_assets.relay.check_runs import ACTIONS_TABLE, action_row, job_state, record_action
from torchci_assets.relay.dispatch import ledger_rows

BUILD = f"crcr/{L4}/upstream-ci/build"


def pr_number(cp: dict) -> int:
    return cp["payload"]["pull_request"]["number"]


def test_check_runs_carry_the_relays_run_id_and_pull_request_number(httpserver, instance, roots):
    server = FakeRelayGitHub(httpserver)
    dispatched(server, httpserver, instance, roots)
    cp = client_payload_of(server, L4)
    for status, conclusion in (("in_progress", ""), ("completed", "success")):
        assert check_run(callback_record(L4, "L4", status, cp, conclusion=conclusion), github(httpserver),
                         roots, instance).success
    assert [c["external_id"] for c in server.check_runs] == [f"7001:{pr_number(cp)}"] * 2


def test_a_labels_backfilled_check_run_carries_the_relays_form_too(httpserver, instance, roots):
    server = FakeRelayGitHub(httpserver)
    dispatched(server, httpserver, instance, roots)
    cp = client_payload_of(server, L3)
    archive_callbacks(roots, [callback_record(L3, "L3", "in_progress", cp, run_id=7005)])
    assert label(httpserver, instance, roots).success
    assert [c["external_id"] for c in server.check_runs] == [f"7005:{pr_number(cp)}"]


def old_check_run_in_doubt(server: FakeRelayGitHub, roots, cp: dict) -> dict:
    """An in-progress check run the previous version created (`external_id` the bare run id), whose
    answer it lost: GitHub has it, the ledger only its claim."""
    job = job_state(callback_record(L4, "L4", "in_progress", cp))
    created = server.add_check_run(job.name, job.head_sha, "7001", status="in_progress", conclusion=None)
    record_action(Lake.at(roots[0]), {**action_row(job, UPSTREAM, "earlier-run"), "outcome": "claimed",
                                      "attempt_id": "earlier-attempt"})
    return created


def test_a_check_run_created_with_the_bare_run_id_is_found_then_completed(httpserver, instance, roots, monkeypatch):
    server = FakeRelayGitHub(httpserver)
    dispatched(server, httpserver, instance, roots)
    cp = client_payload_of(server, L4)
    old = old_check_run_in_doubt(server, roots, cp)
    monkeypatch.setattr(check_runs, "IN_FLIGHT_S", 0.0)  # the earlier run is long dead
    found = check_run(callback_record(L4, "L4", "in_progress", cp), github(httpserver), roots, instance)
    assert list(found.output_for_node("create_upstream_check_runs").values()) == ["found"]
    assert len(server.check_runs) == 1
    rows = ledger_rows(Lake.at(roots[0]), old["head_sha"], table=ACTIONS_TABLE)
    assert rows[-1]["outcome"] == "ok" and rows[-1]["github_id"] == old["id"]
    assert check_run(callback_record(L4, "L4", "completed", cp, conclusion="success"), github(httpserver),
                     roots, instance).success
    assert server.check_run_names() == [(BUILD, "in_progress", None), (BUILD, "completed", "success")]


def test_a_check_run_created_with_the_bare_run_id_is_timed_out_and_re_run(httpserver, instance, roots, monkeypatch):
    server = FakeRelayGitHub(httpserver)
    dispatched(server, httpserver, instance, roots)
    cp = client_payload_of(server, L4)
    old = old_check_run_in_doubt(server, roots, cp)
    monkeypatch.setattr(check_runs, "IN_FLIGHT_S", 0.0)
    result = sweep(github(httpserver), roots, instance, timeout_s=0.001)
    assert result.success and list(result.output_for_node("time_out_zombie_check_runs").values()) == ["created"]
    assert server.check_run_names() == [(BUILD, "in_progress", None), (BUILD, "completed", "timed_out")]
    payload = checks_example("check_run")
    payload["check_run"].update(name=old["name"], external_id=old["external_id"], head_sha=old["head_sha"])
    rerun = execute(rerun_job, "rerun_downstream", events(event_item(event_of("check_run", payload, "rr-old"))),
                    github(httpserver), roots, instance)
    assert rerun.output_for_node("rerun_downstream") == {f"{L4}#7001": "rerun"}
    assert server.reruns("rerun-failed-jobs") == [(L4, 7001)]
