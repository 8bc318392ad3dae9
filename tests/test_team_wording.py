"""A team's repository whose branch is `master` reads its own branch's name on its HUD pages and in
its Dr. CI comments, never PyTorch's `main`; and a failed job without a failure line says whether its
log was read (and no log rule matched a line of it) or not read yet.

The team's history (tests/fake_team_history.py) goes through `torchci backfill` against the fake
Actions API on 127.0.0.1, the ingest, the log classifier under the team's own rules (a pytest rule
and a compiler's, none for its linter), then the HUD, Dr. CI and the site, as in
tests/test_team_repository.py. pytorch/pytorch's words stay PyTorch's (tests/test_hud_site.py and
the Dr. CI tests pin them)."""

from __future__ import annotations

import contextlib
import datetime as dt
import io

import dagster as dg
import pyarrow as pa
import pytest
from fake_github_actions import FakeActions
from fake_team_history import BRANCH, TEAM, fill
from midnight import days_before_today
from pytest_httpserver import HTTPServer

from resources.configured import ArchiveResource, LakeResource, OutputsResource
from resources.github import GitHubResource
from resources.lake import Lake, connect
from resources.storage import Store
from torchci_assets.cli import main
from torchci_assets.derived.drci import classify as c
from torchci_assets.derived.drci.assets import DRCI_ASSETS
from torchci_assets.derived.drci.comment import Head, render
from torchci_assets.derived.drci.inputs import Main, attach_captures
from torchci_assets.derived.failures.assets import FAILURE_ASSETS
from torchci_assets.derived.failures.job_failure import JOB_FAILURE_SCHEMA
from torchci_assets.derived.hud import pages
from torchci_assets.derived.hud.assets import HUD_ASSETS
from torchci_assets.derived.site.assets import SITE_ASSETS
from torchci_assets.derived.site.site import metrics_charts
from torchci_assets.ingest.webhooks import ingest_webhook_day

# the team's log rules: its tests' and its compiler's failures; its linter's output matches none
TEAM_RULES = """
[[rule]]
name = 'pytest failure'
pattern = '^(?:FAILED|ERROR) (\\S+\\.py::\\S+)'

[[rule]]
name = 'compile error'
pattern = '^(\\S+?):\\d+:\\d+: (?:fatal )?error: (.*)'
"""


@pytest.fixture(scope="module")
def days() -> list[dt.date]:
    """The team's history, as in tests/test_team_repository.py: the three days before today (Dr. CI
    writes only today's and yesterday's partitions)."""
    return days_before_today(3)


@pytest.fixture(scope="module")
def team(tmp_path_factory, days):
    """The site's and Dr. CI's outputs folder once the team's history went through backfill, ingest,
    the log classifier (every day) and the HUD."""
    root = tmp_path_factory.mktemp("team_wording")
    server = HTTPServer(host="127.0.0.1", port=0)
    server.start()
    mp = pytest.MonkeyPatch()
    try:
        fill(FakeActions(server, repo=TEAM, default_branch=BRANCH), days)
        (root / "my-repo.yaml").write_text(f"upstream:\n  repo: {TEAM}\n  branches: [{BRANCH}]\n")
        (root / "rules.toml").write_text(TEAM_RULES)
        api_url = server.url_for("").rstrip("/")
        for key, value in {"GITHUB_API_URL": api_url, "GITHUB_TOKEN": "ghp_FAKE0123456789",
                           "TORCHCI_ARCHIVE_URI": str(root / "archive"), "TORCHCI_CONFIG": str(root / "my-repo.yaml"),
                           "TORCHCI_LOG_RULES": str(root / "rules.toml")}.items():
            mp.setenv(key, value)
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["backfill", "--repo", TEAM, "--since", days[0].isoformat(), "--prs"]) == 0
        resources = {"lake": LakeResource(uri=str(root / "lake")), "outputs": OutputsResource(uri=str(root / "out")),
                     "github": GitHubResource(api_url=api_url, token="ghp_FAKE0123456789"),
                     "archive": ArchiveResource(uri=str(root / "archive"))}
        for day in days:
            ingest_webhook_day(Store(str(root / "archive")), Lake.at(str(root / "lake")), day.isoformat(), workers=1)
            assert dg.materialize(FAILURE_ASSETS, partition_key=day.isoformat(), resources=resources).success
        assert dg.materialize(HUD_ASSETS + DRCI_ASSETS + SITE_ASSETS, partition_key=days[-1].isoformat(),
                              resources=resources).success
        yield root / "out"
    finally:
        mp.undo()
        server.stop()


def test_the_hud_grid_and_its_pull_request_list_say_broken_on_master(team):
    index = (team / "hud" / "index.html").read_text()
    assert "failure: test broken on master" in index and "<th>broken on master</th>" in index
    assert "broken on main" not in index


def test_a_pull_request_page_calls_its_broken_trunk_job_broken_on_master(team):
    """PR 106 is based on a broken master commit and fails as it does."""
    page = (team / "hud" / "pr" / "106.html").read_text()
    assert '<b class="brk">B</b> failure: test broken on master' in page and "broken on main" not in page


def test_the_metrics_page_names_master(team, days):
    metrics = (team / "hud" / "metrics.html").read_text()
    assert "Master commits per day" in metrics and "Master commits red and flaky" in metrics
    assert "Time to signal of master commits green" in metrics
    assert f"Job duration per job group on master on {days[-1]}" in metrics
    assert "Main commits" not in metrics and " on main" not in metrics


def test_a_lint_failure_no_rule_matched_says_its_log_was_read(team):
    """PR 103's lint failed; its log was classified and none of the team's rules matches a line of it:
    the comment says so, not that the log may not be classified yet."""
    body = (team / "drci" / "103.md").read_text()
    assert "[CI / lint](" in body and "(log read: no log rule matched a line of it)" in body
    assert "not classified yet" not in body and "not read yet" not in body
    # a failure a rule matched quotes its line
    assert "`FAILED tests/test_widgets.py::test_parse_widget - AssertionError" in (team / "drci" / "101.md").read_text()


def test_a_failure_whose_log_is_not_read_yet_says_so():
    job = c.HeadJob("lint", "CI / lint", "failure", "new", job_id=7, run_id=3, workflow="CI")
    body = render(Head(TEAM, 9, "a" * 40, "b" * 40, branch=BRANCH), [c.classify(job, c.Trunk(), c.Flaky())], 0)
    assert "* [CI / lint](https://github.com/acme/widgets/actions/runs/3/job/7) (log not read yet)\n" in body


def test_a_log_read_in_part_says_so(tmp_path, days):
    """job_failure has job 7's log whole and job 8's cut short, neither matched by a rule; job 9's not at all."""
    lake = Lake.at(str(tmp_path / "lake"))
    last = days[-1].isoformat()
    lake.write("job_failure", last, pa.Table.from_pylist(
        [{"job_id": 7, "run_attempt": 1, "captures": [], "log_complete": True},
         {"job_id": 8, "run_attempt": 1, "captures": [], "log_complete": False}], schema=JOB_FAILURE_SCHEMA))
    jobs = {n: c.HeadJob("lint", "CI / lint", "failure", "new", job_id=n, run_id=3, workflow="CI") for n in (7, 8, 9)}
    con = connect()
    con.register("failing_jobs", pa.table({"job_id": pa.array(list(jobs), pa.int64())}))
    attach_captures(con, lake, last, jobs)
    body = render(Head(TEAM, 9, "a" * 40, "b" * 40, branch=BRANCH),
                  [c.classify(j, c.Trunk(), c.Flaky()) for j in jobs.values()], 0)
    said = {n: body.split(f"/job/{n})", 1)[1].split("\n", 1)[0] for n in jobs}
    assert said == {7: " (log read: no log rule matched a line of it)",
                    8: " (log read only in part (cut short or unreadable): no log rule matched a line of what was "
                       "read)",
                    9: " (log not read yet)"}


def test_a_broken_trunk_verdict_names_the_repository_s_branch():
    """The failure was seen on the master commit after the merge base."""
    main_ = Main(order=["m0", "m1", "m2"], failures={"m2": [("CI / test", 40, 4, "", False)]}, branch=BRANCH)
    job = c.HeadJob("test", "CI / test", "failure", "new", job_id=8, run_id=5, workflow="CI")
    v = c.classify(job, main_.trunk("m1"), c.Flaky())
    assert (v.cls, v.evidence) == (c.BROKEN_TRUNK, "failed the same way on master, 1 commit after the merge base")
    pytorch = c.classify(job, Main(order=["m0", "m1", "m2"], failures=main_.failures).trunk("m1"), c.Flaky())
    assert pytorch.evidence == "failed the same way on main, 1 commit after the merge base"


def test_pytorch_s_pages_keep_its_words(days):
    """pytorch/pytorch's branch is `main`, the pages' default: its words are as they were."""
    pr = {"number": 1, "pr_state": "open", "merged": False, "head_sha": "a" * 40, "pr_updated_at": None, "jobs": 1,
          "new": 0, "broken_on_main": 1, "known_flaky": 0, "infra": 0, "unstable": 0, "cancelled": 0, "pending": 0}
    grid = pages.grid_page([], [], {}, [pr], "pytorch/pytorch", "now", "")
    assert "<b class=\"brk\">B</b> failure: test broken on main</span>" in grid and "<th>broken on main</th>" in grid
    assert "No main commits in the window yet." in grid
    charts, _ = metrics_charts([days[-1].isoformat()], [])
    assert "Main commits per day" in "".join(charts) and "Time to signal of main commits" in "".join(charts)
