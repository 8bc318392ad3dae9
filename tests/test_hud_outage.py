"""A GitHub incident during the DISABLED-issue loop never stops the HUD.

`hud_site` and `ci_metrics_daily` read the `disabled_tests` table and depend on it, and it on
`disabled_issues`; a failed step skips everything downstream of it. So neither of the two fails its
step on GitHub's errors: the lists published last stay (CI goes on reading them), their checks fail
and say why, and the HUD is built in the same run, showing the tests CI still skips.

Real parts throughout: the fake issues API on 127.0.0.1 (tests/fake_github_issues.py), a lake of
hand-made CI history (tests/hud_lake.py) or a simulated archive, and the project's own asset
definitions and jobs run by Dagster."""

import datetime as dt
import json
import socket

import dagster as dg
import pytest
from conftest import ram_instance
from fake_github_issues import FakeIssueTracker, json_response
from hud_lake import DAY
from test_unstable_jobs import ISSUE, config, lake_at, github, materialized  # noqa: F401 (config: autouse)

from resources.configured import ArchiveResource, LakeResource, OutputsResource
from resources.github import GitHubResource
from resources.lake import Lake, connect
from torchci_assets.derived.flakiness.definitions import defs as flakiness
from torchci_assets.derived.flakiness.lists import DISABLED_TESTS_PATH
from torchci_assets.derived.hud.definitions import defs as hud
from torchci_assets.derived.site.definitions import defs as site

# the list CI reads, as published before the incident (PyTorch's format)
PUBLISHED = {f"test_{i} (__main__.TestOps)": [str(500 + i), f"https://github.com/pytorch/pytorch/issues/{500 + i}",
                                              ["linux"]] for i in range(12)}
DOWN = [json_response(502, {"message": "Bad Gateway"})] * 400
REFUSED = [json_response(401, {"message": "Bad credentials"})] * 400
KINDS = ("search", "list", "get", "permission", "create", "update", "comment", "comments")
HUD_PATH = ("disabled_issues", "disabled_tests", "unstable_jobs", "commit_health", "pr_jobs", "hud_site")


def publish_before(out) -> None:
    path = out / DISABLED_TESTS_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(PUBLISHED))


def unreachable_port() -> int:
    """A port of 127.0.0.1 nothing listens on: a connection is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def failing_github(httpserver, how: str) -> GitHubResource:
    """GitHub as an incident leaves it: every issue request answered 502, credentials refused
    (401), unreachable, or the search showing none of the open DISABLED issues (an index outage,
    which would re-enable every disabled test at once)."""
    fake = FakeIssueTracker(httpserver)
    fake.permissions["a-maintainer"] = "write"
    fake.add(ISSUE, user="a-maintainer")
    if how == "unreachable":
        return GitHubResource(api_url=f"http://127.0.0.1:{unreachable_port()}/", token="t0ken", search_interval_s=0,
                              write_interval_s=0, max_retries=1, backoff_base_s=0.0)
    for kind in KINDS if how in ("502", "401") else ():
        fake.fail(kind, *(DOWN if how == "502" else REFUSED))
    return github(httpserver)


def check(result, asset: str, name: str = "read_from_the_open_issues"):
    (evaluation,) = [c for c in result.get_asset_check_evaluations()
                     if c.asset_key.to_user_string() == asset and c.check_name == name]
    return evaluation


def disabled_on_the_tests_page(out) -> set[str]:
    page = (out / "hud" / "tests.html").read_text()
    return {t for t in PUBLISHED if t in page}


@pytest.mark.parametrize("how", ["502", "401", "unreachable", "search_lost_them"])
def test_the_hud_is_published_whatever_github_does_to_the_disabled_loop(tmp_path, httpserver, how):
    """The DISABLED-issue loop, the unstable list and the HUD of one day in one run: GitHub fails
    the loop, yet every step succeeds and the HUD is published, showing the disabled tests CI
    still reads; the published list is as it was and the checks say what happened."""
    lake_at(tmp_path)
    out = tmp_path / "out"
    publish_before(out)
    assets = [a for d in (flakiness, hud, site) for a in d.assets if isinstance(a, dg.AssetsDefinition)]
    resources = {"lake": LakeResource(uri=str(tmp_path / "lake")), "outputs": OutputsResource(uri=str(out)),
                 "github": failing_github(httpserver, how)}
    result = dg.materialize(assets, selection=dg.AssetSelection.assets(*HUD_PATH), partition_key=DAY,
                            raise_on_error=False, resources=resources,
                            run_config={"ops": {"commit_health": {"config": {"min_job_groups": 1}}}})
    assert result.success and materialized(result) == set(HUD_PATH)
    assert (out / "hud" / "index.html").exists()
    assert json.loads((out / DISABLED_TESTS_PATH).read_text()) == PUBLISHED
    assert disabled_on_the_tests_page(out) == set(PUBLISHED)
    failed = check(result, "disabled_tests")
    assert not failed.passed
    assert ("MassReenableRefused" if how == "search_lost_them" else "GitHubError") in failed.metadata["error"].value
    if how != "search_lost_them":  # the search answers: the loop itself went through
        assert not check(result, "disabled_issues", "every_disabled_test_has_an_issue").passed


# ---- the daily job and the intra-day refresh, on a simulated day ---------------------------------

SIM_DAY = "2026-11-20"


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    from torchci_assets.simulate.generate import generate_archive
    from torchci_assets.simulate.world import Options

    root = tmp_path_factory.mktemp("sim")
    generate_archive(root / "archive", [dt.date.fromisoformat(SIM_DAY)], Options(
        seed=7, commits_per_day=6, prs_per_day=2, configs=4, test_files=8, tests_per_file=6, backends=1,
        platform_failures=0), log=lambda _: None)
    return root / "archive"


def job(name: str, archive, tmp_path, gh: GitHubResource) -> dg.JobDefinition:
    from jobs.daily import all_assets_job
    from jobs.refresh import archive_refresh_job
    from torchci_assets.definitions import DOMAINS

    assets = [a for d in DOMAINS for a in d.defs.assets if isinstance(a, dg.AssetsDefinition)]
    return dg.Definitions(assets=assets, jobs=[all_assets_job, archive_refresh_job], resources={
        "archive": ArchiveResource(uri=str(archive)), "lake": LakeResource(uri=str(tmp_path / "lake")),
        "outputs": OutputsResource(uri=str(tmp_path / "out")), "github": gh}).resolve_job_def(name)


def metrics_disabled(tmp_path) -> int:
    con = connect()
    Lake.at(str(tmp_path / "lake")).register(con, "disabled_tests", [SIM_DAY], name="d")
    return con.execute("SELECT count(*) FROM d WHERE status = 'disabled'").fetchone()[0]


def test_the_daily_run_builds_the_hud_and_its_metrics_when_github_is_down(tmp_path, httpserver, simulated):
    """The day's first run, every asset, GitHub down from the start: nothing is skipped, the HUD
    and the day's CI metrics count the tests CI still skips (the list published before)."""
    publish_before(tmp_path / "out")
    with ram_instance() as instance:
        result = job("all_assets_daily", simulated, tmp_path, failing_github(httpserver, "502")).execute_in_process(
            partition_key=SIM_DAY, instance=instance, raise_on_error=False)
    assert result.success, [e.step_key for e in result.get_step_failure_events()]
    assert {"disabled_issues", "disabled_tests", "ci_metrics_daily", "hud_site"} <= materialized(result)
    assert not check(result, "disabled_tests").passed
    assert json.loads((tmp_path / "out" / DISABLED_TESTS_PATH).read_text()) == PUBLISHED
    assert disabled_on_the_tests_page(tmp_path / "out") == set(PUBLISHED) and metrics_disabled(tmp_path) == 12
    (metrics,) = [e for e in result.get_asset_materialization_events()
                  if e.asset_key.to_user_string() == "ci_metrics_daily"]
    assert metrics.materialization.metadata["disabled_tests"].value == len(PUBLISHED)


def test_a_refresh_during_an_outage_publishes_the_hud_and_keeps_the_list(tmp_path, httpserver, simulated):
    """The daily run with GitHub up publishes the list from the open issues; a refresh while
    GitHub fails republishes the HUD in its run and leaves the list, and the day's table the HUD
    shows, as that run left them."""
    fake = FakeIssueTracker(httpserver)
    fake.permissions["a-maintainer"] = "write"
    disabled = fake.add("DISABLED test_ok (__main__.TestOps)", "Platforms: linux", user="a-maintainer")
    gh = github(httpserver)
    with ram_instance() as instance:
        daily = job("all_assets_daily", simulated, tmp_path, gh).execute_in_process(
            partition_key=SIM_DAY, instance=instance, raise_on_error=False)
        assert daily.success
        published = json.loads((tmp_path / "out" / DISABLED_TESTS_PATH).read_text())
        assert published["test_ok (__main__.TestOps)"][0] == str(disabled["number"])
        for kind in KINDS:
            fake.fail(kind, *DOWN)
        index = tmp_path / "out" / "hud" / "index.html"
        index.unlink()  # so that the refresh's own publication shows
        refresh = job("archive_refresh", simulated, tmp_path, gh).execute_in_process(
            partition_key=SIM_DAY, instance=instance, raise_on_error=False)
    assert refresh.success, [e.step_key for e in refresh.get_step_failure_events()]
    assert {"disabled_issues", "disabled_tests", "drci_comments", "hud_site"} <= materialized(refresh)
    assert not check(refresh, "disabled_tests").passed and index.exists()
    assert json.loads((tmp_path / "out" / DISABLED_TESTS_PATH).read_text()) == published
    assert "test_ok (__main__.TestOps)" in (tmp_path / "out" / "hud" / "tests.html").read_text()
