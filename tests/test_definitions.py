"""The code location loads, and its asset keys are a visible contract.

Renaming an asset silently breaks lineage and materialization history; this snapshot turns
that into a reviewed diff.
"""

import subprocess
import sys
from pathlib import Path

import dagster as dg

from torchci_assets.definitions import defs

ROOT = Path(__file__).resolve().parent.parent

EXPECTED_ASSETS = {
    "webhook_events", "workflow_job", "workflow_run", "push", "pull_request", "rejects/webhooks",
    "ci_result", "ci_callback_minutes", "rejects/ci-results", "backend_health", "backend_levels",
    "test_run", "rejects/test_run", "test_results", "test_jobs", "test_daily_stats", "test_sha_outcomes",
    "test_time_daily", "test_time_sha_daily", "test_times", "shard_plans", "test_time_regressions",
    "flaky_tests", "flaky_test_platforms", "disabled_issues", "disabled_tests", "slow_tests", "smoke_tests",
    "job_failure", "rejects/logs",
    "commit_health", "pr_jobs", "ci_metrics_daily", "hud_site", "drci_comments",
}
LEDGERS = {"dispatches"}  # written by dispatch_job, not materialized by `torchci run`


def test_asset_keys_snapshot():
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert keys == EXPECTED_ASSETS | LEDGERS


def test_every_asset_is_daily_partitioned_so_torchci_run_reaches_it():
    graph = defs.resolve_asset_graph()
    for key in graph.materializable_asset_keys:
        assert isinstance(graph.get(key).partitions_def, dg.DailyPartitionsDefinition), key
    # the implicit job `torchci run` executes must cover every asset
    job = defs.resolve_implicit_global_asset_job_def()
    assert {k.to_user_string() for k in job.asset_layer.executable_asset_keys} == EXPECTED_ASSETS


def test_the_intra_day_refresh_runs_every_asset_from_its_sensor():
    assert defs.resolve_sensor_def("archive_refresh_sensor").job_name == "archive_refresh"
    job = defs.resolve_job_def("archive_refresh")
    assert {k.to_user_string() for k in job.asset_layer.executable_asset_keys} == EXPECTED_ASSETS


def test_ingest_assets_have_checks():
    checks = {(c.asset_key.to_user_string(), c.name) for c in defs.resolve_asset_graph().asset_check_keys}
    for table in ("webhook_events", "workflow_job", "workflow_run", "push", "pull_request"):
        assert (table, "required_columns_not_null") in checks
    assert ("webhook_events", "reject_rate_below_threshold") in checks


def test_dagster_validates_the_workspace(tmp_path):
    out = subprocess.run([str(Path(sys.executable).parent / "dagster"), "definitions", "validate",
                          "-w", "workspace.yaml"], cwd=ROOT, capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "DAGSTER_HOME": str(tmp_path), "HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert "All code locations passed validation" in out.stderr + out.stdout
