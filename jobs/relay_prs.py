"""The relay's pull-request side in Dagster: dispatch of pull_request deliveries, upstream check
runs from downstream callbacks, label backfills and re-runs from the Checks tab.

Two sensors read the archive the receiver writes, incrementally, as `upstream_commit_sensor`
reads pushes (`torchci_assets.relay.pushes.scan_archive`):
- `pull_request_sensor` (webhooks): `pull_request` opened/reopened/synchronize/closed are
  dispatched by the tick itself; `labeled` `ciflow/crcr/<device>` -> `check_run_label_job`;
  `check_run`/`check_suite` `rerequested` -> `rerun_job`.
- `check_run_sensor` (ci-results): the tick creates the check runs of L3/L4 callbacks about
  pull requests.
`zombie_check_run_schedule` (every 10 minutes, on by default where GitHub credentials are set)
completes as timed out the check runs whose downstream job never reported `completed`
(`torchci_assets.relay.zombies`).
Where a person waits on GitHub for the relay (a dispatch, a check run), the sensor tick writes,
listening to the archive for a few seconds (`torchci_assets.relay.listening`) within a bounded
budget: starting a run costs tens of seconds on a busy machine, a tick costs none. The cursor is returned only after the ledgers recorded what was sent; what the tick could
not finish (past its budget, a transient failure, another writer's young claim) goes to a run
of the job that does the same thing with retries. Labels and re-runs always go to a run: they
list and write an unbounded number of things, and their users wait on a downstream run anyway.
The ledgers (`dispatches`, `relay_actions`) make each GitHub write exactly once whichever path,
or both, get to it; each tick's writes appear in the UI as materializations of the ledgers.

No `from __future__ import annotations` here: Dagster reads the ops' config annotations at
definition time.
"""

import datetime as dt
import hashlib
import json
import time
import uuid
from collections import Counter

import dagster as dg

from jobs.relay import CLAIM_SETTLE_S, report_outcomes
from resources.configured import ArchiveResource, LakeResource
from resources.credentials import has_credentials
from resources.github import GitHubResource
from torchci_assets.config import ZOMBIE_TIMEOUT_S, load_config
from torchci_assets.lake_metadata import ledger_metadata
from torchci_assets.relay.acting import (
    Acted,
    Writer,
    act_on_callback,
    act_on_event,
    act_within,
    dispatch_pull_request,
)
from torchci_assets.relay.check_runs import ACTIONS_TABLE, IN_FLIGHT_S, JobState, job_state
from torchci_assets.relay.dispatch import LEDGER_TABLE
from torchci_assets.relay.listening import Listening, listen
from torchci_assets.relay.pull_requests import RelayEvent, pick_relay_event
from torchci_assets.relay.zombies import sweep_ledgers, sweep_timeout, time_out, zombie_jobs

# The daemon evaluates sensors in a loop that starts at most every 5 s (dagster 1.13's
# MIN_INTERVAL_LOOP_TIME); a smaller minimum interval lets these sensors tick on every pass
# instead of every other one.
TICK_S = 1
# Events handled by one run at most; the rest wait for the next tick's run.
MAX_EVENTS_PER_RUN = 100
# A tick must end within Dagster's 60 s: it listens to the archive for at most 20 s, starts no
# new GitHub write 30 s after its start (`torchci_assets.relay.listening`), and each call gives
# up after CLIENT_LIMITS (a timeout, one retry) so the last write (at most a lookup and a POST)
# cannot run long. What is left goes to a run. A quiet tick listens 15 s: each tick costs
# Dagster's daemon and code server ~0.05 CPU-s whatever it finds, so shorter ticks cost an idle
# deployment more (bench/README.md, "Relay latency": ticks of 4 s cost it half as much again).
LISTENING = Listening(budget_s=20.0, listen_s=15.0, poll_s=0.5, act_s=30.0)
CLIENT_LIMITS = {"max_retries": 1, "max_total_wait_s": 3.0, "read_timeout_s": 5.0, "connect_timeout_s": 3.0}


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
    """One run key for a batch: the same events always give the same key."""
    return f"{prefix}:{len(keys)}:{hashlib.sha1(chr(10).join(sorted(keys)).encode()).hexdigest()[:20]}"


def _writer(context, github: GitHubResource, lake: LakeResource, archive: ArchiveResource | None,
            settle_s: float, deadline: float | None = None) -> Writer:
    return Writer(github, lake.lake(), archive.store() if archive else None, load_config(), context.run_id,
                  context.log.info, settle_s, deadline)


@dg.op(pool="relay_dispatch", description="repository_dispatch (event_type pull_request) of pull_request "
       "deliveries to every allowlisted downstream, once per (delivery, downstream), in the `dispatches` ledger.")
def dispatch_pull_requests(context: dg.OpExecutionContext, config: RelayEventsConfig,
                           github: GitHubResource, lake: LakeResource):
    if github.dry_run:
        context.log.warning("DRY RUN: no GitHub credentials; dispatches are logged and recorded "
                            "as dry_run, not sent (set GITHUB_TOKEN to send)")
    w, events = _writer(context, github, lake, None, config.claim_settle_s), _events(config)
    outcomes = [o for event in events for o in dispatch_pull_request(event, w)]
    yield from report_outcomes(context, github, lake, outcomes, f"{len(events)} pull_request deliveries", config, {
        "deliveries": ", ".join(e.delivery_id for e in events)[:2000],
        "pull_requests": ", ".join(sorted({f"#{e.pr_number}" for e in events if e.pr_number}))[:2000]}, w.outage)


def _act_all(context: dg.OpExecutionContext, config: RelayEventsConfig, w: Writer, items: list, act, what: str):
    """Act on every item of the run; yield the ledger's materialization and the outcomes, or retry
    later: when another writer's claim is young, or an item's action raised (GitHub gave no answer
    or a 5xx). One item failing never stops the others, unless GitHub is down (`act_within`), and
    the retry acts on them all again: the ledgers skip what is done and look up what is in doubt.
    Each retry starts one item further on, so that one item GitHub alone fails on (a 5xx) does not
    stop every try before the others."""
    numbered = list(enumerate(items))
    start = context.retry_number % len(items) if items else 0
    acted = act_within(numbered[start:] + numbered[:start], lambda pair: act(pair[1], w),
                       lambda pair: f"{what} #{pair[0] + 1}", float("inf"), outage=w.outage)
    done = {key: outcome for outcomes in acted.done.values() for key, outcome in outcomes.items()}
    for error in acted.errors:
        context.log.warning(f"{error}; retried by the run")
    if acted.outage:
        context.log.error(acted.outage)
    if acted.errors:
        raise dg.RetryRequested(max_retries=config.max_retries, seconds_to_wait=config.retry_wait_s) from dg.Failure(
            acted.outage or f"{len(acted.errors)} of {len(items)} item(s) failed: " + "; ".join(acted.errors)[:2000])
    # another writer's claim, still young, or this run's own withdrawn as too slow to write: look
    # again once settled or stale
    if {"in_flight", "deferred"} & set(done.values()):
        raise dg.RetryRequested(max_retries=config.max_retries, seconds_to_wait=IN_FLIGHT_S)
    counts = Counter(done.values())
    yield dg.AssetMaterialization(asset_key=ACTIONS_TABLE, metadata={what: len(done), **counts,
                                                                    **ledger_metadata(w.lake, ACTIONS_TABLE)})
    yield dg.Output(done, metadata={**{f"{k}_count": v for k, v in counts.items()},
                                    "outcomes": dg.MetadataValue.json(done)})


@dg.op(description="ciflow/crcr/<device> labels: upstream check runs wanted for the device's L3 repositories "
       "on the head, and created now for every job that already reported.")
def label_check_runs(context: dg.OpExecutionContext, config: RelayEventsConfig, github: GitHubResource,
                     lake: LakeResource, archive: ArchiveResource):
    w = _writer(context, github, lake, archive, config.claim_settle_s)
    yield from _act_all(context, config, w, _events(config), act_on_event, "check runs")


@dg.op(description="Re-run the failed jobs of the downstream runs behind re-requested crcr/... check runs "
       "(L3/L4 only), once per request.")
def rerun_downstream(context: dg.OpExecutionContext, config: RelayEventsConfig, github: GitHubResource,
                     lake: LakeResource):
    w = _writer(context, github, lake, None, config.claim_settle_s)
    yield from _act_all(context, config, w, _events(config), act_on_event, "re-runs")


@dg.op(description="The upstream check runs of L3/L4 downstream job callbacks, each created once (never "
       "edited) when the repository's level and labels want one.")
def create_upstream_check_runs(context: dg.OpExecutionContext, config: RelayEventsConfig, github: GitHubResource,
                               lake: LakeResource):
    w = _writer(context, github, lake, None, config.claim_settle_s)
    yield from _act_all(context, config, w, json.loads(config.events_json), act_on_callback, "check runs")


class ZombieSweepConfig(dg.Config):
    """How long a check run may stay in progress before it is completed as timed out: unset, the
    relay config's `zombie_timeout_seconds`, which the schedule's sweeps follow."""

    timeout_s: float | None = None
    max_retries: int = 3
    retry_wait_s: float = 60.0
    claim_settle_s: float = CLAIM_SETTLE_S


@dg.op(description="Upstream check runs still in progress past the timeout (zombie_timeout_seconds, 6 h by "
       "default) with no completed callback: each completed with conclusion timed_out, once, as the relay's "
       "zombie sweeper does.")
def time_out_zombie_check_runs(context: dg.OpExecutionContext, config: ZombieSweepConfig, github: GitHubResource,
                               lake: LakeResource):
    w = _writer(context, github, lake, None, config.claim_settle_s)
    try:
        timeout = sweep_timeout(w.relay, config.timeout_s)
    except ValueError as exc:
        raise dg.Failure(str(exc)) from None
    now = dt.datetime.now(dt.timezone.utc)
    zombies = zombie_jobs(w.lake, now, timeout)
    if not zombies:
        context.log.info(f"no upstream check run in progress for more than {timeout.total_seconds():g} s")
        yield dg.Output({}, metadata={"zombies": 0})
        return
    if github.dry_run:
        context.log.warning("DRY RUN: no GitHub credentials; what would be sent is logged and recorded "
                            "as dry_run (set GITHUB_TOKEN to send)")
    yield from _act_all(context, config, w, zombies, time_out, "timed-out check runs")


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


@dg.job(tags=CHECK_TAGS, executor_def=IN_PROCESS,
        description="Complete as timed out the upstream check runs whose downstream job never reported.")
def zombie_check_run_job():
    time_out_zombie_check_runs()


ZOMBIE_SWEEP_EVERY_MIN = 10


zombie_check_run_schedule = dg.ScheduleDefinition(
    name="zombie_check_run_schedule", job=zombie_check_run_job, cron_schedule=f"*/{ZOMBIE_SWEEP_EVERY_MIN} * * * *",
    execution_timezone="UTC",
    description=f"Every {ZOMBIE_SWEEP_EVERY_MIN} minutes, completes as timed out the upstream check runs whose "
                f"downstream job never reported within zombie_timeout_seconds (TORCHCI_CONFIG; default "
                f"{ZOMBIE_TIMEOUT_S / 3600:g} h). "
                "Starts by itself only where GitHub credentials are set (GITHUB_TOKEN or GITHUB_APP_ID); without "
                "them there is no check run it could complete, so it is off (it can be started in the UI).",
    default_status=dg.DefaultScheduleStatus.RUNNING if has_credentials() else dg.DefaultScheduleStatus.STOPPED)


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


# Relay runs are dequeued before backfills and refreshes: a check run or dispatch is awaited by
# people on the pull request, a partition's refresh is not.
PRIORITY = {"dagster/priority": "10"}


def tick_writer(context, sensor: str, github: GitHubResource, lake: LakeResource, archive: ArchiveResource) -> Writer:
    """The writer of a sensor tick: a GitHub client that gives up fast, and the tick's deadline."""
    if github.dry_run:
        context.log.warning("DRY RUN: no GitHub credentials; what would be sent is logged and recorded "
                            "as dry_run (set GITHUB_TOKEN to send)")
    # Unique per tick: the ledgers tell a writer's own earlier claims by it (check_runs.stale_claims),
    # and two replicas' ticks in the same second must not pass for one writer.
    run_id = f"{sensor}@{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}#{uuid.uuid4().hex[:8]}"
    return Writer(github.model_copy(update=CLIENT_LIMITS), lake.lake(), archive.store(), load_config(), run_id,
                  context.log.info, CLAIM_SETTLE_S, time.monotonic() + LISTENING.act_s)


# The ledgers' staging sweep (`sweep_ledgers`) runs in the relay sensors' ticks, which every
# deployment runs (the zombie schedule is off without credentials), at most this often per lake
# and process: it lists a few days of both ledgers.
LEDGER_SWEEP_EVERY_S = 600.0
_ledgers_swept: dict[str, float] = {}  # lake -> when this process last swept it (time.monotonic)


def sweep_ledgers_due(context, lake: LakeResource) -> list[str]:
    """Remove what killed writers left in the ledgers, when this process has not for a while; a
    failure is logged and left to a later tick: the relay itself must not wait on housekeeping."""
    if time.monotonic() - _ledgers_swept.get(lake.uri, -LEDGER_SWEEP_EVERY_S) < LEDGER_SWEEP_EVERY_S:
        return []
    _ledgers_swept[lake.uri] = time.monotonic()
    try:
        swept = sweep_ledgers(lake.lake(), dt.datetime.now(dt.timezone.utc))
    except OSError as exc:
        context.log.warning(f"the relay ledgers' staging files could not be swept ({exc}); a later tick tries again")
        return []
    if swept:
        context.log.info(f"removed {len(swept)} staging file(s) killed ledger writers left: " + ", ".join(swept[:10]))
    return swept


def tick_listen(context, archive: ArchiveResource, pick, stream: str, act, lake: LakeResource):
    sweep_ledgers_due(context, lake)
    return listen(archive.store(), context.cursor, load_config(), pick, stream, act, LISTENING, context.log.info)


def tick_result(context, sensor: str, acted: Acted, requests_: list, cursor: str, table: str,
                what: str, lake: LakeResource) -> dg.SensorResult:
    """The tick's answer: its writes as a materialization of the ledger they went to (so the UI
    lists every dispatch and check run), runs for what is left, and the cursor past it all."""
    for error in acted.errors:
        context.log.warning(f"{error}; left to a run, which retries")
    if acted.outage:
        context.log.error(acted.outage)
    events = []
    if acted.done:
        counts = Counter(o for outcomes in acted.done.values() for o in outcomes.values())
        events.append(dg.AssetMaterialization(asset_key=table, metadata={
            what: len(acted.done), **{f"{k}_count": v for k, v in counts.items()},
            "outcomes": dg.MetadataValue.json(acted.done), "written_by": sensor,
            **ledger_metadata(lake.lake(), table)}))
    if not requests_ and not events:
        return dg.SensorResult(skip_reason=f"no new {what}", cursor=cursor)
    return dg.SensorResult(run_requests=requests_, asset_events=events, cursor=cursor)


def run_requests(job: dg.JobDefinition, op: str, items: list[dict], keys: list[str], tags: dict) -> list:
    """Runs of `job` for the items a tick leaves, MAX_EVENTS_PER_RUN per run."""
    out = []
    for i in range(0, len(items), MAX_EVENTS_PER_RUN):
        chunk, chunk_keys = items[i:i + MAX_EVENTS_PER_RUN], keys[i:i + MAX_EVENTS_PER_RUN]
        out.append(dg.RunRequest(run_key=batch_key(job.name, chunk_keys), job_name=job.name,
                                 run_config=events_run_config(op, chunk),
                                 tags={**PRIORITY, "torchci/events": str(len(chunk)), **tags}))
    return out


@dg.sensor(jobs=[pull_request_dispatch_job, check_run_label_job, rerun_job], minimum_interval_seconds=TICK_S,
           default_status=dg.DefaultSensorStatus.RUNNING,
           description="Upstream pull_request deliveries in the webhook archive, dispatched downstream by the "
                       "tick itself; ciflow/crcr labels (their check runs), re-runs asked from the Checks tab and "
                       "what a tick could not finish go to runs. Without GitHub credentials each write is a dry "
                       "run, recorded as dry_run in its ledger (dispatches; check runs and re-runs: relay_actions).")
def pull_request_sensor(context: dg.SensorEvaluationContext, archive: ArchiveResource, github: GitHubResource,
                        lake: LakeResource):
    writer: list[Writer] = []  # made at the first delivery to act on: a quiet tick logs nothing about GitHub

    def act(events: list[RelayEvent], seconds_left: float) -> Acted:
        now = [e for e in events if e.kind == "dispatch"]
        if now and not writer:
            writer.append(tick_writer(context, "pull_request_sensor", github, lake, archive))
        acted = act_within(now, lambda e: act_on_event(e, writer[0]), lambda e: e.delivery_id, seconds_left,
                           outage=writer[0].outage if writer else None)
        acted.left += [e for e in events if e.kind != "dispatch"]
        return acted

    heard = tick_listen(context, archive, pick_relay_event, "webhooks", act, lake)
    later, requests_ = heard.acted.left, []
    for job, op in {j.name: (j, o) for j, o in (JOB_FOR_KIND[e.kind] for e in later)}.values():
        mine = [e for e in later if JOB_FOR_KIND[e.kind][0] is job]
        requests_ += run_requests(job, op, [event_item(e) for e in mine], [e.run_key for e in mine],
                                  {"torchci/delivery": mine[0].delivery_id})
    return tick_result(context, "pull_request_sensor", heard.acted, requests_, heard.cursor, LEDGER_TABLE,
                       "pull request deliveries", lake)


@dg.sensor(job=check_run_job, minimum_interval_seconds=TICK_S, default_status=dg.DefaultSensorStatus.RUNNING,
           description="L3/L4 downstream callbacks about pull requests in the ci-results archive: the tick "
                       "creates their upstream check runs; what it could not finish goes to a run. Without GitHub "
                       "credentials each check run is a dry run, recorded as dry_run in the relay_actions ledger.")
def check_run_sensor(context: dg.SensorEvaluationContext, archive: ArchiveResource, github: GitHubResource,
                     lake: LakeResource):
    writer: list[Writer] = []

    def act(found: list, seconds_left: float) -> Acted:
        if not writer:
            writer.append(tick_writer(context, "check_run_sensor", github, lake, archive))
        return act_within(found, lambda f: act_on_callback(f.record, writer[0]), lambda f: f.run_key, seconds_left,
                          outage=writer[0].outage)

    heard = tick_listen(context, archive, pick_callback, "ci-results", act, lake)
    left = heard.acted.left
    requests_ = run_requests(check_run_job, "create_upstream_check_runs", [f.record for f in left],
                             [f.run_key for f in left], {"torchci/sha": left[0].job.head_sha} if left else {})
    return tick_result(context, "check_run_sensor", heard.acted, requests_, heard.cursor, ACTIONS_TABLE,
                       "L3/L4 pull request callbacks", lake)


defs = dg.Definitions(jobs=[pull_request_dispatch_job, check_run_label_job, rerun_job, check_run_job,
                            zombie_check_run_job],
                      sensors=[pull_request_sensor, check_run_sensor], schedules=[zombie_check_run_schedule])
