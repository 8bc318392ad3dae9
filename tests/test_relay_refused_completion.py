"""A downstream job that completes with a conclusion GitHub will not take (the `conclusion` input left
out, so report_callback.py sends null, or a word of its own such as `passed`): the relay's check run of
that `completed` callback is refused (422) and its in-progress one would stay in progress on the pull
request for good. The zombie sweep completes it as timed_out once the timeout has passed, exactly
once; a sweep's own refused `timed_out` is not tried again at every sweep. GitHub is the real HTTP
server of tests/fake_github_relay.py on 127.0.0.1, refusing as GitHub does."""

import pytest

from tests.fake_github_relay import FakeRelayGitHub
from tests.test_relay_lost_check_runs import BUILD, OP, assert_timed_out_once
from tests.test_relay_pull_requests import (  # noqa: F401  (relay_config, quick_ticks: autouse)
    L4,
    callback_record,
    check_run,
    client_payload_of,
    dispatched,
    github,
    quick_ticks,
    relay_config,
    roots,
    sweep,
)


def completed_refused(httpserver, instance, roots, conclusion: str):
    """`build` reported in_progress, then completed with `conclusion`; returns GitHub and the head."""
    server = FakeRelayGitHub(httpserver)
    event = dispatched(server, httpserver, instance, roots)
    cp = client_payload_of(server, L4)
    assert check_run(callback_record(L4, "L4", "in_progress", cp), github(httpserver), roots, instance).success
    done = check_run(callback_record(L4, "L4", "completed", cp, conclusion=conclusion), github(httpserver),
                     roots, instance)
    assert done.success and list(done.output_for_node("create_upstream_check_runs").values()) == ["refused"]
    assert server.check_run_names(event.sha) == [(BUILD, "in_progress", None)]
    return server, event.sha


@pytest.mark.parametrize("conclusion", ["", "passed"])
def test_an_in_progress_check_run_whose_completion_github_refused_is_timed_out_once(
        conclusion, httpserver, instance, roots):
    server, sha = completed_refused(httpserver, instance, roots, conclusion)
    assert_timed_out_once(server, sha, httpserver, instance, roots)


def test_a_sweeps_own_refused_timed_out_is_not_sent_again_at_every_sweep(httpserver, instance, roots):
    """The App lost its Checks permission: GitHub refuses the sweep's `timed_out` too. The next sweeps,
    every ten minutes for days, do not send it again."""
    server, sha = completed_refused(httpserver, instance, roots, "")
    server.refuse_check_runs = True
    result = sweep(github(httpserver), roots, instance, timeout_s=0.001)
    assert result.success and list(result.output_for_node(OP).values()) == ["refused"]
    assert sweep(github(httpserver), roots, instance, timeout_s=0.001).output_for_node(OP) == {}
    posts = [p for m, p, _ in server.requests if m == "POST" and p.endswith("/check-runs")]
    assert len(posts) == 3  # in_progress, the refused completion, the sweep's one refused timed_out
