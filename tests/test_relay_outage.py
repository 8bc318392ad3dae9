"""A GitHub outage (503 to every request, through every retry) met by a relay pass: the pass stops at
its first write GitHub did not answer instead of spending the client's whole retry budget on every
dispatch and check run after it, one after the other; it says so once, and what it did not reach is
left to the run's retry. Once GitHub is back, a run writes each dispatch and check run exactly once.
GitHub is the real HTTP server of tests/fake_github_relay.py on 127.0.0.1."""

import re

from jobs.relay_prs import check_run_job, pull_request_dispatch_job
from resources.lake import Lake
from tests.fake_github_relay import FakeRelayGitHub, reply
from tests.test_relay_pull_requests import (  # noqa: F401  (relay_config, quick_ticks: autouse)
    L4,
    REPOS,
    UPSTREAM,
    callback_record,
    client_payload_of,
    dispatched,
    event_item,
    event_of,
    events,
    execute,
    github,
    pr_payload,
    quick_ticks,
    relay_config,
    roots,
)
from torchci_assets.config import load_config
from torchci_assets.relay import check_runs
from torchci_assets.relay.acting import Writer, act_on_callback, act_within
from torchci_assets.relay.check_runs import ACTIONS_TABLE
from torchci_assets.relay.dispatch import ledger_rows

RETRIES = 2  # the client's retries after the first attempt: 3 requests per write during the outage


class Down:
    """GitHub answering 503 to everything while `on`, else the fake GitHub; counts what the outage got."""

    def __init__(self, server: FakeRelayGitHub, httpserver):
        self.server, self.on, self.refused = server, True, []
        httpserver.clear_all_handlers()
        httpserver.expect_request(re.compile(r"^/repos/.*")).respond_with_handler(self)

    def __call__(self, request):
        if not self.on:
            return self.server(request)
        self.refused.append((request.method, request.path))
        return reply(503, {"message": "Service Unavailable"})


def said(result, instance) -> list[str]:
    """The run's log lines that say GitHub is unavailable."""
    return [r.user_message for r in instance.all_logs(result.run_id) if "GitHub was unavailable" in r.user_message]


def deliveries(n: int) -> list:
    return [event_of("pull_request", pr_payload(action), f"outage-{action}")
            for action in ("opened", "synchronize", "closed")[:n]]


def test_dispatches_stop_at_the_first_github_did_not_answer_and_are_each_sent_once_after(
        httpserver, instance, roots):
    server = FakeRelayGitHub(httpserver)
    down = Down(server, httpserver)
    found = deliveries(2)
    config = {**events(*map(event_item, found)), "max_retries": 0}
    result = execute(pull_request_dispatch_job, "dispatch_pull_requests", config,
                     github(httpserver, max_retries=RETRIES), roots, instance)
    assert not result.success
    # one downstream's budget spent, not eight
    assert down.refused == [("POST", f"/repos/{REPOS[0]}/dispatches")] * (RETRIES + 1)
    lines = said(result, instance)
    assert len(lines) == 1 and lines[0].startswith("GitHub was unavailable (")
    assert "nothing lost; 8 dispatch(es) or check run(s) wait for the run's retry" in lines[0]

    down.on = False
    for _ in range(2):  # the retry, then a re-execution that finds everything acknowledged
        assert execute(pull_request_dispatch_job, "dispatch_pull_requests", config, github(httpserver),
                       roots, instance).success
    sent = sorted((repo, body["client_payload"]["delivery_id"]) for repo, body in server.dispatches())
    assert sent == sorted((repo, e.delivery_id) for e in found for repo in REPOS)


def test_check_runs_stop_at_the_first_github_did_not_answer_and_are_each_created_once_after(
        httpserver, instance, roots, monkeypatch):
    server = FakeRelayGitHub(httpserver)
    dispatched(server, httpserver, instance, roots)
    cp = client_payload_of(server, L4)
    records = [callback_record(L4, "L4", "completed", cp, conclusion="success", job_name=f"job-{i}")
               for i in range(3)]
    down = Down(server, httpserver)
    config = {**events(*records), "max_retries": 1}
    result = execute(check_run_job, "create_upstream_check_runs", config, github(httpserver, max_retries=RETRIES),
                     roots, instance)
    assert not result.success
    # try 1: job-0's POST (never resent blindly); try 2 starts one further on: job-1's POST
    assert [p for _, p in down.refused] == [f"/repos/{UPSTREAM}/check-runs"] * 2
    lines = said(result, instance)  # once per try
    assert len(lines) == 2 and all(m.startswith("GitHub was unavailable (")
                                   and "nothing lost; 3 dispatch(es) or check run(s) wait for the run's retry" in m
                                   for m in lines)

    down.on = False
    monkeypatch.setattr(check_runs, "IN_FLIGHT_S", 0.0)  # the failed run's claim is stale by the time it is re-run
    for _ in range(2):
        assert execute(check_run_job, "create_upstream_check_runs", config, github(httpserver),
                       roots, instance).success
    assert sorted(server.check_run_names()) == [(f"crcr/{L4}/upstream-ci/job-{i}", "completed", "success")
                                                for i in range(3)]
    rows = ledger_rows(Lake.at(roots[0]), cp["payload"]["pull_request"]["head"]["sha"], table=ACTIONS_TABLE)
    assert sum(1 for r in rows if r["action"] == "check_run" and r["outcome"] == "ok") == 3
    assert sum(1 for m, p, _ in server.requests if m == "POST" and p.endswith("/check-runs")) == 3  # once each


def test_a_tick_leaves_the_rest_to_its_run_at_the_first_github_did_not_answer(httpserver, instance, roots):
    server = FakeRelayGitHub(httpserver)
    dispatched(server, httpserver, instance, roots)
    cp = client_payload_of(server, L4)
    records = [callback_record(L4, "L4", "in_progress", cp, job_name=f"job-{i}") for i in range(3)]
    writer = Writer(github(httpserver, max_retries=RETRIES), Lake.at(roots[0]), None, load_config(), "tick")
    calls = []

    def act(record):
        calls.append(record)
        return act_on_callback(record, writer)

    down = Down(server, httpserver)
    acted = act_within(records, act, lambda r: r["untrusted"]["callback_payload"]["workflow"]["job_name"], 10.0,
                       outage=writer.outage)
    assert calls == records[:1] and acted.left == records and len(down.refused) == 1
    assert acted.outage.startswith("GitHub was unavailable (")
    assert "nothing lost; 3 dispatch(es) or check run(s) wait for the run's retry" in acted.outage


def test_a_repository_github_alone_fails_on_does_not_hold_the_others_back(httpserver, instance, roots):
    server = FakeRelayGitHub(httpserver, **{REPOS[0]: [reply(502, {"message": "Server Error"})]})
    found = deliveries(1)
    config = {**events(*map(event_item, found)), "max_retries": 1}
    result = execute(pull_request_dispatch_job, "dispatch_pull_requests", config,
                     github(httpserver, max_retries=RETRIES), roots, instance)
    assert not result.success  # REPOS[0] never answered
    acknowledged = [repo for repo, _ in server.dispatches() if repo != REPOS[0]]
    assert acknowledged == REPOS[1:]  # by the retry, which tried REPOS[0] last


def test_a_check_run_github_alone_fails_on_does_not_hold_the_others_back(httpserver, instance, roots):
    server = FakeRelayGitHub(httpserver)
    dispatched(server, httpserver, instance, roots)
    cp = client_payload_of(server, L4)
    records = [callback_record(L4, "L4", "completed", cp, conclusion="success", job_name=f"job-{i}")
               for i in range(3)]

    def failing_on_job_0(request):
        if request.method == "POST" and request.path.endswith("/check-runs") and b"/job-0" in request.data:
            return reply(500, {"message": "Server Error"})
        return server(request)

    httpserver.clear_all_handlers()
    httpserver.expect_request(re.compile(r"^/repos/.*")).respond_with_handler(failing_on_job_0)
    result = execute(check_run_job, "create_upstream_check_runs", {**events(*records), "max_retries": 1},
                     github(httpserver, max_retries=RETRIES), roots, instance)
    assert not result.success
    assert sorted(server.check_run_names()) == [(f"crcr/{L4}/upstream-ci/job-{i}", "completed", "success")
                                                for i in (1, 2)]
