"""REST objects -> the webhook envelopes the ingest reads, marked `"source": "rest"`.

The REST API shows an object as it is now; the webhooks showed each state as it happened, and
the lake keeps a job's state as of each day of arrival. So a REST job becomes the deliveries its
own timestamps prove: `queued` at created_at, `in_progress` at started_at, and its final state at
completed_at, each received at that instant (hence filed under that instant's day). A workflow
run likewise: `requested` at run_started_at, `in_progress` when its first job started, and
`completed` at updated_at. A skipped job never ran, so GitHub sends only its completion.

REST and webhook shapes differ in a few places, covered here:
- a REST job's status may be `requested` or `pending` (webhooks say `queued`), and a queued
  job's REST object already carries a `started_at` equal to created_at, as the webhook's does;
- REST runs list `repository` inside the run; a webhook has it at the top level (the ingest reads
  `payload.repository.full_name`), with `sender` (the triggering actor) beside it;
- the pull-request list returns the "simple" shape without `merged`: it is `merged_at is not null`;
- a push has no REST object: GitHub's activity list gives each push's `before` and `after` and its
  time, and GitHub's compare of the two the commits its webhook listed (`Push`); where the list
  does not reach, a commit of the branch's first-parent chain becomes a one-commit push (`before`
  its first parent), which is what a merge bot that lands one commit per push produces.

Delivery ids are derived from the object and its state (`rest-workflow_job-<id>-<attempt>-
completed`), so a re-run or gap repair writes the same ids and the ingest's deduplication drops
the copies, while a real webhook of the same state (GitHub's own id) is merged by the state lattice.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import orjson

from torchci_assets.ingest.payloads import REST_SOURCE

SOURCE = REST_SOURCE
_JOB_STATUS = {"requested": "queued", "pending": "queued", "queued": "queued", "waiting": "waiting",
               "in_progress": "in_progress", "completed": "completed"}


def parse_time(text: str | None) -> dt.datetime | None:
    if not text:
        return None
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(dt.timezone.utc)


def iso_ms(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def envelope(event: str, delivery_id: str, at: dt.datetime, payload: dict) -> tuple[str, bytes]:
    """(day of arrival, the archive line) for one synthesized delivery."""
    line = orjson.dumps({"event": event, "delivery_id": delivery_id, "received_at": iso_ms(at),
                         "source": SOURCE, "payload": payload})
    return at.date().isoformat(), line + b"\n"


def _job_as(job: dict, state: str) -> dict:
    """The job as its webhook for `state` showed it (fields that state had not reached are null)."""
    out = dict(job, status=state)
    if state != "completed":
        out.update(conclusion=None, completed_at=None)
        out["steps"] = []
    if state in ("queued", "waiting"):
        out.update(started_at=job.get("created_at"), runner_id=None, runner_name=None,
                   runner_group_id=None, runner_group_name=None)
    return out


def job_deliveries(job: dict, repository: dict, sender: dict | None = None) -> list[tuple[str, bytes]]:
    """The `workflow_job` deliveries a REST job proves, oldest first."""
    status = _JOB_STATUS.get(job.get("status") or "", "queued")
    created, started, completed = (parse_time(job.get(k)) for k in ("created_at", "started_at", "completed_at"))
    states: list[tuple[str, dt.datetime | None]] = []
    skipped = status == "completed" and job.get("conclusion") == "skipped"
    if not skipped:
        states.append(("queued", created))
        if status in ("in_progress", "completed"):
            states.append(("in_progress", started))
        elif status == "waiting":
            states.append(("waiting", created))
    if status == "completed":
        states.append(("completed", completed or started or created))
    attempt = job.get("run_attempt") or 1
    out = []
    for state, at in states:
        if at is None:
            continue
        payload = {"action": state, "workflow_job": _job_as(job, state), "repository": repository,
                   "sender": sender}
        out.append(envelope("workflow_job", f"rest-workflow_job-{job['id']}-{attempt}-{state}", at, payload))
    return out


def job_records(job: dict, repository: dict, sender: dict | None, heard: bool) -> list[tuple[str, bytes]]:
    """The deliveries a REST job adds to what the lake has: of a job it `heard` of, the state GitHub
    shows now (the earlier ones are there already, and a day of arrival more would be ingested again
    for nothing); of one it never heard of, every state its timestamps prove."""
    deliveries = job_deliveries(job, repository, sender)
    return deliveries[-1:] if heard else deliveries


def run_deliveries(run: dict, first_job_started: str | None, repository: dict) -> list[tuple[str, bytes]]:
    """The `workflow_run` deliveries a REST run (one attempt) proves, oldest first."""
    status = run.get("status")
    requested = parse_time(run.get("run_started_at") or run.get("created_at"))
    started = parse_time(first_job_started)
    states: list[tuple[str, str, dt.datetime | None]] = [("requested", "queued", requested)]
    if status in ("in_progress", "completed") and started is not None:
        states.append(("in_progress", "in_progress", started))
    if status == "completed":
        states.append(("completed", "completed", parse_time(run.get("updated_at"))))
    sender = run.get("triggering_actor") or run.get("actor")
    workflow = {"id": run.get("workflow_id"), "name": run.get("name"), "path": run.get("path"),
                "url": run.get("workflow_url")}
    attempt = run.get("run_attempt") or 1
    out = []
    for action, state, at in states:
        if at is None:
            continue
        wr = dict(run, status=state, updated_at=run["updated_at"] if action == "completed" else _iso_s(at))
        if action != "completed":
            wr["conclusion"] = None
        payload = {"action": action, "workflow_run": wr, "workflow": workflow, "repository": repository,
                   "sender": sender}
        out.append(envelope("workflow_run", f"rest-workflow_run-{run['id']}-{attempt}-{action}", at, payload))
    return out


def _iso_s(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _push_commit(commit: dict) -> dict:
    c = commit.get("commit") or {}
    author, committer = c.get("author") or {}, c.get("committer") or {}
    login = lambda who: (commit.get(who) or {}).get("login")  # noqa: E731
    return {"id": commit["sha"], "tree_id": (c.get("tree") or {}).get("sha"), "distinct": True,
            "message": c.get("message"), "timestamp": committer.get("date"), "url": commit.get("html_url"),
            "author": {"name": author.get("name"), "email": author.get("email"), "username": login("author")},
            "committer": {"name": committer.get("name"), "email": committer.get("email"),
                          "username": login("committer")},
            "added": [], "removed": [], "modified": []}


NO_COMMIT = "0" * 40  # a push's `before` when it created the branch
# GitHub's push webhook lists at most this many of a push's commits
MAX_PUSH_COMMITS = 2048


@dataclass(frozen=True)
class Push:
    """One push to a branch as its webhook tells it: the branch moved from `before` to `after` at
    `at`, and `commits` (REST commit objects, oldest first) are what GitHub's compare of the two
    lists, the commits GitHub's push webhook lists; `head` is the commit `after` names."""

    at: dt.datetime
    before: str
    head: dict
    commits: tuple[dict, ...]
    forced: bool = False
    actor: dict | None = None  # who pushed (GitHub's user), when GitHub said


def one_commit_push(commit: dict, at: dt.datetime | None = None) -> Push | None:
    """A branch commit as the one-commit push that landed it (`before` its first parent), received
    at `at` (default: its committer date); None without either."""
    at = at or parse_time(((commit.get("commit") or {}).get("committer") or {}).get("date"))
    if at is None:
        return None
    parents = commit.get("parents") or []
    return Push(at, parents[0]["sha"] if parents else NO_COMMIT, commit, (commit,))


def push_delivery(push: Push, ref: str, repository: dict) -> tuple[str, bytes]:
    """The push webhook GitHub delivered for `push`. Its id names both ends: a branch moved to
    one commit twice (put back, then forward again) was two pushes."""
    head = _push_commit(push.head)
    commits = [_push_commit(c) for c in push.commits[-MAX_PUSH_COMMITS:]]
    committer, after, actor = head["committer"], push.head["sha"], push.actor
    pusher = {"name": actor.get("login"), "email": None} if actor else \
        {"name": committer["username"] or committer["name"], "email": committer["email"]}
    html = repository.get("html_url")
    payload = {"ref": ref, "before": push.before, "after": after, "created": push.before == NO_COMMIT,
               "deleted": False, "forced": push.forced, "base_ref": None,
               "compare": f"{html}/compare/{push.before[:12]}...{after[:12]}" if html else None,
               "commits": commits, "head_commit": head, "repository": repository,
               "pusher": pusher, "sender": actor or push.head.get("committer")}
    return envelope("push", f"rest-push-{ref}-{push.before}-{after}", push.at, payload)


def pull_request_deliveries(pr: dict, repository: dict, not_before: dt.datetime | None = None,
                            actions: tuple[str, ...] = ("opened", "closed")) -> list[tuple[str, bytes]]:
    """`opened` at created_at, and `closed` at closed_at for a closed PR (REST keeps no other history).

    A pull request opened (or closed) years before the backfill's first day, and updated since,
    would open archive days, and day partitions, that far back. Its records are received at
    `not_before` instead (`closed` a millisecond later, so the latest record is still its state),
    their payloads unchanged: the lake knows the pull request from the backfill's first day on."""
    full = dict(pr, merged=pr.get("merged", pr.get("merged_at") is not None))
    out = []
    for order, (action, key) in enumerate((("opened", "created_at"), ("closed", "closed_at"))):
        at = parse_time(pr.get(key))
        if at is None or action not in actions:
            continue
        if not_before is not None:
            at = max(at, not_before + dt.timedelta(milliseconds=order))
        shown = dict(full, updated_at=pr[key]) if action == "opened" else full
        if action == "opened":
            shown.update(state="open", merged=False, closed_at=None, merged_at=None)
        payload = {"action": action, "number": pr["number"], "pull_request": shown,
                   "repository": repository, "sender": pr.get("user")}
        out.append(envelope("pull_request", f"rest-pull_request-{pr['number']}-{action}", at, payload))
    return out
