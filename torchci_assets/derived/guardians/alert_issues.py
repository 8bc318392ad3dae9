"""Alerts as GitHub issues: one open issue per alert, updated while it fires, closed when it clears.

Each issue carries a hidden marker with its alert's kind and one label (PyTorch's `pytorch-alert`
by default), and is found by listing the repository's open issues with that label (the list is
consistent at once, where search lags writes) and by reading the issues the table says the alert
opened that the list misses (a human removed their label). An issue is created only when no open
issue has the marker, and a create that got no clear answer is never resent blindly: the list is read
again and the issue adopted if GitHub made it. A change's comment goes just before the change, with
a marker of its text: a check killed between the two finds it (the newest comment with a marker)
and makes the change without saying it twice; an issue a human reopened since its closing comment
is said again when it is closed again. Every change of state (opened, updated, closed)
is a row of the `alerts` lake table. In dry run (no credentials, or `alerts.enabled: false`) the
state is kept by that table alone: what would be opened, updated or closed is logged as
"DRY RUN ..." and recorded once per change, not at every check.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from resources.github import GitHubError, GitHubResource, outage_line, unavailable
from resources.lake import Lake
from torchci_assets.derived.flakiness.comments import comment_once, digest_marker
from torchci_assets.derived.guardians.alert_conditions import Alert
from torchci_assets.derived.guardians.inputs import days_back

TABLE = "alerts"
# An alert open longer than this without a state change is still found: its issue is on GitHub.
LOOKBACK_DAYS = 30
SCHEMA = pa.schema([
    ("at", pa.timestamp("ms", tz="UTC")), ("repo", pa.string()), ("kind", pa.string()), ("action", pa.string()),
    ("issue_number", pa.int64()), ("title", pa.string()), ("body", pa.string()), ("dry_run", pa.bool_()),
])


def marker(kind: str) -> str:
    return f"<!-- torchci-alert: {kind} -->"


DETAIL = " — "


def issue_body(alert: Alert) -> str:
    details = alert.details or ("",) * len(alert.lines)
    return "\n".join(["Within the last checks, the following fire:",
                      *(f"- {x}{DETAIL + d if d else ''}" for x, d in zip(alert.lines, details)), "",
                      alert.note, marker(alert.kind)])


def firing_in(body: str) -> set[str]:
    """What an issue's body lists as firing (without the figures beside each)."""
    return {line[2:].split(DETAIL)[0] for line in (body or "").splitlines() if line.startswith("- ")}


SAID = "<!-- torchci-alert-said: "


def said_marker(text: str) -> str:
    """The hidden line a comment ends with, naming its text."""
    return digest_marker(SAID, text)


def change_comment(old_body: str, alert: Alert) -> str:
    """What changed, as PyTorch's update comments say it (started / stopped)."""
    before = firing_in(old_body)
    now = set(alert.lines)
    parts = []
    if before - now:
        parts += ["These stopped:", *(f"* {x}" for x in sorted(before - now)), ""]
    if now - before:
        parts += ["These started:", *(f"* {x}" for x in sorted(now - before))]
    return "\n".join(parts).strip()


def record(lake: Lake, row: dict) -> dict:
    day = row["at"].astimezone(dt.timezone.utc).strftime("%Y-%m-%d")
    lake.write(TABLE, day, pa.Table.from_pylist([row], schema=SCHEMA), part=f"{row['kind']}-{uuid.uuid4().hex[:12]}")
    return row


def history(lake: Lake, now: dt.datetime) -> list[dict]:
    files = lake.files(TABLE, days_back(now, LOOKBACK_DAYS))
    rows = [r for f in files for r in pq.read_table(f, filesystem=lake.store.fs, schema=SCHEMA).to_pylist()]
    return sorted(rows, key=lambda r: r["at"])


# the action of a row for an extra open issue of an alert, closed beside the one the alert keeps
DUPLICATE_CLOSED = "duplicate closed"
# the action of a row for an issue of an alert found closed, deleted or without its marker: someone
# else ended it, and it is not looked up again
LEFT = "closed on GitHub"
CLOSING_ACTIONS = ("closed", DUPLICATE_CLOSED, LEFT)
_UNKNOWN: dict = {"state": "unknown"}  # an alert's issue GitHub would not show: nothing is done this check


class AlertIssues:
    """One alert pass over `repo`; `live` when credentials and `alerts.enabled` allow writes."""

    def __init__(self, github: GitHubResource, lake: Lake, repo: str, labels: tuple[str, ...], enabled: bool,
                 now: dt.datetime, log: Callable[[str], None] = lambda s: None):
        self.github, self.lake, self.repo, self.labels, self.now, self.log = github, lake, repo, labels, now, log
        self.live = enabled and not github.dry_run
        self.unavailable = ""  # GitHub was down (no answer or a 5xx through a call's retries): the check stopped

    def _down(self, e: GitHubError, waiting: int) -> None:
        """Stop the check where GitHub went down, said once: every later call would wait out the same
        retry budget in vain. Nothing is lost: the next check finds the issues as they are."""
        self.unavailable = outage_line(e, f"{waiting} alert(s)", "the next check")
        self.log(self.unavailable)

    def _row(self, alert: Alert, action: str, number: int | None, body: str) -> dict:
        return record(self.lake, {"at": self.now, "repo": self.repo, "kind": alert.kind, "action": action,
                                  "issue_number": number, "title": alert.title, "body": body,
                                  "dry_run": not self.live})

    def sync(self, alerts: list[Alert]) -> list[dict]:
        """Bring each alert's issue in line with it; returns the state changes recorded."""
        if self.live:
            try:
                issues = self.github.paginate(f"/repos/{self.repo}/issues", {
                    "state": "open", "labels": ",".join(self.labels), "per_page": 100})
                found = self._open_issues(issues, {a.kind for a in alerts})
            except GitHubError as e:
                if not unavailable(e):
                    raise
                self._down(e, len(alerts))
                return []
            current = {kind: _UNKNOWN if mine is _UNKNOWN else mine[0] if mine else None
                       for kind, mine in found.items()}
        else:
            found, current = {}, self._dry_state()
        rows = []
        for i, a in enumerate(alerts):
            if current.get(a.kind) is _UNKNOWN:
                continue
            try:
                rows += self._close_duplicates(a, (found.get(a.kind) or [])[1:], current.get(a.kind))
                rows += self._one(a, current.get(a.kind))
            except GitHubError as e:  # one alert's trouble does not hold back the others, unless GitHub is down
                if unavailable(e):
                    self._down(e, len(alerts) - i)
                    break
                self.log(f"alert {a.kind}: GitHub refused or failed ({e}); next check tries again")
        return rows

    @staticmethod
    def _mine(issues: list[dict], kind: str) -> list[dict]:
        """The open issues of `kind`, oldest first: more than one when two checks raced to open it
        (overlapping runs, or two deployments on one repository) or a human reopened an old one."""
        return sorted((i for i in issues if marker(kind) in (i.get("body") or "")), key=lambda i: i["number"])

    @classmethod
    def _find(cls, issues: list[dict], kind: str) -> dict | None:
        mine = cls._mine(issues, kind)
        return mine[0] if mine else None

    def _close_duplicates(self, alert: Alert, duplicates: list[dict], kept: dict) -> list[dict]:
        """Close every open issue of the alert but the oldest, in this check (as upstream closes all
        but one): a firing alert keeps the oldest up to date, and a cleared one closes it next.
        Said, then closed (see `_say`): a close that failed is tried again at the next check, and
        its comment, already there, is not posted again."""
        if not duplicates:
            return []
        said = (f"Duplicate of #{kept['number']}, which this alert keeps up to date; closed." if alert.firing
                else "The condition cleared; closed.")
        rows = []
        for issue in duplicates:
            self._close(issue, alert.kind, said)
            rows.append(self._row(alert, DUPLICATE_CLOSED, issue["number"], issue["body"]))
        return rows

    def _close(self, issue: dict, kind: str, said: str) -> None:
        """Say, then close; an issue a human reopened since it was last said is said again."""
        self._say(issue["number"], said, undone_by="reopened")
        self._write(f"close issue #{issue['number']} of {kind}", "PATCH", f"issues/{issue['number']}",
                    {"state": "closed", "state_reason": "completed"})

    def _open_issues(self, listed: list[dict], kinds: set[str]) -> dict[str, list[dict] | dict]:
        """Per kind, its open issues oldest first: those the label listing shows, and those the
        table says the alert opened that it misses (a human removed the label), so that the oldest
        is kept and the others closed whichever of them carry the label; `_UNKNOWN` for a kind
        one of whose issues GitHub would not show."""
        numbers = {i["number"] for i in listed}
        unlisted = {kind: [n for n in mine if n not in numbers] for kind, mine in self._recorded_open(kinds).items()}
        found: dict[str, list[dict] | dict] = {}
        for kind in kinds:
            extra = self._unlabelled(kind, unlisted.get(kind, []))
            found[kind] = extra if extra is _UNKNOWN else sorted(
                [*self._mine(listed, kind), *extra], key=lambda i: i["number"])
        return found

    def _recorded_open(self, kinds: set[str]) -> dict[str, list[int]]:
        """Per kind, the issues the table says were opened or updated and not closed since (as the
        alert's issue or as a duplicate: two racing checks each record the one they opened, and
        either may be the one closed as the other's duplicate)."""
        numbers: dict[str, list[int]] = {}
        for r in history(self.lake, self.now):
            if (r["dry_run"] or r["kind"] not in kinds or r["repo"] != self.repo  # (alerts.repo may change)
                    or r["issue_number"] is None):
                continue
            mine = numbers.setdefault(r["kind"], [])
            mine[:] = [n for n in mine if n != r["issue_number"]]
            if r["action"] not in CLOSING_ACTIONS:
                mine.append(r["issue_number"])
        return numbers

    def _unlabelled(self, kind: str, numbers: list[int]) -> list[dict] | dict:
        """Of the issues the table knows as `kind`'s that the label listing missed, those still
        open with the marker: they stay the alert's, label or not. One closed, deleted or edited
        by someone else is recorded so (`LEFT`), and not looked up again."""
        found = []
        for number in numbers:
            try:
                issue = self.github.request("GET", f"/repos/{self.repo}/issues/{number}").json()
            except GitHubError as e:
                if unavailable(e):  # the whole check waits (`sync`)
                    raise
                if e.status not in (404, 410):  # unknown: opening another could duplicate it, so this kind waits
                    self.log(f"alert {kind}: issue #{number} could not be read ({e}); next check tries again")
                    return _UNKNOWN
                issue = {}  # gone (deleted, or transferred away): not the alert's
            if issue.get("state") == "open" and marker(kind) in (issue.get("body") or ""):
                found.append(issue)
            else:
                record(self.lake, {"at": self.now, "repo": self.repo, "kind": kind, "action": LEFT,
                                   "issue_number": number, "title": issue.get("title") or "",
                                   "body": issue.get("body") or "", "dry_run": False})
        return found

    def _dry_state(self) -> dict[str, dict]:
        """Per kind, the issue a dry run would have open, from the dry-run rows of the table."""
        state: dict[str, dict | None] = {}
        for r in history(self.lake, self.now):
            if r["dry_run"]:
                state[r["kind"]] = None if r["action"] == "closed" else {"number": None, "body": r["body"]}
        return {k: v for k, v in state.items() if v}

    def _one(self, alert: Alert, issue: dict | None) -> list[dict]:
        body = issue_body(alert)
        if alert.firing and issue is None:
            return [self._open(alert, body)]
        if alert.firing and firing_in(issue["body"]) != set(alert.lines):
            comment = change_comment(issue["body"], alert)
            if comment:
                self._say(issue["number"], comment)
            self._write(f"update issue #{issue['number']} of {alert.kind}: {comment}", "PATCH",
                        f"issues/{issue['number']}", {"title": alert.title, "body": body})
            return [self._row(alert, "updated", issue["number"], body)]
        if not alert.firing and issue is not None:
            self._close(issue, alert.kind, "The condition cleared; closed.")
            return [self._row(alert, "closed", issue["number"], issue["body"])]
        return []

    def _say(self, number: int, text: str, undone_by: str | None = None) -> None:
        """Comment on an issue about to change. Posted before the change, with a marker, and not
        posted when the newest marked comment is already this one: a check killed after the
        comment (or the change) finds it, and a check killed before finds the change still to
        make, so the change is said exactly once; unless the issue had `undone_by` since (a close
        a human undid: `comments.comment_once`). A comment GitHub refused is only logged, and the
        change made without it; GitHub down stops the check (`sync`)."""
        if not self.live:
            return
        try:
            comment_once(self.github, self.repo, number, said_marker(text), text, newest_of=SAID, undone_by=undone_by)
        except GitHubError as e:
            if unavailable(e):  # the change would wait out the same retries: the whole check waits (`sync`)
                raise
            self.log(f"issue #{number}: its comment was not posted ({e}); the change itself is made")

    def _write(self, what: str, method: str, path: str, body: dict) -> None:
        if not self.live:
            if what:
                self.log(f"DRY RUN would {what}")
            return
        self.github.request(method, f"/repos/{self.repo}/{path}", json_body=body, retry_ambiguous=method != "POST")

    def _open(self, alert: Alert, body: str) -> dict:
        if not self.live:
            self.log(f"DRY RUN would open an issue: {alert.title}\n{body}")
            return self._row(alert, "opened", None, body)
        try:
            issue = self.github.request("POST", f"/repos/{self.repo}/issues", retry_ambiguous=False, json_body={
                "title": alert.title, "body": body, "labels": list(self.labels)}).json()
        except GitHubError as e:
            issues = self.github.paginate(f"/repos/{self.repo}/issues", {
                "state": "open", "labels": ",".join(self.labels), "per_page": 100}) if e.ambiguous else []
            issue = self._find(issues, alert.kind)
            if issue is None:
                raise
        self.log(f"opened issue #{issue['number']}: {alert.title}")
        return self._row(alert, "opened", issue["number"], body)
