"""What the relay does about one event, the same whether a sensor tick does it or a run does.

A pull-request sensor tick acts on the events it found at once (no run to launch: on a busy
machine starting one takes tens of seconds), within a time budget, and hands a run only what
it could not finish: events past the budget, transient GitHub failures and claims another
writer still holds. Both paths call these functions, and the ledgers (`dispatches`,
`relay_actions`) make every GitHub write happen once whichever path, or both, get to it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from resources.github import GitHubResource
from resources.lake import Lake
from resources.storage import Store
from torchci_assets.config import TorchciConfig
from torchci_assets.relay.check_runs import (backfill_for_label, create_check_run, dispatched_deliveries, job_state,
                                             wants_check_run)
from torchci_assets.relay.dispatch import (CLAIM_SETTLE_S, PR_EVENT_TYPE, Dispatch, Outage, RepoOutcome, dispatch_event,
                                           github_unavailable)
from torchci_assets.relay.pull_requests import RelayEvent, needs_check_run, pr_labels
from torchci_assets.relay.pushes import SHA_RE
from torchci_assets.relay.reruns import handle_rerequest

# Outcomes that leave work to do later: a transient failure or a send GitHub did not answer, a
# young claim of another writer, or a downstream a tick had no time left for.
RETRY_OUTCOMES = frozenset({"failed", "unanswered", "in_flight", "deferred"})


@dataclass
class Writer:
    """Where an action writes and what it reports: GitHub, the lake, the archive (for label
    backfills), the relay config, the id recorded in the ledgers and the log; a sensor tick's
    `deadline` (time.monotonic()) after which no new dispatch starts; what the pass saw of GitHub
    (`outage`: once down, it writes nothing more)."""

    github: GitHubResource
    lake: Lake
    store: Store
    relay: TorchciConfig
    run_id: str
    log: Callable[[str], None] = lambda s: None
    settle_s: float = CLAIM_SETTLE_S
    deadline: float | None = None
    outage: Outage = field(default_factory=Outage)


def pr_dispatch(event: RelayEvent, relay: TorchciConfig) -> Dispatch:
    """The relay's dispatch of a pull_request delivery, with the repositories wanting check runs."""
    labels = pr_labels(event.payload)
    wanted = frozenset(e.repo.lower() for e in relay.allowlist if needs_check_run(e, labels))
    return Dispatch(event.sha, relay.upstream_repo, PR_EVENT_TYPE, event.delivery_id, "webhook",
                    {"event_type": PR_EVENT_TYPE, "delivery_id": event.delivery_id, "payload": event.payload},
                    per_delivery=True, check_run_wanted=wanted, content_key=pr_content_key(event.payload))


def pr_content_key(payload: dict) -> str:
    """What a pull_request delivery says happened, the same in each webhook's copy of the event
    (a repository webhook's and the App's): repository, number, action, head and the pull
    request's `updated_at`, which a later event of the same action and head moves on. "" when
    the payload lacks one of them: each such delivery is then its own event."""
    pr = payload.get("pull_request") if isinstance(payload.get("pull_request"), dict) else {}
    repo = payload.get("repository") if isinstance(payload.get("repository"), dict) else {}
    parts = (repo.get("full_name"), pr.get("number"), payload.get("action"),
             (pr.get("head") or {}).get("sha") if isinstance(pr.get("head"), dict) else None, pr.get("updated_at"))
    if any(part is None or part == "" for part in parts):
        return ""
    return "|".join(str(part).lower() for part in parts)


def dispatch_pull_request(event: RelayEvent, w: Writer) -> list[RepoOutcome]:
    """Dispatch one pull_request delivery to every allowlisted downstream not yet acknowledged."""
    if not SHA_RE.match(event.sha):
        w.log(f"delivery {event.delivery_id}: head sha {event.sha!r} is not a commit id; skipped")
        return []
    return dispatch_event(w.github, w.lake, pr_dispatch(event, w.relay), w.relay.allowlist, w.run_id,
                          log=w.log, settle_s=w.settle_s, deadline=w.deadline, outage=w.outage)


def act_on_event(event: RelayEvent, w: Writer) -> dict[str, str]:
    """The relay's action for one webhook event; what happened per downstream, check run or re-run."""
    if event.kind == "dispatch":
        return {o.repo: o.outcome for o in dispatch_pull_request(event, w)}
    if event.kind == "labeled":
        return backfill_for_label(w.github, w.lake, w.store, w.relay, event.payload, event.delivery_id,
                                  w.run_id, w.log, w.settle_s)
    return handle_rerequest(w.github, w.lake, w.relay, event.event, event.payload, event.delivery_id,
                            w.run_id, w.log, w.settle_s)


def act_on_callback(record: dict, w: Writer) -> dict[str, str]:
    """The upstream check run of one L3/L4 callback record, when its repository and labels want one."""
    job = job_state(record)
    if job is None:
        w.log("a record that is not an L3/L4 pull-request callback: skipped")
        return {}
    if job.delivery_id not in dispatched_deliveries(w.lake, job.head_sha, job.downstream_repo):
        w.log(f"{job.downstream_repo}: its delivery {job.delivery_id} was never dispatched for {job.head_sha[:12]}, "
              "the head its callback names (archived before the receiver checked it); no check run")
        return {job.key: "not_dispatched"}
    if not wants_check_run(w.lake, w.relay, job):
        w.log(f"{job.downstream_repo} ({job.level}): no ciflow/crcr label on {job.head_sha[:12]}; "
              "no check run (a later label creates it from the recorded state)")
        return {job.key: "not_wanted"}
    return {job.key: create_check_run(w.github, w.lake, w.relay, job, w.run_id, w.log, w.settle_s)}


@dataclass
class Acted:
    """What a tick did within its budget: outcomes per item name, the items left to a run, and
    what to say once when GitHub was down (`outage`, "" when it was not)."""

    done: dict[str, dict[str, str]] = field(default_factory=dict)
    left: list = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    outage: str = ""

    def merge(self, other: Acted) -> None:
        self.done.update(other.done)
        self.left += other.left
        self.errors += other.errors
        self.outage = other.outage or self.outage


def act_within(items: Iterable, act: Callable[[object], dict[str, str]], name: Callable[[object], str],
               budget_s: float, clock: Callable[[], float] = time.monotonic, outage: Outage | None = None) -> Acted:
    """Act on `items` in order until `budget_s` is spent. An item whose action raised, or left a
    retry outcome, goes to `left` with the ones not reached: a run retries them, and the ledgers
    skip whatever was done. One item failing never stops the others, unless GitHub is down
    (`outage`: no answer or only 5xx through the client's retries): then none after it is tried,
    as each would wait out the same retries to the same end."""
    acted, start, outage = Acted(), clock(), outage or Outage()
    for item in items:
        if outage.down or clock() - start > budget_s:
            acted.left.append(item)
            continue
        try:
            outcomes = act(item)
        except Exception as exc:  # e.g. GitHub gave no answer: the run's retries deal with it
            acted.errors.append(f"{name(item)}: {type(exc).__name__}: {exc}")
            acted.left.append(item)
            if github_unavailable(exc):
                outage.saw(str(exc))
            continue
        acted.done[name(item)] = outcomes
        if RETRY_OUTCOMES & set(outcomes.values()):
            acted.left.append(item)
    if outage.down:
        acted.outage = outage.line(len(acted.left))
    return acted
