"""The autorevert's actions against a local fake GitHub: restarts (pacing, cap, backoff, a crash
between the call and the ledger) and revert proposals (once only), live and in dry run."""

import datetime as dt
import logging

import pytest
from werkzeug import Response

from resources.github import GitHubResource
from resources.lake import Lake
from tests.fake_github_reruns import FakeActions
from tests.fake_github_issues import FakeIssueTracker, Scripted, json_response
from tests.trunk_history import T0, history, row, sha
from torchci_assets.derived.guardians import actions, ledger
from torchci_assets.derived.guardians.actions import Guardian, Planned
from torchci_assets.derived.guardians.culprits import judge_all
from torchci_assets.derived.guardians.signals import build_history
from torchci_assets.guardian_config import AutorevertConfig

REPO = "pytorch/pytorch"
TOKEN = "ghp_FAKEtokenGUARDIANS0123456789"
ON = AutorevertConfig(enabled=True)
SIGNAL = ("trunk", "trunk / linux / test (default, linux.4xlarge)")


class Crash(BaseException):
    """The process dying (not an error any code handles)."""


@pytest.fixture
def gh(httpserver):
    def make(token=TOKEN):
        client = GitHubResource(api_url=httpserver.url_for(""), token=token, write_interval_s=0.0)
        client._sleep = lambda s: None
        return client
    return make


@pytest.fixture
def fakes(httpserver):
    return FakeActions(httpserver, REPO), FakeIssueTracker(httpserver, REPO)


def restart(i=3, mode="rerun-failed-jobs") -> Planned:
    return Planned("restart", sha(i), "trunk", (SIGNAL,), (1000 + i, 1), mode)


def revert(i=3) -> Planned:
    return Planned("revert", sha(i), "", (SIGNAL,))


def guardian(client, tmp_path, minutes=0.0, cfg=ON, log=None):
    return Guardian(client, Lake.at(str(tmp_path / "lake")), REPO, cfg, T0 + dt.timedelta(minutes=minutes),
                    log or (lambda s: None))


def crash_before_done(monkeypatch, run) -> None:
    """`run()` dies after its call to GitHub, before the ledger's `done` row."""
    real_append = ledger.append

    def die_on_done(lake, row):
        if row["phase"] == "done":
            raise Crash()
        return real_append(lake, row)

    monkeypatch.setattr(ledger, "append", die_on_done)
    with pytest.raises(Crash):
        run()
    monkeypatch.setattr(ledger, "append", real_append)


def rows(tmp_path):
    return ledger.read(Lake.at(str(tmp_path / "lake")), T0 + dt.timedelta(hours=5))


def test_plan_coalesces_signals_and_prefers_the_revert(tmp_path):
    other = "trunk / linux / build"
    h = build_history(history("ggRr") + history("ggr", group="trunk / linux-jammy / test (x, linux.2xlarge)")
                      + history("ggss", group=other) + [row(4, "failure", group=other), row(5, "failure", group=other)])
    planned = actions.plan(judge_all(h), h)
    kinds = [(p.action, p.commit_sha, p.mode) for p in planned]
    # commit 2: confirmed by the first group; the second group still confirms its own red there (another
    # signal's culprit is not this signal's answer), and the build group's gap (skipped 2 and 3) is bisected:
    # one whole-run rerun of trunk on commit 2 serves both; the build's first red (commit 4, 2 failures
    # from it on) has its failed jobs re-run beside the bisection
    assert kinds == [("revert", sha(2), "rerun"), ("restart", sha(2), "rerun"), ("restart", sha(3), "rerun"),
                     ("restart", sha(4), "rerun-failed-jobs")]
    (both,) = [p for p in planned if p.action == "restart" and p.commit_sha == sha(2)]
    assert {k for _, k in both.signals} == {"trunk / linux-jammy / test (x, linux.2xlarge)", other}


def test_dry_run_without_credentials_sends_nothing_and_records_once(gh, fakes, tmp_path, caplog):
    fake_actions, tracker = fakes
    said = []
    report = guardian(gh(token=None), tmp_path, log=said.append).run([restart(), revert()])
    assert [r["outcome"] for r in report.taken] == ["dry_run", "dry_run"]
    assert fake_actions.reruns == [] and tracker.requests == []
    assert any(s.startswith("DRY RUN would rerun-failed-jobs trunk run 1003") for s in said)
    assert any(s.startswith("DRY RUN would propose reverting") and "@pytorchbot revert -m" in s for s in said)
    again = guardian(gh(token=None), tmp_path, minutes=30, log=said.append).run([restart(), revert()])
    assert [r["action"] for r in again.taken] == ["restart"]  # the revert intent is recorded once
    assert [why for _, why in again.skipped] == ["already proposed (dry_run)"]
    assert all(r["dry_run"] for r in rows(tmp_path))


def test_enabled_false_is_a_dry_run_even_with_a_token(gh, fakes, tmp_path):
    fake_actions, _ = fakes
    report = guardian(gh(), tmp_path, cfg=AutorevertConfig(enabled=False)).run([restart()])
    assert report.taken[0]["dry_run"] and fake_actions.reruns == []


def test_a_restart_is_sent_and_recorded_before_and_after(gh, fakes, tmp_path):
    fake_actions, _ = fakes
    fake_actions.add_run(1003, sha(3), "trunk")
    report = guardian(gh(), tmp_path).run([restart()])
    assert fake_actions.reruns == [(1003, "rerun-failed-jobs")] and fake_actions.attempt(1003) == 2
    assert [(r["phase"], r["outcome"]) for r in rows(tmp_path)] == [("intent", None), ("done", "ok")]
    assert report.taken[0]["key"] == rows(tmp_path)[0]["key"] and not report.taken[0]["dry_run"]


def test_restarts_are_paced_per_workflow_and_commit_and_capped_per_commit(gh, fakes, tmp_path):
    fake_actions, _ = fakes
    fake_actions.add_run(1003, sha(3), "trunk")
    fake_actions.add_run(2003, sha(3), "periodic")
    client = gh()
    assert guardian(client, tmp_path, 0).run([restart()]).taken
    paced = guardian(client, tmp_path, 19).run([restart()])
    assert not paced.taken and paced.skipped[0][1] == "paced: restarted 19 min ago"
    # another workflow on the same commit is not paced by trunk's restart
    assert guardian(client, tmp_path, 19).run([Planned("restart", sha(3), "periodic", (SIGNAL,), (2003, 1))]).taken
    for k in range(1, 4):
        assert guardian(client, tmp_path, 21 * k).run([restart()]).taken
    capped = guardian(client, tmp_path, 200).run([restart()])
    assert capped.skipped[0][1] == "cap: 5 restarts of this commit already"
    assert len(fake_actions.reruns) == 5


def test_failed_restarts_back_off_20_40_60_minutes(gh, fakes, tmp_path):
    fake_actions, _ = fakes
    fake_actions.add_run(1003, sha(3), "trunk")
    refuse = json_response(403, {"message": "This workflow is already running"})
    fake_actions.fail("rerun", refuse, refuse, refuse)
    client = gh()
    sent = []
    for minute in (0, 10, 20, 50, 60, 100, 121):
        report = guardian(client, tmp_path, minute).run([restart()])
        sent += [(minute, r["outcome"]) for r in report.taken]
    # failed at 0 -> wait 20 (until 20); failed at 20 -> wait 40 (until 60); failed at 60 -> wait 60 (until 120)
    assert sent == [(0, "failed"), (20, "failed"), (60, "failed"), (121, "ok")]
    assert fake_actions.reruns == [(1003, "rerun-failed-jobs")]


def test_a_crash_after_the_restart_and_before_the_ledger_never_restarts_twice(gh, fakes, tmp_path, monkeypatch):
    fake_actions, _ = fakes
    fake_actions.add_run(1003, sha(3), "trunk")
    crash_before_done(monkeypatch, lambda: guardian(gh(), tmp_path, 0).run([restart()]))
    assert fake_actions.reruns == [(1003, "rerun-failed-jobs")]
    report = guardian(gh(), tmp_path, 5).run([restart()])
    assert [r["outcome"] for r in report.recovered] == ["ok"]
    assert report.skipped[0][1] == "paced: restarted 5 min ago"
    assert len(fake_actions.reruns) == 1


def test_a_crash_before_the_call_lets_the_next_run_restart(gh, fakes, tmp_path, monkeypatch):
    fake_actions, _ = fakes
    fake_actions.add_run(1003, sha(3), "trunk")
    real_request = GitHubResource.request

    def die_before_posting(self, method, path, **kw):
        if method == "POST":
            raise Crash()
        return real_request(self, method, path, **kw)

    monkeypatch.setattr(GitHubResource, "request", die_before_posting)
    with pytest.raises(Crash):
        guardian(gh(), tmp_path, 0).run([restart()])
    monkeypatch.setattr(GitHubResource, "request", real_request)
    report = guardian(gh(), tmp_path, 1).run([restart()])
    assert [r["outcome"] for r in report.recovered] == ["not_sent"]
    assert [r["outcome"] for r in report.taken] == ["ok"] and fake_actions.reruns == [(1003, "rerun-failed-jobs")]


def test_a_restart_github_did_but_did_not_acknowledge_counts_once(gh, fakes, tmp_path):
    fake_actions, _ = fakes
    fake_actions.add_run(1003, sha(3), "trunk")
    fake_actions.fail("rerun", Scripted(Response("bad gateway", status=502), after_effect=True))
    report = guardian(gh(), tmp_path).run([restart()])
    assert report.taken[0]["outcome"] == "ok" and "502" in report.taken[0]["notes"]
    assert fake_actions.reruns == [(1003, "rerun-failed-jobs")]


def test_a_restart_without_an_answer_and_a_run_github_cannot_show_stays_open_until_it_can(gh, fakes, tmp_path):
    """The re-run GitHub did but answered 502, and the run's attempt unreadable (502s through every
    retry): not a failure (its 20-minute backoff would restart again), an open intent that blocks
    until a later pass reads the attempt."""
    fake_actions, _ = fakes
    fake_actions.add_run(1003, sha(3), "trunk")
    fake_actions.fail("rerun", Scripted(Response("bad gateway", status=502), after_effect=True))
    fake_actions.fail("run", *[Scripted(Response("bad gateway", status=502)) for _ in range(6)])
    first = guardian(gh(), tmp_path, 0).run([restart()])
    assert first.taken == [] and [r["phase"] for r in first.left_open] == ["intent"]
    fake_actions.fail("run", *[Scripted(Response("bad gateway", status=502)) for _ in range(6)])
    still = guardian(gh(), tmp_path, 25).run([restart()])  # past the backoff a failure would have had
    assert still.recovered == [] and still.skipped[0][1].startswith("in doubt: an earlier restart's outcome")
    settled = guardian(gh(), tmp_path, 26).run([])  # GitHub shows the run again
    assert [r["outcome"] for r in settled.recovered] == ["ok"]
    assert fake_actions.reruns == [(1003, "rerun-failed-jobs")]


def test_a_revert_is_proposed_on_the_pull_request_once(gh, fakes, tmp_path):
    fake_actions, tracker = fakes
    pr = tracker.add("Make the fast path faster", pull_request=True)
    fake_actions.add_pull(sha(3), pr["number"])
    report = guardian(gh(), tmp_path).run([revert()])
    (body,) = tracker.comments[pr["number"]]
    assert body.startswith('@pytorchbot revert -m "Reverted automatically by the trunk guardian: '
                           f'{SIGNAL[1]} failed on this commit')
    assert '" -c nosignal\n' in body and f"<!-- torchci-autorevert sha={sha(3)} -->" in body
    assert report.taken[0]["pr_number"] == pr["number"] and report.taken[0]["outcome"] == "ok"
    again = guardian(gh(), tmp_path, 60).run([revert()])
    assert not again.taken and len(tracker.comments[pr["number"]]) == 1


def test_a_crash_after_the_comment_is_recovered_from_the_marker(gh, fakes, tmp_path, monkeypatch):
    fake_actions, tracker = fakes
    pr = tracker.add("Make the fast path faster", pull_request=True)
    fake_actions.add_pull(sha(3), pr["number"])
    crash_before_done(monkeypatch, lambda: guardian(gh(), tmp_path).run([revert()]))
    report = guardian(gh(), tmp_path, 5).run([revert()])
    assert [r["outcome"] for r in report.recovered] == ["ok"] and not report.taken
    assert len(tracker.comments[pr["number"]]) == 1


def test_an_unacknowledged_comment_is_adopted_not_resent(gh, fakes, tmp_path):
    fake_actions, tracker = fakes
    pr = tracker.add("Make the fast path faster", pull_request=True)
    fake_actions.add_pull(sha(3), pr["number"])
    tracker.fail("comment", Scripted(Response("", status=504), after_effect=True))
    report = guardian(gh(), tmp_path).run([revert()])
    assert report.taken[0]["outcome"] == "ok" and len(tracker.comments[pr["number"]]) == 1


def test_a_commit_without_a_pull_request_gets_no_proposal_and_is_not_asked_again(gh, fakes, tmp_path):
    fake_actions, tracker = fakes
    assert guardian(gh(), tmp_path).run([revert()]).taken[0]["outcome"] == "no_pr"
    assert guardian(gh(), tmp_path, 30).run([revert()]).skipped[0][1] == "already proposed (no_pr)"
    assert fake_actions.pulls == {} and tracker.comments == {}


def test_the_token_never_reaches_the_ledger_or_the_log(gh, fakes, tmp_path, caplog):
    fake_actions, _ = fakes
    fake_actions.add_run(1003, sha(3), "trunk")
    fake_actions.fail("rerun", json_response(422, {"message": f"bad credentials {TOKEN}"}))
    caplog.set_level(logging.DEBUG)
    guardian(gh(), tmp_path).run([restart()])
    assert TOKEN not in caplog.text and all(TOKEN not in (r["notes"] or "") for r in rows(tmp_path))


def test_the_whole_loop_live_restarts_to_confirm_then_proposes_once(gh, fakes, tmp_path):
    from torchci_assets.derived.guardians.passes import autorevert_pass
    fake_actions, tracker = fakes
    fake_actions.add_run(1003, sha(3), "trunk")
    pr = tracker.add("Make the fast path faster", pull_request=True)
    fake_actions.add_pull(sha(3), pr["number"])
    lake = Lake.at(str(tmp_path / "lake"))

    def run_pass(states, minutes):
        return autorevert_pass(gh(), lake, REPO, ON, T0 + dt.timedelta(minutes=minutes), rows=history(states))

    first = run_pass("gggr", 0)  # one failure: its failed jobs are restarted to confirm
    assert first.verdicts == {"restart": 1} and fake_actions.reruns == [(1003, "rerun-failed-jobs")]
    assert run_pass("gggp", 5).taken == []  # the re-run in flight
    second = run_pass("gggRr", 60)  # it failed again, and so did the next commit
    assert [(r["action"], r["outcome"], r["pr_number"]) for r in second.taken] == [("revert", "ok", pr["number"])]
    assert run_pass("gggRrr", 65).taken == [] and len(tracker.comments[pr["number"]]) == 1
    assert not second.dry_run and len(fake_actions.reruns) == 1


def test_a_proposal_github_did_not_post_is_tried_again_after_the_backoff(gh, fakes, tmp_path):
    fake_actions, tracker = fakes
    pr = tracker.add("Make the fast path faster", pull_request=True)
    fake_actions.add_pull(sha(3), pr["number"])
    tracker.fail("comment", Scripted(Response("bad gateway", status=502)))  # nothing posted
    first = guardian(gh(), tmp_path, 0).run([revert()])
    assert [r["outcome"] for r in first.taken] == ["failed"] and pr["number"] not in tracker.comments
    waiting = guardian(gh(), tmp_path, 10).run([revert()])
    assert waiting.skipped[0][1] == "backoff: 1 failed attempt(s), 10 of 20 min waited"
    retried = guardian(gh(), tmp_path, 21).run([revert()])
    assert [r["outcome"] for r in retried.taken] == ["ok"] and len(tracker.comments[pr["number"]]) == 1
    assert guardian(gh(), tmp_path, 60).run([revert()]).skipped[0][1] == "already proposed (ok)"


def test_proposals_that_keep_failing_stop_at_the_cap(gh, fakes, tmp_path):
    fake_actions, tracker = fakes
    pr = tracker.add("Make the fast path faster", pull_request=True)
    fake_actions.add_pull(sha(3), pr["number"])
    tracker.fail("comment", *[json_response(403, {"message": "Resource not accessible"}) for _ in range(9)])
    cfg = AutorevertConfig(enabled=True, max_restarts_per_commit=3)
    outcomes = [r["outcome"] for hour in range(6) for r in guardian(gh(), tmp_path, 60 * hour, cfg).run([revert()]).taken]
    assert outcomes == ["failed"] * 3
    assert guardian(gh(), tmp_path, 400, cfg).run([revert()]).skipped[0][1] == "cap: 3 failed proposals for this commit already"


def test_the_confirmation_restarts_the_run_the_signal_failed_in(gh, fakes, tmp_path):
    from torchci_assets.derived.guardians.passes import autorevert_pass
    fake_actions, _ = fakes
    cuda, rocm = "periodic / cuda / test (default, linux.g5.4xlarge)", "periodic / rocm / test (default, linux.rocm)"
    # commit 1 ran periodic twice: cuda failed in run 501, the newer run 601 ran only rocm
    health = [row(0, "success", cuda, run_id=500, attempts=2), row(0, "success", rocm, run_id=500, attempts=2),
              row(1, "failure", cuda, run_id=501), row(1, "success", rocm, run_id=601),
              row(2, "failure", cuda, run_id=502), row(2, "success", rocm, run_id=502)]
    for run_id, i in [(500, 0), (501, 1), (601, 1), (502, 2)]:
        fake_actions.add_run(run_id, sha(i), "periodic")
    summary = autorevert_pass(gh(), Lake.at(str(tmp_path / "lake")), REPO, ON, T0, rows=health)
    assert [(r["run_id"], r["notes"]) for r in summary.taken] == [(501, "rerun-failed-jobs")]
    assert fake_actions.reruns == [(501, "rerun-failed-jobs")]


def test_restarts_the_lake_does_not_show_yet_hold_their_bisection_places(gh, fakes, tmp_path):
    from torchci_assets.derived.guardians.passes import autorevert_pass
    fake_actions, _ = fakes
    for i in range(10):
        fake_actions.add_run(1000 + i, sha(i), "trunk")
    lake = Lake.at(str(tmp_path / "lake"))
    cfg = AutorevertConfig(enabled=True, bisection_limit=2)

    def restarted(states, minutes):
        rows = history(states)
        rows[0]["attempts"] = 2  # the green passed twice: enough successes below the reds
        summary = autorevert_pass(gh(), lake, REPO, cfg, T0 + dt.timedelta(minutes=minutes), rows=rows)
        return [int(r["commit_sha"], 16) for r in summary.taken]

    assert restarted("gssssssRr", 0) == [3, 5]
    # the refresh shows commit 5's re-run, not yet commit 3's: still two in flight, nothing more
    assert restarted("gsssspsRr", 5) == []
    # commit 3's re-run is shown (green, at attempt 2) and 5 is red: one place free, in the rest 4
    later = history("gssgsrsrr")
    later[0]["attempts"], later[3]["run_attempt"] = 2, 2
    summary = autorevert_pass(gh(), lake, REPO, cfg, T0 + dt.timedelta(minutes=30), rows=later)
    assert [int(r["commit_sha"], 16) for r in summary.taken] == [4]
    assert [run for run, _ in fake_actions.reruns] == [1003, 1005, 1004]


def test_a_restart_counts_in_flight_until_the_lake_shows_its_run_past_the_attempt_restarted():
    h = build_history(history("gssssssrr"))
    act = {"action": "restart", "commit_sha": sha(3), "workflow": "trunk", "run_id": 1003, "run_attempt": 1,
           "dry_run": False, "open": False, "outcome": "ok", "at": T0}
    assert actions.restarts_in_flight([act], h, T0 + dt.timedelta(minutes=5), False) == {("trunk", sha(3))}
    assert actions.restarts_in_flight([act], h, T0 + dt.timedelta(minutes=5), True) == set()  # dry runs apart
    assert actions.restarts_in_flight([{**act, "outcome": "failed"}], h, T0, False) == set()
    assert actions.restarts_in_flight([act], h, T0 + actions.IN_FLIGHT, False) == set()  # never shown: given up
    shown = build_history([{**r, "run_attempt": 2} if r["sha"] == sha(3) else r for r in history("gssssssrr")])
    assert actions.restarts_in_flight([act], shown, T0 + dt.timedelta(minutes=5), False) == set()


def test_an_opted_out_or_unmerged_pull_request_is_notified_not_reverted(gh, fakes, tmp_path):
    fake_actions, tracker = fakes
    opted = tracker.add("Make the fast path faster", pull_request=True)
    fake_actions.add_pull(sha(3), opted["number"])
    fake_actions.pulls[sha(3)][0]["labels"] = [{"name": "autorevert: disable"}]
    still_open = tracker.add("A stacked PR still open", pull_request=True)
    fake_actions.add_pull(sha(4), still_open["number"], merged=False)
    report = guardian(gh(), tmp_path).run([revert(3), revert(4)])
    assert [r["outcome"] for r in report.taken] == ["notified", "notified"]
    for number in (opted["number"], still_open["number"]):
        (body,) = tracker.comments[number]
        assert "@pytorchbot" not in body and f"- trunk: `{SIGNAL[1]}`" in body
    assert guardian(gh(), tmp_path, 60).run([revert(3)]).skipped[0][1] == "already proposed (notified)"


def test_a_pull_request_the_merge_bot_landed_is_asked_to_revert_though_github_shows_no_merged_at(
        gh, fakes, tmp_path):
    """PyTorch's merge bot lands a pull request by cherry-pick and closes it: GitHub shows it closed with
    no `merged_at`. Upstream holds back only an open pull request; holding back every one without
    `merged_at` would only ever notify PyTorch's culprits."""
    fake_actions, tracker = fakes
    landed = tracker.add("Make the fast path faster", pull_request=True)
    fake_actions.add_pull(sha(3), landed["number"], merged_at_unset=True)
    report = guardian(gh(), tmp_path).run([revert(3)])
    assert [r["outcome"] for r in report.taken] == ["ok"]
    (body,) = tracker.comments[landed["number"]]
    assert body.startswith("@pytorchbot revert")


LANDED = ("Make the fast path faster (#4242)\n\nSummary of the change.\n\n"
          "Pull Request resolved: https://github.com/pytorch/pytorch/pull/4242\nApproved by: https://github.com/a-reviewer")
REVERTED = ('Revert "Make the fast path faster (#4242)"\n\nThis reverts commit 0123456789abcdef.\n\n'
            "Reverted https://github.com/pytorch/pytorch/pull/4242 on behalf of https://github.com/a-human due to "
            "it broke trunk ([comment](https://github.com/pytorch/pytorch/pull/4242#issuecomment-1))")


def test_the_pull_request_is_found_from_the_commit_message_when_github_lookup_has_none(gh, fakes, tmp_path):
    fake_actions, tracker = fakes
    pr = tracker.add("Make the fast path faster", pull_request=True, number=4242)
    fake_actions.add_pull(None, 4242)  # GitHub's commit-to-pull-requests lookup does not list it
    fake_actions.set_message(sha(3), LANDED)
    fake_actions.add_pull(None, 4243)
    fake_actions.set_message(sha(4), "Make the slow path slower (#4243)")  # a number in the title alone is not read
    fake_actions.set_message(sha(5), "Pull Request resolved: https://github.com/pytorch/pytorch/pull/999")  # unknown
    report = guardian(gh(), tmp_path).run([revert(3), revert(4), revert(5)])
    assert [(r["commit_sha"], r["outcome"], r["pr_number"]) for r in report.taken] == [
        (sha(3), "ok", pr["number"]), (sha(4), "no_pr", None), (sha(5), "no_pr", None)]
    (body,) = tracker.comments[pr["number"]]
    assert body.startswith("@pytorchbot revert -m") and f"<!-- torchci-autorevert sha={sha(3)} -->" in body


def test_a_revert_commit_notifies_and_never_asks_to_revert_again(gh, fakes, tmp_path):
    fake_actions, tracker = fakes
    pr = tracker.add("Make the fast path faster", pull_request=True, number=4242)
    fake_actions.add_pull(sha(3), 4242)  # GitHub's lookup lists the reverted pull request, merged
    fake_actions.set_message(sha(3), REVERTED)
    report = guardian(gh(), tmp_path).run([revert(3)])
    assert [(r["outcome"], r["pr_number"]) for r in report.taken] == [("notified", 4242)]
    (body,) = tracker.comments[pr["number"]]
    assert "@pytorchbot" not in body and "(reverted by the commit)" in body


def test_notifications_go_to_the_configured_issue_once_each(gh, fakes, tmp_path, monkeypatch):
    fake_actions, tracker = fakes
    notify = tracker.add("Autorevert notifications")
    cfg = AutorevertConfig(enabled=True, notify_issue_number=notify["number"])
    opted = tracker.add("Make the fast path faster", pull_request=True)
    fake_actions.add_pull(sha(3), opted["number"], labels=["autorevert: disable"])
    merged = tracker.add("A merged PR that may be reverted", pull_request=True)
    fake_actions.add_pull(sha(4), merged["number"])
    still_open = tracker.add("A stacked PR still open", pull_request=True)
    fake_actions.add_pull(sha(5), still_open["number"], merged=False)
    # the process dies after the first notification reached GitHub, before the ledger saw it
    crash_before_done(monkeypatch, lambda: guardian(gh(), tmp_path, cfg=cfg).run([revert(3)]))
    report = guardian(gh(), tmp_path, 5, cfg=cfg).run([revert(3), revert(4), revert(5)])
    assert [(r["commit_sha"], r["outcome"]) for r in report.recovered] == [(sha(3), "ok")]
    assert [(r["commit_sha"], r["outcome"], r["pr_number"], r["notify_issue"]) for r in report.taken] == [
        (sha(4), "ok", merged["number"], None), (sha(5), "notified", still_open["number"], notify["number"])]
    # the revert request still goes on the pull request; the notifications, one per culprit, on the issue
    assert tracker.comments[merged["number"]][0].startswith("@pytorchbot revert")
    assert opted["number"] not in tracker.comments and still_open["number"] not in tracker.comments
    first, second = tracker.comments[notify["number"]]
    assert f"found {sha(3)[:10]} from #{opted['number']}" in first and "(labelled 'autorevert: disable')" in first
    assert f"found {sha(5)[:10]} from #{still_open['number']}" in second and "@pytorchbot" not in second
    again = guardian(gh(), tmp_path, 90, cfg=cfg).run([revert(3), revert(4), revert(5)])
    assert not again.taken and len(tracker.comments[notify["number"]]) == 2


def test_the_pull_request_is_found_by_search_when_the_message_and_the_lookup_do_not_name_it(gh, fakes, tmp_path,
                                                                                              monkeypatch):
    fake_actions, tracker = fakes
    pr = tracker.add("Make the fast path faster", pull_request=True, number=4242)
    fake_actions.add_pull(sha(3), 4242, listed=False)  # only GitHub's search knows the commit is 4242's
    fake_actions.add_pull(sha(4), 4243, merged=False, listed=False)  # an open pull request: not searched for
    # a dry run asks GitHub nothing, searches included
    assert [r["outcome"] for r in guardian(gh(token=None), tmp_path).run([revert(3)]).taken] == ["dry_run"]
    assert fake_actions.searches == [] and tracker.requests == []
    # the process dies after the comment reached GitHub, before the ledger saw it
    crash_before_done(monkeypatch, lambda: guardian(gh(), tmp_path).run([revert(3)]))
    assert fake_actions.searches == [f"{sha(3)} repo:{REPO} is:pr is:closed"]
    report = guardian(gh(), tmp_path, 5).run([revert(3), revert(4)])
    assert [(r["commit_sha"], r["outcome"], r["pr_number"]) for r in report.recovered] == [(sha(3), "ok", 4242)]
    assert [(r["commit_sha"], r["outcome"], r["pr_number"]) for r in report.taken] == [(sha(4), "no_pr", None)]
    (body,) = tracker.comments[pr["number"]]
    assert body.startswith("@pytorchbot revert -m") and f"<!-- torchci-autorevert sha={sha(3)} -->" in body
    # found once: the recovery reads the pull request's comments, it does not search again
    assert fake_actions.searches == [f"{sha(3)} repo:{REPO} is:pr is:closed", f"{sha(4)} repo:{REPO} is:pr is:closed"]
    assert not guardian(gh(), tmp_path, 60).run([revert(3), revert(4)]).taken and len(fake_actions.searches) == 2


def test_only_a_pull_request_into_main_is_taken_from_the_lookup_or_the_search(gh, fakes, tmp_path):
    fake_actions, tracker = fakes
    for number in (4242, 4243, 4244):
        tracker.add(f"pull request {number}", pull_request=True, number=number)
    # commit 3 is listed (and found by search) only on its cherry-pick into a release branch
    fake_actions.add_pull(sha(3), 4243, base="release/2.6")
    # commit 4: the cherry-pick comes first in GitHub's list, the pull request into main after it
    fake_actions.add_pull(sha(4), 4243, base="release/2.6")
    fake_actions.add_pull(sha(4), 4242)
    # a ghstack pull request targets its stack's base branch: named by the merge bot, it is still the one
    fake_actions.add_pull(None, 4244, base="gh/a-human/7/base")
    fake_actions.set_message(sha(5), "Pull Request resolved: https://github.com/pytorch/pytorch/pull/4244")
    report = guardian(gh(), tmp_path).run([revert(3), revert(4), revert(5)])
    assert [(r["commit_sha"], r["outcome"], r["pr_number"]) for r in report.taken] == [
        (sha(3), "no_pr", None), (sha(4), "ok", 4242), (sha(5), "ok", 4244)]
    assert 4243 not in tracker.comments and len(tracker.comments[4242]) == len(tracker.comments[4244]) == 1
    assert fake_actions.searches == [f"{sha(3)} repo:{REPO} is:pr is:closed"]


def test_the_base_branch_is_the_one_given(gh, fakes, tmp_path):
    fake_actions, tracker = fakes
    tracker.add("A change on master", pull_request=True, number=4242)
    fake_actions.add_pull(sha(3), 4242, base="master")
    client = gh()
    on_master = Guardian(client, Lake.at(str(tmp_path / "lake")), REPO, ON, T0, base="master")
    assert [(r["outcome"], r["pr_number"]) for r in on_master.run([revert(3)]).taken] == [("ok", 4242)]


def test_a_gap_commit_whose_rerun_skips_the_job_again_gives_no_signal_and_the_bisection_moves_on(gh, fakes, tmp_path):
    """Commits 1-3 skipped the job (its `if:` skips it there), and every whole-run re-run of them
    skips it again. Each is re-run once, the bisection going on to the next, and the range ends
    as suspects: no commit is re-run every 20 minutes up to the cap while the others wait."""
    from torchci_assets.derived.guardians.passes import autorevert_pass
    fake_actions, _ = fakes
    for i in range(6):
        fake_actions.add_run(1000 + i, sha(i), "trunk")
    lake = Lake.at(str(tmp_path / "lake"))
    cfg = AutorevertConfig(enabled=True, bisection_limit=1)

    def restarted(minutes):
        rows = history("gsssRr")  # commit 4 failed twice and 5 once: 3 failures, the red is not re-run
        rows[0]["attempts"] = 2  # the green passed twice: enough successes below the reds
        for r in rows[1:4]:  # the lake shows each re-run done, with the job skipped in it again
            r["run_attempt"] = fake_actions.attempt(r["run_id"])
        summary = autorevert_pass(gh(), lake, REPO, cfg, T0 + dt.timedelta(minutes=minutes), rows=rows)
        return summary, [int(r["commit_sha"], 16) for r in summary.taken]

    assert [restarted(minutes)[1] for minutes in (0, 30, 60)] == [[2], [1], [3]]
    for minutes in range(90, 300, 30):
        summary, taken = restarted(minutes)
        assert taken == [] and summary.verdicts == {"suspect": 1}
    assert fake_actions.reruns == [(1002, "rerun"), (1001, "rerun"), (1003, "rerun")]


def test_the_whole_run_reruns_are_read_from_the_ledger_recovered_ones_too(gh, fakes, tmp_path, monkeypatch):
    fake_actions, _ = fakes
    fake_actions.add_run(1003, sha(3), "trunk")
    fake_actions.add_run(1004, sha(4), "trunk")
    crash_before_done(monkeypatch, lambda: guardian(gh(), tmp_path, 0).run([restart(mode="rerun")]))
    guardian(gh(), tmp_path, 5).run([restart(4)])  # a re-run of failed jobs: not of the whole run
    acts = ledger.actions(rows(tmp_path))
    assert actions.whole_reruns(acts, False) == {("trunk", sha(3), 1003, 1)}
    assert actions.whole_reruns(acts, True) == set()  # dry runs apart
