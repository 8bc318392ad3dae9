"""After filing: the rest of a disabled test's life, on the open issues as the filing left them.

Two steps follow the filing in the `disabled_issues` asset, both acting on the open DISABLED
issues: issues of tests deleted from the code are closed (retired.py), and tests that PyTorch's
rerun_disabled_tests jobs show fixed are re-enabled, everywhere or on the platforms where they are
clean (reenable.py). The tests of an aggregate are judged one by one alike, and what both ask of
an aggregate is done at once, its lines dropped or narrowed (aggregate_lifecycle.py). Both run
from the newest verdict only, like the filing, and both have a dry run: without credentials the
tests of the disabled list the filing reads stand in for the issues (the entries naming one issue
for an aggregate's lines), and what would be done is logged and recorded.

Both act only on issues whose authors may disable a test, by the rule the published list and the
filing follow (`Permissions`): anyone can open a `DISABLED test_x` issue, and a stranger's
disables nothing, so closing, commenting on or narrowing it would be this project acting on
someone else's issue on evidence that was never about it. Such an issue is logged and left alone.
An author is asked about only when one of its issues is about to be written to (`may_act`), or
when a test has several open issues (`issues_by_test`), so a run that changes nothing asks
GitHub nothing more than the filing and the published list do.

GitHub down (no answer, or a 5xx, through one request's whole retry budget) stops the step at that
request (`issues.stop_pass`) and the steps after it wait with it: each would wait out the same
retries in vain. A filing stopped so leaves both steps to the next run (`waiting_for_github`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from resources.github import GitHubResource
from resources.lake import Lake
from resources.storage import Store
from torchci_assets.config import DisabledIssuesConfig
from torchci_assets.derived.flakiness.aggregate_lifecycle import (AggregateSettling, aggregate_members,
                                                                  plan_aggregates, settle_aggregates)
from torchci_assets.derived.flakiness.issue_text import disabled_test, is_aggregate_title, platforms_line, runner_test
from torchci_assets.derived.flakiness.issues import (
    DRY_RUN_LIFECYCLE_STATE,
    issue_permissions,
    keep_plan,
    ledger_marks,
    loop_mode,
    read_back_open,
    superseded_by,
    utc_now,
)
from torchci_assets.derived.flakiness.job_issues import Permissions, author
from torchci_assets.derived.flakiness.lists import disabled_baseline, is_local
from torchci_assets.derived.flakiness.reenable import (
    Reenabling,
    reenable_disabled_tests,
)
from torchci_assets.derived.flakiness.retired import (
    Retirement,
    retire_disabled_tests,
)


@dataclass
class Lifecycle:
    retirement: Retirement
    reenabling: Reenabling
    skipped: str = ""
    aggregates: AggregateSettling = field(default_factory=AggregateSettling)

    @property
    def unavailable(self) -> str:
        """Why a step stopped with GitHub down, and what waits; "" when none did."""
        return self.retirement.unavailable or self.reenabling.unavailable or self.aggregates.unavailable


def waiting_for_github(why: str) -> Lifecycle:
    """Retiring and re-enabling left to the next run: the filing before them found GitHub down (`why`)."""
    return Lifecycle(Retirement([], why), Reenabling(), why)


def published_as_issues(outputs: Store, day: str, now: str) -> dict[str, dict]:
    """The tests of the list the day's filing reads (`disabled_baseline`: the list published before
    the day's first publication, which changes no issue) as stand-ins for their issues (dry run):
    number and body only, keyed as `issues_by_test` keys them, each naming its entry as written
    (`listed_test`). Entries naming one issue are an aggregate's lines, as a single test's issue
    disables one test: each stands in for its line (`aggregate`: the issue's number and URL), as
    `aggregate_members` gives a live run's. An entry alone in naming its issue (`alone`: its id) may
    be the test's own issue or an aggregate's last line, which the list does not tell apart
    (`unsure_of_aggregate`). An entry with a local id has no issue: a live run files
    it `now`, and judges its reruns from then, as any new issue's."""
    published = disabled_baseline(outputs, day).tests
    shared = Counter(entry_id for entry_id, _url, _platforms in published.values() if not is_local(entry_id))
    return {runner_test(test): {"number": None, "html_url": url, "body": platforms_line(platforms), "state": "open",
                                "listed_test": test, **({"created_at": now} if is_local(entry_id) else {}),
                                **({"aggregate": {"number": entry_id, "html_url": url}} if shared[entry_id] > 1
                                   else {"alone": entry_id} if shared[entry_id] else {})}
            for test, (entry_id, url, platforms) in published.items()}


def issues_by_test(issues: list[dict], allowed: Callable[[dict], bool]) -> dict[str, dict]:
    """The open single-test issue of each test (keyed as the test's runs are, `runner_test`): of
    several, the first by URL whose author may disable a test (`allowed`), else the first."""
    by_test: dict[str, list[dict]] = {}
    for i in sorted(issues, key=lambda i: i["html_url"]):
        if i.get("state") == "open" and (test := runner_test(disabled_test(i.get("title")))):
            by_test.setdefault(test, []).append(i)
    return {t: next((i for i in group if allowed(i)), group[0]) if len(group) > 1 else group[0]
            for t, group in by_test.items()}


def author_check(allowed: Callable[[dict], bool], log: Callable[[str], None]) -> Callable[[dict], bool]:
    """`may_act` for retiring and re-enabling: whether this project may write to `issue`, logging
    why not."""
    def may_act(issue: dict) -> bool:
        if allowed(issue):
            return True
        test = issue.get("listed_test") or disabled_test(issue.get("title"))
        log(f"#{issue['number']} ({test}) is left alone: its author "
            f"{author(issue) or 'unknown'} may not disable tests")
        return False
    return may_act


def planning(log: Callable[[str], None], plan: list[str]) -> Callable[[str], None]:
    """A dry run's log for retiring and re-enabling: its `DRY RUN:` lines go to `plan`, said with
    the rows they describe or not at all (`keep_plan`); the others are said at once."""
    return lambda line: plan.append(line) if line.startswith("DRY RUN: ") else log(line)


def run_lifecycle(github: GitHubResource, lake: Lake, outputs: Store, day: str, run_id: str, repo: str,
                  settings: DisabledIssuesConfig, config_source: str, open_issues: list[dict] | None = None,
                  log: Callable[[str], None] = lambda s: None,
                  warn: Callable[[str], None] = lambda s: None, allowed: Permissions | None = None,
                  refresh: bool = False) -> Lifecycle:
    """Retire deleted tests, then re-enable fixed ones. `open_issues`: the open issues as the
    filing just read them (else they are read here, when live); `allowed`: the permissions it
    asked (else asked here). A dry run's plan is logged and recorded once (`keep_plan`), and in an
    intra-day `refresh` not again while it stays the same, as a live run makes each write once."""
    mode = loop_mode(github, settings, config_source)
    newer = superseded_by(lake, day)
    if newer:
        why = f"{day} is not the newest verdict ({newer} is)"
        return Lifecycle(Retirement([], why), Reenabling(), why)
    members: dict[str, dict] = {}
    if mode.live:
        read = open_issues if open_issues is not None else read_back_open(github, repo)
        wrote = (allowed or issue_permissions(github, lake, day, repo, read)).wrote
        issues, may_act = issues_by_test(read, wrote), author_check(wrote, log)
        if any(is_aggregate_title(i.get("title")) for i in read):  # else no need to read the ledger
            members = aggregate_members(read, wrote, issues, ledger_marks(lake, day))
    else:  # a dry run writes to no issue
        issues, may_act = published_as_issues(outputs, day, utc_now().isoformat()), lambda issue: True
    plan: list[str] = []
    step_log = log if mode.live else planning(log, plan)
    retirement = retire_disabled_tests(github, lake, day, run_id, repo, {**issues, **members}, mode.live, may_act,
                                       step_log, warn)
    if retirement.unavailable:  # re-enabling would wait out the same retries
        return Lifecycle(retirement, Reenabling(), retirement.unavailable)
    closed = {r["test"] for r in retirement.rows} | {a.test for a in retirement.listed}
    remaining = {t: i for t, i in {**issues, **members}.items() if t not in closed}
    reenabling = reenable_disabled_tests(github, lake, day, run_id, repo, remaining, mode.live, may_act, step_log,
                                         warn)
    if reenabling.unavailable:
        return Lifecycle(retirement, reenabling, reenabling.unavailable)
    if not mode.live:
        planned = plan_aggregates(issues, retirement.listed, reenabling.listed, repo, run_id, step_log)
        keep_plan(lake, day, run_id, [*retirement.rows, *reenabling.rows, *planned.rows], plan, log, refresh,
                  DRY_RUN_LIFECYCLE_STATE, "lifecycle")
        return Lifecycle(retirement, reenabling, aggregates=planned)
    settled = settle_aggregates(github, lake, day, run_id, repo, members, retirement.listed, reenabling.listed,
                                log, warn)
    return Lifecycle(retirement, reenabling, aggregates=settled)
