"""The trunk guardians in the asset graph: the `autorevert_events` and `alerts` ledgers.

The job and the schedule that run the guardians live in `jobs/guardians.py` (they act on the
world); declaring their ledgers here shows them in the asset graph with their history.
"""

import dagster as dg

from torchci_assets.derived.guardians import alert_issues, ledger

autorevert_events = dg.AssetSpec(
    ledger.TABLE, group_name="guardians", kinds={"parquet", "github"},
    # main's commits (commit_health) and each attempt of their job groups, judged as the HUD judges them
    deps=["commit_health", "workflow_job", "workflow_run", "test_jobs", "test_sha_outcomes", "flaky_tests",
          "job_failure"],
    description="Append-only ledger of the autorevert's decisions: restarts (workflow, commit, run) and revert "
                "proposals (commit, pull request), with the signals behind them, intent/done rows and dry_run. "
                "Written by trunk_guardians_job.")
alerts = dg.AssetSpec(
    alert_issues.TABLE, group_name="guardians", kinds={"parquet", "github"},
    # the archive's newest webhook file: the silent-archive alert
    deps=["commit_health", "workflow_job", "disabled_issues", "flaky_tests", "webhook_archive"],
    description="One row per alert state change (opened/updated/closed) with its GitHub issue: recurrently failing "
                "blocking jobs, long queues, a silent disabled-issue bot, a silent archive. Written by "
                "trunk_guardians_job.")

defs = dg.Definitions(assets=[autorevert_events, alerts])
