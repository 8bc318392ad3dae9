"""Score the life of disabled tests against the simulator's planted truth, on the fake GitHub API.

For each seed: simulate DAYS days with the disabled-test lifecycle (torchci_assets/simulate/
disabled.py: PyTorch's daily rerun_disabled_tests jobs; 12 disabled tests whose flakiness is
fixed on a known day, 8 disabled tests still flaky at 0.3%..2% per try, 50 tests of one file
becoming flaky together on day 5), file the tests disabled before the archive as DISABLED issues
on a local fake GitHub API (tests/fake_github_issues.py, its clock on the simulated day), then
materialize every day through the real assets with the issue loop live: ingest, test results,
flaky_tests, disabled_issues (filing, retiring, re-enabling) and the published lists.

Scored, over every seed:
- re-enabled tests that flake again within REFLAKE_DAYS days: a test re-enabled (its issue closed
  on rerun evidence) on day R whose planted failure rate is above zero on some day of R..R+13
  (target <= 5%); also how many the loop itself reopened on a new failure;
- planted fixes re-enabled by the fix day + the re-enabling window + 1 day (the misses listed);
- issues for the burst's file (aggregate and single-test, target 1), and the burst's tests the
  published disabled list names;
- issues filed twice (two issues with one title, target 0).

Run as part of `make eval` (python bench/eval_lifecycle.py [--seeds 1 2 3] [--days 30] [--work DIR]).
Simulated archives are kept under --work and reused when their options match.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import shutil
import sys
import time
from collections import Counter
from pathlib import Path

import dagster as dg
from pytest_httpserver import HTTPServer

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
START = dt.date(2026, 10, 1)
os.environ["TORCHCI_FIRST_DAY"] = START.isoformat()  # the assets' partitions are built on import

from eval_flaky import simulate  # noqa: E402
from fake_github_issues import FakeIssueTracker  # noqa: E402

from resources.configured import ArchiveResource, LakeResource, OutputsResource  # noqa: E402
from resources.github import GitHubResource  # noqa: E402
from torchci_assets.config import CONFIG_ENV_VAR, DEFAULT_CONFIG_PATH  # noqa: E402
from torchci_assets.derived.flakiness.aggregates import aggregate_title  # noqa: E402
from torchci_assets.derived.flakiness.assets import FLAKINESS_ASSETS  # noqa: E402
from torchci_assets.derived.flakiness.issue_text import issue_title  # noqa: E402
from torchci_assets.derived.flakiness.lists import DISABLED_TESTS_PATH, pytorch_key  # noqa: E402
from torchci_assets.derived.flakiness.reenable import REENABLED_MARKER, WINDOW_DAYS  # noqa: E402
from torchci_assets.derived.results.assets import test_daily_stats_assets, test_results_assets  # noqa: E402
from torchci_assets.ingest.assets import test_run_assets, webhook_assets  # noqa: E402
from torchci_assets.simulate.world import Options  # noqa: E402

REFLAKE_DAYS = 14
# A smaller world than `torchci simulate`'s default, for run time: six test configs (linux CPU and
# CUDA, Windows, macOS, ROCm, XPU), and files large enough to hold a burst of 50 tests.
SIM = dict(configs=6, test_files=40, tests_per_file=32, commits_per_day=12, prs_per_day=10)
QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
TARGETS = {"reflake_share": 0.05, "burst_issues": 1, "duplicates": 0}


class Rates:
    """Each planted test's per-try failure rate on a day, from the truth (0 for tests not planted)."""

    def __init__(self, truth: dict):
        self.life = {t["test"]: t for t in truth["disabled_lifecycle"]["tests"]}
        self.constant = {pytorch_key(v["classname"], v["name"]): r["rate"]
                         for r in truth["flaky_tests"] + truth["platform_failures"] for v in r["variants"]}

    def on(self, test: str, day: dt.date) -> float:
        t = self.life.get(test)
        if t is None:
            return self.constant.get(test, 0.0)
        if (t["start"] and day.isoformat() < t["start"]) or (t["fixed"] and day.isoformat() >= t["fixed"]):
            return 0.0
        return t["rate"]


def file_preexisting(fake: FakeIssueTracker, truth: dict) -> None:
    """The lifecycle's fixed and lingering tests are disabled before the archive begins: their
    issues (every platform), filed 20 days before it, as PyTorch's flaky bot words them."""
    for t in truth["disabled_lifecycle"]["tests"]:
        if t["start"] is None:
            fake.add(issue_title(t["test"]), "Platforms: \n\nThis test was disabled because it is failing in CI.",
                     user="pytorch-bot[bot]", age=dt.timedelta(days=20))


def write_config(work: Path) -> Path:
    """The bundled config with the DISABLED-issue loop turned on."""
    text = DEFAULT_CONFIG_PATH.read_text()
    on = text.replace("disabled_issues:\n  enabled: false", "disabled_issues:\n  enabled: true")
    assert on != text, "the bundled config no longer has disabled_issues.enabled: false"
    path = work / "config.yaml"
    path.write_text(on)
    return path


def run_days(work: Path, days: list[str], fake: FakeIssueTracker, url: str, clock: list) -> dict[str, str]:
    """Ingest every day, then derive day by day with GitHub's clock at the day's end; returns the
    day each test's issue was closed on rerun evidence."""
    resources = {"archive": ArchiveResource(uri=str(work / "archive")), "lake": LakeResource(uri=str(work / "lake")),
                 "outputs": OutputsResource(uri=str(work / "outputs")),
                 "github": GitHubResource(api_url=url, token="eval-token", search_interval_s=0.0,
                                          write_interval_s=0.0, backoff_base_s=0.0)}
    for day in days:
        _materialize([webhook_assets, test_run_assets], day, resources)
    reenabled: dict[str, str] = {}
    for day in days:
        clock[0] = dt.datetime.fromisoformat(f"{day}T23:00:00+00:00")
        _materialize([test_results_assets, test_daily_stats_assets, *FLAKINESS_ASSETS], day, resources)
        for n, issue in fake.issues.items():
            test = issue["title"].removeprefix("DISABLED ")
            if any(REENABLED_MARKER in c for c in fake.comments.get(n, [])) and test not in reenabled:
                reenabled[test] = day
    return reenabled


def _materialize(assets: list, day: str, resources: dict) -> None:
    result = dg.materialize(assets, partition_key=day, resources=resources, raise_on_error=False, run_config=QUIET)
    if not result.success:
        raise RuntimeError(f"materializing {day} failed")


def score(truth: dict, fake: FakeIssueTracker, reenabled: dict[str, str], outputs: Path) -> dict:
    rates = Rates(truth)
    life = truth["disabled_lifecycle"]["tests"]
    flaked_again = sorted(t for t, d in reenabled.items() if any(
        rates.on(t, dt.date.fromisoformat(d) + dt.timedelta(days=k)) > 0 for k in range(REFLAKE_DAYS)))
    reopened = sorted(t for t in reenabled if any(i["title"] == issue_title(t) and i["state"] == "open"
                                                  for i in fake.issues.values()))
    misses = []
    for t in (t for t in life if t["kind"] == "fixed"):
        deadline = dt.date.fromisoformat(t["fixed"]) + dt.timedelta(days=WINDOW_DAYS + 1)
        got = reenabled.get(t["test"])
        if got is None or dt.date.fromisoformat(got) > deadline:
            misses.append(f"{t['test']} (fixed {t['fixed']}, re-enabled {got or 'never'}, deadline {deadline})")
    burst = [t for t in life if t["kind"] == "burst"]
    titles = {aggregate_title(burst[0]["file"]), *(issue_title(t["test"]) for t in burst)}
    published = json.loads((outputs / DISABLED_TESTS_PATH).read_text()) if (outputs / DISABLED_TESTS_PATH).exists() else {}
    counts = Counter(i["title"] for i in fake.issues.values())
    return {
        "reenabled": len(reenabled), "flaked_again": flaked_again, "reopened": reopened,
        "fixes": sum(t["kind"] == "fixed" for t in life), "misses": misses,
        "fixed_reenabled": sum(1 for t in life if t["kind"] == "fixed" and t["test"] in reenabled),
        "lingering_reenabled": sorted(t["test"] for t in life if t["kind"] == "lingering" and t["test"] in reenabled),
        "burst": len(burst), "burst_file": burst[0]["file"],
        "burst_issues": sum(1 for i in fake.issues.values() if i["title"] in titles),
        "burst_published": sum(1 for t in burst if t["test"] in published),
        "duplicates": sorted(t for t, n in counts.items() if n > 1),
        "issues": len(fake.issues), "requests": len(fake.requests),
    }


def run_seed(seed: int, n_days: int, work: Path) -> tuple[dict, float]:
    t0 = time.monotonic()
    dates = [START + dt.timedelta(days=i) for i in range(n_days)]
    folder = work / f"seed-{seed}"
    for stale in ("lake", "outputs"):  # the fake GitHub starts empty: so must what was derived from it
        shutil.rmtree(folder / stale, ignore_errors=True)
    truth = simulate(folder / "archive", seed, dates, Options(seed=seed, lifecycle_from=dates[0].isoformat(), **SIM))
    server = HTTPServer(host="127.0.0.1", port=0)
    server.start()
    try:
        fake = FakeIssueTracker(server)
        clock = [dt.datetime.combine(START, dt.time(), dt.timezone.utc)]
        fake.clock = lambda: clock[0]
        file_preexisting(fake, truth)
        reenabled = run_days(folder, [d.isoformat() for d in dates], fake, server.url_for("").rstrip("/"), clock)
        result = score(truth, fake, reenabled, folder / "outputs")
    finally:
        server.stop()
    return result, time.monotonic() - t0


def ratio(a: int, b: int) -> str:
    return f"{a / b:.3f} ({a}/{b})" if b else "n/a (0/0)"


def report(results: dict[int, dict], n_days: int) -> None:
    total = Counter()
    for seed, r in results.items():
        for k in ("reenabled", "fixes", "fixed_reenabled", "burst", "burst_issues", "burst_published"):
            total[k] += r[k]
        for k in ("flaked_again", "reopened", "misses", "duplicates", "lingering_reenabled"):
            total[k] += len(r[k])
        print(f"  seed {seed}: re-enabled {r['reenabled']} (planted fixes {r['fixed_reenabled']}/{r['fixes']}, "
              f"still-flaky lingering {len(r['lingering_reenabled'])}), flaked again within {REFLAKE_DAYS} days "
              f"{len(r['flaked_again'])}, reopened by the loop {len(r['reopened'])}; burst of {r['burst']} in "
              f"{r['burst_file']}: {r['burst_issues']} issue(s), {r['burst_published']} in the disabled list; "
              f"{r['issues']} issues, {r['requests']} GitHub requests")
        for k in ("flaked_again", "misses", "duplicates"):
            for item in r[k]:
                print(f"    {k.replace('_', ' ')}: {item}")
    share = total["flaked_again"] / total["reenabled"] if total["reenabled"] else 0.0
    print(f"\nall seeds ({n_days} days each)")
    print(f"  re-enabled, flaked again within {REFLAKE_DAYS} days  {ratio(total['flaked_again'], total['reenabled'])}")
    print(f"  planted fixes re-enabled in time           {ratio(total['fixes'] - total['misses'], total['fixes'])}")
    print(f"  burst issues (one per seed is the target)  {total['burst_issues']} for {len(results)} burst(s)")
    print(f"  burst tests in the disabled list           {ratio(total['burst_published'], total['burst'])}")
    print(f"  titles filed twice                         {total['duplicates']}")
    print("targets")
    for text, ok in ((f"re-enabled that flake again <= {TARGETS['reflake_share']:.0%}: {share:.3f}",
                      share <= TARGETS["reflake_share"]),
                     (f"every planted fix re-enabled within {WINDOW_DAYS} + 1 days: {total['misses']} missed",
                      total["misses"] == 0),
                     (f"one issue per burst: {total['burst_issues']} for {len(results)}",
                      total["burst_issues"] == len(results)),
                     (f"no issue filed twice: {total['duplicates']}", total["duplicates"] == 0)):
        print(f"  {text:<64} {'met' if ok else 'NOT met'}")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--days", type=int, default=30, help=f"simulated days (at least {2 * WINDOW_DAYS})")
    ap.add_argument("--work", type=Path, default=Path("var/eval-lifecycle"))
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # the fake API's request lines
    os.environ[CONFIG_ENV_VAR] = str(write_config(args.work.resolve()))
    results = {}
    for seed in args.seeds:
        results[seed], secs = run_seed(seed, args.days, args.work)
        print(f"seed {seed}: {args.days} days simulated, materialized with the issue loop live and scored in "
              f"{secs:.0f} s", flush=True)
    print()
    report(results, args.days)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
