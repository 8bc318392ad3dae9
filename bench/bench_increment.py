"""Cost of the intra-day refresh's ingest: an increment of 5 minutes of files at the end of a
PyTorch-sized day, against re-ingesting the whole day, and the whole day's ingest before and
after incremental ingest existed (it must be no slower).

Data: the day `bench/bench_freshness.py` simulates (its SIMULATE arguments, its second day: ~25,000
JUnit reports, 3.6 M test rows, ~200 k webhook deliveries), generated once under
var/bench-increment/source. The day is cut in two: what landed before 23:55, and the files of the
last 5 minutes, i.e. the reports of the jobs that completed then and the webhook, test-runs and
ci-results lines received then (moved into files of their own, as the receiver's minute segments
are). The three ingests (webhooks, test_run, ci_result) run in a fresh process each time; CPU
seconds are the process's and its children's (the webhook scan's second process) around the
ingest calls, imports left out.

1. Increment: the day before 23:55 ingested in full (with its manifests), the last 5 minutes'
   files land, and the refresh's ingest (`incremental=True`) runs; then the same with the checks
   the asset runs on test_run (unique key, required columns: on the part the increment added).
2. Full re-ingest of the whole day (what every refresh did before), this branch's code.
3. The same with the code before incremental ingest (`--before REV`, default the merge base with
   main, exported with `git archive`), for "no slower".

Medians of --repeats (default 3). The machine is shared: say so with the figures.
Run as `make bench-increment`; the first run generates the day (~10 minutes).
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from bench_freshness import DAYS, SIMULATE  # noqa: E402  (the same generator and day)

WORK = ROOT / "var" / "bench-increment"
SOURCE = WORK / "source"
DAY = DAYS[1]
LATE_MS = 5 * 60 * 1000

INGEST = """
import json, resource, sys, time
t_import = time.perf_counter()
from resources.lake import Lake
from resources.storage import Store
from torchci_assets.ingest.ci_results import ingest_ci_results_day
from torchci_assets.ingest.reports import ingest_test_run_day
from torchci_assets.ingest.webhooks import ingest_webhook_day
archive, lake, day, incremental, checks = Store(sys.argv[1]), Lake.at(sys.argv[2]), sys.argv[3], sys.argv[4] == "1", sys.argv[5] == "1"
kw = {"incremental": True} if incremental else {}
def cpu():
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime
out, reports = {}, {}
for name, fn in (("webhooks", lambda: ingest_webhook_day(archive, lake, day, **kw)),
                 ("test_run", lambda: ingest_test_run_day(archive, lake, day, **kw)),
                 ("ci_result", lambda: ingest_ci_results_day(archive, lake, day, **kw))):
    c0, t0 = cpu(), time.perf_counter()
    report = reports[name] = fn()
    out[name] = {"cpu_s": cpu() - c0, "wall_s": time.perf_counter() - t0, "mode": getattr(report, "mode", "rebuild"),
                 "files": report.files}
if checks:
    from torchci_assets.checks import not_null_check, unique_key_check
    from torchci_assets.ingest.reports import KEY_COLUMNS, REQUIRED_COLUMNS
    c0, t0 = cpu(), time.perf_counter()
    parts = reports["test_run"].parts_added  # as the asset: an increment checks its new part
    unique_key_check(lake, "test_run", day, KEY_COLUMNS, parts)
    not_null_check(lake, "test_run", day, REQUIRED_COLUMNS, parts)
    out["test_run checks"] = {"cpu_s": cpu() - c0, "wall_s": time.perf_counter() - t0}
import torchci_assets
out["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
out["code"] = torchci_assets.__file__
print(json.dumps(out))
"""

TICK = """
import json, resource, sys, time
from resources.storage import Store
from torchci_assets.ingest import landed
from torchci_assets.ingest.landed import LandedCache, day_fingerprint
store, day, cache_dir, at = Store(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4])
def cpu():
    s = resource.getrusage(resource.RUSAGE_SELF)
    return s.ru_utime + s.ru_stime
c0 = cpu()
fp = day_fingerprint(store, day, cache=LandedCache(cache_dir, clock=lambda: at))
print(json.dumps({"cpu_s": cpu() - c0, "files": fp.files, "digest": fp.digest}))
"""

LATE_JOBS = """
import json, sys
from resources.lake import Lake, connect
lake, day, since = Lake.at(sys.argv[1]), sys.argv[2], int(sys.argv[3])
con = connect(); lake.register(con, "workflow_job", [day], name="j")
print(json.dumps([r[0] for r in con.execute(
    "SELECT id FROM j WHERE epoch_ms(completed_at) >= ?", [since]).fetchall()]))
"""


def ensure_source() -> None:
    if (SOURCE / "ready.json").exists():
        return
    print(f"generating the PyTorch-sized day under {SOURCE} (once, ~10 minutes) ...", flush=True)
    subprocess.run([str(Path(sys.executable).parent / "torchci"), "simulate", "--out", str(SOURCE), *SIMULATE],
                   check=True)
    (SOURCE / "ready.json").write_text("{}")


def run_ingest(code_root: Path, archive: Path, lake: Path, incremental: bool, checks: bool = False) -> dict:
    env = {**os.environ, "PYTHONPATH": str(code_root)}
    out = subprocess.run([sys.executable, "-c", INGEST, str(archive), str(lake), DAY, str(int(incremental)),
                          str(int(checks))], capture_output=True, text=True, cwd=code_root, env=env)
    lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
    if out.returncode or not lines:
        sys.exit(f"ingest failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    return json.loads(lines[-1])


def link_tree(src: Path, dst: Path) -> None:
    """Hard links: archive files are never rewritten, lake files are replaced by rename."""
    shutil.copytree(src, dst, copy_function=os.link)


def split_lines(path: Path, late, dst_early: Path, dst_late: Path) -> int:
    """Write the lines of a gzip JSONL file for which `late(line)` holds to `dst_late`, the rest
    to `dst_early`; the number of late lines."""
    early, moved = [], []
    for line in gzip.decompress(path.read_bytes()).splitlines(keepends=True):
        (moved if line.strip() and late(line) else early).append(line)
    dst_early.parent.mkdir(parents=True, exist_ok=True)
    dst_early.write_bytes(gzip.compress(b"".join(early), 1))
    if moved:
        dst_late.parent.mkdir(parents=True, exist_ok=True)
        dst_late.write_bytes(gzip.compress(b"".join(moved), 1))
    return len(moved)


def received_ms(line: bytes) -> int | None:
    rec = json.loads(line)
    text = rec.get("received_at") if isinstance(rec, dict) else None
    if not isinstance(text, str):
        return None
    return int(dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def cut_day(since: int, late_jobs: set[int], base: Path, late: Path) -> dict[str, int]:
    """The source day as `base` (what landed before `since`) and `late` (the files landing after)."""
    shutil.rmtree(base, ignore_errors=True)
    shutil.rmtree(late, ignore_errors=True)
    counts = {"files": 0, "lines": 0}
    for section in ("webhooks", "test-reports", "test-runs", "ci-results"):
        folder = SOURCE / section / f"day={DAY}"
        for src in sorted(p for p in folder.rglob("*") if p.is_file()):
            rel = src.relative_to(SOURCE)
            if section == "test-reports":
                job = int(rel.parts[4])
                dst = (late if job in late_jobs else base) / rel
                dst.parent.mkdir(parents=True, exist_ok=True)
                os.link(src, dst)
                counts["files"] += job in late_jobs
                continue
            if section == "test-runs":
                def is_late(line: bytes) -> bool:
                    return json.loads(line).get("job_id") in late_jobs
            elif "T23" in src.name:
                def is_late(line: bytes) -> bool:
                    t = received_ms(line)
                    return t is not None and t >= since
            else:
                (base / rel).parent.mkdir(parents=True, exist_ok=True)
                os.link(src, base / rel)
                continue
            moved = split_lines(src, is_late, base / rel, late / rel.parent / f"zz-late-{rel.name}")
            counts["files"] += bool(moved)
            counts["lines"] += moved
    return counts


def median_of(runs: list[dict], key: str, field: str = "cpu_s") -> float:
    return statistics.median(r[key][field] for r in runs if key in r)


def total(run: dict, field: str = "cpu_s") -> float:
    return sum(v[field] for k, v in run.items() if isinstance(v, dict) and k != "test_run checks")


def tick_runs(repeats: int) -> dict[str, list[dict]]:
    """The sensor's fingerprint of the day (every source), each in a fresh process as the bench's
    ticks are: a full walk (no folder quiet); with the cache once the day's folders are quiet; and
    with the cache right after the last 5 minutes' files land. The archive was linked in moments
    ago, so every folder's change time is recent: the cache's clock is set to SEAL_S after the
    moment the day before 23:55 was in place, which makes those folders quiet (as a day's earlier
    folders are at its end) and the late files not."""
    from torchci_assets.ingest.landed import SEAL_S
    archive = WORK / "tick-archive"
    late = sorted(p for p in (WORK / "late").rglob("*") if p.is_file())
    runs: dict[str, list[dict]] = {"full walk": [], "quiet day, nothing new": [], "quiet day + 5 minutes landed": []}

    def tick(cache: str, at: float) -> dict:
        return json.loads(subprocess.run([sys.executable, "-c", TICK, str(archive), DAY, str(WORK / cache), str(at)],
                                         cwd=ROOT, check=True, capture_output=True, text=True).stdout)

    for _ in range(repeats):
        for d in (archive, WORK / "tick-cache", WORK / "tick-none"):
            shutil.rmtree(d, ignore_errors=True)
        link_tree(WORK / "base", archive)
        time.sleep(1.0)
        mark = time.time()
        time.sleep(1.0)
        runs["full walk"].append(tick("tick-none", 1.0))  # a clock before every change: nothing is quiet
        tick("tick-cache", mark + SEAL_S)
        runs["quiet day, nothing new"].append(tick("tick-cache", mark + SEAL_S))
        for src in late:
            dst = archive / src.relative_to(WORK / "late")
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.link(src, dst)
        runs["quiet day + 5 minutes landed"].append(tick("tick-cache", mark + SEAL_S))
        assert runs["quiet day + 5 minutes landed"][-1]["digest"] == tick("tick-none", 1.0)["digest"], "a file missed"
    for label, rs in runs.items():
        print(f"  sensor tick, {label}: {statistics.median(r['cpu_s'] for r in rs):.3f} CPU-s "
              f"({rs[0]['files']} files)", flush=True)
    return runs


def export_before(rev: str) -> Path:
    dst = WORK / f"before-{rev[:12]}"
    if not dst.exists():
        tmp = WORK / "before.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        archive = subprocess.run(["git", "archive", rev], cwd=ROOT, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive, check=True)
        tmp.rename(dst)
    return dst


def full_runs(codes: dict[str, Path], repeats: int) -> dict[str, list[dict]]:
    """Each code's full-day ingest `repeats` times, alternating (A B, B A, ...): under a load
    that changes, both see the same."""
    runs: dict[str, list[dict]] = {label: [] for label in codes}
    for i in range(repeats):
        for label in (list(codes) if i % 2 == 0 else list(codes)[::-1]):
            lake = WORK / f"lake-{label}"
            shutil.rmtree(lake, ignore_errors=True)
            run = run_ingest(codes[label], SOURCE, lake, incremental=False)
            assert run["code"].startswith(str(codes[label])), f"ran {run['code']}, not the code under {codes[label]}"
            runs[label].append(run)
            print(f"  full day, {label} code, run {i + 1}: {total(run):.1f} CPU-s, {total(run, 'wall_s'):.1f} s wall",
                  flush=True)
    return runs


def increment_runs(repeats: int, checks: bool, label: str = "increment", only: str | None = None) -> list[dict]:
    """The refresh's ingest after the late files (or only those under `only`, "" for none) land
    on the day before 23:55."""
    runs = []
    late = sorted(p for p in (WORK / "late").rglob("*") if p.is_file())
    if only is not None:
        late = [p for p in late if only and str(p.relative_to(WORK / "late")).startswith(only)]
    for i in range(repeats):
        archive, lake = WORK / "run-archive", WORK / "run-lake"
        for d in (archive, lake):
            shutil.rmtree(d, ignore_errors=True)
        link_tree(WORK / "base", archive)
        link_tree(WORK / "base-lake", lake)
        for src in late:
            dst = archive / src.relative_to(WORK / "late")
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.link(src, dst)
        runs.append(run_ingest(ROOT, archive, lake, incremental=True, checks=checks))
        modes = {k: v["mode"] for k, v in runs[-1].items() if isinstance(v, dict) and "mode" in v}
        print(f"  {label}{' + checks' if checks else ''} ({len(late)} files), run {i + 1}: {total(runs[-1]):.2f} "
              f"CPU-s, {total(runs[-1], 'wall_s'):.2f} s wall {modes}", flush=True)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--before", default=None, help="git revision of the code before (default: merge base with main)")
    parser.add_argument("--ticks-only", action="store_true", help="only the sensor's ticks (the day already cut)")
    args = parser.parse_args()
    ensure_source()
    if args.ticks_only:
        tick_runs(args.repeats)
        return
    before_rev = args.before or subprocess.run(["git", "merge-base", "HEAD", "main"], cwd=ROOT, check=True,
                                               capture_output=True, text=True).stdout.strip()
    print(f"{DAY}: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start", flush=True)
    full = full_runs({"after": ROOT, "before": export_before(before_rev)}, args.repeats)
    after, before = full["after"], full["before"]
    since = int(dt.datetime.fromisoformat(DAY).replace(tzinfo=dt.timezone.utc).timestamp() * 1000) + 86_400_000 - LATE_MS
    late_jobs = set(json.loads(subprocess.run([sys.executable, "-c", LATE_JOBS, str(WORK / "lake-after"), DAY,
                                               str(since)], cwd=ROOT, check=True, capture_output=True,
                                              text=True).stdout))
    cut = cut_day(since, late_jobs, WORK / "base", WORK / "late")
    print(f"last 5 minutes: {len(late_jobs)} jobs completed, {cut['files']} files, {cut['lines']} lines moved",
          flush=True)
    shutil.rmtree(WORK / "base-lake", ignore_errors=True)
    run_ingest(ROOT, WORK / "base", WORK / "base-lake", incremental=True)  # the day before 23:55, with manifests
    inc = increment_runs(args.repeats, checks=False)
    inc_checks = increment_runs(args.repeats, checks=True)
    one_job = "/".join(next((WORK / "late").glob("test-reports/*/*/*/*")).relative_to(WORK / "late").parts)
    small = {"one job's reports": increment_runs(args.repeats, True, "one job's reports", only=one_job),
             "nothing new": increment_runs(args.repeats, True, "nothing new", only="")}
    tick_runs(args.repeats)
    report(after, before, inc, inc_checks, cut, len(late_jobs), small)


def report(after: list[dict], before: list[dict], inc: list[dict], inc_checks: list[dict], cut: dict,
           jobs: int, small: dict[str, list[dict]]) -> None:
    print(f"\nmedians of {len(after)} runs, load average {os.getloadavg()[0]:.1f} at the end "
          f"({os.cpu_count()} cores shared)")
    print(f"{'':34}{'CPU-s':>8}{'wall s':>8}")
    for name in ("webhooks", "test_run", "ci_result"):
        for label, runs in (("full day, before", before), ("full day, after", after), ("increment", inc)):
            print(f"{name + ', ' + label:34}{median_of(runs, name):8.2f}{median_of(runs, name, 'wall_s'):8.2f}")
    rows = (("full day, before", before), ("full day, after", after), ("5-minute increment", inc),
            ("5-minute increment + checks", inc_checks), *((f"{k} + checks", v) for k, v in small.items()))
    for label, runs in rows:
        cpu = statistics.median(total(r) + r.get("test_run checks", {}).get("cpu_s", 0) for r in runs)
        wall = statistics.median(total(r, "wall_s") + r.get("test_run checks", {}).get("wall_s", 0) for r in runs)
        rss = statistics.median(r["rss_mb"] for r in runs)
        print(f"{'ingest, ' + label:34}{cpu:8.2f}{wall:8.2f}   peak RSS {rss:.0f} MB")
    print(f"(increment: {jobs} jobs completed in the last 5 minutes, {cut['files']} files, "
          f"{cut['lines']} JSONL lines)")
    idle = statistics.median(total(r) + r["test_run checks"]["cpu_s"] for r in small["nothing new"])
    full = statistics.median(total(r) for r in after)
    print(f"a refresh with nothing new: {idle:.2f} CPU-s; at one refresh every 5 minutes, {288 * idle:.0f} CPU-s "
          f"a day = {288 * idle / full:.1f}x the full day")

if __name__ == "__main__":
    main()
