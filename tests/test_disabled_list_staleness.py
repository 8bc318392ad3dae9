"""Disabled lists GitHub would not let the loop read are visible, not only a failed check.

Through a GitHub incident the DISABLED-issue loop keeps the lists published last and fails its
checks, not its steps, so that the HUD is built: the run is green. Credentials GitHub refuses
stay refused until someone changes them, and CI goes on skipping the tests of a list nobody
updates. So the HUD's pages say it while the latest run of the day could not read the issues
(when, GitHub's answer, what to do), and the checks' metadata tells a refusal from an outage,
which `torchci run` turns into its closing line and exit status (tests/test_run_cli.py).

Real parts throughout: the fake issues API on 127.0.0.1 (tests/fake_github_issues.py), a lake of
hand-made CI history (tests/hud_lake.py), the project's asset definitions run by Dagster on one
instance across runs, as a deployment's runs follow each other."""

import datetime as dt
import html
import re

import dagster as dg
import pytest
from conftest import ram_instance
from fake_github_issues import FakeIssueTracker, json_response
from hud_lake import DAY
from test_hud_outage import HUD_PATH, KINDS, PUBLISHED, REFUSED, check, failing_github, publish_before
from test_unstable_jobs import ISSUE, config, github, lake_at  # noqa: F401 (config: autouse)

from resources.configured import LakeResource, OutputsResource
from resources.github import GitHubError
from torchci_assets.derived.flakiness.assets import READ_AT, last_read, read_failure
from torchci_assets.derived.flakiness.definitions import defs as flakiness
from torchci_assets.derived.flakiness.lists import MassReenableRefused
from torchci_assets.derived.hud.definitions import defs as hud
from torchci_assets.derived.site.definitions import defs as site
from torchci_assets.derived.site.lists_not_read import BANNER_ID

FORBIDDEN = [json_response(403, {"message": "Resource not accessible by integration"})] * 400
PAGES = ("index.html", "tests.html")


def hud_run(tmp_path, gh, instance) -> dg.ExecuteInProcessResult:
    """The DISABLED-issue loop, the unstable list and the HUD of DAY, in one run on `instance`."""
    assets = [a for d in (flakiness, hud, site) for a in d.assets if isinstance(a, dg.AssetsDefinition)]
    resources = {"lake": LakeResource(uri=str(tmp_path / "lake")),
                 "outputs": OutputsResource(uri=str(tmp_path / "out")), "github": gh}
    result = dg.materialize(assets, selection=dg.AssetSelection.assets(*HUD_PATH), partition_key=DAY, instance=instance,
                            raise_on_error=False, resources=resources,
                            run_config={"ops": {"commit_health": {"config": {"min_job_groups": 1}}}})
    assert result.success
    return result


def banners(tmp_path) -> dict[str, str]:
    """page -> the text of its banner about the disabled lists, of the pages that have one."""
    out = {}
    for page in PAGES:
        found = re.search(rf'<div id="{BANNER_ID}"[^>]*>(.*?)</div>', (tmp_path / "out" / "hud" / page).read_text())
        if found:
            out[page] = html.unescape(re.sub(r"<[^>]+>", "", found[1]))
    return out


def materialized_at(instance: dg.DagsterInstance, result, asset: str) -> dt.datetime:
    """When `result`'s run materialized `asset`, as the instance recorded it."""
    records = instance.fetch_materializations(dg.AssetKey(asset), limit=100).records
    (at,) = [r.timestamp for r in records if r.run_id == result.run_id]
    return dt.datetime.fromtimestamp(at, dt.timezone.utc)


def test_refused_credentials_are_on_the_hud_until_github_answers_again(tmp_path, httpserver):
    """A run that reads the lists, then one GitHub refuses the credentials of, then one where it
    answers again: the HUD says nothing, then says on its grid and tests pages when the latest run
    failed, GitHub's answer, since when the list is as it is and what to set, then nothing again."""
    lake_at(tmp_path)
    publish_before(tmp_path / "out")
    fake = FakeIssueTracker(httpserver)
    fake.permissions["a-maintainer"] = "write"
    fake.add(ISSUE, user="a-maintainer")
    for test, (number, _, _) in PUBLISHED.items():  # the list published last, as read from its issues
        fake.add(f"DISABLED {test}", "Platforms: linux", user="a-maintainer", number=int(number))
    with ram_instance() as instance:
        read = hud_run(tmp_path, github(httpserver), instance)
        assert check(read, "disabled_tests").passed and banners(tmp_path) == {}
        for kind in KINDS:
            fake.fail(kind, *REFUSED)
        refused = hud_run(tmp_path, github(httpserver), instance)
        assert not check(refused, "disabled_tests").passed
        shown = banners(tmp_path)
        assert set(shown) == set(PAGES)
        text = shown["index.html"]
        assert shown["tests.html"] == text
        assert "GitHub refused the credentials" in text and "HTTP 401: Bad credentials" in text
        assert f"At {materialized_at(instance, refused, 'disabled_tests'):%Y-%m-%d %H:%M} UTC the latest run" in text
        last = materialized_at(instance, read, "disabled_tests")
        assert f"last read from GitHub at {last:%Y-%m-%d %H:%M} UTC" in text
        assert "What to do: GitHub refused the credentials: set a valid GITHUB_TOKEN" in text
        # the tests CI still skips are listed all the same, under the banner
        assert all(t in (tmp_path / "out" / "hud" / "tests.html").read_text() for t in PUBLISHED)
        fake.scripts.clear()
        again = hud_run(tmp_path, github(httpserver), instance)
        assert check(again, "disabled_tests").passed and banners(tmp_path) == {}


@pytest.mark.parametrize("how", ["502", "unreachable", "403", "search_lost_them"])
def test_the_hud_says_what_to_do_for_each_kind_of_failure(tmp_path, httpserver, how):
    """An outage, no answer or a search that lost the issues pass by themselves: the banner says
    the next run reads them again; a 403 that is no rate limit is a refusal, of the permission."""
    lake_at(tmp_path)
    publish_before(tmp_path / "out")
    if how == "403":
        fake = FakeIssueTracker(httpserver)
        for kind in KINDS:
            fake.fail(kind, *FORBIDDEN)
        gh = github(httpserver)
    else:
        gh = failing_github(httpserver, how)
    with ram_instance() as instance:
        result = hud_run(tmp_path, gh, instance)
    text = banners(tmp_path)["index.html"]
    failed = check(result, "disabled_tests").metadata
    assert failed["error"].value in text and failed["fix"].value in text
    assert failed["github_refused"].value is (how == "403")
    assert ("GitHub refused the credentials" in text) is (how == "403")
    if how == "403":
        assert "needs Issues: read and write on pytorch/pytorch" in text
    elif how == "search_lost_them":
        assert "allow_mass_reenable: true" in text
    else:
        assert "the next run reads the issues again" in text
    # no run before read them on this instance: the banner does not make up a time
    assert "last read from GitHub before the runs on record" in text


def test_the_checks_tell_a_refusal_from_what_passes_by_itself():
    """Of GitHub's errors, a 401 and a 403 that is no rate limit are refusals (they answer the same
    until the credentials change); a rate limit, a 5xx, no answer and a mass re-enable are not."""
    refused = {
        "401": GitHubError(401, "GET /search/issues: HTTP 401: Bad credentials"),
        "403": GitHubError(403, "POST /repos/pytorch/pytorch/issues: HTTP 403: Resource not accessible by integration"),
    }
    passing = {
        "rate limit": GitHubError(403, "GET /search/issues: HTTP 403: API rate limit exceeded for installation"),
        "gave up": GitHubError(403, "GET /search/issues: HTTP 403 (gave up: waited 120 s)"),
        "502": GitHubError(502, "GET /search/issues: HTTP 502: Bad Gateway"),
        "no answer": GitHubError(None, "GET /search/issues: ConnectionError"),
        "mass": MassReenableRefused("most disabled tests lost their open issue at once"),
    }
    for name, exc in {**refused, **passing}.items():
        failure = read_failure(exc, "pytorch/pytorch")
        assert failure["github_refused"] is (name in refused), name
        assert failure["error"] == f"{type(exc).__name__}: {exc}" and failure["fix"]


def test_when_the_lists_were_last_read_is_carried_over_failed_runs():
    """The last read is the previous materialization's record of it, else its own time when it read
    them (one written before the record was kept); never a failed or dry run's time."""
    at = dt.datetime(2026, 11, 20, 8, 30, tzinfo=dt.timezone.utc).timestamp()
    value = dg.MetadataValue.text
    assert last_read({READ_AT: value("2026-11-19T23:00:00Z"), "error": value("x")}, at) == "2026-11-19T23:00:00Z"
    assert last_read({"dry_run": dg.MetadataValue.bool(False)}, at) == "2026-11-20T08:30:00Z"
    assert last_read({"error": value("GitHubError: ...")}, at) is None
    assert last_read({"dry_run": dg.MetadataValue.bool(True)}, at) is None
