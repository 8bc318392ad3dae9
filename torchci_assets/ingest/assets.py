"""Ingest assets: the archive's day folders -> the lake's day partitions, one asset per source.

Thin wrappers: the work is in `webhooks`, `reports` and `ci_results`, plain functions the
tests call directly. Each asset writes under its run id (`Lake.owner`) and, once its partition
is written, removes the staging files a killed run left in that partition's folders: those
whose run the instance no longer has in progress. Each lists a folder once and again only after
changing it (`Lake(keep_listings=True)`): what it reads there is its own (one run of a partition
at a time; in the shared `rejects`, its own parts), for its increment, commit, manifest, sweep,
checks and catalog metadata alike.
"""

import dagster as dg

from resources.configured import ArchiveResource, LakeResource
from resources.lake import connect
from torchci_assets.checks import (check_spec, not_null_check, reject_rate_check, reject_rate_spec, unique_key_check,
                                    unique_key_spec)
from torchci_assets.ingest.archive import archive_key
from torchci_assets.ingest.ci_results import KEY as CI_RESULT_KEY
from torchci_assets.ingest.ci_results import ingest_ci_results_day
from torchci_assets.ingest.increments import is_refresh, partition_folder
from torchci_assets.ingest.rejects import rejects_markdown
from torchci_assets.ingest.reports import KEY_COLUMNS, REQUIRED_COLUMNS, ingest_test_run_day
from torchci_assets.ingest.webhooks import ingest_webhook_day
from torchci_assets.lake_metadata import lake_metadata, table_metadata
from torchci_assets.partitions import daily_partitions
from torchci_assets.staging import sweep_staging

WEBHOOK_REJECTS = dg.AssetKey("webhook_rejects")
TEST_RUN_REJECTS = dg.AssetKey("test_run_rejects")
CI_REJECTS = dg.AssetKey("ci_result_rejects")

# (table, key columns, required columns) for the typed tables the webhook pass writes.
WEBHOOK_TABLES = {
    "webhook_events": (["delivery_id"], ["event", "delivery_id", "received_at", "payload"]),
    "workflow_job": (["id", "run_attempt"], ["id", "run_id", "run_attempt", "status", "received_at"]),
    "workflow_run": (["id", "run_attempt"], ["id", "run_attempt", "status"]),
    "push": (["delivery_id"], ["ref", "delivery_id", "received_at"]),
    "pull_request": (["delivery_id"], ["number", "delivery_id", "received_at"]),
}

_DESCRIPTIONS = {
    "webhook_events": "Bronze: one row per webhook delivery (deduplicated by delivery id), payload as JSON text.",
    "workflow_job": "One row per job id and attempt: its highest state seen this day "
                    "(queued < waiting < in_progress < completed), with build_env, test_config, shard "
                    "and platform parsed from PyTorch's job name, and queue/run durations.",
    "workflow_run": "One row per workflow run id and attempt: its highest state seen this day.",
    "push": "One row per push delivery: ref, before/after, forced, created/deleted, head commit.",
    "pull_request": "One row per pull_request delivery: action, state, head sha, base ref, labels.",
}


@dg.multi_asset(
    specs=[
        dg.AssetSpec("webhook_events", description=_DESCRIPTIONS["webhook_events"], group_name="ingest",
                     kinds={"parquet"}, deps=[archive_key("webhooks")]),
        *[dg.AssetSpec(t, deps=["webhook_events"], description=_DESCRIPTIONS[t], group_name="ingest",
                       kinds={"parquet"}) for t in WEBHOOK_TABLES if t != "webhook_events"],
        dg.AssetSpec(WEBHOOK_REJECTS, deps=[archive_key("webhooks")], description="Webhook archive lines that could not be read, with file, "
                     "line and reason (part `webhooks` of the `rejects` table).", group_name="ingest",
                     kinds={"parquet"}),
    ],
    check_specs=[
        *[unique_key_spec(t, key, blocking=True) for t, (key, _) in WEBHOOK_TABLES.items()],
        *[check_spec("required_columns_not_null", t, blocking=True) for t in WEBHOOK_TABLES],
        reject_rate_spec("webhook_events", WEBHOOK_REJECTS),
    ],
    partitions_def=daily_partitions,
    can_subset=False,
)
@lake_metadata
def webhook_assets(context: dg.AssetExecutionContext, archive: ArchiveResource, lake: LakeResource):
    """Reads the day's webhook archive once and writes the bronze and typed tables; in a refresh,
    only the files that landed since the partition's last ingest."""
    day = context.partition_key
    lk = lake.lake(owner=context.run.run_id, keep_listings=True)
    report = ingest_webhook_day(archive.store(), lk, day, log=context.log.info,
                                incremental=is_refresh(context.run.tags))
    swept = sweep_staging(context, lk, [*WEBHOOK_TABLES, "rejects"], day)
    if report.files == 0 and report.mode == "rebuild":
        context.log.warning(f"no webhook files under {archive.store().display(f'webhooks/day={day}')}; "
                            "wrote empty partitions")
    for r in report.rejects[:20]:
        context.log.warning(f"rejected {r.location}: {r.reason}")

    yield dg.MaterializeResult(asset_key="webhook_events", metadata={
        **increment_metadata(report.mode, report.rebuild_reason, report.files, report.deliveries),
        "rows": report.day_deliveries, "lines": report.lines,
        "bytes_read": dg.MetadataValue.int(report.bytes_read), "duplicates_dropped": report.duplicates,
        "rejects": len(report.rejects), "path": partition_folder(lk, "webhook_events", day),
        "events": dg.MetadataValue.md(_events_table(report.events)), "stale_staging_files_removed": swept,
        **table_metadata(lk, "webhook_events", day),
    })
    for table in WEBHOOK_TABLES:
        if table != "webhook_events":
            metadata = {"rows": report.rows.get(table, 0), "rows_added": report.added.get(table, 0),
                        "mode": report.mode, "path": partition_folder(lk, table, day),
                        **table_metadata(lk, table, day)}
            if table == "workflow_job":
                metadata["preview"] = dg.MetadataValue.md(_jobs_preview(lk, day))
            yield dg.MaterializeResult(asset_key=table, metadata=metadata)
    yield dg.MaterializeResult(asset_key=WEBHOOK_REJECTS, metadata={
        "rows": report.day_rejects, "new_rows": len(report.rejects),
        "preview": dg.MetadataValue.md(rejects_markdown(report.rejects)),
        **table_metadata(lk, WEBHOOK_REJECTS.to_user_string(), day),
    })
    for table, (key, required) in WEBHOOK_TABLES.items():  # an appended table: its new parts (see the checks)
        parts = None if report.parts_added is None else report.parts_added.get(table)
        yield unique_key_check(lk, table, day, key, parts)
        yield not_null_check(lk, table, day, required, parts)
    yield reject_rate_check("webhook_events", report.day_rejects, report.day_lines)


def increment_metadata(mode: str, why: str | None, files: int, rows_added: int) -> dict:
    """What a user asks of a refresh first: did it add to the day or rebuild it, from how many
    files, how many rows, and why a rebuild."""
    return {"mode": mode, "files": files, "rows_added": rows_added,
            "rebuild_reason": why or ("a full run of the day" if mode == "rebuild" else "-")}


def _jobs_preview(lake, day: str) -> str:
    """Jobs per platform and conclusion, with median queue and run times: what a reader checks first."""
    con = connect()
    try:
        if not lake.register(con, "workflow_job", [day], name="j"):
            return "No jobs."
        rows = con.execute(
            "SELECT platform, coalesce(conclusion, status) AS state, count(*) AS jobs, "
            "round(median(queue_s)) AS queue_s_p50, round(median(duration_s)) AS duration_s_p50 "
            "FROM j GROUP BY ALL ORDER BY jobs DESC LIMIT 12").fetchall()
    finally:
        con.close()
    body = "\n".join("| " + " | ".join("" if v is None else str(v) for v in r) + " |" for r in rows)
    return "| platform | state | jobs | queue_s p50 | duration_s p50 |\n|---|---|---|---|---|\n" + body


def _events_table(events: dict[str, int]) -> str:
    rows = "\n".join(f"| {e} | {n} |" for e, n in sorted(events.items(), key=lambda kv: -kv[1]))
    return "| event | deliveries |\n|---|---|\n" + rows


@dg.multi_asset(
    specs=[
        dg.AssetSpec("test_run", group_name="ingest", kinds={"parquet"},
                     deps=[archive_key("test-reports"), archive_key("test-runs")],
                     description="One row per test per job attempt from the day's JUnit XML reports "
                                 "(test-reports/) and PyTorch's JSONL rows (test-runs/): final status, failed "
                                 "attempts before it (rerun_count), summed time, first failure line."),
        dg.AssetSpec(TEST_RUN_REJECTS, group_name="ingest", kinds={"parquet"},
                     deps=[archive_key("test-reports"), archive_key("test-runs")],
                     description="Test reports, JSONL files and lines that could not be read, with location and "
                                 "reason (parts `test-reports` and `test-runs` of the `rejects` table)."),
    ],
    check_specs=[
        check_spec("unique_test_per_job", "test_run", blocking=True),
        check_spec("required_columns_not_null", "test_run", blocking=True),
        reject_rate_spec("test_run", TEST_RUN_REJECTS),
    ],
    partitions_def=daily_partitions,
    can_subset=False,
)
@lake_metadata
def test_run_assets(context: dg.AssetExecutionContext, archive: ArchiveResource, lake: LakeResource):
    """Reads the day's test reports and test-runs files and writes `test_run` and its rejects; in a
    refresh, only the files that landed since the partition's last ingest."""
    day = context.partition_key
    lk = lake.lake(owner=context.run.run_id, keep_listings=True)
    report = ingest_test_run_day(archive.store(), lk, day, log=context.log.info,
                                 incremental=is_refresh(context.run.tags))
    swept = sweep_staging(context, lk, ["test_run", "rejects"], day)
    if report.files == 0 and report.mode == "rebuild":
        context.log.warning(f"no test reports or test-runs files for day={day} under "
                            f"{archive.store().display()}; wrote an empty partition")
    rejects = [r for source in report.rejects.values() for r in source]
    for r in rejects[:20]:
        context.log.warning(f"rejected {r.location}: {r.reason}")
    yield dg.MaterializeResult(asset_key="test_run", metadata={
        **increment_metadata(report.mode, report.rebuild_reason, report.files, report.rows_added),
        "rows": report.rows, "report_files": report.report_files,
        "test_runs_files": report.runs_files, "rejects": report.reject_count,
        "bytes": dg.MetadataValue.int(report.bytes_read),
        "entries_folded_across_files": report.staged_rows - report.rows_added,
        "report_folders_read": report.folders_read, "report_folders_unchanged": report.folders_reused,
        "report_folders_unseen": report.folders_unseen,
        "path": partition_folder(lk, "test_run", day), "stale_staging_files_removed": swept,
        **table_metadata(lk, "test_run", day),
    })
    yield dg.MaterializeResult(asset_key=TEST_RUN_REJECTS, metadata={
        "rows": report.day_rejects, "new_rows": report.reject_count,
        "by_source": dg.MetadataValue.json({s: len(r) for s, r in report.rejects.items()}),
        "preview": dg.MetadataValue.md(rejects_markdown(rejects)),
        **table_metadata(lk, TEST_RUN_REJECTS.to_user_string(), day),
    })
    unique = unique_key_check(lk, "test_run", day, KEY_COLUMNS, report.parts_added)
    yield dg.AssetCheckResult(asset_key="test_run", check_name="unique_test_per_job", passed=unique.passed,
                              metadata=unique.metadata)
    yield not_null_check(lk, "test_run", day, REQUIRED_COLUMNS, report.parts_added)
    yield reject_rate_check("test_run", report.day_rejects, report.day_records)


@dg.multi_asset(
    specs=[
        dg.AssetSpec("ci_result", group_name="ingest", kinds={"parquet"}, deps=[archive_key("ci-results")],
                     description="Downstream backend results: one row per (delivery, repo, run_id, run_attempt, "
                                 "job_name) at its latest state, identified by the relay-verified repo, with "
                                 "failure_kind none/test/infrastructure/pending."),
        dg.AssetSpec("ci_callback_minutes", group_name="ingest", kinds={"parquet"}, deps=[archive_key("ci-results")],
                     description="Callbacks received per downstream repo and minute (every callback, "
                                 "duplicates included), for the callback-rate criterion."),
        dg.AssetSpec(CI_REJECTS, group_name="ingest", kinds={"parquet"}, deps=[archive_key("ci-results")],
                     description="ci-results archive lines that could not be read, with file, line and reason "
                                 "(part `ci-results` of the `rejects` table)."),
    ],
    check_specs=[
        unique_key_spec("ci_result", CI_RESULT_KEY, blocking=True),
        check_spec("required_columns_not_null", "ci_result", blocking=True),
        reject_rate_spec("ci_result", CI_REJECTS),
    ],
    partitions_def=daily_partitions,
    can_subset=False,
)
@lake_metadata
def ci_result_assets(context: dg.AssetExecutionContext, archive: ArchiveResource, lake: LakeResource):
    """Reads the day's ci-results archive and writes `ci_result`, `ci_callback_minutes` and rejects;
    in a refresh, parses only the files that landed since the partition's last ingest."""
    day = context.partition_key
    lk = lake.lake(owner=context.run.run_id, keep_listings=True)
    report = ingest_ci_results_day(archive.store(), lk, day, incremental=is_refresh(context.run.tags),
                                   log=context.log.info)
    if report.files == 0 and report.mode == "rebuild":
        context.log.warning(f"no ci-results files under {archive.store().display(f'ci-results/day={day}')}; "
                            "wrote empty partitions")
    swept = sweep_staging(context, lk, ["ci_result", "ci_callback_minutes", "rejects"], day)
    for r in report.rejects[:20]:
        context.log.warning(f"rejected {r.location}: {r.reason}")
    yield dg.MaterializeResult(asset_key="ci_result", metadata={
        **increment_metadata(report.mode, report.rebuild_reason, report.files, report.rows_added),
        "rows": report.rows, "lines": report.lines, "callbacks": report.callbacks,
        "rejects": len(report.rejects), "path": partition_folder(lk, "ci_result", day),
        "stale_staging_files_removed": swept, "failure_kinds": dg.MetadataValue.json(report.kinds),
        "callbacks_per_repo": dg.MetadataValue.json(report.repos), **table_metadata(lk, "ci_result", day),
    })
    yield dg.MaterializeResult(asset_key="ci_callback_minutes", metadata={
        "rows": report.minutes, "path": partition_folder(lk, "ci_callback_minutes", day),
        **table_metadata(lk, "ci_callback_minutes", day),
    })
    yield dg.MaterializeResult(asset_key=CI_REJECTS, metadata={
        "rows": report.day_rejects, "new_rows": len(report.rejects),
        "preview": dg.MetadataValue.md(rejects_markdown(report.rejects)),
        **table_metadata(lk, CI_REJECTS.to_user_string(), day),
    })
    yield unique_key_check(lk, "ci_result", day, list(CI_RESULT_KEY))
    yield not_null_check(lk, "ci_result", day, ["repo", "delivery_id", "run_id", "run_attempt", "job_name",
                                                "status", "failure_kind"])
    yield reject_rate_check("ci_result", report.day_rejects, report.day_lines)


INGEST_ASSETS = [webhook_assets, test_run_assets, ci_result_assets]
