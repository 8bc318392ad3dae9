"""When CI is sick: the conditions the alert issues report, as plain functions over lake rows.

PyTorch's rules (test-infra `tools/torchci/check_alerts.py`, `queue_alert.py`):
  recurrently_failing   a blocking job group failed on `failing_commits` (2) main commits in a row,
                        newest first; pending and skipped commits are passed over (a Schrodinger's
                        failure), and so are cancelled ones (upstream counts a failed job only, not
                        a cancelled one); a success or a flaky recovery ends the chain; beside each
                        group, the commit its chain starts at (the first bad one, when a success
                        below it was read);
  queue                 per machine type, more than `max_jobs` jobs waiting and the oldest for more
                        than `max_wait_min` (first matching rule: ROCm 2 h, the large Linux pools
                        30 min, anything else 1 h; on another repository GitHub's hosted runners
                        never, its own runners 1 h: GitHub's queue is not the team's to mend);
  disabled_bot_silent   the disabled-issue bot recorded nothing for `disabled_bot_silent_days` while
                        the flaky verdicts list tests it should act on;
  archive_silent        no webhook reached the archive for `archive_silent_min` minutes: the pipe
                        from GitHub is broken and everything downstream is stale.
Each returns an `Alert` listing what fires (empty when clear): a job group, a machine type. Its
issue changes when that list does; the figures beside each entry (`details`) are refreshed then,
not at every check, as in PyTorch's issues ("exact numbers may be out of date").
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

import pyarrow.fs as pafs

from resources.lake import Lake
from resources.storage import Store
from torchci_assets.config import is_pytorch
from torchci_assets.derived.guardians.inputs import days_back, query
from torchci_assets.guardian_config import AlertsConfig, QueueRule


@dataclass(frozen=True)
class Alert:
    kind: str
    title: str
    lines: tuple[str, ...]  # what fires; empty when the condition is clear
    note: str = ""
    details: tuple[str, ...] = ()  # a figure per line, shown beside it

    @property
    def firing(self) -> bool:
        return bool(self.lines)


def title_prefix(repo: str) -> str:
    """PyTorch's issues start `[Pytorch]`; another repository's name its own, whose tracker they land in."""
    return "[Pytorch]" if is_pytorch(repo) else f"[{repo}]"


def commit_link(repo: str, sha: str) -> str:
    return f"[{sha[:10]}](https://github.com/{repo}/commit/{sha})"


def _failure_chain(history: list[dict]) -> tuple[list[str], bool]:
    """The shas of a group's counted failures, newest first, down to its last success or flaky
    recovery; and whether one was read (else the chain runs out of the window, and its oldest
    failure read need not be the first)."""
    failed = []
    for r in history:
        if r["state"] in ("success", "flaky"):
            return failed, True
        if r["state"] == "failure" and not r.get("cancelled"):
            failed.append(r["sha"])
    return failed, False


def _since(repo: str, branch: str, failed: list[str], ended: bool) -> str:
    first = commit_link(repo, failed[-1])
    if ended:
        return f"failing on every {branch} commit since {first}, the first that failed"
    return f"failing on every {branch} commit read, the oldest {first}: it may have broken earlier"


def recurrently_failing(rows: list[dict], repo: str, min_commits: int, branch: str = "main") -> Alert:
    """`rows`: commit_health's latest word per (sha, job_group) on the main branch `branch`. Beside
    each group, the commit its failures start at, as upstream's issue names it."""
    by_group: dict[str, list[dict]] = {}
    for r in sorted(rows, key=lambda r: (r["pushed_at"], r["sha"]), reverse=True):
        if r.get("blocking"):
            by_group.setdefault(r["job_group"], []).append(r)
    failing, since = [], []
    for group, history in sorted(by_group.items()):
        failed, ended = _failure_chain(history)
        if len(failed) >= min_commits:
            failing.append(group)  # the group alone: the issue changes when the set of groups does
            since.append(_since(repo, branch, failed, ended))
    return Alert("recurrently_failing", f"{title_prefix(repo)} There are {len(failing)} Recurrently Failing Jobs on "
                 f"{repo} {branch}", tuple(failing), f"Each failed on at least {min_commits} consecutive {branch} "
                 "commits. Please review the errors and revert if needed.", tuple(since))


def rule_for(machine: str, rules: tuple[QueueRule, ...]) -> QueueRule | None:
    return next((r for r in rules if re.search(r.pattern, machine)), None)


def long_queues(queued: list[dict], rules: tuple[QueueRule, ...], prefix: str = "[Pytorch]") -> Alert:
    """`queued`: per machine, jobs waiting now and the oldest wait in seconds."""
    lines, details = [], []
    for q in sorted(queued, key=lambda q: q["machine"]):
        rule = rule_for(q["machine"], rules)
        if rule and rule.alert and q["jobs"] > rule.max_jobs and q["max_wait_s"] > rule.max_wait_min * 60:
            lines.append(q["machine"])
            details.append(f"{q['jobs']} jobs waiting, the oldest for {q['max_wait_s'] / 3600:.2f} hours")
    return Alert("queue", f"{prefix} There are {len(lines)} machines with long queues", tuple(lines),
                 "Please look at the HUD metrics page for more info.", tuple(details))


def disabled_bot_silent(last_action_at: dt.datetime | None, failing_tests: int, now: dt.datetime,
                        days: int, prefix: str = "[Pytorch]") -> Alert:
    fires = (last_action_at is None or now - last_action_at > dt.timedelta(days=days)) and failing_tests > 0
    return Alert("disabled_bot_silent", f"{prefix}[Warning] No flaky test issues have been filed in the past "
                 f"{days} days!", ("the disabled-issue bot",) if fires else (),
                 "This can be an indication that the flaky test bot has stopped filing tests.",
                 (f"recorded nothing for {days} days while {failing_tests} tests are flaky or broken",) if fires else ())


def archive_silent(last_received: dt.datetime | None, now: dt.datetime, minutes: int,
                   prefix: str = "[Pytorch]") -> Alert:
    fires = last_received is None or now - last_received > dt.timedelta(minutes=minutes)
    when = last_received.strftime("%Y-%m-%d %H:%M UTC") if last_received else "not in the last two days"
    return Alert("archive_silent", f"{prefix} The CI archive is receiving no webhooks", ("webhooks",) if fires else (),
                 "The webhook pipe from GitHub is broken: the HUD, the lake and every alert are stale.",
                 (f"none reached the archive for over {minutes} minutes (last: {when})",) if fires else ())


# ---- the inputs, from the lake and the archive ------------------------------------------


def last_archived(archive: Store, now: dt.datetime) -> dt.datetime | None:
    """When the newest webhook file of today or yesterday was last written."""
    newest = None
    for day in days_back(now, 1):
        selector = pafs.FileSelector(archive.full(f"webhooks/day={day}"), recursive=True, allow_not_found=True)
        for info in archive.fs.get_file_info(selector):
            if info.type == pafs.FileType.File and info.mtime is not None:
                t = info.mtime if info.mtime.tzinfo else info.mtime.replace(tzinfo=dt.timezone.utc)
                newest = t if newest is None or t > newest else newest
    return newest


def current_alerts(lake: Lake, archive: Store, rows: list[dict], repo: str, cfg: AlertsConfig,
                   now: dt.datetime, branch: str = "main") -> list[Alert]:
    """Every alert as of `now`; `rows` are the main signal rows the autorevert read, of `branch`."""
    queued = query(lake, {"workflow_job": 1}, "queued_jobs", {"since": now - dt.timedelta(days=1), "now": now},
                   now) or []
    since = now - dt.timedelta(days=cfg.disabled_bot_silent_days)
    bot = query(lake, {"disabled_issues": cfg.disabled_bot_silent_days}, "disabled_bot_activity",
                {"since": since}, now) or [{"last_at": None}]
    failing = query(lake, {"flaky_tests": 2}, "failing_tests", {}, now) or [{"tests": 0}]
    prefix = title_prefix(repo)
    return [
        recurrently_failing(rows, repo, cfg.failing_commits, branch),
        long_queues(queued, cfg.queue_rules, prefix),
        disabled_bot_silent(bot[0]["last_at"], failing[0]["tests"], now, cfg.disabled_bot_silent_days, prefix),
        archive_silent(last_archived(archive, now), now, cfg.archive_silent_min, prefix),
    ]
