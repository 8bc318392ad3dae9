"""The relay's pull-request side in Dagster: dispatch of pull_request deliveries, upstream check
runs from downstream callbacks, label backfills and re-runs from the Checks tab.

Two sensors read the archive the receiver writes, incrementally, as `upstream_commit_sensor`
reads pushes (`torchci_assets.relay.pushes.scan_archive`):
- `pull_request_sensor` (webhooks): `pull_request` opened/reopened/synchronize/closed ->
  `pull_request_dispatch_job`; `labeled` `ciflow/crcr/<device>` -> `check_run_label_job`;
  `check_run`/`check_suite` `rerequested` -> `rerun_job`.
- `check_run_sensor` (ci-results): L3/L4 callbacks about pull requests -> `check_run_job`.
Each tick asks one run per job for everything new (a run's start-up, seconds on a busy machine,
is paid once per tick, not per event), with a run key made of the events' own keys. The
sensors' cursors remember each event, so it is put in one run only; the ledgers
(`dispatches`, `relay_actions`) make each GitHub write exactly once under re-execution and races.

No `from __future__ import annotations` here: Dagster reads the ops' config annotations at
definition time.
"""

import hashlib
import json
from collections import Counter

import dagster as dg

from jobs.relay import CLAIM_SETTLE_S, report_outcomes
from resources import ArchiveResource, LakeResource
from resources.github import GitHubResource
from torchci_assets.config import load_config
from torchci_assets.relay.check_runs import (
    ACTIONS_TABLE,
    IN_FLIGHT_S,
    JobState,
    backfill_for_label,
    create_check_run,
    job_state,
    wants_check_run,
)
from torchci_assets.relay.dispatch import PR_EVENT_TYPE, Dispatch, dispatch_event
from torchci_assets.relay.pull_requests import RelayEvent, needs_check_run, pick_relay_event, pr_labels
from torchci_assets.relay.pushes import SHA_RE, RelayCursor, scan_archive
from torchci_assets.relay.reruns import handle_rerequest

# The receiver seals these deliveries within a second; 5 s between ticks keeps a pull
# request's dispatch and a callback's check run well within 15 s of their arrival.
TICK_S = 5
# Events handled by one run at most; the rest wait for the next tick's run.
MAX_EVENTS_PER_RUN = 100


class RelayEventsConfig(dg.Config):
    """The deliveries (or callback records) one sensor tick found, as the run's config, so a
    re-executed run acts on exactly them."""

    events_json: str
    max_retries: int = 3
    retry_wait_s: float = 60.0
    claim_settle_s: float = CLAIM_SETTLE_S


def events_run_config(op: str, items: list[dict]) -> dict:
    return {"ops": {op: {"config": {"events_json": json.dumps(items, separators=(",", ":"))}}}}


def event_item(event: RelayEvent) -> dict:
    return {"kind": event.kind, "event": event.event, "delivery_id": event.delivery_id,
            "received_at": event.received_at, "sha": event.sha, "payload": event.payload}


def _events(config: RelayEventsConfig) -> list[RelayEvent]:
    return [RelayEvent(e["kind"], e["event"], e["delivery_id"], e["received_at"], str(e["sha"]).lower(), e["payload"])
            for e in json.loads(config.events_json)]


def batch_key(prefix: str, keys: list[str]) -> str:
    """One run key for a tick's batch: the same events always give the same key."""
    return f"{prefix}:{len(keys)}:{hashlib.sha1(chr(10).join(sorted(keys)).encode()).hexdigest()[:20]}"


def pr_dispatch(event: RelayEvent, relay) -> Dispatch:
    """The relay's dispatch of a pull_request delivery, with the repositories wanting check runs."""
    labels = pr_labels(event.payload)
    wanted = frozenset(e.repo.lower() for e in relay.allowlist if needs_check_run(e, labels))
    return Dispatch(event.sha, relay.upstream_repo, PR_EVENT_TYPE, event.delivery_id, "webhook",
                    {"event_type": PR_EVENT_TYPE, "delivery_id": event.delivery_id, "payload": event.payload},
                    per_delivery=True, check_run_wanted=wanted)


@dg.op(pool="relay_dispatch", description="repository_dispatch (event_type pull_request) of pull_request "
       "deliveries to every allowlisted downstream, once per (delivery, downstream), in the `dispatches` ledger.")
def dispatch_pull_requests(context: dg.OpExecutionContext, config: RelayEventsConfig,
                           github: GitHubResource, lake: LakeResource):
    relay = load_config()
    if github.dry_run:
        context.log.warning("DRY RUN: no GitHub credentials; dispatches are logged and recorded "
                            "as dry_run, not sent (set GITHUB_TOKEN to send)")
    outcomes = []
    for event in _events(config):
        if not SHA_RE.match(event.sha):
            context.log.error(f"delivery {event.delivery_id}: head sha {event.sha!r} is not a commit id; skipped")
            continue
        outcomes += dispatch_event(github, lake.lake(), pr_dispatch(event, relay), relay.allowlist, context.run_id,
                                   log=context.log.info, settle_s=config.claim_settle_s)
    events = _events(config)
    yield from report_outcomes(context, github, lake, outcomes, f"{len(events)} pull_request deliveries", config, {
        "deliveries": ", ".join(e.delivery_id for e in events)[:2000],
        "pull_requests": ", ".join(sorted({f"#{e.pr_number}" for e in events if e.pr_number}))[:2000]})


def _finish(context: dg.OpExecutionContext, config: RelayEventsConfig, done: dict[str, str], what: str):
    """Yield the ledger's materialization and the outcomes; retry later when a claim is young."""
    if "in_flight" in done.values():  # another writer's claim, still young: look again once settled or stale
        raise dg.RetryRequested(max_retries=config.max_retries, seconds_to_wait=IN_FLIGHT_S)
    counts = Counter(done.values())
    yield dg.AssetMaterialization(asset_key=ACTIONS_TABLE, metadata={what: len(done), **counts})
    yield dg.Output(done, metadata={**{f"{k}_count": v for k, v in counts.items()},
                                    "outcomes": dg.MetadataValue.json(done)})


@dg.op(description="ciflow/crcr/<device> labels: upstream check runs wanted for the device's L3 repositories "
       "on the head, and created now for every job that already reported.")
def label_check_runs(context: dg.OpExecutionContext, config: RelayEventsConfig, github: GitHubResource,
                     lake: LakeResource, archive: ArchiveResource):
    relay, done = load_config(), {}
    for event in _events(config):
        done.update(backfill_for_label(github, lake.lake(), archive.store(), relay, event.payload,
                                       event.delivery_id, context.run_id, context.log.info, config.claim_settle_s))
    yield from _finish(context, config, done, "check runs")


@dg.op(description="Re-run the failed jobs of the downstream runs behind re-requested crcr/... check runs "
       "(L3/L4 only), once per request.")
def rerun_downstream(context: dg.OpExecutionContext, config: RelayEventsConfig, github: GitHubResource,
                     lake: LakeResource):
    relay, done = load_config(), {}
    for event in _events(config):
        done.update(handle_rerequest(github, lake.lake(), relay, event.event, event.payload, event.delivery_id,
                                     context.run_id, context.log.info, config.claim_settle_s))
    yield from _finish(context, config, done, "re-runs")


@dg.op(description="The upstream check runs of L3/L4 downstream job callbacks, each created once (never "
       "edited) when the repository's level and labels want one.")
def create_upstream_check_runs(context: dg.OpExecutionContext, config: RelayEventsConfig, github: GitHubResource,
                               lake: LakeResource):
    relay, done = load_config(), {}
    for record in json.loads(config.events_json):
        job = job_state(record)
        if job is None:
            context.log.warning("a record that is not an L3/L4 pull-request callback: skipped")
            continue
        if not wants_check_run(lake.lake(), relay, job):
            context.log.info(f"{job.downstream_repo} ({job.level}): no ciflow/crcr label on {job.head_sha[:12]}; "
                             "no check run (a later label creates it from the recorded state)")
            done[job.key] = "not_wanted"
            continue
        done[job.key] = create_check_run(github, lake.lake(), relay, job, context.run_id, context.log.info,
                                         config.claim_settle_s)
    yield from _finish(context, config, done, "check runs")


RELAY_TAGS = {"torchci/dispatch": "relay"}
# Check runs and re-runs are made exactly once by their ledger's claims, not by running one at a
# time: they do not queue behind dispatches (dagster.yaml limits `torchci/dispatch` to one run).
CHECK_TAGS = {"torchci/relay": "checks"}
# One process per run: a step subprocess on top would double the start-up time these runs spend.
IN_PROCESS = dg.in_process_executor


@dg.job(tags=RELAY_TAGS, executor_def=IN_PROCESS, description="Relay upstream pull_request deliveries downstream.")
def pull_request_dispatch_job():
    dispatch_pull_requests()


@dg.job(tags=CHECK_TAGS, executor_def=IN_PROCESS, description="Upstream check runs for ciflow/crcr/<device> labels.")
def check_run_label_job():
    label_check_runs()


@dg.job(tags=CHECK_TAGS, executor_def=IN_PROCESS, description="Re-runs requested from the upstream Checks tab.")
def rerun_job():
    rerun_downstream()


@dg.job(tags=CHECK_TAGS, executor_def=IN_PROCESS, description="The upstream check runs of downstream job callbacks.")
def check_run_job():
    create_upstream_check_runs()


JOB_FOR_KIND = {"dispatch": (pull_request_dispatch_job, "dispatch_pull_requests"),
                "labeled": (check_run_label_job, "label_check_runs"),
                "rerun": (rerun_job, "rerun_downstream"), "rerun_suite": (rerun_job, "rerun_downstream")}


def pick_callback(line: bytes, config) -> tuple:
    """For scan_archive over ci-results: (an L3/L4 pull-request callback, its job state, "")."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    job = job_state(record) if isinstance(record, dict) else None
    return job is not None, _Found(job, record) if job else None, ""


class _Found:
    """A job state with the record it came from (the run's config)."""

    def __init__(self, job: JobState, record: dict):
        self.job, self.record = job, record
        self.run_key, self.received_at, self.delivery_id = job.run_key, str(record.get("received_at") or ""), job.delivery_id


WAITING = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING]
# Relay runs are dequeued before backfills and refreshes: a check run or dispatch is awaited by
# people on the pull request, a partition's refresh is not.
PRIORITY = {"dagster/priority": "10"}


def waiting_run(context, jobs: list) -> bool:
    """A run of one of `jobs` is waiting to start: this tick's events join the next one instead, so
    a slow machine gets fewer, larger runs rather than a queue that grows with every tick."""
    return any(context.instance.get_run_records(dg.RunsFilter(job_name=j.name, statuses=WAITING), limit=1)
               for j in jobs)


def _tick(context, archive: ArchiveResource, pick, stream: str):
    cursor = RelayCursor.from_json(context.cursor)
    report, nxt = scan_archive(archive.store(), cursor, load_config(), pick=pick, stream=stream)
    if cursor is None:
        context.log.info(f"first tick: {sum(len(f) for f in nxt.files.values())} {stream} archive files "
                         "already present are taken as read")
    context.log.info(f"read {len(report.files_read)} {stream} file(s) ({report.files_deferred} deferred), "
                     f"{report.push_events} relevant record(s), {len(report.rejects)} unreadable; "
                     f"{len(report.commits)} new")
    return report, nxt


@dg.sensor(jobs=[pull_request_dispatch_job, check_run_label_job, rerun_job], minimum_interval_seconds=TICK_S,
           default_status=dg.DefaultSensorStatus.RUNNING,
           description="Upstream pull_request, check_run and check_suite deliveries in the webhook archive: one "
                       "run per kind and tick.")
def pull_request_sensor(context: dg.SensorEvaluationContext, archive: ArchiveResource):
    if context.cursor and waiting_run(context, [pull_request_dispatch_job, check_run_label_job, rerun_job]):
        return dg.SensorResult(skip_reason="a relay run is still waiting to start", cursor=context.cursor)
    report, nxt = _tick(context, archive, pick_relay_event, "webhooks")
    by_job: dict[str, list[RelayEvent]] = {}
    for event in report.commits[:MAX_EVENTS_PER_RUN * 3]:
        by_job.setdefault(JOB_FOR_KIND[event.kind][0].name, []).append(event)
    requests_ = []
    for job_name, events in by_job.items():
        op = next(o for j, o in JOB_FOR_KIND.values() if j.name == job_name)
        for i in range(0, len(events), MAX_EVENTS_PER_RUN):
            chunk = events[i:i + MAX_EVENTS_PER_RUN]
            requests_.append(dg.RunRequest(
                run_key=batch_key(job_name, [e.run_key for e in chunk]), job_name=job_name,
                run_config=events_run_config(op, [event_item(e) for e in chunk]),
                tags={**PRIORITY, "torchci/deliveries": str(len(chunk)), "torchci/delivery": chunk[0].delivery_id}))
    if not requests_:
        return dg.SensorResult(skip_reason="no new pull request events", cursor=nxt.to_json())
    return dg.SensorResult(run_requests=requests_, cursor=nxt.to_json())


@dg.sensor(job=check_run_job, minimum_interval_seconds=TICK_S, default_status=dg.DefaultSensorStatus.RUNNING,
           description="L3/L4 downstream callbacks about pull requests in the ci-results archive: one run per tick.")
def check_run_sensor(context: dg.SensorEvaluationContext, archive: ArchiveResource):
    if context.cursor and waiting_run(context, [check_run_job]):
        return dg.SensorResult(skip_reason="a check run job is still waiting to start", cursor=context.cursor)
    report, nxt = _tick(context, archive, pick_callback, "ci-results")
    found = report.commits
    requests_ = [dg.RunRequest(run_key=batch_key("check_run_job", [f.run_key for f in chunk]),
                               run_config=events_run_config("create_upstream_check_runs", [f.record for f in chunk]),
                               tags={**PRIORITY, "torchci/callbacks": str(len(chunk)),
                                     "torchci/sha": chunk[0].job.head_sha})
                 for chunk in (found[i:i + MAX_EVENTS_PER_RUN] for i in range(0, len(found), MAX_EVENTS_PER_RUN))]
    if not requests_:
        return dg.SensorResult(skip_reason="no new L3/L4 pull request callbacks", cursor=nxt.to_json())
    return dg.SensorResult(run_requests=requests_, cursor=nxt.to_json())


defs = dg.Definitions(jobs=[pull_request_dispatch_job, check_run_label_job, rerun_job, check_run_job],
                      sensors=[pull_request_sensor, check_run_sensor])
