"""Lost webhooks: a head whose jobs are missing or stuck in progress is read from the REST API.

GitHub does not redeliver a webhook that failed, so a lost `completed` delivery would leave a job
pending in the lake, and its comment frozen, forever. Before the comments are written, a head
  - with no job at all `missing_after` after the pull request's last update, or
  - with a job queued or in progress for longer than `stuck_after` (PyTorch's test jobs time out
    after 4 hours, so the default of 5 hours is never a job still legitimately running)
has its workflow runs (`GET /repos/{repo}/actions/runs?head_sha=`) and their latest jobs
(`GET /repos/{repo}/actions/runs/{id}/jobs`) listed, and the jobs' states in the comment are
GitHub's; a workflow's newest run that has no job and waits for approval (a first-time
contributor's) is listed as awaiting approval. A job that failed this way has no classified log yet
and is marked as read from the REST API, until its webhook or a backfill brings the rest. Its test
reports are looked up in the lake by its id, as `pr_jobs` will look them up once the record below is
ingested, so a test job none of whose reports landed is judged as the lake will judge it
(`classify.infra_reason`): an infrastructure failure once they are overdue, a new failure before.
What GitHub showed of each job it changed, and of each run it listed as awaiting approval, is
written into the archive as `rest` records, as gap repair writes them (`backfill/shapes.py`), so
the refresh ingests it: `pr_jobs`, and the HUD page built from it, then say what the comment says,
and the head is no longer stale, so it is read once, not at every refresh. The delivery ids are gap repair's and the backfill's, so a record
written twice, or by both, is one row; the state lattice keeps a later webhook's completion (it
arrives after the instant the record is filed at), and never lets a record of an earlier state
undo a later one the lake has.
Without credentials nothing is read (a dry run logs which heads would be); nor for a partition
older than yesterday (a backfill), whose comment is the lake's view of that day.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass

from resources.github import GitHubError, GitHubResource, unavailable
from resources.storage import Store
from torchci_assets.backfill import shapes
from torchci_assets.backfill.files import Part
from torchci_assets.derived.drci.classify import AWAITING_CONCLUSIONS, HeadJob
from torchci_assets.ingest.jobnames import parse_job_name

FAILING = ("failure", "timed_out", "cancelled", "startup_failure")
_SHARD = re.compile(r", \d+, \d+(,|\))")


@dataclass(frozen=True)
class RefreshLimits:
    missing_after: dt.timedelta = dt.timedelta(minutes=30)
    stuck_after: dt.timedelta = dt.timedelta(minutes=300)


def job_group(workflow: str, name: str) -> str:
    """`pr_jobs`' job group: the workflow and the job name without its shard numbers."""
    return workflow + " / " + _SHARD.sub(r"\1", name)


def stale_reason(jobs: list[HeadJob], updated_at: dt.datetime | None, limits: RefreshLimits,
                 now: dt.datetime, done: int = 0) -> str | None:
    """Why a head must be read from the REST API, or None; `done`: its finished jobs not in `jobs`."""
    if not jobs and not done:
        if updated_at is not None and now - updated_at > limits.missing_after:
            return f"no job seen {int((now - updated_at).total_seconds() // 60)} min after its last update"
        return None
    stuck = [j for j in jobs if j.state == "pending" and (j.started_at or updated_at) is not None
             and now - (j.started_at or updated_at) > limits.stuck_after]
    if stuck:
        return f"{len(stuck)} job(s) pending for more than {int(limits.stuck_after.total_seconds() // 60)} min"
    return None


def _list(github: GitHubResource, path: str, key: str, params: dict) -> tuple[list[dict], int]:
    """Every item under `key` of a paginated REST answer that wraps its list in an object."""
    items, requests = [], 0
    for resp in github.pages(path, params):
        requests += 1
        items.extend(resp.json().get(key) or [])
    return items, requests


def _state(job: dict) -> str:
    if job.get("status") != "completed":
        return "pending"
    conclusion = job.get("conclusion") or ""
    return "failure" if conclusion in FAILING else "skipped" if conclusion in ("skipped", "neutral") else "success"


def merge_rest_jobs(jobs: list[HeadJob], runs: list[dict], rest_jobs: dict[int, list[dict]],
                    learned: list[tuple[dict, dict, bool]] | None = None,
                    awaiting: list[dict] | None = None) -> int:
    """Apply GitHub's job states to `jobs` (matched by workflow and name; new ones appended); returns
    how many changed. As PyTorch's Dr. CI reads them: only each workflow's newest run counts (an
    older run's copy of a job says nothing of the head now), and GitHub's job replaces the lake's
    when it is pending there or GitHub's is a later attempt (a higher job id: its webhook was lost).
    Each job applied is appended to `learned` as (GitHub's job, its run, whether the lake heard of
    that job id), and each run listed as awaiting approval to `awaiting`, for `record`."""
    learned = [] if learned is None else learned
    by_key = {(j.workflow, j.name): j for j in jobs}
    run_of = {r["id"]: r for r in runs}
    newest = _newest_runs(runs)
    changed = _add_awaiting(jobs, [r for r in runs if r["id"] in newest], rest_jobs, awaiting)
    for run_id, listed in rest_jobs.items():
        if run_id not in newest:
            continue
        for rj in listed:
            workflow = rj.get("workflow_name") or run_of.get(run_id, {}).get("name") or ""
            state = _state(rj)
            mine = by_key.get((workflow, rj["name"]))
            if mine is None:
                mine = HeadJob(rj["name"], job_group(workflow, rj["name"]), state, workflow=workflow)
                jobs.append(mine)
                by_key[(workflow, rj["name"])] = mine
                learned.append((rj, run_of.get(run_id, {}), False))
            elif mine.state != state and (mine.state == "pending" or (mine.job_id or 0) < rj["id"]):
                learned.append((rj, run_of.get(run_id, {}), mine.job_id == rj["id"]))
            else:
                continue
            _take(mine, rj, run_of.get(run_id, {"id": run_id}), state)
            changed += 1
    return changed


def _take(mine: HeadJob, rj: dict, run: dict, state: str) -> None:
    """Give `mine` what GitHub's job `rj` of `run` says of it: its state and ids, its name's build environment
    and test config (a test job's reports are looked up: `inputs.attach_results`), and its times and its
    run's end (whether its reports are overdue: `classify.results_overdue`)."""
    names = parse_job_name(rj["name"])
    mine.state, mine.job_id, mine.run_id, mine.from_rest = state, rj["id"], run["id"], True
    mine.run_attempt = rj.get("run_attempt") or run.get("run_attempt")
    # GitHub's run as it is now, at its latest attempt: a later attempt ends later still, so never too soon
    mine.run_status = run.get("status")
    mine.run_ended_at = shapes.parse_time(run.get("updated_at")) if run.get("status") == "completed" else None
    mine.cancelled = state == "failure" and rj.get("conclusion") == "cancelled"
    mine.build_env, mine.test_config = names.build_env, names.test_config
    # what the lake said of it was of its pending state, or of an earlier attempt
    mine.failure_class = mine.infra_reason = mine.failure_line = None
    mine.started_at = shapes.parse_time(rj.get("started_at")) or mine.started_at
    mine.completed_at = shapes.parse_time(rj.get("completed_at"))


def _newest_runs(runs: list[dict]) -> set[int]:
    """The ids of each workflow's newest run (the highest id). A workflow is its `workflow_id`, as
    PyTorch's Dr. CI keys it: two workflow files may share a name, and one's later run must not hide
    the other's (a run without one, as older answers may be, is known by its name)."""
    newest: dict[tuple, int] = {}
    for run in runs:
        key = (run["workflow_id"],) if run.get("workflow_id") is not None else ("", run.get("name") or "")
        newest[key] = max(newest.get(key, run["id"]), run["id"])
    return set(newest.values())


def _add_awaiting(jobs: list[HeadJob], newest_runs: list[dict], rest_jobs: dict[int, list[dict]],
                  added_runs: list[dict] | None = None) -> int:
    """Append each of `newest_runs` that waits for approval and has no job (listed by GitHub or known
    already) as a job in state `awaiting`, and the run to `added_runs`; returns how many were new."""
    known = {j.run_id for j in jobs}
    added = 0
    for run in newest_runs:
        if run.get("conclusion") in AWAITING_CONCLUSIONS and not rest_jobs.get(run["id"]) and run["id"] not in known:
            name = run.get("name") or f"workflow run {run['id']}"
            jobs.append(HeadJob(name, name, "awaiting", run_id=run["id"], workflow=name, from_rest=True))
            if added_runs is not None:
                added_runs.append(run)
            added += 1
    return added


def record(archive: Store, repo: str, learned: list[tuple[dict, dict, bool]], awaiting: list[dict] = ()) -> int:
    """Write the jobs of `learned` and the runs of `awaiting` (`merge_rest_jobs`) into the archive as
    `rest` records, filed on the days their own timestamps fall on; returns how many. The file is named
    by its content: the same answer written again replaces it with the same bytes, another answer never
    overwrites it. A run awaiting approval has no job to record: without its own record the head would
    stay jobless in the lake, and be read again at every refresh until a maintainer approves it."""
    lines = []
    for job, run, heard in learned:
        repository = run.get("repository") or {"full_name": repo}
        job = {**job, "run_attempt": job.get("run_attempt") or run.get("run_attempt") or 1}
        lines += shapes.job_records(job, repository, run.get("triggering_actor") or run.get("actor"), heard)
    for run in awaiting:
        lines += shapes.run_deliveries(run, None, run.get("repository") or {"full_name": repo})
    if not lines:
        return 0
    digest = hashlib.sha256(b"".join(sorted(line for _, line in lines))).hexdigest()[:16]
    part = Part(archive, f"rest-drci-{digest}")
    part.add(lines)
    return part.commit()


def refresh_heads(github: GitHubResource, repo: str, prs: dict, limits: RefreshLimits, now: dt.datetime,
                  log: Callable[[str], None] = lambda s: None, archive: Store | None = None,
                  complete: Callable[[dict], None] = lambda prs: None) -> tuple[dict[int, int], int]:
    """Refresh the stale heads of `prs` (number -> inputs.PullRequest) in place; returns
    ({number: jobs changed}, requests sent). With `archive`, what changed is recorded there (`record`).
    `complete` adds to the stale heads the jobs they were loaded without (`inputs.load_done_jobs`)."""
    stale = {n: why for n, p in prs.items() if (why := stale_reason(p.jobs, p.updated_at, limits, now, p.done_jobs))}
    if not stale:
        return {}, 0
    if github.dry_run:
        log(f"DRY RUN (no GitHub credentials): would read {len(stale)} stale head(s) from the REST API: "
            + ", ".join(f"#{n} ({why})" for n, why in sorted(stale.items())[:10]))
        return {}, 0
    complete({n: prs[n] for n in stale})
    changed, requests, learned, awaiting = {}, 0, [], []
    for i, (number, why) in enumerate(sorted(stale.items())):
        pr = prs[number]
        try:
            runs, n = _list(github, f"/repos/{repo}/actions/runs", "workflow_runs",
                            {"head_sha": pr.head_sha, "per_page": 100})
            requests += n
            rest_jobs = {}
            for run in runs:
                rest_jobs[run["id"]], n = _list(github, f"/repos/{repo}/actions/runs/{run['id']}/jobs", "jobs",
                                                {"filter": "latest", "per_page": 100})
                requests += n
        except GitHubError as e:
            if unavailable(e):
                log(f"GitHub was unavailable ({e}): {len(stale) - i} stale head(s) not read from the "
                    "REST API in this run, their comments use the lake; the next run reads them")
                break
            log(f"PR #{number}: could not read its head from the REST API ({e}); the comment uses the lake")
            continue
        changed[number] = merge_rest_jobs(pr.jobs, runs, rest_jobs, learned, awaiting)
        log(f"PR #{number}: {why}; read {len(runs)} run(s) from the REST API, {changed[number]} job(s) updated")
    if archive is not None and (learned or awaiting):
        log(f"wrote {record(archive, repo, learned, awaiting)} rest record(s) of {len(learned)} job(s) and "
            f"{len(awaiting)} run(s) awaiting approval into the archive, for the refresh to ingest")
    return changed, requests
