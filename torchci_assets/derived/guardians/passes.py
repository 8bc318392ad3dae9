"""One pass of each guardian, as plain functions the job's ops (and the tests, and the eval) call.

The autorevert reads main's signals from `commit_health` (the newest partitions: each commit's
latest word) and, where the lake has the job tables, every attempt of them with its start
(`main_attempt_rows`), judges every signal, plans the restarts and revert proposals, and acts on them
through the ledger's rules. The alerts pass checks every condition and syncs the issues.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from resources.github import GitHubResource
from resources.lake import Lake
from resources.storage import Store
from torchci_assets.config import load_config
from torchci_assets.derived.guardians import actions, ledger
from torchci_assets.derived.guardians.actions import Guardian
from torchci_assets.derived.guardians.alert_conditions import current_alerts
from torchci_assets.derived.guardians.alert_issues import AlertIssues
from torchci_assets.derived.guardians.culprits import Verdict, judge_all
from torchci_assets.derived.guardians.inputs import known_flaky_tests, main_attempt_rows, main_signal_rows, push_days
from torchci_assets.derived.guardians.signals import MainHistory, build_history
from torchci_assets.guardian_config import AlertsConfig, AutorevertConfig, MainWindow


def base_branch() -> str:
    """The configured main branch (`master` in a repository that still has one), as upstream takes
    `main`: the branch a culprit's pull request must target, and the one the guardians' words name."""
    return load_config().main_branch_name


@dataclass(frozen=True)
class AutorevertSummary:
    commits: int
    signals: int
    verdicts: dict  # kind -> count
    taken: list  # ledger rows written: actions done or recovered, and intents left open
    skipped: list  # (action, sha, why)
    dry_run: bool
    confirmed: list  # Verdicts pinning a culprit
    unavailable: str = ""  # GitHub was down: the pass stopped there, and how many actions wait


def judged(lake: Lake, cfg: AutorevertConfig, now: dt.datetime, dry_run: bool,
           rows: list[dict] | None = None, window: MainWindow = MainWindow()) -> tuple[MainHistory, list[Verdict]]:
    """Main's signals and their verdicts as the autorevert acts on them, for the pass and the
    HUD's marks alike: `cfg`'s workflows and thresholds, the flaky verdicts, the ledger's
    restarts (`dry_run`'s or the live ones): those in flight, and the whole-run re-runs made.
    `window`: the main commits read, when `rows` are not given."""
    rows = main_signal_rows(lake, now, window) if rows is None else rows
    attempts = main_attempt_rows(lake, now, [r["sha"] for r in rows], push_days(rows, now))
    history = build_history(rows, cfg.workflows, known_flaky_tests(lake, now), attempts)
    acts = ledger.actions(ledger.read(lake, now))
    in_flight = actions.restarts_in_flight(acts, history, now, dry_run)
    return history, judge_all(history, cfg, in_flight, actions.whole_reruns(acts, dry_run))


def autorevert_pass(github: GitHubResource, lake: Lake, repo: str, cfg: AutorevertConfig, now: dt.datetime,
                    log: Callable[[str], None] = lambda s: None, rows: list[dict] | None = None,
                    base: str = "main", window: MainWindow = MainWindow()) -> AutorevertSummary:
    """`base`: the branch main's commits land on (upstream's `main`); a pull request GitHub ties to
    a culprit but into another branch gets no proposal. `window`: the main commits read."""
    guardian = Guardian(github, lake, repo, cfg, now, log, base)
    history, verdicts = judged(lake, cfg, now, not guardian.live, rows, window)
    report = guardian.run(actions.plan(verdicts, history))
    return AutorevertSummary(
        len(history.commits), len(history.signals), dict(Counter(v.kind for v in verdicts)),
        [*report.recovered, *report.taken, *report.left_open], [(p.action, p.commit_sha, why) for p, why in report.skipped],
        not guardian.live, [v for v in verdicts if v.kind == "confirmed"], report.unavailable)


@dataclass(frozen=True)
class AlertsSummary:
    alerts: list  # the alerts as of now
    changes: list[dict]  # the state changes recorded
    unavailable: str = ""  # GitHub was down: the check stopped there, and how many alerts wait


def alerts_pass(github: GitHubResource, lake: Lake, archive: Store, repo: str, cfg: AlertsConfig,
                now: dt.datetime, log: Callable[[str], None] = lambda s: None,
                base: str = "main", window: MainWindow = MainWindow()) -> AlertsSummary:
    """`base`: the branch main's commits land on, as the issues name it; `window`: the main commits read."""
    alerts = current_alerts(lake, archive, main_signal_rows(lake, now, window), repo, cfg, now, base)
    issues = AlertIssues(github, lake, cfg.repo or repo, cfg.labels, cfg.enabled, now, log)
    changes = issues.sync(alerts)
    return AlertsSummary(alerts, changes, issues.unavailable)
