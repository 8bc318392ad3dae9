"""The trunk guardians on a repository that pushes a few times a week (acme/widgets on `master`, its
workflow `CI`): two days of main may hold no green commit below a break, or no commit at all. A team
expects its broken master to be watched while it stays broken, and the commit that broke it named,
however quiet the week; a busy repository's read must not grow for it. And a team running on
GitHub-hosted runners expects no alert about GitHub's queue, which is not its to fix."""

from __future__ import annotations

import datetime as dt
import re

import pyarrow as pa
import pytest
from fake_team_history import BRANCH, TEAM

from jobs.guardians import trunk_guardians_job
from resources.configured import ArchiveResource, LakeResource
from resources.github import GitHubResource
from resources.lake import Lake
from resources.storage import Store
from tests.test_guardians_job import write_health
from tests.trunk_history import history, sha
from torchci_assets.config import parse_config
from torchci_assets.derived.guardians import ledger
from torchci_assets.derived.guardians.alert_conditions import current_alerts
from torchci_assets.derived.guardians.alert_issues import history as alerts_history
from torchci_assets.derived.guardians.inputs import main_signal_rows

JOB = "CI / test / unit (macos-latest)"
DAY = dt.timedelta(days=1)
TEAM_CONFIG = f"upstream:\n  repo: {TEAM}\n  branches: [{BRANCH}]\n"


def sparse_main(lake: Lake, now: dt.datetime, states: str, ages: list[dt.timedelta]) -> None:
    """commit_health of a main whose commit i (`history(states)`) was pushed `ages[i]` before `now`,
    each in the partitions of its push's day and the two after it, as the HUD writes them (a day
    without a push gets an empty partition)."""
    rows = [{**r, "workflow": "CI", "job_group": JOB, "pushed_at": now - age} for r, age in zip(history(states), ages)]
    first = min(r["pushed_at"] for r in rows).date()
    for n in range((now.date() - first).days + 1):
        day = first + dt.timedelta(days=n)
        write_health(lake, day.isoformat(), [r for r in rows if 0 <= (day - r["pushed_at"].date()).days <= 2])


def run_job(tmp_path, monkeypatch, config: str) -> Lake:
    path = tmp_path / "config.yaml"
    path.write_text(config)
    monkeypatch.setenv("TORCHCI_CONFIG", str(path))
    assert trunk_guardians_job.execute_in_process(resources={
        "github": GitHubResource(), "lake": LakeResource(uri=str(tmp_path / "lake")),
        "archive": ArchiveResource(uri=str(tmp_path / "archive"))}).success
    return Lake.at(str(tmp_path / "lake"))


def first_failed(sha_: str) -> str:
    return f"since [{sha_[:10]}](https://github.com/{TEAM}/commit/{sha_}), the first that failed"


# three green pushes, then commit 3 breaks the job (a re-run failed too) and commit 4 is red as well
@pytest.mark.parametrize("ages", [
    # the last green four days ago, the break within the two days: the green was not read
    [6 * DAY, 5 * DAY, 4 * DAY, 1.5 * DAY, 0.8 * DAY],
    # a quiet week: the newest push three days ago, so nothing at all was read
    [7 * DAY, 6 * DAY, 5 * DAY, 4 * DAY, 3 * DAY],
], ids=["last-green-before-two-days", "no-push-in-two-days"])
def test_a_team_s_broken_master_is_watched_and_its_first_bad_commit_named_however_quiet_the_week(
        tmp_path, monkeypatch, ages):
    """The team's job, dry run, config naming nothing of the guardians. Was: the first case proposed
    nothing ("failing since before the window") and its alert said the oldest red commit read "may have
    broken earlier"; the second read nothing, proposed nothing and opened no alert (an open one closed
    as if master had been fixed)."""
    now = dt.datetime.now(dt.timezone.utc)
    sparse_main(Lake.at(str(tmp_path / "lake")), now, "gggRr", ages)
    lake = run_job(tmp_path, monkeypatch, TEAM_CONFIG)
    assert [(e["action"], e["commit_sha"]) for e in ledger.read(lake, now)] == [("revert", sha(3))]
    [alert] = [a for a in alerts_history(lake, now) if a["kind"] == "recurrently_failing"]
    assert alert["action"] == "opened" and f"- {JOB} — failing on every {BRANCH} commit {first_failed(sha(3))}" \
        in alert["body"]


def test_pytorch_s_window_stays_two_days(tmp_path, monkeypatch):
    """pytorch/pytorch pushes every few minutes: its guardians read the two days they always did, so a
    break whose green is older than them is still none of theirs (upstream's fixed lookback)."""
    now = dt.datetime.now(dt.timezone.utc)
    sparse_main(Lake.at(str(tmp_path / "lake")), now, "gggRr", [6 * DAY, 5 * DAY, 4 * DAY, 1.5 * DAY, 0.8 * DAY])
    lake = run_job(tmp_path, monkeypatch, "upstream:\n  repo: pytorch/pytorch\n")
    assert ledger.read(lake, now) == []
    [alert] = [a for a in alerts_history(lake, now) if a["kind"] == "recurrently_failing"]
    assert "may have broken earlier" in alert["body"]


def team_window():
    return parse_config({"upstream": {"repo": TEAM}}).guardians.window


def test_the_team_s_window_reaches_back_to_its_last_commits_but_no_further_than_its_bound(tmp_path):
    """Twenty commits, at most fourteen days: a green pushed three weeks ago is not read."""
    window = team_window()
    assert (window.days, window.commits, window.max_days) == (2, 20, 14)
    now = dt.datetime(2026, 11, 30, 21, tzinfo=dt.timezone.utc)
    lake = Lake.at(str(tmp_path / "lake"))
    sparse_main(lake, now, "gggRr", [21 * DAY, 20 * DAY, 13 * DAY, 4 * DAY, 3 * DAY])
    assert [r["sha"] for r in main_signal_rows(lake, now, window)] == [sha(2), sha(3), sha(4)]
    assert main_signal_rows(lake, now) == []  # the two days alone, as pytorch/pytorch reads


def test_a_busy_repository_reads_its_two_days_alone(tmp_path):
    """With twenty commits or more in the two days, no older partition is read: a commit pushed three
    days ago is left out, as it always was."""
    now = dt.datetime(2026, 11, 30, 21, tzinfo=dt.timezone.utc)
    lake = Lake.at(str(tmp_path / "lake"))
    states = "g" * 21
    sparse_main(lake, now, states, [3 * DAY] + [dt.timedelta(hours=40 - i) for i in range(20)])
    read = main_signal_rows(lake, now, team_window())
    assert [r["sha"] for r in read] == [sha(i) for i in range(1, 21)]


def queued(now: dt.datetime, label: str, jobs: int = 60, hours: float = 3) -> list[dict]:
    return [{"id": hash((label, i)) % 10**9, "run_attempt": 1, "status": "queued", "labels": [label],
             "created_at": now - dt.timedelta(hours=hours)} for i in range(jobs)]


HOSTED = ("ubuntu-latest", "ubuntu-24.04", "ubuntu-24.04-arm", "macos-latest", "macos-14", "windows-latest",
          "windows-2022")


def queue_alert(tmp_path, raw: dict, labels: tuple[str, ...]) -> tuple[str, ...]:
    now = dt.datetime(2026, 11, 30, 21, tzinfo=dt.timezone.utc)
    lake = Lake.at(str(tmp_path / "lake"))
    lake.write("workflow_job", now.strftime("%Y-%m-%d"),
               pa.Table.from_pylist([j for label in labels for j in queued(now, label)]))
    cfg = parse_config(raw).guardians.alerts
    [queue] = [a for a in current_alerts(lake, Store(str(tmp_path / "archive")), [], TEAM, cfg, now) if a.kind == "queue"]
    return queue.lines


def test_a_team_is_not_alerted_of_github_s_hosted_queue_but_of_its_own_runners(tmp_path):
    """A config naming nothing: 60 jobs waiting three hours for GitHub-hosted runners opened an alert for
    each of their labels (PyTorch's catch-all rule), about a queue only GitHub (or the team's plan) can
    change; its self-hosted pool's queue still alerts."""
    lines = queue_alert(tmp_path, {"upstream": {"repo": TEAM}}, (*HOSTED, "gpu-a100"))
    assert lines == ("gpu-a100",)


def test_a_team_may_have_its_hosted_queue_alerted_as_it_configures(tmp_path):
    """`alert: false` silences a pattern; a team that wants its macOS minutes watched says so."""
    raw = {"upstream": {"repo": TEAM}, "alerts": {"queue_rules": [
        {"pattern": "^macos-", "max_jobs": 10, "max_wait_min": 30}, {"pattern": ".*", "alert": False}]}}
    assert queue_alert(tmp_path, raw, (*HOSTED, "gpu-a100")) == ("macos-14", "macos-latest")


def test_pytorch_s_queue_rules_are_unchanged():
    from torchci_assets.guardian_config import DEFAULT_QUEUE_RULES
    assert parse_config({"upstream": {"repo": "pytorch/pytorch"}}).guardians.alerts.queue_rules == DEFAULT_QUEUE_RULES
    assert all(r.alert for r in DEFAULT_QUEUE_RULES)


def test_the_bundled_config_spells_out_pytorch_s_window():
    from torchci_assets.config import load_config
    from torchci_assets.guardian_config import MainWindow
    assert load_config().guardians.window == MainWindow() == parse_config({}).guardians.window
    assert MainWindow() == MainWindow(days=2, commits=0, max_days=14)


@pytest.mark.parametrize("raw, where", [
    ({"main_window": {"days": 0}}, "main_window.days"),
    ({"main_window": {"days": 3, "max_days": 2}}, "main_window.max_days"),
    ({"main_window": {"commits": -1}}, "main_window.commits"),
    ({"main_window": {"weeks": 1}}, "main_window: unknown key(s) weeks"),
    ({"alerts": {"queue_rules": [{"pattern": ".*", "alert": "no"}]}}, "alerts.queue_rules[0].alert"),
])
def test_window_and_queue_rule_mistakes_name_their_place(raw, where):
    from torchci_assets.config import ConfigError
    with pytest.raises(ConfigError, match=re.escape(where)):
        parse_config({"upstream": {"repo": TEAM}, **raw})


def test_a_team_s_window_is_its_own_to_set():
    window = parse_config({"upstream": {"repo": TEAM}, "main_window": {"commits": 50, "max_days": 30}}).guardians.window
    assert (window.days, window.commits, window.max_days) == (2, 50, 30)
    assert parse_config({"upstream": {"repo": TEAM}, "main_window": {"commits": 0}}).guardians.window.commits == 0
