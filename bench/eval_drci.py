"""Score Dr. CI's classification of pull request failures against the simulator's planted truth.

For a seed: simulate DAYS days (PRs that break a test, PRs branched off a broken main commit,
flaky tests failing on PRs, infrastructure failures, PRs that break a test that is flaky
elsewhere with a message of their own, and PR jobs marked by open UNSTABLE issues), run every
asset for every day (`torchci run`), then classify each day's pull request heads with the code
`drci_comments` uses and compare each failing job's class with the simulator's truth
(`pr_failed_jobs` in ground-truth.json: the cause of each failed PR job). A job's verdict is its
last day's.

The planted UNSTABLE issues (`unstable_issues` in the truth) are published as
`stats/unstable-jobs.json` in the outputs the way the flakiness domain publishes the open issues
it reads back from GitHub (`condense_jobs`; every planted author has write access), and Dr. CI
reads that file as the asset does. A second matrix classifies the same jobs without that file
and scores them against each job's `cause` (the class it has beneath its UNSTABLE mark), so the
jobs the marks take do not hide how the other classes fare. Not scored, and counted apart: jobs of the first day, and jobs
whose pull request branched off a main commit pushed before the archive begins (no lake could
know how that commit failed).

Prints the confusion matrix (rows: truth, columns: Dr. CI) and the counts the issue fixes as
targets: no planted new failure called FLAKY or BROKEN TRUNK, and none of the PR-broken tests that
are flaky elsewhere called FLAKY.

Run as part of `make eval` (python bench/eval_drci.py [--seed 0] [--days 5] [--work DIR] [--explain]);
--explain lists every job whose verdict differs from its truth.
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
from resources.storage import Store
from torchci_assets.derived.drci.build import build_comments
from torchci_assets.derived.drci.classify import CLASSES, UNSTABLE, Verdict
from torchci_assets.derived.flakiness.job_issues import load_unstable
from torchci_assets.derived.flakiness.job_issues import UNSTABLE_JOBS_PATH, UNSTABLE_PREFIX, condense_jobs
from torchci_assets.derived.flakiness.lists import dumps

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
        publish_unstable(json.loads(truth_path.read_text()), Store(str(work / "outputs")))
        subprocess.run([BIN / "torchci", "run"], check=True, env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    return json.loads(truth_path.read_text())


def publish_unstable(truth: dict, outputs: Store) -> None:
    """stats/unstable-jobs.json from the planted open UNSTABLE issues, as the flakiness domain
    writes it from GitHub's (which a run without credentials cannot read)."""
    doc = condense_jobs(truth.get("unstable_issues", []), UNSTABLE_PREFIX, lambda author: True)
    outputs.write_bytes(UNSTABLE_JOBS_PATH, dumps(doc))


def verdicts_by_job(lake: Lake, unstable: dict[str, list]) -> dict[int, Verdict]:
    """job id -> Dr. CI's verdict on the last day that shows the job. The first simulated day is
    left out: its pull requests branch off main commits pushed before the archive begins, whose
    failures no lake could know."""
    github = GitHubResource(api_url="http://127.0.0.1:9")  # no credentials: nothing is sent
    out: dict[int, Verdict] = {}
    for day in lake.days("pr_jobs")[1:]:
        report = build_comments(lake, github, day, "pytorch/pytorch", unstable=unstable)
        for verdicts in report.verdicts.values():
            for v in verdicts:
                if v.job.job_id is not None:
                    out[v.job.job_id] = v
    return out


def score(truth: dict, verdicts: dict[int, Verdict], field: str = "class") -> tuple[Counter, dict]:
    """The confusion matrix of `field` (the truth's class, or its cause beneath an UNSTABLE mark)
    against the verdicts, and the counts around it."""
    last = {}
    for rec in truth["pr_failed_jobs"]:
        if rec["job_id"] not in last or rec["run_attempt"] >= last[rec["job_id"]]["run_attempt"]:
            last[rec["job_id"]] = rec
    archived = {c["sha"] for c in truth["main_commits"]}
    before = {j for j, rec in last.items() if j in verdicts and rec.get("merge_base", "") not in archived}
    scored = {j: rec for j, rec in last.items() if j in verdicts and j not in before}
    matrix: Counter = Counter((rec[field], verdicts[j].cls) for j, rec in scored.items())
    flaky_elsewhere = Counter(verdicts[j].cls for j, rec in scored.items() if rec["flaky_elsewhere"])
    extra = {"jobs_scored": sum(matrix.values()), "truth_jobs": len(last), "merge_base_before_archive": len(before),
             "flaky_elsewhere": dict(flaky_elsewhere),
             "wrong": [(rec, verdicts[j]) for j, rec in sorted(scored.items()) if rec[field] != verdicts[j].cls]}
    return matrix, extra


def explain(wrong: list[tuple[dict, Verdict]], field: str) -> None:
    for rec, v in wrong:
        j = v.job
        print(f"  PR {rec['pr']} job {rec['job_id']} {rec['workflow']} / {rec['name']}: truth {rec[field]}, "
              f"Dr. CI {v.cls} ({v.evidence or 'no evidence'})")
        for t in j.tests:
            print(f"      {t.key}: {t.message}")
        if not j.tests and j.failure_line:
            print(f"      log: {j.failure_line}")


def report(title: str, matrix: Counter, extra: dict, field: str, explaining: bool) -> bool:
    """Print one confusion matrix and its targets; whether the targets are met."""
    classes = [c for c in CLASSES if field == "class" or c != UNSTABLE]
    width = max(len(c) for c in CLASSES) + 2
    print(title)
    print("truth \\ Dr. CI".ljust(16) + "".join(c.rjust(width) for c in classes))
    for t in classes:
        print(t.ljust(16) + "".join(str(matrix[(t, v)]).rjust(width) for v in classes))
    correct = sum(matrix[(c, c)] for c in classes)
    print(f"accuracy {correct}/{extra['jobs_scored']} = {correct / max(1, extra['jobs_scored']):.3f}")
    if explaining:
        explain(extra["wrong"], field)
    new_as_unrelated = matrix[("NEW", "FLAKY")] + matrix[("NEW", "BROKEN TRUNK")]
    print(f"planted new failures called FLAKY or BROKEN TRUNK: {new_as_unrelated} (target 0) "
          f"[{'met' if new_as_unrelated == 0 else 'NOT met'}]")
    print(f"PR-broken tests flaky elsewhere (another message): {extra['flaky_elsewhere']} (target: no FLAKY) "
          f"[{'met' if not extra['flaky_elsewhere'].get('FLAKY') else 'NOT met'}]")
    return new_as_unrelated == 0 and not extra["flaky_elsewhere"].get("FLAKY")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--days", type=int, default=5)
    p.add_argument("--work", type=Path, default=Path("var/eval-drci"))
    p.add_argument("--explain", action="store_true", help="list every job whose verdict differs from its truth")
    args = p.parse_args(argv)
    work = args.work / f"seed{args.seed}-days{args.days}"
    t0 = time.perf_counter()
    truth = simulate_and_run(work, args.seed, args.days)
    lake = Lake.at(str(work / "lake"))
    # (build_comments rewrites each day's drci_comments: the pass with the unstable list goes last,
    # so the lake is left as the asset wrote it)
    beneath, extra_beneath = score(truth, verdicts_by_job(lake, {}), "cause")
    matrix, extra = score(truth, verdicts_by_job(lake, load_unstable(Store(str(work / "outputs")), print)))
    print(f"Dr. CI on seed {args.seed}, {args.days} simulated days ({time.perf_counter() - t0:.0f} s): "
          f"{extra['jobs_scored']} failed PR jobs scored of {extra['truth_jobs']} planted (not scored: "
          f"{extra['merge_base_before_archive']} whose PR branched off main before the archive; the others on "
          f"the first day, or not a head's latest attempt); "
          f"{len(truth.get('unstable_issues', []))} open UNSTABLE issues planted")
    ok = report("the comment's classes:", matrix, extra, "class", args.explain)
    ok = report("beneath the UNSTABLE marks (the same jobs classified without unstable-jobs.json, against "
                "each job's cause):", beneath, extra_beneath, "cause", args.explain) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
