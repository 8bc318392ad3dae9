"""The `autorevert` and `alerts` sections of the config file: what the trunk guardians may do.

Both are off by default. The bundled config names the real pytorch/pytorch, and a token set for
the relay must not start re-running its workflows, commenting on its pull requests or filing
issues from a simulated archive: with `enabled: false` (or no credentials) every decision is
still made and recorded in the lake, marked dry run, and nothing is sent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from torchci_assets.config_error import ConfigError

REVERT_CLASSIFICATIONS = ("ignoredsignal", "nosignal", "landrace", "weird", "ghfirst")


@dataclass(frozen=True)
class AutorevertConfig:
    enabled: bool = False
    # Workflows whose signals are watched; empty means every workflow seen on main.
    workflows: tuple[str, ...] = ()
    # PyTorch's pacing: one restart per (workflow, commit) per 20 min, at most 5 per commit,
    # 20/40/60 min after failed restarts.
    restart_interval_min: int = 20
    max_restarts_per_commit: int = 5
    backoff_min: tuple[int, ...] = (20, 40, 60)
    # Restarts planned at once inside one gap of commits that did not run a signal (bisection).
    bisection_limit: int = 2
    # Before a revert is proposed the culprit must have failed on this many attempts (a restart
    # of its failed jobs failing again), and this many commits from it on must be red.
    confirm_attempts: int = 2
    min_red_commits: int = 2
    revert_classification: str = "nosignal"
    revert_message: str = ("Reverted automatically by the trunk guardian: {signals} failed on this "
                           "commit and every later one that ran them, and passed on the commit before")
    # An issue of the repository that gets the notifications (a culprit whose pull request is not
    # to be reverted: opted out, not merged, or the commit is itself a revert), as upstream's
    # NOTIFY_ISSUE_NUMBER; None: the notification goes on the pull request itself.
    notify_issue_number: int | None = None


@dataclass(frozen=True)
class QueueRule:
    """Machines whose runner label matches `pattern` alert with more than `max_jobs` waiting and
    the oldest waiting over `max_wait_min`; never, when `alert` is false."""

    pattern: str
    max_jobs: int
    max_wait_min: int
    alert: bool = True


DEFAULT_QUEUE_RULES = (
    QueueRule("rocm", 50, 120),
    QueueRule(r"linux\.2xlarge|linux\.4xlarge", 50, 30),
    QueueRule(".*", 50, 60),
)
# GitHub's hosted runners' labels (`ubuntu-latest`, `ubuntu-24.04-arm`, `macos-14`, `windows-2022`,
# `ubuntu-slim`): a job waits there for GitHub, or for the plan's limit of jobs at once, neither of which
# the team's CI can mend, so another repository's queue alert is for its own runners unless its config
# says otherwise.
GITHUB_HOSTED = r"^(ubuntu|macos|windows)-(latest|slim|\d+(\.\d+)?)(-[a-z0-9]+)*$"
TEAM_QUEUE_RULES = (QueueRule(GITHUB_HOSTED, 50, 60, alert=False), QueueRule(".*", 50, 60))


@dataclass(frozen=True)
class MainWindow:
    """The main commits the guardians read: those of the last `days`, or, when these are fewer than
    `commits`, the newest `commits` pushed within `max_days`. PyTorch pushes every few minutes: two
    days hold hundreds of its commits, and a breakage older than them is a human's by now. A
    repository that pushes a few times a week may have no commit in two days, or no green one below a
    break: its last commits are what a culprit and a first bad commit are found among."""

    days: int = 2
    commits: int = 0  # PyTorch's: the two days alone, as upstream's fixed lookback
    max_days: int = 14

    def days_read(self) -> int:
        """The most days back its commits are read from: what a reader of them declares it reads."""
        return max(self.days, self.max_days) if self.commits else self.days


TEAM_WINDOW = MainWindow(commits=20)


# the alert issues' label on a repository other than PyTorch's, unless the config names one
TEAM_ALERT_LABELS = ("torchci-alert",)


@dataclass(frozen=True)
class AlertsConfig:
    enabled: bool = False
    # PyTorch's check_alerts: a blocking job group failing on this many consecutive main commits.
    failing_commits: int = 2
    queue_rules: tuple[QueueRule, ...] = DEFAULT_QUEUE_RULES
    disabled_bot_silent_days: int = 14
    archive_silent_min: int = 30
    labels: tuple[str, ...] = ("pytorch-alert",)
    repo: str | None = None  # where alert issues are filed; None means the upstream repo


@dataclass(frozen=True)
class GuardianSettings:
    autorevert: AutorevertConfig = field(default_factory=AutorevertConfig)
    alerts: AlertsConfig = field(default_factory=AlertsConfig)
    window: MainWindow = field(default_factory=MainWindow)


def _whole(raw: dict, key: str, default: int, where: str, least: int = 0) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ConfigError(f"{where}.{key}: must be a whole number of at least {least}, got {value!r}")
    return value


def _flag(raw: dict, where: str, key: str = "enabled", default: bool = False) -> bool:
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{where}.{key}: must be true or false, got {value!r}")
    return value


def _names(raw: Any, where: str) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(x, str) and x.strip() for x in raw):
        raise ConfigError(f"{where}: must be a list of names, got {raw!r}")
    return tuple(raw)


def _mapping(raw: Any, where: str, keys: tuple[str, ...]) -> dict:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: must be a mapping, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(keys))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(map(str, unknown))}; known: {', '.join(keys)}")
    return raw


def parse_autorevert(raw: Any, where: str = "autorevert") -> AutorevertConfig:
    d = AutorevertConfig()
    raw = _mapping(raw, where, tuple(d.__dataclass_fields__))
    backoff = raw.get("backoff_min", list(d.backoff_min))
    if not isinstance(backoff, list) or not backoff or not all(
            isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in backoff):
        raise ConfigError(f"{where}.backoff_min: must be a non-empty list of minutes, got {backoff!r}")
    classification = raw.get("revert_classification", d.revert_classification)
    if classification not in REVERT_CLASSIFICATIONS:
        raise ConfigError(f"{where}.revert_classification: must be one of {', '.join(REVERT_CLASSIFICATIONS)}, "
                          f"got {classification!r}")
    message = raw.get("revert_message", d.revert_message)
    if not isinstance(message, str) or not message.strip() or '"' in message:
        raise ConfigError(f"{where}.revert_message: must be text without double quotes, got {message!r}")
    return AutorevertConfig(
        enabled=_flag(raw, where), workflows=_names(raw.get("workflows", []), f"{where}.workflows"),
        restart_interval_min=_whole(raw, "restart_interval_min", d.restart_interval_min, where),
        max_restarts_per_commit=_whole(raw, "max_restarts_per_commit", d.max_restarts_per_commit, where),
        backoff_min=tuple(backoff), bisection_limit=_whole(raw, "bisection_limit", d.bisection_limit, where, 1),
        confirm_attempts=_whole(raw, "confirm_attempts", d.confirm_attempts, where, 1),
        min_red_commits=_whole(raw, "min_red_commits", d.min_red_commits, where, 1),
        revert_classification=classification, revert_message=message,
        notify_issue_number=_whole(raw, "notify_issue_number", None, where, 1)
        if raw.get("notify_issue_number") is not None else None)


def _queue_rules(raw: Any, where: str) -> tuple[QueueRule, ...]:
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{where}: must be a non-empty list of {{pattern, max_jobs, max_wait_min}}")
    rules = []
    for i, item in enumerate(raw):
        here = f"{where}[{i}]"
        item = _mapping(item, here, ("pattern", "max_jobs", "max_wait_min", "alert"))
        pattern = item.get("pattern")
        try:
            re.compile(pattern)
        except (re.error, TypeError):
            raise ConfigError(f"{here}.pattern: must be a regular expression, got {pattern!r}") from None
        rules.append(QueueRule(pattern, _whole(item, "max_jobs", 50, here), _whole(item, "max_wait_min", 60, here),
                               _flag(item, here, "alert", True)))
    return tuple(rules)


def parse_alerts(raw: Any, where: str = "alerts", pytorch: bool = True) -> AlertsConfig:
    """`pytorch`: the upstream repository is PyTorch's, whose issues' label is its own (`pytorch-alert`);
    another's issues are labelled with the tool's name by default, as their marker is."""
    d = AlertsConfig() if pytorch else AlertsConfig(labels=TEAM_ALERT_LABELS, queue_rules=TEAM_QUEUE_RULES)
    raw = _mapping(raw, where, tuple(d.__dataclass_fields__))
    repo = raw.get("repo")
    if repo is not None and (not isinstance(repo, str) or repo.count("/") != 1):
        raise ConfigError(f"{where}.repo: must be owner/name, got {repo!r}")
    return AlertsConfig(
        enabled=_flag(raw, where),
        failing_commits=_whole(raw, "failing_commits", d.failing_commits, where, 1),
        queue_rules=_queue_rules(raw["queue_rules"], f"{where}.queue_rules") if "queue_rules" in raw
        else d.queue_rules,
        disabled_bot_silent_days=_whole(raw, "disabled_bot_silent_days", d.disabled_bot_silent_days, where, 1),
        archive_silent_min=_whole(raw, "archive_silent_min", d.archive_silent_min, where, 1),
        labels=_names(raw.get("labels", list(d.labels)), f"{where}.labels"), repo=repo)


def parse_window(raw: Any, where: str = "main_window", pytorch: bool = True) -> MainWindow:
    """`pytorch`: PyTorch's repository reads its two days alone; another, its last commits too."""
    d = MainWindow() if pytorch else TEAM_WINDOW
    raw = _mapping(raw, where, tuple(d.__dataclass_fields__))
    days = _whole(raw, "days", d.days, where, 1)
    return MainWindow(days, _whole(raw, "commits", d.commits, where),
                      _whole(raw, "max_days", max(d.max_days, days), where, days))


def guardian_settings(raw: dict, pytorch: bool = True) -> GuardianSettings:
    """The guardians' sections of the whole config document `raw`, for PyTorch's repository or
    (`pytorch` false) another."""
    return GuardianSettings(parse_autorevert(raw.get("autorevert")), parse_alerts(raw.get("alerts"), pytorch=pytorch),
                            parse_window(raw.get("main_window"), pytorch=pytorch))
