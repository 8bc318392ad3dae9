"""Freshness of the intra-day refresh on a PyTorch-sized day: a test report landing in the archive ->
disabled-tests-condensed.json (and the HUD) reflecting it. Target (issue 13): p95 <= 20 minutes.

Data: two simulated days of ~3.6 M test rows each (the simulator with every configuration, 80 test
files of ~115 tests: ~25,000 JUnit reports and ~20,000 webhook deliveries a day, ~450 MB on disk),
generated once under var/bench-freshness/cache with the first day materialized. Each bench run
links them in as yesterday and today (UTC, by the clock the sensor reads), so the refresh sees a
full day of files in today's folder, the worst case: the last refresh before midnight.

1. Cost of one refresh (separate processes, median of --repeats): the sensor's tick over the archive
   (nothing new, and new files), wall time and peak RSS; the `archive_refresh` run of today's
   partition executed in process, wall time, peak RSS, each step's time, and when the disabled list
   and the HUD were published within it.
2. Freshness model. Files land all day (the receiver rolls a segment a minute), so every tick sees
   new files, and refreshes start every P = the interval rounded up to the sensor's 60 s ticks, or
   back to back when a run outlasts the interval (a tick never requests while one is in flight).
   A report landing at a uniformly random time waits for the next refresh to start, then for the
   run to publish: latency = wait + queue/launch delay + time to publish. Simulated over 20,000
   landings with the measured run times.
3. Validation (--landings N, default 3): `dagster dev` (daemon, run queue, multiprocess executor) on
   the same archive with TORCHCI_REFRESH_MINUTES=--validate-minutes, an empty file landing every
   minute as background traffic, and N reports of a new flaky test landing at random times; each
   latency is measured until the published files name the test, and compared with the model's
   distribution for that interval and dagster dev's own run times.

The machine is shared (2 cores): figures are medians of several runs and vary with the load.
Run as `make bench-freshness` (also part of `make bench`): ~25 minutes with validation, the first
run ~5 minutes more to generate and materialize the cache (~2 GB under var/bench-freshness).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "var" / "bench-freshness"
CACHE = WORK / "cache"
RUN = WORK / "run"
BIN = Path(sys.executable).parent
DAYS = ("2026-10-01", "2026-10-02")  # the cache's days, linked in as yesterday and today
SIMULATE = ["--days", "2", "--start", DAYS[0], "--seed", "11", "--configs", "all", "--test-files", "80",
            "--tests-per-file", "115"]
TICK_S = 60.0
TARGET_P95_MIN = 20.0
SECTIONS = ("webhooks", "test-reports", "test-runs", "ci-results", "logs")

TICK = """
import json, resource, sys, time
import dagster as dg
from jobs.refresh import archive_refresh_sensor
from resources.configured import ArchiveResource
t = time.perf_counter()
with dg.build_sensor_context(instance=dg.DagsterInstance.get(), cursor=sys.argv[2] or None,
                             resources={"archive": ArchiveResource(uri=sys.argv[1])}) as ctx:
    r = archive_refresh_sensor(ctx)
s = time.perf_counter() - t
reqs = [{"run_key": q.run_key, "partition": q.partition_key, "tags": q.tags} for q in (getattr(r, "run_requests", None) or [])]
print(json.dumps({"seconds": s, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "requests": reqs, "cursor": getattr(r, "cursor", None), "skip": getattr(r, "skip_message", None)}))
"""

REFRESH = """
import json, resource, sys, time
import dagster as dg
from torchci_assets.definitions import defs
instance = dg.DagsterInstance.get()
job = defs.resolve_job_def("archive_refresh")
t0 = time.time()
res = job.execute_in_process(partition_key=sys.argv[1], tags=json.loads(sys.argv[2]), instance=instance,
                             raise_on_error=False,
                             run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}})
wall = time.time() - t0
steps, done = {}, {}
for e in instance.all_logs(res.run_id):
    ev = e.dagster_event
    if ev is None:
        continue
    if ev.event_type_value == "STEP_START":
        steps[ev.step_key] = e.timestamp
    elif ev.event_type_value == "STEP_SUCCESS":
        done[ev.step_key] = e.timestamp
print(json.dumps({"success": res.success, "seconds": wall, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "steps": {k: done[k] - steps[k] for k in done if k in steps},
                  "published_s": {k: done[k] - t0 for k in ("disabled_tests", "hud_site") if k in done}}))
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


def prepare_run(yesterday: str, today: str) -> None:
    shutil.rmtree(RUN, ignore_errors=True)
    for section in SECTIONS:
        for old, new in zip(DAYS, (yesterday, today)):
            src = CACHE / "archive" / section / f"day={old}"
            if src.exists():
                link_tree(src, RUN / "archive" / section / f"day={new}")
    for table in (CACHE / "lake").iterdir():
        link_tree(table / f"day={DAYS[0]}", RUN / "lake" / table.name / f"day={yesterday}")
    link_tree(CACHE / "outputs", RUN / "outputs")
    (RUN / "dagster").mkdir(parents=True)
    shutil.copy(ROOT / "dagster.yaml", RUN / "dagster" / "dagster.yaml")


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


def land(today: str, index: int) -> tuple[str, float]:
    """A report of a new flaky test in three main-branch linux jobs of today; (its PyTorch key, when it landed)."""
    code = f"""
import json
from resources.lake import Lake, connect
from resources.storage import Store
from torchci_assets.simulate.landing import land_flaky_test
lake = Lake.at({str(RUN / "lake")!r}); con = connect()
lake.register(con, "test_jobs", [{today!r}], name="j")
jobs = con.execute("SELECT workflow_id, workflow_run_attempt, job_id FROM j WHERE branch_class = 'main' AND "
                   "job_conclusion = 'success' AND NOT infra_suspect AND platform = 'linux' "
                   "ORDER BY hash(job_id, {index}) LIMIT 3").fetchall()
land_flaky_test(Store({str(RUN / "archive")!r}), {today!r}, jobs, "test_freshness", "TestFreshness", "test_landed_{index}")
print("{{}}")
"""
    run_script(code, os.environ.copy())
    return f"test_landed_{index} (__main__.TestFreshness)", time.time()


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def model(interval_s: float, runs: list[tuple[float, float]], launch_s: float, n: int = 20_000,
          seed: int = 13) -> tuple[list[float], list[float]]:
    """Latencies (disabled list, HUD) of landings at uniformly random times, files landing every minute.

    A tick every TICK_S requests a refresh when none is in flight and the interval has passed since
    the last request; that run publishes the disabled list `launch_s + d` later and the HUD `launch_s
    + h` later, (d, h) drawn from `runs`, and ends with the HUD. A landing is in the first run
    requested at or after it.
    """
    rng = random.Random(seed)
    starts, t, last, busy_until = [], 0.0, -1e18, -1.0
    horizon = n / 20 * max(interval_s, TICK_S) + 10 * interval_s
    while t < horizon:
        if t >= busy_until and t - last >= interval_s:
            d, h = rng.choice(runs)
            starts.append((t, t + launch_s + d, t + launch_s + h))
            last, busy_until = t, t + launch_s + h
        t += TICK_S
    lat_d, lat_h, i = [], [], 0
    for x in sorted(rng.uniform(interval_s, horizon - 3 * interval_s) for _ in range(n)):
        while starts[i][0] < x:
            i += 1
        lat_d.append(starts[i][1] - x)
        lat_h.append(starts[i][2] - x)
    return lat_d, lat_h


def summary(name: str, xs: list[float]) -> str:
    return f"{name:<34} p50 {median(xs) / 60:5.1f} min   p95 {pct(xs, 0.95) / 60:5.1f} min   max {max(xs) / 60:5.1f} min"


# ---- validation under dagster dev --------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def published(key: str, name: str) -> tuple[bool, bool]:
    disabled = RUN / "outputs" / "stats" / "disabled-tests-condensed.json"
    tests = RUN / "outputs" / "hud" / "tests.html"
    try:
        in_list = key in json.loads(disabled.read_text())
    except (OSError, ValueError):
        in_list = False
    try:
        in_hud = name in tests.read_text()
    except OSError:
        in_hud = False
    return in_list, in_hud


def refresh_runs(env: dict, after: float = 0.0) -> list[dict]:
    """The archive_refresh runs created after `after`: when created, started, ended, and when their
    disabled_tests and hud_site steps succeeded (seconds after the run started)."""
    code = """
import json, sys, dagster as dg
instance = dg.DagsterInstance.get()
out = []
for r in instance.get_run_records(dg.RunsFilter(job_name="archive_refresh")):
    if r.create_timestamp.timestamp() <= float(sys.argv[1]):
        continue
    done = {e.dagster_event.step_key: e.timestamp for e in instance.all_logs(r.dagster_run.run_id)
            if e.dagster_event is not None and e.dagster_event.event_type_value == "STEP_SUCCESS"}
    start = r.start_time
    out.append({"created": r.create_timestamp.timestamp(), "start": start, "end": r.end_time,
                "status": r.dagster_run.status.value,
                "disabled_s": done["disabled_tests"] - start if start and "disabled_tests" in done else None,
                "hud_s": done["hud_site"] - start if start and "hud_site" in done else None})
print(json.dumps(out))
"""
    out = subprocess.run([sys.executable, "-c", code, str(after)], capture_output=True, text=True, cwd=ROOT, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 and out.stdout.strip() else []


def validate(env: dict, today: str, landings: int, minutes: float, seed: int) -> dict:
    rng = random.Random(seed)
    env = {**env, "TORCHCI_REFRESH_MINUTES": f"{minutes:g}"}
    log = open(RUN / "dagster-dev.log", "wb")
    port = free_port()
    proc = subprocess.Popen([str(BIN / "dagster"), "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    results, background, started = [], 0, time.time()
    try:
        deadline = time.time() + 600
        while not refresh_runs(env, started):  # the first tick refreshes today: the steady state begins
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"dagster dev did not start a refresh (see {RUN / 'dagster-dev.log'})")
            time.sleep(5)
        next_bg = time.time()
        for i in range(landings):
            at = time.time() + rng.uniform(0, minutes * 60)
            key, landed = None, 0.0
            got: dict[str, float] = {}
            while len(got) < 2:
                now = time.time()
                if now >= next_bg:  # background traffic: files keep landing all day
                    (RUN / "archive" / "webhooks" / f"day={today}" / f"bg-{background:05d}.jsonl").touch()
                    background += 1
                    next_bg = now + 60
                if key is None and now >= at:
                    key, landed = land(today, i)
                    name = key.split(" ")[0]
                if key is not None:
                    in_list, in_hud = published(key, name)
                    if in_list and "list" not in got:
                        got["list"] = time.time() - landed
                    if in_hud and "hud" not in got:
                        got["hud"] = time.time() - landed
                    if time.time() - landed > 3600:
                        raise RuntimeError(f"{key} not published an hour after landing")
                time.sleep(2)
            results.append(got)
            print(f"  landing {i + 1}/{landings}: disabled list after {got['list'] / 60:.1f} min, "
                  f"HUD after {got['hud'] / 60:.1f} min", flush=True)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
    runs = [r for r in refresh_runs(env, started) if r["status"] == "SUCCESS" and r["hud_s"] is not None]
    return {"landings": results, "runs": runs}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3, help="refresh runs and ticks measured (median)")
    ap.add_argument("--interval-minutes", type=float, default=15.0, help="TORCHCI_REFRESH_MINUTES for the model")
    ap.add_argument("--landings", type=int, default=3, help="real end-to-end landings under dagster dev (0: none)")
    ap.add_argument("--validate-minutes", type=float, default=4.0,
                    help="TORCHCI_REFRESH_MINUTES during the validation (short, to keep the bench short)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", action="store_true", help=f"keep {RUN} afterwards")
    args = ap.parse_args()

    ensure_cache()
    yesterday, today = utc_days()
    prepare_run(yesterday, today)
    env = env_for(yesterday)
    seed_yesterday(env, yesterday)
    print(f"archive: {DAYS[0]} and {DAYS[1]} of the cache linked in as {yesterday} and {today} under {RUN}")

    # 1. cost of one tick and one refresh
    ticks_new, ticks_quiet, refreshes, cursor = [], [], [], ""
    for i in range(args.repeats):
        if i:
            (RUN / "archive" / "webhooks" / f"day={today}" / f"tick-{i}.jsonl").touch()  # something new
        t = run_script(TICK, env, str(RUN / "archive"), "")
        (req,) = [r for r in t["requests"] if r["partition"] == today]
        ticks_new.append(t)
        cursor = t["cursor"]
        r = run_script(REFRESH, env, today, json.dumps(req["tags"]))
        if not r["success"]:
            sys.exit(f"the refresh run failed; see the runs in {RUN / 'dagster'}")
        refreshes.append(r)
        ticks_quiet.append(run_script(TICK, env, str(RUN / "archive"), cursor))
        print(f"  refresh {i + 1}/{args.repeats}: {r['seconds']:.0f} s, peak RSS {r['rss_mb']:.0f} MB; "
              f"disabled list after {r['published_s']['disabled_tests']:.0f} s, HUD after "
              f"{r['published_s']['hud_site']:.0f} s", flush=True)
    files = ticks_new[0]["requests"][0]["tags"]["torchci/archive_files"]
    print(f"\nOne refresh of today's partition ({files} archive files; median of {args.repeats}, shared 2-core machine):")
    print(f"  sensor tick, new files        {median([t['seconds'] for t in ticks_new]):6.2f} s   peak RSS "
          f"{median([t['rss_mb'] for t in ticks_new]):5.0f} MB (process with Dagster loaded)")
    print(f"  sensor tick, nothing new      {median([t['seconds'] for t in ticks_quiet]):6.2f} s   peak RSS "
          f"{median([t['rss_mb'] for t in ticks_quiet]):5.0f} MB")
    print(f"  refresh run (in process)      {median([r['seconds'] for r in refreshes]):6.1f} s   peak RSS "
          f"{median([r['rss_mb'] for r in refreshes]):5.0f} MB")
    print(f"    disabled list published at  {median([r['published_s']['disabled_tests'] for r in refreshes]):6.1f} s")
    print(f"    HUD published at            {median([r['published_s']['hud_site'] for r in refreshes]):6.1f} s")
    steps = {k: median([r["steps"].get(k, 0.0) for r in refreshes]) for k in refreshes[0]["steps"]}
    total = sum(steps.values())
    print("    where the time goes (step, median s, share of step time):")
    for k, v in sorted(steps.items(), key=lambda kv: -kv[1])[:8]:
        print(f"      {k:<28} {v:6.1f}  {100 * v / total:4.0f}%")

    # 2. the model, with the in-process run times
    interval = args.interval_minutes * 60
    runs = [(r["published_s"]["disabled_tests"], r["published_s"]["hud_site"]) for r in refreshes]
    d, h = model(interval, runs, launch_s=0.0)
    print(f"\nFreshness model, TORCHCI_REFRESH_MINUTES={args.interval_minutes:g}, ticks every {TICK_S:.0f} s, "
          "in-process run times, 20,000 landings:")
    print("  " + summary("landing -> disabled list", d))
    print("  " + summary("landing -> HUD (tests.html)", h))

    # 3. validation under dagster dev
    if args.landings:
        print(f"\nValidation: dagster dev, TORCHCI_REFRESH_MINUTES={args.validate_minutes:g}, {args.landings} "
              "landings at random times, an empty file landing every minute:", flush=True)
        v = validate(env, today, args.landings, args.validate_minutes, args.seed)
        dev = v["runs"]
        print(f"  dagster dev refresh runs: {len(dev)}, median {median([r['end'] - r['start'] for r in dev]):.0f} s "
              f"(multiprocess executor); disabled list published at {median([r['disabled_s'] for r in dev]):.0f} s, "
              f"HUD at {median([r['hud_s'] for r in dev]):.0f} s; queue and launch "
              f"{median([r['start'] - r['created'] for r in dev]):.1f} s")
        if dev:
            dev_runs = [(r["disabled_s"], r["hud_s"]) for r in dev]
            launch = median([r["start"] - r["created"] for r in dev])
            vd, vh = model(args.validate_minutes * 60, dev_runs, launch)
            hud = [x["hud"] for x in v["landings"]]
            listed = [x["list"] for x in v["landings"]]
            print("  model for this interval:  " + summary("landing -> disabled list", vd).strip())
            print(f"  measured landings:        disabled list {', '.join(f'{x / 60:.1f}' for x in listed)} min "
                  f"(model range {min(vd) / 60:.1f}..{max(vd) / 60:.1f})")
            print(f"                            HUD           {', '.join(f'{x / 60:.1f}' for x in hud)} min "
                  f"(model range {min(vh) / 60:.1f}..{max(vh) / 60:.1f})")
            fd, fh = model(interval, dev_runs, launch)
            print(f"\nFreshness under dagster dev, TORCHCI_REFRESH_MINUTES={args.interval_minutes:g} (the model with "
                  "dagster dev's runs):")
            print("  " + summary("landing -> disabled list", fd))
            print("  " + summary("landing -> HUD (tests.html)", fh))
            d = fd
    p95 = pct(d, 0.95) / 60
    print(f"\nTarget: p95 <= {TARGET_P95_MIN:.0f} min -> {p95:.1f} min: {'met' if p95 <= TARGET_P95_MIN else 'NOT MET'}")
    if not args.keep:
        shutil.rmtree(RUN, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
