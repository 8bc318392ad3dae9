"""Configuration errors stop every entry point before it starts: `torchci run` on an archive with
two days to ingest, the code location's load, and (tests/test_receiver_limits.py) `torchci serve`.
Each bad variable or key gives one line naming it, what it got and what it expects; nothing is
written to the lake."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
from test_run_cli import octokit_archive, run_cli

from torchci_assets import preflight, run
from torchci_assets.config import ConfigError

TYPO_CONFIG = """\
upstream: {repo: pytorch/pytorch, branches: [main]}
thresholds:
  L2: {min_sucess_rate: 0.8}
"""


def bad_settings(tmp: Path) -> list[tuple[dict, str]]:
    """(variables, the one line `torchci run` must print) for each mistake."""
    (tmp / "typo.yaml").write_text(TYPO_CONFIG)
    (tmp / "a-file").write_text("not a folder")
    return [
        ({"TORCHCI_CONFIG": str(tmp / "typo.yaml")},
         f"TORCHCI_CONFIG: {tmp / 'typo.yaml'}: thresholds.L2: unknown key 'min_sucess_rate' (expected one of: "
         "window_days, min_completed_jobs, min_success_rate, max_commit_time_p95_s, max_callbacks_per_minute)"),
        ({"TORCHCI_CONFIG": str(tmp / "missing.yaml")},
         f"TORCHCI_CONFIG: {tmp / 'missing.yaml'}: cannot read the relay config: No such file or directory"),
        ({"TORCHCI_LAKE_URI": str(tmp / "a-file")},
         f"TORCHCI_LAKE_URI={str(tmp / 'a-file')!r}: is a file; expected a folder"),
        ({"TORCHCI_OUTPUTS_URI": str(tmp / "a-file" / "outputs")},
         f"TORCHCI_OUTPUTS_URI={str(tmp / 'a-file' / 'outputs')!r}: is below {tmp / 'a-file'}, which is a file; "
         "expected a folder"),
        ({"TORCHCI_ARCHIVE_URI": "gs://bucket/archive"},
         "TORCHCI_ARCHIVE_URI='gs://bucket/archive': expected a local folder or s3://bucket/prefix"),
        ({"TORCHCI_DUCKDB_MEMORY": "lots"},
         "TORCHCI_DUCKDB_MEMORY='lots': expected a memory size such as 512MB, 4GB or 2GiB"),
        ({"TORCHCI_DUCKDB_MEMORY": "1GB'; SET threads=1; --"},
         "TORCHCI_DUCKDB_MEMORY=\"1GB'; SET threads=1; --\": expected a memory size such as 512MB, 4GB or 2GiB"),
        ({"TORCHCI_MAX_REJECT_RATE": "abc"},
         "TORCHCI_MAX_REJECT_RATE='abc': expected a fraction in [0, 1], such as 0.01 for 1%"),
        ({"TORCHCI_MAX_REGRESSION_SHARE": "5%"},
         "TORCHCI_MAX_REGRESSION_SHARE must be a fraction in (0, 1], e.g. 0.05 for 5%; got '5%'"),
        ({"TORCHCI_MAX_LINE_BYTES": "12"}, "TORCHCI_MAX_LINE_BYTES=12 is too small (at least 1024 bytes)"),
        ({"TORCHCI_MAX_REPORT_BYTES": "big"}, "TORCHCI_MAX_REPORT_BYTES='big' is not a number of bytes"),
        ({"TORCHCI_FIRST_DAY": "2026-13-01"}, "TORCHCI_FIRST_DAY='2026-13-01' is not a day: use YYYY-MM-DD"),
        ({"TORCHCI_REFRESH_MINUTES": "-5"},
         "TORCHCI_REFRESH_MINUTES='-5' is not a number of minutes (0 turns the refresh off)"),
        ({"TORCHCI_LOG_RULES": str(tmp / "rules.toml")},
         f"{tmp / 'rules.toml'} (from $TORCHCI_LOG_RULES): cannot read the log rules: No such file or directory"),
        ({"TORCHCI_LOG_LEVEL": "LOUD"}, "TORCHCI_LOG_LEVEL='LOUD': expected one of DEBUG, INFO, WARNING, ERROR, CRITICAL"),
        ({"TORCHCI_S3_ENDPOINT": "ftp://minio:9000"},
         "TORCHCI_S3_ENDPOINT='ftp://minio:9000': expected http://host:port or https://host"),
        ({"TORCHCI_WEBHOOK_MAX_BYTES": "huge"},
         "TORCHCI_WEBHOOK_MAX_BYTES='huge': expected a size such as 65536, 64MB or 64MiB"),
        ({"TORCHCI_BODY_TIMEOUT_S": "soon"}, "TORCHCI_BODY_TIMEOUT_S='soon': expected a number"),
        ({"TORCHCI_MAX_ZIP_BYTES": "4GB"}, "TORCHCI_MAX_ZIP_BYTES='4GB': expected a positive number of bytes"),
        ({"TORCHCI_GAP_REPAIR_MINUTES": "5"},
         "TORCHCI_GAP_REPAIR_MINUTES='5': expected a number of minutes over the 5-minute schedule interval"),
        ({"TORCHCI_GAP_REPAIR_RESERVE": "20%"},
         "TORCHCI_GAP_REPAIR_RESERVE='20%': expected the share of GitHub's hourly budget kept for the other writers, "
         "from 0 (none: gap repair has credentials of its own) to below 1, such as 0.2"),
        ({"TORCHCI_GAP_REPAIR_RESERVE": "1"},
         "TORCHCI_GAP_REPAIR_RESERVE='1': expected the share of GitHub's hourly budget kept for the other writers, "
         "from 0 (none: gap repair has credentials of its own) to below 1, such as 0.2"),
        ({"TORCHCI_HUD_URL": "hud.example.org"},
         "TORCHCI_HUD_URL='hud.example.org': expected the address hud/ is served at, such as https://hud.example.org"),
        # GitHub credentials: named, never shown
        ({"GITHUB_TOKEN": "ghp_a secret"},
         "GITHUB_TOKEN is not a token: it holds spaces or control characters; set it to the token alone"),
        ({"GITHUB_APP_ID": "1234"}, "GitHub App auth is partly configured: GITHUB_APP_PRIVATE_KEY not set "
                                    "(set GITHUB_APP_ID and GITHUB_APP_PRIVATE_KEY, or GITHUB_TOKEN)"),
        ({"GITHUB_APP_INSTALLATION_ID": "7"},
         "GitHub App auth is partly configured: GITHUB_APP_ID and GITHUB_APP_PRIVATE_KEY not set "
         "(set GITHUB_APP_ID and GITHUB_APP_PRIVATE_KEY, or GITHUB_TOKEN)"),
        ({"GITHUB_APP_ID": "1234", "GITHUB_APP_PRIVATE_KEY": "-----BEGIN secret"},
         "GITHUB_APP_PRIVATE_KEY is not an unencrypted PEM private key"),
    ]


@pytest.fixture
def archive_env(tmp_path, octokit, monkeypatch) -> Path:
    """A clean environment and an archive with two days to ingest, in a fresh working folder."""
    for name in [n for n in os.environ if n.startswith(("TORCHCI_", "DAGSTER_", "GITHUB_"))]:
        monkeypatch.delenv(name)
    octokit_archive(tmp_path / "archive", octokit)
    monkeypatch.chdir(tmp_path)
    for name, folder in (("TORCHCI_ARCHIVE_URI", "archive"), ("TORCHCI_LAKE_URI", "lake"),
                         ("TORCHCI_OUTPUTS_URI", "outputs")):
        monkeypatch.setenv(name, str(tmp_path / folder))
    return tmp_path


def test_each_bad_setting_stops_torchci_run_with_its_line_before_the_lake_is_touched(archive_env, monkeypatch,
                                                                                         capsys):
    for variables, expected in bad_settings(archive_env):
        with monkeypatch.context() as m:
            for name, value in variables.items():
                m.setenv(name, value)
            code = run.main([])
        out, err = capsys.readouterr()
        assert (code, err.splitlines(), out) == (2, [f"torchci run: {expected}"], ""), variables
        assert not (archive_env / "lake").exists() and not (archive_env / "outputs").exists()
        assert not (archive_env / "var").exists()


def test_the_real_command_with_a_typo_in_the_config_exits_2_with_one_line(tmp_path, octokit):
    octokit_archive(tmp_path / "archive", octokit)
    (tmp_path / "typo.yaml").write_text(TYPO_CONFIG)
    done = run_cli(tmp_path, TORCHCI_CONFIG=str(tmp_path / "typo.yaml"))
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"torchci run: TORCHCI_CONFIG: {tmp_path / 'typo.yaml'}: thresholds.L2: unknown key 'min_sucess_rate' "
        "(expected one of: window_days, min_completed_jobs, min_success_rate, max_commit_time_p95_s, "
        "max_callbacks_per_minute)"]
    assert not (tmp_path / "lake").exists()


def test_backfill_checks_the_settings_before_it_reads_anything(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHCI_")}
    env.update(TORCHCI_DUCKDB_MEMORY="lots", TORCHCI_ARCHIVE_URI=str(tmp_path / "archive"))
    done = subprocess.run([sys.executable, "-m", "torchci_assets.cli", "backfill", "pytorch/pytorch", "--days", "1"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "torchci backfill: TORCHCI_DUCKDB_MEMORY='lots': expected a memory size such as 512MB, 4GB or 2GiB"]
    assert not (tmp_path / "archive").exists()


def test_every_bad_setting_is_reported_at_once(archive_env, monkeypatch):
    monkeypatch.setenv("TORCHCI_DUCKDB_MEMORY", "lots")
    monkeypatch.setenv("TORCHCI_MAX_REJECT_RATE", "abc")
    assert [line.split("=")[0] for line in preflight.problems()] == ["TORCHCI_DUCKDB_MEMORY", "TORCHCI_MAX_REJECT_RATE"]
    with pytest.raises(preflight.PreflightError) as raised:
        preflight.check()
    assert len(str(raised.value).splitlines()) == 2


def test_a_misspelt_variable_is_a_warning_with_the_name_it_resembles(archive_env, monkeypatch, capsys):
    monkeypatch.setenv("TORCHCI_LAKE_URl", "/elsewhere")
    assert preflight.problems() == []
    assert preflight.report("torchci run")
    assert capsys.readouterr().err.splitlines() == [
        "torchci run: warning: TORCHCI_LAKE_URl is not a setting of this project (did you mean TORCHCI_LAKE_URI?)"]


def test_the_code_location_does_not_load_with_a_bad_setting(tmp_path):
    env = {**os.environ, "TORCHCI_DUCKDB_MEMORY": "lots", "TORCHCI_ARCHIVE_URI": str(tmp_path / "archive")}
    done = subprocess.run([sys.executable, "-c", "import torchci_assets.definitions"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == ("torchci_assets.preflight.PreflightError: TORCHCI_DUCKDB_MEMORY='lots': "
                                            "expected a memory size such as 512MB, 4GB or 2GiB")


def test_a_step_failing_on_a_configuration_error_shows_that_line_in_the_summary():
    @dg.asset
    def backend_health():
        raise ConfigError("relay.yaml: thresholds.L3.min_success_rate: must be a fraction between 0 and 1 "
                          "(0.9 for 90%), got 90")

    result = dg.materialize([backend_health], raise_on_error=False)
    [failure] = [e for e in result.all_events if e.is_step_failure]
    assert run.failure_line(failure.step_failure_data.error) == (
        "ConfigError: relay.yaml: thresholds.L3.min_success_rate: must be a fraction between 0 and 1 (0.9 for 90%), "
        "got 90")


def test_every_variable_the_code_reads_is_known_to_the_preflight():
    """A variable added without a place here would be warned about as a typo where it is set."""
    root = Path(__file__).resolve().parent.parent
    read = {name for folder in ("torchci_assets", "resources", "jobs") for path in (root / folder).rglob("*.py")
            for name in re.findall(r"TORCHCI_[A-Z0-9_]*[A-Z0-9]", path.read_text())}
    assert read and read - preflight.known_variables() == set()


def test_the_receiver_is_not_stopped_by_github_credentials_it_never_uses(archive_env, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_a secret")
    assert preflight.problems(credentials=False) == []
    assert [p.split(":")[0] for p in preflight.problems()] == ["GITHUB_TOKEN is not a token"]
