"""The relay's pull-request sensors write to GitHub in their tick: exactly once under a tick that
runs out of time, a transient failure, a tick killed between GitHub's answer and the ledger write,
and two replicas (two processes) ticking at once; a dry run without credentials. GitHub is a real
HTTP server on 127.0.0.1 (tests/fake_github_relay.py), the deliveries @octokit/webhooks-examples
payloads, the callbacks built by the vendored report_callback.py."""

import json
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import dagster as dg
import pytest

from jobs import relay_prs
from jobs.relay_prs import check_run_job, check_run_sensor, pull_request_dispatch_job, pull_request_sensor
from resources.configured import ArchiveResource, LakeResource
from resources.github import GitHubResource
from resources.lake import Lake
from tests.fake_github_relay import FakeRelayGitHub, reply
from tests.test_relay_pull_requests import (  # noqa: F401  (relay_config, quick_ticks: autouse)
    L2,
    L4,
    NOW,
    REPOS,
    archive_callbacks,
    callback_record,
    dispatched_to,
    github,
    pr_payload,
    quick_ticks,
    relay_config,
    roots,
)
from torchci_assets.relay import check_runs as check_runs_module
from torchci_assets.relay import dispatch as dispatch_module
from torchci_assets.relay.acting import act_within
from torchci_assets.relay.check_runs import ACTIONS_TABLE
from torchci_assets.relay.dispatch import ledger_rows
from torchci_assets.relay.listening import Listening

ROOT = Path(__file__).resolve().parent.parent


def resources(roots, gh) -> dict:
    return {"archive": ArchiveResource(uri=roots[1]), "github": gh, "lake": LakeResource(uri=roots[0])}


def tick(sensor, roots, gh, cursor=None):
    with dg.build_sensor_context(cursor=cursor, resources=resources(roots, gh)) as context:
        return sensor(context)


def deliver(roots, *payloads) -> tuple[list[str], str]:
    """Archive pull_request deliveries in a new file; (their delivery ids, their head sha)."""
    folder = Path(roots[1]) / "webhooks" / f"day={NOW:%Y-%m-%d}"
    folder.mkdir(parents=True, exist_ok=True)
    ids = [f"d-{uuid.uuid4().hex[:8]}" for _ in payloads]
    lines = [json.dumps({"event": "pull_request", "delivery_id": d, "received_at": "2026-11-25T10:00:00Z",
                         "payload": p}) for d, p in zip(ids, payloads)]
    (folder / f"{uuid.uuid4().hex[:8]}.jsonl").write_text("\n".join(lines) + "\n")
    return ids, payloads[0]["pull_request"]["head"]["sha"]


def started(roots, gh, sensor=pull_request_sensor, stream="webhooks") -> str:
    """The cursor of a first tick over an archive with one old file (taken as read)."""
    folder = Path(roots[1]) / stream / f"day={NOW:%Y-%m-%d}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "old.jsonl").write_text("")
    return tick(sensor, roots, gh).cursor


def sent(server) -> Counter:
    return Counter((b["client_payload"]["delivery_id"], r) for r, b in server.dispatches())


def run_items(request) -> list[dict]:
    return json.loads(next(iter(request.run_config["ops"].values()))["config"]["events_json"])


def execute(request, gh, roots, instance):
    op = next(iter(request.run_config["ops"]))
    config = {**request.run_config["ops"][op]["config"], "claim_settle_s": 0.01, "retry_wait_s": 0.01}
    job = {j.name: j for j in (pull_request_dispatch_job, check_run_job)}[request.job_name]
    return job.execute_in_process(run_config={"ops": {op: {"config": config}}}, instance=instance,
                                  raise_on_error=False,
                                  resources={"github": gh, "lake": LakeResource(uri=roots[0])})


def test_act_within_stops_starting_at_its_budget_and_leaves_failures_and_the_rest():
    clock = iter(range(100)).__next__
    outcomes = {"a": {"x": "ok"}, "b": {"x": "failed"}, "c": {"x": "ok"}, "d": {"x": "ok"}}

    def act(item):
        if item == "c":
            raise RuntimeError("no answer")
        return outcomes[item]

    acted = act_within("abcd", act, str, budget_s=3, clock=clock)  # the clock says 1, 2, 3, 4 s elapsed
    assert acted.done == {"a": {"x": "ok"}, "b": {"x": "failed"}}
    assert acted.left == ["b", "c", "d"]  # b failed, c raised, d came after the budget
    assert acted.errors == ["c: RuntimeError: no answer"]


def test_a_tick_out_of_time_hands_its_deliveries_to_one_run_that_sends_each_once(httpserver, instance, roots,
                                                                                   monkeypatch):
    server = FakeRelayGitHub(httpserver)
    cursor = started(roots, github(httpserver))
    ids, _ = deliver(roots, pr_payload("opened"), pr_payload("synchronize"))
    no_time = Listening(budget_s=10.0, listen_s=0.0, act_s=-1.0)  # past the time to act: nothing is sent
    monkeypatch.setattr(relay_prs, "LISTENING", no_time)
    result = tick(pull_request_sensor, roots, github(httpserver), cursor)
    assert server.dispatches() == []
    (request,) = result.run_requests
    assert request.job_name == "pull_request_dispatch_job"
    assert sorted(e["delivery_id"] for e in run_items(request)) == sorted(ids)
    assert execute(request, github(httpserver), roots, instance).success
    assert sent(server) == Counter({(d, r): 1 for d in ids for r in REPOS})


def test_a_tick_listens_and_dispatches_a_delivery_that_lands_while_it_runs(httpserver, roots, monkeypatch):
    server = FakeRelayGitHub(httpserver)
    cursor = started(roots, github(httpserver))
    monkeypatch.setattr(relay_prs, "LISTENING", Listening(budget_s=10.0, listen_s=2.0, poll_s=0.05))
    later: list = []
    timer = threading.Timer(0.5, lambda: later.append(deliver(roots, pr_payload("synchronize"))))
    timer.start()
    began = time.monotonic()
    result = tick(pull_request_sensor, roots, github(httpserver), cursor)
    took = time.monotonic() - began
    timer.join()
    ((delivery,), _sha) = later[0]
    assert sent(server) == Counter({(delivery, r): 1 for r in REPOS})  # by the tick that was running
    assert result.asset_events[0].metadata["outcomes"].data == {delivery: {r: "ok" for r in REPOS}}
    assert 2.0 <= took < 14.0  # it listened 2 s past its find, and stopped
    again = tick(pull_request_sensor, roots, github(httpserver), result.cursor)
    assert not again.asset_events and len(server.dispatches()) == 4


def test_a_transient_failure_in_a_tick_goes_to_a_run_that_sends_only_what_is_missing(httpserver, instance, roots):
    server = FakeRelayGitHub(httpserver, **{L2: [reply(502, {"message": "Server Error"})] * 2 + [reply(204)]})
    cursor = started(roots, github(httpserver))
    (delivery,), _ = deliver(roots, pr_payload("opened"))
    result = tick(pull_request_sensor, roots, github(httpserver), cursor)
    outcomes = result.asset_events[0].metadata["outcomes"].data[delivery]
    # the tick's client tried twice; GitHub taken as down, the tick sent nothing after it
    before, after = REPOS[:REPOS.index(L2)], REPOS[REPOS.index(L2) + 1:]
    assert outcomes == {**{r: "ok" for r in before}, L2: "unanswered", **{r: "deferred" for r in after}}
    (request,) = result.run_requests
    assert execute(request, github(httpserver), roots, instance).success
    assert [r for r, _ in server.dispatches()].count(L2) == 3  # 502, 502, then 204 from the run
    assert {r: n for r, n in Counter(r for r, _ in server.dispatches()).items() if r != L2} == \
        {r: 1 for r in REPOS if r != L2}


class Killed(BaseException):
    """The process dying: not an error a tick catches."""


def test_a_tick_killed_between_githubs_answer_and_the_ledger_write_sends_each_downstream_once(
        httpserver, roots, monkeypatch):
    server = FakeRelayGitHub(httpserver)
    cursor = started(roots, github(httpserver))
    (delivery,), _ = deliver(roots, pr_payload("synchronize"))
    real, victim = dispatch_module.record_attempt, sorted(REPOS)[1]

    def die_after_the_answer(lake, row, *a):
        if row["outcome"] == "ok" and row["downstream_repo"] == victim:
            raise Killed()
        return real(lake, row, *a)

    monkeypatch.setattr(dispatch_module, "record_attempt", die_after_the_answer)
    with pytest.raises(Killed):
        tick(pull_request_sensor, roots, github(httpserver), cursor)  # no cursor returned: the daemon keeps the old
    monkeypatch.setattr(dispatch_module, "record_attempt", real)
    again = tick(pull_request_sensor, roots, github(httpserver), cursor)
    assert sent(server) == Counter({(delivery, r): 1 for r in REPOS})
    outcomes = again.asset_events[0].metadata["outcomes"].data[delivery]
    assert outcomes[victim] == "in_doubt"  # claimed, answered, never recorded: not sent again
    assert not again.run_requests


def test_a_check_run_whose_answer_a_tick_lost_goes_to_a_run_that_finds_it(httpserver, instance, roots, monkeypatch):
    server = FakeRelayGitHub(httpserver)
    cursor = started(roots, github(httpserver), check_run_sensor, "ci-results")
    cp = {"event_type": "pull_request", "delivery_id": "d-1", "payload": pr_payload("opened")}
    dispatched_to(roots, cp, L4)
    archive_callbacks(roots, [callback_record(L4, "L4", "completed", cp, conclusion="success")])
    server.crash_after.add("check-runs")  # GitHub creates it; the answer is a 502
    result = tick(check_run_sensor, roots, github(httpserver), cursor)
    (request,) = result.run_requests
    monkeypatch.setattr(check_runs_module, "IN_FLIGHT_S", 0.0)  # the tick's claim is a dead writer's now
    assert execute(request, github(httpserver), roots, instance).success
    assert len(server.check_runs) == 1
    rows = ledger_rows(Lake.at(roots[0]), server.check_runs[0]["head_sha"], table=ACTIONS_TABLE)
    assert [(r["outcome"], r["error"]) for r in rows if r["action"] == "check_run"][-1] == ("ok", "found on GitHub")


def test_a_tick_without_credentials_sends_nothing_and_records_dry_runs(httpserver, roots):
    server = FakeRelayGitHub(httpserver)
    dry = GitHubResource(api_url=httpserver.url_for(""))
    cursor = started(roots, dry)
    (delivery,), sha = deliver(roots, pr_payload("opened"))
    result = tick(pull_request_sensor, roots, dry, cursor)
    assert server.requests == []
    assert result.asset_events[0].metadata["outcomes"].data == {delivery: {r: "dry_run" for r in REPOS}}
    assert [r["outcome"] for r in ledger_rows(Lake.at(roots[0]), sha)] == ["dry_run"] * 4


def race(sensor: str, roots, httpserver, cursor: str, tmp_path) -> list[dict]:
    """Two replica processes ticking `sensor` from the same cursor at the same moment."""
    (tmp_path / "cursor").write_text(cursor)
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-m", "tests.relay_replica", sensor, roots[0], roots[1],
                               httpserver.url_for(""), str(tmp_path / "cursor"), str(go), str(tmp_path / f"out-{n}")],
                              cwd=ROOT) for n in range(2)]
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"out-{n}.ready").exists() for n in range(2)) and time.monotonic() < deadline:
        time.sleep(0.05)
    go.touch()
    assert [p.wait(120) for p in procs] == [0, 0]
    return [json.loads((tmp_path / f"out-{n}").read_text()) for n in range(2)]


def test_two_replica_processes_ticking_at_once_dispatch_each_delivery_once(httpserver, roots, tmp_path):
    server = FakeRelayGitHub(httpserver)
    cursor = started(roots, github(httpserver))
    ids, _ = deliver(roots, pr_payload("opened"), pr_payload("closed"))
    replicas = race("pull_request_sensor", roots, httpserver, cursor, tmp_path)
    for delivery in ids:  # one replica sent; the other saw its claim or its answer, and stood down
        for repo in REPOS:  # (or, its claim slow to write on a loaded machine, withdrew: see below)
            seen = sorted(rep["outcomes"][delivery][repo] for rep in replicas)
            assert ("ok" in seen) + ("deferred" in seen) == 1, seen
            assert set(seen) - {"ok", "deferred"} <= {"already_acknowledged", "claimed_elsewhere", "in_doubt"}, seen
    run_left(pull_request_dispatch_job, replicas, roots, httpserver)
    assert sent(server) == Counter({(d, r): 1 for d in ids for r in REPOS})


def run_left(job, replicas: list[dict], roots, httpserver) -> None:
    """Execute the runs the replicas' ticks left behind, as the daemon would."""
    for config in (c for rep in replicas for c in rep["runs"]):
        op = next(iter(config["ops"]))
        config["ops"][op]["config"].update(claim_settle_s=0.01, retry_wait_s=0.05)
        assert job.execute_in_process(run_config=config, resources=resources(roots, github(httpserver)),
                                      instance=dg.DagsterInstance.ephemeral()).success


def test_two_replica_processes_ticking_at_once_create_each_check_run_once(httpserver, roots, tmp_path):
    server = FakeRelayGitHub(httpserver)
    cursor = started(roots, github(httpserver), check_run_sensor, "ci-results")
    cp = {"event_type": "pull_request", "delivery_id": "d-1", "payload": pr_payload("opened")}
    dispatched_to(roots, cp, L4)
    archive_callbacks(roots, [callback_record(L4, "L4", "in_progress", cp, job_name=job) for job in ("build", "test")])
    replicas = race("check_run_sensor", roots, httpserver, cursor, tmp_path)
    # One replica created each; the other stood down, found it on GitHub, or left it to a run.
    # It stands down as `already_acknowledged` when its claim came before the winner's answer
    # was recorded and the answer came during its settle (timing decides which one it sees). On a
    # loaded machine a claim can take longer to write than a racer waits: that writer withdraws
    # (`deferred`) and, if its racer stood down too, the check run is left to the run.
    for key in replicas[0]["outcomes"]:
        seen = sorted(o for rep in replicas for o in rep["outcomes"].get(key, {}).values())
        assert seen.count("created") + seen.count("deferred") == 1 and set(seen) - {"created", "deferred"} <= {
            "claimed_elsewhere", "in_flight", "already_created", "already_acknowledged", "found"}, seen
    run_left(check_run_job, replicas, roots, httpserver)
    assert Counter(name for name, _, _ in server.check_run_names()) == Counter(
        {f"crcr/{L4}/upstream-ci/build": 1, f"crcr/{L4}/upstream-ci/test": 1})


def test_a_backlog_is_read_a_few_files_at_a_time_and_all_of_it_acted_on_in_order(roots):
    from torchci_assets.config import load_config
    from torchci_assets.relay.acting import Acted
    from torchci_assets.relay.listening import MAX_ITEMS_PER_READ, listen
    from torchci_assets.relay.pull_requests import pick_relay_event

    cursor = started(roots, GitHubResource(api_url="http://127.0.0.1:9"))
    ids = [deliver(roots, pr_payload("synchronize"))[0][0] for _ in range(MAX_ITEMS_PER_READ + 5)]
    batches: list[list[str]] = []

    def act(events, seconds_left):
        batches.append([e.delivery_id for e in events])
        return Acted(done={e.delivery_id: {"x": "ok"} for e in events})

    store = ArchiveResource(uri=roots[1]).store()
    heard = listen(store, cursor, load_config(), pick_relay_event, "webhooks", act,
                   Listening(budget_s=10.0, listen_s=0.0, poll_s=0.01))
    assert [len(b) for b in batches] == [MAX_ITEMS_PER_READ, 5]  # two reads, one right after the other
    assert sorted(sum(batches, [])) == sorted(ids) and not heard.acted.left
    again = listen(store, heard.cursor, load_config(), pick_relay_event, "webhooks", act,
                   Listening(budget_s=10.0, listen_s=0.0, poll_s=0.01))
    assert len(batches) == 2 and not again.acted.done  # the cursor covers all of it


def test_a_listening_tick_ends_at_once_when_it_leaves_something_to_a_run(roots):
    """A quiet tick listens long (each tick costs Dagster the same whatever it finds), but a label,
    a re-run or an unsent write goes to a run that starts only when the tick ends: it ends then."""
    from torchci_assets.config import load_config
    from torchci_assets.relay.acting import Acted
    from torchci_assets.relay.listening import listen
    from torchci_assets.relay.pull_requests import pick_relay_event

    cursor = started(roots, GitHubResource(api_url="http://127.0.0.1:9"))
    store = ArchiveResource(uri=roots[1]).store()
    slept: list[float] = []
    now = [0.0]

    def sleep(s):
        slept.append(s)
        now[0] += s

    def act_leaving(events, seconds_left):
        return Acted(left=list(events))

    long = Listening(budget_s=20.0, listen_s=15.0, poll_s=0.5)
    (delivery,), _ = deliver(roots, pr_payload("synchronize"))  # one it could not send
    heard = listen(store, cursor, load_config(), pick_relay_event, "webhooks", act_leaving, long,
                   clock=lambda: now[0], sleep=sleep)
    assert [e.delivery_id for e in heard.acted.left] == [delivery]
    assert heard.reads == 1 and slept == []  # no listening once something waits for a run

    quiet = listen(store, heard.cursor, load_config(), pick_relay_event, "webhooks", act_leaving, long,
                   clock=lambda: now[0], sleep=sleep)
    assert not quiet.acted.left and quiet.reads == 31 and sum(slept) == 15.0  # a quiet tick listens 15 s
