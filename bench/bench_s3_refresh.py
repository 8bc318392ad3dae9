"""What an intra-day refresh costs on S3 against the local disk, and where its S3 requests go
(`make bench-s3-refresh`).

A small simulated day (the simulator, `--commits` commits and `--prs` pull requests, a few
configurations: ~150 test reports, ~900 webhook deliveries) is put in an archive without its last
`--slices` webhook files and the reports of the jobs of the last few runs; `archive_refresh`
materializes the day once, then each held slice lands and `archive_refresh` runs again. Each run is
executed in process, in a process of its own per backend: wall time, CPU (the process's and its
children's) and, on S3, every request the server answered during the run, by S3 operation, by the
run's step that was running when it came (steps run one at a time: the refresh's executor is
in-process) and by the table or archive section its key or listing prefix names.

S3 is moto's server on 127.0.0.1 (`tests/counting_s3.py`, which logs each request); a real S3
endpoint answers each request in 20-50 ms where moto takes a few, so the requests are the figure
that carries over. Figures are the median of the `--slices` refreshes (3 by default).

    python bench/bench_s3_refresh.py [--commits 6] [--prs 4] [--slices 3] [--top 12] [--log s3.log]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
from conftest import free_port, s3_environment, wait_for_port  # noqa: E402  (the tests' S3 environment)
from counting_s3 import CountingS3  # noqa: E402  (the tests' counting S3 server)
from refresh_day import DAY, generate  # noqa: E402  (the tests' day, landed and refreshed)

BUCKET = "bench-s3-refresh"


def run_backend(source: Path, args, env: dict) -> list[dict]:
    out = subprocess.run([sys.executable, str(ROOT / "tests" / "refresh_day.py"), str(source), str(args.slices)],
                         env={**os.environ, "TORCHCI_FIRST_DAY": DAY, **env}, capture_output=True, text=True, cwd=ROOT)
    lines = [x for x in out.stdout.splitlines() if x.startswith("[")]
    if out.returncode or not lines:
        sys.exit(f"the refreshes failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(lines[-1])


def step_of(run: dict, at: float) -> str:
    for step, (start, end) in run["steps"].items():
        if start <= at <= end:
            return step
    return "(between steps)"


def subject(where: str, prefix: str) -> str:
    """The table or archive section a request's key or listing prefix names."""
    rel = where.split(prefix, 1)[1].lstrip("/") if prefix in where else where
    return "/".join(rel.split("/")[:2]) if rel.split("/")[0] in ("lake", "archive", "outputs") else rel.split("/")[0]


def requests_of(server: CountingS3, run: dict, prefix: str) -> dict:
    reqs = [r for r in server.requests(run["start"]) if r[0] <= run["end"]]
    return {"total": len(reqs), "ops": collections.Counter(op for _, op, _ in reqs),
            "steps": collections.Counter(step_of(run, at) for at, _, _ in reqs),
            "subjects": collections.Counter(subject(where, prefix) for _, _, where in reqs)}


def median_of(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def median_counts(counters: list[collections.Counter]) -> dict[str, float]:
    keys = set().union(*counters)
    return {k: statistics.median(c.get(k, 0) for c in counters) for k in keys}


def print_top(title: str, counts: dict[str, float], top: int) -> None:
    print(f"    {title}: " + ", ".join(f"{k} {v:g}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])[:top]))


def report(label: str, first: dict, runs: list[dict]) -> None:
    print(f"{label}: the whole day {first['wall_s']:.1f} s, {first['cpu_s']:.1f} CPU-s; a refresh after a slice "
          f"(median of {len(runs)}): {median_of(runs, 'wall_s'):.2f} s, {median_of(runs, 'cpu_s'):.2f} CPU-s",
          flush=True)


def report_requests(server: CountingS3, first: dict, runs: list[dict], prefix: str, top: int) -> None:
    whole, each = requests_of(server, first, prefix), [requests_of(server, r, prefix) for r in runs]
    print(f"  S3 requests: the whole day {whole['total']:,}; a refresh (median) "
          f"{statistics.median(e['total'] for e in each):,.0f}")
    print_top("by operation", median_counts([e["ops"] for e in each]), top)
    print_top("by step", median_counts([e["steps"] for e in each]), top)
    print_top("by table or section", median_counts([e["subjects"] for e in each]), top)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--commits", type=int, default=6)
    ap.add_argument("--prs", type=int, default=4)
    ap.add_argument("--slices", type=int, default=3)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--log", help="keep the S3 server's request log at this path")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-s3-refresh-") as tmp:
        source = Path(tmp) / "source"
        generate(source, args.commits, args.prs)
        local = {f"TORCHCI_{k}_URI": str(Path(tmp) / "local" / k.lower()) for k in ("ARCHIVE", "LAKE", "OUTPUTS")}
        local_runs = run_backend(source, args, local)
        report("local disk", local_runs[0], local_runs[1:])
        port = free_port()
        server = CountingS3(port, Path(args.log or Path(tmp) / "s3.log"))
        try:
            wait_for_port(port, server.proc)
            prefix = f"{BUCKET}/{os.getpid()}"
            s3 = {f"TORCHCI_{k}_URI": f"s3://{prefix}/{k.lower()}" for k in ("ARCHIVE", "LAKE", "OUTPUTS")}
            with s3_environment(server.endpoint, BUCKET):
                s3_runs = run_backend(source, args, s3)
            report(f"S3 (moto at {server.endpoint})", s3_runs[0], s3_runs[1:])
            report_requests(server, s3_runs[0], s3_runs[1:], prefix, args.top)
        finally:
            server.stop()
        ratio = median_of(s3_runs[1:], "wall_s") / median_of(local_runs[1:], "wall_s")
        print(f"S3 / local disk, a refresh's wall time: {ratio:.1f}x; CPU "
              f"{median_of(s3_runs[1:], 'cpu_s') / median_of(local_runs[1:], 'cpu_s'):.1f}x")


if __name__ == "__main__":
    main()
