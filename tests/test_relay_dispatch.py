"""dispatch_job and its ledger against a real HTTP server on 127.0.0.1 playing the GitHub API."""

import json
import re
import time
from collections import Counter

import pytest
from werkzeug import Response

from jobs.relay import dispatch_job, run_config_for
from resources.configured import LakeResource
from resources.github import MAX_PAYLOAD_BYTES, MAX_PAYLOAD_KEYS, GitHubResource, validate_dispatch
from resources.lake import Lake
from torchci_assets.relay import dispatch
from torchci_assets.relay.dispatch import client_payload, ledger_rows
from torchci_assets.relay.pushes import UpstreamCommit, trim_push_payload

TOKEN = "ghp_testtoken000000000000000000000000"
SHA = "3f1c0a9e5b7d2c4e6f8a0b1c2d3e4f5a6b7c8d9e"
BEFORE = "1111111111111111111111111111111111111111"
REPOS = ["org-one/torch-fpga", "org-two/torch-tpu", "org-three/torch-dsp", "acme-ai/torch-npu"]
CONFIG = """
upstream: {repo: pytorch/pytorch, branches: [main]}
poll_commits: false
allowlist:
  L1: [org-one/torch-fpga]
  L2: [org-two/torch-tpu, org-three/torch-dsp]
  L3:
    npu:
      acme-ai/torch-npu: []
"""



@pytest.fixture(autouse=True)
def relay_config(tmp_path, monkeypatch):
    path = tmp_path / "relay.yaml"
    path.write_text(CONFIG)
    monkeypatch.setenv("TORCHCI_CONFIG", str(path))


class FakeGitHub:
    """Answers POST /repos/<owner>/<repo>/dispatches: per repo, a list of replies served in
    order (the last repeats; default 204). Every request is logged as (repo, body)."""

    def __init__(self, httpserver, **replies):
        self.replies = {repo: list(r) for repo, r in replies.items()}
        self.log: list[tuple[str, dict]] = []
        httpserver.expect_request(re.compile(r"^/repos/[^/]+/[^/]+/dispatches$"),
                                  method="POST").respond_with_handler(self)

    def __call__(self, request):
        repo = request.path[len("/repos/"):-len("/dispatches")]
        self.log.append((repo, json.loads(request.data)))
        script = self.replies.get(repo) or [Response(status=204)]
        n = sum(1 for r, _ in self.log if r == repo)
        return script[min(n, len(script)) - 1]

    def acknowledged(self) -> Counter:
        """(sha, repo) pairs answered 204, as the server saw them."""
        counts = Counter()
        for i, (repo, body) in enumerate(self.log):
            script = self.replies.get(repo) or [Response(status=204)]
            n = sum(1 for r, _ in self.log[:i + 1] if r == repo)
            if script[min(n, len(script)) - 1].status_code == 204:
                counts[(body["client_payload"]["sha"], repo)] += 1
        return counts


def reply(status, headers=None, message="x"):
    return Response(json.dumps({"message": message}), status=status, headers=headers,
                    content_type="application/json")


def commit(sha=SHA, **kw) -> UpstreamCommit:
    payload = {"ref": "refs/heads/main", "before": BEFORE, "after": sha, "created": False,
               "deleted": False, "forced": kw.get("forced", False),
               "repository": {"full_name": "pytorch/pytorch", "html_url": "https://github.com/pytorch/pytorch"},
               "head_commit": {"id": sha, "timestamp": "2026-11-22T03:00:00+00:00", "message": "Fix it"},
               "commits": [{"id": sha}]}
    return UpstreamCommit("pytorch/pytorch", sha, "refs/heads/main", BEFORE, kw.get("forced", False),
                          kw.get("delivery_id", "d-1"), "2026-11-22T03:00:01Z", "webhook",
                          trim_push_payload(payload))


def github(httpserver, **kw):
    kw.setdefault("token", TOKEN)
    kw.setdefault("backoff_base_s", 0.01)
    kw.setdefault("write_interval_s", 0)  # GitHub's 1 s between writes is pacing, not behaviour under test
    return GitHubResource(api_url=httpserver.url_for(""), **kw)


def outcome_rows(lake_uri, sha=SHA) -> list[dict]:
    """The ledger's outcome rows (the claims written before each send left out)."""
    return [r for r in ledger_rows(Lake.at(lake_uri), sha) if r["outcome"] != "claimed"]


def run(gh, lake_uri, instance, c=None, **op_config):
    op_config.setdefault("claim_settle_s", 0.01)
    config = run_config_for(c or commit())
    config["ops"]["dispatch_to_downstreams"]["config"].update(op_config)
    return dispatch_job.execute_in_process(run_config=config, instance=instance, raise_on_error=False,
                                           resources={"github": gh, "lake": LakeResource(uri=lake_uri)})


def output_metadata(result) -> dict:
    (event,) = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
    return {k: v.value for k, v in event.event_specific_data.metadata.items()}


@pytest.fixture
def lake_uri(tmp_path):
    return str(tmp_path / "lake")


def test_every_allowlisted_repo_gets_one_dispatch_in_the_relay_shape(httpserver, instance, lake_uri):
    server = FakeGitHub(httpserver)
    result = run(github(httpserver), lake_uri, instance)
    assert result.success
    assert sorted(repo for repo, _ in server.log) == sorted(REPOS)
    body = server.log[0][1]
    assert body["event_type"] == "push"
    cp = body["client_payload"]
    assert len(cp) <= MAX_PAYLOAD_KEYS
    assert len(json.dumps(cp)) < MAX_PAYLOAD_BYTES
    assert (cp["event_type"], cp["delivery_id"], cp["sha"], cp["ref"]) == ("push", "d-1", SHA, "refs/heads/main")
    # What the relay's downstream validators check.
    assert cp["payload"]["repository"]["full_name"] == "pytorch/pytorch"
    assert cp["payload"]["after"] == SHA and cp["payload"]["ref"].startswith("refs/")

    rows = outcome_rows(lake_uri)
    assert sorted(r["downstream_repo"] for r in rows) == sorted(REPOS)
    assert {(r["outcome"], r["status_code"], r["run_id"]) for r in rows} == {("ok", 204, result.run_id)}
    assert {r["level"] for r in rows if r["downstream_repo"] == "acme-ai/torch-npu"} == {"L3"}
    meta = output_metadata(result)
    assert (meta["ok_count"], meta["targets"], meta["dry_run"]) == (4, 4, False)
    assert "| acme-ai/torch-npu | L3 | ok | 204 |" in meta["outcomes"]


def test_a_second_run_for_the_same_commit_sends_nothing(httpserver, instance, lake_uri):
    server = FakeGitHub(httpserver)
    assert run(github(httpserver), lake_uri, instance).success
    again = run(github(httpserver), lake_uri, instance)
    assert again.success
    assert len(server.log) == 4
    assert output_metadata(again)["already_acknowledged_count"] == 4
    assert len(outcome_rows(lake_uri)) == 4
    # A different commit is not covered by the first one's acknowledgements.
    other = "a" * 40
    assert run(github(httpserver), lake_uri, instance, commit(other)).success
    assert server.acknowledged() == Counter({(s, r): 1 for s in (SHA, other) for r in REPOS})


def test_a_repo_that_refuses_is_recorded_and_does_not_block_the_others(httpserver, instance, lake_uri):
    server = FakeGitHub(httpserver, **{"org-two/torch-tpu": [reply(403, message="Resource not accessible by integration")],
                                       "org-three/torch-dsp": [reply(404, message="Not Found")]})
    result = run(github(httpserver), lake_uri, instance)
    assert result.success
    assert Counter(repo for repo, _ in server.log) == Counter(REPOS)  # no retries of a refusal
    rows = {r["downstream_repo"]: r for r in outcome_rows(lake_uri)}
    assert (rows["org-two/torch-tpu"]["outcome"], rows["org-two/torch-tpu"]["status_code"]) == ("refused", 403)
    assert "not accessible" in rows["org-two/torch-tpu"]["error"]
    assert (rows["org-three/torch-dsp"]["outcome"], rows["org-three/torch-dsp"]["status_code"]) == ("refused", 404)
    assert rows["acme-ai/torch-npu"]["outcome"] == "ok"
    meta = output_metadata(result)
    assert (meta["ok_count"], meta["refused_count"]) == (2, 2)
    assert "| org-two/torch-tpu | L2 | refused | 403 |" in meta["outcomes"]


def test_429_with_retry_after_is_waited_out(httpserver, instance, lake_uri):
    server = FakeGitHub(httpserver, **{"org-one/torch-fpga": [reply(429, {"Retry-After": "1"}), Response(status=204)]})
    start = time.monotonic()
    result = run(github(httpserver), lake_uri, instance)
    assert result.success
    assert time.monotonic() - start >= 1.0
    assert [r for r, _ in server.log].count("org-one/torch-fpga") == 2
    (row,) = [r for r in outcome_rows(lake_uri) if r["downstream_repo"] == "org-one/torch-fpga"]
    assert (row["outcome"], row["http_attempts"], row["waited_s"]) == ("ok", 2, 1.0)


def test_a_502_storm_is_retried_by_the_run_and_only_the_unacknowledged_repo_is_resent(httpserver, instance, lake_uri):
    storm = [reply(502)] * 4 + [Response(status=204)]
    server = FakeGitHub(httpserver, **{"org-three/torch-dsp": storm})
    # The client gives up after 3 attempts, which stops the pass (GitHub taken as down): the op's retry
    # sends to the repository not reached and then, last, again to that one.
    result = run(github(httpserver, max_retries=2), lake_uri, instance, retry_wait_s=0.0, max_retries=3)
    assert result.success
    assert Counter(r for r, _ in server.log) == Counter({"org-one/torch-fpga": 1, "org-two/torch-tpu": 1,
                                                         "acme-ai/torch-npu": 1, "org-three/torch-dsp": 5})
    assert server.acknowledged() == Counter({(SHA, r): 1 for r in REPOS})
    dsp = [r["outcome"] for r in outcome_rows(lake_uri) if r["downstream_repo"] == "org-three/torch-dsp"]
    assert dsp == ["unanswered", "ok"]  # GitHub may have taken the first: see the receiver's dispatch_evidence
    assert output_metadata(result)["already_acknowledged_count"] == 2


def test_a_dispatch_answered_too_late_is_unanswered_and_the_runs_retry_sends_it_again(httpserver, instance,
                                                                                    lake_uri):
    """GitHub takes the dispatch and answers after the client gave up: nobody can tell it landed, so it
    is recorded `unanswered` (not `failed`, which says nothing was sent) and the run's retry sends it
    again, as a dropped dispatch would go unnoticed."""
    import threading

    from pytest_httpserver import HTTPServer

    taken, resent = [], threading.Event()

    def late_then_quick(request):
        taken.append(json.loads(request.data)["client_payload"]["delivery_id"])
        if len(taken) == 1:  # GitHub takes it, and answers only after the client gave up and sent it again
            resent.wait(30)
        else:
            resent.set()
        return Response(status=204)

    github_api = HTTPServer(host="127.0.0.1", threaded=True)  # the late answer must not hold up the others
    github_api.start()
    try:
        github_api.expect_request("/repos/acme-ai/torch-npu/dispatches", method="POST").respond_with_handler(
            late_then_quick)
        FakeGitHub(github_api)
        result = run(github(github_api, read_timeout_s=0.2, max_retries=0), lake_uri, instance, retry_wait_s=0.0,
                     max_retries=1)
    finally:
        resent.set()
        github_api.clear()
        github_api.stop()
    assert result.success and taken == ["d-1", "d-1"]
    npu = [(r["outcome"], r["status_code"]) for r in outcome_rows(lake_uri) if r["downstream_repo"] == REPOS[3]]
    assert npu == [("unanswered", None), ("ok", 204)]
    assert {r["outcome"] for r in outcome_rows(lake_uri) if r["downstream_repo"] != REPOS[3]} == {"ok"}
    assert "Timeout" in next(r["error"] for r in outcome_rows(lake_uri) if r["outcome"] == "unanswered")


def test_only_a_send_github_explicitly_turned_away_is_failed_or_refused(httpserver, lake_uri):
    """A rate limit outlasting the retries and a 404 are GitHub's answers that nothing was dispatched;
    a 5xx past the retries is not."""
    from torchci_assets.config import AllowlistEntry

    FakeGitHub(httpserver, **{REPOS[0]: [reply(429, {"Retry-After": "0"})], REPOS[1]: [reply(404)],
                              REPOS[2]: [reply(503)]})
    targets = [AllowlistEntry(r, "L2") for r in REPOS[:3]]
    outcomes = dispatch.dispatch_event(github(httpserver, max_retries=1), Lake.at(lake_uri),
                                       dispatch.push_dispatch(commit()), targets, "run-1", settle_s=0.01)
    assert {o.repo: (o.outcome, o.status_code) for o in outcomes} == {
        REPOS[0]: ("failed", 429), REPOS[1]: ("refused", 404), REPOS[2]: ("unanswered", 503)}


def test_a_send_that_could_not_be_made_is_failed_not_unanswered(lake_uri):
    """A mistyped API address: nothing left the process, so no downstream run can call back for it."""
    from torchci_assets.config import AllowlistEntry

    gh = GitHubResource(api_url="htp://api.github.invalid", token=TOKEN, backoff_base_s=0.01, write_interval_s=0)
    (outcome,) = dispatch.dispatch_event(gh, Lake.at(lake_uri), dispatch.push_dispatch(commit()),
                                         [AllowlistEntry(REPOS[0], "L2")], "run-1", settle_s=0.01)
    assert (outcome.outcome, outcome.status_code) == ("failed", None) and "InvalidSchema" in outcome.error


def test_a_storm_outlasting_the_retries_fails_the_run_and_a_reexecution_finishes(httpserver, instance, lake_uri):
    server = FakeGitHub(httpserver, **{"acme-ai/torch-npu": [reply(502)] * 6 + [Response(status=204)]})
    failed = run(github(httpserver, max_retries=1), lake_uri, instance, retry_wait_s=0.0, max_retries=1)
    assert not failed.success
    assert sum(1 for r, _ in server.log if r != "acme-ai/torch-npu") == 3
    done = run(github(httpserver, max_retries=3), lake_uri, instance)
    assert done.success
    assert server.acknowledged() == Counter({(SHA, r): 1 for r in REPOS})


class CrashingGitHub(GitHubResource):
    """Dies (as a killed process would, with no chance to record anything) on the `crash_at`-th
    dispatch: before sending it, or after GitHub answered it (`after_answer`)."""

    crash_at: int
    after_answer: bool = False

    def dispatch(self, owner_repo, event_type, client_payload):
        calls = getattr(type(self), "calls", 0) + 1
        type(self).calls = calls
        if calls == self.crash_at and not self.after_answer:
            raise RuntimeError("simulated crash while sending")
        result = super().dispatch(owner_repo, event_type, client_payload)
        if calls == self.crash_at:
            raise RuntimeError("simulated crash between GitHub's answer and the ledger write")
        return result


def test_a_crash_between_two_dispatches_then_reexecution_sends_each_repo_exactly_once(
        httpserver, instance, lake_uri, monkeypatch):
    server = FakeGitHub(httpserver)
    writes = []
    real_record = dispatch.record_attempt

    def record_then_die(lake, row):  # claim, outcome, claim, outcome, then killed before the 3rd claim
        writes.append(row["outcome"])
        if len(writes) == 5:
            raise RuntimeError("simulated crash between two dispatches")
        return real_record(lake, row)

    monkeypatch.setattr(dispatch, "record_attempt", record_then_die)
    crashed = run(github(httpserver), lake_uri, instance)
    monkeypatch.setattr(dispatch, "record_attempt", real_record)
    assert not crashed.success
    assert len(server.log) == 2
    reexecuted = run(github(httpserver), lake_uri, instance)
    assert reexecuted.success
    assert server.acknowledged() == Counter({(SHA, r): 1 for r in REPOS})
    assert len(server.log) == 4
    rows = outcome_rows(lake_uri)
    assert len(rows) == 4 and {r["outcome"] for r in rows} == {"ok"}
    assert Counter(r["run_id"] for r in rows) == Counter({crashed.run_id: 2, reexecuted.run_id: 2})


def test_a_crash_between_githubs_answer_and_the_ledger_write_is_not_sent_again(httpserver, instance, lake_uri):
    server = FakeGitHub(httpserver)
    CrashingGitHub.calls = 0
    crashed = run(CrashingGitHub(api_url=httpserver.url_for(""), token=TOKEN, crash_at=3, after_answer=True,
                                 write_interval_s=0), lake_uri, instance)
    assert not crashed.success
    assert len(server.log) == 3
    reexecuted = run(github(httpserver), lake_uri, instance)
    assert reexecuted.success
    # GitHub saw each downstream exactly once; the third is in doubt in the ledger, not re-sent.
    assert server.acknowledged() == Counter({(SHA, r): 1 for r in REPOS})
    assert output_metadata(reexecuted)["in_doubt_count"] == 1
    third = server.log[2][0]
    assert [r["outcome"] for r in ledger_rows(Lake.at(lake_uri), SHA) if r["downstream_repo"] == third] == ["claimed"]


def test_a_crash_while_sending_leaves_that_one_downstream_in_doubt_and_the_rest_sent(httpserver, instance, lake_uri):
    server = FakeGitHub(httpserver)
    CrashingGitHub.calls = 0
    crashed = run(CrashingGitHub(api_url=httpserver.url_for(""), token=TOKEN, crash_at=3, write_interval_s=0),
                  lake_uri, instance)
    assert not crashed.success
    reexecuted = run(github(httpserver), lake_uri, instance)
    assert reexecuted.success
    assert len(server.log) == 3  # nobody can tell whether the third left: it is not sent twice
    assert output_metadata(reexecuted)["in_doubt_count"] == 1
    assert output_metadata(reexecuted)["ok_count"] == 1


class SlowClaims(Lake):
    """A lake whose ledger writes take 0.8 s, as a slow object-store PUT of a claim may."""

    def write(self, table, day, data, part="data"):
        time.sleep(0.8)
        return super().write(table, day, data, part)


def test_a_claim_slower_to_write_than_a_racer_waits_is_withdrawn_not_sent_beside_it(httpserver, lake_uri):
    """A writer whose claim takes 0.8 s to write, racing a tick 50 ms later whose read-back (0.5 s
    after its own claim) cannot see that claim: only the tick sends (GitHub takes a second to
    answer, so its `ok` is not recorded yet when the slow writer reads back); the slow one
    withdraws, and a later attempt finds the target acknowledged. Alone, a slow writer sends."""
    import threading

    from torchci_assets.config import AllowlistEntry

    fake = FakeGitHub(httpserver)
    httpserver.clear_all_handlers()
    httpserver.expect_request(re.compile(r"^/repos/[^/]+/[^/]+/dispatches$"), method="POST").respond_with_handler(
        lambda request: (time.sleep(1.0), fake(request))[1])
    target = [AllowlistEntry(REPOS[0], "L1")]
    fast = Lake.at(lake_uri)
    slow = SlowClaims(fast.store)

    def attempt(lake, sha, name, **kw):
        return [o.outcome for o in dispatch.dispatch_event(github(httpserver), lake,
                                                           dispatch.push_dispatch(commit(sha=sha)), target, name, **kw)]

    assert attempt(slow, BEFORE, "alone") == ["ok"] and len(fake.log) == 1

    outcomes = {}

    def writer(name, lake, delay):
        time.sleep(delay)
        outcomes[name] = attempt(lake, SHA, name)

    threads = [threading.Thread(target=writer, args=("run", slow, 0.0)),
               threading.Thread(target=writer, args=("tick", fast, 0.05))]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert outcomes == {"run": ["deferred"], "tick": ["ok"]} and len(fake.log) == 2
    assert sorted(r["outcome"] for r in ledger_rows(fast, SHA)) == ["claimed", "claimed", "ok", "withdrawn"]
    assert attempt(fast, SHA, "retry", settle_s=0.01) == ["already_acknowledged"] and len(fake.log) == 2


def test_the_claim_that_lost_a_race_is_withdrawn_so_the_winners_failed_send_is_retried(httpserver, lake_uri):
    """A tick and a run claim one target at once; the loser stands aside. The winner's send fails
    (GitHub answers 500 past the client's retries): its retry must send, not find the loser's
    claim open and leave the target in doubt for good."""
    import threading

    from torchci_assets.config import AllowlistEntry

    fake = FakeGitHub(httpserver, **{REPOS[0]: [Response(status=500), Response(status=204)]})
    target = [AllowlistEntry(REPOS[0], "L1")]
    lake = Lake.at(lake_uri)
    event = dispatch.push_dispatch(commit())
    client = github(httpserver, max_retries=0)
    together = threading.Barrier(2)
    outcomes = {}

    class ClaimTogether(Lake):
        """The two writers' claims land together, however the threads are scheduled."""

        def write(self, table, day, data, part="data"):
            if "claimed" in data.column("outcome").to_pylist():
                together.wait(timeout=30)
            return super().write(table, day, data, part)

    def writer(name):
        outcomes[name] = [o.outcome for o in dispatch.dispatch_event(client, ClaimTogether(lake.store), event, target,
                                                                     name, settle_s=0.3)]

    threads = [threading.Thread(target=writer, args=(name,)) for name in ("tick", "run")]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert sorted(o for v in outcomes.values() for o in v) == ["claimed_elsewhere", "unanswered"] and len(fake.log) == 1
    assert [o.outcome for o in dispatch.dispatch_event(client, lake, event, target, "retry", settle_s=0.01)] == ["ok"]
    assert fake.acknowledged() == Counter({(SHA, REPOS[0]): 1})
    assert sorted(r["outcome"] for r in ledger_rows(lake, SHA)) == [
        "claimed", "claimed", "claimed", "ok", "unanswered", "withdrawn"]


def ledger_row(sha, repo, outcome, at):
    return {"sha": sha, "upstream_repo": "pytorch/pytorch", "downstream_repo": repo, "level": "L2",
            "event_type": "push", "delivery_id": "d-1", "source": "webhook", "attempted_at": at, "status_code": None,
            "outcome": outcome, "error": "", "http_attempts": 0, "waited_s": 0.0, "run_id": "r", "attempt_id": outcome,
            "check_run_wanted": False}


def test_a_commits_ledger_rows_are_found_by_name_among_other_commits_parts(roots):
    """On both backends: the parts named after the commit, in each day folder of the window, and no
    other commit's (one whose id shares all but its last character included)."""
    import datetime as dt

    lake = Lake.at(roots.lake_uri)
    now = dt.datetime.now(dt.timezone.utc)
    near = SHA[:-1] + "0"
    for sha, repo, outcome, back in ((SHA, REPOS[0], "claimed", 1), (SHA, REPOS[0], "ok", 0), (near, REPOS[1], "ok", 0),
                                     ("a" * 40, REPOS[2], "ok", 0), (SHA, REPOS[3], "refused", 9)):
        dispatch.record_attempt(lake, ledger_row(sha, repo, outcome, now - dt.timedelta(days=back)))
    rows = ledger_rows(lake, SHA, now=now)
    assert [(r["sha"], r["downstream_repo"], r["outcome"]) for r in rows] == [
        (SHA, REPOS[0], "claimed"), (SHA, REPOS[0], "ok")]  # the refusal 9 days back is past the window


def test_a_link_named_like_a_commits_part_is_refused_not_followed(tmp_path):
    import datetime as dt
    import os

    from resources.storage import Store

    lake = Lake.at(str(tmp_path / "lake"))
    now = dt.datetime.now(dt.timezone.utc)
    part = dispatch.record_attempt(lake, ledger_row(SHA, REPOS[0], "ok", now))
    folder = part.rsplit("/", 1)[0]
    outside = tmp_path / "outside.parquet"
    outside.write_bytes((tmp_path / "lake" / part).read_bytes())
    os.symlink(outside, tmp_path / "lake" / folder / f"{SHA}-evil.parquet")
    (tmp_path / "lake" / folder / f".{SHA}-x.parquet").write_bytes(b"staging")
    listed = Store(str(tmp_path / "lake")).list_named(folder, f"{SHA}-", (".parquet",))
    assert [(e.path.rsplit("/", 1)[-1], e.refused is None) for e in listed] == [
        (f"{SHA}-evil.parquet", False), (part.rsplit("/", 1)[-1], True)]
    assert [r["outcome"] for r in ledger_rows(lake, SHA, now=now)] == ["ok"]


def test_dry_run_sends_nothing_and_a_later_real_run_still_sends(httpserver, instance, lake_uri):
    server = FakeGitHub(httpserver)
    dry = run(GitHubResource(api_url=httpserver.url_for("")), lake_uri, instance)
    assert dry.success
    assert server.log == []
    assert {r["outcome"] for r in outcome_rows(lake_uri)} == {"dry_run"}
    meta = output_metadata(dry)
    assert (meta["dry_run"], meta["dry_run_count"], meta["ok_count"]) == (True, 4, 0)
    logs = [e.user_message for e in instance.all_logs(dry.run_id)]
    would = [m for m in logs if m.startswith("DRY RUN: would POST")]
    assert len(would) == 4
    assert any(m.startswith(f"DRY RUN: would POST {httpserver.url_for('')}repos/acme-ai/torch-npu/dispatches")
               and m.endswith("(set GITHUB_TOKEN to send)") for m in would)

    assert run(github(httpserver), lake_uri, instance).success
    assert server.acknowledged() == Counter({(SHA, r): 1 for r in REPOS})


def test_a_malformed_sha_fails_before_anything_is_sent(httpserver, instance, lake_uri):
    server = FakeGitHub(httpserver)
    bad = commit()
    config = run_config_for(bad)
    config["ops"]["dispatch_to_downstreams"]["config"]["sha"] = "not-a-sha"
    result = dispatch_job.execute_in_process(run_config=config, instance=instance, raise_on_error=False,
                                             resources={"github": github(httpserver),
                                                        "lake": LakeResource(uri=lake_uri)})
    assert not result.success
    assert server.log == []


def test_a_huge_push_is_trimmed_within_githubs_limits():
    big = "x" * 1_000_000
    commits = [{"id": f"{i:040x}", "message": big, "added": ["f"] * 1000} for i in range(20)]
    payload = {"ref": "refs/heads/main", "before": BEFORE, "after": commits[-1]["id"], "forced": True,
               "created": False, "deleted": False, "commits": commits,
               "head_commit": {**commits[-1], "timestamp": "2026-11-22T03:00:00Z"},
               "repository": {"full_name": "pytorch/pytorch", "description": big, "owner": {"login": "pytorch"}}}
    trimmed = trim_push_payload(payload)
    c = UpstreamCommit("pytorch/pytorch", commits[-1]["id"], "refs/heads/main", BEFORE, True, "d-9",
                       "2026-11-22T03:00:00Z", "webhook", trimmed)
    body = validate_dispatch("org-one/torch-fpga", "push", client_payload(c))
    assert len(body) < 8000
    assert trimmed["commit_count"] == 20 and trimmed["commit_ids"][-1] == commits[-1]["id"]
    assert trimmed["repository"] == {"full_name": "pytorch/pytorch"}
    assert trimmed["forced"] is True and len(trimmed["head_commit"]["message"]) == 2000
