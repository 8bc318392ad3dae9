"""Score Dr. CI's classification of pull request failures against the simulator's planted truth.

For a seed: simulate DAYS days (PRs that break a test, PRs branched off a broken main commit,
flaky tests failing on PRs, infrastructure failures, and PRs that break a test that is flaky
elsewhere with a message of their own), run every asset for every day (`torchci run`, in
process), then classify each day's pull request heads with the code `drci_comments` uses and
compare each failing job's class with the simulator's truth (`pr_failed_jobs` in
ground-truth.json: the cause of each failed PR job). A job's verdict is its last day's.

Prints the confusion matrix (rows: truth, columns: Dr. CI) and the counts the issue fixes as
targets: no planted new failure called FLAKY or BROKEN TRUNK, and none of the PR-broken tests that
are flaky elsewhere called FLAKY.

Run as part of `make eval` (python bench/eval_drci.py [--seed 0] [--days 4] [--work DIR]).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from resources.github import GitHubResource
from resources.lake import Lake
from torchci_assets.derived.drci.build import build_comments
from torchci_assets.derived.drci.classify import CLASSES

START = "2026-10-01"
BIN = Path(sys.executable).parent


def simulate_and_run(work: Path, seed: int, days: int) -> dict:
    archive, truth_path = work / "archive", work / "archive" / "ground-truth.json"
    env = {**os.environ, "TORCHCI_ARCHIVE_URI": str(archive), "TORCHCI_LAKE_URI": str(work / "lake"),
           "TORCHCI_OUTPUTS_URI": str(work / "outputs"), "DAGSTER_HOME": str(work / "dagster")}
    (work / "dagster").mkdir(parents=True, exist_ok=True)
    if not (work / "lake" / "drci_comments").exists():
        subprocess.run([BIN / "torchci", "simulate", "--out", str(archive), "--days", str(days), "--start", START,
                        "--seed", str(seed)], check=True, env=env, stdout=subprocess.DEVNULL)
        subprocess.run([BIN / "torchci", "run"], check=True, env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    return json.loads(truth_path.read_text())


def verdicts_by_job(lake: Lake) -> dict[int, str]:
    """job id -> Dr. CI's class on the last day that shows the job. The first simulated day is
    left out: its pull requests branch off main commits pushed before the archive begins, whose
    failures no lake could know."""
    github = GitHubResource(api_url="http://127.0.0.1:9")  # no credentials: nothing is sent
    out: dict[int, str] = {}
    for day in lake.days("pr_jobs")[1:]:
        report = build_comments(lake, github, day, "pytorch/pytorch")
        for verdicts in report.verdicts.values():
            for v in verdicts:
                if v.job.job_id is not None:
                    out[v.job.job_id] = v.cls
    return out


def score(truth: dict, verdicts: dict[int, str]) -> tuple[Counter, dict]:
    last = {}
    for rec in truth["pr_failed_jobs"]:
        if rec["job_id"] not in last or rec["run_attempt"] >= last[rec["job_id"]]["run_attempt"]:
            last[rec["job_id"]] = rec
    matrix: Counter = Counter()
    for job_id, rec in last.items():
        if job_id in verdicts:  # (a job of the first day, or not its head's latest attempt, is not scored)
            matrix[(rec["class"], verdicts[job_id])] += 1
    flaky_elsewhere = Counter(verdicts[j] for j, rec in last.items() if rec["flaky_elsewhere"] and j in verdicts)
    extra = {"jobs_scored": sum(matrix.values()), "truth_jobs": len(last),
             "not_classified": sum(1 for j in last if j not in verdicts),
             "verdicts_without_truth": sum(1 for j in verdicts if j not in last),
             "flaky_elsewhere": dict(flaky_elsewhere)}
    return matrix, extra


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--days", type=int, default=5)
    p.add_argument("--work", type=Path, default=Path("var/eval-drci"))
    args = p.parse_args(argv)
    work = args.work / f"seed{args.seed}-days{args.days}"
    t0 = time.perf_counter()
    truth = simulate_and_run(work, args.seed, args.days)
    matrix, extra = score(truth, verdicts_by_job(Lake.at(str(work / "lake"))))
    print(f"Dr. CI on seed {args.seed}, {args.days} simulated days ({time.perf_counter() - t0:.0f} s): "
          f"{extra['jobs_scored']} failed PR jobs scored of {extra['truth_jobs']} planted "
          f"(the others: on the first day, or not a head's latest attempt)")
    width = max(len(c) for c in CLASSES) + 2
    print("truth \\ Dr. CI".ljust(16) + "".join(c.rjust(width) for c in CLASSES))
    for t in CLASSES:
        print(t.ljust(16) + "".join(str(matrix[(t, v)]).rjust(width) for v in CLASSES))
    correct = sum(matrix[(c, c)] for c in CLASSES)
    print(f"accuracy {correct}/{extra['jobs_scored']} = {correct / max(1, extra['jobs_scored']):.3f}")
    new_as_unrelated = matrix[("NEW", "FLAKY")] + matrix[("NEW", "BROKEN TRUNK")]
    print(f"planted new failures called FLAKY or BROKEN TRUNK: {new_as_unrelated} (target 0) "
          f"[{'met' if new_as_unrelated == 0 else 'NOT met'}]")
    print(f"PR-broken tests flaky elsewhere (another message): {extra['flaky_elsewhere']} (target: no FLAKY) "
          f"[{'met' if not extra['flaky_elsewhere'].get('FLAKY') else 'NOT met'}]")
    return 0 if new_as_unrelated == 0 and not extra["flaky_elsewhere"].get("FLAKY") else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
