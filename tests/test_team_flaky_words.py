"""A team's repository whose main branch is `master`: the DISABLED issues, their comments, the
ledger and the dry-run plan name `master` where PyTorch's say `main`, and PyTorch's words stay
as they are (an issue body that changes would be edited on every open issue)."""

import datetime as dt

import dagster as dg
import pytest
from fake_github_issues import FakeIssueTracker
from resources.configured import LakeResource, OutputsResource
from resources.github import GitHubResource
from resources.lake import Lake, connect
from test_flaky import LINUX, WIN, History
from torchci_assets.derived.flakiness.assets import disabled_issues_asset
from torchci_assets.derived.flakiness.flaky import build_flaky_tests
from torchci_assets.derived.flakiness.issue_text import Evidence, FailingJob, PlatformEvidence, render_body
from torchci_assets.derived.flakiness.issues import ListedIssue, planned_issue
from torchci_assets.derived.results.stats import build_test_daily_stats, build_test_results

REPO = "team/proj"
TEST_A = "test_a (__main__.TestX)"
TEST_C = "test_c (__main__.TestX)"
CONFIG = f"""
upstream: {{repo: {REPO}, branches: [master]}}
poll_commits: false
disabled_issues: {{enabled: true, max_new_per_run: 10}}
"""
AT = dt.datetime(2026, 11, 20, 12, tzinfo=dt.timezone.utc)
EVIDENCE = Evidence(
    TEST_A, file="test_x.py", window_start="2026-11-01", window_end="2026-11-28",
    platforms=[PlatformEvidence("linux", 40, 3, 3, 3, 0, 0, elsewhere=1)],
    jobs=[FailingJob("https://github.com/x/actions/runs/1/job/2", "linux / test", "a" * 40, True, AT),
          FailingJob("https://github.com/x/actions/runs/3/job/4", "linux / test", "b" * 40, False, AT)],
    failing_jobs=2, last_main_flake_at=AT)


def test_a_new_issues_body_names_the_repositorys_branch():
    body = render_body(EVIDENCE, ["linux"], "master")
    assert "flaky on master:" in body and "run(s) on master" in body and "| runs on master |" in body
    assert f"on master at `{'a' * 12}`" in body and f"off master at `{'b' * 12}`" in body
    assert "master first):" in body
    assert " on main" not in body and "off main" not in body and "main first" not in body


def test_pytorchs_body_is_the_one_it_always_was():
    body = render_body(EVIDENCE, ["linux"])
    assert body == render_body(EVIDENCE, ["linux"], "main")
    assert "it is flaky on main: over the window 2026-11-01 to 2026-11-28 it had 3 flake event(s) in 40 run(s) on " \
           "main, on linux." in body
    assert f"on main at `{'a' * 12}`" in body and f"off main at `{'b' * 12}`" in body


def test_the_dry_run_plan_names_the_branch_it_flaked_on():
    listed = ListedIssue(TEST_A, "7", f"https://github.com/{REPO}/issues/7", ("win",))
    plan = planned_issue(TEST_A, listed, ["linux"], "master")
    assert "as it flaked on master there" in plan and "on main" not in plan
    assert planned_issue(TEST_A, listed, ["linux"]) == plan.replace("on master", "on main")


@pytest.fixture
def master_world(tmp_path, monkeypatch):
    """test_a and test_c flake on linux on master; the verdict is built over master's pushes."""
    (tmp_path / "config.yaml").write_text(CONFIG)
    monkeypatch.setenv("TORCHCI_CONFIG", str(tmp_path / "config.yaml"))
    h = History(["test_a", "test_c", "test_ok"])
    for i in range(40):
        h.run(i, LINUX, {"test_a": "flake", "test_c": "flake"} if i in (5, 17, 30) else None)
        h.run(i, WIN, None)
    return tmp_path, built_on_master(h, tmp_path)


def built_on_master(h: History, root) -> str:
    """The lake under `root` of `h`'s jobs as pushes to and runs of master, with master as the main
    branch of its tables and of its flaky verdict, built for the last day (returned)."""
    for push in h.pushes.values():
        push["ref"] = "refs/heads/master"
    for job in h.jobs:
        job["head_branch"] = "master" if job["head_branch"] == "main" else job["head_branch"]
    lake = Lake.at(str(root / "lake"))
    days = h.build(lake)
    for day in days:  # the job tables again, with master as the main branch
        build_test_results(lake, day, main_branch="refs/heads/master")
        build_test_daily_stats(lake, day)
    build_flaky_tests(lake, day, main_branch="refs/heads/master")
    return day


def ledger(lake_uri: str) -> list[dict]:
    con = connect()
    Lake.at(lake_uri).register(con, "disabled_issues")
    cur = con.execute("SELECT test, action, detail FROM disabled_issues")
    return [dict(zip(("test", "action", "detail"), r)) for r in cur.fetchall()]


def test_masters_issues_are_filed_and_reopened_in_masters_words(httpserver, master_world):
    root, day = master_world
    fake = FakeIssueTracker(httpserver, repo=REPO)
    fake.permissions["a-human"] = "write"
    old = fake.add(f"DISABLED {TEST_A}", "Platforms: linux\n\nold report", state="closed", age=dt.timedelta(days=60))
    github = GitHubResource(api_url=httpserver.url_for(""), token="t", backoff_base_s=0.01, search_interval_s=0,
                            write_interval_s=0)
    result = dg.materialize([disabled_issues_asset], partition_key=day, raise_on_error=False, resources={
        "lake": LakeResource(uri=str(root / "lake")), "github": github,
        "outputs": OutputsResource(uri=str(root / "outputs"))})
    assert result.success
    assert fake.issues[old["number"]]["state"] == "open"
    (comment,) = fake.comments[old["number"]]
    assert comment.startswith("It flaked again on master at ") and " on main" not in comment
    (new,) = fake.titled(f"DISABLED {TEST_C}")
    assert "flaky on master:" in new["body"] and " on main" not in new["body"]
    (row,) = [r for r in ledger(str(root / "lake")) if r["test"] == TEST_A]
    assert row["action"] == "updated" and row["detail"].startswith("reopened: flaked on master at "), row
