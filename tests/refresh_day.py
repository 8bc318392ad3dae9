"""A small simulated day refreshed as files land: put in an archive without its last few files,
materialized once by `archive_refresh`, then the held files landed in slices, each followed by
another `archive_refresh` run. What tests/test_s3_requests.py bounds and bench/bench_s3_refresh.py
measures, on whatever backend the environment's TORCHCI_*_URI name.

    python tests/refresh_day.py SOURCE SLICES   # prints the runs as JSON: wall, CPU, steps' times
"""

from __future__ import annotations

import datetime as dt
import json
import os
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DAY = "2026-11-20"


def generate(out: Path, commits: int = 6, prs: int = 4) -> None:
    from torchci_assets.simulate.generate import generate_archive
    from torchci_assets.simulate.world import Options
    opts = Options(seed=3, commits_per_day=commits, prs_per_day=prs, configs=4, test_files=8, tests_per_file=10,
                   backends=1)
    generate_archive(out, [dt.date.fromisoformat(DAY)], opts, log=lambda _: None)


def cut(source: Path, slices: int) -> tuple[list[str], list[list[str]]]:
    """The day's files (relative paths) landed before the first refresh, and the held slices: slice k
    holds the k-th of the last `slices` webhook files and the reports of the k-th of the last runs."""
    files = sorted(str(p.relative_to(source)) for p in source.rglob("*") if p.is_file() and "day=" in str(p))
    hooks = [f for f in files if f.startswith("webhooks/")][-slices:]
    runs = sorted({f.split("/")[2] for f in files if f.startswith("test-reports/")})[-slices:]
    held = [[hooks[k], *(f for f in files if f.startswith(f"test-reports/day={DAY}/{runs[k]}/"))]
            for k in range(slices)]
    taken = {f for s in held for f in s}
    return [f for f in files if f not in taken], held


def land(store, source: Path, files: list[str]) -> None:
    for rel in files:
        store.write_bytes(rel, (source / rel).read_bytes())


def cpu() -> float:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def refresh(job, instance) -> dict:
    """One archive_refresh run of DAY: its wall time, CPU, and its steps' (start, end) times."""
    t0, c0, w0 = time.time(), cpu(), time.perf_counter()
    res = job.execute_in_process(partition_key=DAY, instance=instance, raise_on_error=True,
                                 run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}})
    wall, used = time.perf_counter() - w0, cpu() - c0
    starts, steps = {}, {}
    for e in instance.all_logs(res.run_id):
        ev = e.dagster_event
        if ev is not None and ev.event_type_value == "STEP_START":
            starts[ev.step_key] = e.timestamp
        elif ev is not None and ev.event_type_value in ("STEP_SUCCESS", "STEP_FAILURE") and ev.step_key in starts:
            steps[ev.step_key] = (starts[ev.step_key], e.timestamp)
    return {"start": t0, "end": time.time(), "wall_s": wall, "cpu_s": used, "steps": steps}


def main() -> None:
    import dagster as dg

    from resources.storage import Store
    from torchci_assets.definitions import defs
    source, slices = Path(sys.argv[1]), int(sys.argv[2])
    first, held = cut(source, slices)
    archive = Store(os.environ["TORCHCI_ARCHIVE_URI"])
    job, instance = defs.resolve_job_def("archive_refresh"), dg.DagsterInstance.ephemeral()
    land(archive, source, first)
    runs = [refresh(job, instance)]
    for files in held:
        land(archive, source, files)
        runs.append(refresh(job, instance))
    print(json.dumps(runs))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
