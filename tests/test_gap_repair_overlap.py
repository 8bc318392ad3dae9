"""Gap repair passes that overlap: a slow pass (GitHub's retries, a rate-limit wait, a backlog) is
still asking when the next one starts, and the lake holds none of its answers yet. The next pass
runs (the first pass of an hour must still compare pull requests) but leaves out the run attempts
the slow one is asking about, so GitHub's hourly budget is not spent twice on them."""

import datetime as dt
import threading

from fake_github_actions import FakeActions, reply
from test_gap_repair import JOBLESS_RUN, NOW, RUN, archive_with_lost_completion, client, completed_job, fake_api

from resources.github import GitHubResource
from torchci_assets.backfill.claims import CLAIM_FOR
from torchci_assets.backfill.gaps import repair_gaps


def held(api: FakeActions) -> tuple[threading.Event, threading.Event]:
    """Hold the first request GitHub gets until the second event is set (the first says it came)."""
    holding, release = threading.Event(), threading.Event()
    handle = api.handle

    def slow_first(request):
        if not holding.is_set():
            holding.set()
            release.wait(timeout=60)
        return handle(request)

    (handler,) = [h for h in api.server.handlers if h.request_handler == handle]
    handler.request_handler = slow_first
    return holding, release


def slow_pass(api: FakeActions, archive, lake, now: dt.datetime) -> tuple[dict, threading.Event, threading.Thread]:
    """A pass at `now` that stalls on its first request: its report, the release, its thread."""
    holding, release = held(api)
    out: dict = {}
    thread = threading.Thread(target=lambda: out.update(report=repair_gaps(client(api.server), archive, lake, now)))
    thread.start()
    assert holding.wait(timeout=30)
    return out, release, thread


def asked(api: FakeActions) -> tuple[int, int]:
    """How many times GitHub was asked for the stale job's run, and for the jobless run."""
    return api.count(rf"/runs/{RUN}/attempts/1$"), api.count(rf"/runs/{JOBLESS_RUN}/attempts/1$")


def test_a_pass_beside_a_slow_one_does_not_ask_about_what_that_one_is_asking(tmp_path, threaded_server, octokit):
    archive, lake = archive_with_lost_completion(tmp_path, octokit)
    api = fake_api(threaded_server, octokit, completed_job(octokit))
    out, release, thread = slow_pass(api, archive, lake, NOW)
    beside = repair_gaps(client(threaded_server), archive, lake, NOW + dt.timedelta(minutes=5))
    release.set()
    thread.join(timeout=60)
    assert (beside.looked_up, beside.claimed_elsewhere, beside.problem, beside.failed) == (0, 2, None, [])
    assert (out["report"].looked_up, out["report"].repaired_jobs) == (2, 1)
    assert asked(api) == (1, 1)


def test_a_pass_that_never_ends_holds_its_run_attempts_for_a_while_only(tmp_path, threaded_server, octokit):
    """A pass hung or killed (its process gone) never releases what it claimed: once CLAIM_FOR has
    passed, a later pass asks about those run attempts again."""
    archive, lake = archive_with_lost_completion(tmp_path, octokit)
    api = fake_api(threaded_server, octokit, completed_job(octokit))
    out, release, thread = slow_pass(api, archive, lake, NOW)
    try:
        later = repair_gaps(client(threaded_server), archive, lake, NOW + CLAIM_FOR)
    finally:
        release.set()
        thread.join(timeout=60)
    assert (later.looked_up, later.claimed_elsewhere) == (2, 0)


def test_what_a_pass_was_answered_is_not_asked_again_before_the_refresh_takes_it(tmp_path, threaded_server, octokit):
    """A pass that starts just after another ended (a late start) finds the lake without that pass's
    answers (the refresh has not taken them yet): it leaves out the run attempts GitHub answered
    for, and asks again about the one whose lookup failed."""
    archive, lake = archive_with_lost_completion(tmp_path, octokit)
    api = fake_api(threaded_server, octokit, completed_job(octokit))
    api.fail(rf"/runs/{JOBLESS_RUN}/attempts/1$", reply(502, {"message": "Server Error"}))
    gh = GitHubResource(api_url=threaded_server.url_for("").rstrip("/"), token="ghp_FAKE0123456789", max_retries=0)
    first = repair_gaps(gh, archive, lake, NOW)
    assert (first.looked_up, len(first.failed)) == (1, 1)
    late = repair_gaps(gh, archive, lake, NOW + dt.timedelta(minutes=1))
    assert (late.looked_up, late.claimed_elsewhere, late.failed) == (1, 1, [])
    assert asked(api) == (1, 2)
