"""The intra-day refresh: when new files land in the archive, bring the day's outputs up to date.

The daily schedule computes day D at 00:30 on D+1, so without this a test that starts flaking
waits up to a day to be disabled and a pull request's comment is a day old. `archive_refresh_sensor`
lists the archive's day folders every 30 s (a fingerprint of names and sizes, `ingest.landed`: no
file is read) and, when something landed since the day's last refresh, requests one
`archive_refresh` run of that day's partition.

What a refresh runs (`REFRESH_ASSETS`): the ingest of what landed, the day's test rows with their
jobs and their aggregates, flaky tests and the DISABLED issues and list, the UNSTABLE job list,
commit_health and pr_jobs, Dr. CI's comments and the HUD: what someone waits for within minutes, and
what it reads of the day. The aggregates add only the test_run parts they have not counted yet (`derived.results.
increments`), so a refresh costs what landed plus a fixed part. Left to the daily run
(`DAILY_ONLY_ASSETS`): the assets that read windows of days and barely move with an hour of data
(test times and shard plans, time regressions, slow tests, smoke sets, backend levels, the daily
CI metrics, which describe the settled day before). Their partition of today stays as the daily
run (or nothing) left it, which the UI shows as such. One process runs the whole refresh
(in-process executor): a process per step would cost more than most steps.

The rules, each a plain function below so the tests call them directly:
  * watched days: today's and yesterday's (UTC, by the clock: the archive's `day=` is the UTC day
    of receipt), from the first daily partition on. Yesterday because files keep landing in its
    folder after midnight (a spool segment rolled at 00:00:40, a receiver restarted after an
    outage rolls what it holds). The daily schedule's run of yesterday tags the fingerprint it saw
    (`FINGERPRINT_TAG`), and once that run has succeeded the sensor takes it as that day's
    baseline: the schedule's run is not repeated, and only what lands after it triggers a refresh
    of yesterday. A daily run that failed or was canceled is no baseline (it may not have ingested
    what it saw): the sensor refreshes the day once after it, on what the archive holds then, and
    again as more lands. A watched day past
    the last partition (an archive that ended before today, until the code location reloads) has
    no partition to refresh: when files land there the sensor warns and says what to do;
  * late days: a file landing in an older day's folder (a receiver that could not roll its spool
    for days: the deliveries were acknowledged, GitHub sends them no more) would be read by
    nothing. The receiver marks such a day (`_late/<day>` in the archive, `receiver.spool`), and
    the sensor watches a marked day within the partitions (MAX_LATE_DAYS a tick, oldest first) as
    it watches yesterday, until a run of that partition has succeeded on what the day's folders
    hold (its own refresh, any run tagged with the fingerprint it ran on, or a run of the whole job
    without one, a backfill, created after the sensor requested that state): then it deletes the
    marker (`forget_marker`, which writes it back should a late file land meanwhile), and looks at
    the day again only when another late file marks it. Its refreshes' run keys end in `:late`, as
    the state may have been requested, and failed, while it was yesterday. A failed refresh of a
    late day is retried after 1, 2, 4, 8 intervals, at most MAX_LATE_ATTEMPTS runs a state (run
    keys ending in `:retry-<n>`): nothing else would retry it, the day's daily run being over;
  * a day is refreshed when its fingerprint differs from its baseline (the one the sensor's last
    request, or the schedule's last successful run, saw), or when the day's latest daily run
    failed and no request of the sensor has followed it; at most once per interval (`TORCHCI_REFRESH_MINUTES`,
    default 1.5, 0 turns the refresh off), on the tick nearest the interval's end (within it, the
    day's folders are not listed at all: nothing could be requested, and on S3 each listing is a few
    requests and ~1 s); never while a
    run of that partition is queued or running (whatever launched it): what lands meanwhile is
    picked up at the first tick after it;
  * the cursor (per watched day: the fingerprint requested, when, and the failed daily run the
    request answered; per marked day whose marker the sensor could not delete: its stamp, settled)
    advances only with the request, or with a late day's success, and run keys are `<day>:<fingerprint>`,
    unique per state of the day, since Dagster remembers run keys forever; the refresh after a
    failed daily run adds `:after-<its run id>`, as the state it saw may have been requested before.

A refresh and another run of the same partition (the daily schedule's, a backfill, a re-execution)
never run at once: dagster.yaml limits runs to one per `dagster/partition` tag value, so the later
one waits in the queue. (`torchci run` executes in process, outside the queue.) A failed refresh
of a watched day is not requested again for the same files: the next landing, or the daily
schedule, retries it; should the daily run fail too, the sensor's one refresh after it does.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from dataclasses import dataclass, field

import dagster as dg

from jobs.daily import FINGERPRINT_TAG, all_assets_job
from resources.configured import DUCKDB_THREADS_TAG, ArchiveResource
from resources.storage import Store
from torchci_assets.cadence import DEFAULT_REFRESH_MINUTES, REFRESH_MINUTES_VAR, refresh_interval_s
from torchci_assets.ingest.increments import REFRESH_TAG, REFRESH_VALUE
from torchci_assets.ingest.landed import DayFingerprint, day_fingerprint
from torchci_assets.partitions import daily_partitions, last_partition
from torchci_assets.receiver.spool import LATE_FOLDER, late_marker_path, write_late_marker

# How often the sensor lists the archive: the refresh starts on the tick nearest its interval's
# end; a listing of a PyTorch-sized day takes ~1 s (a few requests on S3).
TICK_SECONDS = 30
PARTITION_TAG = "dagster/partition"
WATCHED_DAYS = 2  # today and yesterday
_IN_FLIGHT = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
              dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]
_FAILED = [dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED]
_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
LATE_KEY = "late"  # the cursor's settled markers, beside its days
STANDIN = ".settling"  # `_late/<day>.settling`: the day's marker while the sensor deletes it (`forget_marker`)
# Late days looked at per tick, oldest first: each costs a listing of its day (~1 s on S3 for a
# PyTorch-sized day), and the tick must stay well under a minute after an outage of weeks.
MAX_LATE_DAYS = 10
# Runs a late day's state may cost: a failed one is retried after 1, 2, 4, 8 refresh intervals
# (~22 min at the default), as a killed run or an S3 blip heals within minutes without anyone,
# while a day that always fails (a bug, a file the ingest rejects) costs 5 runs, then the warning
# asks an operator. Nothing else retries it: the day's daily run is over, and GitHub redelivers nothing.
MAX_LATE_ATTEMPTS = 5

# What a refresh materializes: the ingest of what landed and the outputs someone waits for within
# the hour (the disabled list, the HUD's commit grid and PR pages, Dr. CI's comments), with what
# they read of the day. The rest reads windows of days and moves little with an hour of data:
# test times and shard plans, time regressions, slow tests, smoke sets, backend levels and the
# daily CI metrics (of the settled day before) are the daily run's.
REFRESH_ASSETS = (
    "job_failure", "test_results", "test_daily_stats", "flaky_tests", "disabled_issues", "disabled_tests",
    "unstable_jobs", "commit_health", "pr_jobs", "drci_comments", "hud_site",
)
DAILY_ONLY_ASSETS = (
    "test_time_daily", "test_time_sha_daily", "test_times", "shard_plans", "test_time_regressions", "slow_tests",
    "smoke_tests", "backend_health", "backend_levels", "ci_metrics_daily",
)
REFRESH_SELECTION = (dg.AssetSelection.groups("ingest") | dg.AssetSelection.assets(*REFRESH_ASSETS)
                     ).required_multi_asset_neighbors()

archive_refresh_job = dg.define_asset_job(
    "archive_refresh",
    selection=REFRESH_SELECTION,
    # A refresh's queries read minutes of rows: on one DuckDB thread they cost ~0.8 CPU-s less.
    tags={REFRESH_TAG: REFRESH_VALUE, DUCKDB_THREADS_TAG: "1"},
    # One process for the whole run: a process per step would spend more time starting Python
    # than most steps take. The UI still shows each step and its timing.
    executor_def=dg.in_process_executor,
    description="Intra-day refresh of the day whose archive folders received new files (requested by "
                "archive_refresh_sensor): the ingest of what landed, the test aggregates (adding only new "
                "test_run parts), flaky tests and the disabled list, commit_health, pr_jobs, Dr. CI's comments "
                "and the HUD. Test times, shard plans, time regressions, slow tests, smoke sets, backend levels "
                "and daily CI metrics are left to the daily run (all_assets_daily).",
)


def watched_days(now: float, first_day: str) -> list[str]:
    """Yesterday and today (UTC) at `now`, oldest first, from the first partition on. Today may be
    past the last partition (an archive that ended before today has none for it until the code
    location reloads): the sensor says so instead of refreshing it."""
    today = dt.datetime.fromtimestamp(now, dt.timezone.utc).date()
    days = [(today - dt.timedelta(days=i)).isoformat() for i in range(WATCHED_DAYS - 1, -1, -1)]
    return [d for d in days if d >= first_day]


@dataclass(frozen=True)
class Seen:
    """A state of a day's archive that a run was requested for, and when (epoch seconds); for the
    sensor's own requests, the failed daily run of the day it had seen then (`after`), so that a
    failure calls for one refresh, not one per tick."""

    fingerprint: str
    at: float
    after: str | None = None


@dataclass
class RefreshCursor:
    """The sensor's memory: per watched day, the last state it requested a refresh for; per late
    day, the stamp of the marker a successful run has answered (`settled`), so that an answered
    marker costs no listing of its day."""

    days: dict[str, Seen]
    settled: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        out: dict = {d: {"fingerprint": s.fingerprint, "at": s.at, **({"after": s.after} if s.after else {})}
                     for d, s in sorted(self.days.items())}
        if self.settled:
            out[LATE_KEY] = dict(sorted(self.settled.items()))
        return json.dumps(out, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | None) -> "RefreshCursor":
        raw = json.loads(text) if text else {}
        settled = raw.pop(LATE_KEY, {})
        return cls({d: Seen(s["fingerprint"], float(s["at"]), s.get("after")) for d, s in raw.items()}, settled)

    def advanced(self, requested: list[tuple[str, str]], now: float, keep: list[str],
                 after: dict[str, str] | None = None, settled: dict[str, str] | None = None) -> "RefreshCursor":
        """The cursor once the (day, fingerprint) refreshes are requested, each answering the failed
        daily run `after[day]` if any; only the `keep` days stay. `settled`, when given, replaces
        the settled markers."""
        days = {d: s for d, s in self.days.items() if d in keep}
        days.update({d: Seen(fp, now, (after or {}).get(d)) for d, fp in requested})
        return RefreshCursor(days, dict(self.settled if settled is None else settled))


@dataclass(frozen=True)
class Decision:
    day: str
    request: bool
    reason: str


def baseline(cursor: Seen | None, daily_run: Seen | None) -> Seen | None:
    """The latest state a run of the day was requested for: the sensor's own, or the daily schedule's."""
    candidates = [s for s in (cursor, daily_run) if s is not None]
    return max(candidates, key=lambda s: s.at) if candidates else None


def decide(fp: DayFingerprint, base: Seen | None, last_request: Seen | None, in_flight: str | None,
           now: float, interval_s: float, failed_daily: str | None = None) -> Decision:
    """Whether to refresh `fp.day` now.

    `base` is the state the day's last run was requested for (see `baseline`), `last_request` the
    sensor's own last request of the day (the interval counts from it), `in_flight` the id of a
    run of that partition still queued or running, `failed_daily` the id of the day's failed daily
    run no request of the sensor has followed yet (`failed_daily_run`): the day is due even unchanged.
    """
    day = fp.day
    if fp.files == 0:
        return Decision(day, False, f"{day}: no file in the archive yet")
    if base is not None and base.fingerprint == fp.short and not failed_daily:
        return Decision(day, False, f"{day}: nothing new since {_hhmm(base.at)} ({fp.files:,} files)")
    if in_flight:
        return Decision(day, False, f"{day}: new files, but run {in_flight} of this partition is in flight; "
                                    "they are picked up after it")
    # Requests happen on the sensor's ticks, TICK_SECONDS apart give or take the time each tick takes:
    # the tick nearest the interval's end takes it, even a second early, else the refresh would
    # wait for the next tick, most of a tick late (a 2-minute interval measured 150 s apart 1 time in 3).
    if last_request is not None and not interval_over(last_request, now, interval_s):
        wait = interval_s - (now - last_request.at)
        return Decision(day, False, f"{day}: new files; refreshed at {_hhmm(last_request.at)}, next refresh "
                                    f"in {wait / 60:.1f} min ({REFRESH_MINUTES_VAR}={interval_s / 60:g})")
    what = ("first refresh" if base is None else f"the daily run {failed_daily} failed" if failed_daily
            else f"changed since {_hhmm(base.at)}")
    return Decision(day, True, f"{day}: {fp.files:,} files, {fp.bytes / 1e6:,.1f} MB ({what})")


def interval_over(last_request: Seen, now: float, interval_s: float) -> bool:
    """Whether the day may be refreshed again at `now`: its interval since the sensor's last request
    ends before the next tick's midpoint."""
    return now - last_request.at >= interval_s - TICK_SECONDS / 2


def resting(day: str, last_request: Seen, now: float, interval_s: float) -> Decision:
    """The decision for a watched day within its interval, made without listing its folders: no
    request can follow whatever landed (`decide` would wait too), and a listing costs ~1 s and a
    few requests on S3, two ticks in three at the default interval and 29 in 30 at 15 minutes."""
    wait = interval_s - (now - last_request.at)
    return Decision(day, False, f"{day}: refreshed at {_hhmm(last_request.at)}; next refresh in {wait / 60:.1f} min "
                                f"if files landed ({REFRESH_MINUTES_VAR}={interval_s / 60:g}; the folders are "
                                "listed then)")


def no_partition(fp: DayFingerprint, last_day: str) -> Decision:
    """Files landed in a watched day the partitions do not reach yet: say so and what to do, since
    neither this sensor nor the daily schedule will ever run that day until the code location reloads."""
    files = f"{fp.files:,} file{'s' if fp.files != 1 else ''}"
    return Decision(fp.day, False,
                    f"{fp.day}: {files} landed, but the daily partitions end on {last_day} (the archive ended "
                    "before today when the code location loaded), so this day is neither refreshed nor run daily: "
                    "reload the code location (Deployment > Code locations > Reload in the UI, or restart "
                    "`make dev`), or set TORCHCI_FIRST_DAY so that the partitions always run to today")


def run_key(fp: DayFingerprint, after: str | None = None, late: bool = False, retry: int = 0) -> str:
    return (f"{fp.day}:{fp.short}" + (f":after-{after}" if after else "") + (":late" if late else "")
            + (f":retry-{retry}" if retry else ""))


def late_markers(store: Store) -> dict[str, str]:
    """day -> stamp of each `_late/<day>` marker in the archive (see `receiver.spool`): one listing
    of a small folder, whatever the number of days it names."""
    out: dict[str, str] = {}
    for entry in store.list_files(LATE_FOLDER, ("",)):
        name = entry.path.rsplit("/", 1)[-1].removesuffix(STANDIN)
        if entry.refused is None and _DAY.fullmatch(name):
            stamp = entry.stamp or str(entry.size)
            out[name] = f"{out[name]}+{stamp}" if name in out else stamp
    return out


def late_days(markers: dict[str, str], settled: dict[str, str], watched: list[str], first: str,
              last: str) -> list[str]:
    """The marked days to look at now: not watched anyway, within the partitions (a day before
    them is never run; one after them is `no_partition`'s), and whose marker no success answered."""
    return sorted(d for d, stamp in markers.items()
                  if d not in watched and first <= d <= last and settled.get(d) != stamp)


def succeeded_on(instance: dg.DagsterInstance, day: str, fingerprint: str) -> bool:
    """Whether a run of `day`'s partition (any job) succeeded on the day's files as `fingerprint`
    says they are: then it ingested every late file there is."""
    return bool(instance.get_runs(dg.RunsFilter(tags={PARTITION_TAG: day, FINGERPRINT_TAG: fingerprint},
                                                statuses=[dg.DagsterRunStatus.SUCCESS]), limit=1))


def ran_whole_after(instance: dg.DagsterInstance, own: Seen | None, fp: DayFingerprint) -> bool:
    """Whether a run of the whole daily (or refresh) job of `fp.day` that carries no fingerprint (a
    backfill, a launch by hand) succeeded, created after the sensor requested the day as it is now:
    its ingest listed the day later still, so it read every file. A run tagged with a fingerprint
    is judged by it (`succeeded_on`)."""
    if own is None or own.fingerprint != fp.short:
        return False
    after = dt.datetime.fromtimestamp(own.at, dt.timezone.utc)
    runs = instance.get_runs(dg.RunsFilter(tags={PARTITION_TAG: fp.day}, statuses=[dg.DagsterRunStatus.SUCCESS],
                                           created_after=after), limit=20)
    return any(r.job_name in (all_assets_job.name, archive_refresh_job.name) and not r.asset_selection
               and FINGERPRINT_TAG not in r.tags for r in runs)


def retry_wait(failures: int, last_failed: float, now: float, interval_s: float) -> float:
    """Seconds until a late day whose state `failures` runs failed on, the last at `last_failed`,
    is retried: 1, 2, 4... intervals after that failure (the tick nearest the end takes it)."""
    return last_failed + interval_s * 2 ** (failures - 1) - TICK_SECONDS / 2 - now


def late_stuck(instance: dg.DagsterInstance, fp: DayFingerprint, now: float,
               interval_s: float) -> tuple[str, bool, int]:
    """Why a late day with nothing new is not settled yet, whether the operator should see it, and
    the retry to request now (0: none): its run is in flight, or failed and is retried with a
    backoff (`retry_wait`) up to MAX_LATE_ATTEMPTS runs of the state, each retry a run key of its
    own, so that a failure never loops."""
    if flying := in_flight_run(instance, fp.day):
        return f"{fp.day}: late files, run {flying} of this partition is in flight", False, 0
    failures = instance.get_run_records(dg.RunsFilter(tags={PARTITION_TAG: fp.day, FINGERPRINT_TAG: fp.short},
                                                      statuses=_FAILED), limit=MAX_LATE_ATTEMPTS)
    files = f"{fp.day}: late files ({fp.files:,} files)"
    ask = ("run the day's partition again" if not failures else "re-execute it or run the day's partition again"
           ) + "; the sensor refreshes the day once more when another late file lands"
    if not failures or len(failures) >= MAX_LATE_ATTEMPTS:
        what = "no run succeeded on them" if not failures else (
            f"{len(failures)} runs failed on them, the last run {failures[0].dagster_run.run_id}")
        return f"{files}, {what}: {ask}", True, 0
    last = failures[0]
    wait = retry_wait(len(failures), last.end_time or last.update_timestamp.timestamp(), now, interval_s)
    retry = f"{files}, its refresh, run {last.dagster_run.run_id}, failed; retry {len(failures)} of " \
            f"{MAX_LATE_ATTEMPTS - 1}"
    if wait > 0:
        return f"{retry} in {wait / 60:.1f} min", True, 0
    return f"{retry} now", True, len(failures)


def forget_marker(store: Store, day: str, settled_on: str) -> bool:
    """Delete `day`'s marker, a run having succeeded on the day's files as `settled_on` says they
    are; whether it is gone. No store here deletes only if unchanged (S3 through pyarrow cannot),
    so the race with a receiver marking the day again is settled by order: the receiver publishes
    a late file before it writes its marker, so a marker it writes after the delete survives it,
    and the file of one it wrote before the delete is in the listing that follows: the day then
    differs from `settled_on`, and the marker is written back. A sensor killed, or refused the
    write, between the delete and the write-back would lose that file's day for good, so a stand-in
    (`<day>.settling`, a marker of the day as well) is written first and removed last."""
    standin = late_marker_path(day) + STANDIN
    write_late_marker(store, day, clock(), path=standin, by="archive_refresh_sensor", settled_on=settled_on,
                      why="the sensor is deleting the day's marker, a run having succeeded on its files")
    try:
        store.delete(late_marker_path(day))
    except OSError:
        store.delete(standin)  # nothing deleted: the folder as it was, the cursor remembering it settled
        raise
    settled = day_fingerprint(store, day).short == settled_on
    if not settled:
        write_late_marker(store, day, clock(), by="archive_refresh_sensor",
                          why="files landed in the day while the sensor deleted its marker")
    store.delete(standin)
    return settled


def settle(store: Store, looks: list["DayLook"], markers: dict[str, str], log) -> dict[str, str]:
    """Forget the markers of the late days a run has succeeded on (`forget_marker`); the stamps of
    those the sensor could not delete (an archive it may not write), for the cursor to remember as
    settled, so that they cost no listing either."""
    kept = {}
    for x in looks:
        day = x.fp.day
        try:
            gone = forget_marker(store, day, x.fp.short)
        except OSError as exc:
            log.warning(f"{day}: its marker {store.display(late_marker_path(day))} could not be deleted or "
                        f"written back ({exc}); the sensor remembers it as settled")
            kept[day] = markers[day]
            continue
        if not gone:
            log.warning(f"{day}: late files landed while its settled marker was deleted; marked again")
    return kept


def _hhmm(at: float) -> str:
    return dt.datetime.fromtimestamp(at, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def in_flight_run(instance: dg.DagsterInstance, day: str) -> str | None:
    """The id of a run of `day`'s partition (any job) still queued or running, if any."""
    runs = instance.get_runs(dg.RunsFilter(tags={PARTITION_TAG: day}, statuses=_IN_FLIGHT), limit=1)
    return runs[0].run_id if runs else None


def daily_run_seen(instance: dg.DagsterInstance, day: str) -> Seen | None:
    """The state the daily schedule's latest successful run of `day` was requested for, when it
    recorded one. Only a success: a failed run may not have ingested what it saw, and one in
    flight holds the refresh back anyway (`in_flight_run`)."""
    records = instance.get_run_records(dg.RunsFilter(job_name=all_assets_job.name, tags={PARTITION_TAG: day},
                                                     statuses=[dg.DagsterRunStatus.SUCCESS]), limit=1)
    if not records or FINGERPRINT_TAG not in records[0].dagster_run.tags:
        return None
    return Seen(records[0].dagster_run.tags[FINGERPRINT_TAG], records[0].create_timestamp.timestamp())


def failed_daily_run(instance: dg.DagsterInstance, day: str) -> str | None:
    """The id of the latest of the finished daily runs of `day`, when it failed or was canceled:
    the refresh outputs may lack what it was to ingest, and a refresh that failed before it is
    retried by nothing else. The sensor answers it with one refresh (`Seen.after` remembers which)."""
    runs = instance.get_runs(dg.RunsFilter(job_name=all_assets_job.name, tags={PARTITION_TAG: day},
                                           statuses=[dg.DagsterRunStatus.SUCCESS, *_FAILED]), limit=1)
    return runs[0].run_id if runs and runs[0].status in _FAILED else None


def clock() -> float:
    """The wall clock (a function, so tests can set the time of day)."""
    return time.time()


@dataclass
class DayLook:
    """What the sensor made of one day this tick."""

    fp: DayFingerprint | None  # None: not listed, the day being within its interval (`resting`)
    decision: Decision
    failed: str | None = None  # the day's latest finished daily run, when it failed
    unanswered: str | None = None  # that run, when no request of the sensor has followed it
    late: bool = False
    settled: bool = False  # a late day a run has succeeded on as its folders are now
    warn: bool = False  # a late day refreshed now, or whose refresh failed: for the operator to see
    retry: int = 0  # a late day's retry of its failed refresh (`late_stuck`)


def look_at(instance: dg.DagsterInstance, store: Store, cursor: RefreshCursor, day: str, now: float,
            interval: float, late: bool = False) -> DayLook:
    """The decision for `day` (`decide`), with what the request and the cursor need."""
    own = cursor.days.get(day)
    if not late and own is not None and not interval_over(own, now, interval):
        return DayLook(None, resting(day, own, now, interval))
    fp = day_fingerprint(store, day)
    if late and (succeeded_on(instance, day, fp.short) or ran_whole_after(instance, own, fp)):
        return DayLook(fp, Decision(day, False, f"{day}: late files refreshed"), late=True, settled=True)
    base = baseline(own, daily_run_seen(instance, day))
    failed = failed_daily_run(instance, day)
    unanswered = failed if failed and failed != (own.after if own else None) else None
    due = base is None or base.fingerprint != fp.short or unanswered
    flying = in_flight_run(instance, day) if due else None
    decision = decide(fp, base, own, flying, now, interval, unanswered)
    if not late:
        return DayLook(fp, decision, failed, unanswered)
    if not due:
        stuck, warn, retry = late_stuck(instance, fp, now, interval)
        return DayLook(fp, Decision(day, retry > 0, stuck), failed, unanswered, late=True, warn=warn, retry=retry)
    decision = Decision(day, decision.request, f"{decision.reason}; late files, landed after the day's daily run")
    return DayLook(fp, decision, failed, unanswered, late=True, warn=decision.request)


def nothing_to_do(looks: list[DayLook], unreached: list[Decision], first: str, last: str) -> str:
    return "; ".join([x.decision.reason for x in looks] + [d.reason for d in unreached]) or (
        f"no watched day within the partitions {first}..{last} "
        "(an archive that ended before today gets today's partition when the code location reloads)")


@dg.sensor(job=archive_refresh_job, minimum_interval_seconds=TICK_SECONDS,
           default_status=dg.DefaultSensorStatus.RUNNING,
           description="New files in today's (or yesterday's, or a day the receiver marked late) archive folders: "
                       "re-materializes that day's partitions (ingest, test aggregates, disabled list, HUD, Dr. CI), "
                       f"at most every {REFRESH_MINUTES_VAR} minutes (default {DEFAULT_REFRESH_MINUTES:g}) per day.")
def archive_refresh_sensor(context: dg.SensorEvaluationContext, archive: ArchiveResource):
    interval = refresh_interval_s()
    if interval == 0:
        return dg.SkipReason(f"intra-day refresh is off ({REFRESH_MINUTES_VAR}=0)")
    now = clock()
    cursor = RefreshCursor.from_json(context.cursor)
    first, last = daily_partitions.start.strftime("%Y-%m-%d"), last_partition()
    watched = watched_days(now, first)
    store = archive.store()
    unreached = [no_partition(beyond, last) for day in watched
                 if day > last and (beyond := day_fingerprint(store, day)).files]
    for d in unreached:
        context.log.warning(d.reason)
    markers = late_markers(store)
    late = late_days(markers, cursor.settled, watched, first, last)
    if waiting := late[MAX_LATE_DAYS:]:
        context.log.warning(f"{len(waiting)} more day(s) marked late ({waiting[0]}..{waiting[-1]}) wait until "
                            f"the {MAX_LATE_DAYS} before them are refreshed")
    looks = [look_at(context.instance, store, cursor, day, now, interval, day in late)
             for day in late[:MAX_LATE_DAYS] + [d for d in watched if d <= last]]
    for x in looks:
        (context.log.warning if x.warn else context.log.info)(x.decision.reason)
    chosen = [x for x in looks if x.decision.request]
    settled = {d: s for d, s in cursor.settled.items() if d in markers}
    settled.update(settle(store, [x for x in looks if x.settled], markers, context.log))
    keep = [x.decision.day for x in looks if not x.settled] + waiting
    advanced = cursor.advanced([(x.fp.day, x.fp.short) for x in chosen], now, keep,
                               {x.fp.day: x.failed for x in chosen if x.failed}, settled)
    if not chosen:
        reasons = nothing_to_do(looks, unreached, first, last)
        if settled == cursor.settled and not any(x.settled for x in looks):
            return dg.SkipReason(reasons)  # the cursor stays as it is
        return dg.SensorResult(skip_reason=reasons, cursor=advanced.to_json())
    requests = [dg.RunRequest(run_key=run_key(x.fp, x.unanswered, x.late, x.retry), partition_key=x.fp.day,
                              tags={FINGERPRINT_TAG: x.fp.short, "torchci/archive_files": str(x.fp.files)})
                for x in chosen]
    return dg.SensorResult(run_requests=requests, cursor=advanced.to_json())
