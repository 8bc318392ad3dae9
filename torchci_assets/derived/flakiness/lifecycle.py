"""After filing: the rest of a disabled test's life, on the open issues as the filing left them.

Two steps follow the filing in the `disabled_issues` asset, both acting on the open single-test
DISABLED issues (aggregates are only ever extended): issues of tests deleted from the code are
closed (retired.py), and tests that PyTorch's rerun_disabled_tests jobs show fixed are re-enabled,
everywhere or on the platforms where they are clean (reenable.py). Both run from the newest
verdict only, like the filing, and both have a dry run: without credentials the tests of the
published disabled list stand in for the issues, and what would be done is logged and recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from resources.github import GitHubResource
from resources.lake import Lake
from resources.storage import Store
from torchci_assets.config import DisabledIssuesConfig
from torchci_assets.derived.flakiness.issue_text import platforms_line
from torchci_assets.derived.flakiness.issues import (
    loop_mode,
    read_back_open,
    superseded_by,
)
from torchci_assets.derived.flakiness.lists import load_published
from torchci_assets.derived.flakiness.reenable import (
    Reenabling,
    reenable_disabled_tests,
)
from torchci_assets.derived.flakiness.retired import (
    Retirement,
    open_single_test_issues,
    retire_disabled_tests,
)


@dataclass
class Lifecycle:
    retirement: Retirement
    reenabling: Reenabling
    skipped: str = ""


def published_as_issues(outputs: Store) -> dict[str, dict]:
    """The published list's tests as stand-ins for their issues (dry run): number and body only."""
    return {test: {"number": None, "html_url": url, "body": platforms_line(platforms), "state": "open"}
            for test, (_id, url, platforms) in load_published(outputs).items()}


def run_lifecycle(github: GitHubResource, lake: Lake, outputs: Store, day: str, run_id: str, repo: str,
                  settings: DisabledIssuesConfig, config_source: str, open_issues: list[dict] | None = None,
                  log: Callable[[str], None] = lambda s: None,
                  warn: Callable[[str], None] = lambda s: None) -> Lifecycle:
    """Retire deleted tests, then re-enable fixed ones. `open_issues`: the open issues as the
    filing just read them (else they are read here, when live)."""
    mode = loop_mode(github, settings, config_source)
    newer = superseded_by(lake, day)
    if newer:
        why = f"{day} is not the newest verdict ({newer} is)"
        return Lifecycle(Retirement([], why), Reenabling(), why)
    if mode.live:
        issues = open_single_test_issues(open_issues if open_issues is not None else read_back_open(github, repo))
    else:
        issues = published_as_issues(outputs)
    retirement = retire_disabled_tests(github, lake, day, run_id, repo, issues, mode.live, log, warn)
    closed = {r["test"] for r in retirement.rows}
    remaining = {t: i for t, i in issues.items() if t not in closed}
    reenabling = reenable_disabled_tests(github, lake, day, run_id, repo, remaining, mode.live, log, warn)
    return Lifecycle(retirement, reenabling)
