"""The trunk guardians in Dagster: every 5 minutes (PyTorch's cadence for its alerts) one run
judges main's signals and acts (restarts, revert proposals), then checks the alerts.

Both ops take the `trunk_guardians` pool (one slot), so two runs never read and write the
ledgers at once; a run that overlaps the next tick makes that one wait. Without credentials, or
with `autorevert.enabled` / `alerts.enabled` false (the default), every action is a dry run.
"""

import datetime as dt

import dagster as dg

from resources.configured import ArchiveResource, LakeResource
from resources.github import GitHubResource
from torchci_assets.config import load_config
from torchci_assets.derived.guardians import alert_issues, ledger
from torchci_assets.derived.guardians.passes import alerts_pass, autorevert_pass, base_branch
from torchci_assets.guardian_config import GuardianSettings
from torchci_assets.lake_metadata import ledger_metadata


def _settings():
    relay = load_config()
    return relay.upstream_repo, relay.guardians or GuardianSettings()


@dg.op(pool="trunk_guardians", description="Judge main's signals; restart, propose reverts, record each decision.")
def autorevert(context: dg.OpExecutionContext, github: GitHubResource, lake: LakeResource):
    repo, settings = _settings()
    now = dt.datetime.now(dt.timezone.utc)
    s = autorevert_pass(github, lake.lake(), repo, settings.autorevert, now, log=context.log.info, base=base_branch(),
                        window=settings.window)
    for v in s.confirmed:
        context.log.warning(f"culprit {v.culprit[:10]}: {v.signal.key} ({v.reason})")
    if s.taken:
        yield dg.AssetMaterialization(asset_key=ledger.TABLE, metadata={
            "rows": len(s.taken), "dry_run": s.dry_run, **ledger_metadata(lake.lake(), ledger.TABLE)})
    yield dg.Output(None, metadata={"commits": s.commits, "signals": s.signals, "dry_run": s.dry_run,
                                    **{f"verdicts_{k}": n for k, n in s.verdicts.items()},
                                    "actions": len(s.taken), "waiting": len(s.skipped),
                                    "github_unavailable": s.unavailable})


@dg.op(pool="trunk_guardians", ins={"after": dg.In(dg.Nothing)},
       description="Check the alert conditions; open, update or close their issues.")
def check_alerts(context: dg.OpExecutionContext, github: GitHubResource, lake: LakeResource,
                 archive: ArchiveResource):
    repo, settings = _settings()
    s = alerts_pass(github, lake.lake(), archive.store(), repo, settings.alerts, dt.datetime.now(dt.timezone.utc),
                    log=context.log.info, base=base_branch(), window=settings.window)
    if s.changes:
        yield dg.AssetMaterialization(asset_key=alert_issues.TABLE, metadata={
            "changes": len(s.changes), "dry_run": any(c["dry_run"] for c in s.changes),
            **ledger_metadata(lake.lake(), alert_issues.TABLE)})
    yield dg.Output(None, metadata={**{a.kind: len(a.lines) for a in s.alerts}, "github_unavailable": s.unavailable})


@dg.job(description="The trunk guardians: autorevert (restarts, revert proposals) and alerts, dry run by default.")
def trunk_guardians_job():
    check_alerts(after=autorevert())


trunk_guardians_schedule = dg.ScheduleDefinition(
    job=trunk_guardians_job, cron_schedule="*/5 * * * *", execution_timezone="UTC",
    description="Every 5 minutes, the trunk guardians (trunk_guardians_job): the autorevert judges main's signals "
                "(restarts, revert proposals), then the alert conditions are checked (their issues opened or "
                "closed). Every action is a dry run without GitHub credentials or with autorevert.enabled / "
                "alerts.enabled false (the default).",
    default_status=dg.DefaultScheduleStatus.RUNNING)
