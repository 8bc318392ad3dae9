"""How long an upstream check run may stay in progress before the zombie sweep completes it as
timed_out: `zombie_timeout_seconds` in TORCHCI_CONFIG, beside the relay's other settings, so the
sweeps a schedule starts follow it without anyone editing their run config."""

import datetime as dt
import textwrap

import pytest

from torchci_assets.config import MAX_ZOMBIE_TIMEOUT_S, ConfigError, load_config
from torchci_assets.preflight import problems
from torchci_assets.relay.zombies import ZOMBIE_LOOKBACK_DAYS, sweep_timeout


def write(tmp_path, text: str) -> str:
    path = tmp_path / "relay.yaml"
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_the_config_file_sets_the_timeout_of_every_sweep(tmp_path):
    config = load_config(write(tmp_path, "upstream: {repo: my-org/upstream}\nzombie_timeout_seconds: 5400\n"))
    assert sweep_timeout(config) == dt.timedelta(minutes=90)
    # A run's own `timeout_s` (a sweep started by hand for one case) still wins over the file.
    assert sweep_timeout(config, 30.0) == dt.timedelta(seconds=30)


def test_without_the_setting_the_timeout_is_the_relays_six_hours(tmp_path):
    assert sweep_timeout(load_config(write(tmp_path, "upstream: {repo: my-org/upstream}\n"))) == dt.timedelta(hours=6)


@pytest.mark.parametrize("value, shown", [
    ("6h", "'6h'"), ("0", "0"), ("-60", "-60"), ("true", "True"), ("90.5", "90.5"), ("null", "None"),
    # the sweep looks at check runs opened up to 3 days back: a longer timeout would find none
    ("172801", "172801"),
])
def test_a_bad_timeout_is_refused_naming_the_setting(tmp_path, value, shown):
    path = write(tmp_path, f"zombie_timeout_seconds: {value}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == (f"{path}: zombie_timeout_seconds: must be a whole number of seconds from 1 to "
                               f"172800 (2 days), got {shown}")


def test_the_longest_timeout_leaves_the_sweep_a_day_to_find_its_check_runs():
    assert MAX_ZOMBIE_TIMEOUT_S + 86400 <= ZOMBIE_LOOKBACK_DAYS * 86400


def test_every_entry_point_stops_on_a_bad_timeout_with_one_line_naming_it(tmp_path, monkeypatch):
    path = write(tmp_path, "zombie_timeout_seconds: 6h\n")
    monkeypatch.setenv("TORCHCI_CONFIG", path)
    assert [p for p in problems(credentials=False) if "zombie" in p] == [
        f"TORCHCI_CONFIG: {path}: zombie_timeout_seconds: must be a whole number of seconds from 1 to "
        "172800 (2 days), got '6h'"]


def test_a_runs_own_timeout_must_be_positive(tmp_path):
    config = load_config(write(tmp_path, "zombie_timeout_seconds: 5400\n"))
    with pytest.raises(ValueError, match=r"timeout_s must be a positive number of seconds, at most 172800 "
                                         r"\(2 days\), got -1"):
        sweep_timeout(config, -1)
    # past two days, a check run due is older than the three days the sweep reads: it would find none
    with pytest.raises(ValueError, match=r"at most 172800 \(2 days\), got 259200"):
        sweep_timeout(config, 3 * 86400)
    assert sweep_timeout(config, 172800) == dt.timedelta(days=2)
