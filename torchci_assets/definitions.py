"""The code location: one Definitions, assembled from the domains' own.

Each domain folder declares its assets in its `definitions.py`; jobs, schedules, sensors and
resources are wired here once, so a reader finds everything the UI shows by following these
imports.
"""

import warnings

from torchci_assets.collector import collect_less

collect_less()  # before the imports below, which make most of the collections it saves

import dagster as dg

from jobs import (all_assets_job, archive_refresh_job, archive_refresh_sensor, daily_schedule, dispatch_job,
                  trunk_guardians_job, trunk_guardians_schedule, upstream_commit_sensor)
from jobs import relay_prs
from jobs.gap_repair import gap_repair_job, gap_repair_schedule
from jobs.relay_catch_up import relay_catch_up_sensor
from resources.configured import default_resources
from torchci_assets import preflight
from torchci_assets.conventions import apply_conventions
from torchci_assets.derived.backends import definitions as backends
from torchci_assets.derived.drci import definitions as drci
from torchci_assets.derived.failures import definitions as failures
from torchci_assets.derived.flakiness import definitions as flakiness
from torchci_assets.derived.guardians import definitions as guardians
from torchci_assets.derived.hud import definitions as hud
from torchci_assets.derived.results import definitions as results
from torchci_assets.derived.sharding import definitions as sharding
from torchci_assets.derived.site import definitions as site
from torchci_assets.ingest import definitions as ingest
from torchci_assets.relay import definitions as relay

# Dagster copies each sensor with its `owners` parameter (None here), which warns BetaWarning in
# every process that loads the code location: noise no user can act on.
warnings.filterwarnings("ignore", message="Parameter `owners` of initializer `SensorDefinition", category=dg.BetaWarning)

# A bad setting stops the code location's load with one line naming it, before any run reads it.
preflight.check()

DOMAINS = (ingest, failures, results, flakiness, sharding, backends, hud, relay, drci, guardians, site)

defs = apply_conventions(dg.Definitions.merge(
    *(domain.defs for domain in DOMAINS),
    relay_prs.defs,
    dg.Definitions(
        jobs=[all_assets_job, archive_refresh_job, dispatch_job, gap_repair_job, trunk_guardians_job],
        schedules=[daily_schedule, gap_repair_schedule, trunk_guardians_schedule],
        sensors=[upstream_commit_sensor, archive_refresh_sensor, relay_catch_up_sensor],
        resources=default_resources(),
        # A day's steps in one process, as `torchci run` executes them: a process per step
        # (Dagster's default) spends more time starting Python than in the steps.
        executor=dg.in_process_executor,
    ),
))
