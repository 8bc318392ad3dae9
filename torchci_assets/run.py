"""`torchci run`: materialize every asset for every archive day, in process, no daemon.

This is how a user processes an existing archive from the shell. Days run in ascending
order so that window assets find the earlier days they read; within a day Dagster runs the
assets in dependency order. Runs are recorded in the Dagster instance at $DAGSTER_HOME when
it is set, so `make dev` shows them afterwards.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
import warnings

import dagster as dg

ARCHIVE_SOURCES = ("webhooks", "test-reports", "test-runs", "ci-results")
# Dagster's engine events are DEBUG; a shell user wants the assets' own progress and warnings.
LOG_CONFIG = {"loggers": {"console": {"config": {"log_level": os.environ.get("TORCHCI_LOG_LEVEL", "INFO")}}}}


def archive_days(store) -> list[str]:
    days: set[str] = set()
    for source in ARCHIVE_SOURCES:
        days.update(store.list_days(source))
    return sorted(days)


def _day(text: str) -> str:
    try:
        return dt.date.fromisoformat(text).isoformat()
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a day (YYYY-MM-DD)") from None


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="torchci run", description=__doc__.split("\n\n")[0])
    p.add_argument("--from", dest="start", type=_day, help="first day to process (default: the archive's first)")
    p.add_argument("--to", dest="end", type=_day, help="last day to process (default: the archive's last)")
    return p.parse_args(argv)


def summarize(lake, days: list[str]) -> list[tuple[str, int]]:
    """Rows per lake table over `days`, read from the Parquet footers (no data scan)."""
    import pyarrow.parquet as pq

    out = []
    for table in lake.tables():
        rows = sum(pq.ParquetFile(f, filesystem=lake.store.fs).metadata.num_rows for f in lake.files(table, days))
        out.append((table, rows))
    return out


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    warnings.filterwarnings("ignore", category=dg.BetaWarning)  # Dagster's own, not actionable here
    from resources import Lake, Store, resolved_uri
    from torchci_assets.definitions import defs

    archive = Store(resolved_uri("TORCHCI_ARCHIVE_URI"))
    lake = Lake(Store(resolved_uri("TORCHCI_LAKE_URI")))
    days = [d for d in archive_days(archive)
            if (args.start is None or d >= args.start) and (args.end is None or d <= args.end)]
    if not days:
        print(f"torchci run: no archive days found under {archive.display()}"
              + (" in the given range" if args.start or args.end else "")
              + ". Generate a sample with `torchci simulate --out DIR`, or set TORCHCI_ARCHIVE_URI.",
              file=sys.stderr)
        return 1
    instance = dg.DagsterInstance.get() if os.environ.get("DAGSTER_HOME") else dg.DagsterInstance.ephemeral()
    job = defs.resolve_implicit_global_asset_job_def()
    print(f"torchci run: {len(days)} day(s) {days[0]}..{days[-1]} from {archive.display()} into {lake.store.display()}")
    failed = []
    for i, day in enumerate(days, 1):
        t0 = time.monotonic()
        result = job.execute_in_process(partition_key=day, instance=instance, raise_on_error=False,
                                        tags={"torchci/source": "torchci run"}, run_config=LOG_CONFIG)
        failed_checks = [e.asset_check_evaluation_data for e in result.all_events
                         if e.event_type_value == "ASSET_CHECK_EVALUATION" and not e.asset_check_evaluation_data.passed]
        status = "ok" if result.success else "FAILED"
        print(f"  [{i}/{len(days)}] {day}: {status} in {time.monotonic() - t0:.1f}s"
              + (f", {len(failed_checks)} check(s) failed: "
                 + ", ".join(f"{c.asset_key.to_user_string()}:{c.check_name}" for c in failed_checks)
                 if failed_checks else ""))
        if not result.success:
            failed.append(day)
            for event in result.all_events:
                if event.is_step_failure:
                    print(f"      {event.step_key}: {event.step_failure_data.error.message.strip()}")
    print("\nRows per table:")
    counts = summarize(lake, days)
    for table, rows in counts:
        print(f"  {table:<24} {rows:>12,}")
    rejects = dict(counts).get("rejects", 0)
    print(f"\nRejects: {rejects:,}" + (" (see the `rejects` table: source, location, reason)" if rejects else ""))
    print(f"Lake:    {lake.store.display()}")
    outputs = Store(resolved_uri("TORCHCI_OUTPUTS_URI"))
    print(f"Outputs: {outputs.display()}")
    print("Open the Dagster UI with `make dev` (http://127.0.0.1:3000) to see lineage, runs and checks.")
    if outputs.exists("hud/index.html"):
        print(f"HUD:     {outputs.display('hud/index.html')}")
    if failed:
        print(f"Failed days: {', '.join(failed)} (re-run with `torchci run --from DAY --to DAY`)", file=sys.stderr)
        return 1
    return 0
