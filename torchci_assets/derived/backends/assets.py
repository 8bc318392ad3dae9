"""Dagster assets for downstream backends: health over windows of their results, and relay levels.

Thin wrappers: the work is in `derived.backends.levels`, plain functions the tests call directly.
"""

import dagster as dg

from resources.configured import LakeResource, OutputsResource
from resources.lake import connect
from torchci_assets.checks import unique_key_check, unique_key_spec
from torchci_assets.config import L4Thresholds, load_config
from torchci_assets.derived.backends.levels import (HEALTH_SCHEMA, LEVELS_FILE, PROPOSAL_FILE, allowlist_proposal,
                                                   assess_backends, compute_health, health_windows, levels_json,
                                                   levels_table, publish_levels)
from torchci_assets.lake_metadata import lake_metadata
from torchci_assets.partitions import daily_partitions, window_mapping
from torchci_assets.publishing import kept_note, later_day_kept, nothing_new

# Lineage only: the windows actually read come from the config at run time.
_LOOKBACK = window_mapping(L4Thresholds().window_days - 1)


@dg.asset(
    name="backend_health", partitions_def=daily_partitions, group_name="backends", kinds={"parquet", "duckdb"},
    deps=[dg.AssetDep("ci_result", partition_mapping=_LOOKBACK),
          dg.AssetDep("ci_callback_minutes", partition_mapping=_LOOKBACK)],
    check_specs=[unique_key_spec("backend_health", ["repo", "window_days"])],
)
@lake_metadata
def backend_health_asset(context: dg.AssetExecutionContext, lake: LakeResource):
    """Per downstream repo, its health over the windows ending on the partition's day (7 and 28
    days by default): jobs, success rate, infrastructure availability, queue time, commit time,
    timeouts, callback peak. A job that never completed times out after the relay's
    `zombie_timeout_seconds`, as the relay's sweeper reports it."""
    day = context.partition_key
    lk = lake.lake()
    config = load_config()
    windows = health_windows(config)
    table = compute_health(lk, day, windows, zombie_timeout_s=config.zombie_timeout_seconds)
    lk.write("backend_health", day, table)
    short = [r for r in table.to_pylist() if r["window_days"] == windows[0]]
    yield dg.MaterializeResult(metadata={
        "rows": table.num_rows, "repos": len({r["repo"] for r in table.to_pylist()}),
        "windows_days": str(list(windows)), "path": lk.store.display(lk.partition_path("backend_health", day)),
        "summary": dg.MetadataValue.md(health_summary_md(short, windows[0])),
    })
    yield unique_key_check(lk, "backend_health", day, ["repo", "window_days"])


@dg.asset(
    name="backend_levels", partitions_def=daily_partitions, group_name="backends", kinds={"parquet", "json", "yaml"},
    pool="torchci_outputs",
    deps=["backend_health"],
)
@lake_metadata
def backend_levels_asset(context: dg.AssetExecutionContext, lake: LakeResource, outputs: OutputsResource):
    """The relay level each downstream repo has earned, a one-step recommendation, and an allowlist
    proposal: publishes `backend-levels.json` and `allowlist-proposal.yaml`. Without any
    downstream result in the windows there is nothing to judge: the published files stay."""
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
    store = outputs.store()
    if not rows:
        # No backend reported anything in the windows: an outage of the results' collection
        # looks the same, and demoting every backend for it would be wrong. Assess nothing.
        lk.write("backend_levels", day, levels_table([]))
        windows = health_windows(config)
        return dg.MaterializeResult(metadata={
            "repos": 0, "published": False, "path": lk.store.display(lk.partition_path("backend_levels", day)),
            **nothing_new(context, f"no downstream results in the {windows[-1]} days ending {day}: "
                                   f"{kept_note(store, [LEVELS_FILE, PROPOSAL_FILE])}"),
        })
    assessments = assess_backends(rows, config)
    lk.write("backend_levels", day, levels_table(assessments))
    published = publish_levels(store, day, levels_json(assessments, day, config),
                               allowlist_proposal(assessments, day, config))
    kept = {} if published else later_day_kept(context, day, None, LEVELS_FILE)
    changes = {a.repo: f"{a.current_level} -> {a.recommended_level}" for a in assessments if a.change != "keep"}
    return dg.MaterializeResult(metadata={
        "repos": len(assessments), "published": published, "changes": dg.MetadataValue.json(changes),
        "levels": dg.MetadataValue.md(_levels_md(assessments)),
        "path": lk.store.display(lk.partition_path("backend_levels", day)), **kept,
    })


def health_summary_md(rows: list[dict], window: int) -> str:
    """The short window's health per backend; "-" only where there is no value (no job to measure)."""
    def pct(v):
        return "-" if v is None else f"{v:.1%}"

    def whole(v):
        return "-" if v is None else f"{v:.0f}"
    lines = [f"| repo ({window} days) | jobs | success | infra avail. | queue p90 s | commit p95 s | peak/min |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['repo']} | {r['jobs']} | {pct(r['success_rate'])} | {pct(r['infra_availability'])} | "
                     f"{whole(r['queue_p90_s'])} | {whole(r['commit_time_p95_s'])} | "
                     f"{whole(r['callback_peak_per_minute'])} |")
    return "\n".join(lines)


def _levels_md(assessments) -> str:
    lines = ["| repo | current | eligible | recommended | first reason |", "|---|---|---|---|---|"]
    for a in assessments:
        reason = (a.reasons[0] if a.reasons else "").replace("|", "/")[:120]
        lines.append(f"| {a.repo} | {a.current_level or 'none'} | {a.eligible_level} | "
                     f"{a.recommended_level or 'none'} | {reason} |")
    return "\n".join(lines)


BACKEND_ASSETS = [backend_health_asset, backend_levels_asset]
