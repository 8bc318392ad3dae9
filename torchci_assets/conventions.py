"""Dagster's catalog conventions, applied to every asset of the code location in one place.

Each asset gets an owner and a `domain` tag (its group: the catalog filters on both), a link to
its source code, and the outputs CI consumes get a freshness policy, so a `test-times.json` that
was not refreshed on time shows as late in the UI instead of looking current. Domains declare
their assets; this module only adds what every asset has, so a new asset follows it by being added.
"""

from __future__ import annotations

import datetime as dt
import inspect
import os
import warnings
from pathlib import Path

import dagster as dg
from dagster_shared import record

OWNERS = ["team:pytorch-dev-infra"]
# Where source links point: the repository's web address (e.g. https://github.com/ORG/torchci-dagster)
# and branch; without it the UI shows the local file and line.
SOURCE_URL_VAR = "TORCHCI_SOURCE_URL"
SOURCE_BRANCH_VAR = "TORCHCI_SOURCE_BRANCH"
ROOT = Path(__file__).resolve().parent.parent

# The files CI consumes, published daily by the 00:30 UTC schedule and refreshed during the day:
# older than a day and an hour warns (the schedule's run is late), a day and three hours fails.
PUBLISHED = ("test_times", "disabled_tests", "slow_tests", "smoke_tests", "shard_plans", "backend_levels",
             "hud_site")
PUBLISHED_FRESHNESS = dg.FreshnessPolicy.time_window(fail_window=dt.timedelta(hours=27),
                                                     warn_window=dt.timedelta(hours=25))


def _code_reference(assets_def: dg.AssetsDefinition) -> dg.CodeReferencesMetadataValue:
    """Where the asset function is defined, through its decorators (Dagster's own helper stops at
    the outermost wrapper, `lake_metadata`'s)."""
    fn = inspect.unwrap(assets_def.op.compute_fn.decorated_fn)
    with warnings.catch_warnings():  # code references are beta: the warning would repeat in every process
        warnings.simplefilter("ignore", dg.BetaWarning)
        return dg.CodeReferencesMetadataValue(code_references=[
            dg.LocalFileCodeReference(file_path=inspect.getsourcefile(fn), line_number=inspect.getsourcelines(fn)[1])])


def _conventional(asset, reference: dg.CodeReferencesMetadataValue | None):
    def spec(s: dg.AssetSpec) -> dg.AssetSpec:
        extra = {"freshness_policy": PUBLISHED_FRESHNESS} if s.key.to_user_string() in PUBLISHED else {}
        metadata = {**s.metadata, "dagster/code_references": reference} if reference else s.metadata
        return s.replace_attributes(owners=OWNERS, tags={**s.tags, "domain": s.group_name}, metadata=metadata,
                                    **extra)
    return spec(asset) if isinstance(asset, dg.AssetSpec) else asset.map_asset_specs(spec)


def _linked_to_git(assets: list, environ) -> list:
    """Local code references turned into links to the repository when its address is set."""
    url = (environ.get(SOURCE_URL_VAR) or "").strip()
    if not url:
        return assets
    with warnings.catch_warnings():  # beta, as above
        warnings.simplefilter("ignore", dg.BetaWarning)
        mapping = dg.AnchorBasedFilePathMapping(local_file_anchor=ROOT, file_anchor_path_in_repository="")
        return dg.link_code_references_to_git(assets, git_url=url, file_path_mapping=mapping,
                                              git_branch=environ.get(SOURCE_BRANCH_VAR) or "main")


def apply_conventions(defs: dg.Definitions, environ=os.environ) -> dg.Definitions:
    """`defs` with every asset owned, tagged with its domain, linked to its code, and the
    published outputs under a freshness policy."""
    assets = [_conventional(a, _code_reference(a) if isinstance(a, dg.AssetsDefinition) else None)
              for a in defs.assets]
    return record.copy(defs, assets=_linked_to_git(assets, environ))  # Definitions is a Dagster record
