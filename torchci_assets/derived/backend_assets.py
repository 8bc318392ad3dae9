"""Dagster assets for downstream backends: ingest of their results, health, relay levels."""

import dagster as dg

from resources import ArchiveResource, LakeResource, OutputsResource
from resources.lake import connect
from torchci_assets.checks import not_null_check, reject_rate_check, unique_key_check
from torchci_assets.derived.backends import (HEALTH_SCHEMA, allowlist_proposal, assess_backends, compute_health,
                                             health_windows, levels_json, levels_table, publish_levels)
from torchci_assets.ingest.ci_results import KEY, ingest_ci_results_day
from torchci_assets.ingest.rejects import write_rejects
from torchci_assets.partitions import daily_partitions
from torchci_assets.relay.config import L4Thresholds, load_config

CI_REJECTS = dg.AssetKey(["rejects", "ci-results"])
# Lineage only: the windows actually read come from the config at run time.
_LOOKBACK = dg.TimeWindowPartitionMapping(start_offset=-(L4Thresholds().window_days - 1))


@dg.multi_asset(
    specs=[
        dg.AssetSpec("ci_result", group_name="ingest", kinds={"parquet"},
                     description="Downstream backend results: one row per (delivery, repo, run_id, run_attempt, "
                                 "job_name) at its latest state, identified by the relay-verified repo, with "
                                 "failure_kind none/test/infrastructure/pending."),
        dg.AssetSpec("ci_callback_minutes", group_name="ingest", kinds={"parquet"},
                     description="Callbacks received per downstream repo and minute (every callback, "
                                 "duplicates included), for the callback-rate criterion."),
        dg.AssetSpec(CI_REJECTS, group_name="ingest", kinds={"parquet"},
                     description="ci-results archive lines that could not be read, with file, line and reason "
                                 "(part `ci-results` of the `rejects` table)."),
    ],
    check_specs=[
        dg.AssetCheckSpec(f"unique_{'_'.join(KEY)}", asset="ci_result"),
        dg.AssetCheckSpec("required_columns_not_null", asset="ci_result"),
        dg.AssetCheckSpec("reject_rate_below_threshold", asset="ci_result"),
    ],
    partitions_def=daily_partitions,
    can_subset=False,
)
def ci_result_tables(context: dg.AssetExecutionContext, archive: ArchiveResource, lake: LakeResource):
    """Reads the day's ci-results archive and writes `ci_result`, `ci_callback_minutes` and rejects."""
    day = context.partition_key
    lk = lake.lake()
    report = ingest_ci_results_day(archive.store(), lk, day)
    if report.files == 0:
        context.log.warning(f"no ci-results files under {archive.store().display(f'ci-results/day={day}')}; "
                            "wrote empty partitions")
    write_rejects(lk, day, "ci-results", report.rejects)
    for r in report.rejects[:20]:
        context.log.warning(f"rejected {r.location}: {r.reason}")
    yield dg.MaterializeResult(asset_key="ci_result", metadata={
        "rows": report.rows, "files": report.files, "lines": report.lines, "callbacks": report.callbacks,
        "rejects": len(report.rejects), "path": lk.store.display(lk.partition_path("ci_result", day)),
        "failure_kinds": dg.MetadataValue.json(report.kinds),
        "callbacks_per_repo": dg.MetadataValue.json(report.repos),
    })
    yield dg.MaterializeResult(asset_key="ci_callback_minutes", metadata={
        "rows": report.minutes, "path": lk.store.display(lk.partition_path("ci_callback_minutes", day)),
    })
    yield dg.MaterializeResult(asset_key=CI_REJECTS, metadata={"rows": len(report.rejects)})
    yield unique_key_check(lk, "ci_result", day, list(KEY))
    yield not_null_check(lk, "ci_result", day, ["repo", "delivery_id", "run_id", "run_attempt", "job_name",
                                                "status", "failure_kind"])
    yield reject_rate_check("ci_result", len(report.rejects), report.lines)


@dg.asset(
    partitions_def=daily_partitions, group_name="relay", kinds={"parquet", "duckdb"},
    deps=[dg.AssetDep("ci_result", partition_mapping=_LOOKBACK),
          dg.AssetDep("ci_callback_minutes", partition_mapping=_LOOKBACK)],
    check_specs=[dg.AssetCheckSpec("unique_repo_window_days", asset="backend_health")],
)
def backend_health(context: dg.AssetExecutionContext, lake: LakeResource):
    """Per downstream repo, its health over the windows ending on the partition's day (7 and 28
    days by default): jobs, success rate, infrastructure availability, queue time, commit time,
    timeouts, callback peak."""
    day = context.partition_key
    lk = lake.lake()
    windows = health_windows(load_config())
    table = compute_health(lk, day, windows)
    lk.write("backend_health", day, table)
    short = [r for r in table.to_pylist() if r["window_days"] == windows[0]]
    yield dg.MaterializeResult(metadata={
        "rows": table.num_rows, "repos": len({r["repo"] for r in table.to_pylist()}),
        "windows_days": str(list(windows)), "path": lk.store.display(lk.partition_path("backend_health", day)),
        "summary": dg.MetadataValue.md(_health_md(short, windows[0])),
    })
    yield unique_key_check(lk, "backend_health", day, ["repo", "window_days"])


@dg.asset(
    partitions_def=daily_partitions, group_name="relay", kinds={"parquet", "json", "yaml"}, pool="torchci_outputs",
    deps=["backend_health"],
)
def backend_levels(context: dg.AssetExecutionContext, lake: LakeResource, outputs: OutputsResource):
    """The relay level each downstream repo has earned, a one-step recommendation, and an allowlist
    proposal: publishes `backend-levels.json` and `allowlist-proposal.yaml`."""
    day = context.partition_key
    lk = lake.lake()
    config = load_config()
    con = connect()
    try:
        if lk.register(con, "backend_health", [day]):
            rows = con.sql("SELECT * EXCLUDE (day) FROM backend_health").to_arrow_table().to_pylist()
        else:
            context.log.warning(f"backend_health for {day} is not materialized: assessing with no results")
            rows = HEALTH_SCHEMA.empty_table().to_pylist()
    finally:
        con.close()
    assessments = assess_backends(rows, config)
    lk.write("backend_levels", day, levels_table(assessments))
    published = publish_levels(outputs.store(), day, levels_json(assessments, day, config),
                               allowlist_proposal(assessments, day, config))
    if not published:
        context.log.warning(f"outputs already hold levels for a later day than {day}: not overwritten")
    changes = {a.repo: f"{a.current_level} -> {a.recommended_level}" for a in assessments if a.change != "keep"}
    return dg.MaterializeResult(metadata={
        "repos": len(assessments), "published": published, "changes": dg.MetadataValue.json(changes),
        "levels": dg.MetadataValue.md(_levels_md(assessments)),
        "path": lk.store.display(lk.partition_path("backend_levels", day)),
    })


def _health_md(rows: list[dict], window: int) -> str:
    def pct(v):
        return "-" if v is None else f"{v:.1%}"
    lines = [f"| repo ({window} days) | jobs | success | infra avail. | queue p90 s | commit p95 s | peak/min |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['repo']} | {r['jobs']} | {pct(r['success_rate'])} | {pct(r['infra_availability'])} | "
                     f"{r['queue_p90_s'] or '-'} | {r['commit_time_p95_s'] or '-'} | "
                     f"{r['callback_peak_per_minute'] or '-'} |")
    return "\n".join(lines)


def _levels_md(assessments) -> str:
    lines = ["| repo | current | eligible | recommended | first reason |", "|---|---|---|---|---|"]
    for a in assessments:
        reason = (a.reasons[0] if a.reasons else "").replace("|", "/")[:120]
        lines.append(f"| {a.repo} | {a.current_level or 'none'} | {a.eligible_level} | "
                     f"{a.recommended_level or 'none'} | {reason} |")
    return "\n".join(lines)
