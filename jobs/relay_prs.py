"""The relay's pull-request side in Dagster: dispatch of pull_request deliveries, upstream check
runs from downstream callbacks, label backfills and re-runs from the Checks tab.

Two sensors read the archive the receiver writes, incrementally, as `upstream_commit_sensor`
reads pushes (`torchci_assets.relay.pushes.scan_archive`):
- `pull_request_sensor` (webhooks): `pull_request` opened/reopened/synchronize/closed ->
  `pull_request_dispatch_job`; `labeled` `ciflow/crcr/<device>` -> `check_run_label_job`;
  `check_run`/`check_suite` `rerequested` -> `rerun_job`. Run key `<kind>:<delivery id>`.
- `check_run_sensor` (ci-results): each L3/L4 callback about a pull request -> `check_run_job`,
  run key `check:<head>:<check run name>|<run>|<attempt>|<status>`.
Run keys are remembered forever, so a delivery is acted on once per sensor; the ledgers
(`dispatches`, `relay_actions`) make each GitHub write exactly once under re-execution and races.

No `from __future__ import annotations` here: Dagster reads the ops' config annotations at
definition time.
"""

import json

import dagster as dg

from jobs.relay import CLAIM_SETTLE_S, DispatchConfig, report_outcomes
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


class RelayEventConfig(DispatchConfig):
    """One upstream delivery, as the sensor found it (so a re-executed run acts on exactly it)."""

    kind: str = "dispatch"
    event: str = "pull_request"
    upstream_repo: str = ""
    ref: str = ""


class CheckRunConfig(dg.Config):
    """One downstream job state from a callback; the check run to create for it."""

    record_json: str
    claim_settle_s: float = CLAIM_SETTLE_S


def event_run_config(event: RelayEvent, op: str) -> dict:
    return {"ops": {op: {"config": {
        "kind": event.kind, "event": event.event, "sha": event.sha, "delivery_id": event.delivery_id,
        "received_at": event.received_at, "payload_json": json.dumps(event.payload, separators=(",", ":")),
    }}}}


def _event(config: RelayEventConfig) -> RelayEvent:
    return RelayEvent(config.kind, config.event, config.delivery_id, config.received_at, config.sha.lower(),
                      json.loads(config.payload_json))


@dg.op(pool="relay_dispatch", description="repository_dispatch (event_type pull_request) of one pull_request "
       "delivery to every allowlisted downstream, once per (delivery, downstream), in the `dispatches` ledger.")
def dispatch_pull_request(context: dg.OpExecutionContext, config: RelayEventConfig,
                          github: GitHubResource, lake: LakeResource):
    event = _event(config)
    if not SHA_RE.match(event.sha):
        raise dg.Failure(f"delivery {event.delivery_id}: head sha {event.sha!r} is not a commit id")
    relay = load_config()
    labels = pr_labels(event.payload)
    wanted = frozenset(e.repo.lower() for e in relay.allowlist if needs_check_run(e, labels))
    dispatch = Dispatch(event.sha, relay.upstream_repo, PR_EVENT_TYPE, event.delivery_id, "webhook",
                        {"event_type": PR_EVENT_TYPE, "delivery_id": event.delivery_id, "payload": event.payload},
                        per_delivery=True, check_run_wanted=wanted)
    if github.dry_run:
        context.log.warning("DRY RUN: no GitHub credentials; dispatches are logged and recorded "
                            "as dry_run, not sent (set GITHUB_TOKEN to send)")
    outcomes = dispatch_event(github, lake.lake(), dispatch, relay.allowlist, context.run_id,
                              log=context.log.info, settle_s=config.claim_settle_s)
    yield from report_outcomes(context, github, lake, outcomes, event.sha, config, {
        "sha": event.sha, "delivery_id": event.delivery_id, "action": str(event.payload.get("action")),
        "pull_request": event.pr_number or 0})


@dg.op(pool="relay_dispatch", description="A ciflow/crcr/<device> label: upstream check runs wanted for the "
       "device's L3 repositories on this head, and created now for every job that already reported.")
def label_check_runs(context: dg.OpExecutionContext, config: RelayEventConfig, github: GitHubResource,
                     lake: LakeResource, archive: ArchiveResource):
    event = _event(config)
    done = backfill_for_label(github, lake.lake(), archive.store(), load_config(), event.payload,
                              event.delivery_id, context.run_id, context.log.info, config.claim_settle_s)
    yield dg.AssetMaterialization(asset_key=ACTIONS_TABLE, metadata={"sha": event.sha, "rows": len(done)})
    yield dg.Output(done, metadata={"sha": event.sha, "label": str((event.payload.get("label") or {}).get("name")),
                                    "outcomes": dg.MetadataValue.json(done)})


@dg.op(pool="relay_dispatch", description="Re-run the failed jobs of the downstream runs behind re-requested "
       "crcr/... check runs (L3/L4 only), once per request.")
def rerun_downstream(context: dg.OpExecutionContext, config: RelayEventConfig, github: GitHubResource,
                     lake: LakeResource):
    event = _event(config)
    done = handle_rerequest(github, lake.lake(), load_config(), event.event, event.payload, event.delivery_id,
                            context.run_id, context.log.info, config.claim_settle_s)
    if "in_flight" in done.values():
        raise dg.RetryRequested(max_retries=3, seconds_to_wait=IN_FLIGHT_S)
    yield dg.AssetMaterialization(asset_key=ACTIONS_TABLE, metadata={"sha": event.sha, "rows": len(done)})
    yield dg.Output(done, metadata={"event": event.event, "outcomes": dg.MetadataValue.json(done)})


@dg.op(pool="relay_dispatch", description="The upstream check run of one L3/L4 downstream job callback, "
       "created once (never edited) when the repository's level and labels want one.")
def create_upstream_check_run(context: dg.OpExecutionContext, config: CheckRunConfig, github: GitHubResource,
                              lake: LakeResource):
    job = job_state(json.loads(config.record_json))
    if job is None:
        raise dg.Failure("the callback record is not an L3/L4 pull-request callback")
    relay = load_config()
    if not wants_check_run(lake.lake(), relay, job):
        context.log.info(f"{job.downstream_repo} ({job.level}): no ciflow/crcr label on {job.head_sha[:12]}; "
                         "no check run (a later label creates it from the recorded state)")
        return dg.Output("not_wanted", metadata={"name": job.name})
    outcome = create_check_run(github, lake.lake(), relay, job, context.run_id, context.log.info,
                               config.claim_settle_s)
    if outcome == "in_flight":  # another writer's claim, still young: look again once it is settled or stale
        raise dg.RetryRequested(max_retries=3, seconds_to_wait=IN_FLIGHT_S)
    context.log_event(dg.AssetMaterialization(asset_key=ACTIONS_TABLE, metadata={"sha": job.head_sha}))
    return dg.Output(outcome, metadata={"name": job.name, "status": job.status, "sha": job.head_sha})


RELAY_TAGS = {"torchci/dispatch": "relay"}


@dg.job(tags=RELAY_TAGS, description="Relay one upstream pull_request delivery downstream.")
def pull_request_dispatch_job():
    dispatch_pull_request()


@dg.job(tags=RELAY_TAGS, description="Upstream check runs for a ciflow/crcr/<device> label.")
def check_run_label_job():
    label_check_runs()


@dg.job(tags=RELAY_TAGS, description="Re-runs requested from the upstream Checks tab.")
def rerun_job():
    rerun_downstream()


@dg.job(tags=RELAY_TAGS, description="The upstream check run of one downstream job callback.")
def check_run_job():
    create_upstream_check_run()


JOB_FOR_KIND = {"dispatch": (pull_request_dispatch_job, "dispatch_pull_request"),
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
           description="Upstream pull_request, check_run and check_suite deliveries in the webhook archive.")
def pull_request_sensor(context: dg.SensorEvaluationContext, archive: ArchiveResource):
    report, nxt = _tick(context, archive, pick_relay_event, "webhooks")
    requests_ = []
    for event in report.commits:
        job, op = JOB_FOR_KIND[event.kind]
        requests_.append(dg.RunRequest(run_key=event.run_key, job_name=job.name, run_config=event_run_config(event, op),
                                       tags={"torchci/sha": event.sha, "torchci/delivery": event.delivery_id}))
    if not requests_:
        return dg.SensorResult(skip_reason="no new pull request events", cursor=nxt.to_json())
    return dg.SensorResult(run_requests=requests_, cursor=nxt.to_json())


@dg.sensor(job=check_run_job, minimum_interval_seconds=TICK_S, default_status=dg.DefaultSensorStatus.RUNNING,
           description="L3/L4 downstream callbacks about pull requests in the ci-results archive.")
def check_run_sensor(context: dg.SensorEvaluationContext, archive: ArchiveResource):
    report, nxt = _tick(context, archive, pick_callback, "ci-results")
    requests_ = [dg.RunRequest(run_key=found.run_key,
                               run_config={"ops": {"create_upstream_check_run": {"config": {
                                   "record_json": json.dumps(found.record, separators=(",", ":"))}}}},
                               tags={"torchci/sha": found.job.head_sha, "torchci/delivery": found.delivery_id})
                 for found in report.commits]
    if not requests_:
        return dg.SensorResult(skip_reason="no new L3/L4 pull request callbacks", cursor=nxt.to_json())
    return dg.SensorResult(run_requests=requests_, cursor=nxt.to_json())


defs = dg.Definitions(jobs=[pull_request_dispatch_job, check_run_label_job, rerun_job, check_run_job],
                      sensors=[pull_request_sensor, check_run_sensor])
