"""Ingest assets: the archive's day folders -> the lake's day partitions."""

import dagster as dg

from resources import ArchiveResource, LakeResource
from resources.lake import connect
from torchci_assets.checks import not_null_check, reject_rate_check, unique_key_check
from torchci_assets.ingest.rejects import rejects_markdown
from torchci_assets.ingest.webhooks import ingest_webhook_day
from torchci_assets.partitions import daily_partitions

WEBHOOK_REJECTS = dg.AssetKey(["rejects", "webhooks"])

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
                     kinds={"parquet"}),
        *[dg.AssetSpec(t, deps=["webhook_events"], description=_DESCRIPTIONS[t], group_name="ingest",
                       kinds={"parquet"}) for t in WEBHOOK_TABLES if t != "webhook_events"],
        dg.AssetSpec(WEBHOOK_REJECTS, description="Webhook archive lines that could not be read, with file, "
                     "line and reason (part `webhooks` of the `rejects` table).", group_name="ingest",
                     kinds={"parquet"}),
    ],
    check_specs=[
        *[dg.AssetCheckSpec(f"unique_{'_'.join(key)}", asset=t) for t, (key, _) in WEBHOOK_TABLES.items()],
        *[dg.AssetCheckSpec("required_columns_not_null", asset=t) for t in WEBHOOK_TABLES],
        dg.AssetCheckSpec("reject_rate_below_threshold", asset="webhook_events"),
    ],
    partitions_def=daily_partitions,
    can_subset=False,
)
def webhook_tables(context: dg.AssetExecutionContext, archive: ArchiveResource, lake: LakeResource):
    """Reads the day's webhook archive once and writes the bronze and typed tables."""
    day = context.partition_key
    lk = lake.lake()
    report = ingest_webhook_day(archive.store(), lk, day, log=context.log.info)
    if report.files == 0:
        context.log.warning(f"no webhook files under {archive.store().display(f'webhooks/day={day}')}; "
                            "wrote empty partitions")
    for r in report.rejects[:20]:
        context.log.warning(f"rejected {r.location}: {r.reason}")

    yield dg.MaterializeResult(asset_key="webhook_events", metadata={
        "rows": report.deliveries, "files": report.files, "lines": report.lines,
        "bytes_read": dg.MetadataValue.int(report.bytes_read), "duplicates_dropped": report.duplicates,
        "rejects": len(report.rejects), "path": lk.store.display(lk.partition_path("webhook_events", day)),
        "events": dg.MetadataValue.md(_events_table(report.events)),
    })
    for table in WEBHOOK_TABLES:
        if table != "webhook_events":
            metadata = {"rows": report.rows.get(table, 0), "path": lk.store.display(lk.partition_path(table, day))}
            if table == "workflow_job":
                metadata["preview"] = dg.MetadataValue.md(_jobs_preview(lk, day))
            yield dg.MaterializeResult(asset_key=table, metadata=metadata)
    yield dg.MaterializeResult(asset_key=WEBHOOK_REJECTS, metadata={
        "rows": len(report.rejects),
        "preview": dg.MetadataValue.md(rejects_markdown(report.rejects)),
    })
    for table, (key, required) in WEBHOOK_TABLES.items():
        yield unique_key_check(lk, table, day, key)
        yield not_null_check(lk, table, day, required)
    yield reject_rate_check("webhook_events", len(report.rejects), report.lines)

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
