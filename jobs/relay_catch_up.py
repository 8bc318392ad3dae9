"""`relay_catch_up_sensor`: runs again, by itself, a relay run that failed (GitHub down past its retries).

The decision is `torchci_assets.relay.catch_up.plan` (why, and the waits); this sensor reads the
relay jobs' runs from the instance and requests the catch-ups due, with the failed run's config,
so nothing the run was to send waits for a person after an outage. A catch-up is a new run, not
a re-execution: Dagster's run retries re-run at once, into the same outage.
"""

import datetime as dt

import dagster as dg

from jobs.relay import dispatch_job
from jobs.relay_prs import PRIORITY, check_run_job, check_run_label_job, pull_request_dispatch_job, rerun_job
from torchci_assets.relay.catch_up import CATCH_UP_OF, LOOKBACK, ROOT_RUN_ID, Plan, RunState, plan

RELAY_JOBS = (dispatch_job, pull_request_dispatch_job, check_run_job, check_run_label_job, rerun_job)
# Catch-ups requested per tick at most; the rest are due on the next tick.
MAX_PER_TICK = 10
# Failed runs read per job and tick at most (an outage fails about one dispatch run in 3 minutes).
MAX_RUNS_READ = 2000
TICK_S = 60


def relay_runs(instance: dg.DagsterInstance, now: dt.datetime) -> list[RunState]:
    """The relay jobs' runs that failed within LOOKBACK of `now`, and the runs that repeat them (their
    catch-ups and re-executions, whatever their status). Not every relay run: a run's config holds
    its deliveries' payloads, so a tick reads only the few runs that may call for a catch-up."""
    since = now - LOOKBACK
    failed = [record for job in RELAY_JOBS for record in instance.get_run_records(
        dg.RunsFilter(job_name=job.name, statuses=[dg.DagsterRunStatus.FAILURE], updated_after=since),
        limit=MAX_RUNS_READ)]
    ids = [record.dagster_run.run_id for record in failed]
    later = [record for tag in (CATCH_UP_OF, ROOT_RUN_ID) for record in instance.get_run_records(
        dg.RunsFilter(tags={tag: ids}), limit=MAX_RUNS_READ)] if ids else []
    return [_state(record) for record in {r.dagster_run.run_id: r for r in failed + later}.values()]


def _state(record) -> RunState:
    run = record.dagster_run
    ended = dt.datetime.fromtimestamp(record.end_time, dt.timezone.utc) if record.end_time else None
    return RunState(run.run_id, run.job_name, run.status.value, dict(run.tags), ended, run.run_config or {})


def catch_up_requests(instance: dg.DagsterInstance, now: dt.datetime) -> tuple[list[dg.RunRequest], Plan]:
    """The runs to request at `now` (MAX_PER_TICK at most), and what the look found, its catch-ups due
    cut to those requested (for the tick's log)."""
    found = plan(relay_runs(instance, now), now, frozenset(j.name for j in RELAY_JOBS))
    found.due = found.due[:MAX_PER_TICK]  # the rest are due on the next tick
    requests = [dg.RunRequest(run_key=c.run_key, job_name=c.root.job_name, run_config=dict(c.root.run_config),
                              tags={**c.tags(), **PRIORITY}) for c in found.due]
    return requests, found


@dg.sensor(jobs=list(RELAY_JOBS), minimum_interval_seconds=TICK_S, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Runs again a relay run that failed (GitHub down past its retries, say): the same "
                       "deliveries or callbacks, 5, 10, 20, 40, 80 and 120 minutes after the last try ended, "
                       "until one succeeds. Each dispatch and check run is still sent once: a run sends only "
                       "what its ledger has not acknowledged. A run canceled by a person is left alone. Without "
                       "GitHub credentials the relay's runs are dry runs, which GitHub cannot fail: nothing to "
                       "catch up.")
def relay_catch_up_sensor(context: dg.SensorEvaluationContext):
    requests, found = catch_up_requests(context.instance, dt.datetime.now(dt.timezone.utc))
    for c in found.due:
        context.log.info(f"catch-up {c.number} of run {c.root.run_id} ({c.root.job_name})")
    if requests:
        for line in found.given_up:
            context.log.warning(line)
        return requests
    # every tick says what waits and what was given up, where the UI shows the sensor's ticks
    said = [f"given up: {line}" for line in found.given_up] + [f"waiting: {line}" for line in found.waiting]
    return dg.SkipReason("no failed relay run due for a catch-up" + ("; " + "; ".join(said[:5]) if said else ""))
