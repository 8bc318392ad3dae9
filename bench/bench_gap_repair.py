"""Gap repair's GitHub requests on a PyTorch-sized day, and how soon it repairs lost completions.

The day: --runs workflow runs (default 10,000, PyTorch's order; ~60,000 jobs), created over the day
with the evening peak the simulator gives merges (heaviest 14:00-02:00 UTC). Most are small
workflows (1-3 jobs of minutes: lint, labels); 40% are CI runs: 1-4 builds (the simulator's
build minutes by platform, its queue minutes) each followed by 2-6 test shards of a lognormal
80 minutes (up to the 4-hour timeout: PyTorch's shards of 1-4 hours). Planted: a dozen test jobs
whose `completed` delivery is lost (the run's arrives later), and a handful of runs whose
`completed` is lost with their last job's (an outage at the run's end).

The lake: each pass sees the deliveries received until then (and the `rest` records earlier passes
wrote, as if the intra-day refresh had ingested them: it runs every 1.5 minutes), written as the
lake's workflow_job, workflow_run and webhook_events partitions (the columns gap repair reads).
GitHub: the fake Actions API (tests/fake_github_actions.py) in its own process on 127.0.0.1 (a port
in 3800-3899), showing each job and run as it is at the pass's time. `repair_gaps` runs every 5
simulated minutes from the day's start until its last run has ended, as the schedule would.

Reported: requests a pass (median, max) and the busiest hour's total against a token's 5,000 an
hour; each planted loss's delay from the lost delivery to its repair in the lake (median, max),
by kind.

Run as `make bench-gap-repair` (python bench/bench_gap_repair.py [--runs 10000] [--seed 3]).
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import math
import multiprocessing
import random
import statistics
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import orjson
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from bench_backfill import free_port  # noqa: E402 (bench/ is the script's folder)

REPO = "pytorch/pytorch"
START = dt.datetime(2026, 10, 1, tzinfo=dt.timezone.utc)
EVERY = dt.timedelta(minutes=5)
TOKEN_BUDGET = 5_000
LOST_JOBS, LOST_RUNS = 12, 6
TEST_TIMEOUT_MIN = 240.0


@dataclass
class SimJob:
    id: int
    name: str
    created: dt.datetime
    started: dt.datetime
    completed: dt.datetime
    conclusion: str = "success"


@dataclass
class SimRun:
    id: int
    created: dt.datetime
    name: str
    jobs: list[SimJob] = field(default_factory=list)

    @property
    def completed(self) -> dt.datetime:
        return max(j.completed for j in self.jobs) + dt.timedelta(seconds=20)

    @property
    def started(self) -> dt.datetime:
        return min(j.started for j in self.jobs)


def minutes(rng: random.Random, median: float, sigma: float) -> dt.timedelta:
    return dt.timedelta(minutes=median * math.exp(rng.gauss(0.0, sigma)))


def make_day(seed: int, runs: int) -> list[SimRun]:
    from torchci_assets.simulate.catalog import BUILD_MINUTES, QUEUE_MINUTES

    rng = random.Random(seed)
    weights = [2 if h >= 14 or h < 2 else 1 for h in range(24)]
    out, job_id = [], 90_000_000_000
    for i in range(runs):
        hour = rng.choices(range(24), weights)[0]
        created = START + dt.timedelta(hours=hour, seconds=rng.uniform(0, 3600))
        run = SimRun(id=20_000_000_000 + i, created=created, name="pull" if rng.random() < 0.4 else "lint")
        specs = _ci_jobs(rng, created, BUILD_MINUTES, QUEUE_MINUTES) if run.name == "pull" else _small_jobs(rng, created)
        for name, c, s, e in specs:
            job_id += 1
            run.jobs.append(SimJob(job_id, name, c, s, e))
        out.append(run)
    return out


def _small_jobs(rng, created):
    specs = []
    for k in range(rng.randint(1, 3)):
        c = created + dt.timedelta(seconds=rng.uniform(1, 20))
        s = c + minutes(rng, 0.5, 0.8)
        specs.append((f"lint ({k})", c, s, s + minutes(rng, 5, 0.6)))
    return specs


def _ci_jobs(rng, created, build_minutes, queue_minutes):
    specs = []
    for b in range(rng.randint(1, 4)):
        platform = rng.choice(sorted(build_minutes))
        c = created + dt.timedelta(seconds=rng.uniform(2, 60))
        s = c + minutes(rng, queue_minutes["cpu"], 0.9)
        e = s + minutes(rng, build_minutes[platform], 0.25)
        specs.append((f"{platform}-build ({b})", c, s, e))
        family = rng.choice(sorted(queue_minutes))
        for shard in range(rng.randint(2, 6)):
            tc = e + dt.timedelta(seconds=rng.uniform(5, 60))
            ts = tc + minutes(rng, queue_minutes[family], 0.9)
            run_for = min(minutes(rng, 80, 0.55), dt.timedelta(minutes=TEST_TIMEOUT_MIN))
            specs.append((f"{platform}-test ({b}, {shard})", tc, ts, ts + run_for))
    return specs


def plant_losses(seed: int, runs: list[SimRun]) -> tuple[dict[int, str], set[int]]:
    """(lost job completion -> its kind, runs whose `completed` was lost): CI runs of the working day."""
    rng = random.Random(seed + 1)
    ci = [r for r in runs if r.name == "pull" and START + dt.timedelta(hours=6) < r.created < START + dt.timedelta(hours=16)]
    chosen = rng.sample(ci, LOST_JOBS + LOST_RUNS)
    lost: dict[int, str] = {}
    for run in chosen[:LOST_JOBS]:
        tests = [j for j in run.jobs if "-test" in j.name]
        lost[rng.choice(tests).id] = "job completion (run heard completing later)"
    for run in chosen[LOST_JOBS:]:
        lost[max(run.jobs, key=lambda j: j.completed).id] = "job and run completions"
    return lost, {r.id for r in chosen[LOST_JOBS:]}


# ---- GitHub: the fake Actions API, at the pass's time -------------------------------------------

def iso(t: dt.datetime | None) -> str | None:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ") if t else None


def job_object(run: SimRun, job: SimJob, now: dt.datetime) -> dict:
    status = "completed" if now >= job.completed else "in_progress" if now >= job.started else "queued"
    return {"id": job.id, "run_id": run.id, "run_attempt": 1, "name": job.name, "workflow_name": run.name,
            "head_branch": "main", "status": status, "conclusion": job.conclusion if status == "completed" else None,
            "created_at": iso(job.created), "started_at": iso(job.started if status != "queued" else job.created),
            "completed_at": iso(job.completed) if status == "completed" else None}


def run_object(run: SimRun, now: dt.datetime) -> dict:
    status = "completed" if now >= run.completed else "in_progress" if now >= run.started else "queued"
    return {"id": run.id, "run_attempt": 1, "name": run.name, "status": status, "head_branch": "main",
            "conclusion": "success" if status == "completed" else None, "created_at": iso(run.created),
            "run_started_at": iso(run.created), "updated_at": iso(run.completed if status == "completed" else now),
            "event": "pull_request"}


def serve(port: int, ready, seed: int, runs: int) -> None:
    import logging
    import re

    from pytest_httpserver import HTTPServer
    from werkzeug import Response

    from fake_github_actions import FakeActions, reply, shaped

    class ClockedActions(FakeActions):
        """The fake API showing each run and job as GitHub would at `now`."""

        def _route(self, request, rest):
            if m := re.fullmatch(r"/actions/runs/(\d+)/attempts/1(/jobs)?", rest):
                run = day.get(int(m[1]))
                if run is None or clock["now"] < run.created:
                    return reply(404, {"message": "Not Found"})
                if m[2] is None:
                    return reply(200, shaped("workflow-run", run_object(run, clock["now"])))
                jobs = [shaped("job", job_object(run, j, clock["now"])) for j in run.jobs if j.created <= clock["now"]]
                return self._page(request, rest, jobs, "jobs")
            return super()._route(request, rest)

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    day = {r.id: r for r in make_day(seed, runs)}
    clock = {"now": START}
    server = HTTPServer(host="127.0.0.1", port=port)
    api = ClockedActions(server, repo=REPO)

    def set_clock(request):
        clock["now"] = dt.datetime.fromisoformat(request.args["t"])
        api.remaining = api.limit
        paths = [p for p, _ in api.requests]
        api.requests.clear()
        return Response(json.dumps(paths))
    server.expect_request("/_clock").respond_with_handler(set_clock)
    server.start()
    ready.put(len(day))
    while True:
        time.sleep(3600)


def set_clock(port: int, now: dt.datetime) -> list[str]:
    """Sets the fake's clock; the paths it was asked for since the last call."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/_clock?t={now.isoformat().replace('+', '%2B')}") as resp:
        return json.loads(resp.read())


# ---- the lake: what was received by each pass -----------------------------------------------------

COLUMNS = ("tbl VARCHAR, repo VARCHAR, id BIGINT, run_id BIGINT, run_attempt BIGINT, status VARCHAR, "
           "conclusion VARCHAR, received_at TIMESTAMPTZ, created_at TIMESTAMPTZ, updated_at TIMESTAMPTZ, "
           "event VARCHAR, delivery_id VARCHAR")


def webhook_rows(runs: list[SimRun], lost_jobs: set[int], lost_runs: set[int]) -> list[tuple]:
    rows = []
    for run in runs:
        for action, status, at in (("requested", "queued", run.created), ("in_progress", "in_progress", run.started),
                                   ("completed", "completed", run.completed)):
            if not (action == "completed" and run.id in lost_runs):
                rows.append(("workflow_run", REPO, run.id, run.id, 1, status, "success" if action == "completed" else None,
                             at, run.created, at, "workflow_run", f"gh-run-{run.id}-{action}"))
        for job in run.jobs:
            for status, at in (("queued", job.created), ("in_progress", job.started), ("completed", job.completed)):
                if not (status == "completed" and job.id in lost_jobs):
                    rows.append(("workflow_job", REPO, job.id, run.id, 1, status,
                                 job.conclusion if status == "completed" else None, at, job.created, at,
                                 "workflow_job", f"gh-job-{job.id}-{status}"))
    return rows


def rest_rows(archive: Path, part: str, seen: set[str]) -> list[tuple]:
    """The rows the ingest makes of a repair's records (each delivery id once)."""
    rows = []
    for path in archive.glob(f"webhooks/day=*/{part}.jsonl.gz"):
        with gzip.open(path) as f:
            for line in f:
                e = orjson.loads(line)
                if e["delivery_id"] in seen:
                    continue
                seen.add(e["delivery_id"])
                p, at = e["payload"], dt.datetime.fromisoformat(e["received_at"].replace("Z", "+00:00"))
                obj = p[e["event"]]
                run_id = obj["run_id"] if e["event"] == "workflow_job" else obj["id"]
                rows.append((e["event"], p["repository"]["full_name"], obj["id"], run_id, obj.get("run_attempt") or 1,
                             obj["status"], obj.get("conclusion"), at, _t(obj.get("created_at")),
                             _t(obj.get("updated_at")) or at, e["event"], e["delivery_id"]))
    return rows


def _t(text: str | None) -> dt.datetime | None:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def insert(con, rows: list[tuple]) -> None:
    if rows:
        names = [c.split()[0] for c in COLUMNS.split(", ")]
        batch = pa.table({n: [r[i] for r in rows] for i, n in enumerate(names)})  # noqa: F841 (read by DuckDB)
        con.execute("INSERT INTO ev SELECT * FROM batch")


def write_lake(con, lake_dir: Path, now: dt.datetime) -> None:
    selects = {"workflow_job": "repo, id, run_id, run_attempt, status, conclusion, received_at",
               "workflow_run": "repo, id, run_attempt, status, conclusion, created_at, updated_at, received_at",
               "webhook_events": "event, delivery_id, received_at"}
    days = [d for (d,) in con.execute("SELECT DISTINCT received_at::DATE::VARCHAR FROM ev WHERE received_at <= ?",
                                      [now]).fetchall()]
    for table, cols in selects.items():
        # webhook_events: the `rest` records alone, all gap repair reads of it
        where = f"tbl = '{table}'" if table != "webhook_events" else "delivery_id LIKE 'rest-%'"
        for day in days:
            folder = lake_dir / table / f"day={day}"
            folder.mkdir(parents=True, exist_ok=True)
            con.execute(f"COPY (SELECT {cols} FROM ev WHERE {where} AND received_at <= ? "
                        f"AND received_at::DATE = ?::DATE) TO '{folder}/data.parquet' (FORMAT parquet)", [now, day])


def repaired(con, lost: dict[int, str]) -> set[int]:
    ids = list(lost)
    return {i for (i,) in con.execute("SELECT id FROM ev WHERE tbl = 'workflow_job' AND status = 'completed' "
                                      "AND delivery_id LIKE 'rest-%' AND id IN (SELECT unnest(?::BIGINT[]))",
                                      [ids]).fetchall()}


# ---- the passes ------------------------------------------------------------------------------------

def run_passes(port: int, runs: list[SimRun], lost: dict[int, str], lost_runs: set[int]) -> tuple[list, dict]:
    from jobs.gap_repair import repair_limit
    from resources.github import GitHubResource
    from resources.lake import Lake
    from resources.storage import Store
    from torchci_assets.backfill.gaps import repair_gaps

    end = max(r.completed for r in runs) + 2 * EVERY
    gh = GitHubResource(api_url=f"http://127.0.0.1:{port}", token="bench")
    con = duckdb.connect()
    con.execute(f"CREATE TABLE ev ({COLUMNS})")
    insert(con, webhook_rows(runs, set(lost), lost_runs))
    done_at = {j.id: j.completed for r in runs for j in r.jobs if j.id in lost}
    per_pass, fixed, seen = [], {}, set()
    with tempfile.TemporaryDirectory(prefix="bench-gap-repair-") as tmp:
        archive, lake_dir = Path(tmp) / "archive", Path(tmp) / "lake"
        now = START + EVERY
        while now <= end:
            write_lake(con, lake_dir, now)
            set_clock(port, now)
            repair_gaps(gh, Store(str(archive)), Lake.at(str(lake_dir)), now, repair_limit())
            per_pass.append((now, len(set_clock(port, now))))
            insert(con, rest_rows(archive, f"rest-repair-{now.strftime('%Y%m%dT%H%M%S')}", seen))
            for job_id in repaired(con, lost) - set(fixed):
                fixed[job_id] = (now - done_at[job_id]).total_seconds() / 60
            if now.minute == 0:
                print(f"  {now:%d %H:%M}: {per_pass[-1][1]} requests this pass", flush=True)
            now += EVERY
    return per_pass, fixed


def report(per_pass: list, fixed: dict, lost: dict[int, str], wall: float) -> None:
    counts = [n for _, n in per_pass]
    hours = Counter()
    for at, n in per_pass:
        hours[at.replace(minute=0, second=0)] += n
    peak_hour, peak = max(hours.items(), key=lambda kv: kv[1])
    print(f"\n{len(per_pass)} passes every 5 minutes ({wall:.0f} s wall); GitHub requests:")
    print(f"  a pass: median {statistics.median(counts):,.0f}, max {max(counts):,}")
    print(f"  an hour: max {peak:,} ({peak_hour:%d %H}:00 UTC) = {peak / TOKEN_BUDGET:.0%} of a token's 5,000; "
          f"the day: {sum(counts):,}")
    print(f"lost completions repaired: {len(fixed)} of {len(lost)}; minutes from the lost delivery to its repair:")
    for kind in sorted(set(lost.values())):
        delays = sorted(fixed[j] for j, k in lost.items() if k == kind and j in fixed)
        missing = sum(1 for j, k in lost.items() if k == kind and j not in fixed)
        shown = f"median {statistics.median(delays):.0f}, max {max(delays):.0f}" if delays else "none repaired"
        print(f"  {kind}: {shown}{f' ({missing} never repaired)' if missing else ''}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=10_000)
    p.add_argument("--seed", type=int, default=3)
    args = p.parse_args()
    runs = make_day(args.seed, args.runs)
    lost, lost_runs = plant_losses(args.seed, runs)
    print(f"a day of {len(runs):,} workflow runs, {sum(len(r.jobs) for r in runs):,} jobs; "
          f"{len(lost)} completions lost ({len(lost_runs)} with their run's)", flush=True)
    port = free_port(3800)
    ready = multiprocessing.get_context("fork").Queue()
    server = multiprocessing.get_context("fork").Process(target=serve, args=(port, ready, args.seed, args.runs),
                                                          daemon=True)
    server.start()
    ready.get(timeout=600)
    t = time.perf_counter()
    try:
        per_pass, fixed = run_passes(port, runs, lost, lost_runs)
    finally:
        server.terminate()
    report(per_pass, fixed, lost, time.perf_counter() - t)
    return 0


if __name__ == "__main__":
    sys.exit(main())
