"""A file where a folder of the lake or the outputs must be (a table's folder, the published lists'
`stats`, the HUD's `hud`: left by a copy gone wrong, or a script writing to the wrong path): the
night's run says which file is in the way and what to do, in one line, and leaves everything as it
was. It said only FileExistsError or NotADirectoryError, with pyarrow's 'Cannot create directory'."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import pytest

from resources import Store
from resources.storage import WriteFailed
from torchci_assets.simulate.generate import generate_archive
from torchci_assets.simulate.world import Options

DAY = dt.date(2026, 11, 2)
IN_THE_WAY = b"a file left where a folder goes\n"


def test_a_file_where_a_folder_of_the_outputs_must_be_is_named_with_what_to_do(tmp_path, monkeypatch):
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    (outputs / "stats").write_bytes(IN_THE_WAY)
    monkeypatch.setenv("TORCHCI_OUTPUTS_URI", str(outputs))

    with pytest.raises(WriteFailed) as raised:
        Store(str(outputs)).write_bytes("stats/slow-tests.json", b"{}")

    message = str(raised.value)
    assert message == (f"cannot write {outputs}/stats/slow-tests.json: {outputs}/stats is a file where a folder must "
                       "be: move it away or point TORCHCI_OUTPUTS_URI elsewhere, then run again (the file's previous "
                       "version is kept)")
    assert isinstance(raised.value, OSError)  # a storage failure still, for the callers that tell one from a bug
    assert (outputs / "stats").read_bytes() == IN_THE_WAY


def test_a_file_deeper_down_is_the_one_named_and_a_store_no_setting_names_says_to_use_another_folder(tmp_path):
    lake = tmp_path / "lake"
    (lake / "test_run").mkdir(parents=True)
    (lake / "test_run" / "day=2026-11-02").write_bytes(IN_THE_WAY)

    with pytest.raises(WriteFailed) as raised:
        Store(str(lake)).write_bytes("test_run/day=2026-11-02/data.parquet", b"PAR1")

    assert f": {lake}/test_run/day=2026-11-02 is a file where a folder must be: move it away or use another " \
           "folder, then run again" in str(raised.value)
    assert (lake / "test_run" / "day=2026-11-02").read_bytes() == IN_THE_WAY


def test_a_folder_where_the_file_itself_must_be_is_named_with_what_to_do(tmp_path, monkeypatch):
    """`stats/slow-tests.json` made a folder (an unzip gone wrong): the final rename meets it."""
    outputs = tmp_path / "outputs"
    (outputs / "stats" / "slow-tests.json").mkdir(parents=True)
    (outputs / "stats" / "slow-tests.json" / "keep.txt").write_bytes(IN_THE_WAY)
    monkeypatch.setenv("TORCHCI_OUTPUTS_URI", str(outputs))

    with pytest.raises(WriteFailed) as raised:
        Store(str(outputs)).write_bytes("stats/slow-tests.json", b"{}")

    assert str(raised.value) == (
        f"cannot write {outputs}/stats/slow-tests.json: {outputs}/stats/slow-tests.json is a folder where a file must "
        "be: move it away or point TORCHCI_OUTPUTS_URI elsewhere, then run again (the file's previous version is kept)")
    assert (outputs / "stats" / "slow-tests.json" / "keep.txt").read_bytes() == IN_THE_WAY
    assert [p.name for p in (outputs / "stats").iterdir()] == ["slow-tests.json"]  # no staging file left


def test_listing_below_a_file_lists_nothing(tmp_path):
    """The HUD lists its published pages before replacing them: below a file there are none, and the
    write that follows is the one to say what is in the way."""
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    (outputs / "hud").write_bytes(IN_THE_WAY)

    assert Store(str(outputs)).list_files("hud/pr", (".html",)) == []


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("archive")
    generate_archive(root, [DAY], Options(commits_per_day=2, prs_per_day=2), log=lambda _: None)
    return root


# Each case runs the step that meets the file and only what it needs before it (the step's line is
# the same in a whole day's run, which costs twice the CPU): test_run_assets reads the archive,
# slow_tests fails on a lake without its upstream tables, the HUD draws its pages from any lake.
@pytest.mark.parametrize("setting, folder, step, selection", [
    ("TORCHCI_LAKE_URI", "test_run", "test_run_assets", "key:test_run"),  # a lake table's folder
    ("TORCHCI_OUTPUTS_URI", "stats", "slow_tests", "+key:slow_tests"),  # the published lists' folder
    ("TORCHCI_OUTPUTS_URI", "hud", "hud_site", "key:hud_site"),  # the HUD's site
])
def test_torchci_run_names_the_file_in_the_way_in_the_steps_line(archive, tmp_path, setting, folder, step, selection):
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "dagster"), "TORCHCI_ARCHIVE_URI": str(archive),
           "TORCHCI_LAKE_URI": str(tmp_path / "lake"), "TORCHCI_OUTPUTS_URI": str(tmp_path / "outputs")}
    root = Path(env[setting])
    root.mkdir()
    (root / folder).write_bytes(IN_THE_WAY)

    child = subprocess.run([str(Path(sys.executable).parent / "torchci"), "run", "-q", "--select", selection],
                           env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)

    assert child.returncode == 1, child.stderr[-3000:]
    line = next((ln.strip() for ln in child.stdout.splitlines() if ln.strip().startswith(f"{step}: ")), None)
    assert line is not None, child.stdout
    assert line.startswith(f"{step}: WriteFailed: cannot write {root}/{folder}/"), line
    assert line.endswith(f": {root}/{folder} is a file where a folder must be: move it away or point {setting} "
                         "elsewhere, then run again (the file's previous version is kept)"), line
    assert (root / folder).read_bytes() == IN_THE_WAY
