"""Every GitHub write of a writer path, killed (SIGKILL) at that write, then the path run again as
the next tick would: GitHub ends as after one clean run, each issue, comment, re-run exactly once.

The writer runs in a process of its own against a fake GitHub on 127.0.0.1; the server kills that
process at its n-th write (POST, PATCH, PUT, DELETE), either before applying it or after applying it
and before answering (GitHub did it, the client never heard). The next run is made here, with the
same lake, and GitHub's state compared with that of a clean run of the same path in a fresh world.
Not here: the relay's repository dispatches, which GitHub cannot be asked about afterwards: one
killed while sending is left in doubt and never sent twice (test_relay_dispatch.py).
"""

from __future__ import annotations

import datetime as dt
import multiprocessing
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Callable
from unittest import mock

import pytest
from fake_github_pulls import FakePullRequests
from fake_github_relay import FakeRelayGitHub
from test_relay_pull_requests import CONFIG as RELAY_CONFIG
from test_relay_pull_requests import L4, callback_record
from test_reenable import BOT, DAY, FIXED, HALF, clean, lake_with
from test_retired_tests import stats
from werkzeug import Response

from resources.github import GitHubResource
from resources.lake import Lake
from resources.storage import Store
from torchci_assets.config import DisabledIssuesConfig, load_config
from tests.fake_github_issues import FakeIssueTracker
from tests.fake_github_reruns import FakeActions
from tests.trunk_history import T0, sha
from torchci_assets.derived.drci.comment import MARKER_END, MARKER_START
from torchci_assets.derived.drci.publish import publish
from torchci_assets.derived.flakiness.aggregates import AGGREGATE_LABEL, aggregate_body, aggregate_title
from torchci_assets.derived.flakiness.issue_text import MARKER, Evidence
from torchci_assets.derived.flakiness.issues import IssueTracker, Wanted, file_disabled_issues
from torchci_assets.derived.flakiness.lifecycle import run_lifecycle
from torchci_assets.derived.guardians import alert_conditions as cond
from torchci_assets.derived.guardians.actions import Guardian, Planned
from torchci_assets.derived.guardians.alert_issues import AlertIssues
from torchci_assets.guardian_config import AutorevertConfig
from torchci_assets.relay import check_runs
from torchci_assets.relay.check_runs import create_check_run, job_state
from torchci_assets.relay.reruns import rerun_downstream_run

REPO = "pytorch/pytorch"
TOKEN = "ghp_FAKEcrashWRITES0123456789"
WRITES = {"POST", "PATCH", "PUT", "DELETE"}
SIGNAL = ("trunk", "trunk / linux / test (default, linux.4xlarge)")


def client(api_url: str) -> GitHubResource:
    gh = GitHubResource(api_url=api_url, token=TOKEN, write_interval_s=0.0, backoff_base_s=0.01)
    gh._sleep = lambda s: None
    return gh


def at(tick: int) -> dt.datetime:
    """The time of a run: each tick five minutes after the one before."""
    return T0 + dt.timedelta(minutes=5 * tick)


# ---- the writer paths: a world on the fake GitHub, steps before, the step killed ----------------


def queue_alert(*machines: str) -> cond.Alert:
    return cond.Alert("queue", f"[Pytorch] There are {len(machines)} machines with long queues", machines,
                      "See the HUD.", tuple("60 jobs waiting" for _ in machines))


def alert_check(*machines: str) -> Callable[[str, str, int], None]:
    def check(api_url: str, root: str, tick: int) -> None:
        AlertIssues(client(api_url), Lake.at(f"{root}/lake"), REPO, ("pytorch-alert",), True, at(tick)) \
            .sync([queue_alert(*machines)])
    return check


def guardian_pass(api_url: str, root: str, tick: int) -> None:
    restart = Planned("restart", sha(3), "trunk", (SIGNAL,), (1003, 1), "rerun-failed-jobs")
    revert = Planned("revert", sha(4), "", (SIGNAL,))
    Guardian(client(api_url), Lake.at(f"{root}/lake"), REPO, AutorevertConfig(enabled=True), at(tick)) \
        .run([restart, revert])


BURST = [f"test_op_{i:02d} (__main__.TestBurst)" for i in range(50)]  # one file's: an aggregate issue


def disabled_filing(*wanted: Wanted, flaked_at: dt.datetime | None = None,
                    trusted: bool = False) -> Callable[[str, str, int], None]:
    """A filing of `wanted`; `trusted`: taking only issues whose author may disable tests, as the
    asset does (this project's account, learned, or GitHub's collaborators)."""
    def file(api_url: str, root: str, tick: int) -> None:
        evidence = {w.test: Evidence(w.test, "test_burst.py" if w.test in BURST else "test_x.py",
                                     last_main_flake_at=flaked_at) for w in wanted}
        file_disabled_issues(IssueTracker(client(api_url), REPO), Lake.at(f"{root}/lake"), T0.date().isoformat(),
                             list(wanted), evidence, ["skipped", "module: flaky-tests"], 10, f"run-{tick}",
                             only_trusted=trusted)
    return file


TEST_A, TEST_B = "test_a (__main__.TestX)", "test_b (__main__.TestX)"
LINUX_A = Wanted(TEST_A, ["linux"], ["linux"], 3)


def burst(tests: list[str]) -> list[Wanted]:
    return [Wanted(t, ["linux"], ["linux"], 3) for t in tests]


AFTER_THE_CLOSE = dt.datetime(2099, 1, 1, tzinfo=dt.timezone.utc)  # a main flake after GitHub's (real) time


def closed_by_a_human(api_url: str, root: str, tick: int) -> None:
    """Closes the first issue filed (the fake numbers issues from 190000)."""
    client(api_url).request("PATCH", f"/repos/{REPO}/issues/190000", json_body={"state": "closed"})


GONE, RERUN_BURST = "test_gone (test_a.TestA)", [f"test_op_{i} (__main__.TestR)" for i in range(3)]


def lifecycle_world(httpserver) -> Callable[[], object]:
    """Open DISABLED issues of PyTorch's bot, filed 20 days before DAY: FIXED's test is clean on its
    platform, HALF's on one of two, GONE's test deleted, and an aggregate lists a clean test."""
    state = issues_world(httpserver)
    tracker = state.tracker
    old = tracker.clock() - dt.datetime.fromisoformat(f"{DAY}T00:00:00+00:00") + dt.timedelta(days=20)
    tracker.add(f"DISABLED {FIXED}", "Platforms: linux\n\nflaky", age=old, user=BOT)
    tracker.add(f"DISABLED {HALF}", "Platforms: linux, win\n\nflaky", age=old, user=BOT)
    tracker.add(f"DISABLED {GONE}", "Platforms: linux\n\nflaky", age=old, user=BOT)
    tracker.add(aggregate_title("test_r.py"), aggregate_body("test_r.py", {t: ["linux"] for t in RERUN_BURST},
                f"Platforms: linux\n{MARKER}"), age=old, user=BOT, labels=["skipped", AGGREGATE_LABEL])
    return state


def lifecycle_lake(api_url: str, root: str, tick: int) -> None:
    """The reruns of the tests, and 27 days of test reports: test_gone stopped 7 days ago while
    its file kept reporting."""
    lake = lake_with(Path(root), clean(FIXED, "linux") + clean(HALF, "linux") + clean(RERUN_BURST[0], "linux"))
    rows = [("test_a.py", "test_a.TestA", "test_alive")] + [("test_r.py", "TestR", t.split(" ")[0])
                                                             for t in (FIXED, HALF, *RERUN_BURST)]
    gone = [("test_a.py", "test_a.TestA", "test_gone")]
    for n in range(27):
        on = (dt.date.fromisoformat(DAY) - dt.timedelta(days=n)).isoformat()
        lake.write("test_daily_stats", on, stats(rows + (gone if n >= 7 else []), on))


def lifecycle(api_url: str, root: str, tick: int) -> None:
    run_lifecycle(client(api_url), Lake.at(f"{root}/lake"), Store(f"{root}/out"), DAY, f"run-{tick}", REPO,
                  DisabledIssuesConfig(enabled=True), "test config")


def drci_publish(text: str, prs=(5, 6)) -> Callable[[str, str, int], None]:
    def post(api_url: str, root: str, tick: int) -> None:
        rows = [{"pr": n, "head_sha": "ab" * 20, "pr_state": "open",
                 "body": f"{MARKER_START}\n{text} on #{n}\n{MARKER_END}"} for n in prs]
        publish(Lake.at(f"{root}/lake"), Store(f"{root}/out"), client(api_url), T0.date().isoformat(), REPO, rows,
                enabled=True, today=T0.date(), clock=lambda: at(tick))
    return post


def drci_world(httpserver) -> Callable[[], object]:
    fake = FakePullRequests(httpserver, REPO)
    return lambda: {n: fake.bodies(n) for n in fake.comments}


HEAD = "cd" * 20
CALLBACK = {"delivery_id": "d-1", "payload": {"pull_request": {"number": 1, "head": {"sha": HEAD}}}}


def relay_config(root: str):
    path = Path(root) / "relay.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(RELAY_CONFIG)
    return load_config(str(path))


def later(tick: int):
    """A run after the killed one comes after its claims could be a live writer's (IN_FLIGHT_S)."""
    return mock.patch.object(check_runs, "IN_FLIGHT_S", 120.0 if tick < 2 else 0.0)


def relay_check_runs(api_url: str, root: str, tick: int) -> None:
    jobs = [job_state(callback_record(L4, "L4", "in_progress", CALLBACK)),
            job_state(callback_record(L4, "L4", "completed", CALLBACK, job_name="test", conclusion="failure"))]
    with later(tick):
        for job in jobs:
            create_check_run(client(api_url), Lake.at(f"{root}/lake"), relay_config(root), job, f"run-{tick}",
                             settle_s=0.01)


def relay_reruns(api_url: str, root: str, tick: int) -> None:
    with later(tick):
        for run in (7001, 7002):
            rerun_downstream_run(client(api_url), Lake.at(f"{root}/lake"), relay_config(root), L4, run, HEAD,
                                 "d-rerequest", f"run-{tick}", settle_s=0.01)


class RunsEndAtOnce(FakeRelayGitHub):
    """Every re-run over before the next request: a second re-run of a run would start it again."""

    def _route(self, request, body):
        response = super()._route(request, body)
        self.running.clear()
        return response


def relay_world(httpserver) -> Callable[[], object]:
    fake = RunsEndAtOnce(httpserver)
    return lambda: (sorted(fake.check_run_names()), {run: len(starts) for run, starts in fake.started.items()})


class IssuesState:
    """GitHub's issues, each with its comments, in an order of their own."""

    def __init__(self, tracker: FakeIssueTracker):
        self.tracker = tracker

    def __call__(self) -> object:
        return sorted((i["title"], i["state"], i["body"], tuple(x["name"] for x in i["labels"]),
                       tuple(self.tracker.comments.get(n, ()))) for n, i in self.tracker.issues.items())


def issues_world(httpserver) -> IssuesState:
    return IssuesState(FakeIssueTracker(httpserver, REPO))


def guardian_world(httpserver) -> Callable[[], object]:
    actions, tracker = FakeActions(httpserver, REPO), FakeIssueTracker(httpserver, REPO)
    actions.add_run(1003, sha(3), "trunk")
    pr = tracker.add("Make the fast path faster", pull_request=True)
    actions.add_pull(sha(4), pr["number"])
    return lambda: (sorted(actions.reruns), {n: tuple(c) for n, c in tracker.comments.items()})


@dataclass(frozen=True)
class WriterPath:
    world: Callable  # (httpserver) -> a function returning GitHub's state, to compare
    before: tuple[Callable, ...]  # the clean runs that lead up to the step
    step: Callable  # (api_url, root, tick) -> None: the run that is killed
    writes: int  # the writes a clean step makes


PATHS = {
    "alert opened": WriterPath(issues_world, (), alert_check("linux.4xlarge"), 1),
    "alert updated": WriterPath(issues_world, (alert_check("linux.4xlarge"),), alert_check("linux.rocm.gpu"), 2),
    "alert closed": WriterPath(issues_world, (alert_check("linux.4xlarge"),), alert_check(), 2),
    "disabled issues filed": WriterPath(issues_world, (), disabled_filing(
        LINUX_A, Wanted(TEST_B, [], ["linux", "win"], 2), *burst(BURST)), 3),
    "disabled issue extended": WriterPath(issues_world, (disabled_filing(LINUX_A),), disabled_filing(
        Wanted(TEST_A, ["linux"], ["linux", "win"], 4)), 2),
    "disabled issue reopened": WriterPath(issues_world, (disabled_filing(LINUX_A), closed_by_a_human), disabled_filing(
        Wanted(TEST_A, ["linux"], ["linux", "win"], 4), flaked_at=AFTER_THE_CLOSE), 2),
    "disabled aggregate joined": WriterPath(issues_world, (disabled_filing(*burst(BURST[:40])),),
                                            disabled_filing(*burst(BURST)), 2),
    "drci comments created": WriterPath(drci_world, (), drci_publish("## :x: 1 New Failure"), 2),
    "drci comments edited": WriterPath(drci_world, (drci_publish("## :x: 1 New Failure"),),
                                       drci_publish("## :white_check_mark: No Failures"), 2),
    "disabled issues re-enabled, narrowed, retired, aggregate settled": WriterPath(
        lifecycle_world, (lifecycle_lake,), lifecycle, 8),
    "guardian restart and revert": WriterPath(guardian_world, (), guardian_pass, 2),
    "relay check runs": WriterPath(relay_world, (), relay_check_runs, 2),
    "relay reruns": WriterPath(relay_world, (), relay_reruns, 2),
}


# ---- the kill ----------------------------------------------------------------------------------


class Killer:
    """Counts the writes GitHub receives; at the `kill_at`-th, kills the writer process before
    applying it or (`after`) once applied, before answering."""

    def __init__(self, httpserver, monkeypatch, kill_at: int = 0, after: bool = False):
        self.writes, self.kill_at, self.after, self.pid = 0, kill_at, after, 0
        self.original = httpserver.dispatch
        monkeypatch.setattr(httpserver, "dispatch", self.dispatch)

    def dispatch(self, request):
        if request.method not in WRITES:
            return self.original(request)
        self.writes += 1
        if self.writes != self.kill_at:
            return self.original(request)
        response = self.original(request) if self.after else Response("", status=502)
        os.kill(self.pid, signal.SIGKILL)
        return response

    def run(self, name: str, api_url: str, root: str) -> int:
        """Runs the step in a process of its own; its exit code, -SIGKILL when killed. The process
        is forked from a server that imported the project once (quick to start, and no thread of
        this process, pyarrow's say, copied half-way into it)."""
        process = FORKS.Process(target=run_step, args=(name, api_url, root))
        process.start()
        self.pid = process.pid
        process.join(timeout=120)
        return process.exitcode


def world(httpserver, path: WriterPath, root: Path) -> Callable[[], object]:
    state = path.world(httpserver)
    for tick, run in enumerate(path.before):
        run(httpserver.url_for(""), str(root), -len(path.before) + tick)
    return state


def clean_run(httpserver, monkeypatch, path: WriterPath, root: Path) -> object:
    killer = Killer(httpserver, monkeypatch)
    state = world(httpserver, path, root)
    before = killer.writes
    path.step(httpserver.url_for(""), str(root), 1)
    assert killer.writes - before == path.writes
    return state()


CLEAN: dict[str, object] = {}


def clean_state(httpserver, monkeypatch, name: str, root: Path) -> object:
    """GitHub's state after a clean run of the path `name`, which every case of that path compares
    with: the same world, runs and ticks each time, so it is made once a session (its writes
    counted then) and not again for each write killed."""
    if name not in CLEAN:
        CLEAN[name] = clean_run(httpserver, monkeypatch, PATHS[name], root)
        httpserver.clear()
    return CLEAN[name]


def run_step(name: str, api_url: str, root: str) -> None:
    PATHS[name].step(api_url, root, 1)


FORKS = multiprocessing.get_context("forkserver")
# What the forked processes import, once, in the server they are forked from (which does not have
# this folder on its path: this module and its neighbours are imported by each process, quickly).
# pyarrow.dataset (and pandas, which it imports) is what reading the lake's history imports on first
# use: left out, each killed process of the alert, guardian and relay paths spent about a second on it.
FORKS.set_forkserver_preload([
    "_pytest.assertion", "werkzeug.serving", "werkzeug.test", "requests", "netrc", "pyarrow.dataset",
    "pyarrow.parquet", "pyarrow.pandas_compat", "pandas", "resources.github", "resources.lake",
    "resources.configured", "jobs.relay_prs", "torchci_assets.derived.drci.build", "torchci_assets.derived.drci.publish",
    "torchci_assets.derived.flakiness.issues", "torchci_assets.derived.flakiness.lifecycle",
    "torchci_assets.derived.guardians.actions",
    "torchci_assets.derived.guardians.alert_issues", "torchci_assets.relay.check_runs", "torchci_assets.relay.reruns",
    "torchci_assets.relay.listening", "torchci_assets.relay.zombies"])
CASES = [(name, n, after) for name, p in PATHS.items() for n in range(1, p.writes + 1) for after in (False, True)]


@pytest.mark.parametrize("name, kill_at, after", CASES,
                         ids=[f"{n}-write{k}-{'after' if a else 'before'}" for n, k, a in CASES])
def test_a_writer_killed_at_a_write_then_run_again_ends_as_one_clean_run(httpserver, monkeypatch, tmp_path,
                                                                        name, kill_at, after):
    path = PATHS[name]
    expected = clean_state(httpserver, monkeypatch, name, tmp_path / "clean")
    state = world(httpserver, path, tmp_path / "killed")
    killer = Killer(httpserver, monkeypatch, kill_at, after)
    assert killer.run(name, httpserver.url_for(""), str(tmp_path / "killed")) == -signal.SIGKILL
    path.step(httpserver.url_for(""), str(tmp_path / "killed"), 2)
    assert state() == expected


# ---- an Actions token: GitHub does not say which account writes ---------------------------------


def issues_world_unnamed(httpserver) -> IssuesState:
    """The issues world where `GET /user` answers 403, as for an Actions token."""
    state = issues_world(httpserver)
    state.tracker.says_account = False
    return state


FILING = PATHS["disabled issues filed"]
PATHS["disabled issues filed, actions token"] = WriterPath(issues_world_unnamed, (), disabled_filing(
    LINUX_A, Wanted(TEST_B, [], ["linux", "win"], 2), *burst(BURST), trusted=True), FILING.writes)
UNNAMED = [(n, after) for n in range(1, FILING.writes + 1) for after in (False, True)]


@pytest.mark.parametrize("kill_at, after", UNNAMED, ids=[f"write{k}-{'after' if a else 'before'}" for k, a in UNNAMED])
def test_with_an_actions_token_a_killed_filing_leaves_at_most_a_closed_twin_said_once(httpserver, monkeypatch,
                                                                                      tmp_path, kill_at, after):
    """Where GitHub does not say the account, a filing killed after a create leaves an issue the next
    run cannot tell from a stranger's: it files again and closes its own new issue as the twin, with
    one comment. GitHub then holds the clean run's issues, open as they are, and at most one closed
    twin per issue filed, each saying once which issue it duplicates."""
    name = "disabled issues filed, actions token"
    path = PATHS[name]
    expected = clean_state(httpserver, monkeypatch, name, tmp_path / "clean")
    state = world(httpserver, path, tmp_path / "killed")
    killer = Killer(httpserver, monkeypatch, kill_at, after)
    assert killer.run(name, httpserver.url_for(""), str(tmp_path / "killed")) == -signal.SIGKILL
    path.step(httpserver.url_for(""), str(tmp_path / "killed"), 2)
    issues = state()
    twins = [i for i in issues if i not in expected]
    assert [i for i in issues if i in expected] == expected
    assert len(twins) <= 1 and len({t[0] for t in twins}) == len(twins)
    for title, issue_state, _body, _labels, comments in twins:
        assert title in {e[0] for e in expected} and issue_state == "closed"
        assert len(comments) == 1 and comments[0].startswith("Duplicate of #")


TWICE = [(n, after) for n in range(1, 6) for after in (False, True)]  # a clean second run writes 5 times


@pytest.mark.parametrize("kill_at, after", TWICE, ids=[f"write{k}-{'after' if a else 'before'}" for k, a in TWICE])
def test_with_an_actions_token_a_filing_killed_twice_is_settled_by_the_next_run(httpserver, monkeypatch, tmp_path,
                                                                               kill_at, after):
    """Run 1 is killed once GitHub applied its first create (the aggregate), before it heard the
    answer; run 2, which files that aggregate's twin and closes it (create, comment, close), then the
    two tests' issues, is killed at each of its writes; run 3 runs clean. GitHub then holds the clean
    run's issues, open, and every twin closed, saying once that it duplicates the oldest."""
    name = "disabled issues filed, actions token"
    path = PATHS[name]
    expected = clean_state(httpserver, monkeypatch, name, tmp_path / "clean")
    state = world(httpserver, path, tmp_path / "killed")
    killer = Killer(httpserver, monkeypatch, 1, True)
    assert killer.run(name, httpserver.url_for(""), str(tmp_path / "killed")) == -signal.SIGKILL
    killer.writes, killer.kill_at, killer.after = 0, kill_at, after
    assert killer.run(name, httpserver.url_for(""), str(tmp_path / "killed")) == -signal.SIGKILL
    path.step(httpserver.url_for(""), str(tmp_path / "killed"), 3)
    issues = state.tracker.issues
    assert [i for i in state() if i[1] == "open"] == expected
    oldest = {i["title"]: min(n for n, j in issues.items() if j["title"] == i["title"]) for i in issues.values()}
    for n, issue in issues.items():
        if n != oldest[issue["title"]]:
            assert issue["state"] == "closed" and issue["state_reason"] == "not_planned"
            assert [c.split("\n")[0] for c in state.tracker.comments[n]] == [
                f"Duplicate of #{oldest[issue['title']]}, an older open issue for the same test; closing this one."]
