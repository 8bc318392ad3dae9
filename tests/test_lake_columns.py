"""The lake_columns YAML files' shape: a slip in one (a misspelt key, a table described twice, a
description with an unquoted ": ") is an error naming the file, never a table silently left
without its meanings. What the files say of the daily tables is checked against a materialized day
in test_definitions.py; of the ledgers written outside the daily assets (the guardians', Dr. CI's,
the relay's), here, against their real writers and the fake GitHub servers their own tests use,
with the types docs/tables.md shows for them."""

from pathlib import Path

import dagster as dg
import pytest
from tests.fake_github_pulls import FakePullRequests
from tests.fake_github_relay import FakeRelayGitHub
from tests.test_definitions import GUARDIAN_LEDGERS
from tests.test_drci import BASE, HEAD, REPO, TODAY, gh
from tests.test_drci_posting import run as post_drci_comments
from tests.test_guardians_job import run_guardians
from tests.test_relay_pull_requests import (L4, callback_record, check_run, client_payload_of, dispatched, github,
                                            use_relay_config)

from resources.lake import Lake
from torchci_assets.derived.drci.merge_base import resolve
from torchci_assets.lake_columns import LakeColumnsError, table_docs
from torchci_assets.docs_tables import LEDGER_SCHEMAS
from torchci_assets.lake_columns.doc import as_stored, column_mismatch, lake_schema

GOOD = "push:\n  about: One row per push.\n  columns:\n    ref: The pushed ref.\n"


def folder_of(tmp_path: Path, **files: str) -> Path:
    for name, text in files.items():
        (tmp_path / f"{name}.yaml").write_text(text)
    return tmp_path


def test_the_tables_of_every_file_are_read(tmp_path):
    folder = folder_of(tmp_path, a=GOOD, b="rejects:\n  about: One row per reject.\n  columns:\n    source: Where.\n")
    docs = table_docs(folder)
    assert docs["push"].columns == {"ref": "The pushed ref."} and docs["rejects"].about == "One row per reject."


@pytest.mark.parametrize("files, error", [
    ({"a": GOOD, "b": GOOD}, "b.yaml: table push is described in another file too"),
    ({"a": GOOD.replace("about:", "abuot:")}, "a.yaml: push: expected the keys about and columns"),
    ({"a": GOOD.replace("The pushed ref.", "''")}, "a.yaml: push: no meaning for ref"),
    ({"a": GOOD.replace("The pushed ref.", "e.g. refs/heads/main: a branch")}, "a.yaml: not YAML"),
    ({"a": "- push\n"}, "a.yaml: expected tables"),
])
def test_a_file_out_of_shape_is_an_error_naming_it(tmp_path, files, error):
    with pytest.raises(LakeColumnsError, match=error):
        table_docs(folder_of(tmp_path, **files))


def mismatches(lake: Lake, tables: list[str]) -> list[str]:
    """What the descriptions of `tables` and the columns their latest day in `lake` holds disagree on."""
    return [problem for table in tables
            for problem in column_mismatch(table, table_docs()[table], [n for n, _ in lake_schema(lake, table)])]


def undeclared(lake: Lake, tables: list[str]) -> dict[str, list[tuple[str, str]]]:
    """The ledgers whose columns and types in `lake` differ from the schema docs/tables.md shows for
    them (their writers' declared schemas), with what the lake holds."""
    declared = {t: [(f.name, str(f.type)) for f in as_stored(LEDGER_SCHEMAS[t])] for t in tables}
    return {t: lake_schema(lake, t) for t in tables if lake_schema(lake, t) != declared[t]}


def shown(materialization) -> dict[str, str | None]:
    """Column -> description, as the Columns view shows them from a materialization's metadata."""
    return {c.name: c.description for c in materialization.metadata["dagster/column_schema"].value.columns}


def test_the_guardians_ledgers_columns_are_described_as_their_job_writes_them(tmp_path):
    result, lake_uri = run_guardians(tmp_path)
    assert mismatches(Lake.at(lake_uri), sorted(GUARDIAN_LEDGERS)) == []
    assert undeclared(Lake.at(lake_uri), sorted(GUARDIAN_LEDGERS)) == {}
    # the job's materializations of its ledgers carry them to the Columns view
    events = {e.asset_key.to_user_string(): e.materialization for e in result.get_asset_materialization_events()}
    assert {t: shown(events[t]) for t in GUARDIAN_LEDGERS} == {t: table_docs()[t].columns for t in GUARDIAN_LEDGERS}


def test_dr_cis_ledgers_columns_are_described_as_its_posting_writes_them(httpserver, tmp_path):
    """A merge base asked of the compare API, then a comment created on a pull request."""
    fake = FakePullRequests(httpserver, REPO)
    fake.merge_bases[HEAD] = BASE
    lake = Lake.at(str(tmp_path / "lake"))  # the lake post_drci_comments posts over
    assert resolve(lake, gh(httpserver), TODAY.isoformat(), REPO, [(HEAD, BASE)])[HEAD].fetched
    assert post_drci_comments(httpserver, tmp_path).actions["created"] == 1
    assert mismatches(lake, ["drci_merge_bases", "drci_posts"]) == []
    assert undeclared(lake, ["drci_merge_bases", "drci_posts"]) == {}


def test_the_relays_ledgers_columns_are_described_as_its_jobs_write_them(httpserver, instance, tmp_path, monkeypatch):
    """A pull request dispatched downstream, then an L4 job's in-progress callback's check run."""
    use_relay_config(tmp_path, monkeypatch)
    roots = str(tmp_path / "lake"), str(tmp_path / "archive")
    server = FakeRelayGitHub(httpserver)
    dispatched(server, httpserver, instance, roots)
    record = callback_record(L4, "L4", "in_progress", client_payload_of(server, L4))
    assert check_run(record, github(httpserver), roots, instance).success and server.check_runs
    assert mismatches(Lake.at(roots[0]), ["dispatches", "relay_actions"]) == []
    assert undeclared(Lake.at(roots[0]), ["dispatches", "relay_actions"]) == {}
    for table in ("dispatches", "relay_actions"):  # what the runs' materializations show in the Columns view
        event = instance.get_latest_materialization_event(dg.AssetKey(table))
        assert shown(event.asset_materialization) == table_docs()[table].columns, table
