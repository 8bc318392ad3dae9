"""The guardians on the HUD: marks on main's grid and the ledger page."""

import datetime as dt
import re

from resources.github import GitHubResource
from resources.lake import Lake
from tests.fake_github_issues import FakeIssueTracker, json_response
from tests.fake_github_reruns import FakeActions
from tests.test_guardians_job import NOW, write_health
from tests.trunk_history import GROUP, history, sha
from torchci_assets.derived.guardians.alert_conditions import Alert
from torchci_assets.derived.guardians.alert_issues import AlertIssues
from torchci_assets.derived.guardians.hud import autorevert_page, guardian_marks, mark_badges, view
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
    marks = guardian_marks(view(lake, NOW))
    # a dry run: the revert and the restart were only proposed, and the marks say so
    assert marks == {sha(3): ["suspect", "would revert"], sha(6): ["suspect", "would restart"]}
    # three days on, the commits are out of the signals' window and the restart long done; the ledger remains
    assert guardian_marks(view(lake, NOW + dt.timedelta(days=3))) == {sha(3): ["would revert"]}
    html = autorevert_page(lake, view(lake, NOW), REPO, "now")
    # one of each in the counts, and one of each in the list
    assert html.count("<td>revert</td>") == 2 and html.count("<td>restart</td>") == 2
    assert html.count("<td>dry_run</td><td>1</td>") == 2 and "[Pytorch] There are 1 machines with long queues" in html
    grid = pages.grid_page([{"sha": sha(3), "pushed_at": NOW, "conclusion": "red", "time_to_signal_s": None}], [],
                           {}, [], REPO, "now", "", {sha(3): mark_badges(sha(3), marks[sha(3)])})
    assert (f'href="autorevert.html#action-{sha(3)}" title="dry run: a revert would have been proposed, nothing was '
            'sent">would revert</a>') in grid and f'id="action-{sha(3)}"' in html
    assert "culprit</a>" not in grid and 'href="autorevert.html"' in grid


def test_live_marks_show_what_github_was_asked_and_did(httpserver, tmp_path):
    """Enabled with credentials: the revert proposed and the restart sent are marked as done; a
    restart GitHub refused is in flight nowhere, and a pull request notified instead of asked to
    revert is marked so."""
    actions, tracker = FakeActions(httpserver, REPO), FakeIssueTracker(httpserver, REPO)
    client = GitHubResource(api_url=httpserver.url_for(""), token="ghp_FAKEtokenHUD0123456789", write_interval_s=0.0)
    client._sleep = lambda s: None
    third = "trunk / linux-jammy / test (crossref, linux.2xlarge)"
    for i in range(7):
        actions.add_run(1000 + i, sha(i), "trunk")
    actions.add_pull(sha(3), tracker.add("Make the fast path faster", pull_request=True)["number"])
    actions.add_pull(sha(4), tracker.add("Opted out", pull_request=True)["number"], labels=("autorevert: disable",))
    actions.fail("rerun", json_response(403, {"message": "This workflow is already running"}))
    lake = Lake.at(str(tmp_path / "lake"))
    # culprit 3 (asked to revert) and 4 (its pull request opted out: notified); commit 5 (OTHER) and 6 (third)
    # failed once: their failed jobs re-run, 5's refused by GitHub, 6's sent
    write_health(lake, "2026-11-20", history("gggRrr") + history("ggggRrr", group="trunk / linux / build")
                 + history("gggggr", group=OTHER) + history("ggggggr", group=third))
    summary = autorevert_pass(client, lake, REPO, AutorevertConfig(enabled=True), NOW)
    assert not summary.dry_run
    assert [(int(r["commit_sha"], 16), r["action"], r["outcome"]) for r in summary.taken] == [
        (3, "revert", "ok"), (4, "revert", "notified"), (5, "restart", "failed"), (6, "restart", "ok")]
    marks = guardian_marks(view(lake, NOW, AutorevertConfig(enabled=True)))
    assert {sha: [m for m in ms if m != "suspect"] for sha, ms in marks.items()} == {
        sha(3): ["culprit"], sha(4): ["notified"], sha(5): [], sha(6): ["restarting"]}


def test_marks_follow_the_configured_autorevert(tmp_path, monkeypatch):
    lake = Lake.at(str(tmp_path / "lake"))
    # trunk is green; pull's build broke on commit 2
    write_health(lake, "2026-11-20", history("gggg") + history("ggRr", group="pull / linux / build"))
    config = tmp_path / "torchci.yaml"
    config.write_text("autorevert:\n  workflows: [trunk]\n")
    monkeypatch.setenv("TORCHCI_CONFIG", str(config))
    # the autorevert watches trunk only: pull's culprit is not its suspect
    assert guardian_marks(view(lake, NOW)) == {}
    assert guardian_marks(view(lake, NOW, AutorevertConfig())) == {sha(2): ["suspect"]}
    assert autorevert_pass(GitHubResource(), lake, REPO, AutorevertConfig(workflows=("trunk",)), NOW).verdicts == {
        "ineligible": 1}


def test_a_week_without_actions_shows_no_empty_counts_table(tmp_path):
    lake = Lake.at(str(tmp_path / "lake"))
    html = autorevert_page(lake, view(lake, NOW), REPO, "now")
    assert "No restart or revert in the last week." in html
    assert "<th>count</th>" not in html  # a table of headers alone says nothing


def test_the_page_lists_the_suspects_the_marks_show(tmp_path):
    """As after `torchci run`, which runs no pass: nothing in the ledger, yet main's grid marks
    suspects; each mark leads to the page's row for its commit, which says why."""
    lake = Lake.at(str(tmp_path / "lake"))
    # the default group: culprit 3 confirmed; the other: commits 2-4 skipped it, 5 failed (a gap to bisect)
    write_health(lake, "2026-11-20", history("gggRrr") + history("ggsssr", group=OTHER))
    seen = view(lake, NOW, AutorevertConfig())
    marked = sorted(s for s, m in guardian_marks(seen).items() if "suspect" in m)
    html = autorevert_page(lake, seen, REPO, "now")
    assert marked == [sha(i) for i in (2, 3, 4, 5)]
    assert sorted(set(re.findall(r'id="suspect-([0-9a-f]{40})"', html))) == marked
    # commit 3 is the default group's confirmed culprit, and in the other group's gap: its anchor is on the row
    # of its surest verdict
    row = html.split(f'id="suspect-{sha(3)}"')[1].split("</tr>")[0]
    assert "<td>confirmed</td>" in row and GROUP in row and "failed on 2 attempts" in row and OTHER not in row
    # the gap 2-5 is one row, newest first, holding the anchors of the commits it is the first row of
    gap = html.split(f'id="suspect-{sha(5)}"')[1].split("</tr>")[0]
    assert "<td>restart pending</td>" in gap and OTHER in gap and "bisect" in gap and "(4 commits)" in gap
    assert f'id="suspect-{sha(4)}"' in gap and f'id="suspect-{sha(2)}"' in gap and GROUP not in gap
    assert gap.index(f"/commit/{sha(5)}") < gap.index(f"/commit/{sha(2)}")
    assert html.count("<td>restart pending</td>") == 1
    assert f'href="autorevert.html#suspect-{sha(4)}"' in mark_badges(sha(4), ["suspect"])


def test_a_long_gap_is_one_row_and_a_break_in_it_starts_another(tmp_path):
    """Forty skipped commits between green and red are forty suspects with the same signal and why:
    one row, not forty; commits that read differently, or are not neighbours, are rows of their own."""
    lake = Lake.at(str(tmp_path / "lake"))
    write_health(lake, "2026-11-20", history("gg" + "s" * 40 + "r") + history("gggggRrr", group=OTHER))
    seen = view(lake, NOW, AutorevertConfig())
    html = autorevert_page(lake, seen, REPO, "now")
    suspected = sorted({s for v in seen.verdicts for s in v.suspects})
    assert len(suspected) == 41
    table = html.split('<h2 id="suspects">')[1].split("</table>")[0]
    assert table.count("<tr>") - 1 == 2  # the gap's row and the other group's culprit: a header and two rows
    assert "(41 commits)" in table
    # every suspect keeps exactly one anchor, so each mark leads to a row
    assert sorted(re.findall(r'id="suspect-([0-9a-f]{40})"', table)) == suspected


def test_the_page_states_the_configured_autorevert_and_its_last_pass(tmp_path, monkeypatch):
    lake = Lake.at(str(tmp_path / "lake"))
    write_health(lake, "2026-11-20", history("gggRrr"))
    html = autorevert_page(lake, view(lake, NOW, AutorevertConfig()), REPO, "now")
    assert "The autorevert is disabled in the config" in html and "every pass is a dry run" in html
    assert "No pass wrote to the ledger in the last 7 days" in html and "cannot tell whether passes run" in html
    # enabled, but a pass without credentials is a dry run all the same: the ledger's row says so
    config = tmp_path / "torchci.yaml"
    config.write_text("autorevert:\n  enabled: true\n  workflows: [trunk]\n")
    monkeypatch.setenv("TORCHCI_CONFIG", str(config))
    autorevert_pass(GitHubResource(), lake, REPO, AutorevertConfig(enabled=True), NOW - dt.timedelta(minutes=5))
    html = autorevert_page(lake, view(lake, NOW), REPO, "now")
    assert "The autorevert is enabled in the config" in html and "It watches trunk." in html
    assert "The last pass the ledger shows ran at 2026-11-20 09:55 UTC and was a dry run." in html
