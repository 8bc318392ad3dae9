"""The UNSTABLE job list as an asset of its own, upstream of the HUD: an UNSTABLE issue opened on
GitHub marks its job on the HUD in the run that reads it, a disabled list failing on GitHub does not
hold the HUD up, and a failing unstable list does not either (the HUD goes on with the list
published last).

Real parts throughout: the fake issues API on 127.0.0.1 (tests/fake_github_issues.py), a lake of
hand-made CI history (tests/hud_lake.py) and the domains' own asset definitions run by Dagster."""

import datetime as dt
import json

import dagster as dg
import pytest
from fake_github_issues import FakeIssueTracker, json_response
from hud_lake import DAY, REPO, T0, History
from test_hud_health import TEST

from resources.configured import LakeResource, OutputsResource
from resources.github import GitHubResource
from resources.lake import Lake, connect
from resources.storage import Store
from torchci_assets.derived.flakiness.definitions import defs as flakiness
from torchci_assets.derived.flakiness.job_issues import UNSTABLE_JOBS_PATH
from torchci_assets.derived.hud.definitions import defs as hud

CONFIG = """
upstream: {repo: pytorch/pytorch, branches: [main]}
poll_commits: false
disabled_issues: {enabled: true}
"""
ISSUE = "UNSTABLE pull / linux-jammy-py3.10-gcc11"  # marks every job of that build in `pull`
MAIN_GROUP = "pull / linux-jammy-py3.10-gcc11 / test (default, linux.4xlarge)"
PR_JOB = "linux-jammy-py3.10-gcc11 / test (default, 1, 2, linux.4xlarge)"
KIND_GITHUB = "dagster/kind/github"  # the tag Dagster gives an asset of kind "github"


@pytest.fixture(autouse=True)
def config(tmp_path, monkeypatch):
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG)
    monkeypatch.setenv("TORCHCI_CONFIG", str(path))


def history() -> History:
    """A main commit whose `pull` build fails one shard, and a pull request whose job of the same
    build fails: both jobs are the UNSTABLE issue's."""
    h = History()
    c = h.push(1)
    h.job(c, TEST.format(1), "success", run_id=10)
    h.job(c, TEST.format(2), "failure", run_id=10)
    h.run(10, "pull", conclusion="failure")
    head = f"{0xB1:040x}"
    h.add("pull_request", DAY, repo=REPO, number=42, state="open", head_sha=head, head_ref="gh/x/1/head",
          base_ref="main", labels=[], merged=None, updated_at=T0, received_at=T0)
    h.job(head, PR_JOB, "failure", run_id=31, branch="gh/x/1/head")
    h.run(31, "pull", conclusion="failure", event="pull_request")
    return h


def lake_at(tmp_path) -> str:
    uri = str(tmp_path / "lake")
    history().write(Lake.at(uri))
    return uri


def github(httpserver) -> GitHubResource:
    return GitHubResource(api_url=httpserver.url_for(""), token="t0ken", search_interval_s=0, write_interval_s=0,
                          max_retries=1, backoff_base_s=0.0)


def domain_assets() -> list[dg.AssetsDefinition]:
    return [a for d in (flakiness, hud) for a in d.assets if isinstance(a, dg.AssetsDefinition)]


def materialize(tmp_path, httpserver, selection) -> dg.ExecuteInProcessResult:
    return dg.materialize(domain_assets(), selection=selection, partition_key=DAY, raise_on_error=False, resources={
        "lake": LakeResource(uri=str(tmp_path / "lake")), "outputs": OutputsResource(uri=str(tmp_path / "out")),
        "github": github(httpserver)}, run_config={"ops": {"commit_health": {"config": {"min_job_groups": 1}}}})


def unstable_marks(tmp_path) -> dict[str, bool]:
    """The HUD's word on the two jobs: {table: unstable}."""
    lake, con = Lake.at(str(tmp_path / "lake")), connect()
    lake.register(con, "commit_health", [DAY], name="c")
    lake.register(con, "pr_jobs", [DAY], name="p")
    (main,) = con.execute("SELECT unstable FROM c WHERE job_group = ?", [MAIN_GROUP]).fetchone()
    (pr,) = con.execute("SELECT unstable FROM p WHERE number = 42 AND source = 'github'").fetchone()
    return {"commit_health": main, "pr_jobs": pr}


def maintainers_issue(tmp_path, httpserver) -> FakeIssueTracker:
    """A lake, and GitHub holding ISSUE, opened by a maintainer (write access)."""
    lake_at(tmp_path)
    fake = FakeIssueTracker(httpserver)
    fake.permissions["a-maintainer"] = "write"
    fake.add(ISSUE, user="a-maintainer")
    return fake


def materialized(result) -> set[str]:
    return {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}


def test_an_unstable_issue_reaches_the_hud_in_the_run_that_reads_it(tmp_path, httpserver):
    """The HUD's assets with what they depend on that reads GitHub: one run takes an UNSTABLE issue
    opened since the last list to the grid and the pull request's jobs (the list was read, then
    the HUD built from it, in that order)."""
    fake = maintainers_issue(tmp_path, httpserver)
    hud_and_its_github_reads = (dg.AssetSelection.assets("commit_health", "pr_jobs").upstream()
                                & dg.AssetSelection.tag(KIND_GITHUB, "")) | dg.AssetSelection.assets(
                                    "commit_health", "pr_jobs")
    result = materialize(tmp_path, httpserver, hud_and_its_github_reads)
    assert result.success
    assert unstable_marks(tmp_path) == {"commit_health": True, "pr_jobs": True}
    assert json.loads((tmp_path / "out" / UNSTABLE_JOBS_PATH).read_text()) == {
        "pull / linux-jammy-py3.10-gcc11": ["a-maintainer", str(fake.titled(ISSUE)[0]["number"]),
                                            fake.titled(ISSUE)[0]["html_url"], "pull", "linux-jammy-py3.10-gcc11", ""]}


def test_a_disabled_list_failing_on_github_does_not_hold_the_hud_up(tmp_path, httpserver):
    """GitHub's issue list fails (the DISABLED read-back reads it, the UNSTABLE search does not):
    the disabled loop and list fail their checks, not their steps, so nothing is skipped; the
    unstable list and the HUD are built all the same (tests/test_hud_outage.py follows the HUD's
    whole path)."""
    fake = maintainers_issue(tmp_path, httpserver)
    fake.fail("list", *[json_response(502, {"message": "Bad Gateway"})] * 20)
    selection = ("disabled_issues", "disabled_tests", "unstable_jobs", "commit_health", "pr_jobs")
    result = materialize(tmp_path, httpserver, dg.AssetSelection.assets(*selection))
    assert result.success and materialized(result) == set(selection)
    failed = {c.asset_key.to_user_string(): c for c in result.get_asset_check_evaluations() if not c.passed}
    assert set(failed) == {"disabled_issues", "disabled_tests"}
    assert "GitHubError" in failed["disabled_issues"].metadata["error"].value and "502" in \
        failed["disabled_issues"].metadata["error"].value
    assert unstable_marks(tmp_path) == {"commit_health": True, "pr_jobs": True}


@pytest.mark.parametrize("kind", ["search", "permission"])
def test_when_the_unstable_list_fails_the_hud_goes_on_with_the_list_published_last(tmp_path, httpserver, kind):
    """The unstable list's own read fails (its search, or a permission lookup GitHub does not
    answer): its step still succeeds, so the HUD is built in the same run, from the list published
    last, left as it was; the asset's check fails and says why."""
    fake = maintainers_issue(tmp_path, httpserver)
    fake.add("UNSTABLE trunk / rocm / test (default)", user="a-maintainer")  # opened since: not read
    last = {"pull / linux-jammy-py3.10-gcc11": ["a-maintainer", "7", f"https://github.com/{REPO}/issues/7", "pull",
                                                "linux-jammy-py3.10-gcc11", ""]}
    Store(str(tmp_path / "out")).write_bytes(UNSTABLE_JOBS_PATH, json.dumps(last).encode())
    fake.fail(kind, *[json_response(502, {"message": "Bad Gateway"})] * 20)
    result = materialize(tmp_path, httpserver, dg.AssetSelection.assets("unstable_jobs", "commit_health", "pr_jobs"))
    assert result.success and materialized(result) == {"unstable_jobs", "commit_health", "pr_jobs"}
    assert unstable_marks(tmp_path) == {"commit_health": True, "pr_jobs": True}
    assert json.loads((tmp_path / "out" / UNSTABLE_JOBS_PATH).read_text()) == last
    (check,) = [c for c in result.get_asset_check_evaluations() if c.asset_key.to_user_string() == "unstable_jobs"]
    assert not check.passed
    assert "502" in check.metadata["error"].value
    (event,) = [e for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == "unstable_jobs"]
    assert event.materialization.metadata["published"].value is False
    assert event.materialization.metadata["output"].value == \
        f"{Store(str(tmp_path / 'out')).display(UNSTABLE_JOBS_PATH)} (as published before: not written in this run)"


def test_credentials_github_refuses_are_told_apart_from_an_outage_on_the_unstable_check(tmp_path, httpserver):
    """A 401 does not pass by itself: the check says GitHub refused the credentials and what to set
    (as the disabled lists' checks do, so `torchci run` exits 3 and the HUD's banner names it); a 502
    is an outage the next run may get past."""
    fake = maintainers_issue(tmp_path, httpserver)
    fake.fail("search", *[json_response(401, {"message": "Bad credentials"})] * 20)
    only_the_list = dg.AssetSelection.assets("unstable_jobs", "commit_health")
    result = materialize(tmp_path, httpserver, only_the_list)
    (check,) = [c for c in result.get_asset_check_evaluations() if c.asset_key.to_user_string() == "unstable_jobs"]
    assert not check.passed and check.metadata["github_refused"].value is True
    assert "GITHUB_TOKEN" in check.metadata["fix"].value and "401" in check.metadata["error"].value
    fake.scripts.clear()
    fake.fail("search", *[json_response(502, {"message": "Bad Gateway"})] * 20)
    (check,) = [c for c in materialize(tmp_path, httpserver, only_the_list).get_asset_check_evaluations()
                if c.asset_key.to_user_string() == "unstable_jobs"]
    assert not check.passed and check.metadata["github_refused"].value is False
    assert "outage" in check.metadata["fix"].value


def test_the_next_run_publishes_what_github_answers_again(tmp_path, httpserver):
    fake = maintainers_issue(tmp_path, httpserver)
    fake.fail("search", *[json_response(502, {"message": "Bad Gateway"})] * 2)
    selection = dg.AssetSelection.assets("unstable_jobs", "commit_health")
    assert materialize(tmp_path, httpserver, selection).success
    assert not (tmp_path / "out" / UNSTABLE_JOBS_PATH).exists()  # nothing published before: nothing marked
    assert unstable_marks_main(tmp_path) is False
    again = materialize(tmp_path, httpserver, selection)
    assert again.success and all(c.passed for c in again.get_asset_check_evaluations())
    assert unstable_marks_main(tmp_path) is True


def unstable_marks_main(tmp_path) -> bool:
    lake, con = Lake.at(str(tmp_path / "lake")), connect()
    lake.register(con, "commit_health", [DAY], name="c")
    return con.execute("SELECT unstable FROM c WHERE job_group = ?", [MAIN_GROUP]).fetchone()[0]


def test_without_credentials_nothing_is_published_or_asked_and_the_hud_is_built(tmp_path, httpserver):
    lake_at(tmp_path)
    fake = FakeIssueTracker(httpserver)
    fake.add(ISSUE, user="a-maintainer")
    result = dg.materialize(domain_assets(), selection=dg.AssetSelection.assets("unstable_jobs", "commit_health"),
                            partition_key=DAY, resources={
                                "lake": LakeResource(uri=str(tmp_path / "lake")),
                                "outputs": OutputsResource(uri=str(tmp_path / "out")),
                                "github": GitHubResource(api_url=httpserver.url_for(""))},
                            run_config={"ops": {"commit_health": {"config": {"min_job_groups": 1}}}})
    assert result.success and fake.requests == []
    assert not (tmp_path / "out" / UNSTABLE_JOBS_PATH).exists()
    (event,) = [e for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == "unstable_jobs"]
    assert event.materialization.metadata["dry_run"].value is True
    assert event.materialization.metadata["output"].value == "none: not written in this run"  # was the path
    assert all(c.passed for c in result.get_asset_check_evaluations())
    assert unstable_marks_main(tmp_path) is False


def test_only_the_same_runs_answers_are_reused(tmp_path):
    """The answers a run records serve its own later steps only: another run (the next refresh,
    with a permission withdrawn since), another repository or a damaged file gets none."""
    from torchci_assets.derived.flakiness.issues import ANSWERS_DIR, keep_answers, run_answers
    from torchci_assets.derived.flakiness.job_issues import Permissions

    lake = Lake.at(str(tmp_path / "lake"))
    allowed = Permissions(None, REPO, known={"a-writer": True, "a-stranger": False})
    assert keep_answers(lake, DAY, "run-1", allowed) == 2
    assert run_answers(lake, DAY, "run-1", REPO) == {"a-writer": True, "a-stranger": False}
    assert run_answers(lake, DAY, "run-2", REPO) == {} and run_answers(lake, DAY, "run-1", "acme/other") == {}
    assert run_answers(lake, (dt.date.fromisoformat(DAY) + dt.timedelta(days=1)).isoformat(), "run-1", REPO) == {}
    keep_answers(lake, DAY, "run-1", Permissions(None, REPO, known={"a-reader": False}))  # a later step adds
    assert run_answers(lake, DAY, "run-1", REPO) == {"a-writer": True, "a-stranger": False, "a-reader": False}
    keep_answers(lake, DAY, "run-2", Permissions(None, REPO, known={"a-writer": False}))  # the next run replaces
    assert run_answers(lake, DAY, "run-2", REPO) == {"a-writer": False} and run_answers(lake, DAY, "run-1", REPO) == {}
    for text in ('{"run_id": "run-2", "repo": "pytorch/pytorch", "answers": {"a-writer": "write"}}', "[", "[]"):
        lake.store.write_bytes(f"{ANSWERS_DIR}/{DAY}.json", text.encode())
        assert run_answers(lake, DAY, "run-2", REPO) == {}
