"""The guardians on the HUD: marks on main's grid and the ledger page."""

import datetime as dt

from resources.github import GitHubResource
from resources.lake import Lake
from tests.test_guardians_job import NOW, write_health
from tests.trunk_history import history, sha
from torchci_assets.derived.guardians.alert_conditions import Alert
from torchci_assets.derived.guardians.alert_issues import AlertIssues
from torchci_assets.derived.guardians.hud import autorevert_page, guardian_marks, mark_badges
from torchci_assets.derived.guardians.passes import autorevert_pass
from torchci_assets.derived.hud import pages
from torchci_assets.guardian_config import AutorevertConfig

REPO = "pytorch/pytorch"
OTHER = "trunk / linux-jammy / test (slow, linux.2xlarge)"


def test_marks_and_page_show_culprits_suspects_and_restarts(tmp_path):
    lake = Lake.at(str(tmp_path / "lake"))
    # the default group: culprit 3 confirmed; the other group: commit 5 failed once, restarted to confirm
    write_health(lake, "2026-11-20", history("gggRrr") + history("ggggggr", group=OTHER))
    autorevert_pass(GitHubResource(), lake, REPO, AutorevertConfig(), NOW)
    AlertIssues(GitHubResource(), lake, REPO, ("pytorch-alert",), False, NOW).sync(
        [Alert("queue", "[Pytorch] There are 1 machines with long queues", ("linux.4xlarge",))])
    marks = guardian_marks(lake, NOW)
    assert marks == {sha(3): ["culprit", "suspect"], sha(6): ["restarting", "suspect"]}
    # three days on, the commits are out of the signals' window and the restart long done; the ledger remains
    assert guardian_marks(lake, NOW + dt.timedelta(days=3)) == {sha(3): ["culprit"]}
    html = autorevert_page(lake, NOW, REPO, "now")
    # one of each in the counts, and one of each in the list
    assert html.count("<td>revert</td>") == 2 and html.count("<td>restart</td>") == 2
    assert html.count("<td>dry_run</td><td>1</td>") == 2 and "[Pytorch] There are 1 machines with long queues" in html
    grid = pages.grid_page([{"sha": sha(3), "pushed_at": NOW, "conclusion": "red", "time_to_signal_s": None}], [],
                           {}, [], REPO, "now", "", {sha(3): mark_badges(marks[sha(3)])})
    assert 'title="revert proposed">culprit</span>' in grid and 'href="autorevert.html"' in grid


def test_marks_follow_the_configured_autorevert(tmp_path, monkeypatch):
    lake = Lake.at(str(tmp_path / "lake"))
    # trunk is green; pull's build broke on commit 2
    write_health(lake, "2026-11-20", history("gggg") + history("ggRr", group="pull / linux / build"))
    config = tmp_path / "torchci.yaml"
    config.write_text("autorevert:\n  workflows: [trunk]\n")
    monkeypatch.setenv("TORCHCI_CONFIG", str(config))
    # the autorevert watches trunk only: pull's culprit is not its suspect
    assert guardian_marks(lake, NOW) == {}
    assert guardian_marks(lake, NOW, AutorevertConfig()) == {sha(2): ["suspect"]}
    assert autorevert_pass(GitHubResource(), lake, REPO, AutorevertConfig(workflows=("trunk",)), NOW).verdicts == {
        "ineligible": 1}
