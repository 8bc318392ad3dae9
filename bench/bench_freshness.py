"""Freshness and cost of the intra-day refresh on a PyTorch-sized day (`make bench-freshness`).

Targets: landing in the archive -> disabled list, HUD and Dr. CI body p50 <= 90 s and p95 <= 3 min;
one refresh with 5 minutes of new files at the end of the day <= 5 CPU-seconds; a day's refreshes
<= 2x one full-day run; the full-day run's peak RSS < 1.5 GB.

Data: two simulated days of ~3.5 M test rows each (the simulator with every configuration, 80 test
files of ~115 tests: ~25,000 JUnit reports and ~20,000 webhook deliveries a day, ~450 MB on disk),
generated once under var/bench-freshness/cache with the first day materialized, and linked in as
yesterday and today (UTC, by the clock the sensor reads). Most of those days' jobs are main's: their
30 pull requests a day run ~800 jobs. PyTorch's pull requests run most of its jobs, which Dr. CI, the
HUD's pull request pages and `pr_jobs` read: `--prs-per-day 300` simulates ~25,000 pull request jobs
a day (~100,000 webhook deliveries, ~60,000 reports), in a cache of its own.

1. Cost, of runs started as dagster.yaml's run launcher starts them: forked from a process that
   has loaded the code location (BENCH_SPAWN=1: a new process per run, Dagster's default). Today's
   archive is linked in without its last 15 minutes (the deliveries received from 23:45 on, and the
   test reports and test-runs rows of the jobs they complete). A first refresh brings the day up to
   23:45; then three 5-minute slices land (`--slices`, `--slice-minutes`: e.g. 30 one-minute slices
   show what each added part costs later refreshes), each followed by the sensor's tick and its
   `archive_refresh` run, executed in process: the run's CPU (user + system, its children
   included: the webhook ingest scans in two), of which loading the code location, the wall time,
   peak RSS and each step's time. Then one full-day run of every asset (`all_assets_daily`) of the
   same day, and a day of refreshes modelled as refreshes per day x the measured cost of one (a day
   of real refreshes would take a day), that of one at the day's end and, before it all, the same
   measure with today as it stood at 06:00, 12:00 and 18:00 (`--day-hours`: the files received
   later and their jobs' reports, test-runs rows, CI results and logs not there yet), which gives
   the mean cost of a refresh over the day. And the floor under any refresh: a run of no-op steps with
   as many assets and checks as the refresh's, forked from a warm process, and in a new process
   (Python, dagster, the code location, then the run).
2. Freshness, measured end to end (--minutes, default 10): `dagster dev` (daemon, sensor, run
   queue) on port 3120 with the default settings (`--refresh-minutes` measures another
   TORCHCI_REFRESH_MINUTES), the day's other traffic landing meanwhile (`--busy-seconds`: a
   webhook file every 20 s, each a redelivery the ingest drops, so a refresh runs every interval
   as on a busy day; 0 measures isolated landings, which a quiet archive refreshes at the next
   tick). At random times a landing: three new
   main-branch jobs (their `completed` deliveries in a new webhook file, as the receiver rolls
   them) whose reports show a new flaky test, and a new failed job on an open pull request's
   head. Each landing is timed until the disabled list names the test, the HUD's tests.html
   shows it and the pull request's drci/<pr>.md lists the failed job. Webhook deliveries reach
   the archive up to the receiver's roll interval (TORCHCI_ROLL_INTERVAL_S, 30 s) after
   `torchci serve` acknowledges them; the figures from the archive add that wait for Dr. CI's.

The machine is shared (2 cores): the load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "var" / "bench-freshness"
CACHE = WORK / "cache"
RUN = WORK / "run"
HELD = WORK / "held"
BIN = Path(sys.executable).parent
DAYS = ("2026-10-01", "2026-10-02")  # the cache's days, linked in as yesterday and today
SIMULATE = ["--days", "2", "--start", DAYS[0], "--seed", "11", "--configs", "all", "--test-files", "80",
            "--tests-per-file", "115"]
SECTIONS = ("webhooks", "test-reports", "test-runs", "ci-results", "logs")
SLICES, SLICE_MIN = 3, 5
DAY_HOURS = (6, 12, 18)  # besides the day's end, the day model measures a refresh at these hours
PORT = 3120
BUSY_S = 20.0  # the day's other traffic under dagster dev: a webhook file lands this often
TARGET_P50_S, TARGET_P95_S, TARGET_CPU_S, TARGET_DAY_X, TARGET_RSS_MB = 90.0, 180.0, 5.0, 2.0, 1536
ROLL_S = 30.0

# How dagster.yaml's run launcher starts a run: a child forked from a process that has loaded the
# code location (torchci_assets/warm_worker.py). The child's CPU counts from the fork (Linux resets
# a child's resource usage), so what is measured is the run's own cost. BENCH_SPAWN=1 measures a
# new process per run instead, as Dagster's default launcher starts one.
WARM_LOAD = """
from dagster._core.code_pointer import ModuleCodePointer
from dagster._core.instance.ref import InstanceRef
from dagster._core.origin import RepositoryPythonOrigin
from dagster._serdes import serialize_value
from torchci_assets import warm_worker
warm_worker.load(serialize_value(RepositoryPythonOrigin(
    sys.executable, ModuleCodePointer("torchci_assets.definitions", "defs", os.getcwd()))),
    serialize_value(InstanceRef.from_dir(os.environ["DAGSTER_HOME"])))
warm_worker.freeze()
"""
WARM_FORK = """
if not os.environ.get("BENCH_SPAWN"):
""" + textwrap.indent(WARM_LOAD, "    ") + """
    child = os.fork()
    if child:
        sys.exit(os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]))
"""

# One evaluation of the refresh sensor, timed from an instance already made: the code server's process
# checked the instance's databases once (sqlite_storage), which a new process would pay again here.
TICK = """
import json, sys, time
import dagster as dg
from jobs.refresh import archive_refresh_sensor
from resources.configured import ArchiveResource
instance = dg.DagsterInstance.get()
t = time.perf_counter()
with dg.build_sensor_context(instance=instance, cursor=sys.argv[2] or None,
                             resources={"archive": ArchiveResource(uri=sys.argv[1])}) as ctx:
    r = archive_refresh_sensor(ctx)
reqs = [{"run_key": q.run_key, "partition": q.partition_key, "tags": q.tags} for q in (getattr(r, "run_requests", None) or [])]
print(json.dumps({"seconds": time.perf_counter() - t, "requests": reqs, "cursor": getattr(r, "cursor", None)}))
"""

RUN_JOB = """
import json, os, resource, sys, time
def cpu():
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime
import dagster as dg
from torchci_assets.definitions import defs
""" + WARM_FORK + """
loaded = cpu()
instance = dg.DagsterInstance.get()
job = defs.resolve_job_def(sys.argv[1])
t0 = time.time()
import cProfile, os
profile = cProfile.Profile() if os.environ.get("BENCH_PROFILE_DIR") else None
if profile:
    profile.enable()
res = job.execute_in_process(partition_key=sys.argv[2], tags=json.loads(sys.argv[3]), instance=instance,
                             raise_on_error=False,
                             run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}})
wall = time.time() - t0
if profile:
    profile.disable()
    profile.dump_stats(os.path.join(os.environ["BENCH_PROFILE_DIR"], f"{sys.argv[1]}-{res.run_id[:8]}.prof"))
steps, done = {}, {}
events = {}
for e in instance.all_logs(res.run_id):
    ev = e.dagster_event
    kind = ev.event_type_value if ev is not None else "log message"
    events[kind] = events.get(kind, 0) + 1
    if ev is None:
        continue
    if ev.event_type_value == "STEP_START":
        steps[ev.step_key] = e.timestamp
    elif ev.event_type_value == "STEP_SUCCESS":
        done[ev.step_key] = e.timestamp
stats = instance.get_latest_materialization_event(dg.AssetKey("test_daily_stats"))
mode = stats.asset_materialization.metadata.get("mode") if stats else None
print(json.dumps({"success": res.success, "seconds": wall, "cpu_s": cpu(), "load_cpu_s": loaded,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "steps": {k: done[k] - steps[k] for k in done if k in steps},
                  "stats_mode": mode.value if mode else None, "events": events}))
"""

# The floor of any refresh, whatever its steps do: a process like the one the daemon launches for a
# run (Python, dagster, the code location), then a run of as many no-op assets and checks as the
# refresh materializes, against the same instance. Run twice in the process: the second is the
# cost of a run in an already-loaded process. Last, the same assets and checks reported to the
# instance without a run: what a long-lived process keeping the outputs up to date would still
# pay Dagster per refresh.
FLOOR = """
import json, resource, sys
def cpu():
    s = resource.getrusage(resource.RUSAGE_SELF)
    return s.ru_utime + s.ru_stime
import dagster as dg
from torchci_assets.definitions import defs
from torchci_assets.partitions import daily_partitions
loaded = cpu()
refresh = defs.resolve_job_def("archive_refresh")
selected = refresh.asset_layer.selected_asset_keys
by_node = {a.node_def.name: a for a in defs.get_repository_def().assets_defs_by_key.values() if a.is_executable}
shape = [(len(by_node[n.name].keys & selected), len(n.output_defs) - len(by_node[n.name].keys & selected))
         for n in refresh.graph.node_defs]  # per step of the refresh: its number of assets and of checks
def noop(i, n_assets, n_checks):
    keys = [f"s{i}a{k}" for k in range(n_assets)]
    checks = [dg.AssetCheckSpec(f"c{k}", asset=keys[k % n_assets]) for k in range(n_checks)]
    @dg.multi_asset(specs=[dg.AssetSpec(k) for k in keys], check_specs=checks, partitions_def=daily_partitions,
                    name=f"s{i}")
    def _step(context):
        for k in keys:
            yield dg.MaterializeResult(asset_key=k, metadata={"rows": 1})
        for c in checks:
            yield dg.AssetCheckResult(asset_key=c.asset_key, check_name=c.name, passed=True)
    return _step
job = dg.define_asset_job("floor", selection=dg.AssetSelection.all(), executor_def=dg.in_process_executor)
floor = dg.Definitions(assets=[noop(i, a, c) for i, (a, c) in enumerate(shape)], jobs=[job]).resolve_job_def("floor")
import os
""" + WARM_LOAD + """
warm = cpu() - loaded
child = os.fork()  # a run as dagster.yaml's launcher starts one: forked from the warm worker
if child == 0:
    floor.execute_in_process(partition_key=sys.argv[1], instance=dg.DagsterInstance.get(),
                             run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}})
    os._exit(0)
_, status, usage = os.wait4(child, 0)
forked = usage.ru_utime + usage.ru_stime
import gc
gc.unfreeze()
runs = []
t = cpu()
instance = dg.DagsterInstance.get()  # counted in the first run, as in the forked one
for _ in range(2):
    floor.execute_in_process(partition_key=sys.argv[1], instance=instance,
                             run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}})
    runs.append(cpu() - t)
    t = cpu()
# The same assets and checks reported without a run, as a long-lived process would report its work.
# The checks without their partition: Dagster 1.13's SQL event log keeps one runless evaluation per
# check and partition (a second raises IntegrityError on asset_check_executions' unique key).
t = cpu()
for i, (n_assets, n_checks) in enumerate(shape):
    for k in range(n_assets):
        instance.report_runless_asset_event(dg.AssetMaterialization(f"s{i}a{k}", partition=sys.argv[1],
                                                                    metadata={"rows": 1}))
    for k in range(n_checks):
        instance.report_runless_asset_event(dg.AssetCheckEvaluation(dg.AssetKey(f"s{i}a{k % n_assets}"), f"c{k}",
                                                                    passed=True))
runless = cpu() - t
print(json.dumps({"steps": len(shape), "assets": sum(a for a, _ in shape), "checks": sum(c for _, c in shape),
                  "load_cpu_s": loaded + warm, "first_run_cpu_s": runs[0], "forked_run_cpu_s": forked,
                  "warm_run_cpu_s": runs[1], "runless_cpu_s": runless}))
"""


def utc_days() -> tuple[str, str]:
    today = dt.datetime.now(dt.timezone.utc).date()
    return (today - dt.timedelta(days=1)).isoformat(), today.isoformat()


def env_for(first_day: str, **extra: str) -> dict:
    return {**os.environ, "DAGSTER_HOME": str(RUN / "dagster"), "TORCHCI_ARCHIVE_URI": str(RUN / "archive"),
            "TORCHCI_LAKE_URI": str(RUN / "lake"), "TORCHCI_OUTPUTS_URI": str(RUN / "outputs"),
            "TORCHCI_FIRST_DAY": first_day, **extra}


def ensure_cache() -> None:
    marker = CACHE / "ready.json"
    if marker.exists():
        return
    shutil.rmtree(CACHE, ignore_errors=True)
    print(f"generating two PyTorch-sized days under {CACHE} (once, a few minutes) ...", flush=True)
    subprocess.run([str(BIN / "torchci"), "simulate", "--out", str(CACHE / "archive"), *SIMULATE], check=True)
    env = {**os.environ, "TORCHCI_ARCHIVE_URI": str(CACHE / "archive"), "TORCHCI_LAKE_URI": str(CACHE / "lake"),
           "TORCHCI_OUTPUTS_URI": str(CACHE / "outputs"), "TORCHCI_FIRST_DAY": DAYS[0]}
    env.pop("DAGSTER_HOME", None)
    with open(CACHE / "torchci-run.log", "wb") as log:
        done = subprocess.run([str(BIN / "torchci"), "run", "--from", DAYS[0], "--to", DAYS[0]], env=env,
                              stdout=log, stderr=subprocess.STDOUT)
    if done.returncode:
        sys.exit(f"materializing {DAYS[0]} of the cache failed: see {CACHE / 'torchci-run.log'}")
    marker.write_text(json.dumps({"days": DAYS}))


def link_tree(src: Path, dst: Path) -> None:
    """Hard links: the archive is read-only and the lake's parts are replaced by rename, so the cache stays intact."""
    shutil.copytree(src, dst, copy_function=os.link)


def prepare_run(yesterday: str, today: str, slice_of: Callable[[str], int] | None = None, hour: int = 24
                ) -> list[list[tuple[Path, Path]]]:
    """Link the cache in as yesterday and today, today as it stood at `hour`:00 (the day's end by
    default) without its last SLICES x SLICE_MIN minutes: the webhook deliveries received from then
    on and the test reports, test-runs rows, CI results and logs of the jobs they complete.
    Returns, per slice, the (held file, where it lands) pairs."""
    shutil.rmtree(RUN, ignore_errors=True)
    held_jobs, slices = hold_last_webhooks(today, slice_of or minute_slice, hour)
    later = later_jobs(hour)  # completed after `hour`: not in the archive yet
    for section in SECTIONS:
        for old, new in zip(DAYS, (yesterday, today)):
            src = CACHE / "archive" / section / f"day={old}"
            if not src.exists():
                continue
            if section in ("webhooks", "ci-results") and new == today:
                # one file per hour of receipt; the webhooks' last hour is hold_last_webhooks'
                last = hour - 1 if section == "webhooks" else hour
                folder = RUN / "archive" / section / f"day={new}"
                folder.mkdir(parents=True, exist_ok=True)
                for f in src.iterdir():
                    if file_hour(f.name) < last:
                        os.link(f, folder / f.name)
            elif section == "test-runs" and new == today:
                hold_test_runs(src, RUN / "archive" / section / f"day={new}", held_jobs, slices, later)
            elif section == "test-reports" and new == today:
                for run in src.iterdir():
                    for job in run.glob("*/*"):
                        if int(job.name) in later:
                            continue
                        k = held_jobs.get(int(job.name))
                        dst = RUN / "archive" / section / f"day={new}" / run.name / job.parent.name / job.name
                        if k is None:
                            link_tree(job, dst)
                        else:
                            slices[k].append((job, dst))
            elif section == "logs" and new == today:
                (RUN / "archive" / section / f"day={new}").mkdir(parents=True)
                for f in src.iterdir():
                    if int(f.name.split(".")[0]) not in later:
                        os.link(f, RUN / "archive" / section / f"day={new}" / f.name)
            else:
                link_tree(src, RUN / "archive" / section / f"day={new}")
    for table in (CACHE / "lake").iterdir():
        link_tree(table / f"day={DAYS[0]}", RUN / "lake" / table.name / f"day={yesterday}")
    link_tree(CACHE / "outputs", RUN / "outputs")
    (RUN / "dagster").mkdir(parents=True)
    shutil.copy(ROOT / "dagster.yaml", RUN / "dagster" / "dagster.yaml")
    return slices


def file_hour(name: str) -> int:
    """The hour of receipt in an hourly archive file's name (`hooks-20261002T07-000.jsonl.gz`)."""
    return int(name.split("T", 1)[1][:2])


def record(line: str) -> dict:
    """An archive line's record; {} for a line the simulator tore or made hostile (the ingest rejects
    it wherever it lands, so the benchmark leaves it where it is)."""
    try:
        rec = json.loads(line)
    except json.JSONDecodeError:
        return {}
    return rec if isinstance(rec, dict) else {}


def later_jobs(hour: int) -> set[int]:
    """The jobs completed at or after `hour`:00 of the cache's second day (none at the day's end)."""
    jobs: set[int] = set()
    for f in (CACHE / "archive" / "webhooks" / f"day={DAYS[1]}").iterdir():
        if file_hour(f.name) < hour:
            continue
        with gzip.open(f, "rt") as lines:
            for line in lines:
                if '"workflow_job"' in line:
                    rec = record(line)
                    if rec.get("event") == "workflow_job" and rec["payload"].get("action") == "completed":
                        jobs.add(int(rec["payload"]["workflow_job"]["id"]))
    return jobs


def minute_slice(received_at: str) -> int:
    """The slice of a delivery received at `received_at` during the last hour: SLICES of SLICE_MIN
    minutes at its end; negative before them."""
    return (int(received_at[14:16]) - (60 - SLICES * SLICE_MIN)) // SLICE_MIN


def hold_last_webhooks(today: str, slice_of: Callable[[str], int] = minute_slice, hour: int = 24
                       ) -> tuple[dict[int, int], list[list[tuple[Path, Path]]]]:
    """Split the cache's webhook file of the hour before `hour`:00 into SLICES by `slice_of` each
    delivery's receipt time:
    the lines of no slice (negative) go into today's folder, each slice into a file of its own under
    HELD (landing later as a file the receiver rolled). Returns job id -> slice of the jobs
    completed in a slice, and the slices."""
    stamp = f"{DAYS[1].replace('-', '')}T{hour - 1:02d}"
    last = CACHE / "archive" / "webhooks" / f"day={DAYS[1]}" / f"hooks-{stamp}-000.jsonl.gz"
    folder = RUN / "archive" / "webhooks" / f"day={today}"
    folder.mkdir(parents=True)
    shutil.rmtree(HELD, ignore_errors=True)
    HELD.mkdir(parents=True)
    kept, parts = [], [[] for _ in range(SLICES)]
    held_jobs: dict[int, int] = {}
    with gzip.open(last, "rt") as f:
        for line in f:
            rec = record(line)
            k = slice_of(rec["received_at"]) if "received_at" in rec else -1
            if k < 0:
                kept.append(line)
                continue
            parts[k].append(line)
            if rec.get("event") == "workflow_job" and rec["payload"].get("action") == "completed":
                held_jobs[int(rec["payload"]["workflow_job"]["id"])] = k
    with gzip.open(folder / last.name, "wt") as f:
        f.writelines(kept)
    slices = []
    width = max(3, len(str(SLICES)))
    for k, lines in enumerate(parts):
        held = HELD / f"{last.name[:-len('-000.jsonl.gz')]}-{k + 1:0{width}d}.jsonl.gz"
        with gzip.open(held, "wt") as f:
            f.writelines(lines)
        slices.append([(held, folder / held.name)])
    return held_jobs, slices


def hold_test_runs(src: Path, dst: Path, held_jobs: dict[int, int], slices: list, later: set[int]) -> None:
    """The test-runs files without the rows of the held jobs, which go into a file per slice, and
    of the `later` ones."""
    dst.mkdir(parents=True)
    held = [[] for _ in slices]
    for f in sorted(src.iterdir()):
        with gzip.open(f, "rt") as r, gzip.open(dst / f.name, "wt") as w:
            for line in r:
                job = record(line).get("job_id")
                if job in later:
                    continue
                k = held_jobs.get(job)
                if k is None:
                    w.write(line)
                else:
                    held[k].append(line)
    for k, lines in enumerate(held):
        name = f"test-runs-held-{k + 1:03d}.jsonl.gz"
        with gzip.open(HELD / name, "wt") as w:
            w.writelines(lines)
        slices[k].append((HELD / name, dst / name))


def land_slice(files: list[tuple[Path, Path]]) -> int:
    """Put a held slice in place (reports first, the webhook file last, as they would arrive)."""
    for src, dst in sorted(files, key=lambda p: p[0].name.startswith("hooks-")):
        if src.is_dir():
            link_tree(src, dst)
        else:
            shutil.copy(src, dst)
    return len(files)


def run_script(code: str, env: dict, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT, env=env)
    lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
    if out.returncode or not lines:
        sys.exit(f"benchmark step failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    return json.loads(lines[-1])


def seed_yesterday(env: dict, yesterday: str) -> None:
    """Yesterday was processed by its daily run (tagged with its fingerprint): only today refreshes."""
    code = f"""
import uuid, dagster as dg
from dagster._core.remote_origin import RegisteredCodeLocationOrigin, RemoteJobOrigin, RemoteRepositoryOrigin
from jobs.daily import FINGERPRINT_TAG
from resources.storage import Store
from torchci_assets.ingest.landed import day_fingerprint
fp = day_fingerprint(Store({str(RUN / "archive")!r}), {yesterday!r}).short
dg.DagsterInstance.get().add_run(dg.DagsterRun(job_name="all_assets_daily", run_id=str(uuid.uuid4()),
    status=dg.DagsterRunStatus.SUCCESS, tags={{"dagster/partition": {yesterday!r}, FINGERPRINT_TAG: fp}}))
print("{{}}")
"""
    run_script(code, env)


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def load() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())


# ---- 1. the cost of a refresh ------------------------------------------------------------------


def request_refresh(env: dict, today: str, cursor: str) -> tuple[dict, dict]:
    """One evaluation of the refresh sensor: (the tick's output, today's run request).
    What is measured here is a refresh's cost, not the interval rule: on a fast machine the
    next slice lands within the default interval of the last request, so the tick would wait."""
    t = run_script(TICK, {**env, "TORCHCI_REFRESH_MINUTES": "0.01"}, str(RUN / "archive"), cursor)
    (req,) = [r for r in t["requests"] if r["partition"] == today]
    return t, req


def refresh_once(env: dict, today: str, cursor: str) -> tuple[dict, str]:
    t, req = request_refresh(env, today, cursor)
    r = run_script(RUN_JOB, env, "archive_refresh", today, json.dumps(req["tags"]))
    if not r["success"]:
        sys.exit(f"the refresh run failed; see the runs in {RUN / 'dagster'}")
    return {**r, "tick_s": t["seconds"]}, t["cursor"]


def wait_until_quiet() -> None:
    """In a running day the folders of the jobs that landed minutes ago are quiet, and a refresh's
    listing and the sensor trust them whole; the folders linked in just now are not until then."""
    from resources.listing_cache import SEAL_S

    print(f"  waiting {SEAL_S + 1} s: the day's folders linked in become quiet, as earlier landings are in a running day",
          flush=True)
    time.sleep(SEAL_S + 1)


def print_run(label: str, r: dict) -> None:
    print(f"  {label:<34} wall {r['seconds']:5.1f} s (steps {sum(r['steps'].values()):5.1f} s)  CPU {r['cpu_s']:5.1f} s "
          f"(loading the code location {r['load_cpu_s']:.1f})  peak RSS {r['rss_mb']:4.0f} MB  "
          f"test_daily_stats: {r['stats_mode']}", flush=True)
    top = sorted(r["events"].items(), key=lambda kv: -kv[1])[:4]
    print(f"    {sum(r['events'].values())} events in the run's log ({', '.join(f'{k} {n}' for k, n in top)}, ...)")


def print_steps(runs: list[dict], top: int = 8) -> None:
    steps = {k: median([r["steps"].get(k, 0.0) for r in runs]) for k in runs[0]["steps"]}
    total = sum(steps.values())
    print(f"    steps (median s, share of the steps' {total:.1f} s):")
    for k, v in sorted(steps.items(), key=lambda kv: -kv[1])[:top]:
        print(f"      {k:<28} {v:6.2f}  {100 * v / total:4.0f}%")


def measure_refreshes(env: dict, today: str, slices: list, hour: int = 24) -> tuple[dict, list[dict]]:
    """A first refresh of the day as it stood SLICES x SLICE_MIN minutes before `hour`:00, then one
    per slice landed: (the first, the slices'), the first once the folders linked in are quiet."""
    wait_until_quiet()
    first, cursor = refresh_once(env, today, "")
    print_run(f"first refresh, day up to {hour - 1:02d}:{60 - SLICES * SLICE_MIN:02d}", first)
    runs = []
    for k, files in enumerate(slices):
        land_slice(files)
        r, cursor = refresh_once(env, today, cursor)
        runs.append(r)
        print_run(f"refresh {k + 1}/{len(slices)}, +{SLICE_MIN} min ({len(files)} files)", r)
    return first, runs


def measure_cost(env: dict, today: str, slices: list, full_day: bool = True) -> dict:
    print(f"\n1. Cost ({load()})", flush=True)
    first, runs = measure_refreshes(env, today, slices)
    print_steps(runs, top=14)
    if len(runs) >= 6:
        early, late = median([r["cpu_s"] for r in runs[:3]]), median([r["cpu_s"] for r in runs[-3:]])
        print(f"    parts: each refresh adds one to the tables it appends to; refreshes 1-3 {early:.1f} CPU-s, "
              f"{len(runs) - 2}-{len(runs)} {late:.1f} CPU-s: {(late - early) / (len(runs) - 3):+.3f} CPU-s per refresh before",
              flush=True)
    minutes = len(runs) * SLICE_MIN
    total = sum(r["cpu_s"] for r in runs)
    print(f"    the {len(runs)} refreshes, {minutes} min of landings: {total:.1f} CPU-s in all; a day of refreshes "
          f"every {SLICE_MIN} min at that rate: {total * 1440 / minutes:,.0f} CPU-s", flush=True)
    full = run_script(RUN_JOB, env, "all_assets_daily", today, "{}") if full_day else None
    if full:
        print_run("full-day run, every asset", full)
    return {"first": first, "runs": runs, "full": full, "tick_s": median([r["tick_s"] for r in runs]),
            "floor": measure_floor(env, today)}


def measure_floor(env: dict, today: str) -> dict:
    runs = [run_script(FLOOR, env, today) for _ in range(3)]
    f = {k: median([r[k] for r in runs]) if isinstance(runs[0][k], float) else runs[0][k] for k in runs[0]}
    print(f"  the floor of a refresh (median of 3 processes): a run of {f['steps']} no-op steps with {f['assets']} "
          f"assets and {f['checks']} checks, as the refresh's, forked from a warm worker "
          f"{f['forked_run_cpu_s']:.2f} CPU-s; in a new process (Dagster's default launcher) Python, dagster and "
          f"the code location {f['load_cpu_s']:.2f} CPU-s, then the run {f['first_run_cpu_s']:.2f} CPU-s "
          f"({f['warm_run_cpu_s']:.2f} again in the same process); the same assets and checks reported without "
          f"a run {f['runless_cpu_s']:.2f} CPU-s", flush=True)
    return f


def measure_through_day(env: dict, yesterday: str, today: str, hours: list[int]) -> dict[int, float]:
    """The cost of a refresh with SLICE_MIN minutes of new files earlier in the day: today as it
    stood at each of `hours`:00 (its files received later, and their jobs' reports, not there yet).
    Returns hour -> the median CPU-s of the refreshes."""
    print(f"\n0. A refresh through the day ({load()})", flush=True)
    curve = {}
    for hour in hours:
        slices = prepare_run(yesterday, today, hour=hour)
        seed_yesterday(env, yesterday)
        _, runs = measure_refreshes(env, today, slices, hour)
        curve[hour] = median([r["cpu_s"] for r in runs])
        print(f"  at {hour:02d}:00, one refresh with {SLICE_MIN} min of new files (median of {len(runs)}): "
              f"{curve[hour]:.1f} CPU-s", flush=True)
    return curve


def day_mean(curve: dict[int, float]) -> float:
    """The mean cost of a refresh over the day from its cost at some hours (24: the day's end):
    linear between them, and before the first as at the first (an upper bound: a refresh costs
    less the less the day holds)."""
    points = sorted(curve.items())
    points = [(0, points[0][1]), *points]
    if points[-1][0] < 24:
        points.append((24, points[-1][1]))
    area = sum((h1 - h0) * (c0 + c1) / 2 for (h0, c0), (h1, c1) in zip(points, points[1:]))
    return area / 24


def cpu_total(seconds: float) -> str:
    return f"{seconds / 3600:.1f} CPU-h" if seconds >= 3600 else f"{seconds:,.0f} CPU-s"


def times(x: float) -> str:
    """A ratio to the full-day run: to a tenth near the 2x target (an hourly refresh is ~2x), whole above 10."""
    return f"{x:.0f}x" if x >= 10 else f"{x:.1f}x"


def day_model(cost: dict, interval_s: float, curve: dict[int, float]) -> str:
    """A day of refreshes: one per interval (rounded up to the sensor's ticks), or back to back."""
    per = median([r["cpu_s"] for r in cost["runs"]])
    steps = median([sum(r["steps"].values()) for r in cost["runs"]])
    wall = median([r["seconds"] for r in cost["runs"]])
    period = max(interval_s, wall + 30)  # a tick never requests while one is in flight
    n = 86400 / period
    full = cost["full"]["cpu_s"]
    floor = cost["floor"]
    spawned = floor["load_cpu_s"] + floor["first_run_cpu_s"]
    lines = [f"  a day of refreshes (model): {n:,.0f} refreshes x {per:.1f} CPU-s, each as at the day's end = "
             f"{cpu_total(n * per)} ({n * steps / 3600:.1f} h of steps' wall time) vs one full-day run "
             f"{full:.0f} CPU-s: {times(n * per / full)} (target <= {TARGET_DAY_X:g}x)"]
    if curve:
        mean = day_mean({**curve, 24: per})
        at = ", ".join(f"{h:02d}:00 {c:.1f}" for h, c in sorted({**curve, 24: per}.items()))
        x = n * mean / full
        lines.append(f"  with the cost through the day (CPU-s of a refresh at {at}; the mean over the day "
                     f"{mean:.1f}): {n:,.0f} x {mean:.1f} = {cpu_total(n * mean)}: {times(x)} "
                     f"the full-day run (target <= {TARGET_DAY_X:g}x: {'met' if x <= TARGET_DAY_X else 'NOT MET'})")
    lines.append(f"  the floor alone, no work: {n:,.0f} x {floor['forked_run_cpu_s']:.1f} CPU-s = "
                 f"{times(n * floor['forked_run_cpu_s'] / full)} the full-day run as runs forked from the warm worker, "
                 f"{times(n * spawned / full)} as a new process per run, "
                 f"{times(n * floor['warm_run_cpu_s'] / full)} as runs in a long-lived process, "
                 f"{times(n * floor['runless_cpu_s'] / full)} reported without runs by a long-lived process")
    return "\n".join(lines)


# ---- 2. freshness under dagster dev ------------------------------------------------------------

TEMPLATES = """
import json, sys
from resources.lake import Lake, connect
lake = Lake.at(sys.argv[1]); day = sys.argv[2]; con = connect()
for t in ("test_jobs", "webhook_events", "pr_jobs", "drci_comments"):
    lake.register(con, t, [day])
main = con.execute("SELECT job_id FROM test_jobs WHERE branch_class = 'main' AND job_conclusion = 'success' "
                   "AND NOT infra_suspect AND platform = 'linux' ORDER BY job_id LIMIT 3").fetchall()
pr = con.execute("SELECT p.number, p.job_id FROM pr_jobs p JOIN drci_comments d ON d.pr = p.number "
                 "AND d.head_sha = p.head_sha WHERE p.pr_state = 'open' AND p.job_id IS NOT NULL "
                 "AND p.state = 'success' ORDER BY p.number DESC, p.job_id LIMIT 1").fetchall()
def payload(job_id):
    return con.execute("SELECT payload FROM webhook_events WHERE event = 'workflow_job' AND "
                       "json_extract_string(payload, '$.action') = 'completed' AND "
                       "json_extract(payload, '$.workflow_job.id')::BIGINT = ? LIMIT 1", [job_id]).fetchall()[0][0]
print(json.dumps({"main": [payload(j) for (j,) in main], "pr": pr[0][0], "pr_job": payload(pr[0][1])}))
"""


def new_job(payload: str, job_id: int, conclusion: str, now: dt.datetime, suffix: str = "") -> str:
    """A `completed` delivery of a new job shaped like the template's, received now."""
    p = json.loads(payload)
    j = p["workflow_job"]
    j.update(id=job_id, name=j["name"] + suffix, conclusion=conclusion, completed_at=now.strftime("%Y-%m-%dT%H:%M:%SZ"),
             html_url=f"{j['html_url'].rsplit('/', 1)[0]}/{job_id}", url=f"{j['url'].rsplit('/', 1)[0]}/{job_id}")
    return json.dumps({"event": "workflow_job", "delivery_id": f"bench-{job_id}", "payload": p,
                       "received_at": now.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"}) + "\n"


def land_landing(templates: dict, today: str, index: int) -> tuple[str, int, int, float]:
    """Three new main jobs with a new flaky test, a new failed job on a PR head; (test key, PR, its job, when)."""
    from resources.storage import Store
    from torchci_assets.simulate.landing import land_flaky_test

    now = dt.datetime.now(dt.timezone.utc)
    base = 90_000_000_000 + 10 * index + 1_000 * random.randrange(10**6)
    lines, jobs = [], []
    for i, payload in enumerate(templates["main"]):
        j = json.loads(payload)["workflow_job"]
        lines.append(new_job(payload, base + i, "success", now))
        jobs.append((j["run_id"], j["run_attempt"], base + i))
    pr_job = base + 5
    lines.append(new_job(templates["pr_job"], pr_job, "failure", now, f" landed-{index}"))  # a job of its own
    name = f"test_landed_{index}"
    land_flaky_test(Store(str(RUN / "archive")), today, jobs, "test_freshness", "TestFreshness", name)
    folder = RUN / "archive" / "webhooks" / f"day={today}"
    tmp = folder / f".landing-{index}.tmp"
    with gzip.open(tmp, "wt") as f:
        f.writelines(lines)
    tmp.rename(folder / f"hooks-landed-{index:03d}.jsonl.gz")  # whole, as the receiver rolls a segment
    return f"{name} (__main__.TestFreshness)", templates["pr"], pr_job, time.time()


def observed(key: str, pr: int, pr_job: int) -> dict[str, bool]:
    out = {}
    try:
        out["disabled list"] = key in json.loads((RUN / "outputs/stats/disabled-tests-condensed.json").read_text())
    except (OSError, ValueError):
        out["disabled list"] = False
    try:
        out["HUD tests.html"] = key.split(" ")[0] in (RUN / "outputs/hud/tests.html").read_text()
    except OSError:
        out["HUD tests.html"] = False
    try:
        out["Dr. CI body"] = str(pr_job) in (RUN / f"outputs/drci/{pr}.md").read_text()
    except OSError:
        out["Dr. CI body"] = False
    return out


def start_dev(env: dict) -> subprocess.Popen:
    log = open(RUN / "dagster-dev.log", "wb")
    return subprocess.Popen([str(BIN / "dagster"), "dev", "-w", str(ROOT / "workspace.yaml"), "-h", "127.0.0.1",
                             "-p", str(PORT)], cwd=RUN / "dagster", env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def stop_dev(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


class Traffic(threading.Thread):
    """The day's other traffic: every `every_s` a webhook file lands, as the receiver rolls one on a
    busy day, so the sensor finds something new at every tick and a refresh runs every interval (a
    PyTorch-sized day lands files every few seconds). Each file is a redelivery of a delivery the day
    already holds: the ingest drops it as a duplicate, so the outputs watched do not move."""

    def __init__(self, today: str, every_s: float):
        super().__init__(daemon=True)
        folder = RUN / "archive" / "webhooks" / f"day={today}"
        first = min(folder.glob("*.jsonl.gz"))
        with gzip.open(first, "rt") as f:
            self.line = f.readline()
        self.folder, self.every_s, self.files = folder, every_s, 0
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.every_s):
            tmp = self.folder / f".busy-{self.files}.tmp"
            with gzip.open(tmp, "wt") as f:
                f.write(self.line)
            tmp.rename(self.folder / f"hooks-busy-{self.files:04d}.jsonl.gz")
            self.files += 1

    def stop(self) -> None:
        self.stopped.set()
        self.join()


def measure_freshness(env: dict, today: str, minutes: float, seed: int, interval_s: float,
                      busy_s: float) -> list[dict]:
    templates = run_script(TEMPLATES, env, str(RUN / "lake"), today)
    rng = random.Random(seed)
    from torchci_assets.cadence import REFRESH_MINUTES_VAR
    settings = f"{REFRESH_MINUTES_VAR}={env[REFRESH_MINUTES_VAR]}" if REFRESH_MINUTES_VAR in env else "default settings"
    traffic = Traffic(today, busy_s) if busy_s else None
    busy = f"a redelivery landing every {busy_s:g} s besides" if traffic else "nothing else landing"
    print(f"\n2. Freshness under dagster dev (port {PORT}, {settings}, {minutes:g} minutes, {busy}, {load()})",
          flush=True)
    proc = start_dev(env)
    results, i = [], 0
    if traffic:
        traffic.start()
    try:
        end = time.time() + minutes * 60
        time.sleep(rng.uniform(20, 60))
        while time.time() < end:
            key, pr, pr_job, landed = land_landing(templates, today, i)
            got: dict[str, float] = {}
            while len(got) < 3 and time.time() - landed < 900:
                for what, yes in observed(key, pr, pr_job).items():
                    if yes and what not in got:
                        got[what] = time.time() - landed
                time.sleep(1)
            if proc.poll() is not None:
                raise RuntimeError(f"dagster dev stopped (see {RUN / 'dagster-dev.log'})")
            results.append(got)
            print(f"  landing {i + 1}: " + ", ".join(f"{w} {s:.0f} s" for w, s in got.items()), flush=True)
            i += 1
            # the next landing at a random time: a landing is seen when a refresh ends, so a wait
            # spread over the interval puts the next one anywhere in the interval's cycle
            time.sleep(rng.uniform(0, max(60.0, interval_s)))
    finally:
        if traffic:
            traffic.stop()
        stop_dev(proc)
    return results


def print_freshness(results: list[dict]) -> bool:
    met = True
    print(f"  {len(results)} landings, {load()}")
    for what in ("disabled list", "HUD tests.html", "Dr. CI body"):
        xs = [r[what] for r in results if what in r]
        missed = len(results) - len(xs)
        ok = bool(xs) and not missed and median(xs) <= TARGET_P50_S and pct(xs, 0.95) <= TARGET_P95_S
        met &= ok
        print(f"  landing -> {what:<15} p50 {median(xs):5.0f} s  p95 {pct(xs, 0.95):5.0f} s  max {max(xs, default=0):5.0f} s"
              f"{f'  ({missed} not within 15 min)' if missed else ''}  [{'met' if ok else 'NOT MET'}]")
    xs = [r["Dr. CI body"] + ROLL_S / 2 for r in results if "Dr. CI body" in r]
    print(f"  receipt by torchci serve -> Dr. CI body (+ the roll's wait, {ROLL_S:.0f} s at most): p50 "
          f"{median(xs):.0f} s, p95 {pct(xs, 0.95) + ROLL_S / 2:.0f} s at most")
    return met


WORKER_LINE = re.compile(r"torchci warm worker: run \S+ of (\S+) \(pid \d+\) exited (-?\d+) after ([0-9.]+) s, "
                         r"([0-9.]+) CPU-s, peak RSS (\d+) MB")


def print_dev_runs() -> None:
    """What each run under dagster dev cost, as the warm worker that forked it reported it."""
    runs: dict[str, list[tuple[float, float, int]]] = {}
    for m in WORKER_LINE.finditer((RUN / "dagster-dev.log").read_text(errors="replace")):
        runs.setdefault(m.group(1), []).append((float(m.group(3)), float(m.group(4)), int(m.group(5))))
    if not runs:
        print("  no run reported by a warm worker in dagster dev's log (was the run launcher changed?)")
    for job, xs in sorted(runs.items()):
        cpu = [x[1] for x in xs]
        print(f"  {job} runs under dagster dev, forked from the warm worker: {len(xs)}, median {median(cpu):.1f} "
              f"CPU-s (p95 {pct(cpu, 0.95):.1f}), {median([x[0] for x in xs]):.1f} s, peak RSS {max(x[2] for x in xs)} MB")


def main() -> int:
    global SLICES, SLICE_MIN, CACHE, SIMULATE
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0, help="landings under dagster dev for this long (0: none)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", action="store_true", help=f"keep {RUN} afterwards")
    ap.add_argument("--slices", type=int, default=SLICES, help="refreshes measured, each after one slice lands")
    ap.add_argument("--slice-minutes", type=int, default=SLICE_MIN,
                    help="minutes of files per slice (slices x minutes <= 60: the slices come from the last hour); "
                         "many small slices show what each part a refresh adds costs the next ones")
    ap.add_argument("--refresh-minutes", type=float, default=None,
                    help="TORCHCI_REFRESH_MINUTES for the day model and under dagster dev (default: the default, "
                         "what operators get)")
    ap.add_argument("--busy-seconds", type=float, default=BUSY_S,
                    help="under dagster dev, a redelivery lands every this many seconds besides the landings "
                         "timed, so a refresh runs every interval as on a busy day (0: only the landings)")
    ap.add_argument("--day-hours", type=int, nargs="*", default=list(DAY_HOURS),
                    help="also measure refreshes with the day as it stood at these hours, for the day model "
                         "(none: the model takes every refresh of the day as costly as one at its end)")
    ap.add_argument("--prs-per-day", type=int, default=None,
                    help="pull requests opened a day in the simulated days (default: the simulator's, 30). "
                         "PyTorch's pull requests run most of its jobs: 300 gives ~25,000 pull request jobs a "
                         "day, where the default's are ~800; generated once into a cache of their own")
    ap.add_argument("--no-full-day", action="store_true",
                    help="measure the refreshes only (no full-day run, no day model): a quicker loop while working")
    args = ap.parse_args()
    SLICES, SLICE_MIN = args.slices, args.slice_minutes
    if args.prs_per_day is not None:
        if args.prs_per_day < 1:
            ap.error("--prs-per-day must be at least 1")
        CACHE = WORK / f"cache-prs{args.prs_per_day}"
        SIMULATE = [*SIMULATE, "--prs-per-day", str(args.prs_per_day)]
    if SLICES < 1 or SLICE_MIN < 1 or SLICES * SLICE_MIN > 60:
        ap.error("--slices x --slice-minutes must be between 1 and 60 (the slices come from the day's last hour)")
    if any(not 1 <= h <= 23 for h in args.day_hours):
        ap.error("--day-hours are hours of the day between 1 and 23 (the day's end is always measured)")
    if args.refresh_minutes is not None and not args.refresh_minutes > 0:
        ap.error("--refresh-minutes must be above 0 (0 turns the refresh off: nothing to measure)")
    from torchci_assets.cadence import DEFAULT_REFRESH_MINUTES, REFRESH_MINUTES_VAR
    interval_s = 60 * (args.refresh_minutes or DEFAULT_REFRESH_MINUTES)

    ensure_cache()
    yesterday, today = utc_days()
    env = env_for(yesterday)
    env.pop(REFRESH_MINUTES_VAR, None)  # the defaults are what is measured, unless asked
    if args.refresh_minutes:
        env[REFRESH_MINUTES_VAR] = f"{args.refresh_minutes:g}"
    curve = measure_through_day(env, yesterday, today, args.day_hours) if args.day_hours and not args.no_full_day \
        else {}
    slices = prepare_run(yesterday, today)
    seed_yesterday(env, yesterday)
    print(f"archive: {DAYS[0]} and {DAYS[1]} of the cache linked in as {yesterday} and {today} under {RUN}, "
          f"today without its last {SLICES * SLICE_MIN} minutes")
    cost = measure_cost(env, today, slices, full_day=not args.no_full_day)
    from resources.listing_cache import SEAL_S
    per = median([r["cpu_s"] for r in cost["runs"]])
    steps = median([sum(r["steps"].values()) for r in cost["runs"]])
    print(f"  one refresh with {SLICE_MIN} min of new files (median of {SLICES}): {per:.1f} CPU-s, its steps "
          f"{steps:.1f} s of wall time (target <= {TARGET_CPU_S:g} CPU-s: {'met' if per <= TARGET_CPU_S else 'NOT MET'}); "
          f"sensor tick {cost['tick_s']:.2f} s (an instance already made; the slices' folders changed in the last {SEAL_S} s are walked, "
          f"the rest trusted whole)")
    if cost["full"]:
        print(day_model(cost, interval_s, curve))
        rss = cost["full"]["rss_mb"]
        print(f"  full-day run peak RSS {rss:.0f} MB (target < {TARGET_RSS_MB} MB: "
              f"{'met' if rss < TARGET_RSS_MB else 'NOT MET'})")
    if args.minutes:
        print_freshness(measure_freshness(env, today, args.minutes, args.seed, interval_s, args.busy_seconds))
        print_dev_runs()
    if not args.keep:
        shutil.rmtree(RUN, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
