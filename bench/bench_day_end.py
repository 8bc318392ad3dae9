"""A refresh at the end of a day of one-minute refreshes: what it costs once the day's tables hold
the parts ~1,400 increments leave (make bench-freshness measures it on a day built at once plus a
few parts).

The day's last hour is held back (as in bench_freshness), 23:00-23:50 cut into N slices by the
second (each a webhook file and the test-runs rows of the jobs it completes), then 23:50-23:55 and
23:55-24:00. Each of the N slices lands and is ingested by a refresh run of the ingest alone (the
steps that add parts), in one warm process to keep the benchmark under an hour; one full refresh
then catches the derived tables up, and the two 5-minute slices are measured with the full
refresh job, as make bench-freshness measures its refreshes.

    .venv/bin/python bench/bench_day_end.py 1400    # ~45 min on 2 cores
"""
import json, os, subprocess, sys
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench")); sys.path.insert(0, ROOT)
import bench_freshness as bf
from pathlib import Path
N = int(sys.argv[1]) if len(sys.argv) > 1 else 1400
TINY_END = 50 * 60  # the N slices cover 23:00-23:50
SLICES_FILE = bf.WORK / "day-end-slices.json"


def second_slice(received_at: str) -> int:
    """N slices over 23:00-23:50 by the second, then 23:50-23:55 and 23:55-24:00."""
    sec = int(received_at[14:16]) * 60 + int(received_at[17:19])
    return sec * N // TINY_END if sec < TINY_END else N + (0 if sec < 55 * 60 else 1)


bf.ensure_cache()
yesterday, today = bf.utc_days()
bf.SLICES = N + 2
slices = bf.prepare_run(yesterday, today, second_slice)
env = bf.env_for(yesterday)
bf.seed_yesterday(env, yesterday)
first, cursor = bf.refresh_once(env, today, "")
bf.print_run("first", first)
SLICES_FILE.write_text(json.dumps([[[str(a), str(b)] for a, b in s] for s in slices[:N]]))
LOOP = r'''
import json, os, resource, sys, time
from pathlib import Path
import dagster as dg
from torchci_assets.definitions import defs
sys.path.insert(0, "bench")
import bench_freshness as bf
instance = dg.DagsterInstance.get()
job = defs.resolve_job_def("archive_refresh")
keys = sorted({k for a in defs.get_repository_def().assets_defs_by_key.values() if a.is_executable
        and a.node_def.name in ("webhook_assets", "test_run_assets", "ci_result_assets") for k in a.keys})
print("selected", sorted(k.to_user_string() for k in keys), flush=True)
slices = json.load(open(sys.argv[2]))
t0 = time.time()
for i, s in enumerate(slices):
    bf.land_slice([(Path(a), Path(b)) for a, b in s])
    r = job.execute_in_process(partition_key=sys.argv[1], tags={"torchci/refresh": "archive"}, instance=instance,
                               asset_selection=keys, raise_on_error=False,
                               run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}})
    if not r.success:
        sys.exit(f"slice {i} failed")
    if i % 50 == 0:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        print(f"slice {i} {time.time() - t0:.0f} s cpu {ru.ru_utime + ru.ru_stime:.0f}", flush=True)
'''
subprocess.run([sys.executable, "-c", LOOP, today, str(SLICES_FILE)], env=env, cwd=ROOT, check=True)
n_parts = len([p for p in os.listdir(bf.RUN / "lake" / "test_run" / f"day={today}") if p.endswith(".parquet")])
print("test_run parts", n_parts, flush=True)
r, cursor = bf.refresh_once(env, today, cursor)
bf.print_run("catch-up", r)
for k in (N, N + 1):
    bf.land_slice(slices[k])
    r, cursor = bf.refresh_once(env, today, cursor)
    bf.print_run(f"5-min slice {k - N + 1}", r)
    print({s: round(v, 2) for s, v in sorted(r["steps"].items(), key=lambda kv: -kv[1])}, flush=True)
