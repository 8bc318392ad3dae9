"""The `autorevert` and `alerts` config sections: off by default, strict about mistakes."""

import pytest

from torchci_assets.config import ConfigError, load_config, parse_config
from torchci_assets.guardian_config import AlertsConfig, AutorevertConfig, QueueRule


def test_the_bundled_config_spells_out_the_defaults_and_acts_on_nothing():
    g = load_config().guardians
    assert g.autorevert == AutorevertConfig() and g.alerts == AlertsConfig()
    assert not g.autorevert.enabled and not g.alerts.enabled


def test_sections_may_be_omitted():
    g = parse_config({"upstream": {"repo": "pytorch/pytorch"}}).guardians
    assert g.autorevert.backoff_min == (20, 40, 60) and g.alerts.failing_commits == 2


def test_values_are_read():
    g = parse_config({"autorevert": {"enabled": True, "workflows": ["trunk"], "backoff_min": [10, 30],
                                     "revert_classification": "ignoredsignal"},
                      "alerts": {"enabled": True, "queue_rules": [{"pattern": "rocm", "max_jobs": 5,
                                                                   "max_wait_min": 10}], "repo": "acme/alerts"}}).guardians
    assert g.autorevert.enabled and g.autorevert.workflows == ("trunk",) and g.autorevert.backoff_min == (10, 30)
    assert g.alerts.queue_rules == (QueueRule("rocm", 5, 10),) and g.alerts.repo == "acme/alerts"


def test_the_notification_issue_is_read_and_unset_by_default():
    assert AutorevertConfig().notify_issue_number is None
    g = parse_config({"autorevert": {"notify_issue_number": 163650}}).guardians
    assert g.autorevert.notify_issue_number == 163650
    assert parse_config({"autorevert": {"notify_issue_number": None}}).guardians.autorevert.notify_issue_number is None


@pytest.mark.parametrize("raw, where", [
    ({"autorevert": {"enabled": "yes"}}, "autorevert.enabled"),
    ({"autorevert": {"revert_classification": "because"}}, "autorevert.revert_classification"),
    ({"autorevert": {"revert_message": 'say "hi"'}}, "autorevert.revert_message"),
    ({"autorevert": {"backoff_min": []}}, "autorevert.backoff_min"),
    ({"autorevert": {"max_restarts_per_commit": -1}}, "autorevert.max_restarts_per_commit"),
    ({"autorevert": {"restart_every": 5}}, "autorevert: unknown key"),
    ({"autorevert": {"notify_issue_number": "163650"}}, "autorevert.notify_issue_number"),
    ({"autorevert": {"notify_issue_number": 0}}, "autorevert.notify_issue_number"),
    ({"alerts": {"queue_rules": [{"pattern": "(", "max_jobs": 1, "max_wait_min": 1}]}}, "alerts.queue_rules[0].pattern"),
    ({"alerts": {"failing_commits": 0}}, "alerts.failing_commits"),
    ({"alerts": {"repo": "no-slash"}}, "alerts.repo"),
])
def test_mistakes_name_their_place(raw, where):
    with pytest.raises(ConfigError, match=r"<config>: " + where.replace("[", r"\[").replace("]", r"\]")):
        parse_config(raw)
