"""The guardians' Dagster job over a real lake: commit_health partitions in, ledgers out (dry run)."""

import datetime as dt

import dagster as dg
import pyarrow as pa
import yaml

from resources.configured import ArchiveResource, LakeResource
from resources.github import GitHubResource
from resources.lake import Lake
from tests.trunk_history import GROUP, T0, history, row, sha
from torchci_assets.derived.guardians import alert_issues, ledger
from torchci_assets.derived.guardians.inputs import main_signal_rows
from torchci_assets.derived.guardians.passes import autorevert_pass
from torchci_assets.derived.hud.health import COMMIT_HEALTH_SCHEMA
from torchci_assets.guardian_config import AutorevertConfig
from jobs.guardians import trunk_guardians_job

NOW = T0 + dt.timedelta(hours=2)


def write_health(lake: Lake, day: str, rows: list[dict]) -> None:
    rows = [{**r, "blocking": True, "pushed_day": r["pushed_at"].date(), "as_of": NOW} for r in rows]
    lake.write("commit_health", day, pa.Table.from_pylist(rows, schema=COMMIT_HEALTH_SCHEMA))


def test_each_commit_is_judged_by_its_newest_partition(tmp_path):
    lake = Lake.at(str(tmp_path / "lake"))
    write_health(lake, "2026-11-19", history("gggp"))  # commit 3 still running then
    write_health(lake, "2026-11-20", history("gggRr"))
    rows = main_signal_rows(lake, NOW)
    assert [r["state"] for r in rows] == ["success"] * 3 + ["failure"] * 2
    summary = autorevert_pass(GitHubResource(), lake, "pytorch/pytorch", AutorevertConfig(), NOW)
    assert [(v.culprit, v.signal.key) for v in summary.confirmed] == [(sha(3), GROUP)]
    assert summary.dry_run and [r["outcome"] for r in summary.taken] == ["dry_run"]


def test_commits_older_than_the_window_are_not_read(tmp_path):
    lake = Lake.at(str(tmp_path / "lake"))
    write_health(lake, "2026-11-20", history("gggRr"))
    assert main_signal_rows(lake, NOW + dt.timedelta(days=3)) == []
    assert main_signal_rows(Lake.at(str(tmp_path / "empty")), NOW) == []


def run_guardians(tmp_path) -> tuple[dg.ExecuteInProcessResult, str]:
    """The guardians' job in dry run over a main whose newest commit broke a job group an hour ago
    (today's commit_health, no archive); returns its result and its lake's URI."""
    lake_uri = str(tmp_path / "lake")
    write_health(Lake.at(lake_uri), dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d"),
                 [{**r, "pushed_at": dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=50 - 10 * i)}
                  for i, r in enumerate(history("gggRr"))])
    result = trunk_guardians_job.execute_in_process(resources={
        "github": GitHubResource(), "lake": LakeResource(uri=lake_uri),
        "archive": ArchiveResource(uri=str(tmp_path / "archive"))})
    assert result.success
    return result, lake_uri


def test_the_job_runs_in_dry_run_and_writes_both_ledgers(tmp_path):
    result, lake_uri = run_guardians(tmp_path)
    lake = Lake.at(lake_uri)
    now = dt.datetime.now(dt.timezone.utc)
    events = ledger.read(lake, now)
    assert [(e["action"], e["commit_sha"], e["dry_run"]) for e in events] == [("revert", sha(3), True)]
    changes = {r["kind"]: r["action"] for r in alert_issues.history(lake, now)}
    assert changes == {"recurrently_failing": "opened", "archive_silent": "opened"}
    materialized = {e.asset_key.to_user_string(): e.event_specific_data.materialization.metadata
                    for e in result.all_events if e.event_type == dg.DagsterEventType.ASSET_MATERIALIZATION}
    assert set(materialized) == {"autorevert_events", "alerts"}
    # each ledger's page in the UI says its latest rows were a dry run: "changes: 2" alone reads as issues opened
    assert materialized["alerts"]["changes"].value == 2
    assert all(m["dry_run"].value is True for m in materialized.values())


def test_tests_the_flaky_verdicts_call_flaky_are_not_blamed(tmp_path):
    from tests.hud_lake import schema
    lake = Lake.at(str(tmp_path / "lake"))
    broken, flaky = "TestNN.test_broken (test_nn.py)", "TestNN.test_flaky (test_nn.py)"
    # the group is red for test_broken throughout; the known flaky test flaked on 2 (twice) and 3
    rows = [row(0, "failure", tests=[broken]), row(1, "failure", tests=[broken]),
            row(2, "failure", tests=[flaky, broken], attempts=2), row(3, "failure", tests=[flaky, broken])]
    write_health(lake, "2026-11-20", rows)
    verdicts = [{"file": "test_nn.py", "classname": "TestNN", "name": n, "verdict": v}
                for n, v in [("test_flaky", "flaky"), ("test_broken", "broken")]]
    lake.write("flaky_tests", "2026-11-20", pa.Table.from_pylist(verdicts, schema=schema("flaky_tests")))
    summary = autorevert_pass(GitHubResource(), lake, "pytorch/pytorch", AutorevertConfig(), NOW)
    assert summary.confirmed == [] and summary.taken == [] and summary.signals == 2


def test_the_culprits_pull_request_must_target_the_configured_main_branch(tmp_path, monkeypatch):
    """A repository whose main branch is `master`: a pull request into `main` there is not the culprit's."""
    from torchci_assets.derived.guardians.passes import base_branch

    assert base_branch() == "main"  # the default upstream branch
    cfg = tmp_path / "relay.yaml"
    cfg.write_text(yaml.safe_dump({"upstream": {"repo": "pytorch/pytorch",
                                                "branches": ["refs/heads/release/2.6", "refs/heads/master"]}}))
    monkeypatch.setenv("TORCHCI_CONFIG", str(cfg))
    assert base_branch() == "master"
