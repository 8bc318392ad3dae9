"""Re-runs from the upstream pull request's Checks tab, as the cross-repo CI relay does them.

`check_run` `rerequested` (one check's "Re-run", or "Re-run failed checks", which sends one per
failed check) re-runs the failed jobs of that check run's downstream run
(`POST /repos/<repo>/actions/runs/<run_id>/rerun-failed-jobs`): the repository comes from the
name `crcr/<owner>/<repo>/...`, the run from `external_id`. `check_suite` `rerequested` ("Re-run
all checks") lists the suite's check runs as GitHub shows them (the newest of each name: a superseded
downstream run is not started again), keeps one per (repository, run) and re-runs every job
of each (`POST .../actions/runs/<run_id>/rerun`, as the relay does: all checks, passed ones too).
Only L3 and L4 repositories (the ones that have check runs) are re-run; a check run naming any
other repository is refused. Each is one run-level call, since GitHub refuses to re-run single
jobs of a run that is running. Its 403 "already running" is a no-op.

Never twice for the same request: each (delivery, repository, run) is claimed in the
`relay_actions` ledger before the POST. A POST without a clear answer (a 5xx, a timeout) is not
resent blindly, nor a claim a crash left without an outcome: the run is read first
(`GET .../actions/runs/<id>`), and an attempt started since the claim means the re-run landed.
"Already running" alone would not tell: a re-run of jobs that fail fast may be over by then.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable

from resources.github import GitHubError, GitHubResource
from resources.lake import Lake
from torchci_assets.config import TorchciConfig
from torchci_assets.relay.check_runs import ACTIONS_TABLE, record_action, stale_claims
from torchci_assets.relay.dispatch import CLAIM_SETTLE_S, ledger_rows, settle_claim, target_states
from torchci_assets.relay.pull_requests import repo_from_check_run, run_id_from_external_id

# Pages of 100 check runs listed for one suite, at most.
MAX_SUITE_PAGES = 10
# How far GitHub's clock may run behind ours when a run's start is compared with our claim.
CLAIM_CLOCK_S = dt.timedelta(seconds=5)


def suite_check_runs(github: GitHubResource, config: TorchciConfig, suite_id: int) -> list[dict]:
    """The check runs a check suite shows: the newest of each name (GitHub's `filter=latest`, as the
    relay lists them). The older ones of a name belong to superseded downstream runs (a pull request
    closed and reopened on the same head starts a new one), which "Re-run all checks" must not
    start again. GitHub answers `{total_count, check_runs}` pages."""
    runs: list[dict] = []
    for page in range(1, MAX_SUITE_PAGES + 1):
        data = github.request("GET", f"/repos/{config.upstream_repo}/check-suites/{suite_id}/check-runs",
                              params={"per_page": 100, "page": page, "filter": "latest"}).json()
        batch = data.get("check_runs") or []
        runs += batch
        if not batch or len(runs) >= int(data.get("total_count") or 0):
            return runs
    raise GitHubError(None, f"check suite {suite_id}: more than {MAX_SUITE_PAGES} pages of check runs")


def rerun_targets(check_runs: list[dict]) -> list[tuple[str, int]]:
    """(repository, run id) of each relay check run, once each, in order of appearance."""
    seen: list[tuple[str, int]] = []
    for run in check_runs:
        repo = repo_from_check_run(str(run.get("name") or ""))
        run_id = run_id_from_external_id(run.get("external_id"))
        if repo and run_id and (repo.lower(), run_id) not in {(r.lower(), i) for r, i in seen}:
            seen.append((repo, run_id))
    return seen


def handle_rerequest(github: GitHubResource, lake: Lake, config: TorchciConfig, event: str, payload: dict,
                     delivery_id: str, run_id: str, log: Callable[[str], None] = lambda s: None,
                     settle_s: float = CLAIM_SETTLE_S) -> dict[str, str]:
    """Re-run what a `check_run` / `check_suite` `rerequested` asks; returns the outcome per
    `<repo>#<run id>`."""
    if event == "check_run":
        check_run = payload.get("check_run") or {}
        targets, sha = rerun_targets([check_run]), str(check_run.get("head_sha") or "")
    else:
        suite = payload.get("check_suite") or {}
        targets, sha = rerun_targets(suite_check_runs(github, config, int(suite["id"]))), str(suite.get("head_sha") or "")
    return {f"{repo}#{rid}": rerun_downstream_run(github, lake, config, repo, rid, sha, delivery_id, run_id, log,
                                                  settle_s, all_jobs=event != "check_run")
            for repo, rid in targets}


def rerun_downstream_run(github: GitHubResource, lake: Lake, config: TorchciConfig, repo: str, downstream_run: int,
                         sha: str, delivery_id: str, run_id: str, log: Callable[[str], None] = lambda s: None,
                         settle_s: float = CLAIM_SETTLE_S, all_jobs: bool = False) -> str:
    entry = config.entry_for(repo)
    base = {"action": "rerun", "key": f"rerun|{delivery_id}|{repo.lower()}|{downstream_run}", "sha": sha or "none",
            "upstream_repo": config.upstream_repo, "downstream_repo": repo, "external_id": str(downstream_run),
            "delivery_id": delivery_id, "run_id": run_id}
    if entry is None or entry.level not in ("L3", "L4"):
        log(f"re-run of {repo} run {downstream_run} refused: {repo} is "
            f"{entry.level if entry else 'not allowlisted'}, re-runs are for L3 and L4")
        record_action(lake, {**base, "outcome": "refused", "error": "not L3 or L4"})
        return "refused"
    rows = [r for r in ledger_rows(lake, base["sha"], table=ACTIONS_TABLE) if r["action"] == "rerun"]
    if target_states(rows, field="key").get(base["key"], "open") == "ok":
        return "already_rerun"
    stale = stale_claims(rows, base["key"], mine=run_id)  # left by a crash: the run is read first (see the docstring)
    if stale is None:
        return "in_flight"
    path = f"/repos/{repo}/actions/runs/{downstream_run}/" + ("rerun" if all_jobs else "rerun-failed-jobs")
    if github.dry_run:
        log(f"DRY RUN: would POST {github.api_url.rstrip('/')}{path} (set GITHUB_TOKEN to send)")
        github.request("POST", path)
        record_action(lake, {**base, "outcome": "dry_run"})
        return "dry_run"
    if stale and _started_since(github, repo, downstream_run, min(r["attempted_at"] for r in rows
                                                                  if r.get("attempt_id") in stale) - CLAIM_CLOCK_S):
        record_action(lake, {**base, "outcome": "ok", "error": "found: the run restarted after the claim",
                             "attempt_id": sorted(stale)[0]})
        log(f"{repo} run {downstream_run}: an interrupted re-run had landed; not sent again")
        return "already_rerun"
    attempt_id = uuid.uuid4().hex
    lost = settle_claim(lambda outcome: record_action(lake, {**base, "outcome": outcome, "attempt_id": attempt_id}),
                        lambda: [r for r in ledger_rows(lake, base["sha"], table=ACTIONS_TABLE)
                                 if r["action"] == "rerun" and r.get("attempt_id") not in stale],
                        base["key"], attempt_id, settle_s, field="key")
    if lost:
        return "already_rerun" if lost == "already_acknowledged" else lost
    return _post(github, lake, path, base, attempt_id, log)


def _started_since(github: GitHubResource, repo: str, run_id: int, since: dt.datetime) -> bool:
    """Whether the run's latest attempt started at or after `since` (GitHub's clock against ours:
    a re-run takes seconds to start, more than the clocks differ)."""
    run = github.request("GET", f"/repos/{repo}/actions/runs/{run_id}").json()
    started = run.get("run_started_at")
    try:
        return started is not None and dt.datetime.fromisoformat(started.replace("Z", "+00:00")) >= since
    except (AttributeError, ValueError):
        return False


def _post(github: GitHubResource, lake: Lake, path: str, base: dict, attempt_id: str,
          log: Callable[[str], None]) -> str:
    since = dt.datetime.now(dt.timezone.utc) - CLAIM_CLOCK_S
    repo, run = base["downstream_repo"], int(base["external_id"])
    try:
        github.request("POST", path, retry_ambiguous=False)
    except GitHubError as exc:
        if exc.status == 403 and "already running" in str(exc).lower():
            record_action(lake, {**base, "outcome": "ok", "error": "already running", "attempt_id": attempt_id})
            log(f"{repo} run {run} is already running: nothing to re-run")
            return "already_running"
        if exc.ambiguous and not _started_since(github, repo, run, since):
            raise  # the claim stays open: once stale, the next attempt reads the run again
        if not exc.ambiguous:
            outcome = "refused" if exc.status is not None and 400 <= exc.status < 500 else "failed"
            record_action(lake, {**base, "outcome": outcome, "error": str(exc)[:500], "attempt_id": attempt_id})
            if outcome == "failed":
                raise
            return outcome
    record_action(lake, {**base, "outcome": "ok", "attempt_id": attempt_id})
    log(f"re-running {'every job' if path.endswith('/rerun') else 'the failed jobs'} of {repo} run {run}")
    return "rerun"
