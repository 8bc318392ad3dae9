"""`torchci run`: materialize every asset for every archive day, in process, no daemon.

This is how a user processes an existing archive from the shell. Days run in ascending
order so that window assets find the earlier days they read; within a day Dagster runs the
assets in dependency order. `--select` takes Dagster's asset selection syntax to re-run part
of the graph (assets read their inputs from the lake, so downstream assets re-run without
re-ingesting). Runs are recorded in the Dagster instance at $DAGSTER_HOME when it is set (the
folder is created if missing), so `make dev` shows them afterwards.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import time
import warnings
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from torchci_assets import preflight
from torchci_assets.cli_values import FirstDayError, day
from torchci_assets.collector import collect_less, keep_loaded
from torchci_assets.config import load_config

if TYPE_CHECKING:  # Dagster loads in the functions that run assets: `--help` and usage errors answer without it
    import dagster as dg

# Dagster's engine events are DEBUG; a shell user wants the assets' own progress and warnings.
LOG_CONFIG = {"loggers": {"console": {"config": {"log_level": os.environ.get("TORCHCI_LOG_LEVEL", "INFO")}}}}
# `--quiet`: Dagster's console says nothing, for its error events are a traceback per failed step and
# a line per step skipped after it, which the day's lines say in one line per failed step; the steps'
# own warnings are printed from the run's log once the day is done. The full log stays in the instance.
QUIET_LOG_CONFIG = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


# Written into a DAGSTER_HOME that `torchci run` creates, followed by the storage settings of the
# project's dagster.yaml (`sqlite_storage.storage_config`: Dagster's SQLite files and layout, a
# connection kept open per database, where Dagster's own opens one per read and write: ~2.5 of the
# ~8.5 CPU-s of a small day's run); the file says so instead of Dagster warning on every run.
NEW_INSTANCE_HEADER = """\
# Created by `torchci run`: runs, event logs and schedules are kept in SQLite files in this folder
# (Dagster's files; torchci_assets/sqlite_storage.py keeps their connections open).
# For the project's settings (run concurrency, pools) copy its dagster.yaml here; for PostgreSQL,
# dagster.postgres.yaml (docs/operations.md, "Beyond one machine").
telemetry:
  enabled: false
"""


def new_instance_yaml() -> str:
    """The dagster.yaml of a DAGSTER_HOME `torchci run` creates."""
    import yaml

    from torchci_assets.sqlite_storage import storage_config

    return NEW_INSTANCE_HEADER + yaml.safe_dump(storage_config({"env": "DAGSTER_HOME"}), sort_keys=False)


# What `torchci run` tags its runs with: where its process is, and the id of the run it executes.
# Dagster copies a run's tags to its re-executions (the UI's launchpad copies them to new runs too),
# host and pid included; the run id tag then names another run, so it tells the runs a `torchci run`
# process executes from runs that only inherited their tags.
HOST_TAG, PID_TAG, RUN_ID_TAG = "torchci/host", "torchci/pid", "torchci/run_id"


# Dagster's wrappers around the exception a step raised.
STEP_WRAPPERS = ("DagsterExecutionStepExecutionError", "DagsterUserCodeExecutionError")


# Exit status when every day ran but GitHub refused the credentials of a check that reads it (a 401,
# or a 403 that is no rate limit): the lists it reads stay as published for as long as nobody
# changes them, so a scheduler must not take the run for a success. An outage or a rate limit
# passes by itself: status 0, with the same closing line.
GITHUB_REFUSED_EXIT = 3


@dataclass(frozen=True)
class GitHubCheckFailure:
    """A check that could not read GitHub, as its metadata says (`error`, `fix`, `github_refused`:
    set by the DISABLED-issue loop's assets, which go on with the lists published last). `refused`
    is None when the check does not tell (the unstable list's, when its error was not GitHub's)."""

    day: str
    check: str
    error: str
    fix: str
    refused: bool | None


class UsageError(Exception):
    """Bad input from the command line or the environment: printed, exit status 2."""


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def executed_by_torchci_run(run: dg.DagsterRun) -> bool:
    """Whether a `torchci run` process executes `run` itself, rather than the run inheriting the
    tags of one that did (a re-execution from the UI runs in the daemon's or a worker's process).
    A run recorded before RUN_ID_TAG existed counts when it is no re-execution and no warm
    worker's run: a killed one would otherwise hold its pool slots forever."""
    from torchci_assets.warm_runs import WORKER_TAG

    if RUN_ID_TAG in run.tags:
        return run.tags[RUN_ID_TAG] == run.run_id
    return run.get_parent_run_id() is None and WORKER_TAG not in run.tags


def fail_dead_runs(instance: dg.DagsterInstance, host: str | None = None) -> list[str]:
    """Mark failed the runs an earlier `torchci run` on this host left started when it was killed.

    A process killed with SIGKILL cannot record the end of its run, so the instance would show
    it in progress forever, and its staging files would look owned by a live run and never be
    swept. Runs are tagged with the host and pid of the process executing them; a started run
    of this host executed by a `torchci run` whose process is gone is dead (a live re-execution
    of such a run carries the same tags: see `executed_by_torchci_run`). Its pool slots
    (`torchci_outputs`, ...) are freed too: held by a dead run, they would keep every later run's
    publishing steps waiting forever.
    Returns the run ids marked failed.
    """
    import dagster as dg

    host = host or socket.gethostname()
    statuses = [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]
    dead = []
    for run in instance.get_runs(dg.RunsFilter(statuses=statuses, tags={HOST_TAG: host})):
        pid = run.tags.get(PID_TAG, "")
        if pid.isdigit() and int(pid) != os.getpid() and executed_by_torchci_run(run) \
                and not _process_alive(int(pid)):
            instance.report_run_failed(run, f"the `torchci run` process (pid {pid} on {host}) is gone: killed")
            if instance.event_log_storage.supports_global_concurrency_limits:
                instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
            dead.append(run.run_id)
    return dead


def _day(text: str) -> str:
    return day(text).isoformat()


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="torchci run", description=__doc__.split("\n\n")[0],
                                epilog="Exit status: 0 when every day ran, 1 when a day failed, the range holds "
                                       "no archive day or S3 does not answer, 2 on bad usage or settings (S3 "
                                       "refusing the credentials included), "
                                       f"{GITHUB_REFUSED_EXIT} when every day ran but GitHub refused the credentials "
                                       "of the DISABLED-issue loop (the disabled lists stay as published).")
    p.add_argument("--from", dest="start", type=_day, help="first day to process (default: the archive's first)")
    p.add_argument("--to", dest="end", type=_day, help="last day to process (default: the archive's last)")
    p.add_argument("--select", metavar="SELECTION",
                   help="only these assets, in Dagster's asset selection syntax, e.g. 'key:test_times+' "
                        "(test_times and everything downstream), 'group:flakiness', '+smoke_tests', "
                        "'key:disabled_tests or key:slow_tests' (default: every asset)")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="print one line per day and per failed step (no traceback), then the day's warnings "
                        "(DRY RUN details included), not each asset's progress; every run's full log stays in "
                        "the Dagster UI")
    return p.parse_args(argv)


def summarize(lake, days: list[str]) -> list[tuple[str, int]]:
    """Rows per lake table over `days`, read from the Parquet footers (no data scan)."""
    return [(table, lake.rows_in(lake.files(table, days))) for table in lake.tables()]


def lake_repositories(lake, days: list[str], upstream_repo: str) -> tuple[Counter, Counter] | None:
    """(pushes and workflow runs per repository, pushes per (repository, ref)) of `days`, or None
    as soon as one of them is of `upstream_repo` (GitHub's names are case-insensitive): most runs
    stop at the first file, and only a lake of other repositories is read whole."""
    repos: Counter = Counter()
    refs: Counter = Counter()
    wanted = upstream_repo.lower()
    for table, columns in (("push", ["repo", "ref"]), ("workflow_run", ["repo"])):
        for path in lake.files(table, days):
            rows = lake.read_files([path], columns)
            if "repo" not in rows.column_names:  # a partition written without it says nothing
                continue
            held = [r for r in rows.column("repo").to_pylist() if r]
            if any(r.lower() == wanted for r in held):
                return None
            repos.update(held)
            if table == "push" and "ref" in rows.column_names:
                refs.update(zip(rows.column("repo").to_pylist(), rows.column("ref").to_pylist()))
    return repos, refs


def upstream_warning(lake, days: list[str], upstream_repo: str, source: str) -> str | None:
    """One line when the days hold pushes or workflow runs, none of `upstream_repo`: commit_health,
    pr_jobs, Dr. CI and the HUD read that repository's only, so a repository's own history read
    under the bundled config (pytorch/pytorch) would leave them empty with nothing saying why."""
    found = lake_repositories(lake, days, upstream_repo)
    if found is None or not found[0]:
        return None
    repos, refs = found
    top = repos.most_common(1)[0][0]
    pushed = [(ref, n) for (repo, ref), n in refs.items() if repo == top and (ref or "").startswith("refs/heads/")]
    branch = max(pushed, key=lambda p: p[1])[0].removeprefix("refs/heads/") if pushed else "main"
    held = ", ".join(f"{r} ({n:,})" for r, n in repos.most_common(3)) + (", ..." if len(repos) > 3 else "")
    return (f"torchci run: warning: the pushes and workflow runs of these days are of {held}, none of "
            f"upstream.repo {upstream_repo} (from {source}): commit_health, pr_jobs, Dr. CI and the HUD read only "
            f"upstream.repo's and stay empty. Point TORCHCI_CONFIG at a file saying `upstream: {{repo: {top}, "
            f"branches: [{branch}]}}` (the branch its commits land on) and run again (docs/ingest.md).")


def instance_for_runs() -> tuple[dg.DagsterInstance, str]:
    """The Dagster instance runs are recorded in, and a line saying where.

    With $DAGSTER_HOME set, its folder (made absolute, created if missing: Dagster refuses
    both a relative path and a missing folder); without it, an ephemeral instance.
    """
    import dagster as dg
    import sqlalchemy.exc

    home = os.environ.get("DAGSTER_HOME")
    if not home:
        return dg.DagsterInstance.ephemeral(), ("Runs are not recorded: DAGSTER_HOME is not set "
                                                "(set it to keep them for the Dagster UI).")
    home = os.path.abspath(os.path.expanduser(home))
    created = not os.path.exists(home)
    try:
        os.makedirs(home, exist_ok=True)
        if created:
            with open(os.path.join(home, "dagster.yaml"), "w") as f:
                f.write(new_instance_yaml())
    except OSError as exc:
        raise UsageError(f"DAGSTER_HOME={home} cannot be created: {exc.strerror or exc}") from None
    if not os.path.isdir(home):
        raise UsageError(f"DAGSTER_HOME={home} is not a folder")
    os.environ["DAGSTER_HOME"] = home
    retries = _ConnectionRetries(home)
    logging.getLogger().addFilter(retries)
    try:
        instance = dg.DagsterInstance.get()
    except OSError as exc:  # its storage folders or SQLite files it may not make or write
        raise UsageError(f"DAGSTER_HOME={home}: {exc.strerror or exc} ({exc.filename or home}); check that this "
                         "user may write there, or point DAGSTER_HOME at another folder") from None
    except Exception as exc:  # a PostgreSQL instance whose server is out of reach: dagster-postgres's own error
        cause = exc.__cause__ if isinstance(exc.__cause__, sqlalchemy.exc.OperationalError) else exc
        if not (isinstance(cause, sqlalchemy.exc.OperationalError)
                and type(cause.orig).__module__.startswith("psycopg")):  # SQLite's errors keep their traceback
            raise
        reason = str(cause.orig or cause).strip().splitlines()[0]
        raise InstanceUnreachable(f"the Dagster instance of {home}/dagster.yaml cannot reach its database "
                                  f"({reason}); check its DAGSTER_PG_* settings and that the server is up") from None
    finally:
        logging.getLogger().removeFilter(retries)
    return instance, (f"Runs are recorded in the Dagster instance at {home}" + (" (created now)." if created else "."))


class _ConnectionRetries(logging.Filter):
    """dagster-postgres retries a server out of reach for about 15 s, logging each try with the whole
    psycopg error (four lines) on the root logger; the shell user gets one line saying what is waited for."""

    MARK = "Retrying failed database connection"

    def __init__(self, home: str):
        super().__init__()
        self.home, self.said = home, False

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith(self.MARK):
            return True
        if not self.said:
            print(f"torchci run: the database of the Dagster instance of {self.home}/dagster.yaml does not answer; "
                  "retrying for a few seconds", file=sys.stderr)
            self.said = True
        return False


class InstanceUnreachable(RuntimeError):
    """The instance's database cannot be reached: nothing can be run or recorded."""


def selected_keys(defs: dg.Definitions, selection: str | None) -> list[dg.AssetKey] | None:
    """The asset keys `selection` picks, grown to whole multi-assets that only run whole; None for all."""
    import dagster as dg

    if not selection:
        return None
    graph = defs.resolve_asset_graph()
    try:
        keys = dg.AssetSelection.from_string(selection).resolve(graph)
    except (dg.DagsterError, ValueError) as exc:  # Dagster's selection syntax errors
        raise UsageError(f"--select {selection!r}: {exc}") from None
    keys = {k for k in keys if graph.get(k).is_materializable}
    if not keys:
        raise UsageError(f"--select {selection!r} matches no asset. Asset keys: "
                         + ", ".join(sorted(k.to_user_string() for k in graph.materializable_asset_keys)))
    return sorted({member for k in keys for member in graph.get(k).execution_set_asset_keys})


def failure_line(error) -> str:
    """What a failed step's own code raised, on one line: Dagster wraps it in an error that says only
    'Error occurred while executing op', and a configuration error's message is the one to read."""
    while error.cause is not None and error.cls_name in STEP_WRAPPERS:
        error = error.cause
    first = error.message.strip().split("\n", 1)[0]
    marker = f"{error.cls_name}: "
    if marker in first:  # "package.module.ConfigError: text" -> "ConfigError: text"
        first = marker + first.split(marker, 1)[1]
    return first


def _no_days_message(archive, every_day: list[str], start: str | None, end: str | None) -> str:
    """Why there is nothing to run, and what the archive has instead."""
    if not every_day:
        return (f"torchci run: no archive days found under {archive.display()}. Generate a sample with "
                "`torchci simulate --out DIR`, or set TORCHCI_ARCHIVE_URI.")
    wanted = f"{start}..{end}" if start and end else f"from {start}" if start else f"up to {end}"
    return (f"torchci run: no archive day {wanted}: {archive.display()} has {len(every_day)} day(s), "
            f"{every_day[0]}..{every_day[-1]}")


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    collect_less()  # before Dagster and the code location load: what they make lives as long as the process
    if not preflight.report("torchci run"):
        return 2
    if status := preflight.report_stores("torchci run"):  # before any run is created
        return status
    from resources import Store
    from resources.uris import resolved_uri
    from torchci_assets.archive_days import archive_days

    archive = Store(resolved_uri("TORCHCI_ARCHIVE_URI"))
    try:
        every_day = archive_days(archive)  # before Dagster loads: that there is nothing to run is said at once
    except OSError as exc:
        print(_unlisted(exc), file=sys.stderr)
        return 1
    days = [d for d in every_day if (args.start is None or d >= args.start) and (args.end is None or d <= args.end)]
    if not days:
        print(_no_days_message(archive, every_day, args.start, args.end), file=sys.stderr)
        return 1
    import dagster as dg  # after the preflight: a bad setting is said before Dagster loads
    import sqlalchemy.exc

    warnings.filterwarnings("ignore", category=dg.BetaWarning)  # Dagster's own, not actionable here
    try:
        return _run(args, archive, days)
    except UsageError as exc:
        print(f"torchci run: {exc}", file=sys.stderr)
        return 2
    except InstanceUnreachable as exc:
        print(f"torchci run: {exc}", file=sys.stderr)
        return 1
    except sqlalchemy.exc.OperationalError as exc:
        if "database is locked" not in str(exc):
            raise
        print(f"torchci run: the Dagster instance at {os.environ.get('DAGSTER_HOME')} is locked: another process "
              "(a `dagster dev`, another `torchci run`) is writing to its SQLite files; wait for it or stop it, then "
              "run again (an instance on PostgreSQL takes several writers at once: docs/operations.md)", file=sys.stderr)
        return 1
    except OSError as exc:  # an archive or lake that cannot be listed: an s3:// bucket out of reach, say
        print(_unlisted(exc), file=sys.stderr)
        return 1


def _unlisted(exc: OSError) -> str:
    return (f"torchci run: {exc}; check TORCHCI_ARCHIVE_URI and TORCHCI_LAKE_URI (for s3://, the credentials, "
            "AWS_REGION and TORCHCI_S3_ENDPOINT)")


def _run(args: argparse.Namespace, archive, days: list[str]) -> int:
    from resources import Lake, Store
    from resources.uris import resolved_uri

    try:
        from torchci_assets.day_runs import day_tags
        from torchci_assets.definitions import defs
        from torchci_assets.partitions import FIRST_DAY_VAR, daily_partitions
    except FirstDayError as exc:  # a bad TORCHCI_FIRST_DAY fails the definitions as they load
        raise UsageError(str(exc)) from None
    keep_loaded()
    keys = selected_keys(defs, args.select)
    lake = Lake(Store(resolved_uri("TORCHCI_LAKE_URI")))
    first = daily_partitions.start.date().isoformat()
    before = [d for d in days if d < first]
    days = [d for d in days if d >= first]
    if before:
        print(f"torchci run: skipping {len(before)} archive day(s) {before[0]}..{before[-1]}, before the first "
              f"daily partition {first} (set {FIRST_DAY_VAR} earlier to include them)", file=sys.stderr)
    if not days:
        return 1
    instance, where = instance_for_runs()
    what = "every asset" if keys is None else f"{len(keys)} asset(s) selected by {args.select!r}"
    print(f"torchci run: {what}, {len(days)} day(s) {days[0]}..{days[-1]} from {archive.display()} "
          f"into {lake.store.display()}")
    print(where)
    for run_id in fail_dead_runs(instance):
        print(f"  run {run_id} of a killed `torchci run` marked failed (its staging files are now swept)")
    tags = {"torchci/source": "torchci run", HOST_TAG: socket.gethostname(), PID_TAG: str(os.getpid())}
    failed, github = [], []
    for i, day in enumerate(days, 1):
        ok, not_read = _run_day(defs, instance, day, f"[{i}/{len(days)}]",
                                day_tags(archive, day, keys is None, tags), keys, args.quiet)
        failed += [] if ok else [day]
        github += not_read
    _print_summary(lake, days)
    relay = load_config()
    warning = upstream_warning(lake, days, relay.upstream_repo, relay.source)
    if warning:
        print(warning, file=sys.stderr)
    if failed:
        print(f"Failed days: {', '.join(failed)} (re-run with `torchci run --from DAY --to DAY`)", file=sys.stderr)
    if github:
        print(github_line(github), file=sys.stderr)
    return 1 if failed else GITHUB_REFUSED_EXIT if any(f.refused is True for f in github) else 0


def _run_day(defs, instance, day: str, counter: str, tags: dict, keys,
             quiet: bool) -> tuple[bool, list[GitHubCheckFailure]]:
    """Materialize one day in process and print its line (failed checks, quiet assets, failed steps);
    whether it succeeded, and its checks that could not read GitHub."""
    from dagster._core.utils import make_new_run_id

    from torchci_assets.day_runs import execute_day

    t0 = time.monotonic()
    run_id = make_new_run_id()
    result = execute_day(defs, instance, day, {**tags, RUN_ID_TAG: run_id}, keys,
                         QUIET_LOG_CONFIG if quiet else LOG_CONFIG, run_id)
    failed_checks = [e.asset_check_evaluation_data for e in result.all_events
                     if e.event_type_value == "ASSET_CHECK_EVALUATION" and not e.asset_check_evaluation_data.passed]
    unchanged = sorted(e.asset_key.to_user_string() for e in result.get_asset_materialization_events()
                       if "nothing_new" in e.materialization.metadata)
    status = "ok" if result.success else "FAILED"
    print(f"  {counter} {day}: {status} in {time.monotonic() - t0:.1f}s"
          + (f", {len(failed_checks)} check(s) failed: "
             + ", ".join(f"{c.asset_key.to_user_string()}:{c.check_name}" for c in failed_checks)
             if failed_checks else "")
          + (f"; nothing new to publish: {', '.join(unchanged)} (nothing replaced)" if unchanged else ""))
    if not result.success:
        for event in result.all_events:
            if event.is_step_failure:
                print(f"      {event.step_key}: {failure_line(event.step_failure_data.error)}")
    if quiet:
        _print_quiet_log(instance, run_id, not result.success)
    return result.success, github_failures(day, failed_checks)


def _print_quiet_log(instance: dg.DagsterInstance, run_id: str, failed: bool) -> None:
    """Under `--quiet`, what the day's run logged that its lines do not say: the steps not run after a
    failure, where the tracebacks are, and the steps' own warnings and errors (on stderr)."""
    warnings, not_run = logged_lines(instance, run_id)
    if not_run:
        print(f"      not run, as a step they need failed: {', '.join(not_run)}")
    if failed:
        print(f"      {full_log_line(instance, run_id)}")
    sys.stdout.flush()
    for line in warnings:
        print(line, file=sys.stderr)


def full_log_line(instance: dg.DagsterInstance, run_id: str) -> str:
    """Under `--quiet`, where a failed day's tracebacks are: its run's log, when the instance keeps it."""
    if instance.is_ephemeral:
        return "tracebacks: run the day again without --quiet (DAGSTER_HOME is not set: its run is not recorded)"
    return f"the full log, tracebacks included: run {run_id} in the Dagster UI"


def logged_lines(instance: dg.DagsterInstance, run_id: str) -> tuple[list[str], list[str]]:
    """(the warnings and errors a run's steps logged, a line each; the steps Dagster did not run after
    a failure). Dagster's events (a failed step: its traceback) are left out: the day's lines say them.

    A step not run is one the run planned that has no event of its own (Dagster starts or skips every
    other), in a run where a step failed; what Dagster logs of it ("Dependencies for step ... Not
    executing.") is left out with it, read by where it is, not by its words, which Dagster may change."""
    entries = instance.all_logs(run_id)
    not_run = []
    if any(e.dagster_event is not None and e.dagster_event.is_step_failure for e in entries):
        run = instance.get_run_by_id(run_id)
        plan = instance.get_execution_plan_snapshot(run.execution_plan_snapshot_id)
        had_events = {e.step_key for e in entries if e.dagster_event is not None and e.dagster_event.is_step_event}
        not_run = [key for key in plan.step_keys_to_execute if key not in had_events]  # in the order they'd run
    warnings = [f"      {e.step_key or 'run'}: {logging.getLevelName(e.level).lower()}: {e.user_message}"
                for e in entries if e.dagster_event is None and logging.WARNING <= e.level < logging.CRITICAL
                and e.step_key not in not_run]
    return warnings, not_run


def github_failures(day: str, failed_checks: list) -> list[GitHubCheckFailure]:
    """Of a day's failed checks (Dagster's evaluations), those that could not read GitHub: the ones
    whose metadata says what to fix."""
    out = []
    for c in failed_checks:
        meta = {k: v.value for k, v in c.metadata.items()}
        if meta.get("fix"):
            check = f"{c.asset_key.to_user_string()}:{c.check_name}"
            refused = meta.get("github_refused")
            out.append(GitHubCheckFailure(day, check, str(meta.get("error", "")), str(meta["fix"]),
                                          refused if isinstance(refused, bool) else None))
    return out


def github_line(failures: list[GitHubCheckFailure]) -> str:
    """The run's last line when checks could not read GitHub: which, on which days, GitHub's answer
    and what to fix (a refusal's first: it does not pass by itself, and the exit status says so)."""
    first = max(failures, key=lambda f: (f.refused is True, f.refused is not None))  # stable: the earliest
    checks = sorted({f.check for f in failures})
    days = sorted({f.day for f in failures})
    when = days[0] if len(days) == 1 else f"{len(days)} days, {days[0]}..{days[-1]}"
    return (f"torchci run: {len(checks)} check(s) reading GitHub failed on {when}: {', '.join(checks)} "
            f"({first.error}); the disabled lists published last stay. To fix: {first.fix}"
            + (f" (exit status {GITHUB_REFUSED_EXIT})" if first.refused else ""))


def _print_summary(lake, days: list[str]) -> None:
    """What the run left: rows per table, rejects, and where the lake, the outputs and the HUD are."""
    from resources import Store
    from resources.uris import resolved_uri

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
