"""From verdicts to actions on GitHub, paced, capped and exactly once, recorded in the ledger.

Rules (PyTorch's SIGNAL_ACTIONS.md), counted from the `autorevert_events` ledger, dry-run rows
against dry-run rows and live ones against live ones (so a dry run never blocks the real thing):
  restart  per (workflow, commit): none within `restart_interval_min` of the last successful
           one; after k failed ones in a row, wait `backoff_min[k-1]` (20, 40, 60 min) from the
           last; at most `max_restarts_per_commit` per commit in all;
  revert   at most one proposal per commit, ever; one GitHub did not post (an error, and no
           comment with its marker) is tried again with the restarts' backoff and cap, unless
           GitHub refused it (422: the same comment would be refused again), recorded once.

Exactly once: a live action writes `intent`, calls GitHub, writes `done`. If the run dies in
between, the next run finds the open intent and asks GitHub what happened before anything
else: a restart took effect when the run's attempt number moved past the one recorded; a
proposal was posted when the culprit's pull request has a comment with its marker. Writes to
GitHub that time out are not resent blindly either (`retry_ambiguous=False`) but checked the
same way. Without credentials, or with `autorevert.enabled: false`, nothing is sent: each
decision is logged as "DRY RUN ..." and recorded with `dry_run` true.

The culprit's pull request is found as upstream finds it: from the commit's message first (the
merge bot names the pull request it lands, or the one it reverts), then GitHub's
commit-to-pull-requests lookup, then GitHub's search; of the last two only a pull request into
the base branch counts (the one the message names may target a ghstack base branch). A proposal
that may not ask for a revert (the pull request opted out or is still open, or the commit is a
revert) notifies instead: on the pull request, or on the `notify_issue_number` issue when one is
configured; the ledger records which.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field

from resources.github import GitHubError, GitHubResource, outage_line, unavailable
from resources.lake import Lake
from torchci_assets.derived.guardians import ledger
from torchci_assets.derived.guardians.culprits import Verdict
from torchci_assets.derived.guardians.proposal import (has_marker, no_merge_bot, notify_only, pull_from_message,
                                                       pull_into, revert_comment, search_query)
from torchci_assets.derived.guardians.signals import MainHistory
from torchci_assets.guardian_config import AutorevertConfig


@dataclass(frozen=True)
class Planned:
    """One action for GitHub, coalesced from every signal that asks for it."""

    action: str  # restart or revert
    commit_sha: str
    workflow: str  # the restart's workflow; "" for a revert
    signals: tuple[tuple[str, str], ...]  # (workflow, signal key)
    run: tuple[int, int] | None = None  # (run_id, run_attempt) to restart
    mode: str = "rerun"  # rerun (the whole run) or rerun-failed-jobs


@dataclass
class Report:
    taken: list[dict] = field(default_factory=list)  # done rows written by this pass
    skipped: list[tuple[Planned, str]] = field(default_factory=list)
    recovered: list[dict] = field(default_factory=list)
    left_open: list[dict] = field(default_factory=list)  # intents GitHub's answers could not settle
    unavailable: str = ""  # GitHub was down: the pass stopped there, and what waits for the next


def _failed_on(v: Verdict, sha: str) -> bool:
    """The restart re-runs a red commit (the first red, to confirm it or for the infrastructure
    check): only its failed jobs are wanted again."""
    ev = v.signal.events.get(sha)
    return ev is not None and ev.outcome == "fail"


def _run_to_restart(v: Verdict, sha: str, history: MainHistory) -> tuple[int, int] | None:
    """A red commit's re-run is of the failed jobs of the very run the signal failed in (a commit
    may have several runs of one workflow: a second cron, a manual dispatch), at the newest
    attempt of that run seen, which the restart must move past to count as done; a commit inside
    a gap did not run the signal, so any run of the workflow there will do: the newest."""
    ev = v.signal.events.get(sha)
    if _failed_on(v, sha) and ev.run_id is not None:
        return ev.run_id, history.attempts.get(ev.run_id, ev.run_attempt or 1)
    return history.runs.get((v.signal.workflow, sha))


def plan(verdicts: list[Verdict], history: MainHistory) -> list[Planned]:
    """Restarts per (workflow, commit, run) and reverts per culprit, each with its signals."""
    restarts: dict[tuple[str, str, tuple[int, int] | None], list] = {}
    reverts: dict[str, list] = {}
    for v in verdicts:
        source = (v.signal.workflow, v.signal.key)
        if v.kind == "confirmed":
            reverts.setdefault(v.culprit, []).append(source)
        for sha in v.restarts:
            confirm = _failed_on(v, sha)
            restarts.setdefault((v.signal.workflow, sha, _run_to_restart(v, sha, history)), []).append((source, confirm))
    out = [Planned("revert", sha, "", tuple(sorted(set(src)))) for sha, src in sorted(reverts.items())]
    for (workflow, sha, run), items in sorted(restarts.items(), key=lambda kv: (*kv[0][:2], kv[0][2] or (0, 0))):
        mode = "rerun-failed-jobs" if all(confirm for _, confirm in items) else "rerun"
        out.append(Planned("restart", sha, workflow, tuple(sorted({s for s, _ in items})), run, mode))
    return out


# A restart younger than this is taken to be still running.
IN_FLIGHT = dt.timedelta(hours=3)


def restarts_in_flight(acts: list[dict], history: MainHistory, now: dt.datetime, dry_run: bool) -> frozenset:
    """(workflow, sha) of restarts younger than IN_FLIGHT whose run commit_health does not show
    past the attempt restarted yet. Between the re-run starting and the refresh that shows it
    pending (webhooks, then the refresh) only the ledger knows of it; without it the next pass
    would spend the bisection's places a second time."""
    out = set()
    for a in acts:
        if (a["action"] == "restart" and bool(a["dry_run"]) == dry_run
                and (a.get("open") or a.get("outcome") in ("ok", "dry_run")) and now - a["at"] < IN_FLIGHT
                and history.attempts.get(a.get("run_id"), 0) <= (a.get("run_attempt") or 0)):
            out.add((a["workflow"], a["commit_sha"]))
    return frozenset(out)


def _mode(act: dict) -> str:
    """The restart's endpoint, the first word of its notes (`rerun`: the whole run)."""
    return (act.get("notes") or "").split(":")[0]


def whole_reruns(acts: list[dict], dry_run: bool) -> frozenset:
    """(workflow, sha, run id, attempt re-run) of every whole-run re-run made (dry run's or
    live ones): once the lake shows the run past that attempt, a gap commit whose job did not
    run in it cannot give the signal (culprits._no_signal)."""
    return frozenset((a["workflow"], a["commit_sha"], a["run_id"], a.get("run_attempt") or 1) for a in acts
                     if a["action"] == "restart" and bool(a["dry_run"]) == dry_run and a.get("run_id") is not None
                     and a.get("outcome") in ("ok", "dry_run") and _mode(a) == "rerun")


def _minutes_since(row: dict, now: dt.datetime) -> float:
    return (now - row["at"]).total_seconds() / 60


def _mine(acts: list[dict], p: Planned, dry_run: bool) -> list[dict]:
    """Earlier actions of p's kind on p's commit, oldest first; a `not_sent` one never happened."""
    return sorted((a for a in acts if a["action"] == p.action and a["commit_sha"] == p.commit_sha
                   and bool(a["dry_run"]) == dry_run and a.get("outcome") != "not_sent"), key=lambda a: a["at"])


def _backoff(same: list[dict], now: dt.datetime, cfg: AutorevertConfig) -> tuple[int, str]:
    """(failed attempts in a row at the end of `same`, why to wait for the next ("" when it may go))."""
    failed_in_row = 0
    for a in reversed(same):
        if not a.get("failed"):
            break
        failed_in_row += 1
    if not failed_in_row:
        return 0, ""
    waited = _minutes_since(same[-1], now)
    wait = cfg.backoff_min[min(failed_in_row, len(cfg.backoff_min)) - 1]
    return failed_in_row, (f"backoff: {failed_in_row} failed attempt(s), {waited:.0f} of {wait} min waited"
                           if waited < wait else "")


def restart_block(acts: list[dict], p: Planned, now: dt.datetime, cfg: AutorevertConfig, dry_run: bool) -> str:
    """Why the restart must wait ("" when it may go now)."""
    mine = _mine(acts, p, dry_run)
    if len(mine) >= cfg.max_restarts_per_commit:
        return f"cap: {len(mine)} restarts of this commit already"
    same = [a for a in mine if a["workflow"] == p.workflow]
    if not same:
        return ""
    if any(a.get("open") for a in same):  # GitHub may have restarted it: never twice on a guess
        return "in doubt: an earlier restart's outcome is not known yet (GitHub has not shown the run)"
    failed_in_row, why = _backoff(same, now, cfg)
    if failed_in_row:
        return why
    waited = _minutes_since(same[-1], now)
    if waited < cfg.restart_interval_min:
        return f"paced: restarted {waited:.0f} min ago"
    return ""


def revert_block(acts: list[dict], p: Planned, now: dt.datetime, cfg: AutorevertConfig, dry_run: bool) -> str:
    """Why no proposal goes now: one was made (or is in doubt), or the last ones failed and the
    backoff of restarts applies before the next try, up to `max_restarts_per_commit` tries. A
    failed proposal is one GitHub was seen not to post (its marker is absent), so trying again
    cannot make a second comment."""
    mine = _mine(acts, p, dry_run)
    made = [a for a in mine if not a.get("failed")]
    if made:
        return f"already proposed ({made[0].get('outcome') or 'in flight'})"
    if any(a.get("outcome") == "refused" for a in mine):
        return "GitHub refused the proposal: not tried again"
    if len(mine) >= cfg.max_restarts_per_commit:
        return f"cap: {len(mine)} failed proposals for this commit already"
    return _backoff(mine, now, cfg)[1]


class Guardian:
    """One pass of the autorevert over `repo`: recover, then act on the plan."""

    def __init__(self, github: GitHubResource, lake: Lake, repo: str, cfg: AutorevertConfig,
                 now: dt.datetime, log: Callable[[str], None] = lambda s: None, base: str = "main"):
        self.github, self.lake, self.repo, self.cfg, self.now, self.log = github, lake, repo, cfg, now, log
        self.base = base  # the branch main's commits land on: pull requests into others are not the culprit's
        self.live = cfg.enabled and not github.dry_run
        self.down: GitHubError | None = None  # GitHub gave no answer or a 5xx through a call's retries

    def _noted(self, e: GitHubError) -> None:
        """Remember that GitHub is down: every later call of the pass would wait out the same retry
        budget in vain, so the pass does nothing more on GitHub."""
        if unavailable(e) and self.down is None:
            self.down = e

    def _wait(self, report: Report, waiting: list[Planned]) -> None:
        """The actions left when GitHub went down: skipped, said once; the next pass plans them again."""
        report.unavailable = outage_line(self.down, f"{len(waiting)} action(s)", "the next pass")
        self.log(report.unavailable)
        report.skipped += [(p, report.unavailable) for p in waiting]

    def _row(self, p: Planned, key: str, phase: str, **fields) -> dict:
        return ledger.append(self.lake, {
            "ts": self.now, "at": self.now, "repo": self.repo,
            "action": p.action, "commit_sha": p.commit_sha, "workflow": p.workflow,
            "workflows": sorted({w for w, _ in p.signals}), "source_signal_keys": [k for _, k in p.signals],
            "run_id": p.run[0] if p.run else None, "run_attempt": p.run[1] if p.run else None,
            "key": key, "phase": phase, "dry_run": not self.live, **fields})

    def run(self, planned: list[Planned]) -> Report:
        report = Report()
        acts = ledger.actions(ledger.read(self.lake, self.now))
        if self.live:
            report.recovered = [r for a in acts if a["open"] and not a["dry_run"] and self.down is None
                                for r in self.recover(a)]
            acts = ledger.actions(ledger.read(self.lake, self.now))
        waiting = []  # the actions GitHub being down holds back
        for p in planned:
            why = (restart_block(acts, p, self.now, self.cfg, not self.live) if p.action == "restart"
                   else revert_block(acts, p, self.now, self.cfg, not self.live))
            if not why and p.action == "restart" and p.run is None:
                why = f"no run of {p.workflow} on this commit to restart"
            if why:
                report.skipped.append((p, why))
                continue
            if self.down is not None:
                waiting.append(p)
                continue
            try:
                row = self.restart(p) if p.action == "restart" else self.revert(p)
            except GitHubError as e:  # before any intent was written (finding the pull request)
                self._noted(e)
                if self.down is not None:
                    waiting.append(p)
                else:
                    report.skipped.append((p, f"GitHub: {e}"))
                continue
            (report.taken if row["phase"] == "done" else report.left_open).append(row)
            acts.append({**row, "open": row["phase"] != "done"})
        if self.down is not None:
            self._wait(report, waiting)
        return report

    # ---- restarts ----------------------------------------------------------------------

    def _attempt_now(self, run_id: int) -> int | None:
        try:
            return int(self.github.request("GET", f"/repos/{self.repo}/actions/runs/{run_id}").json()["run_attempt"])
        except GitHubError as e:
            self._noted(e)
            return None
        except (KeyError, ValueError):
            return None

    def restart(self, p: Planned) -> dict:
        key = ledger.new_key()
        what = f"{p.mode} {p.workflow} run {p.run[0]} (attempt {p.run[1]}) of {p.commit_sha[:10]}"
        if not self.live:
            self.log(f"DRY RUN would {what}, for {', '.join(k for _, k in p.signals)}")
            return self._row(p, key, "done", outcome="dry_run", failed=False, notes=p.mode)
        intent = self._row(p, key, "intent", notes=p.mode)
        try:
            self.github.request("POST", f"/repos/{self.repo}/actions/runs/{p.run[0]}/{p.mode}",
                                retry_ambiguous=False)
            outcome, notes = "ok", p.mode
        except GitHubError as e:
            attempt = self._attempt_now(p.run[0]) if e.ambiguous else None
            if e.ambiguous and attempt is None:
                # GitHub may have started the re-run: the intent stays open, blocking like a done
                # restart, until a later pass's recover() reads the run's attempt.
                self.log(f"{what}: no clear answer ({e}), and the run's attempt cannot be read yet; "
                         "left open for the next pass to settle")
                return intent
            outcome = "ok" if attempt is not None and attempt > p.run[1] else "failed"
            notes = f"{p.mode}: {e}"[:500]
        self.log(f"{what}: {outcome}")
        return self._row(p, key, "done", outcome=outcome, failed=outcome == "failed", notes=notes)

    # ---- revert proposals --------------------------------------------------------------

    def _get_or_none(self, path: str) -> dict | None:
        """GitHub's object at `path`, None when it does not know it (404, or 422 for a sha it
        cannot resolve); any other error is raised, to try again at the next pass."""
        try:
            return self.github.request("GET", path).json()
        except GitHubError as e:
            if e.status in (404, 422):
                return None
            raise

    def _pull_request(self, sha: str) -> tuple[dict, bool] | None:
        """(the culprit's pull request, whether the commit reverts it): the one its message names
        when GitHub has it, else the one into the base branch (merged first) of GitHub's lookup,
        else of its search."""
        commit = self._get_or_none(f"/repos/{self.repo}/commits/{sha}")
        ref = pull_from_message(((commit or {}).get("commit") or {}).get("message") or "", self.repo)
        named = self._get_or_none(f"/repos/{self.repo}/pulls/{ref.number}") if ref else None
        if named is not None:
            return named, ref.reverts
        listed = pull_into(self.github.request("GET", f"/repos/{self.repo}/commits/{sha}/pulls").json(), self.base)
        found = listed or self._searched(sha)
        return (found, False) if found else None

    def _searched(self, sha: str) -> dict | None:
        """The first closed pull request into the base branch GitHub's search finds by the commit,
        upstream's last resort when neither the message nor the lookup ties the commit to one. A
        search result is an issue, which does not say its base: the pull request is read for it."""
        for item in self.github.search_issues(search_query(sha, self.repo)):
            pull = self._get_or_none(f"/repos/{self.repo}/pulls/{item['number']}")
            if pull is not None and pull_into([pull], self.base):
                return pull
        return None

    def _comments(self, number: int) -> list[dict]:
        return self.github.paginate(f"/repos/{self.repo}/issues/{number}/comments", {"per_page": 100})

    def revert(self, p: Planned) -> dict:
        key = ledger.new_key()
        no_bot = no_merge_bot(self.repo)
        body = revert_comment(p.commit_sha, list(p.signals), self.cfg.revert_message, self.cfg.revert_classification,
                              request=not no_bot, why=no_bot)
        if not self.live:
            self.log(f"DRY RUN would propose reverting {p.commit_sha[:10]} on its pull request:\n{body}")
            return self._row(p, key, "done", outcome="dry_run", failed=False, notes=body)
        found = self._pull_request(p.commit_sha)
        if found is None:
            self.log(f"{p.commit_sha[:10]} has no pull request: no revert proposal")
            return self._row(p, key, "done", outcome="no_pr", failed=False, notes="no pull request for the commit")
        pull, reverts = found
        number, why = pull["number"], notify_only(pull, reverts) or no_bot
        thread, issue = number, None
        if why:
            issue = self.cfg.notify_issue_number
            thread = issue or number
            self.log(f"pull request #{number} of {p.commit_sha[:10]} is {why}: a notification on "
                     f"{'issue' if issue else 'pull request'} #{thread}, no revert request")
            body = revert_comment(p.commit_sha, list(p.signals), self.cfg.revert_message,
                                  self.cfg.revert_classification, request=False, pull=number, why=why)
        self._row(p, key, "intent", pr_number=number, notify_issue=issue, notes=body)
        done = self._post_once(thread, p.commit_sha, body)
        if why and done["outcome"] == "ok":
            done["outcome"] = "notified"
        return self._row(p, key, "done", pr_number=number, notify_issue=issue, **done)

    def _post_once(self, number: int, sha: str, body: str) -> dict:
        """Comment `body` on issue or pull request `number` unless a comment with `sha`'s marker is
        there already (a notification issue holds many culprits' comments: the marker names the
        commit)."""
        if has_marker(self._comments(number), sha):
            return {"outcome": "ok", "failed": False, "notes": "found an earlier proposal"}
        try:
            self.github.request("POST", f"/repos/{self.repo}/issues/{number}/comments", json_body={"body": body},
                                retry_ambiguous=False)
        except GitHubError as e:
            if e.status == 422:  # the comment itself is invalid: sending it again changes nothing
                self.log(f"GitHub refused the proposal for {sha[:10]} on #{number}: {e}")
                return {"outcome": "refused", "failed": True, "notes": str(e)[:500]}
            if not (e.ambiguous and has_marker(self._comments(number), sha)):
                return {"outcome": "failed", "failed": True, "notes": str(e)[:500]}
        self.log(f"posted the proposal for {sha[:10]} on #{number}")
        return {"outcome": "ok", "failed": False, "notes": body}

    # ---- crashes -----------------------------------------------------------------------

    def recover(self, act: dict) -> list[dict]:
        """Close an intent a dead run left open, with what GitHub shows happened; while GitHub
        cannot tell, it stays open and blocks the action like a done one."""
        p = Planned(act["action"], act["commit_sha"], act.get("workflow") or "", (),
                    (act["run_id"], act["run_attempt"]) if act.get("run_id") is not None else None,
                    _mode(act) if act["action"] == "restart" else "rerun")
        try:
            if p.action == "restart":
                attempt = self._attempt_now(p.run[0])
                if attempt is None:
                    return []
                happened = attempt > p.run[1]
            else:
                happened = has_marker(self._comments(act.get("notify_issue") or act["pr_number"]), p.commit_sha)
        except GitHubError as e:
            self._noted(e)
            self.log(f"cannot tell yet what became of an interrupted {p.action} of {p.commit_sha[:10]}: {e}")
            return []
        outcome = "ok" if happened else "not_sent"
        self.log(f"recovered an interrupted {p.action} of {p.commit_sha[:10]}: {outcome}")
        return [self._row(p, act["key"], "done", pr_number=act.get("pr_number"), notify_issue=act.get("notify_issue"),
                          outcome=outcome, failed=False,
                          workflows=act.get("workflows"), source_signal_keys=act.get("source_signal_keys"),
                          notes=f"{p.mode}: recovered after an interrupted run" if p.action == "restart"
                          else "recovered after an interrupted run")]
