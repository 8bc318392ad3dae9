"""Dagster assets for failure logs: each failed job's log classified (`job_failure`), with the
logs that could not be read (`log_rejects`).

Thin wrapper: the work is in `job_failure.build_job_failure`, a plain function the tests call.
The asset's code version is derived from the rules file and the infra list, so changing either
marks the materialized days stale in the UI.
"""

import hashlib

import dagster as dg

from resources.configured import ArchiveResource, LakeResource
from torchci_assets.checks import reject_rate_check, reject_rate_spec, unique_key_check, unique_key_spec
from torchci_assets.config import load_config
from torchci_assets.derived.failures.job_failure import JOB_LOOKBACK_DAYS, build_job_failure
from torchci_assets.derived.failures.rules import parse_ruleset, rules_path
from torchci_assets.ingest.archive import archive_key
from torchci_assets.ingest.increments import is_refresh, partition_folder
from torchci_assets.ingest.rejects import rejects_markdown
from torchci_assets.lake_metadata import lake_metadata, table_metadata
from torchci_assets.partitions import daily_partitions, window_mapping
from torchci_assets.staging import sweep_staging

LOG_REJECTS = dg.AssetKey("log_rejects")


def _rules_and_infra() -> tuple[bytes, str, tuple[str, ...]]:
    path = rules_path()
    try:
        data = path.read_bytes()
    except OSError as e:
        raise FileNotFoundError(f"{path}: cannot read the log rules ({e.strerror}); set TORCHCI_LOG_RULES to a "
                                "ruleset.toml or unset it for the bundled default") from None
    return data, str(path), load_config().infra_rules


def _code_version() -> str | None:
    try:
        data, _, infra = _rules_and_infra()
    except Exception:  # noqa: BLE001 - the run itself reports the problem; the UI must still load
        return None
    return "rules-" + hashlib.sha256(data + "\n".join(infra).encode()).hexdigest()[:16]


@dg.multi_asset(
    specs=[
        dg.AssetSpec("job_failure", group_name="failures", kinds={"parquet"}, code_version=_code_version(),
                     deps=[dg.AssetDep("workflow_job", partition_mapping=window_mapping(JOB_LOOKBACK_DAYS)),
                           archive_key("logs")],
                     description="One row per failed job whose log arrived that day (logs/day=D/): the log "
                                 "rule that explains the failure (PyTorch's ruleset.toml semantics, rules from "
                                 "TORCHCI_LOG_RULES), its line number, line, captures and the shell commands that led "
                                 "to it (`context`, as PyTorch's), `infra` when the rule is one of "
                                 "log_classifier.infra_rules, and `log_invalid_utf8` for a log with bytes that are "
                                 "not UTF-8."),
        dg.AssetSpec(LOG_REJECTS, group_name="failures", kinds={"parquet"}, deps=[archive_key("logs")],
                     description="Job logs that could not be read or only in part, and files in logs/ that are "
                                 "no job log (part `logs` of the `rejects` table)."),
    ],
    check_specs=[
        unique_key_spec("job_failure", ["job_id"]),
        reject_rate_spec("job_failure", LOG_REJECTS),
    ],
    partitions_def=daily_partitions,
    can_subset=False,
)
@lake_metadata
def job_failure_assets(context: dg.AssetExecutionContext, archive: ArchiveResource, lake: LakeResource):
    """Classifies the day's failed-job logs and writes `job_failure` with its rejects."""
    day = context.partition_key
    lk = lake.lake(owner=context.run.run_id, keep_listings=True)  # its folders are its own: see `ingest.assets`
    data, source, infra = _rules_and_infra()
    ruleset = parse_ruleset(data, source)
    report = build_job_failure(archive.store(), lk, day, ruleset, data, infra, log=context.log.info,
                               reuse=is_refresh(context.run.tags))
    swept = sweep_staging(context, lk, ["job_failure", "rejects"], day)
    if report.logs == 0:
        context.log.info(f"no job logs under {archive.store().display(f'logs/day={day}')}; wrote empty partitions")
    for r in report.rejects[:20]:
        context.log.warning(f"rejected {r.location}: {r.reason}")
    yield dg.MaterializeResult(asset_key="job_failure", metadata={
        "rows": report.rows, "files": report.files, "logs": report.logs, "classified": report.classified, "infra": report.infra,
        "skipped_successful_jobs": report.skipped_successful, "jobs_not_found": report.jobs_not_found,
        "log_bytes": dg.MetadataValue.int(report.bytes_read), "long_lines_cut": report.long_lines,
        "logs_with_invalid_utf8": report.invalid_utf8,
        "processes": report.workers, "classifications_reused": report.reused, "ruleset": f"{source} ({len(ruleset)} rules, sha256 {ruleset.digest[:12]})",
        "rules": dg.MetadataValue.json(dict(sorted(report.rules.items(), key=lambda kv: -kv[1]))),
        "path": partition_folder(lk, "job_failure", day), "stale_staging_files_removed": swept,
        **table_metadata(lk, "job_failure", day),
    })
    yield dg.MaterializeResult(asset_key=LOG_REJECTS, metadata={
        "rows": len(report.rejects), "preview": dg.MetadataValue.md(rejects_markdown(report.rejects)),
        **table_metadata(lk, LOG_REJECTS.to_user_string(), day)})
    yield unique_key_check(lk, "job_failure", day, ["job_id"])
    yield reject_rate_check("job_failure", len(report.rejects), report.files)


FAILURE_ASSETS = [job_failure_assets]
