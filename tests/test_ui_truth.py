"""What the Dagster UI shows says what is true, read as a user reads it.

A materialization's `path` leads to every row of the partition, after a full run and after an
intra-day refresh that added parts; a count is named for what it counts; an asset page names every
value its ledger's rows take and every page it publishes; a check's description blames what can
be wrong; the `github` kind finds every asset that writes to GitHub.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import dagster as dg
import pytest

from refresh_day import DAY, cut, generate
from resources.configured import ArchiveResource, LakeResource
from resources.storage import Store
from torchci_assets.derived.failures.assets import FAILURE_ASSETS
from torchci_assets.ingest.assets import INGEST_ASSETS
from torchci_assets.ingest.increments import REFRESH_TAG, REFRESH_VALUE
from torchci_assets.lake_metadata import REJECT_PARTS


def _paths(instance: dg.DagsterInstance, run_id: str) -> dict[str, str]:
    """Each asset's `path` metadata in run `run_id`'s materializations."""
    out = {}
    for record in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION):
        mat = record.dagster_event.event_specific_data.materialization
        if "path" in mat.metadata:
            out[mat.asset_key.to_user_string()] = mat.metadata["path"].value
    return out


def _partition_files(lake: Path, key: str) -> set[Path]:
    table = "rejects" if key in REJECT_PARTS else key
    return set((lake / table / f"day={DAY}").glob("*.parquet"))


def _shown(instance: dg.DagsterInstance, run_id: str, lake: Path) -> dict[str, tuple[str, set[Path]]]:
    """Each asset's `path` in the run, with the partition's files as the run left them."""
    return {key: (shown, _partition_files(lake, key)) for key, shown in _paths(instance, run_id).items()}


def _assert_paths_hold_every_file(shown_paths: dict[str, tuple[str, set[Path]]]) -> None:
    for key, (shown, files) in shown_paths.items():
        path = Path(shown)
        assert path.exists(), f"{key}: its path {shown} does not exist"
        held = set(path.glob("*.parquet")) if path.is_dir() else {path}
        assert files and files <= held, f"{key}: its path {shown} holds {sorted(held)}, not all of {sorted(files)}"


@pytest.fixture(scope="module")
def day_then_refresh(tmp_path_factory):
    """A small simulated day ingested whole, then refreshed with a webhook file and a run's reports
    that landed since."""
    root = tmp_path_factory.mktemp("ui_truth")
    source, archive, lake = root / "source", root / "archive", root / "lake"
    generate(source)
    first, held = cut(source, 1)
    for rel in first:
        (archive / rel).parent.mkdir(parents=True, exist_ok=True)
        (archive / rel).write_bytes((source / rel).read_bytes())
    resources = {"archive": ArchiveResource(uri=str(archive)), "lake": LakeResource(uri=str(lake))}
    instance = dg.DagsterInstance.ephemeral()
    assets = [*INGEST_ASSETS, *FAILURE_ASSETS]
    whole = dg.materialize(assets, partition_key=DAY, resources=resources, instance=instance)
    after_whole = _shown(instance, whole.run_id, lake)
    store = Store(str(archive))
    for rel in held[0]:
        store.write_bytes(rel, (source / rel).read_bytes())
    refresh = dg.materialize(assets, partition_key=DAY, resources=resources, instance=instance,
                             tags={REFRESH_TAG: REFRESH_VALUE})
    return after_whole, _shown(instance, refresh.run_id, lake)


def test_an_ingested_tables_path_holds_all_its_rows_after_a_full_run(day_then_refresh):
    whole, _ = day_then_refresh
    assert {"webhook_events", "workflow_job", "test_run", "ci_result", "job_failure"} <= set(whole)
    _assert_paths_hold_every_file(whole)


def test_an_ingested_tables_path_holds_all_its_rows_after_a_refresh_added_parts(day_then_refresh):
    _, refreshed = day_then_refresh
    assert {"test_run", "push"} <= {key for key, (_, files) in refreshed.items() if len(files) > 1}
    _assert_paths_hold_every_file(refreshed)


def _values(doc: str) -> list[str]:
    """The values a column's documentation lists: its backticked words, else the words before each
    parenthesis and in the list (`found, created, updated (...) ... or dry_run (...)`)."""
    ticked = re.findall(r"`([a-z_]+)`", doc)
    return ticked or re.findall(r"(?:^|, | or )([a-z_]+)", re.sub(r"\([^)]*\)", "", doc))


@pytest.mark.parametrize(("asset", "column"), [("dispatches", "outcome"), ("relay_actions", "outcome"),
                                               ("disabled_issues", "action")])
def test_a_ledgers_description_names_every_value_its_rows_take(asset, column):
    """The asset page is where a user reads what a ledger's rows mean before querying it: a
    `claimed` row it never mentions reads as a dispatch that was never sent."""
    from torchci_assets.definitions import defs
    from torchci_assets.lake_columns import column_description

    values = _values(column_description(asset, column))
    assert len(values) >= 5, values
    description = defs.resolve_asset_graph().get(dg.AssetKey(asset)).description
    assert not [v for v in values if v not in description], description


def test_shard_plans_count_the_test_files_they_plan_under_that_name_not_as_files_published(tmp_path):
    """Beside `output: shard-plans/`, a `files` count reads as the plan files written there; the
    test files the plans cover are another, larger number."""
    from test_shard_plans import _materialize, _write_inputs

    from resources.lake import Lake
    from torchci_assets.derived.sharding.assets import shard_plans_asset

    _write_inputs(Lake.at(str(tmp_path / "lake")))
    meta = _materialize(shard_plans_asset, tmp_path, "2026-11-05")
    plans = [p for p in (tmp_path / "out" / "shard-plans").rglob("*.json") if p.name != "day.json"]
    planned = {(p, t["file"]) for p in plans for s in json.loads(p.read_text())["shards"] for t in s["tests"]}
    assert meta["configs"] == len(plans) == 2
    assert meta.get("files", len(plans)) == len(plans)
    assert meta["test_files"] == len(planned) == 8


def test_a_check_that_blames_ingestion_is_on_a_table_read_from_the_archive():
    """A failing check's description is what a user acts on: "ingested twice" sends them to the
    archive's reader, which for a table computed from other tables is the wrong place to look."""
    from torchci_assets.definitions import defs

    graph = defs.resolve_asset_graph()
    archive = {k for k in graph.get_all_asset_keys() if not graph.get(k).is_materializable and
               graph.get(k).group_name == "ingest"}
    steps = [a for a in defs.assets if isinstance(a, dg.AssetsDefinition)]
    blaming = {(c.asset_key.to_user_string(), bool(a.dependency_keys & archive)) for a in steps
               for c in a.check_specs if "ingested" in (c.description or "")}
    assert {"webhook_events", "ci_result"} <= {key for key, _ in blaming}  # the ingest's own checks say it
    assert not [key for key, reads_archive in blaming if not reads_archive]


def _page_kind(page: str) -> str:
    """A published page as the asset page names its kind: `pr/<n>.html`, `backends/<owner>/<repo>.html`."""
    page = re.sub(r"^pr/\d+\.html$", "pr/<n>.html", page.removeprefix("hud/"))
    return re.sub(r"^backends/[^/]+/[^/]+\.html$", "backends/<owner>/<repo>.html", page)


def test_the_hud_sites_asset_page_names_every_kind_of_page_it_publishes(tmp_path):
    from test_hud_site import DAY as SITE_DAY
    from test_hud_site import REPO, build, history

    from resources.lake import Lake
    from torchci_assets.definitions import defs
    from torchci_assets.derived.site.site import publish_site

    lake = Lake.at(str(tmp_path / "lake"))
    history().write(lake)
    build(lake)
    pages = {_page_kind(p) for p in publish_site(lake, Store(str(tmp_path / "out")), SITE_DAY, REPO).pages}
    assert {"index.html", "pr/<n>.html", "autorevert.html"} <= pages
    description = defs.resolve_asset_graph().get(dg.AssetKey("hud_site")).description
    assert not [p for p in sorted(pages) if p not in description], description


@pytest.mark.parametrize("asset", ["dispatches", "relay_actions", "disabled_issues", "drci_comments",
                                   "autorevert_events", "alerts"])
def test_an_asset_that_records_its_writes_to_github_shows_the_github_kind(asset):
    """The catalog filters on kinds: a user looking for what this code location sends to GitHub
    (repository_dispatch, check runs, issues, comments) finds it under `github`."""
    from torchci_assets.definitions import defs

    assert "github" in defs.resolve_asset_graph().get(dg.AssetKey(asset)).kinds
