"""A team whose CI follows none of PyTorch's conventions starts from its own history, as the README
says: a config naming its repository and `master`, `torchci backfill --prs` against GitHub's REST API
(the fake on 127.0.0.1, tests/fake_github_actions.py, filled by tests/fake_team_history.py), then
the ingest and the HUD's assets. What its HUD says of its master commits must be about its own
workflows: a green commit green, a broken one red, under its branch's name."""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import re
from pathlib import Path

import dagster as dg
import duckdb
import pytest
from fake_github_actions import FakeActions
from fake_team_history import BRANCH, TEAM, fill
from pytest_httpserver import HTTPServer

from resources.configured import ArchiveResource, LakeResource, OutputsResource
from resources.github import GitHubResource
from resources.lake import Lake
from resources.storage import Store
from torchci_assets.cli import main
from torchci_assets.config import PYTORCH_HUD, ConfigError, HudConfig, parse_config
from torchci_assets.derived.drci.assets import DRCI_ASSETS
from torchci_assets.derived.hud.assets import HUD_ASSETS
from torchci_assets.derived.site.assets import SITE_ASSETS
from torchci_assets.ingest.webhooks import ingest_webhook_day

# the command reads up to the real today: the team's history is on the three days before it
TODAY = dt.datetime.now(dt.timezone.utc).date()
DAYS = [TODAY - dt.timedelta(days=n) for n in (3, 2, 1)]
LAST = DAYS[-1].isoformat()


@pytest.fixture(scope="module")
def team(tmp_path_factory):
    """(root, history, materialize result, what backfill printed, the fake API) once the team's history
    went through backfill, ingest and the HUD."""
    root = tmp_path_factory.mktemp("team")
    server = HTTPServer(host="127.0.0.1", port=0)
    server.start()
    mp = pytest.MonkeyPatch()
    try:
        api = FakeActions(server, repo=TEAM, default_branch=BRANCH)
        history = fill(api, DAYS)
        config = root / "my-repo.yaml"
        config.write_text(f"upstream:\n  repo: {TEAM}\n  branches: [{BRANCH}]\n")
        for key, value in {"GITHUB_API_URL": server.url_for("").rstrip("/"), "GITHUB_TOKEN": "ghp_FAKE0123456789",
                           "TORCHCI_ARCHIVE_URI": str(root / "archive"), "TORCHCI_CONFIG": str(config)}.items():
            mp.setenv(key, value)
        said = io.StringIO()
        with contextlib.redirect_stdout(said):
            assert main(["backfill", "--repo", TEAM, "--since", DAYS[0].isoformat(), "--prs"]) == 0
        lake = Lake.at(str(root / "lake"))
        for day in DAYS:
            ingest_webhook_day(Store(str(root / "archive")), lake, day.isoformat(), workers=1)
        result = dg.materialize(HUD_ASSETS + DRCI_ASSETS + SITE_ASSETS, partition_key=LAST, resources={
            "lake": LakeResource(uri=str(root / "lake")), "outputs": OutputsResource(uri=str(root / "out")),
            "github": GitHubResource(api_url=server.url_for("").rstrip("/"), token="ghp_FAKE0123456789"),
            "archive": ArchiveResource(uri=str(root / "archive"))})
        yield root, history, result, said.getvalue(), api
    finally:
        mp.undo()
        server.stop()


def conclusions(root: Path) -> dict[str, str]:
    return dict(duckdb.sql(f"SELECT DISTINCT sha, conclusion FROM '{root}/lake/commit_health/day={LAST}/*.parquet'")
                .fetchall())


def test_master_commits_are_green_or_red_by_the_team_s_own_workflow(team):
    """Its workflow is `CI`, none of PyTorch's viable/strict gate, with six job groups: under PyTorch's
    rules every commit was `no_signal` (or `pending` for a day and a half), whatever its jobs did."""
    root, history, result, _, _ = team
    assert result.success
    master = history["master"]
    want = {sha: "red" if n in (5, 6) else "green" for n, sha in enumerate(master)}
    assert conclusions(root) == want
    blocking = duckdb.sql(f"SELECT DISTINCT blocking FROM '{root}/lake/commit_health/day={LAST}/*.parquet'").fetchall()
    assert blocking == [(True,)]


def test_the_hud_names_the_team_s_branch_and_how_its_conclusion_is_decided(team):
    root, *_ = team
    index = (root / "out" / "hud" / "index.html").read_text()
    assert f"<title>{TEAM} master: CI at a glance</title>" in index
    assert "commits pushed to master as of" in index and "pushed to main" not in index
    assert "viable/strict" not in index and "conclusion from the groups of every workflow" in index
    assert len(re.findall(r'data-conclusion="green"', index)) == 8
    metrics = (root / "out" / "hud" / "metrics.html").read_text()
    assert "(pull, trunk)" not in metrics and "green at the first attempt (every workflow)" in metrics


def test_backfill_says_the_team_s_junit_artifacts_were_not_read(team):
    """Its test jobs upload pytest's JUnit report as `junit-<os>`: not PyTorch's test-reports-*, so not
    read (nor could each be filed under its job: the name carries no job id). The progress line says
    so, where it said `reports 0` and nothing more."""
    *_, said, api = team
    uploaded = sum(len(a) for a in api.artifacts.values())
    assert uploaded > 30
    done = said.strip().splitlines()[-1]
    assert done.startswith(f"backfill {TEAM}: done;") and "reports 0 (0 expired, 0 without a job id, " in done
    assert f", {uploaded} other artifacts not read (test reports are the artifacts named test-reports*)" in done


def test_dr_ci_words_a_broken_master_for_the_team_s_branches(team):
    """A pull request based on a broken master commit, failing as it does: BROKEN TRUNK, with advice
    the team can follow (it has no viable/strict branch, PyTorch's green commits) and its branch's name."""
    root, *_ = team
    body = (root / "out" / "drci" / "106.md").read_text()
    assert "<b>BROKEN TRUNK</b>" in body and "viable/strict" not in body
    assert "Rebase onto the `master` branch once it is fixed there to avoid these failures" in body
    near = (root / "out" / "drci" / "107.md").read_text()  # based on the commit before the first broken one
    assert "present on master at or next to the merge base" in near
    assert "on master, 1 commit after the merge base: " in near and " main" not in near
    # a failed test job without JUnit reports is its test failure, not infrastructure; a lost runner's
    # job that passed on its re-run is no failure
    assert "NEW FAILURE" in (root / "out" / "drci" / "101.md").read_text()
    assert "No Failures" in (root / "out" / "drci" / "104.md").read_text()


def test_the_hud_section_of_the_config(tmp_path):
    """Left out: PyTorch's gate for pytorch/pytorch, every workflow for another repository; each key
    may be set, and a wrong one is an error naming it."""
    assert parse_config({"upstream": {"repo": "pytorch/pytorch"}}).hud == PYTORCH_HUD
    assert parse_config({"upstream": {"repo": TEAM}}).hud == HudConfig((), (), 1)
    set_ = parse_config({"upstream": {"repo": TEAM}, "hud": {"blocking_workflows": ["CI", "Lint"],
                                                             "min_job_groups": 3}}).hud
    assert set_ == HudConfig(("CI", "Lint"), (), 3)
    for hud, where in (({"blocking_workflows": "CI"}, "hud.blocking_workflows"),
                       ({"signal_workflows": [""]}, "hud.signal_workflows"),
                       ({"min_job_groups": 0}, "hud.min_job_groups"), ({"blocking": []}, "hud")):
        with pytest.raises(ConfigError, match=re.escape(where)):
            parse_config({"upstream": {"repo": TEAM}, "hud": hud})
