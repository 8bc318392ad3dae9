"""Alerts: each condition, and each alert's issue opened, updated and closed (a local fake GitHub),
never two open for one condition; dry run records the same changes and sends nothing."""

import datetime as dt
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from werkzeug import Response

from resources.github import GitHubResource
from resources.lake import Lake
from resources.storage import Store
from tests.fake_github_issues import FakeIssueTracker, Scripted
from tests.hud_lake import schema
from tests.trunk_history import T0, history
from torchci_assets.derived.guardians import alert_conditions as cond
from torchci_assets.derived.guardians.alert_issues import AlertIssues, firing_in, marker, said_marker
from torchci_assets.derived.guardians.alert_issues import history as alerts_history
from torchci_assets.derived.guardians.inputs import query
from torchci_assets.derived.guardians.passes import alerts_pass
from torchci_assets.guardian_config import DEFAULT_QUEUE_RULES, AlertsConfig

REPO = "pytorch/pytorch"
BLOCKING = "pull / linux-jammy / test (default, linux.4xlarge)"


def blocking(rows):
    return [{**r, "blocking": True} for r in rows]


@pytest.mark.parametrize("states, fires", [
    ("gggrr", True), ("ggggr", False), ("ggrrg", False), ("grrfr", False),
    ("grpsr", True),   # pending and skipped are passed over
    ("rrrrr", True),
])
def test_a_blocking_group_failing_on_two_commits_in_a_row_alerts(states, fires):
    alert = cond.recurrently_failing(blocking(history(states, group=BLOCKING)), REPO, 2)
    assert alert.firing == fires
    if fires:
        assert alert.lines == (BLOCKING,)
        assert alert.title == f"[Pytorch] There are 1 Recurrently Failing Jobs on {REPO} main"


def test_non_blocking_groups_do_not_alert():
    assert not cond.recurrently_failing(history("grrr", group=BLOCKING), REPO, 2).firing


@pytest.mark.parametrize("machine, jobs, wait_min, fires", [
    ("linux.rocm.gpu.2", 51, 121, True), ("linux.rocm.gpu.2", 51, 119, False),
    ("linux.4xlarge", 51, 31, True), ("linux.2xlarge", 51, 29, False),
    ("linux.g5.4xlarge.nvidia.gpu", 51, 61, True), ("linux.g5.4xlarge.nvidia.gpu", 51, 59, False),
    ("windows.4xlarge", 50, 600, False),  # more than 50 waiting, not 50
])
def test_queue_thresholds_per_machine_type(machine, jobs, wait_min, fires):
    alert = cond.long_queues([{"machine": machine, "jobs": jobs, "max_wait_s": wait_min * 60.0}], DEFAULT_QUEUE_RULES)
    assert alert.firing == fires


def test_the_disabled_bot_alert_needs_both_silence_and_failing_tests():
    now = T0
    assert cond.disabled_bot_silent(now - dt.timedelta(days=15), 3, now, 14).firing
    assert cond.disabled_bot_silent(None, 3, now, 14).firing
    assert not cond.disabled_bot_silent(now - dt.timedelta(days=13), 3, now, 14).firing
    assert not cond.disabled_bot_silent(None, 0, now, 14).firing


def test_archive_silence_is_read_from_the_newest_webhook_file(tmp_path):
    archive = Store(str(tmp_path / "archive"))
    folder = tmp_path / "archive" / "webhooks" / "day=2026-11-20"
    folder.mkdir(parents=True)
    f = folder / "receiver-1.jsonl.gz"
    f.write_bytes(b"")
    written = T0 - dt.timedelta(minutes=40)
    os.utime(f, (written.timestamp(), written.timestamp()))
    assert cond.last_archived(archive, T0) == written
    assert cond.archive_silent(written, T0, 30).firing
    assert not cond.archive_silent(written, T0, 45).firing
    assert cond.archive_silent(cond.last_archived(Store(str(tmp_path / "empty")), T0), T0, 30).firing


def test_current_alerts_reads_queues_and_the_disabled_bot_from_the_lake(tmp_path):
    lake = Lake.at(str(tmp_path / "lake"))
    now = T0
    jobs = [{"id": i, "run_attempt": 1, "status": "queued", "created_at": now - dt.timedelta(minutes=35 + i % 5),
             "labels": ["linux.4xlarge"]} for i in range(60)]
    jobs += [{"id": 0, "run_attempt": 1, "status": "in_progress", "created_at": now - dt.timedelta(minutes=35),
              "labels": ["linux.4xlarge"]}]  # job 0 started: 59 still wait
    lake.write("workflow_job", "2026-11-20", pa.Table.from_pylist(jobs))
    lake.write("disabled_issues", "2026-11-01", pa.Table.from_pylist(
        [{"test": "test_a (__main__.T)", "issue_number": 1, "action": "created", "at": now - dt.timedelta(days=19)}]))
    lake.write("flaky_tests", "2026-11-20", pa.Table.from_pylist([{"name": "test_a", "verdict": "flaky"}]))
    archive = Store(str(tmp_path / "archive"))
    alerts = {a.kind: a for a in cond.current_alerts(lake, archive, [], REPO, AlertsConfig(), now)}
    assert alerts["queue"].lines == ("linux.4xlarge",)
    assert alerts["queue"].details == ("59 jobs waiting, the oldest for 0.65 hours",)
    assert alerts["disabled_bot_silent"].firing and alerts["archive_silent"].firing
    assert not alerts["recurrently_failing"].firing


def test_a_rerun_job_completed_after_midnight_by_an_older_github_waits_no_more(tmp_path):
    """Reruns' jobs queued before midnight (attempt 2), their completions after it from an older
    GitHub without run_attempt or created_at (that day's ingest writes attempt 1 and no creation
    time): a job is its id, so each completed one no longer waits (they all still did)."""
    lake = Lake.at(str(tmp_path / "lake"))
    queued_at = T0.replace(hour=0) - dt.timedelta(minutes=10)
    job = {"run_id": 7, "labels": ["linux.4xlarge"]}
    lake.write("workflow_job", queued_at.date().isoformat(), pa.Table.from_pylist(
        [{**job, "id": i, "run_attempt": 2, "status": "queued", "created_at": queued_at} for i in range(3)],
        schema=schema("workflow_job")))
    lake.write("workflow_job", T0.date().isoformat(), pa.Table.from_pylist(
        [{**job, "id": i, "run_attempt": 1, "status": "completed", "conclusion": "failure"} for i in range(2)],
        schema=schema("workflow_job")))
    queued = query(lake, {"workflow_job": 1}, "queued_jobs", {"since": T0 - dt.timedelta(days=1), "now": T0}, T0)
    assert [(q["machine"], q["jobs"]) for q in queued] == [("linux.4xlarge", 1)]


# ---- the issues --------------------------------------------------------------------------


@pytest.fixture
def tracker(httpserver):
    return FakeIssueTracker(httpserver, REPO)


def client(httpserver, token="ghp_FAKEalerts0123456789"):
    gh = GitHubResource(api_url=httpserver.url_for(""), token=token, write_interval_s=0.0)
    gh._sleep = lambda s: None
    return gh


def said(tracker, number) -> list[str]:
    """The comments on an issue, each without the marker line it ends with."""
    texts = [c.rsplit("\n\n", 1) for c in tracker.comments.get(number, [])]
    assert all(mark == said_marker(text) for text, mark in texts)
    return [text for text, _ in texts]


def queue_alert(*machines, hours=1.0):
    return cond.Alert("queue", f"[Pytorch] There are {len(machines)} machines with long queues", machines,
                      "See the HUD.", tuple(f"60 jobs waiting, the oldest for {hours:.2f} hours" for _ in machines))


def check(httpserver, tmp_path, alert, minutes=0, token="ghp_FAKEalerts0123456789", enabled=True, log=None):
    issues = AlertIssues(client(httpserver, token), Lake.at(str(tmp_path / "lake")), REPO, ("pytorch-alert",),
                         enabled, T0 + dt.timedelta(minutes=minutes), log or (lambda s: None))
    return issues.sync([alert])


def test_an_alert_issue_is_opened_updated_and_closed(httpserver, tmp_path, tracker):
    assert [r["action"] for r in check(httpserver, tmp_path, queue_alert("linux.4xlarge"))] == ["opened"]
    (issue,) = tracker.issues.values()
    assert issue["labels"] == [{"name": "pytorch-alert"}] and marker("queue") in issue["body"]
    assert "- linux.4xlarge — 60 jobs waiting, the oldest for 1.00 hours" in issue["body"]
    # the same machines (their figures moved): nothing sent
    assert check(httpserver, tmp_path, queue_alert("linux.4xlarge", hours=1.5), 5) == []
    assert [r["action"] for r in check(httpserver, tmp_path, queue_alert("linux.rocm.gpu"), 10)] == ["updated"]
    assert "linux.rocm.gpu" in issue["body"] and issue["title"].startswith("[Pytorch] There are 1 machines")
    (comment,) = said(tracker, issue["number"])
    assert "These stopped:\n* linux.4xlarge" in comment and "These started:\n* linux.rocm.gpu" in comment
    closed = check(httpserver, tmp_path, queue_alert(), 15)
    assert [r["action"] for r in closed] == ["closed"] and issue["state"] == "closed"
    assert check(httpserver, tmp_path, queue_alert(), 20) == []
    reopened = check(httpserver, tmp_path, queue_alert("linux.4xlarge"), 25)
    assert [r["action"] for r in reopened] == ["opened"] and len(tracker.titled(issue["title"], "open")) == 1
    assert len(tracker.issues) == 2


def test_an_alert_issue_whose_label_a_human_removed_stays_the_alerts_issue(httpserver, tmp_path, tracker):
    """Listing by label misses it; the table remembers the issue the alert opened, so no second
    issue is opened beside it, and it is still updated and closed."""
    check(httpserver, tmp_path, queue_alert("linux.4xlarge"))
    (issue,) = tracker.issues.values()
    issue["labels"] = []
    assert [r["action"] for r in check(httpserver, tmp_path, queue_alert("linux.rocm.gpu"), 5)] == ["updated"]
    assert len(tracker.issues) == 1 and "linux.rocm.gpu" in issue["body"]
    tracker.fail("get", *[Response("", status=500)] * 6)  # GitHub will not show it: nothing is opened beside it
    assert check(httpserver, tmp_path, queue_alert("linux.4xlarge"), 7) == [] and len(tracker.issues) == 1
    assert [r["action"] for r in check(httpserver, tmp_path, queue_alert(), 10)] == ["closed"]
    assert issue["state"] == "closed"
    # closed by a human instead: a new firing opens a new issue, as before
    check(httpserver, tmp_path, queue_alert("linux.4xlarge"), 15)
    second = tracker.issues[max(tracker.issues)]
    second["labels"], second["state"] = [], "closed"
    assert [r["action"] for r in check(httpserver, tmp_path, queue_alert("linux.4xlarge"), 20)] == ["opened"]
    assert len(tracker.issues) == 3
    # the one a human closed is recorded so, and not read again at every check
    rows = alerts_history(Lake.at(str(tmp_path / "lake")), T0 + dt.timedelta(minutes=25))
    assert ("closed on GitHub", second["number"]) in [(r["action"], r["issue_number"]) for r in rows]
    asked = tracker.count("GET", f"/repos/{REPO}/issues/{second['number']}")
    check(httpserver, tmp_path, queue_alert("linux.4xlarge"), 25)
    assert tracker.count("GET", f"/repos/{REPO}/issues/{second['number']}") == asked


def test_a_firing_alert_whose_issue_was_deleted_or_is_in_another_repository_gets_a_new_one(
        httpserver, tmp_path, tracker):
    """The table's issue is only a hint: one GitHub says is gone (404, 410) is no issue of the alert,
    and an issue the table recorded in another repository (alerts.repo changed) is not looked up."""
    check(httpserver, tmp_path, queue_alert("linux.4xlarge"))
    (number,) = tracker.issues
    del tracker.issues[number]  # an admin deleted it: GitHub answers 404 for it
    assert [r["action"] for r in check(httpserver, tmp_path, queue_alert("linux.4xlarge"), 5)] == ["opened"]
    (number,) = tracker.issues
    tracker.issues[number]["labels"] = []
    tracker.fail("get", *[Response('{"message": "This issue was deleted"}', status=410)] * 6)
    assert [r["action"] for r in check(httpserver, tmp_path, queue_alert("linux.4xlarge"), 10)] == ["opened"]
    tracker.repo, tracker.issues = "pytorch/alerts", {}
    moved = AlertIssues(client(httpserver), Lake.at(str(tmp_path / "lake")), "pytorch/alerts", ("pytorch-alert",),
                        True, T0 + dt.timedelta(minutes=15))
    assert [r["action"] for r in moved.sync([queue_alert("linux.4xlarge")])] == ["opened"]
    assert not any(path.startswith("/repos/pytorch/alerts/issues/") and method == "GET"
                   for method, path, _ in tracker.requests if path.rsplit("/", 1)[-1].isdigit())


def test_an_issue_github_created_without_answering_is_adopted_not_duplicated(httpserver, tmp_path, tracker):
    tracker.fail("create", Scripted(Response("", status=502), after_effect=True))
    rows = check(httpserver, tmp_path, queue_alert("linux.4xlarge"))
    assert [r["action"] for r in rows] == ["opened"] and len(tracker.issues) == 1
    assert rows[0]["issue_number"] == next(iter(tracker.issues))
    assert check(httpserver, tmp_path, queue_alert("linux.4xlarge"), 5) == [] and len(tracker.issues) == 1


def test_an_alert_that_cleared_is_closed_and_said_once_whatever_github_answers(httpserver, tmp_path, tracker):
    """The comment GitHub stored but answered 502 to is not sent again, and a close that fails
    through every retry leaves its comment posted: a later check closes it without a second one."""
    check(httpserver, tmp_path, queue_alert("linux.4xlarge"))
    (number,) = tracker.issues
    tracker.fail("comment", Scripted(Response("", status=502), after_effect=True))
    assert [r["action"] for r in check(httpserver, tmp_path, queue_alert(), 15)] == ["closed"]
    assert check(httpserver, tmp_path, queue_alert(), 20) == []
    assert said(tracker, number) == ["The condition cleared; closed."]
    assert tracker.issues[number]["state"] == "closed"

    check(httpserver, tmp_path, queue_alert("linux.4xlarge"), 25)
    number = max(tracker.issues)
    tracker.fail("update", *[Response("", status=502) for _ in range(6)])  # the first try and 5 retries
    assert check(httpserver, tmp_path, queue_alert(), 30) == [] and tracker.issues[number]["state"] == "open"
    assert said(tracker, number) == ["The condition cleared; closed."]
    assert [r["action"] for r in check(httpserver, tmp_path, queue_alert(), 35)] == ["closed"]
    assert said(tracker, number) == ["The condition cleared; closed."]


def test_an_alert_issue_a_human_reopened_is_closed_again_with_its_comment(httpserver, tmp_path, tracker):
    """The alert cleared and closed its issue; a human reopened it, and the next check, the
    condition still clear, closes it again: saying so again, not closing it without a word."""
    check(httpserver, tmp_path, queue_alert("linux.4xlarge"))
    (number,) = tracker.issues
    check(httpserver, tmp_path, queue_alert(), 15)
    client(httpserver).request("PATCH", f"/repos/{REPO}/issues/{number}", json_body={"state": "open"})
    assert [r["action"] for r in check(httpserver, tmp_path, queue_alert(), 20)] == ["closed"]
    assert tracker.issues[number]["state"] == "closed"
    assert said(tracker, number) == ["The condition cleared; closed.", "The condition cleared; closed."]


def test_a_human_opened_issue_of_another_kind_is_left_alone(httpserver, tmp_path, tracker):
    tracker.add("Something else", "no marker here", labels=["pytorch-alert"])
    check(httpserver, tmp_path, queue_alert("linux.4xlarge"))
    assert len(tracker.issues) == 2


def test_dry_run_records_each_change_once_and_sends_nothing(httpserver, tmp_path, tracker):
    said = []
    for minutes, alert, expected in [(0, queue_alert("linux.4xlarge"), ["opened"]),
                                     (5, queue_alert("linux.4xlarge"), []),
                                     (10, queue_alert("linux.2xlarge"), ["updated"]),
                                     (15, queue_alert(), ["closed"]), (20, queue_alert(), [])]:
        rows = check(httpserver, tmp_path, alert, minutes, token=None, log=said.append)
        assert [r["action"] for r in rows] == expected and all(r["dry_run"] for r in rows)
    assert tracker.requests == []
    assert said[0].startswith("DRY RUN would open an issue: [Pytorch] There are 1 machines with long queues")
    assert any(s.startswith("DRY RUN would close issue") for s in said)


def test_alerts_enabled_false_is_a_dry_run_with_a_token(httpserver, tmp_path, tracker):
    rows = check(httpserver, tmp_path, queue_alert("linux.4xlarge"), enabled=False)
    assert rows[0]["dry_run"] and tracker.requests == []


# ---- each alert, from the lake and the archive to its issue -----------------------------------


class Sick:
    """A lake and an archive where nothing fires, and the one change that makes `kind` fire."""

    def __init__(self, tmp_path, now):
        self.now, self.day = now, now.strftime("%Y-%m-%d")
        self.lake = Lake.at(str(tmp_path / "lake"))
        self.archive = Store(str(tmp_path / "archive"))
        self.webhooks = tmp_path / "archive" / "webhooks" / f"day={self.day}" / "receiver-1.jsonl.gz"
        self.webhooks.parent.mkdir(parents=True)
        self.webhooks.write_bytes(b"")
        self.lake.write("flaky_tests", self.day, pa.Table.from_pylist([{"name": "test_a", "verdict": "flaky"}]))
        self.health("gggg")
        self.queue(0)
        self.bot(dt.timedelta(days=1))

    def health(self, states, other=""):
        from tests.test_guardians_job import write_health
        rows = history(states, group=BLOCKING) + (history(other, group=BLOCKING + " 2") if other else [])
        # commit i (sha(i) is i in hex) pushed 10 minutes after commit i - 1, the newest 50 minutes ago
        write_health(self.lake, self.day, [{**r, "pushed_at": self.now - dt.timedelta(minutes=100 - 10 * int(r["sha"], 16))}
                                           for r in rows])

    def queue(self, jobs, rocm=0):
        rows = [{"id": i, "run_attempt": 1, "status": "queued" if i < jobs else "completed",
                 "created_at": self.now - dt.timedelta(minutes=40), "labels": ["linux.4xlarge"]} for i in range(60)]
        rows += [{"id": 1000 + i, "run_attempt": 1, "status": "queued", "created_at": self.now - dt.timedelta(hours=3),
                  "labels": ["linux.rocm.gpu.2"]} for i in range(rocm)]
        self.lake.write("workflow_job", self.day, pa.Table.from_pylist(rows))

    def bot(self, ago):
        at = self.now - ago
        self.lake.write("disabled_issues", at.strftime("%Y-%m-%d"), pa.Table.from_pylist(
            [{"test": "test_a (__main__.T)", "issue_number": 1, "action": "found", "at": at}]), part=f"bot-{ago.days}")

    def archive_written(self, ago):
        t = (self.now - ago).timestamp()
        os.utime(self.webhooks, (t, t))

    def make(self, kind, sick=True, more=False):
        """`more`: a second job group or machine fires too (the two alerts with several entries)."""
        if kind == "recurrently_failing":
            self.health("gggRr" if sick else "gggRrg", other="gggrr" if more else "")
        elif kind == "queue":
            self.queue(60 if sick else 10, rocm=51 if more else 0)
        elif kind == "disabled_bot_silent" and sick:
            for day in self.lake.days("disabled_issues"):
                shutil.rmtree(Path(self.lake.store.full(f"disabled_issues/day={day}")))
            self.bot(dt.timedelta(days=20))
        elif kind == "disabled_bot_silent":
            self.bot(dt.timedelta(0))
        elif kind == "archive_silent":
            self.archive_written(dt.timedelta(minutes=40 if sick else 0))


KINDS = ["recurrently_failing", "queue", "disabled_bot_silent", "archive_silent"]


@pytest.mark.parametrize("kind", KINDS)
def test_each_alert_opens_its_issue_from_the_lake_and_closes_it_when_clear(httpserver, tmp_path, tracker, kind):
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    world = Sick(tmp_path, now)
    world.archive_written(dt.timedelta(0))
    cfg = AlertsConfig(enabled=True)

    def check(at):
        s = alerts_pass(client(httpserver), world.lake, world.archive, REPO, cfg, at)
        return s.alerts, s.changes

    alerts, changes = check(now)
    assert [a.kind for a in alerts if a.firing] == [] and changes == [] and tracker.issues == {}
    world.make(kind)
    alerts, changes = check(now + dt.timedelta(minutes=5))
    assert [a.kind for a in alerts if a.firing] == [kind]
    assert [(r["kind"], r["action"]) for r in changes] == [(kind, "opened")]
    (issue,) = tracker.issues.values()
    assert marker(kind) in issue["body"] and issue["state"] == "open"
    assert check(now + dt.timedelta(minutes=10))[1] == []  # still firing, unchanged: nothing sent
    if kind in ("recurrently_failing", "queue"):
        world.make(kind, more=True)
        alerts, changes = check(now + dt.timedelta(minutes=12))
        assert [(r["kind"], r["action"]) for r in changes] == [(kind, "updated")]
        assert len(firing_in(issue["body"])) == 2 and "These started:" in tracker.comments[issue["number"]][-1]
    world.make(kind, sick=False)
    alerts, changes = check(now + dt.timedelta(minutes=15))
    assert [(r["kind"], r["action"]) for r in changes] == [(kind, "closed")] and issue["state"] == "closed"
    assert len(tracker.issues) == 1


class CreatesAfter:
    """A GitHub client that runs `first` before each issue it creates: another check, which
    listed the open issues and read the table before this one's create landed, creating its own."""

    def __init__(self, github: GitHubResource, first):
        self.github, self.first = github, first

    def __getattr__(self, name):
        return getattr(self.github, name)

    def request(self, method, path, **kwargs):
        if method == "POST" and path.endswith("/issues"):
            self.first()
        return self.github.request(method, path, **kwargs)


def test_two_checks_that_raced_close_every_duplicate_issue_in_one_check_and_say_so_once(httpserver, tmp_path,
                                                                                        tracker):
    """Two checks at once (pools not configured, or a second deployment on the same repository)
    both list no issue and both open one. The next check keeps the oldest and closes the other
    as its duplicate; a cleared alert then closes every open issue of the alert in one check.
    Each close is said once, and nothing is sent again."""
    lake = Lake.at(str(tmp_path / "lake"))
    first, second = (AlertIssues(client(httpserver), lake, REPO, ("pytorch-alert",), True, T0) for _ in range(2))
    first.github = CreatesAfter(first.github, lambda: second.sync([queue_alert("linux.4xlarge")]))
    first.sync([queue_alert("linux.4xlarge")])
    assert len(tracker.titled(queue_alert("linux.4xlarge").title, "open")) == 2  # the race made a duplicate
    kept, duplicate = sorted(tracker.issues)
    tracker.fail("update", *[Response("", status=502) for _ in range(6)])  # the first try and 5 retries
    assert check(httpserver, tmp_path, queue_alert("linux.4xlarge"), 3) == []
    assert tracker.issues[duplicate]["state"] == "open"
    rows = check(httpserver, tmp_path, queue_alert("linux.4xlarge"), 5)
    assert [(r["action"], r["issue_number"]) for r in rows] == [("duplicate closed", duplicate)]
    assert tracker.issues[duplicate]["state"] == "closed" and tracker.issues[kept]["state"] == "open"
    assert said(tracker, duplicate) == [f"Duplicate of #{kept}, which this alert keeps up to date; closed."]
    # the kept issue stays the alert's when a human takes its label off (the table's last row names the duplicate)
    tracker.issues[kept]["labels"] = []
    assert check(httpserver, tmp_path, queue_alert("linux.4xlarge"), 10) == [] and len(tracker.issues) == 2
    # the label back on, a human reopens the duplicate, and the alert clears: both close in one check
    tracker.issues[kept]["labels"] = tracker.issues[duplicate]["labels"]
    tracker.issues[duplicate]["state"] = "open"
    rows = check(httpserver, tmp_path, queue_alert(), 15)
    assert sorted((r["action"], r["issue_number"]) for r in rows) == [("closed", kept), ("duplicate closed", duplicate)]
    assert all(i["state"] == "closed" for i in tracker.issues.values())
    assert said(tracker, kept) == ["The condition cleared; closed."]
    assert said(tracker, duplicate)[1:] == ["The condition cleared; closed."]
    assert check(httpserver, tmp_path, queue_alert(), 20) == [] and len(tracker.comments[duplicate]) == 2


def test_an_older_issue_whose_label_a_human_removed_is_kept_and_closed_beside_a_labelled_one(httpserver, tmp_path,
                                                                                            tracker):
    """Two checks raced and opened two issues; a human took the label off the older one. The
    listing shows the newer one alone, the table still knows the older: it stays the alert's
    issue (the newer one is closed as its duplicate), and it is closed when the alert clears."""
    lake = Lake.at(str(tmp_path / "lake"))
    first, second = (AlertIssues(client(httpserver), lake, REPO, ("pytorch-alert",), True, T0) for _ in range(2))
    first.github = CreatesAfter(first.github, lambda: second.sync([queue_alert("linux.4xlarge")]))
    first.sync([queue_alert("linux.4xlarge")])
    older, newer = sorted(tracker.issues)
    tracker.issues[older]["labels"] = []
    rows = check(httpserver, tmp_path, queue_alert("linux.4xlarge"), 5)
    assert [(r["action"], r["issue_number"]) for r in rows] == [("duplicate closed", newer)]
    assert said(tracker, newer) == [f"Duplicate of #{older}, which this alert keeps up to date; closed."]
    assert [(r["action"], r["issue_number"]) for r in check(httpserver, tmp_path, queue_alert(), 10)] == [
        ("closed", older)]
    assert all(i["state"] == "closed" for i in tracker.issues.values())
    # nothing is left for a later check to close or look up again
    asked = len(tracker.requests)
    assert check(httpserver, tmp_path, queue_alert(), 15) == []
    assert [(m, p) for m, p, _ in tracker.requests[asked:]] == [("GET", f"/repos/{REPO}/issues")]
