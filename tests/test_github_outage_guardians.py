"""GitHub down during a pass of the trunk guardians: the autorevert's restarts and revert
proposals and the alerts' issues stop at the first request that gave up (no answer or 5xx through
the client's whole retry budget), say so once with what waits, and the next pass, GitHub back, does
each once. Against the fake Actions and issues APIs on 127.0.0.1 (fake_github_reruns.py,
fake_github_issues.py) behind the `outage` fixture of github_outage.py.
"""

import datetime as dt

from resources.github import GitHubResource
from resources.lake import Lake
from github_outage import ATTEMPTS, outage  # noqa: F401 (the fixture)
from tests.fake_github_issues import FakeIssueTracker
from tests.fake_github_reruns import FakeActions
from tests.trunk_history import T0, sha
from torchci_assets.derived.guardians import alert_conditions as cond
from torchci_assets.derived.guardians.actions import Guardian, Planned
from torchci_assets.derived.guardians.alert_issues import AlertIssues, marker
from torchci_assets.guardian_config import AutorevertConfig

REPO = "pytorch/pytorch"
TOKEN = "ghp_FAKEoutageGUARDIANS0123456789"
SIGNAL = ("trunk", "trunk / linux / test (default, linux.4xlarge)")
COMMITS = (3, 4, 5)


def client(httpserver) -> GitHubResource:
    github = GitHubResource(api_url=httpserver.url_for(""), token=TOKEN, write_interval_s=0.0, backoff_base_s=0.01)
    github._sleep = lambda s: None
    return github


def guardian(httpserver, tmp_path, minutes: float, logged: list) -> Guardian:
    return Guardian(client(httpserver), Lake.at(str(tmp_path / "lake")), REPO, AutorevertConfig(enabled=True),
                    T0 + dt.timedelta(minutes=minutes), logged.append)


def restarts() -> list[Planned]:
    return [Planned("restart", sha(i), "trunk", (SIGNAL,), (1000 + i, 1), "rerun-failed-jobs") for i in COMMITS]


def test_restarts_stop_at_the_first_that_met_the_outage_and_each_is_sent_once_when_github_is_back(
        httpserver, tmp_path, outage):
    actions = FakeActions(httpserver, REPO)
    for i in COMMITS:
        actions.add_run(1000 + i, sha(i), "trunk")
    logged: list[str] = []
    report = guardian(httpserver, tmp_path, 0, logged).run(restarts())
    # the first restart's POST (a 503 is not resent: GitHub may have taken it) and its run's attempt, retried
    assert len(outage.requests) == 1 + ATTEMPTS
    assert [r["phase"] for r in report.left_open] == ["intent"] and report.taken == []
    assert [(p.commit_sha, why) for p, why in report.skipped] == [(sha(i), report.unavailable) for i in (4, 5)]
    assert report.unavailable.startswith("GitHub was unavailable") and "2 action(s) wait" in report.unavailable
    assert sum("GitHub was unavailable" in line for line in logged) == 1
    outage.down_from = None
    back = guardian(httpserver, tmp_path, 30, logged).run(restarts())
    assert [r["outcome"] for r in back.recovered] == ["not_sent"] and not back.unavailable
    assert sorted(actions.reruns) == [(1000 + i, "rerun-failed-jobs") for i in COMMITS]


def test_revert_proposals_stop_at_the_first_lookup_that_met_the_outage(httpserver, tmp_path, outage):
    actions, tracker = FakeActions(httpserver, REPO), FakeIssueTracker(httpserver, REPO)
    numbers = {}
    for i in COMMITS:
        numbers[i] = tracker.add(f"Change {i}", pull_request=True)["number"]
        actions.add_pull(sha(i), numbers[i])
    proposals = [Planned("revert", sha(i), "", (SIGNAL,)) for i in COMMITS]
    logged: list[str] = []
    report = guardian(httpserver, tmp_path, 0, logged).run(proposals)
    assert len(outage.requests) == ATTEMPTS  # the first commit's lookup; the others not asked
    assert len(report.skipped) == 3 and "3 action(s) wait" in report.unavailable
    outage.down_from = None
    guardian(httpserver, tmp_path, 5, logged).run(proposals)
    assert all(len(tracker.comments[numbers[i]]) == 1 for i in COMMITS)


def queue(machine: str) -> cond.Alert:
    return cond.Alert("queue", "[Pytorch] There are 1 machines with long queues", (machine,), "See the HUD.")


def failing(group: str) -> cond.Alert:
    return cond.Alert("recurrently_failing", "[Pytorch] There are 1 Recurrently Failing Jobs", (group,), "")


def test_alert_issues_stop_at_the_first_that_met_the_outage_and_each_is_opened_once_when_github_is_back(
        httpserver, tmp_path, outage):
    tracker, logged = FakeIssueTracker(httpserver, REPO), []
    outage.down_from = 2  # the open issues listed; the first create meets the outage
    alerts = [queue("linux.4xlarge"), failing("pull / linux-jammy / test")]

    def sync(minutes: float) -> list[dict]:
        return AlertIssues(client(httpserver), Lake.at(str(tmp_path / "lake")), REPO, ("pytorch-alert",), True,
                           T0 + dt.timedelta(minutes=minutes), logged.append).sync(alerts)

    assert sync(0) == []
    # the list, the first create (a 503 is not resent) and the list looking for it, retried; the second not tried
    assert len(outage.requests) == 1 + 1 + ATTEMPTS
    assert sum("GitHub was unavailable" in line and "2 alert(s) wait" in line for line in logged) == 1
    assert len(logged) == 1
    outage.down_from = None
    assert sorted(r["action"] for r in sync(5)) == ["opened", "opened"]
    assert len(tracker.issues) == 2 and all(len(tracker.titled(a.title)) == 1 for a in alerts)
    assert all(marker(a.kind) in tracker.titled(a.title)[0]["body"] for a in alerts)


def test_alerts_with_github_down_from_the_first_list_say_so_once(httpserver, tmp_path, outage):
    FakeIssueTracker(httpserver, REPO)
    logged: list[str] = []
    issues = AlertIssues(client(httpserver), Lake.at(str(tmp_path / "lake")), REPO, ("pytorch-alert",), True, T0,
                         logged.append)
    assert issues.sync([queue("linux.4xlarge"), failing("pull / linux-jammy / test")]) == []
    assert len(outage.requests) == ATTEMPTS and "2 alert(s) wait" in issues.unavailable
    assert len(logged) == 1 and logged[0] == issues.unavailable


def test_the_guardians_job_says_the_outage_in_each_ops_metadata(httpserver, tmp_path, outage, monkeypatch):
    """The job's two ops under an outage from the first request: each stops at its first request and
    says so where the UI shows it (the op's output metadata `github_unavailable`), not in its log alone."""
    import dagster as dg
    import yaml
    from jobs.guardians import trunk_guardians_job
    from resources.configured import ArchiveResource, LakeResource
    from test_guardians_job import write_health
    from tests.trunk_history import history

    FakeIssueTracker(httpserver, REPO)
    FakeActions(httpserver)
    cfg = tmp_path / "torchci.yaml"
    cfg.write_text(yaml.safe_dump({"autorevert": {"enabled": True}, "alerts": {"enabled": True}}))
    monkeypatch.setenv("TORCHCI_CONFIG", str(cfg))
    now = dt.datetime.now(dt.timezone.utc)
    lake_uri = str(tmp_path / "lake")
    write_health(Lake.at(lake_uri), now.strftime("%Y-%m-%d"),
                 [{**r, "pushed_at": now - dt.timedelta(minutes=50 - 10 * i)} for i, r in enumerate(history("gggRr"))])
    github = GitHubResource(api_url=httpserver.url_for(""), token=TOKEN, write_interval_s=0.0, backoff_base_s=0.01)
    result = trunk_guardians_job.execute_in_process(resources={
        "github": github, "lake": LakeResource(uri=lake_uri), "archive": ArchiveResource(uri=str(tmp_path / "archive"))})
    assert result.success
    outputs = {op: next(e for e in result.events_for_node(op) if e.event_type == dg.DagsterEventType.STEP_OUTPUT)
               for op in ("autorevert", "check_alerts")}
    said = {op: e.event_specific_data.metadata["github_unavailable"].value for op, e in outputs.items()}
    assert all(line.startswith("GitHub was unavailable") and "HTTP 503" in line for line in said.values()), said
    assert "action(s) wait" in said["autorevert"] and "alert(s) wait" in said["check_alerts"]
    assert len(outage.requests) == 2 * ATTEMPTS  # one request's retries each
