"""`drci_comments`: for each pull request of the day's `pr_jobs`, the comment on its latest head.

One row per pull request head: pr, head_sha, merge_base (and whether it is the compare API's or an
estimate, and why), the body, and the count per class. The rows replace the day's partition, so
the table is the last word of the day on each head; the HUD's PR page and `drci/<pr>.md` show
the same body that is posted.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import pyarrow as pa

from resources.github import GitHubResource
from resources.lake import Lake, connect
from resources.lake_extracts import ExtractPass
from resources.storage import Store
from torchci_assets.config import is_pytorch
from torchci_assets.derived.drci import inputs
from torchci_assets.derived.drci.classify import (CLASSES, classify_head, counts, failing, settle_runs,
                                                  suppressing_labels)
from torchci_assets.derived.drci.comment import DEFAULT_UPDATES, VIABLE_STRICT, Head, render
from torchci_assets.derived.drci.extracts import RETIRED
from torchci_assets.derived.drci.flaky_rules import load_rules
from torchci_assets.derived.drci.merge_base import DEFAULT_BRANCH, MergeBase, cached, resolve
from torchci_assets.derived.drci.refresh import RefreshLimits, refresh_heads

TABLE = "drci_comments"
COUNT_COLUMNS = {"NEW": "new", "BROKEN TRUNK": "broken_trunk", "FLAKY": "flaky", "UNSTABLE": "unstable",
                 "INFRA": "infra", "CANCELLED": "cancelled", "UNCLASSIFIED": "unclassified",
                 "AWAITING APPROVAL": "awaiting_approval"}
SCHEMA = pa.schema([
    ("pr", pa.int64()), ("head_sha", pa.string()), ("pr_state", pa.string()), ("merge_base", pa.string()),
    ("merge_base_exact", pa.bool_()), ("merge_base_note", pa.string()), ("body", pa.string()),
    *((COUNT_COLUMNS[c], pa.int64()) for c in CLASSES), ("pending", pa.int64()),
    ("refreshed_jobs", pa.int64()), ("as_of", pa.timestamp("ms", tz="UTC")),
    # each failing job's class as the body gives it, for readers that must agree with the comment (the HUD page)
    ("jobs", pa.list_(pa.struct([("job_id", pa.int64()), ("name", pa.string()), ("class", pa.string())]))),
])


@dataclass
class BuildReport:
    rows: list[dict] = field(default_factory=list)
    compare_requests: int = 0
    refresh_requests: int = 0
    refreshed_heads: int = 0
    estimated_merge_bases: int = 0
    verdicts: dict[int, list] = field(default_factory=dict)  # pr -> its failing jobs' verdicts


def _comment(pr: inputs.PullRequest, mb: MergeBase, main: inputs.Main, sightings, unstable: dict[str, list],
             repo: str, web_url: str, hud_url: str | None, now: dt.datetime, refreshed: int,
             report: BuildReport, updates: str, rules: tuple = (), own: frozenset[str] = frozenset(),
             branch: str = DEFAULT_BRANCH, others: Mapping | None = None, disabled: Mapping | None = None,
             reenabled: Mapping | None = None) -> dict:
    """`own`: the main commits that landed this pull request before (`inputs.load_merge_commits`);
    `others`: other authors' pull requests' failures it may repeat (`inputs.other_failures`);
    `disabled`, `reenabled`: the tests DISABLED issues disable, and those lately re-enabled
    (`inputs.load_disabled`)."""
    flaky = inputs.flaky_for(sightings, pr, disabled, reenabled, main.pushed.get(mb.sha))
    verdicts, pending = classify_head(pr.jobs, main.trunk(mb.sha, own, pr.pushed_at), flaky, unstable,
                                      suppressing_labels(repo, pr.labels), rules, now, others)
    report.verdicts[pr.number] = verdicts
    head = Head(repo, pr.number, pr.head_sha, mb.sha, mb.note, web_url, hud_url, branch, rebase_target(repo, branch))
    body = render(head, verdicts, pending, updates)
    n = counts(verdicts)
    return {"pr": pr.number, "head_sha": pr.head_sha, "pr_state": pr.state, "merge_base": mb.sha,
            "merge_base_exact": mb.exact, "merge_base_note": mb.note, "body": body,
            **{COUNT_COLUMNS[c]: n[c] for c in CLASSES}, "pending": pending, "refreshed_jobs": refreshed,
            "as_of": now, "jobs": [{"job_id": v.job.job_id, "name": v.job.name, "class": v.cls} for v in failing(verdicts)]}


def _merge_bases(lake: Lake, github: GitHubResource, day: str, repo: str, prs: dict[int, inputs.PullRequest],
                 bases: dict[str, tuple[str | None, str | None]], branch: str) -> dict[str, MergeBase]:
    """The merge base with `branch` of every head: open ones from the compare API, closed ones from
    the cache or the webhook's base sha (no request is spent on a comment that is no longer written)."""
    def wanted(state_open: bool):
        return [(p.head_sha, (bases.get(p.head_sha) or (None, None))[0])
                for p in prs.values() if (p.state == "open") == state_open]
    known = cached(lake, day, branch)  # read once: the closed heads' call appends nothing to it
    return {**resolve(lake, github, day, repo, wanted(False), ask=False, branch=branch, known=known),
            **resolve(lake, github, day, repo, wanted(True), branch=branch, known=known)}


def rebase_target(repo: str, branch: str) -> str:
    """Where a pull request that met a broken trunk should go: PyTorch's viable/strict, the main
    commits whose CI passed; another repository has no such branch, only its main one."""
    return VIABLE_STRICT if is_pytorch(repo) else branch


def build_comments(lake: Lake, github: GitHubResource, day: str, repo: str, *, hud_url: str | None = None,
                   limits: RefreshLimits | None = None, now: dt.datetime | None = None,
                   log: Callable[[str], None] = lambda s: None,
                   unstable: dict[str, list] | None = None, updates: str = DEFAULT_UPDATES,
                   main_branch: str = DEFAULT_BRANCH, flaky_rules: str | None = None,
                   warn: Callable[[str], None] | None = None, archive: Store | None = None) -> BuildReport:
    """Compute and write the day's `drci_comments` (see the module docstring). `unstable`: the
    published unstable-jobs.json (`flakiness.job_issues.load_unstable`), none when not given; `updates`: how
    often the comments are refreshed, in words (`cadence.updates_every`), said in each body;
    `main_branch`: the branch merge bases are taken with (without refs/heads/); `flaky_rules`: the
    path of a flaky-rules.json in PyTorch's format (none: no rule), whose problems go to `warn`
    (default: `log`); `archive`: where the jobs read from the REST API are recorded (`refresh.record`;
    none: not recorded)."""
    now = now or dt.datetime.now(dt.timezone.utc)
    rules = load_rules(flaky_rules, warn or log)
    report = BuildReport()
    seen = ExtractPass(retired=RETIRED)  # the extracts' days and folders, each brought up to date once
    con = connect()
    try:
        people = inputs.register_people(con, lake, day)
        prs = inputs.load_heads(con, lake, day, repo, people)
        known = set(prs)
        inputs.attach_runs(con, lake, day, repo, prs)  # before the REST API's states, which replace the lake's
        # only the live partitions (today's, yesterday's) mix in GitHub's current state
        live = now - dt.datetime.fromisoformat(day).replace(tzinfo=dt.timezone.utc) < dt.timedelta(days=2)
        open_prs = {n: p for n, p in prs.items() if p.state == "open" and live}
        refreshed, report.refresh_requests = refresh_heads(github, repo, open_prs, limits or RefreshLimits(), now, log,
                                                           archive, lambda stale: inputs.load_done_jobs(con, stale))
        report.refreshed_heads = len(refreshed)
        prs = {n: p for n, p in prs.items() if p.jobs or p.done_jobs}  # a head with no job gets no comment yet
        inputs.attach_tests(con, lake, day, prs, seen)
        inputs.attach_results(con, lake, day, prs)
        for pr in prs.values():
            settle_runs(pr.jobs, pr.done_runs)
        merge_bases = _merge_bases(lake, github, day, repo, prs, inputs.base_shas(con, lake, day, seen), main_branch)
        report.compare_requests = sum(1 for m in merge_bases.values() if m.fetched)
        pushes = [p.pushed_at for p in prs.values() if p.pushed_at is not None]
        main = inputs.load_main(con, lake, day, {m.sha for m in merge_bases.values() if m.sha}, seen, main_branch,
                                max(pushes, default=None))
        sightings = inputs.load_flaky(con, lake, day, prs, seen)
        earlier = inputs.load_earlier(con, lake, day, repo, known, prs,
                                      lambda pr: main.pushed.get(merge_bases[pr.head_sha].sha), seen)
        if people:
            inputs.attach_people(con, repo, {**earlier, **prs})
        landed = inputs.load_merge_commits(con, lake, day, repo, set(prs) | set(earlier), seen)
        disabled, reenabled = inputs.load_disabled(con, lake, day)
    finally:
        con.close()
    failures = inputs.index_failures({**earlier, **prs}, landed)
    for number in sorted(prs):
        pr = prs[number]
        mb = merge_bases[pr.head_sha]
        others = inputs.other_failures(failures, pr, main.pushed.get(mb.sha))
        report.rows.append(_comment(pr, mb, main, sightings, unstable or {}, repo, github.web_url, hud_url, now,
                                    refreshed.get(number, 0), report, updates, rules,
                                    landed.get(number, frozenset()), main_branch, others, disabled, reenabled))
    report.estimated_merge_bases = sum(1 for r in report.rows if r["pr_state"] == "open" and not r["merge_base_exact"])
    lake.write(TABLE, day, pa.Table.from_pylist(report.rows, schema=SCHEMA))
    return report


def load_comments(lake: Lake, day: str) -> dict[int, dict]:
    """pr -> its row of the day's `drci_comments` (empty when the table has no such partition)."""
    con = connect()
    try:
        if not lake.register(con, TABLE, [day], name="dc"):
            return {}
        return {r["pr"]: r for r in inputs.rows(con, "comments")}
    finally:
        con.close()
