"""A team whose CI follows none of PyTorch's conventions starts from its own history, as the README
says: a config naming its repository and `master`, `torchci backfill --prs` against GitHub's REST API
(the fake on 127.0.0.1, tests/fake_github_actions.py, filled by tests/fake_team_history.py), then
the ingest and the HUD's assets. What its HUD says of its master commits must be about its own
workflows: a green commit green, a broken one red, under its branch's name. Its config names the
artifacts its test jobs upload pytest's JUnit in (`backfill.report_artifacts`), so its tests are in
the test tables too, each under the job that ran it.

The trunk guardians on a team's repository: acme/widgets, its commits on `master` judged by its one
workflow `CI` (tests/fake_team_history.py: the sixth push breaks `test / unit (macos-latest)`, the
eighth fixes it), on the same `team` fixture (a file of their own would build it again). The
guardians run on it in dry run with a config naming nothing of theirs, as a team's would:
what they say must be about its branch, its workflow and its commits."""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import re
import shutil
from pathlib import Path

import dagster as dg
import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from fake_github_actions import FakeActions
from fake_team_history import BRANCH, JOBS, TEAM, fill
from midnight import days_before_today
from pytest_httpserver import HTTPServer

from jobs.guardians import trunk_guardians_job
from resources.configured import ArchiveResource, LakeResource, OutputsResource
from resources.github import GitHubResource
from resources.lake import Lake
from resources.storage import Store
from tests.fake_github_issues import FakeIssueTracker
from tests.fake_github_reruns import FakeActions as FakeReruns
from tests.test_guardians_job import write_health
from tests.trunk_history import history as states
from torchci_assets.backfill.artifacts import NO_NAME, RERUN, SEVERAL, UNKNOWN_ID, artifact_job
from torchci_assets.backfill.history import BackfillOptions, backfill
from torchci_assets.cli import main
from torchci_assets.config import PYTORCH_HUD, BackfillConfig, ConfigError, HudConfig, parse_config
from torchci_assets.derived.drci.assets import DRCI_ASSETS
from torchci_assets.derived.guardians import ledger
from torchci_assets.derived.guardians.actions import Guardian, Planned
from torchci_assets.derived.guardians.alert_conditions import recurrently_failing
from torchci_assets.derived.guardians.alert_issues import history as alerts_history
from torchci_assets.derived.guardians.hud import autorevert_page, view
from torchci_assets.derived.guardians.inputs import main_signal_rows
from torchci_assets.derived.guardians.passes import alerts_pass, autorevert_pass, judged
from torchci_assets.derived.hud.assets import HUD_ASSETS
from torchci_assets.derived.results.assets import RESULTS_ASSETS
from torchci_assets.derived.site.assets import SITE_ASSETS
from torchci_assets.guardian_config import AlertsConfig, AutorevertConfig
from torchci_assets.ingest.reports import ingest_test_run_day
from torchci_assets.ingest.webhooks import ingest_webhook_day

PLATFORMS = {"ubuntu-latest": "linux", "windows-latest": "win", "macos-latest": "mac"}


@pytest.fixture(scope="module")
def days() -> list[dt.date]:
    """The team's history: the three days before today, as the commands (which read up to the real
    today) and Dr. CI (which writes only today's and yesterday's partitions) see them."""
    return days_before_today(3)


@pytest.fixture(scope="module")
def team(tmp_path_factory, days):
    """(root, history, materialize result, what backfill printed, the fake API) once the team's history
    went through backfill, ingest and the HUD."""
    root = tmp_path_factory.mktemp("team")
    server = HTTPServer(host="127.0.0.1", port=0)
    server.start()
    mp = pytest.MonkeyPatch()
    try:
        api = FakeActions(server, repo=TEAM, default_branch=BRANCH)
        history = fill(api, days)
        config = root / "my-repo.yaml"
        config.write_text(f"upstream:\n  repo: {TEAM}\n  branches: [{BRANCH}]\n"
                          "backfill:\n  report_artifacts: [junit-]\n")
        for key, value in {"GITHUB_API_URL": server.url_for("").rstrip("/"), "GITHUB_TOKEN": "ghp_FAKE0123456789",
                           "TORCHCI_ARCHIVE_URI": str(root / "archive"), "TORCHCI_CONFIG": str(config)}.items():
            mp.setenv(key, value)
        said = io.StringIO()
        with contextlib.redirect_stdout(said):
            assert main(["backfill", "--repo", TEAM, "--since", days[0].isoformat(), "--prs"]) == 0
        lake = Lake.at(str(root / "lake"))
        for day in days:
            ingest_webhook_day(Store(str(root / "archive")), lake, day.isoformat(), workers=1)
            ingest_test_run_day(Store(str(root / "archive")), lake, day.isoformat())
        for day in days:
            assert dg.materialize(RESULTS_ASSETS, partition_key=day.isoformat(),
                                  resources={"lake": LakeResource(uri=str(root / "lake")),
                                             "outputs": OutputsResource(uri=str(root / "out"))}).success
        result = dg.materialize(HUD_ASSETS + DRCI_ASSETS + SITE_ASSETS, partition_key=days[-1].isoformat(), resources={
            "lake": LakeResource(uri=str(root / "lake")), "outputs": OutputsResource(uri=str(root / "out")),
            "github": GitHubResource(api_url=server.url_for("").rstrip("/"), token="ghp_FAKE0123456789"),
            "archive": ArchiveResource(uri=str(root / "archive"))})
        yield root, history, result, said.getvalue(), api
    finally:
        mp.undo()
        server.stop()


def conclusions(root: Path, day: dt.date) -> dict[str, str]:
    return dict(duckdb.sql(f"SELECT DISTINCT sha, conclusion FROM '{root}/lake/commit_health/day={day}/*.parquet'")
                .fetchall())


def test_master_commits_are_green_or_red_by_the_team_s_own_workflow(team, days):
    """Its workflow is `CI`, none of PyTorch's viable/strict gate, with six job groups: under PyTorch's
    rules every commit was `no_signal` (or `pending` for a day and a half), whatever its jobs did."""
    root, history, result, _, _ = team
    assert result.success
    master = history["master"]
    want = {sha: "red" if n in (5, 6) else "green" for n, sha in enumerate(master)}
    assert conclusions(root, days[-1]) == want
    blocking = duckdb.sql(f"SELECT DISTINCT blocking FROM '{root}/lake/commit_health/day={days[-1]}/*.parquet'"
                          ).fetchall()
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


def test_backfill_reads_the_team_s_junit_artifacts_named_in_its_config(team):
    """Its test jobs upload pytest's JUnit report as `junit-<os>`, named in its config: each is read and
    filed under the job whose name its name ends with, the re-run's under its own attempt's job (was:
    `N other artifacts not read` and `reports 0`, so no test statistics for the team)."""
    *_, said, api = team
    uploaded = sum(len(a) for a in api.artifacts.values())
    assert uploaded > 30
    done = said.strip().splitlines()[-1]
    assert done.startswith(f"backfill {TEAM}: done;") and f"reports {uploaded} (0 expired, 0 without a job), " in done
    assert "not read" not in said


def test_the_team_s_tests_are_filed_under_the_jobs_that_ran_them(team):
    """The broken pushes' failing test is a failed row of their macOS test job, with that job's platform
    and conclusion; every report is under a test job of its own OS; the re-run's reports under the attempt
    whose job uploaded them (the lost runner's attempt uploaded none for Windows)."""
    root, history, *_ = team
    rows = duckdb.sql(f"SELECT head_sha, job_name, platform, job_conclusion, status, name, workflow_run_attempt, "
                      f"job_found FROM '{root}/lake/test_results/*/*.parquet'").fetchall()
    master, prs = history["master"], history["prs"]
    macos, ubuntu = "test / unit (macos-latest)", "test / unit (ubuntu-latest)"
    failed = {(sha, job, platform, conclusion) for sha, job, platform, conclusion, status, name, *_ in rows
              if status == "failed"}
    assert failed == {(master[5], macos, "mac", "failure"), (master[6], macos, "mac", "failure"),
                      (prs[101], ubuntu, "linux", "failure"), (prs[106], macos, "mac", "failure"),
                      (prs[107], macos, "mac", "failure")}
    assert {name for *_, status, name, _, _ in rows if status == "failed"} == {"test_parse_widget"}
    assert all(found and platform == PLATFORMS[job.split("(")[1].rstrip(")")] for _, job, platform, *_, found in rows)
    rerun = {(attempt, job) for sha, job, *_, attempt, _ in rows if sha == prs[104]}
    assert rerun == {(1, ubuntu), (1, macos), (2, ubuntu), (2, "test / unit (windows-latest)"), (2, macos)}


def test_without_the_config_key_the_team_s_artifacts_are_counted_not_read(team, days, tmp_path):
    """PyTorch's convention by default: `junit-<os>` is not test-reports*, so it is counted, not read."""
    *_, api = team
    gh = GitHubResource(api_url=api.server.url_for("").rstrip("/"), token="ghp_FAKE0123456789")
    today = days[-1] + dt.timedelta(days=1)
    progress = backfill(gh, Store(str(tmp_path)), BackfillOptions(TEAM, days[0], today, prs=True), log=lambda s: None,
                        today=today)
    uploaded = sum(len(a) for a in api.artifacts.values())
    assert (progress.reports, progress.other_artifacts) == (0, uploaded)
    assert (f"{uploaded} other artifacts not read (test reports are the artifacts named test-reports*: "
            "backfill.report_artifacts in the config)") in progress.line()
    assert not list(tmp_path.rglob("*.zip"))


def test_each_day_s_progress_line_counts_the_pushes_of_the_days_read(team, days):
    """Three, four and three pushes on the three days: 3, 7 and 10 pushes read by the end of each day's
    line (was 0, 3 and 7: the day's pushes were written after its last line)."""
    *_, said, api = team
    per_day = [sum(a["timestamp"][:10] == day.isoformat() for a in api.activity) for day in days]
    assert per_day == [3, 4, 3]
    last = {}
    for line in said.splitlines():
        if m := re.match(rf"backfill {TEAM} (\S+): \d+/\d+ runs of the day; .* pushes (\d+),", line):
            last[m[1]] = int(m[2])
    assert [last[day.isoformat()] for day in days] == [3, 7, 10]


def _jobs(*named: tuple[int, str, int, str, str]) -> dict[int, dict]:
    """Jobs as a run's attempts list them: (id, name, attempt, started_at, completed_at)."""
    return {i: {"id": i, "name": name, "run_attempt": attempt, "started_at": start, "completed_at": end}
            for i, name, attempt, start, end in named}


ONE_ATTEMPT = _jobs(*((i, name, 1, "2026-11-02T10:00:00Z", "2026-11-02T10:30:00Z") for i, name in enumerate(JOBS)))


def test_an_artifact_is_the_job_whose_name_its_name_ends_with():
    """`junit-ubuntu-latest` is the Ubuntu test job's, not `build (ubuntu-latest, 3.11)`'s, whose name ends
    otherwise; case and punctuation aside."""
    for name, job in (("junit-macos-latest", "test / unit (macos-latest)"),
                      ("junit-ubuntu-latest", "test / unit (ubuntu-latest)"),
                      ("junit-Windows_Latest", "test / unit (windows-latest)"),
                      ("junit-ubuntu-latest-3.11", "build (ubuntu-latest, 3.11)"),
                      ("junit-unit (macos-latest)", "test / unit (macos-latest)")):
        found, why = artifact_job(name, "junit-", ONE_ATTEMPT)
        assert (found and found["name"], why) == (job, "")


def test_an_artifact_whose_name_is_no_job_s_or_several_jobs_is_filed_under_none():
    for name in ("junit-freebsd", "junit-", "junit-latest-extra"):
        assert artifact_job(name, "junit-", ONE_ATTEMPT) == (None, NO_NAME)
    two = _jobs((1, "test / unit (ubuntu-latest)", 1, "2026-11-02T10:00:00Z", "2026-11-02T10:30:00Z"),
                (2, "test / integration (ubuntu-latest)", 1, "2026-11-02T10:00:00Z", "2026-11-02T10:30:00Z"))
    assert artifact_job("junit-ubuntu-latest", "junit-", two, "2026-11-02T10:10:00Z") == (None, SEVERAL)
    assert artifact_job("junit-integration-ubuntu-latest", "junit-", two)[0]["id"] == 2


def test_a_number_ending_a_team_s_artifact_name_is_a_job_id_only_when_its_run_has_that_job():
    """A matrix over shards names its artifacts `junit_1`, `junit_2`: `_1` is no job of the run, so the
    name names its job, as any team's does; a PyTorch name whose job id is not in its run stays
    without a job, even when its attempt had one job."""
    shards = _jobs(*((100 + i, f"test ({i})", 1, "2026-11-02T10:00:00Z", "2026-11-02T10:30:00Z") for i in (1, 2)))
    assert [artifact_job(f"junit_{i}.zip", "junit", shards) for i in (1, 2)] == [(shards[101], ""), (shards[102], "")]
    one = _jobs((9002, "linux / test (default, 1, 1, linux.2xlarge)", 1, "2026-11-02T10:00:00Z",
                 "2026-11-02T10:30:00Z"))
    assert artifact_job("test-reports-runattempt1-test-default-1-1-linux.2xlarge_9001.zip", "test-reports",
                        one) == (None, UNKNOWN_ID)


def test_a_re_run_s_artifact_is_the_job_of_that_name_it_was_uploaded_during():
    """GitHub lists a run's artifacts without their attempt, and a team's names carry none: of the
    attempts' jobs of that name, the one running when the artifact was created; none running, or no
    time, is no job (never the latest attempt's by default)."""
    jobs = _jobs((1, "test / unit (windows-latest)", 1, "2026-11-02T10:00:20Z", "2026-11-02T10:17:20Z"),
                 (2, "test / unit (windows-latest)", 2, "2026-11-02T10:40:20Z", "2026-11-02T10:57:20Z"),
                 (3, "lint", 2, "2026-11-02T10:40:20Z", "2026-11-02T10:42:20Z"))
    assert artifact_job("junit-windows-latest", "junit-", jobs, "2026-11-02T10:17:15Z")[0]["id"] == 1
    assert artifact_job("junit-windows-latest", "junit-", jobs, "2026-11-02T10:57:20Z")[0]["id"] == 2
    for created in ("2026-11-02T10:30:00Z", None):
        assert artifact_job("junit-windows-latest", "junit-", jobs, created) == (None, RERUN)


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
    # a failed test job (its JUnit report and log naming the failing test) is its test failure, not
    # infrastructure; a lost runner's
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


def test_the_backfill_section_of_the_config():
    """Left out: PyTorch's `test-reports`; a list of artifact name prefixes replaces it; a wrong one is
    an error naming it."""
    assert parse_config({"upstream": {"repo": TEAM}}).backfill == BackfillConfig(("test-reports",))
    set_ = parse_config({"upstream": {"repo": TEAM}, "backfill": {"report_artifacts": ["junit-", "test-reports"]}})
    assert set_.backfill == BackfillConfig(("junit-", "test-reports"))
    for backfill_, where in (({"report_artifacts": "junit-"}, "backfill.report_artifacts"),
                             ({"report_artifacts": []}, "backfill.report_artifacts"),
                             ({"report_artifacts": [" "]}, "backfill.report_artifacts[0]"),
                             ({"report_artifacts": ["junit/"]}, "backfill.report_artifacts[0]"),
                             ({"artifacts": ["junit-"]}, "backfill")):
        with pytest.raises(ConfigError, match=re.escape(where)):
            parse_config({"upstream": {"repo": TEAM}, "backfill": backfill_})


# ---- the trunk guardians on the team's repository ---------------------------------------------

JOB = "CI / test / unit (macos-latest)"


@pytest.fixture(scope="module")
def now(days) -> dt.datetime:
    """The evening of the history's last day: its window of two days holds the pushes from the fourth on."""
    return dt.datetime.combine(days[-1], dt.time(21), dt.timezone.utc)


def commit_health_of(lake_dir, day: dt.date, shas: list[str] | None) -> None:
    """Keep only the commit_health rows of `shas` (None: restore the team's whole history)."""
    part = lake_dir / "commit_health" / f"day={day}"
    table = pq.read_table(lake_dir.parent / "all-commit-health.parquet")
    if shas is not None:
        table = table.filter(pc.is_in(table["sha"], value_set=pa.array(shas)))
    shutil.rmtree(part)
    part.mkdir()
    pq.write_table(table, part / "data.parquet")


@pytest.fixture
def broken(team, days, tmp_path, monkeypatch):
    """(a copy of the team's lake as the guardians read it while master was broken, its commit_health
    without the commits after the second red one; master's shas; the archive)."""
    root, history, *_ = team
    monkeypatch.setenv("TORCHCI_CONFIG", str(root / "my-repo.yaml"))
    lake_dir = tmp_path / "lake"
    shutil.copytree(root / "lake", lake_dir)
    pq.write_table(pq.read_table(lake_dir / "commit_health" / f"day={days[-1]}"),
                   tmp_path / "all-commit-health.parquet")
    master = history["master"]
    commit_health_of(lake_dir, days[-1], master[:7])
    return lake_dir, master, Store(str(root / "archive"))


def failing_alert(changes: list[dict]) -> list[dict]:
    return [c for c in changes if c["kind"] == "recurrently_failing"]


def test_the_break_opens_an_alert_naming_master_the_job_and_the_first_bad_commit_and_the_fix_closes_it(
        broken, now, days):
    """The alert's words were PyTorch's: `[Pytorch] ... on acme/widgets main`, `consecutive main
    commits`, and the job alone, not the commit that broke it."""
    lake_dir, master, archive = broken
    lake = Lake.at(str(lake_dir))
    changes = alerts_pass(GitHubResource(), lake, archive, TEAM, AlertsConfig(), now, base=BRANCH).changes
    [opened] = failing_alert(changes)
    assert opened["action"] == "opened" and opened["dry_run"]
    assert opened["title"] == f"[{TEAM}] There are 1 Recurrently Failing Jobs on {TEAM} {BRANCH}"
    body = opened["body"]
    assert f"- {JOB} — failing on every {BRANCH} commit since " \
           f"[{master[5][:10]}](https://github.com/{TEAM}/commit/{master[5]}), the first that failed" in body
    assert f"consecutive {BRANCH} commits" in body and "main" not in body and "Pytorch" not in body
    commit_health_of(lake_dir, days[-1], None)  # the fix's pushes come in
    changes = alerts_pass(GitHubResource(), lake, archive, TEAM, AlertsConfig(), now, base=BRANCH).changes
    assert [c["action"] for c in failing_alert(changes)] == ["closed"]


def test_a_job_failing_on_every_commit_read_says_it_may_have_broken_earlier(broken, now):
    """With the last green commit out of the window, the oldest red one read is not known to be the
    first bad one."""
    lake_dir, master, _ = broken
    rows = [r for r in main_signal_rows(Lake.at(str(lake_dir)), now) if r["sha"] in master[5:7]]
    alert = recurrently_failing(rows, TEAM, 2, BRANCH)
    assert alert.lines == (JOB,)
    assert alert.details == (f"failing on every {BRANCH} commit read, the oldest "
                             f"[{master[5][:10]}](https://github.com/{TEAM}/commit/{master[5]}): it may have "
                             "broken earlier",)


def test_the_autorevert_suspects_the_breaking_commit_and_its_page_names_master(broken, now):
    """Commit 5 failed once, and commits 5 and 6 twice in all: it is suspected and its failed jobs re-run
    to confirm it (in dry run, never: so it is never proposed), beside a re-run of the last green. The
    page said `every workflow on main` and `main's failing signals` of the team's master."""
    lake_dir, master, _ = broken
    lake = Lake.at(str(lake_dir))
    summary = autorevert_pass(GitHubResource(), lake, TEAM, AutorevertConfig(), now, base=BRANCH)
    assert [(r["commit_sha"], r["notes"], r["dry_run"]) for r in summary.taken] == [
        (master[4], "rerun", True), (master[5], "rerun-failed-jobs", True)]
    assert summary.confirmed == []
    page = autorevert_page(lake, view(lake, now), TEAM, "now")
    assert f"It watches every workflow on {BRANCH}." in page and f"The commits {BRANCH}'s failing signals" in page
    assert "on main" not in page and "main's" not in page
    assert f'<span id="suspect-{master[5]}"></span>' in page and "restart pending" in page
    # the job's signal, and its failing test's once the team's JUnit artifacts are read
    signals = re.search(r"<td>restart pending</td><td>([^<]*)</td><td>failed on 1 attempt\(s\): restart its failed "
                        r"jobs to confirm</td>", page)
    assert signals and JOB in signals.group(1).split("; "), page
    # its failing test, a pytest function outside a class, named alone (was `.test_parse_widget`)
    assert f"{JOB} :: test_parse_widget (tests/test_widgets.py)" in signals.group(1).split("; ")


def test_a_revert_proposal_on_the_team_s_repository_asks_no_merge_bot_it_has_not(broken, now):
    """`@pytorchbot revert` is PyTorch's merge bot's command: on acme/widgets nobody answers it, so the
    culprit's pull request is told, with why no revert is asked."""
    lake_dir, master, _ = broken
    said: list[str] = []
    guardian = Guardian(GitHubResource(), Lake.at(str(lake_dir)), TEAM, AutorevertConfig(), now, said.append, BRANCH)
    row = guardian.revert(Planned("revert", master[5], "", (("CI", JOB),)))
    assert row["outcome"] == "dry_run" and "@pytorchbot" not in row["notes"]
    assert row["notes"].startswith(f"The trunk guardian found {master[5][:10]} to be a likely culprit; it does not "
                                   f"ask for a revert here (on {TEAM}, where no merge bot takes a revert request).")
    assert f"`{JOB}`" in row["notes"]


def test_live_the_culprit_s_merged_pull_request_into_master_is_notified(broken, now, httpserver):
    """Enabled, with a token: GitHub's lookup ties the commit to its merged pull request into master
    (a team's squash merge names it only as `(#95)`, which is not read), which gets the notification,
    once; it asked `@pytorchbot revert` there."""
    lake_dir, master, _ = broken
    actions, tracker = FakeReruns(httpserver, TEAM), FakeIssueTracker(httpserver, TEAM)
    pr = tracker.add("Widgets change 5", pull_request=True)
    actions.add_pull(master[5], pr["number"], base=BRANCH)
    github = GitHubResource(api_url=httpserver.url_for(""), token="ghp_FAKEtokenTEAM0123456789", write_interval_s=0.0)
    guardian = Guardian(github, Lake.at(str(lake_dir)), TEAM, AutorevertConfig(enabled=True), now, base=BRANCH)
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


def test_the_team_s_window_reads_master_from_its_first_push_with_every_attempt(broken, days):
    """A pass in the small hours after the history's last day, its config naming no window: the team's
    (its last 20 commits) reaches past the two days to the pushes of the history's first day, and their
    attempts are read from that day's job tables too, so the successes below the break are timed as the
    infrastructure check needs (was: the two days alone, pushes 4 to 6; and, counting whole days back
    from the pass, not the days the pushes were on, no attempt of a push of that first day's evening)."""
    lake_dir, master, _ = broken
    window = parse_config({"upstream": {"repo": TEAM}}).guardians.window
    small_hours = dt.datetime.combine(days[-1] + dt.timedelta(days=1), dt.time(1), dt.timezone.utc)
    history, verdicts = judged(Lake.at(str(lake_dir)), AutorevertConfig(), small_hours, True, window=window)
    assert history.commits == tuple(master[:7]) and history.timed
    [signal] = [s for s in history.signals if s.key == JOB]
    assert [sha for sha in master[:7] if not signal.events[sha].tries] == []
    [verdict] = [v for v in verdicts if v.signal.key == JOB]
    assert verdict.suspects == (master[5],) and master[4] in verdict.restarts
