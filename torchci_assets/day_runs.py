"""Day runs started from the shell, recorded as the code location's own runs.

`torchci run` executes a day in its own process, but the run it records is the kind the daily
schedule launches: the `all_assets_daily` job of the `torchci` code location, with the job's
snapshot and origin, tagged with the day's archive fingerprint. So the UI shows its target and
places it on the timeline, re-executes it without a "different version" warning, and the intra-day
refresh sensor takes it as the day's baseline instead of refreshing the files it just processed.

The origin names the code location as `workspace.yaml` does (`CODE_LOCATION`); the UI matches runs
to its jobs by that name and the repository's, and the snapshot by the definitions' content.
"""

from __future__ import annotations

import sys
from pathlib import Path

import dagster as dg
from dagster._core.definitions.reconstruct import ReconstructableJob, ReconstructableRepository
from dagster._core.execution.api import execute_run
from dagster._core.remote_origin import (
    ManagedGrpcPythonEnvCodeLocationOrigin,
    RemoteJobOrigin,
    RemoteRepositoryOrigin,
)
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin

from jobs.daily import FINGERPRINT_TAG, all_assets_job
from resources.storage import Store
from torchci_assets.ingest.landed import day_fingerprint

CODE_LOCATION = "torchci"  # workspace.yaml's location_name
REPOSITORY = "__repository__"  # the name Dagster gives the repository a Definitions object makes
DEFINITIONS_MODULE = "torchci_assets.definitions"
WORKING_DIRECTORY = str(Path(__file__).resolve().parent.parent)  # workspace.yaml's working_directory
PARTITION_TAG = "dagster/partition"
CODE_LOCATION_TAG = "dagster/code_location"


def remote_origin(job_name: str) -> RemoteJobOrigin:
    """The origin the webserver and the daemon give the code location's runs of `job_name`."""
    target = LoadableTargetOrigin(executable_path=sys.executable, module_name=DEFINITIONS_MODULE,
                                  working_directory=WORKING_DIRECTORY)
    location = ManagedGrpcPythonEnvCodeLocationOrigin(target, location_name=CODE_LOCATION)
    return RemoteJobOrigin(RemoteRepositoryOrigin(location, REPOSITORY), job_name)


def reconstructable(job_name: str) -> ReconstructableJob:
    """The job as a run worker loads it: from the definitions module, by name."""
    repo = ReconstructableRepository.for_module(DEFINITIONS_MODULE, "defs", WORKING_DIRECTORY)
    return repo.get_reconstructable_job(job_name)


def day_tags(archive: Store, day: str, whole_day: bool, extra: dict[str, str]) -> dict[str, str]:
    """The schedule's tags for a run of `day`: the partition, the code location and, for a run of every asset, the
    fingerprint of the archive it reads (a partial run is no baseline for the refresh sensor)."""
    tags = {**extra, PARTITION_TAG: day, CODE_LOCATION_TAG: CODE_LOCATION}
    if whole_day:
        tags[FINGERPRINT_TAG] = day_fingerprint(archive, day).short
    return tags


def execute_day(defs: dg.Definitions, instance: dg.DagsterInstance, day: str, tags: dict[str, str],
                asset_selection: list[dg.AssetKey] | None, run_config: dict, run_id: str):
    """Create the day's run of `all_assets_daily` as the code location's, then execute it here.

    The job runs with the code location's executor (in process, `torchci_assets.definitions`), so this costs
    what `execute_in_process` costs; the result is Dagster's `JobExecutionResult`. `run_id` is the caller's,
    who tags the run with it (`torchci run`: a run executed here, not one that inherited its tags).
    """
    job = defs.resolve_job_def(all_assets_job.name)
    recon = reconstructable(job.name)
    run = instance.create_run_for_job(
        job_def=job, run_config=run_config, tags=tags, run_id=run_id,
        asset_selection=set(asset_selection) if asset_selection else None,
        remote_job_origin=remote_origin(job.name), job_code_origin=recon.get_python_origin())
    return execute_run(recon, run, instance)
