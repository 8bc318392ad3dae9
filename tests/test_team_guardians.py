"""The trunk guardians on a team's repository: acme/widgets, its commits on `master` judged by its one
workflow `CI` (tests/fake_team_history.py: the sixth push breaks `test / unit (macos-latest)`, the
eighth fixes it), its history backfilled from the fake GitHub and ingested as tests/test_team_repository.py
does. The guardians run on it in dry run with a config naming nothing of theirs, as a team's would:
what they say must be about its branch, its workflow and its commits."""

from __future__ import annotations

import datetime as dt
import re
import shutil

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from fake_team_history import BRANCH, TEAM
from test_team_repository import DAYS, LAST, team  # noqa: F401 (the fixture)

from jobs.guardians import trunk_guardians_job
from resources.configured import ArchiveResource, LakeResource
from resources.github import GitHubResource
from resources.lake import Lake
from resources.storage import Store
from tests.fake_github_issues import FakeIssueTracker
from tests.fake_github_reruns import FakeActions
from tests.test_guardians_job import write_health
from tests.trunk_history import history as states
from torchci_assets.config import parse_config
from torchci_assets.derived.guardians import ledger
from torchci_assets.derived.guardians.actions import Guardian, Planned
from torchci_assets.derived.guardians.alert_conditions import recurrently_failing
from torchci_assets.derived.guardians.alert_issues import history as alerts_history
from torchci_assets.derived.guardians.hud import autorevert_page, view
from torchci_assets.derived.guardians.inputs import main_signal_rows
from torchci_assets.derived.guardians.passes import alerts_pass, autorevert_pass, judged
from torchci_assets.guardian_config import AlertsConfig, AutorevertConfig

# the evening of the history's last day: its window of two days holds the pushes from the fourth on
NOW = dt.datetime.combine(DAYS[-1], dt.time(21), dt.timezone.utc)
JOB = "CI / test / unit (macos-latest)"


def commit_health_of(lake_dir, shas: list[str] | None) -> None:
    """Keep only the commit_health rows of `shas` (None: restore the team's whole history)."""
    part = lake_dir / "commit_health" / f"day={LAST}"
    table = pq.read_table(lake_dir.parent / "all-commit-health.parquet")
    if shas is not None:
        table = table.filter(pc.is_in(table["sha"], value_set=pa.array(shas)))
    shutil.rmtree(part)
    part.mkdir()
    pq.write_table(table, part / "data.parquet")


@pytest.fixture
def broken(team, tmp_path, monkeypatch):  # noqa: F811
    """(a copy of the team's lake as the guardians read it while master was broken, its commit_health
    without the commits after the second red one; master's shas; the archive)."""
    root, history, *_ = team
    monkeypatch.setenv("TORCHCI_CONFIG", str(root / "my-repo.yaml"))
    lake_dir = tmp_path / "lake"
    shutil.copytree(root / "lake", lake_dir)
    pq.write_table(pq.read_table(lake_dir / "commit_health" / f"day={LAST}"), tmp_path / "all-commit-health.parquet")
    master = history["master"]
    commit_health_of(lake_dir, master[:7])
    return lake_dir, master, Store(str(root / "archive"))


def failing_alert(changes: list[dict]) -> list[dict]:
    return [c for c in changes if c["kind"] == "recurrently_failing"]


def test_the_break_opens_an_alert_naming_master_the_job_and_the_first_bad_commit_and_the_fix_closes_it(broken):
    """The alert's words were PyTorch's: `[Pytorch] ... on acme/widgets main`, `consecutive main
    commits`, and the job alone, not the commit that broke it."""
    lake_dir, master, archive = broken
    lake = Lake.at(str(lake_dir))
    _, changes = alerts_pass(GitHubResource(), lake, archive, TEAM, AlertsConfig(), NOW, base=BRANCH)
    [opened] = failing_alert(changes)
    assert opened["action"] == "opened" and opened["dry_run"]
    assert opened["title"] == f"[{TEAM}] There are 1 Recurrently Failing Jobs on {TEAM} {BRANCH}"
    body = opened["body"]
    assert f"- {JOB} — failing on every {BRANCH} commit since " \
           f"[{master[5][:10]}](https://github.com/{TEAM}/commit/{master[5]}), the first that failed" in body
    assert f"consecutive {BRANCH} commits" in body and "main" not in body and "Pytorch" not in body
    commit_health_of(lake_dir, None)  # the fix's pushes come in
    _, changes = alerts_pass(GitHubResource(), lake, archive, TEAM, AlertsConfig(), NOW, base=BRANCH)
    assert [c["action"] for c in failing_alert(changes)] == ["closed"]


def test_a_job_failing_on_every_commit_read_says_it_may_have_broken_earlier(broken):
    """With the last green commit out of the window, the oldest red one read is not known to be the
    first bad one."""
    lake_dir, master, _ = broken
    rows = [r for r in main_signal_rows(Lake.at(str(lake_dir)), NOW) if r["sha"] in master[5:7]]
    alert = recurrently_failing(rows, TEAM, 2, BRANCH)
    assert alert.lines == (JOB,)
    assert alert.details == (f"failing on every {BRANCH} commit read, the oldest "
                             f"[{master[5][:10]}](https://github.com/{TEAM}/commit/{master[5]}): it may have "
                             "broken earlier",)


def test_the_autorevert_suspects_the_breaking_commit_and_its_page_names_master(broken):
    """Commit 5 failed once, and commits 5 and 6 twice in all: it is suspected and its failed jobs re-run
    to confirm it (in dry run, never: so it is never proposed), beside a re-run of the last green. The
    page said `every workflow on main` and `main's failing signals` of the team's master."""
    lake_dir, master, _ = broken
    lake = Lake.at(str(lake_dir))
    summary = autorevert_pass(GitHubResource(), lake, TEAM, AutorevertConfig(), NOW, base=BRANCH)
    assert [(r["commit_sha"], r["notes"], r["dry_run"]) for r in summary.taken] == [
        (master[4], "rerun", True), (master[5], "rerun-failed-jobs", True)]
    assert summary.confirmed == []
    page = autorevert_page(lake, view(lake, NOW), TEAM, "now")
    assert f"It watches every workflow on {BRANCH}." in page and f"The commits {BRANCH}'s failing signals" in page
    assert "on main" not in page and "main's" not in page
    assert f'<span id="suspect-{master[5]}"></span>' in page and "restart pending" in page
    # the job's signal, and its failing test's once the team's JUnit artifacts are read
    signals = re.search(r"<td>restart pending</td><td>([^<]*)</td><td>failed on 1 attempt\(s\): restart its failed "
                        r"jobs to confirm</td>", page)
    assert signals and JOB in signals.group(1).split("; "), page
    # its failing test, a pytest function outside a class, named alone (was `.test_parse_widget`)
    assert f"{JOB} :: test_parse_widget (tests/test_widgets.py)" in signals.group(1).split("; ")


def test_a_revert_proposal_on_the_team_s_repository_asks_no_merge_bot_it_has_not(broken):
    """`@pytorchbot revert` is PyTorch's merge bot's command: on acme/widgets nobody answers it, so the
    culprit's pull request is told, with why no revert is asked."""
    lake_dir, master, _ = broken
    said: list[str] = []
    guardian = Guardian(GitHubResource(), Lake.at(str(lake_dir)), TEAM, AutorevertConfig(), NOW, said.append, BRANCH)
    row = guardian.revert(Planned("revert", master[5], "", (("CI", JOB),)))
    assert row["outcome"] == "dry_run" and "@pytorchbot" not in row["notes"]
    assert row["notes"].startswith(f"The trunk guardian found {master[5][:10]} to be a likely culprit; it does not "
                                   f"ask for a revert here (on {TEAM}, where no merge bot takes a revert request).")
    assert f"`{JOB}`" in row["notes"]


def test_live_the_culprit_s_merged_pull_request_into_master_is_notified(broken, httpserver):
    """Enabled, with a token: GitHub's lookup ties the commit to its merged pull request into master
    (a team's squash merge names it only as `(#95)`, which is not read), which gets the notification,
    once; it asked `@pytorchbot revert` there."""
    lake_dir, master, _ = broken
    actions, tracker = FakeActions(httpserver, TEAM), FakeIssueTracker(httpserver, TEAM)
    pr = tracker.add("Widgets change 5", pull_request=True)
    actions.add_pull(master[5], pr["number"], base=BRANCH)
    github = GitHubResource(api_url=httpserver.url_for(""), token="ghp_FAKEtokenTEAM0123456789", write_interval_s=0.0)
    guardian = Guardian(github, Lake.at(str(lake_dir)), TEAM, AutorevertConfig(enabled=True), NOW, base=BRANCH)
    report = guardian.run([Planned("revert", master[5], "", (("CI", JOB),))])
    (body,) = tracker.comments[pr["number"]]
    assert "@pytorchbot" not in body and "where no merge bot takes a revert request" in body
    assert [(r["pr_number"], r["outcome"]) for r in report.taken] == [(pr["number"], "notified")]


def test_the_scheduled_job_names_the_configured_branch(tmp_path, monkeypatch):
    """The job's alert check is given the configured main branch, as its autorevert is."""
    config = tmp_path / "team.yaml"
    config.write_text(f"upstream:\n  repo: {TEAM}\n  branches: [{BRANCH}]\n")
    monkeypatch.setenv("TORCHCI_CONFIG", str(config))
    now = dt.datetime.now(dt.timezone.utc)
    lake = Lake.at(str(tmp_path / "lake"))
    write_health(lake, now.strftime("%Y-%m-%d"), [{**r, "workflow": "CI", "job_group": JOB,
                                                   "pushed_at": now - dt.timedelta(minutes=50 - 10 * i)}
                                                  for i, r in enumerate(states("gggRr"))])
    assert trunk_guardians_job.execute_in_process(resources={
        "github": GitHubResource(), "lake": LakeResource(uri=str(tmp_path / "lake")),
        "archive": ArchiveResource(uri=str(tmp_path / "archive"))}).success
    titles = {r["kind"]: r["title"] for r in alerts_history(lake, now)}
    assert titles["recurrently_failing"] == f"[{TEAM}] There are 1 Recurrently Failing Jobs on {TEAM} {BRANCH}"
    [proposal] = [e["notes"] for e in ledger.read(lake, now) if e["action"] == "revert"]
    assert "@pytorchbot" not in proposal and f"on {TEAM}, where no merge bot takes a revert request" in proposal


def test_a_team_s_alert_issues_are_not_labelled_pytorch_alert_by_default():
    """A config naming no `alerts.labels` labelled a team's issues `pytorch-alert` in its tracker:
    the tool's name, as their marker has it, unless the config names others."""
    assert parse_config({"upstream": {"repo": TEAM}}).guardians.alerts.labels == ("torchci-alert",)
    assert parse_config({"upstream": {"repo": "pytorch/pytorch"}}).guardians.alerts.labels == ("pytorch-alert",)
    named = parse_config({"upstream": {"repo": TEAM}, "alerts": {"labels": ["ci: broken"]}})
    assert named.guardians.alerts.labels == ("ci: broken",)


def test_the_team_s_window_reads_master_from_its_first_push_with_every_attempt(broken):
    """A pass in the small hours after the history's last day, its config naming no window: the team's
    (its last 20 commits) reaches past the two days to the pushes of the history's first day, and their
    attempts are read from that day's job tables too, so the successes below the break are timed as the
    infrastructure check needs (was: the two days alone, pushes 4 to 6; and, counting whole days back
    from the pass, not the days the pushes were on, no attempt of a push of that first day's evening)."""
    lake_dir, master, _ = broken
    window = parse_config({"upstream": {"repo": TEAM}}).guardians.window
    small_hours = dt.datetime.combine(DAYS[-1] + dt.timedelta(days=1), dt.time(1), dt.timezone.utc)
    history, verdicts = judged(Lake.at(str(lake_dir)), AutorevertConfig(), small_hours, True, window=window)
    assert history.commits == tuple(master[:7]) and history.timed
    [signal] = [s for s in history.signals if s.key == JOB]
    assert [sha for sha in master[:7] if not signal.events[sha].tries] == []
    [verdict] = [v for v in verdicts if v.signal.key == JOB]
    assert verdict.suspects == (master[5],) and master[4] in verdict.restarts
