"""The lake_columns YAML files' shape: a slip in one (a misspelt key, a table described twice, a
description with an unquoted ": ") is an error naming the file, never a table silently left
without its meanings. What the files say of the daily tables is checked against a materialized day
in test_definitions.py; of the guardians' ledgers, here, against a real dry run of their job."""

from pathlib import Path

import pytest
from tests.test_definitions import GUARDIAN_LEDGERS
from tests.test_guardians_job import run_guardians

from resources.lake import Lake
from torchci_assets.lake_columns import LakeColumnsError, table_docs
from torchci_assets.lake_columns.doc import column_mismatch, lake_schema

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


def test_the_guardians_ledgers_columns_are_described_as_their_job_writes_them(tmp_path):
    lake = Lake.at(run_guardians(tmp_path)[1])
    wrong = [problem for table in sorted(GUARDIAN_LEDGERS)
             for problem in column_mismatch(table, table_docs()[table], [n for n, _ in lake_schema(lake, table)])]
    assert wrong == []
