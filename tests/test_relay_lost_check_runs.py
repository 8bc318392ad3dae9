"""An in-progress upstream check run whose create went unanswered on every try of its run (GitHub
timed out or answered 5xx each time, and may or may not have created it) is left claimed in the
ledger with no outcome. The zombie sweep must still see it: otherwise a check run GitHub did create
stays in progress on the pull request for good when the downstream job dies. The sweep completes it
as timed_out exactly once, under its own retries, a lost answer, two sweeps racing and dry run.
GitHub is the real HTTP server of tests/fake_github_relay.py on 127.0.0.1."""

import datetime as dt
import re
import threading

import pytest

from resources.github import GitHubResource
from resources.lake import Lake
from tests.fake_github_relay import FakeRelayGitHub, reply
from tests.test_relay_pull_requests import (  # noqa: F401  (relay_config, quick_ticks: autouse)
    L4,
    callback_record,
    check_run_job,
    client_payload_of,
    dispatched,
    execute,
    events,
    github,
    quick_ticks,
    relay_config,
    retries,
    roots,
    sweep,
    utc_now,
)
from torchci_assets.config import load_config
from torchci_assets.relay import check_runs as check_runs_module
from torchci_assets.relay.acting import Writer
from torchci_assets.relay.check_runs import ACTIONS_TABLE
from torchci_assets.relay.dispatch import ledger_rows
from torchci_assets.relay.zombies import time_out, zombie_jobs

BUILD = f"crcr/{L4}/upstream-ci/build"
OP = "time_out_zombie_check_runs"
JUST_NOW = dt.timedelta(milliseconds=1)  # a timeout every check run opened so far is past


class Outage:
    """GitHub answering 502 to everything while `on`; a check-run POST is still taken when `creates`
    (GitHub committed it and lost the answer)."""

    def __init__(self, server: FakeRelayGitHub, httpserver, creates: bool):
        self.server, self.creates, self.on = server, creates, True
        httpserver.clear_all_handlers()
        httpserver.expect_request(re.compile(r"^/repos/.*")).respond_with_handler(self)

    def __call__(self, request):
        if not self.on:
            return self.server(request)
        if self.creates and request.method == "POST" and request.path.endswith("/check-runs"):
            self.server(request)
        return reply(502, {"message": "Server Error"})


def lost_in_progress(httpserver, instance, roots, creates: bool):
    """Run 7001's `build` reported in_progress; its check run's run tried three times, GitHub
    answering none of them. Returns the fake GitHub, back up, and the head sha."""
    server = FakeRelayGitHub(httpserver)
    event = dispatched(server, httpserver, instance, roots)
    record = callback_record(L4, "L4", "in_progress", client_payload_of(server, L4))
    outage = Outage(server, httpserver, creates)
    result = execute(check_run_job, "create_upstream_check_runs", {**events(record), "max_retries": 2},
                     github(httpserver, max_retries=1), roots, instance)
    assert not result.success and retries(result) == 2
    outage.on = False
    rows = ledger_rows(Lake.at(roots[0]), event.sha, table=ACTIONS_TABLE)
    assert {r["outcome"] for r in rows if r["action"] == "check_run"} == {"claimed"}
    return server, event.sha


def assert_timed_out_once(server, sha: str, httpserver, instance, roots) -> None:
    """A sweep completes the head's in-progress check run as timed_out, and the next sweep sends nothing."""
    result = sweep(github(httpserver), roots, instance, timeout_s=0.001)
    assert result.success and list(result.output_for_node(OP).values()) == ["created"]
    assert server.check_run_names(sha) == [(BUILD, "in_progress", None), (BUILD, "completed", "timed_out")]
    assert sweep(github(httpserver), roots, instance, timeout_s=0.001).output_for_node(OP) == {}
    assert len(server.check_runs) == 2


def test_an_in_progress_check_run_github_took_without_answering_is_timed_out_once(httpserver, instance, roots):
    server, sha = lost_in_progress(httpserver, instance, roots, creates=True)
    assert server.check_run_names(sha) == [(BUILD, "in_progress", None)]  # on the pull request, for good
    assert_timed_out_once(server, sha, httpserver, instance, roots)


def test_an_in_progress_check_run_github_never_created_is_timed_out_once(httpserver, instance, roots):
    """Nobody can tell from the ledger whether it exists: the job started and never completed, so the
    pull request gets what the relay would have shown once its sweeper ran, a timed_out check run."""
    server, sha = lost_in_progress(httpserver, instance, roots, creates=False)
    assert server.check_run_names(sha) == []
    assert list(sweep(github(httpserver), roots, instance, timeout_s=0.001).output_for_node(OP).values()) == [
        "created"]
    assert sweep(github(httpserver), roots, instance, timeout_s=0.001).output_for_node(OP) == {}
    assert server.check_run_names(sha) == [(BUILD, "completed", "timed_out")]


def test_the_sweeps_own_lost_answer_is_looked_up_not_sent_twice(httpserver, instance, roots):
    server, sha = lost_in_progress(httpserver, instance, roots, creates=True)
    server.crash_after.add("check-runs")  # the timed_out one is created, its answer a 502
    result = sweep(github(httpserver), roots, instance, timeout_s=0.001)
    assert result.success and retries(result) == 1
    assert list(result.output_for_node(OP).values()) == ["found"]
    assert server.check_run_names(sha) == [(BUILD, "in_progress", None), (BUILD, "completed", "timed_out")]


def test_a_sweep_github_never_answered_is_finished_by_the_next_one_once(httpserver, instance, roots, monkeypatch):
    server, sha = lost_in_progress(httpserver, instance, roots, creates=True)
    outage = Outage(server, httpserver, creates=False)
    failed = sweep(github(httpserver, max_retries=1), roots, instance, timeout_s=0.001, max_retries=1)
    assert not failed.success and retries(failed) == 1
    outage.on = False
    monkeypatch.setattr(check_runs_module, "IN_FLIGHT_S", 0.0)  # ten minutes later, at the next sweep
    result = sweep(github(httpserver), roots, instance, timeout_s=0.001)
    assert result.success and list(result.output_for_node(OP).values()) == ["created"]
    assert sweep(github(httpserver), roots, instance, timeout_s=0.001).output_for_node(OP) == {}
    assert server.check_run_names(sha) == [(BUILD, "in_progress", None), (BUILD, "completed", "timed_out")]


def test_two_sweeps_racing_time_it_out_once(httpserver, instance, roots):
    server, sha = lost_in_progress(httpserver, instance, roots, creates=True)
    lake, config, outcomes = Lake.at(roots[0]), load_config(), []
    [zombie] = zombie_jobs(lake, utc_now(), JUST_NOW)
    together = threading.Barrier(2)

    def one_sweep(name: str) -> None:
        w = Writer(github(httpserver), lake, None, config, name, settle_s=0.3)
        together.wait()
        outcomes.extend(time_out(zombie, w).values())

    threads = [threading.Thread(target=one_sweep, args=(n,)) for n in ("sweep-a", "sweep-b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # on a loaded machine the loser may only start once the winner recorded its check run, or once
    # GitHub's answer to it was recorded too (`already_acknowledged`)
    assert "created" in outcomes and set(outcomes) - {"created"} <= {"claimed_elsewhere", "in_flight", "already_created",
                                                                     "already_acknowledged"}
    assert server.check_run_names(sha) == [(BUILD, "in_progress", None), (BUILD, "completed", "timed_out")]


def test_the_sweep_in_dry_run_sends_nothing(httpserver, instance, roots):
    server, sha = lost_in_progress(httpserver, instance, roots, creates=True)
    sent = len(server.requests)
    result = sweep(GitHubResource(api_url=httpserver.url_for("")), roots, instance, timeout_s=0.001)
    assert result.success and list(result.output_for_node(OP).values()) == ["dry_run"]
    assert len(server.requests) == sent and server.check_run_names(sha) == [(BUILD, "in_progress", None)]


@pytest.mark.parametrize("outcome", ["refused", "dry_run"])
def test_an_in_progress_check_run_known_not_created_is_no_zombie(outcome, httpserver, instance, roots):
    """A 4xx or a dry run says nothing was created: there is nothing in progress to time out."""
    server = FakeRelayGitHub(httpserver)
    event = dispatched(server, httpserver, instance, roots)
    record = callback_record(L4, "L4", "in_progress", client_payload_of(server, L4))
    if outcome == "refused":
        httpserver.clear_all_handlers()
        httpserver.expect_request(re.compile(r"^/repos/.*/check-runs$"), method="POST").respond_with_json(
            {"message": "Resource not accessible by integration"}, status=403)
        gh = github(httpserver)
    else:
        gh = GitHubResource(api_url=httpserver.url_for(""))
    assert execute(check_run_job, "create_upstream_check_runs", events(record), gh, roots, instance).success
    assert zombie_jobs(Lake.at(roots[0]), utc_now(), JUST_NOW) == []
