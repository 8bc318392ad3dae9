"""The relay's pull-request side against a real HTTP server on 127.0.0.1 playing GitHub: dispatch of
@octokit/webhooks-examples pull_request deliveries, upstream check runs from callbacks built by the
vendored report_callback.py, the three ciflow/crcr label orderings, reopen with stale labels, and
re-runs from check_run / check_suite rerequested."""

import copy
import datetime as dt
import json
import re
import threading
import uuid
from collections import Counter
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest

from jobs import relay_prs
from jobs.relay_prs import (
    check_run_job,
    check_run_label_job,
    event_item,
    pull_request_dispatch_job,
    pull_request_sensor,
    rerun_job,
    zombie_check_run_job,
)
from resources.configured import ArchiveResource, LakeResource
from resources.github import GitHubResource
from resources.lake import Lake
from tests.fake_github_relay import FakeRelayGitHub, LatestFilterGitHub, reply
from tests.relay_callbacks import action_env, build_payload, forwarded
from torchci_assets.config import load_config
from torchci_assets.relay import dispatch as dispatch_module
from torchci_assets.relay.check_runs import ACTIONS_SCHEMA, ACTIONS_TABLE, create_check_run, job_state
from torchci_assets.relay.dispatch import PR_EVENT_TYPE, Dispatch, dispatch_event, ledger_rows, record_attempt
from torchci_assets.relay.listening import Listening
from torchci_assets.relay.pull_requests import relay_event
from torchci_assets.relay.zombies import zombie_jobs

DATA = Path(__file__).parent / "data" / "octokit"
UPSTREAM = "Codertocat/Hello-World"  # the repository of the octokit examples
TOKEN = "ghp_testtoken000000000000000000000000"
L1, L2, L3, L4 = "org-one/torch-fpga", "org-two/torch-tpu", "acme-ai/torch-npu", "big-co/torch-gpu"
REPOS = [L1, L2, L3, L4]
CONFIG = f"""
upstream: {{repo: {UPSTREAM}, branches: [main]}}
poll_commits: false
allowlist:
  L1: [{L1}]
  L2: [{L2}]
  L3:
    npu:
      {L3}: [npu-oncall]
  L4:
    - {L4}: gpu-oncall
maintainer_approved: [{L4}]
"""
# The relay reads its ledgers over the days before the real clock (`LEDGER_LOOKBACK_DAYS`): a fixed
# date here would age out of that window and fail every test that records a dispatch.
NOW = dt.datetime.now(dt.timezone.utc).replace(second=0, microsecond=0)


def use_relay_config(tmp_path, monkeypatch) -> None:
    """CONFIG in force (upstream, allowlist), for this test: what the relay's jobs and helpers load."""
    path = tmp_path / "relay.yaml"
    path.write_text(CONFIG)
    monkeypatch.setenv("TORCHCI_CONFIG", str(path))


@pytest.fixture(autouse=True)
def relay_config(tmp_path, monkeypatch):
    use_relay_config(tmp_path, monkeypatch)


@pytest.fixture(autouse=True)
def quick_ticks(monkeypatch):
    """A sensor tick reads the archive once here (in service it listens a few seconds more)."""
    monkeypatch.setattr(relay_prs, "LISTENING", Listening(budget_s=10.0, listen_s=0.0, poll_s=0.01))


@pytest.fixture
def roots(tmp_path):
    return str(tmp_path / "lake"), str(tmp_path / "archive")


def pr_payload(action: str, labels=(), fork: bool = False) -> dict:
    """The octokit example for `action` (`edited` is the `opened` one renamed: the package has
    none), with the given label names."""
    examples = json.loads((DATA / "examples.json").read_text())["api.github.com"]["pull_request"]
    payload = copy.deepcopy(next(p for p in examples if p["action"] == ("opened" if action == "edited" else action)))
    payload["action"] = action
    template = {"id": 1, "node_id": "x", "url": "", "name": "", "color": "ededed", "default": False}
    payload["pull_request"]["labels"] = [{**template, "name": name} for name in labels]
    if fork:
        head_repo = payload["pull_request"]["head"]["repo"]
        head_repo.update(full_name="a-contributor/Hello-World", fork=True)
        payload["pull_request"]["head"]["label"] = "a-contributor:changes"
    return payload


def label_payload(device: str) -> dict:
    payload = pr_payload("labeled", labels=["bug", f"ciflow/crcr/{device}"])
    payload["label"] = {**payload["label"], "name": f"ciflow/crcr/{device}"}
    return payload


def event_of(event: str, payload: dict, delivery: str | None = None):
    found, why = relay_event(event, delivery or str(uuid.uuid4()), NOW, payload, load_config())
    return found


def github(httpserver, **kw):
    kw.setdefault("token", TOKEN)
    kw.setdefault("backoff_base_s", 0.01)
    kw.setdefault("write_interval_s", 0)
    return GitHubResource(api_url=httpserver.url_for(""), **kw)


def execute(job, op, config: dict, gh, roots, instance):
    lake_uri, archive_uri = roots
    config = {"claim_settle_s": 0.01, "retry_wait_s": 0.05, **config}
    return job.execute_in_process(run_config={"ops": {op: {"config": config}}}, instance=instance,
                                  raise_on_error=False,
                                  resources={"github": gh, "lake": LakeResource(uri=lake_uri),
                                             "archive": ArchiveResource(uri=archive_uri)})


def events(*items) -> dict:
    return {"events_json": json.dumps(list(items))}


def dispatch(event, gh, roots, instance):
    return execute(pull_request_dispatch_job, "dispatch_pull_requests", events(event_item(event)), gh, roots, instance)


def callback_record(repo: str, level: str, status: str, client_payload: dict, *, run_id: int = 7001,
                    job_name: str = "build", conclusion: str = "", run_attempt: int = 1) -> dict:
    """The ci-results archive record of a callback report_callback.py builds in a job started by
    our dispatch (its `client_payload` echoed)."""
    env = action_env(status, repo=repo, run_id=run_id, run_attempt=run_attempt, job_name=job_name,
                     workflow="upstream-ci", conclusion=conclusion, client_payload=client_payload)
    return forwarded(build_payload(env, NOW), repo, NOW, level)


def archive_callbacks(roots, records: list[dict]) -> None:
    folder = Path(roots[1]) / "ci-results" / f"day={NOW:%Y-%m-%d}"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"cb-{uuid.uuid4().hex[:6]}.jsonl", "a") as out:
        for record in records:
            out.write(json.dumps(record) + "\n")


def dispatched_to(roots, client_payload: dict, *repos: str) -> None:
    """The dispatch ledger's acknowledgement of `client_payload`'s delivery to `repos`, for its head:
    what a callback about it needs before it gets a check run (the receiver's head check)."""
    sha = client_payload["payload"]["pull_request"]["head"]["sha"]
    for repo in repos:
        record_attempt(Lake.at(roots[0]), {
            "sha": sha, "upstream_repo": "pytorch/pytorch", "downstream_repo": repo, "event_type": PR_EVENT_TYPE,
            "delivery_id": client_payload["delivery_id"], "attempted_at": NOW, "outcome": "ok",
            "attempt_id": uuid.uuid4().hex})


def check_run(record: dict, gh, roots, instance):
    return execute(check_run_job, "create_upstream_check_runs", events(record), gh, roots, instance)


def client_payload_of(server: FakeRelayGitHub, repo: str, n: int = -1) -> dict:
    return [b for r, b in server.dispatches() if r == repo][n]["client_payload"]


# ---- dispatch ------------------------------------------------------------------------


@pytest.mark.parametrize("action", ["opened", "reopened", "synchronize", "closed"])
def test_each_action_is_dispatched_once_per_downstream_in_the_relays_shape(action, httpserver, instance, roots):
    server = FakeRelayGitHub(httpserver)
    payload = pr_payload(action)
    event = event_of("pull_request", payload, "delivery-1")
    assert event.kind == "dispatch"
    assert dispatch(event, github(httpserver), roots, instance).success
    assert Counter(r for r, _ in server.dispatches()) == Counter(REPOS)
    body = server.dispatches()[0][1]
    # What a downstream written as the relay's README (`types: [pull_request]`) receives.
    assert body["event_type"] == "pull_request"
    assert body["client_payload"] == {"event_type": "pull_request", "delivery_id": "delivery-1", "payload": payload}
    # Re-executing the run sends nothing more.
    assert dispatch(event, github(httpserver), roots, instance).success
    assert len(server.dispatches()) == 4


def test_two_deliveries_of_the_same_head_are_two_events(httpserver, instance, roots):
    server = FakeRelayGitHub(httpserver)
    for action in ("opened", "closed"):
        assert dispatch(event_of("pull_request", pr_payload(action)), github(httpserver), roots, instance).success
    assert Counter(r for r, _ in server.dispatches()) == Counter({r: 2 for r in REPOS})
    assert {b["client_payload"]["payload"]["action"] for _, b in server.dispatches()} == {"opened", "closed"}


@pytest.mark.parametrize("action", ["edited", "assigned", "unlabeled", "ready_for_review"])
def test_other_actions_are_not_dispatched(action):
    assert event_of("pull_request", pr_payload(action)) is None


def test_a_label_other_than_ciflow_crcr_does_nothing():
    assert event_of("pull_request", pr_payload("labeled", labels=["bug"])) is None


def test_a_pull_request_from_a_fork_is_dispatched_with_the_forks_head(httpserver, instance, roots):
    server = FakeRelayGitHub(httpserver)
    payload = pr_payload("opened", fork=True)
    event = event_of("pull_request", payload)
    assert event.sha == payload["pull_request"]["head"]["sha"]
    assert dispatch(event, github(httpserver), roots, instance).success
    sent = client_payload_of(server, L1)["payload"]["pull_request"]["head"]["repo"]
    assert (sent["full_name"], sent["fork"]) == ("a-contributor/Hello-World", True)


def test_another_repositorys_pull_request_is_not_relayed():
    payload = pr_payload("opened")
    payload["repository"] = {**payload["repository"], "full_name": "someone/else"}
    assert event_of("pull_request", payload) is None


def test_a_huge_description_is_trimmed_to_fit_githubs_limit_and_nothing_else_changes():
    payload = pr_payload("opened")
    payload["pull_request"]["body"] = "x" * 70_000
    event = event_of("pull_request", payload)
    assert len(json.dumps({"event_type": "pull_request", "delivery_id": "d", "payload": event.payload})) < 65535
    assert event.payload["pull_request"]["body"] == "x" * 2000
    assert event.payload["pull_request"]["head"]["sha"] == payload["pull_request"]["head"]["sha"]
    assert event.payload["repository"]["full_name"] == UPSTREAM


def test_a_crash_between_githubs_answer_and_the_ledger_write_sends_once(httpserver, instance, roots, monkeypatch):
    server = FakeRelayGitHub(httpserver)
    event = event_of("pull_request", pr_payload("synchronize"))
    real = dispatch_module.record_attempt

    def die_after_the_third_answer(lake, row, *a):
        if row["outcome"] == "ok" and row["downstream_repo"] == sorted(REPOS)[2]:
            raise RuntimeError("killed between GitHub's 204 and the ledger write")
        return real(lake, row, *a)

    monkeypatch.setattr(dispatch_module, "record_attempt", die_after_the_third_answer)
    assert not dispatch(event, github(httpserver), roots, instance).success
    monkeypatch.setattr(dispatch_module, "record_attempt", real)
    again = dispatch(event, github(httpserver), roots, instance)
    assert again.success
    assert Counter(r for r, _ in server.dispatches()) == Counter(REPOS)


def test_two_replicas_racing_on_one_delivery_send_each_downstream_once(httpserver, roots):
    server = FakeRelayGitHub(httpserver)
    event = event_of("pull_request", pr_payload("opened"))
    config = load_config()
    payload = {"event_type": PR_EVENT_TYPE, "delivery_id": event.delivery_id, "payload": event.payload}
    work = Dispatch(event.sha, UPSTREAM, PR_EVENT_TYPE, event.delivery_id, "webhook", payload, per_delivery=True)
    results = {}

    def replica(name):
        results[name] = dispatch_event(github(httpserver), Lake.at(roots[0]), work, config.allowlist, name,
                                       settle_s=0.3)

    threads = [threading.Thread(target=replica, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert Counter(r for r, _ in server.dispatches()) == Counter(REPOS)
    outcomes = Counter(o.outcome for res in results.values() for o in res)
    assert outcomes["ok"] == 4 and outcomes["ok"] + outcomes["claimed_elsewhere"] + outcomes["in_doubt"] \
        + outcomes["already_acknowledged"] == 8


def test_dry_run_records_what_would_be_sent(httpserver, instance, roots):
    server = FakeRelayGitHub(httpserver)
    event = event_of("pull_request", pr_payload("opened"))
    result = dispatch(event, GitHubResource(api_url=httpserver.url_for("")), roots, instance)
    assert result.success and server.requests == []
    logs = [e.user_message for e in instance.all_logs(result.run_id)]
    assert sum(m.startswith("DRY RUN: would POST") and "event_type=pull_request" in m for m in logs) == 4


# ---- check runs ----------------------------------------------------------------------


def dispatched(server, httpserver, instance, roots, action="opened", labels=()):
    payload = pr_payload(action, labels=labels)
    event = event_of("pull_request", payload)
    assert dispatch(event, github(httpserver), roots, instance).success
    return event


def test_l4_gets_an_in_progress_then_a_completed_check_run_named_as_the_relay_names_it(httpserver, instance, roots):
    server = FakeRelayGitHub(httpserver)
    event = dispatched(server, httpserver, instance, roots)
    cp = client_payload_of(server, L4)
    for status, conclusion in (("in_progress", ""), ("completed", "success")):
        assert check_run(callback_record(L4, "L4", status, cp, conclusion=conclusion), github(httpserver),
                         roots, instance).success
    name = f"crcr/{L4}/upstream-ci/build"
    assert server.check_run_names(event.sha) == [(name, "in_progress", None), (name, "completed", "success")]
    created = server.check_runs[-1]
    assert created["external_id"] == f"7001:{cp['payload']['pull_request']['number']}"  # the relay's form
    assert created["details_url"] == f"{httpserver.url_for('')}{L4}/actions/runs/7001"  # GitHub's web address
    assert created["output"]["title"] == "Success"


def test_the_same_callback_twice_creates_one_check_run(httpserver, instance, roots):
    server = FakeRelayGitHub(httpserver)
    dispatched(server, httpserver, instance, roots)
    record = callback_record(L4, "L4", "in_progress", client_payload_of(server, L4))
    for _ in range(2):
        assert check_run(record, github(httpserver), roots, instance).success
    assert len(server.check_runs) == 1


def test_l2_and_push_callbacks_get_no_check_run(httpserver, instance, roots):
    server = FakeRelayGitHub(httpserver)
    dispatched(server, httpserver, instance, roots)
    assert job_state(callback_record(L2, "L2", "in_progress", client_payload_of(server, L2))) is None
    push = {"event_type": "push", "delivery_id": "d-1", "payload": {"after": "a" * 40}}
    assert job_state(callback_record(L4, "L4", "in_progress", push)) is None


@pytest.mark.parametrize("event_type", ["nightly", "periodic"])
def test_a_self_report_naming_a_pull_request_gets_no_check_run(event_type, httpserver, instance, roots):
    """Self-reports are accepted without a dispatch, so the pull request one names is not the
    relay's word: an L4 repository must not put a check run on any commit by naming it there."""
    server = FakeRelayGitHub(httpserver)
    event = dispatched(server, httpserver, instance, roots)
    cp = {**client_payload_of(server, L4), "event_type": event_type}
    record = callback_record(L4, "L4", "completed", cp, conclusion="success")
    assert job_state(record) is None
    assert check_run(record, github(httpserver), roots, instance).success
    assert server.check_run_names(event.sha) == []


def test_l3_label_before_dispatch(httpserver, instance, roots):
    server = FakeRelayGitHub(httpserver)
    event = dispatched(server, httpserver, instance, roots, labels=["ciflow/crcr/npu"])
    cp = client_payload_of(server, L3)
    assert check_run(callback_record(L3, "L3", "in_progress", cp), github(httpserver), roots, instance).success
    assert server.check_run_names(event.sha) == [(f"crcr/{L3}/upstream-ci/build", "in_progress", None)]


def test_l3_without_the_label_gets_none(httpserver, instance, roots):
    server = FakeRelayGitHub(httpserver)
    dispatched(server, httpserver, instance, roots, labels=["ciflow/crcr/other-device"])
    cp = client_payload_of(server, L3)
    result = check_run(callback_record(L3, "L3", "in_progress", cp), github(httpserver), roots, instance)
    assert result.success and server.check_runs == []


def label(httpserver, instance, roots):
    event = event_of("pull_request", label_payload("npu"))
    assert event.kind == "labeled"
    return execute(check_run_label_job, "label_check_runs", events(event_item(event)), github(httpserver), roots,
                   instance)


def test_l3_label_added_while_jobs_run_backfills_every_job_then_callbacks_follow(httpserver, instance, roots):
    server = FakeRelayGitHub(httpserver)
    event = dispatched(server, httpserver, instance, roots)
    cp = client_payload_of(server, L3)
    started = [callback_record(L3, "L3", "in_progress", cp, job_name=job) for job in ("build", "test-1")]
    for record in started:
        assert check_run(record, github(httpserver), roots, instance).success
    assert server.check_runs == []  # no label yet
    archive_callbacks(roots, started)
    assert label(httpserver, instance, roots).success
    assert sorted(server.check_run_names(event.sha)) == [(f"crcr/{L3}/upstream-ci/build", "in_progress", None),
                                                         (f"crcr/{L3}/upstream-ci/test-1", "in_progress", None)]
    # The completed callback echoes the unlabeled dispatch payload: the label's flag still counts.
    done = callback_record(L3, "L3", "completed", cp, job_name="build", conclusion="failure")
    assert check_run(done, github(httpserver), roots, instance).success
    assert server.check_run_names(event.sha)[-1] == (f"crcr/{L3}/upstream-ci/build", "completed", "failure")


def test_l3_label_added_after_the_jobs_finished_creates_completed_check_runs_only(httpserver, instance, roots):
    server = FakeRelayGitHub(httpserver)
    event = dispatched(server, httpserver, instance, roots)
    cp = client_payload_of(server, L3)
    records = [callback_record(L3, "L3", "in_progress", cp),
               callback_record(L3, "L3", "completed", cp, conclusion="success")]
    for record in records:
        assert check_run(record, github(httpserver), roots, instance).success
    archive_callbacks(roots, records)
    assert label(httpserver, instance, roots).success
    assert server.check_run_names(event.sha) == [(f"crcr/{L3}/upstream-ci/build", "completed", "success")]
    assert label(httpserver, instance, roots).success  # a second label event: nothing new
    assert len(server.check_runs) == 1


def test_reopen_with_stale_labels_in_the_echoed_payload_still_gets_its_check_run(httpserver, instance, roots):
    server = FakeRelayGitHub(httpserver)
    event = dispatched(server, httpserver, instance, roots, action="reopened", labels=["ciflow/crcr/npu"])
    stale = copy.deepcopy(client_payload_of(server, L3))
    stale["payload"]["pull_request"]["labels"] = []  # what the downstream echoes is not today's PR
    assert check_run(callback_record(L3, "L3", "in_progress", stale), github(httpserver), roots, instance).success
    assert server.check_run_names(event.sha) == [(f"crcr/{L3}/upstream-ci/build", "in_progress", None)]


def test_a_check_run_whose_answer_was_lost_is_found_not_created_twice(httpserver, instance, roots):
    server = FakeRelayGitHub(httpserver)
    dispatched(server, httpserver, instance, roots)
    record = callback_record(L4, "L4", "completed", client_payload_of(server, L4), conclusion="success")
    server.crash_after.add("check-runs")  # GitHub creates it, the answer is a 502
    result = check_run(record, github(httpserver), roots, instance)
    assert result.success and retries(result) == 1  # the run's retry looks it up
    assert len(server.check_runs) == 1
    rows = ledger_rows(Lake.at(roots[0]), server.check_runs[0]["head_sha"], table=ACTIONS_TABLE)
    assert [r["outcome"] for r in rows if r["action"] == "check_run"] == ["claimed", "ok"]
    assert rows[-1]["github_id"] == server.check_runs[0]["id"]
    assert check_run(record, github(httpserver), roots, instance).success and len(server.check_runs) == 1


def retries(result) -> int:
    return sum(1 for e in result.all_events if e.event_type_value == "STEP_UP_FOR_RETRY")


def test_a_rerun_github_failed_to_start_is_sent_by_the_runs_retry(httpserver, instance, roots):
    """A 502 that started nothing, past the client's own retries: the run reads the downstream
    run back on its retry, sees no new attempt, and sends the re-run then, once."""
    server = FakeRelayGitHub(httpserver)
    failing = [reply(502, {"message": "Server Error"})]

    def flaky(request):
        if request.method == "POST" and "/rerun" in request.path and failing:
            return failing.pop()
        return server(request)

    httpserver.clear_all_handlers()
    httpserver.expect_request(re.compile(r"^/repos/.*")).respond_with_handler(flaky)
    payload = checks_example("check_run")
    payload["check_run"].update(name=f"crcr/{L3}/upstream-ci/build", external_id="7007")
    found = event_of("check_run", payload, "rr-7")
    result = execute(rerun_job, "rerun_downstream", events(event_item(found)), github(httpserver, max_retries=0),
                     roots, instance)
    assert result.success and retries(result) == 1
    assert result.output_for_node("rerun_downstream") == {f"{L3}#7007": "rerun"}
    assert server.reruns() == [(L3, 7007)]


def test_a_check_run_github_failed_to_create_is_created_by_the_runs_retry(httpserver, instance, roots):
    """A 502 that created nothing (past the client's own retries) fails neither the run nor the
    check run: the run retries, and the other callbacks of the run are created meanwhile."""
    server = FakeRelayGitHub(httpserver)
    dispatched(server, httpserver, instance, roots)
    cp = client_payload_of(server, L4)
    failing = [reply(502, {"message": "Server Error"})]

    def flaky(request):
        if request.method == "POST" and request.path.endswith("/check-runs") and failing:
            return failing.pop()
        return server(request)

    httpserver.clear_all_handlers()
    httpserver.expect_request(re.compile(r"^/repos/.*")).respond_with_handler(flaky)
    records = [callback_record(L4, "L4", "completed", cp, conclusion="success"),
               callback_record(L4, "L4", "completed", cp, conclusion="failure", job_name="test")]
    result = execute(check_run_job, "create_upstream_check_runs", events(*records), github(httpserver, max_retries=0),
                     roots, instance)
    assert result.success and retries(result) == 1
    name = f"crcr/{L4}/upstream-ci"
    assert sorted(server.check_run_names()) == [(f"{name}/build", "completed", "success"),
                                                (f"{name}/test", "completed", "failure")]


def test_two_replicas_racing_on_one_callback_create_one_check_run(httpserver, instance, roots):
    server = FakeRelayGitHub(httpserver)
    dispatched(server, httpserver, instance, roots)
    job = job_state(callback_record(L4, "L4", "in_progress", client_payload_of(server, L4)))
    config, results, start = load_config(), [], threading.Barrier(2)

    def replica(name: str) -> None:
        start.wait()
        results.append(create_check_run(github(httpserver), Lake.at(roots[0]), config, job, name, settle_s=0.3))

    threads = [threading.Thread(target=replica, args=(n,)) for n in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # The loser lost the claim, or saw the winner's claim still young ("in_flight": its run retries
    # later and then finds the check run), or, on a loaded machine where the winner finished before
    # the loser looked, saw its acknowledgement. Whichever: one check run.
    assert len(server.check_runs) == 1 and results.count("created") == 1
    assert set(results) - {"created"} <= {"claimed_elsewhere", "in_flight", "already_acknowledged"}


def test_an_in_progress_callback_after_the_completed_one_does_not_hide_it(httpserver, instance, roots):
    server = FakeRelayGitHub(httpserver)
    dispatched(server, httpserver, instance, roots)
    cp = client_payload_of(server, L4)
    assert check_run(callback_record(L4, "L4", "completed", cp, conclusion="success"), github(httpserver),
                     roots, instance).success
    assert check_run(callback_record(L4, "L4", "in_progress", cp), github(httpserver), roots, instance).success
    assert [c["status"] for c in server.check_runs] == ["completed"]
    # A re-run (attempt 2) of the same run is new work: its in-progress check run is created.
    assert check_run(callback_record(L4, "L4", "in_progress", cp, run_attempt=2), github(httpserver),
                     roots, instance).success
    assert [c["status"] for c in server.check_runs] == ["completed", "in_progress"]


# ---- check runs whose job never completes ---------------------------------------------


def sweep(gh, roots, instance, **config):
    """One run of zombie_check_run_job, as its schedule starts it."""
    return execute(zombie_check_run_job, "time_out_zombie_check_runs", config, gh, roots, instance)


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def test_a_check_run_whose_job_never_completes_is_timed_out_after_six_hours(httpserver, instance, roots):
    """The downstream runner of `build` is lost after its in_progress callback: its check run would stay
    in progress on the pull request for good. Six hours on, the sweep completes it as timed_out, once;
    `test`, which completed, is left alone, and a `completed` callback coming later changes nothing."""
    server = FakeRelayGitHub(httpserver)
    event = dispatched(server, httpserver, instance, roots)
    cp = client_payload_of(server, L4)
    records = [callback_record(L4, "L4", "in_progress", cp), callback_record(L4, "L4", "in_progress", cp, job_name="test"),
               callback_record(L4, "L4", "completed", cp, job_name="test", conclusion="success")]
    now = utc_now()
    for record in records:  # each taken by the receiver now, as it happens
        record["received_at"] = now.isoformat()
        assert check_run(record, github(httpserver), roots, instance).success
    lake = Lake.at(roots[0])
    assert zombie_jobs(lake, now + dt.timedelta(hours=5, minutes=59)) == []
    [zombie] = zombie_jobs(lake, now + dt.timedelta(hours=6, minutes=1))
    build = f"crcr/{L4}/upstream-ci/build"
    assert (zombie.name, zombie.run_id, zombie.run_attempt, zombie.status, zombie.conclusion) == (
        build, 7001, 1, "completed", "timed_out")
    result = sweep(github(httpserver), roots, instance, timeout_s=0.001)  # every check run is past it now
    assert result.success and result.output_for_node("time_out_zombie_check_runs") == {zombie.key: "created"}
    assert server.check_run_names(event.sha)[-1] == (build, "completed", "timed_out")
    assert server.check_runs[-1]["external_id"] == f"7001:{event.pr_number}"
    assert server.check_runs[-1]["output"]["title"] == "Timed_out"
    assert sweep(github(httpserver), roots, instance, timeout_s=0.001).success and len(server.check_runs) == 4
    late = callback_record(L4, "L4", "completed", cp, conclusion="success")
    assert check_run(late, github(httpserver), roots, instance).output_for_node(
        "create_upstream_check_runs") == {zombie.key: "already_created"}
    assert len(server.check_runs) == 4


def test_a_check_run_created_after_its_callback_is_timed_out_from_the_callback(httpserver, instance, roots):
    """A `ciflow/crcr` label added two hours into the job: its check run is created then, from the
    archived `in_progress` callback. The relay's sweeper, and the HUD, time the job out six hours
    after that callback, not six hours after the label."""
    server = FakeRelayGitHub(httpserver)
    dispatched(server, httpserver, instance, roots)
    record = callback_record(L4, "L4", "in_progress", client_payload_of(server, L4))
    now = utc_now()
    record["received_at"] = (now - dt.timedelta(hours=2)).isoformat()
    assert check_run(record, github(httpserver), roots, instance).success
    lake = Lake.at(roots[0])
    assert zombie_jobs(lake, now + dt.timedelta(hours=3, minutes=59)) == []
    [zombie] = zombie_jobs(lake, now + dt.timedelta(hours=4, minutes=1))
    assert (zombie.run_id, zombie.status, zombie.conclusion) == (7001, "completed", "timed_out")


def test_a_check_run_recorded_before_callbacks_times_were_kept_counts_from_its_creation(roots):
    """A ledger written by an earlier version has no `heard_at` column at all: its check runs are
    timed out a timeout after their creation, and the sweep reads it without failing."""
    job = job_state(callback_record(L4, "L4", "in_progress", {"delivery_id": "d-1", "payload": {"pull_request": {
        "number": 1, "head": {"sha": "ab" * 20}}}}))
    schema = pa.schema([f for f in ACTIONS_SCHEMA if f.name != "heard_at"])
    row = {name: None for name in schema.names}
    row.update(action="check_run", key=job.key, sha=job.head_sha, upstream_repo=UPSTREAM, downstream_repo=L4,
               pr_number=1, name=job.name, status="in_progress", external_id=str(job.run_id),
               delivery_id=job.delivery_id, outcome="ok", attempted_at=utc_now())
    record_attempt(Lake.at(roots[0]), row, ACTIONS_TABLE, schema)
    assert zombie_jobs(Lake.at(roots[0]), utc_now() + dt.timedelta(hours=5, minutes=59)) == []
    [zombie] = zombie_jobs(Lake.at(roots[0]), utc_now() + dt.timedelta(hours=6, minutes=1))
    assert zombie.key == job.key.replace("in_progress", "completed")


def test_a_completed_check_run_whose_create_answer_was_lost_is_no_zombie(httpserver, instance, roots, monkeypatch):
    """The real `completed` (success) was created on GitHub, its answer lost and the claim left in doubt:
    the sweep must not time it out, which would put a red check run over the job's green one."""
    from resources.github import GitHubError
    from torchci_assets.relay import check_runs

    server = FakeRelayGitHub(httpserver)
    event = dispatched(server, httpserver, instance, roots)
    cp = client_payload_of(server, L4)
    assert check_run(callback_record(L4, "L4", "in_progress", cp), github(httpserver), roots, instance).success
    server.crash_after.add("check-runs")  # GitHub creates it; its answer is a 502, and the retries run out
    job = job_state(callback_record(L4, "L4", "completed", cp, conclusion="success"))
    with pytest.raises(GitHubError):
        create_check_run(github(httpserver), Lake.at(roots[0]), load_config(), job, "run-x", settle_s=0.01)
    server.crash_after.discard("check-runs")
    monkeypatch.setattr(check_runs, "IN_FLIGHT_S", 0.0)  # hours later, when the sweep sees it
    result = sweep(github(httpserver), roots, instance, timeout_s=0.001)
    assert result.output_for_node("time_out_zombie_check_runs") == {}
    assert [c for _, _, c in server.check_run_names(event.sha)] == [None, "success"]


def test_a_zombie_superseded_on_its_head_or_no_longer_wanted_is_left_as_it_is(httpserver, instance, roots,
                                                                               tmp_path):
    """Run 7001's `build` was lost, then the run was re-run (attempt 2), which completed: GitHub shows the
    newest check run of the name, attempt 2's, which a timed_out one would hide. The L3 repository's
    in-progress check run is left too once the repository is no longer L3, as the relay's sweeper does."""
    server = FakeRelayGitHub(httpserver)
    event = dispatched(server, httpserver, instance, roots, labels=["ciflow/crcr/npu"])
    l4, l3 = client_payload_of(server, L4), client_payload_of(server, L3)
    for record in (callback_record(L4, "L4", "in_progress", l4),
                   callback_record(L4, "L4", "in_progress", l4, run_attempt=2),
                   callback_record(L4, "L4", "completed", l4, run_attempt=2, conclusion="success"),
                   callback_record(L3, "L3", "in_progress", l3)):
        assert check_run(record, github(httpserver), roots, instance).success
    before = server.check_run_names(event.sha)
    assert [j.downstream_repo for j in zombie_jobs(Lake.at(roots[0]), utc_now() + dt.timedelta(hours=7))] == [L3]
    (tmp_path / "relay.yaml").write_text(CONFIG.replace(f"  L2: [{L2}]", f"  L2: [{L2}, {L3}]").replace(
        f"    npu:\n      {L3}: [npu-oncall]\n", "    npu: {}\n"))
    assert load_config().entry_for(L3).level == "L2"
    result = sweep(github(httpserver), roots, instance, timeout_s=0.001)
    assert result.success and list(result.output_for_node("time_out_zombie_check_runs").values()) == ["not_wanted"]
    assert server.check_run_names(event.sha) == before


def l3_demoted_config() -> str:
    return CONFIG.replace(f"  L2: [{L2}]", f"  L2: [{L2}, {L3}]").replace(f"    npu:\n      {L3}: [npu-oncall]\n",
                                                                        "    npu: {}\n")


def sweep_logs(result, instance) -> list[str]:
    return [e.user_message for e in instance.all_logs(result.run_id) if "no longer gets check runs" in e.user_message]


def test_a_zombie_no_longer_wanted_is_decided_once_not_at_every_sweep(httpserver, instance, roots, tmp_path):
    """The schedule sweeps every 10 minutes for 3 days: a check run left as it is must be said so once,
    as the relay's sweeper drops its tracker, not 432 times. A `completed` callback that comes after all
    still gets its check run."""
    server = FakeRelayGitHub(httpserver)
    event = dispatched(server, httpserver, instance, roots, labels=["ciflow/crcr/npu"])
    cp = client_payload_of(server, L3)
    assert check_run(callback_record(L3, "L3", "in_progress", cp), github(httpserver), roots, instance).success
    (tmp_path / "relay.yaml").write_text(l3_demoted_config())
    first = sweep(github(httpserver), roots, instance, timeout_s=0.001)
    assert list(first.output_for_node("time_out_zombie_check_runs").values()) == ["not_wanted"]
    assert len(sweep_logs(first, instance)) == 1
    again = sweep(github(httpserver), roots, instance, timeout_s=0.001)
    assert again.success and again.output_for_node("time_out_zombie_check_runs") == {}
    assert sweep_logs(again, instance) == []
    assert server.check_run_names(event.sha) == [(f"crcr/{L3}/upstream-ci/build", "in_progress", None)]
    (tmp_path / "relay.yaml").write_text(CONFIG)
    late = callback_record(L3, "L3", "completed", cp, conclusion="success")
    assert check_run(late, github(httpserver), roots, instance).success
    assert server.check_run_names(event.sha)[-1] == (f"crcr/{L3}/upstream-ci/build", "completed", "success")


def test_a_zombie_of_a_repository_promoted_to_l3_after_its_dispatch_is_timed_out(httpserver, instance, roots,
                                                                               tmp_path):
    """The pull request carried `ciflow/crcr/npu` when it was dispatched to acme-ai/torch-npu, then at L2;
    the repository was promoted to L3 before its job started, so the job's callback, echoing the label,
    got a check run. The relay's sweeper reads the labels of that callback and completes the check run as
    timed_out; the sweep must not leave it in progress for good for want of a flag the dispatch never set
    (it was not L3 then)."""
    server = FakeRelayGitHub(httpserver)
    (tmp_path / "relay.yaml").write_text(l3_demoted_config())
    event = dispatched(server, httpserver, instance, roots, labels=["ciflow/crcr/npu"])
    (tmp_path / "relay.yaml").write_text(CONFIG)
    cp = client_payload_of(server, L3)
    assert check_run(callback_record(L3, "L3", "in_progress", cp), github(httpserver), roots, instance).success
    build = f"crcr/{L3}/upstream-ci/build"
    assert server.check_run_names(event.sha) == [(build, "in_progress", None)]
    result = sweep(github(httpserver), roots, instance, timeout_s=0.001)
    assert result.success and list(result.output_for_node("time_out_zombie_check_runs").values()) == ["created"]
    assert server.check_run_names(event.sha)[-1] == (build, "completed", "timed_out")


def test_the_schedules_sweeps_follow_the_timeout_of_the_config_file(httpserver, instance, roots, tmp_path):
    """`build` reported in progress two hours ago and nothing since. The sweeps the schedule starts set no
    timeout of their own: at the relay's 6 h it is not due; once the operator sets 90 minutes in the
    config file, the next sweep completes it."""
    server = FakeRelayGitHub(httpserver)
    event = dispatched(server, httpserver, instance, roots)
    job = job_state(callback_record(L4, "L4", "in_progress", client_payload_of(server, L4)))
    row = {name: None for name in ACTIONS_SCHEMA.names}
    row.update(action="check_run", key=job.key, sha=job.head_sha, upstream_repo=UPSTREAM, downstream_repo=L4,
               pr_number=job.pr_number, name=job.name, status="in_progress", external_id=str(job.run_id),
               delivery_id=job.delivery_id, outcome="ok", attempted_at=utc_now() - dt.timedelta(hours=2))
    record_attempt(Lake.at(roots[0]), row, ACTIONS_TABLE, ACTIONS_SCHEMA)
    assert sweep(github(httpserver), roots, instance).output_for_node("time_out_zombie_check_runs") == {}
    (tmp_path / "relay.yaml").write_text(CONFIG + "zombie_timeout_seconds: 5400\n")
    result = sweep(github(httpserver), roots, instance)
    assert result.output_for_node("time_out_zombie_check_runs") == {job.key.replace("in_progress", "completed"):
                                                                    "created"}
    assert server.check_run_names(event.sha) == [(job.name, "completed", "timed_out")]


def test_the_sweep_in_dry_run_sends_nothing_and_says_what_it_would(httpserver, instance, roots):
    server = FakeRelayGitHub(httpserver)
    dispatched(server, httpserver, instance, roots)
    assert check_run(callback_record(L4, "L4", "in_progress", client_payload_of(server, L4)), github(httpserver),
                     roots, instance).success
    sent = len(server.requests)
    dry = GitHubResource(api_url=httpserver.url_for(""))
    result = sweep(dry, roots, instance, timeout_s=0.001)
    assert result.success and list(result.output_for_node("time_out_zombie_check_runs").values()) == ["dry_run"]
    logs = [e.user_message for e in instance.all_logs(result.run_id)]
    assert any(m.startswith("DRY RUN: would POST") and "conclusion=timed_out" in m for m in logs)
    assert len(server.requests) == sent
    assert sweep(dry, roots, instance, timeout_s=0.001).output_for_node("time_out_zombie_check_runs") == {}


def test_the_sweep_runs_every_ten_minutes_where_github_credentials_are_set(monkeypatch):
    from resources.credentials import has_credentials
    from torchci_assets.definitions import defs

    schedule = defs.resolve_schedule_def("zombie_check_run_schedule")
    assert schedule.cron_schedule == "*/10 * * * *" and schedule.job_name == zombie_check_run_job.name
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    monkeypatch.delenv("GITHUB_APP_ID", raising=False)
    assert not has_credentials()
    monkeypatch.setenv("GITHUB_APP_ID", "123")
    assert has_credentials()


# ---- re-runs -------------------------------------------------------------------------
# ---- re-runs -------------------------------------------------------------------------


def checks_example(event: str) -> dict:
    payload = copy.deepcopy(json.loads((DATA / "checks.json").read_text())[event][0])
    payload["repository"] = {**payload["repository"], "full_name": UPSTREAM}
    return payload


def rerun(payload: dict, event: str, httpserver, instance, roots, delivery=None):
    found = event_of(event, payload, delivery)
    return execute(rerun_job, "rerun_downstream", events(event_item(found)), github(httpserver), roots, instance)


def test_check_run_rerequested_reruns_the_failed_jobs_of_that_run_once(httpserver, instance, roots):
    server = FakeRelayGitHub(httpserver)
    payload = checks_example("check_run")
    payload["check_run"].update(name=f"crcr/{L3}/upstream-ci/build", external_id="7001")
    assert rerun(payload, "check_run", httpserver, instance, roots, "rr-1").success
    assert rerun(payload, "check_run", httpserver, instance, roots, "rr-1").success  # the same request again
    assert server.reruns("rerun-failed-jobs") == server.reruns() == [(L3, 7001)]


def test_a_rerun_whose_answer_was_lost_is_read_back_not_sent_twice(httpserver, instance, roots):
    """GitHub re-runs the jobs and answers 502: the run's new attempt shows the re-run landed."""
    server = FakeRelayGitHub(httpserver)
    server.crash_after.add("rerun")
    payload = checks_example("check_run")
    payload["check_run"].update(name=f"crcr/{L3}/upstream-ci/build", external_id="7005")
    result = rerun(payload, "check_run", httpserver, instance, roots, "rr-5")
    assert result.success and result.output_for_node("rerun_downstream") == {f"{L3}#7005": "rerun"}
    server.running.clear()  # its failed jobs failed again, fast
    assert rerun(payload, "check_run", httpserver, instance, roots, "rr-5").success
    assert server.reruns() == [(L3, 7005)]


def test_a_rerun_a_crash_left_claimed_is_not_sent_again_once_its_run_is_over(httpserver, instance, roots,
                                                                               monkeypatch):
    """A crash between GitHub's answer and the ledger, then the re-run over before anyone looks
    again: "already running" cannot tell, the run's latest attempt can."""
    from torchci_assets.relay import check_runs, reruns

    server = FakeRelayGitHub(httpserver)
    payload = checks_example("check_run")
    payload["check_run"].update(name=f"crcr/{L3}/upstream-ci/build", external_id="7006")
    real = reruns.record_action

    def die_on_the_answer(lake, row):
        if row["outcome"] == "ok":
            raise RuntimeError("killed between GitHub's 201 and the ledger write")
        return real(lake, row)

    monkeypatch.setattr(reruns, "record_action", die_on_the_answer)
    assert not rerun(payload, "check_run", httpserver, instance, roots, "rr-6").success
    monkeypatch.setattr(reruns, "record_action", real)
    server.running.clear()
    monkeypatch.setattr(check_runs, "IN_FLIGHT_S", 0.0)  # the claim is stale at once
    result = rerun(payload, "check_run", httpserver, instance, roots, "rr-6")
    assert result.success and result.output_for_node("rerun_downstream") == {f"{L3}#7006": "already_rerun"}
    assert server.reruns() == [(L3, 7006)]


def test_rerequested_while_the_run_is_already_running_is_a_no_op(httpserver, instance, roots):
    server = FakeRelayGitHub(httpserver)
    server.running.add((L4, 7002))
    payload = checks_example("check_run")
    payload["check_run"].update(name=f"crcr/{L4}/upstream-ci/test", external_id="7002:2")  # the relay's form
    result = rerun(payload, "check_run", httpserver, instance, roots)
    assert result.success
    assert result.output_for_node("rerun_downstream") == {f"{L4}#7002": "already_running"}


def test_rerequested_on_an_l2_repository_is_refused(httpserver, instance, roots):
    server = FakeRelayGitHub(httpserver)
    payload = checks_example("check_run")
    payload["check_run"].update(name=f"crcr/{L2}/upstream-ci/build", external_id="7003")
    result = rerun(payload, "check_run", httpserver, instance, roots)
    assert result.success and server.reruns() == []
    assert result.output_for_node("rerun_downstream") == {f"{L2}#7003": "refused"}


def test_a_check_run_not_created_by_the_relay_is_not_acted_on():
    assert event_of("check_run", checks_example("check_run")) is None  # octokit's own "randscape"


def test_check_suite_rerequested_reruns_each_l3_plus_run_once(httpserver, instance, roots):
    server = FakeRelayGitHub(httpserver)
    sha = checks_example("check_suite")["check_suite"]["head_sha"]
    for name, run_id in ((f"crcr/{L3}/upstream-ci/build", "8001"), (f"crcr/{L3}/upstream-ci/test", "8001"),
                         (f"crcr/{L4}/upstream-ci/build", "8002"), (f"crcr/{L2}/upstream-ci/build", "8003"),
                         ("some-other-app-check", "8004")):
        server.add_check_run(name, sha, run_id)
    payload = checks_example("check_suite")
    payload["check_suite"]["id"] = server.suites[sha]
    result = rerun(payload, "check_suite", httpserver, instance, roots)
    assert result.success
    # "Re-run all checks" re-runs every job of each run, as the relay does, not only the failed ones
    assert sorted(server.reruns("rerun")) == sorted(server.reruns()) == [(L3, 8001), (L4, 8002)]
    assert result.output_for_node("rerun_downstream")[f"{L2}#8003"] == "refused"


def test_rerun_all_checks_leaves_superseded_downstream_runs_alone(httpserver, instance, roots):
    """Closed and reopened on the same head, a pull request was dispatched twice: each dispatch started
    a downstream run (7001, then 7002) and both reported, so the head carries each check name from both,
    7002's the newest. The Checks tab shows 7002's; "Re-run all checks" re-runs 7002 alone."""
    server = LatestFilterGitHub(httpserver)
    sha = checks_example("check_suite")["check_suite"]["head_sha"]
    for run_id in ("7001", "7002"):
        for job in ("build", "test"):
            server.add_check_run(f"crcr/{L4}/upstream-ci/{job}", sha, run_id)
    payload = checks_example("check_suite")
    payload["check_suite"]["id"] = server.suites[sha]
    result = rerun(payload, "check_suite", httpserver, instance, roots)
    assert result.success
    assert server.reruns("rerun") == server.reruns() == [(L4, 7002)]
    assert result.output_for_node("rerun_downstream") == {f"{L4}#7002": "rerun"}


# ---- the sensor ----------------------------------------------------------------------


def sensor_resources(roots, gh) -> dict:
    return {"archive": ArchiveResource(uri=roots[1]), "github": gh, "lake": LakeResource(uri=roots[0])}


def sensor_started(httpserver, instance, roots):
    """(the fake GitHub, today's webhook folder, the sensor's resources, its first tick): the archive
    as read, so what lands next is what the next tick acts on."""
    server = FakeRelayGitHub(httpserver)
    folder = Path(roots[1]) / "webhooks" / f"day={NOW:%Y-%m-%d}"
    folder.mkdir(parents=True)
    (folder / "old.jsonl").write_text("")
    resources = sensor_resources(roots, github(httpserver))
    with dg.build_sensor_context(instance=instance, resources=resources) as ctx:
        first = pull_request_sensor(ctx)
    return server, folder, resources, first


def test_the_sensor_dispatches_in_its_tick_and_asks_runs_for_labels_and_reruns(httpserver, instance, roots):
    server, folder, resources, first = sensor_started(httpserver, instance, roots)
    lines = []
    for n, (event, payload) in enumerate([("pull_request", pr_payload("opened")),
                                          ("pull_request", pr_payload("edited")),
                                          ("pull_request", label_payload("npu")),
                                          ("check_run", {**checks_example("check_run"), "check_run": {
                                              **checks_example("check_run")["check_run"],
                                              "name": f"crcr/{L3}/ci/build", "external_id": "1"}}),
                                          ("push", {"ref": "refs/heads/main"})]):
        lines.append(json.dumps({"event": event, "delivery_id": f"d-{n}", "received_at": "2026-11-25T10:00:00Z",
                                 "payload": payload}))
    (folder / "new.jsonl").write_text("\n".join(lines) + "\n")
    with dg.build_sensor_context(instance=instance, cursor=first.cursor, resources=resources) as ctx:
        result = pull_request_sensor(ctx)
    # The tick itself sent d-0 to every downstream, and recorded it in the ledger.
    assert Counter(r for r, _ in server.dispatches()) == Counter(REPOS)
    assert {b["client_payload"]["delivery_id"] for _, b in server.dispatches()} == {"d-0"}
    (materialization,) = result.asset_events
    assert materialization.asset_key == dg.AssetKey("dispatches")
    assert materialization.metadata["outcomes"].data == {"d-0": {r: "ok" for r in REPOS}}
    asked = {r.job_name: [e["delivery_id"] for e in json.loads(
        r.run_config["ops"][next(iter(r.run_config["ops"]))]["config"]["events_json"])] for r in result.run_requests}
    assert asked == {"check_run_label_job": ["d-2"], "rerun_job": ["d-3"]}
    # The next tick finds nothing new: each delivery is acted on once.
    with dg.build_sensor_context(instance=instance, cursor=result.cursor, resources=resources) as ctx:
        again = pull_request_sensor(ctx)
    assert not again.run_requests and not again.asset_events and len(server.dispatches()) == 4


def test_a_pull_request_torchci_backfill_wrote_is_history_and_not_dispatched(httpserver, instance, roots):
    """A backfill writes a repository's past pull requests into today's folder (a pull request
    opened before its first day is filed on that day): the sensor must not dispatch them again."""
    from torchci_assets.backfill.shapes import pull_request_deliveries

    server, folder, resources, first = sensor_started(httpserver, instance, roots)
    payload = pr_payload("opened")
    pr = {**payload["pull_request"], "created_at": "2026-11-25T09:00:00Z"}
    rest = [line for _, line in pull_request_deliveries(pr, payload["repository"])]
    webhook = json.dumps({"event": "pull_request", "delivery_id": "d-live", "received_at": "2026-11-25T10:00:00Z",
                          "payload": payload})
    (folder / "new.jsonl").write_bytes(b"\n".join(rest) + b"\n" + webhook.encode() + b"\n")
    with dg.build_sensor_context(instance=instance, cursor=first.cursor, resources=resources) as ctx:
        pull_request_sensor(ctx)
    assert {b["client_payload"]["delivery_id"] for _, b in server.dispatches()} == {"d-live"}


def test_one_run_relays_every_delivery_of_its_tick_each_once(httpserver, instance, roots):
    server = FakeRelayGitHub(httpserver)
    batch = [event_of("pull_request", pr_payload(a)) for a in ("opened", "synchronize", "closed")]
    result = execute(pull_request_dispatch_job, "dispatch_pull_requests", events(*map(event_item, batch)),
                     github(httpserver), roots, instance)
    assert result.success
    assert Counter(b["client_payload"]["delivery_id"] for _, b in server.dispatches()) == Counter(
        {e.delivery_id: 4 for e in batch})


def test_the_check_run_sensor_creates_the_l3_l4_pull_request_check_runs_in_its_tick(httpserver, instance, roots):
    server = FakeRelayGitHub(httpserver)
    folder = Path(roots[1]) / "ci-results" / f"day={NOW:%Y-%m-%d}"
    folder.mkdir(parents=True)
    (folder / "old.jsonl").write_text("")
    resources = sensor_resources(roots, github(httpserver))
    from jobs.relay_prs import check_run_sensor

    with dg.build_sensor_context(instance=instance, resources=resources) as ctx:
        first = check_run_sensor(ctx)
    cp = {"event_type": "pull_request", "delivery_id": "d-1", "payload": pr_payload("opened")}
    dispatched_to(roots, cp, L4, L2, L3)
    archive_callbacks(roots, [callback_record(L4, "L4", "in_progress", cp), callback_record(L2, "L2", "in_progress", cp),
                              callback_record(L3, "L3", "completed", cp, conclusion="success")])
    with dg.build_sensor_context(instance=instance, cursor=first.cursor, resources=resources) as ctx:
        result = check_run_sensor(ctx)
    assert not result.run_requests
    sha = cp["payload"]["pull_request"]["head"]["sha"]
    # L4 always; L3 without its device's label gets none; L2 is not even read as a check run.
    assert server.check_run_names(sha) == [(f"crcr/{L4}/upstream-ci/build", "in_progress", None)]
    outcomes = result.asset_events[0].metadata["outcomes"].data
    assert sorted(v for d in outcomes.values() for v in d.values()) == ["created", "not_wanted"]
