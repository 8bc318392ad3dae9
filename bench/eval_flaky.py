"""Score the flaky verdicts and the platform smoke sets against the simulator's planted truth.

For each seed: simulate DAYS days (planted flaky tests at 0.5%..30% per try, platform-only
flakes, platform failures, broken-then-fixed tests, PR-caused failures, infra-failed jobs,
re-attempted runs), materialize every day through the real assets (ingest, test results and
daily aggregates, then flaky_tests, disabled_tests, slow_tests, smoke_tests) with
`dg.materialize`, and score the last day's window against `ground-truth.json`.

Truth. A planted test is a key (file, classname, name) per concrete variant. Flaky truth is
the simulator's `flaky_tests` and `platform_failures`: both fail intermittently on unchanged
code (a platform failure is a flake at 60..95% per try on one platform; its reruns pass
often). Recall counts the keys with a planted rate >= 1% and >= 200 runs on the platforms
where they are planted to fail (runs read from the lake). Broken (broken_tests), PR-caused
failures and infra-hit tests (failed or errored in a planted infra-failed job, not planted
themselves) must not be called flaky. Smoke truth for platform P is the platform failures
planted on P; its "eligible" recall leaves out tests that no other platform ran (no
evidence can make those fail "more than elsewhere").

Run as `make eval` (python bench/eval_flaky.py [--seeds 1 2 3] [--days 14] [--work DIR]).
Simulated archives are kept under --work and reused when their options match.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from pathlib import Path

import dagster as dg

START = dt.date(2026, 10, 1)
# The assets' daily partitions are built when they are imported: they must reach back to START.
os.environ.setdefault("TORCHCI_FIRST_DAY", START.isoformat())

from resources.configured import ArchiveResource, LakeResource, OutputsResource  # noqa: E402
from resources.github import GitHubResource  # noqa: E402
from resources.lake import Lake, connect  # noqa: E402
from torchci_assets.derived.flakiness.assets import FLAKINESS_ASSETS  # noqa: E402
from torchci_assets.derived.results.assets import test_daily_stats_assets, test_results_assets  # noqa: E402
from torchci_assets.ingest.assets import test_run_assets, webhook_assets  # noqa: E402
from torchci_assets.simulate.generate import generate_archive  # noqa: E402
from torchci_assets.simulate.world import Options  # noqa: E402

MIN_RATE = 0.01
MIN_RUNS = 200
QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
TARGETS = {"flaky_precision": 0.95, "flaky_recall": 0.90, "broken_called_flaky": 0, "smoke_precision": 0.9}


def simulate(folder: Path, seed: int, days: list[dt.date], opts: Options | None = None) -> dict:
    """The archive of `days` under `folder` (made with `opts`, else the defaults), reused when
    one made with the same days and options is there."""
    opts = opts or Options(seed=seed)
    truth_path = folder / "ground-truth.json"
    if truth_path.exists():
        made = json.loads(truth_path.read_text())["generator"]
        if made["days"] == [d.isoformat() for d in days] and made["options"] == json.loads(json.dumps(asdict(opts))):
            return json.loads(truth_path.read_text())
    generate_archive(folder, days, opts, log=lambda _: None)
    return json.loads(truth_path.read_text())


def materialize(work: Path, days: list[str]) -> None:
    """Ingest every day first (a day's test rows look one day ahead for their jobs), then derive."""
    resources = {"archive": ArchiveResource(uri=str(work / "archive")), "lake": LakeResource(uri=str(work / "lake")),
                 "outputs": OutputsResource(uri=str(work / "outputs")),
                 "github": GitHubResource()}  # no credentials: the DISABLED issues are a dry run
    for step in ([webhook_assets, test_run_assets], [test_results_assets, test_daily_stats_assets, *FLAKINESS_ASSETS]):
        for day in days:
            result = dg.materialize(step, partition_key=day, resources=resources, raise_on_error=False,
                                    run_config=QUIET)
            if not result.success:
                raise RuntimeError(f"materializing {day} failed in {work}")


def _keys(records: list[dict]) -> dict:
    out = {}
    for r in records:
        for v in r.get("variants") or [{"classname": r["classname"], "name": r["name"]}]:
            out[(r["file"], v["classname"], v["name"])] = r
    return out


def score_seed(work: Path, truth: dict, day: str, window: list[str]) -> dict:
    lake = Lake.at(str(work / "lake"))
    con = connect()
    lake.register(con, "flaky_tests", [day], name="f")
    lake.register(con, "flaky_test_platforms", [day], name="p")
    lake.register(con, "smoke_tests", [day], name="s")
    lake.register(con, "test_results", window, name="r")
    verdict = {(f, c, n): v for f, c, n, v in con.execute("SELECT file, classname, name, verdict FROM f").fetchall()}
    runs_on = defaultdict(dict)
    for f, c, n, p, runs in con.execute("SELECT file, classname, name, platform, runs FROM p").fetchall():
        runs_on[(f, c, n)][p] = runs
    smoke = {(p, f, c, n) for p, f, c, n in con.execute("SELECT platform, file, classname, name FROM s").fetchall()}
    infra_jobs = [j["job_id"] for j in truth["infra_failed_jobs"]]
    con.execute("CREATE TEMP TABLE infra_jobs AS SELECT unnest(?::BIGINT[]) AS job_id", [infra_jobs])
    infra_hit = set(con.execute("SELECT DISTINCT file, classname, name FROM r JOIN infra_jobs USING (job_id) "
                                "WHERE status IN ('failed', 'error')").fetchall())
    con.close()

    flaky_truth = {**_keys(truth["flaky_tests"]), **_keys(truth["platform_failures"])}
    called = {k for k, v in verdict.items() if v == "flaky"}
    eligible = set()
    for k, r in flaky_truth.items():
        runs = sum(n for p, n in runs_on.get(k, {}).items() if r["platforms"] == "all" or p in r["platforms"])
        if r["rate"] >= MIN_RATE and runs >= MIN_RUNS:
            eligible.add(k)
    broken, pr = set(_keys(truth["broken_tests"])), set(_keys(truth["pr_caused_failures"])) - set(flaky_truth)
    infra_hit -= set(flaky_truth)
    out = {
        "called_flaky": len(called), "true_flaky_called": len(called & set(flaky_truth)),
        "false_flaky": sorted(called - set(flaky_truth)),
        "eligible": len(eligible), "eligible_found": len(eligible & called),
        "planted": len(flaky_truth), "planted_found": len(set(flaky_truth) & called),
        "missed": sorted((k, flaky_truth[k]["rate"]) for k in eligible - called),
        "broken": len(broken), "broken_called_flaky": len(broken & called),
        "broken_verdicts": Counter(verdict.get(k, "not seen") for k in broken),
        "pr": len(pr), "pr_called_flaky": len(pr & called),
        "infra_hit": len(infra_hit), "infra_hit_called_flaky": len(infra_hit & called),
        "smoke": {},
    }
    platform_truth = _keys(truth["platform_failures"])
    for p in sorted({p for p, *_ in smoke} | {q for r in platform_truth.values() for q in r["platforms"]}):
        want = {k for k, r in platform_truth.items() if p in r["platforms"] and runs_on.get(k, {}).get(p)}
        comparable = {k for k in want if any(q != p and n > 0 for q, n in runs_on[k].items())}
        got = {(f, c, n) for q, f, c, n in smoke if q == p}
        out["smoke"][p] = {"selected": len(got), "correct": len(got & want), "planted": len(want),
                           "found": len(got & want), "comparable": len(comparable),
                           "comparable_found": len(got & comparable)}
    return out


def run_seed(seed: int, days: int, work: Path) -> tuple[int, dict, float]:
    t0 = time.monotonic()
    dates = [START + dt.timedelta(days=i) for i in range(days)]
    folder = work / f"seed-{seed}"
    truth = simulate(folder / "archive", seed, dates)
    names = [d.isoformat() for d in dates]
    materialize(folder, names)
    return seed, score_seed(folder, truth, names[-1], names), time.monotonic() - t0


def ratio(a: int, b: int) -> str:
    return f"{a / b:.3f} ({a}/{b})" if b else "n/a (0/0)"


def target_line(text: str, ok: bool) -> str:
    return f"  {text:<56} {'met' if ok else 'NOT met'}"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--days", type=int, default=14, help="simulated days; the window is the last 14 of them")
    ap.add_argument("--work", type=Path, default=Path("var/eval"))
    ap.add_argument("--jobs", type=int, default=1, help="seeds processed in parallel")
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    results = {}
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for seed, res, secs in pool.map(run_seed, args.seeds, [args.days] * len(args.seeds),
                                        [args.work] * len(args.seeds)):
            results[seed] = res
            print(f"seed {seed}: {args.days} days simulated, materialized and scored in {secs:.0f} s", flush=True)

    total = Counter()
    smoke_total: dict[str, Counter] = defaultdict(Counter)
    print(f"\nper seed (window: the last 14 of {args.days} days)")
    for seed, r in results.items():
        for k in ("called_flaky", "true_flaky_called", "eligible", "eligible_found", "planted", "planted_found",
                  "broken", "broken_called_flaky", "pr", "pr_called_flaky", "infra_hit", "infra_hit_called_flaky"):
            total[k] += r[k]
        for p, s in r["smoke"].items():
            smoke_total[p].update(s)
        print(f"  seed {seed}: flaky precision {ratio(r['true_flaky_called'], r['called_flaky'])}, "
              f"recall {ratio(r['eligible_found'], r['eligible'])} (rate >= 1%, >= 200 runs), "
              f"all planted {ratio(r['planted_found'], r['planted'])}; broken called flaky "
              f"{r['broken_called_flaky']}/{r['broken']} (verdicts {dict(r['broken_verdicts'])}); "
              f"infra-hit called flaky {r['infra_hit_called_flaky']}/{r['infra_hit']}; "
              f"PR-caused called flaky {r['pr_called_flaky']}/{r['pr']}")
        for k in r["false_flaky"]:
            print(f"    false flaky: {k}")
        for k, rate in r["missed"]:
            print(f"    missed (rate {rate}): {k}")

    precision = total["true_flaky_called"] / total["called_flaky"] if total["called_flaky"] else 0.0
    recall = total["eligible_found"] / total["eligible"] if total["eligible"] else 0.0
    print(f"\nall seeds {args.seeds}")
    print(f"  flaky precision                 {ratio(total['true_flaky_called'], total['called_flaky'])}")
    print(f"  flaky recall (rate>=1%, >=200)  {ratio(total['eligible_found'], total['eligible'])}")
    print(f"  flaky recall, every planted     {ratio(total['planted_found'], total['planted'])}")
    print(f"  broken called flaky             {ratio(total['broken_called_flaky'], total['broken'])}")
    print(f"  infra-hit called flaky          {ratio(total['infra_hit_called_flaky'], total['infra_hit'])}")
    print(f"  PR-caused called flaky          {ratio(total['pr_called_flaky'], total['pr'])}")
    print("  smoke sets (precision = correct/selected; recall = found/planted; eligible recall = planted "
          "tests another platform also ran)")
    selected = correct = 0
    smoke_ok = True
    for p, s in sorted(smoke_total.items()):
        selected += s["selected"]
        correct += s["correct"]
        smoke_ok &= s["selected"] == 0 or s["correct"] / s["selected"] >= TARGETS["smoke_precision"]
        print(f"    {p:<6} precision {ratio(s['correct'], s['selected'])}, recall {ratio(s['found'], s['planted'])}, "
              f"eligible recall {ratio(s['comparable_found'], s['comparable'])}")
    print(f"    all    precision {ratio(correct, selected)}")
    print("targets")
    print(target_line(f"flaky precision >= {TARGETS['flaky_precision']}: {precision:.3f}",
                      precision >= TARGETS["flaky_precision"]))
    print(target_line(f"flaky recall >= {TARGETS['flaky_recall']}: {recall:.3f}", recall >= TARGETS["flaky_recall"]))
    print(target_line(f"broken tests called flaky = 0: {total['broken_called_flaky']}",
                      total["broken_called_flaky"] == 0))
    print(target_line(f"smoke precision >= {TARGETS['smoke_precision']} (every set with selections)",
                      smoke_ok and selected > 0))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
