"""`torchci simulate`: write a simulated PyTorch CI archive (deterministic by seed)."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

from torchci_assets.cli_values import folder_problem

from .catalog import CATALOG
from .world import Options, check_counts


def _date(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not a YYYY-MM-DD date: {text!r}") from e


def _configs(text: str) -> int:
    if text == "all":
        return len(CATALOG)
    try:
        return int(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not a number or 'all': {text!r}") from e


def _local_folder(text: str) -> Path:
    """The simulator writes a local folder; `s3://...` would become a folder named `s3:` here."""
    if "://" in text:
        raise argparse.ArgumentTypeError(f"{text!r}: the simulator writes a local folder; give one, then upload it "
                                         "to the bucket (aws s3 sync DIR s3://...)")
    return Path(text)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="torchci simulate",
        description="Write archive days (webhooks/, test-reports/, test-runs/, ci-results/, logs/) that look like "
                    "PyTorch CI, plus ground-truth.json with the planted flaky/broken tests, infra "
                    "failures and each failed job log's failure line. Same arguments give byte-identical files. Existing day folders of the "
                    "generated days under --out are replaced.")
    p.add_argument("--out", required=True, type=_local_folder, help="archive root to write (a local folder)")
    p.add_argument("--days", type=int, default=3, help="number of days (default 3)")
    p.add_argument("--start", type=_date, help="first day, YYYY-MM-DD (default: the N days ending yesterday, UTC)")
    p.add_argument("--seed", type=int, default=0,
                   help="random seed: the same seed and options write the same files (default %(default)s)")
    p.add_argument("--commits-per-day", type=int, default=24, help="main-branch pushes per day (default %(default)s)")
    p.add_argument("--prs-per-day", type=int, default=30, help="pull requests opened per day (default %(default)s)")
    p.add_argument("--configs", type=_configs, default=12,
                   help=f"build_env/test_config pairs to run, in catalog order (1-{len(CATALOG)} or 'all'; "
                        "default %(default)s)")
    p.add_argument("--test-files", type=int, default=40,
                   help="test files in the suite (default 40: file creation dominates run time)")
    p.add_argument("--tests-per-file", type=int, default=30, help="mean tests per file (default %(default)s)")
    p.add_argument("--no-test-reports", action="store_true", help="webhooks and ci-results only")
    p.add_argument("--backends", type=int, default=4,
                   help="downstream backends reporting ci-results (default %(default)s)")
    p.add_argument("--torn-lines-per-day", type=int, default=1,
                   help="webhook lines cut short by a collector crash, each followed by the full delivery "
                        "(default %(default)s)")
    p.add_argument("--time-regressions", type=float, default=0.25, metavar="RATE",
                   help="chance per day that a commit makes one test file 1.5-4x slower for a while "
                        "(default 0.25; 0 for none)")
    p.add_argument("--platform-failures", type=int, default=None,
                   help="tests planted to fail on one platform (default: 0.6%% of the tests, at least 2)")
    p.add_argument("--unstable-jobs", type=int, default=2, choices=(0, 1, 2),
                   help="open UNSTABLE issues planted on pull-request jobs (default 2: a test config, then a whole "
                        "build environment), listed in ground-truth.json as GitHub returns issues")
    p.add_argument("--disabled-lifecycle", action="store_true",
                   help="run PyTorch's daily rerun_disabled_tests jobs and plant disabled tests fixed on a known "
                        "day, disabled tests still flaky at a low rate, and 50 tests of one file flaking together")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    if args.days < 1:
        parser().error("--days must be >= 1")
    if problem := folder_problem("--out", str(args.out)):
        parser().error(problem)
    if not 0 <= args.time_regressions <= 1:
        parser().error("--time-regressions must be a probability between 0 and 1")
    start = args.start or (dt.datetime.now(dt.timezone.utc).date() - dt.timedelta(days=args.days))
    days = [start + dt.timedelta(days=i) for i in range(args.days)]
    opts = Options(seed=args.seed, commits_per_day=args.commits_per_day, prs_per_day=args.prs_per_day,
                   configs=args.configs, test_files=args.test_files, tests_per_file=args.tests_per_file,
                   test_reports=not args.no_test_reports, backends=args.backends,
                   torn_lines_per_day=args.torn_lines_per_day, time_regression_rate=args.time_regressions,
                   platform_failures=args.platform_failures, unstable_jobs=args.unstable_jobs,
                   lifecycle_from=start.isoformat() if args.disabled_lifecycle else "")
    try:
        check_counts(opts)  # a count it cannot plant is a usage error, said before Dagster and pyarrow load
    except ValueError as e:
        parser().error(str(e))
    try:
        args.out.mkdir(parents=True, exist_ok=True)  # a folder it cannot make is said before Dagster and pyarrow load
    except OSError as e:
        return _cannot_write(e, args.out)
    from .generate import generate_archive  # after the usage checks: it loads Dagster and pyarrow

    try:
        generate_archive(args.out, days, opts)
    except ValueError as e:
        parser().error(str(e))
    except OSError as e:
        return _cannot_write(e, args.out)
    return 0


def _cannot_write(e: OSError, out: Path) -> int:
    print(f"torchci simulate: cannot write {e.filename or out}: {e.strerror or e}", file=sys.stderr)
    return 1
