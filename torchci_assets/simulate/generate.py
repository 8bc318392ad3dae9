"""Write archive days (webhooks, test reports, test-runs, ci-results) and the ground truth."""

from __future__ import annotations

import datetime as dt
import os
import random
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import orjson

from . import GROUND_TRUTH
from .backends import backends, nightly_records, push_records
from .disabled import lifecycle_truth
from .junit import job_cases, render_xml, test_run_rows
from .logs import log_arrival, log_kind, write_job_log
from .model import DAY_MS, Job, day_start_ms
from .payloads import HTML, envelope, workflow_job_payload, workflow_run_payload
from .planted import UNSTABLE_AUTHOR, UnstableJob, day_number, identity
from .world import Activity, Options, World, commit_sha
from .writer import RollingJsonl, gzip_bytes, write_atomic

SECTIONS = ("webhooks", "test-reports", "test-runs", "ci-results", "logs")


@dataclass
class DayStats:
    day: str
    deliveries: int = 0
    webhook_files: int = 0
    webhook_json_bytes: int = 0
    reports: int = 0
    report_bytes: int = 0
    test_run_rows: int = 0
    ci_results: int = 0
    logs: int = 0
    disk_bytes: int = 0
    seconds: float = 0.0
    by_event: dict = field(default_factory=dict)


def _in_day(t: int, lo: int, act: Activity) -> bool:
    """Received on this day, and within the two-day horizon every activity respects."""
    return lo <= t < lo + DAY_MS and t < day_start_ms(act.day) + 2 * DAY_MS


def generate_day(world: World, out: Path, day: dt.date, truth: dict, first_day: dt.date) -> DayStats:
    """Writes one day; `first_day` bounds the quirk counts to what the archive holds (a
    redelivery whose first copy came before the archive starts is no duplicate in it)."""
    t_start = time.perf_counter()
    stats = DayStats(day.isoformat())
    folder = f"day={day.isoformat()}"
    for section in SECTIONS:
        shutil.rmtree(out / section / folder, ignore_errors=True)
    lo = day_start_ms(day)
    acts = world.activities(day - dt.timedelta(days=1)) + world.activities(day)
    _write_webhooks(world, out / "webhooks" / folder, day, acts, truth, first_day, stats)
    if world.opts.test_reports:
        _write_test_reports(world, out, folder, lo, acts, stats)
    _write_logs(world, out / "logs" / folder, day, lo, acts, truth, stats)
    _write_ci_results(world, out / "ci-results" / folder, day, lo, acts, stats)
    _record_truth(lo, acts, truth)
    stats.seconds = round(time.perf_counter() - t_start, 2)
    return stats


def _write_webhooks(world: World, where: Path, day: dt.date, acts: list, truth: dict, first_day: dt.date,
                    stats: DayStats) -> None:
    """Every delivery received today, in arrival order, and the quirks they carry."""
    lo = day_start_ms(day)
    todays = [d for a in acts for d in a.deliveries if _in_day(d.received, lo, a)]
    for i, d in enumerate(todays):
        d.seq = i
    todays.sort(key=lambda d: (d.received, d.seq))
    hooks = RollingJsonl(where, "hooks", level=1)
    by_event: dict[str, int] = {}
    dups = 0
    # The collector dies mid-write now and then: the archive keeps a cut line, and the
    # delivery, never acknowledged, comes again right after it (written in full).
    torn_rng = random.Random(f"{world.opts.seed}|torn|{day.isoformat()}")
    torn = set(torn_rng.sample(range(len(todays)), min(world.opts.torn_lines_per_day, len(todays))))
    for i, d in enumerate(todays):
        if d.event == "workflow_job":
            payload = workflow_job_payload(d.obj, d.action, d.old)
        elif d.event == "workflow_run":
            payload = workflow_run_payload(d.obj[0], d.action, d.obj[1])
        else:
            payload = d.obj
        hour = (d.received - lo) // 3_600_000
        line = envelope(d.event, d.delivery_id, d.received, payload)
        if i in torn:
            hooks.write(f"{day.strftime('%Y%m%d')}T{hour:02d}", line[: len(line) // 2] + b"\n")
        hooks.write(f"{day.strftime('%Y%m%d')}T{hour:02d}", line)
        by_event[d.event] = by_event.get(d.event, 0) + 1
        dups += d.original >= day_start_ms(first_day)
    hooks.close()
    stats.deliveries, stats.webhook_files = hooks.lines - len(torn), len(hooks.files)
    stats.webhook_json_bytes, stats.by_event = hooks.raw_bytes, by_event
    stats.disk_bytes += hooks.gz_bytes
    q = truth["quirks"]
    q["deliveries"] += len(todays)
    q["torn_lines"] += len(torn)
    q["duplicate_deliveries"] += dups
    q["old_version_payloads"] += sum(1 for d in todays if d.old)
    q["out_of_order_jobs"] += sum(1 for a in acts for _, t in a.out_of_order_jobs if _in_day(t, lo, a))


def _write_test_reports(world: World, out: Path, folder: str, lo: int, acts: list, stats: DayStats) -> None:
    """Test reports and test-runs rows of the jobs that completed today."""
    rows_out = RollingJsonl(out / "test-runs" / folder, "test-runs", level=3)
    for a in acts:
        for job in a.jobs:
            if job.kind == "test" and job.conclusion != "skipped" and _in_day(job.completed, lo, a):
                files = _job_results(world, out / "test-reports" / folder, job, rows_out, stats)
                if files:
                    _write_files(files)
    rows_out.close()
    stats.test_run_rows = rows_out.lines
    stats.disk_bytes += rows_out.gz_bytes


def _write_logs(world: World, where: Path, day: dt.date, lo: int, acts: list, truth: dict, stats: DayStats) -> None:
    """Raw logs of the failed jobs whose log was uploaded today."""
    for a in acts:
        for job in a.jobs:
            if log_kind(job) and _in_day(log_arrival(job, world.seed), lo, a):
                rec = write_job_log(where, job, world.seed)
                truth["job_logs"].append({**rec, "log_day": day.isoformat()})
                stats.logs += 1
                stats.disk_bytes += (where / rec["path"]).stat().st_size


def _write_ci_results(world: World, where: Path, day: dt.date, lo: int, acts: list, stats: DayStats) -> None:
    """Downstream backends' callbacks about today's and yesterday's main pushes, and a nightly
    self-report a day about the day's first main commit."""
    results = []
    for b in backends(world.opts.backends):
        for a in acts:
            for c, did, pushed in a.pushes:
                records = push_records(world.seed, b, c, did, pushed)
                if c.index % world.opts.commits_per_day == 0:
                    records += nightly_records(world.seed, b, c)
                results += [(t, rec) for t, rec in records if _in_day(t, lo, a)]
    results.sort(key=lambda x: x[0])
    ci = RollingJsonl(where, "relay", level=3)
    for t, rec in results:
        ci.write(f"{day.strftime('%Y%m%d')}T{(t - lo) // 3_600_000:02d}", orjson.dumps(rec) + b"\n")
    ci.close()
    stats.ci_results = ci.lines
    stats.disk_bytes += ci.gz_bytes


def _record_truth(lo: int, acts: list, truth: dict) -> None:
    """Planted events that happened today; a PR's planted failure counts wherever its runs show."""
    for a in acts:
        for kind, t, rec in a.truth:
            if kind == "pr_caused_failures":
                if rec not in truth[kind] and any(_in_day(d.received, lo, a) for d in a.deliveries):
                    truth[kind].append(rec)
            elif _in_day(t, lo, a):
                truth[kind].append(rec)


def _write_files(files: list[tuple[str, str, bytes]]) -> None:
    os.makedirs(os.path.dirname(files[0][0]))
    for folder, name, data in files:
        os.mkdir(folder)
        with open(os.path.join(folder, name), "wb") as fh:
            fh.write(data)


def _job_results(world: World, root: Path, job: Job, rows_out: RollingJsonl,
                 stats: DayStats) -> list[tuple[str, str, bytes]]:
    """Writes a test-runs job's rows; returns an XML job's report files (folder, name, bytes)."""
    cases = job_cases(job, world.seed)
    if job.cfg.upload == "test-runs":
        for path, module, cs in cases:
            for row in test_run_rows(module, path, cs, job):
                rows_out.write("all", orjson.dumps(row) + b"\n")
        return []
    rng = random.Random(f"{world.seed}|upload|{job.id}")
    gz = rng.random() < 0.3
    run = job.run
    base = os.path.join(root, str(run.run_id), str(run.attempt), str(job.id), "test", "test-reports",
                        "python-pytest")
    files = []
    t = job.started + 5 * 60_000
    for path, module, cs in cases:
        data = render_xml(path, cs, job, job.cfg.dialect, t)
        t += int(sum(c.time for c in cs) * 1000)
        folder = os.path.join(base, module)
        name = f"{module}-{rng.getrandbits(64):016x}.xml"
        if gz:
            data = gzip_bytes(data)
            name += ".gz"
        files.append((folder, name, data))
        stats.reports += 1
        stats.report_bytes += len(data)
        stats.disk_bytes += len(data)
    return files


def unstable_issue(u: UnstableJob) -> dict:
    """A planted UNSTABLE mark as the open issue GitHub's REST API would return (the fields PyTorch's
    update_disabled_issues.py reads), with the jobs it marks spelled out for a scorer."""
    return {"number": u.number, "title": f"UNSTABLE {u.job}", "state": "open", "html_url": f"{HTML}/issues/{u.number}",
            "user": {"login": UNSTABLE_AUTHOR}, "workflow": u.workflow, "build_env": u.build_env,
            "test_config": u.test_config}


def _ground_truth_base(world: World, days: list[dt.date]) -> dict:
    o = world.opts
    return {
        "generator": {"seed": o.seed, "days": [d.isoformat() for d in days], "options": asdict(o)},
        "configs": [{"workflow": c.workflow, "build_env": c.build_env, "test_config": c.test_config,
                     "num_shards": c.num_shards, "runner": c.runner, "platform": c.platform,
                     "device": c.device, "report_dialect": c.dialect, "upload": c.upload}
                    for c in world.configs],
        "test_files": [{"file": f.path, "group": f.group, "seconds_linux": round(f.seconds, 3),
                        "tests": len(f.tests)} for f in world.suite],
        "flaky_tests": [], "platform_failures": [], "broken_tests": [], "pr_caused_failures": [],
        "infra_failed_jobs": [], "reattempted_runs": [], "job_logs": [], "time_regressions": [],
        "main_commits": [], "pr_failed_jobs": [],
        "unstable_issues": [unstable_issue(u) for u in world.unstable],
        "quirks": {"deliveries": 0, "duplicate_deliveries": 0, "out_of_order_jobs": 0,
                   "old_version_payloads": 0, "torn_lines": 0},
        "backends": [{"repo": b.repo, "profile": b.profile.name, "current_level": b.profile.current_level,
                      "expected_level": b.profile.expected_level, "success_rate": b.profile.success,
                      "queue_median_s": b.profile.queue_median_s,
                      "never_complete_rate": b.profile.never_complete, "timed_out_rate": b.profile.timed_out,
                      "no_tests_rate": b.profile.no_tests, "burst_rate": b.profile.burst}
                     for b in backends(o.backends)],
    }


def _planted_tests(world: World, truth: dict, days: list[dt.date]) -> None:
    for r in world.rules:
        t = r.template
        cfgs = [c for c in world.configs if (r.platforms is None or c.platform in r.platforms)
                and any(f.path == t.file for s in world.shards[c] for f in s)]
        names = sorted({t.concrete(c.device) for c in cfgs})
        rec = identity(t, *(names[0] if names else ("", "")))
        rec.update({"rate": r.rate, "platforms": sorted(r.platforms) if r.platforms else "all",
                    "variants": [{"classname": c, "name": n} for c, n in names],
                    "build_envs": sorted({c.build_env for c in cfgs}), "message": r.message})
        truth["flaky_tests" if r.kind == "flaky" else "platform_failures"].append(rec)
    if world.life:
        truth["disabled_lifecycle"] = lifecycle_truth(world.life)
    # every breakage whose range overlaps the archive, including one begun the day before it
    n = world.opts.commits_per_day
    lo, hi = day_number(days[0]) * n, (day_number(days[-1]) + 1) * n
    seen = []
    for d in days:
        for b in world.breakages(d):
            if b.fixed > lo and b.first < hi and b not in seen:
                seen.append(b)
                for t in b.templates:
                    truth["broken_tests"].append({
                        **identity(t), "first_commit": commit_sha(world.seed, b.first),
                        "fixed_commit": commit_sha(world.seed, b.fixed), "first_commit_index": b.first,
                        "fixed_commit_index": b.fixed})
    # every planted time regression whose range overlaps the archive, with the configs it slows
    # and their nominal per-run time of the file before and during it
    regressions = []
    for d in days:
        for r in world.time_regressions(d):
            if r.fixed > lo and r.first < hi and r not in regressions:
                regressions.append(r)
    seconds = {f.path: f.seconds for f in world.suite}
    for r in regressions:
        cfgs = [c for c in world.configs if (r.platforms is None or c.platform in r.platforms)
                and any(f.path == r.file for s in world.shards[c] for f in s)]
        truth["time_regressions"].append({
            "file": r.file, "factor": r.factor, "platforms": sorted(r.platforms) if r.platforms else "all",
            "first_commit": commit_sha(world.seed, r.first), "fixed_commit": commit_sha(world.seed, r.fixed),
            "first_commit_index": r.first, "fixed_commit_index": r.fixed,
            "configs": [{"build_env": c.build_env, "test_config": c.test_config,
                         "before_s": round(seconds[r.file] * c.speed, 3),
                         "after_s": round(seconds[r.file] * c.speed * r.factor, 3)} for c in cfgs]})


def generate_archive(out: Path, days: list[dt.date], opts: Options,
                     log: Callable[[str], None] = print) -> dict:
    world = World(opts)
    out.mkdir(parents=True, exist_ok=True)
    truth = _ground_truth_base(world, days)
    _planted_tests(world, truth, days)
    totals = DayStats("total")
    for day in days:
        s = generate_day(world, out, day, truth, days[0])
        kinds = ", ".join(f"{n:,} {e}" for e, n in sorted(s.by_event.items()))
        log(f"{s.day}: {s.deliveries:,} webhook deliveries in {s.webhook_files} files "
            f"({s.webhook_json_bytes / 1e6:.1f} MB JSON: {kinds}), {s.reports:,} test reports "
            f"({s.report_bytes / 1e6:.1f} MB), {s.test_run_rows:,} test-run rows, "
            f"{s.ci_results:,} ci-results, {s.logs:,} job logs; {s.disk_bytes / 1e6:.1f} MB on disk in {s.seconds:.1f} s")
        for k in ("deliveries", "webhook_files", "webhook_json_bytes", "reports", "report_bytes",
                  "test_run_rows", "ci_results", "disk_bytes", "seconds"):
            setattr(totals, k, getattr(totals, k) + getattr(s, k))
    write_atomic(out / GROUND_TRUTH, orjson.dumps(truth, option=orjson.OPT_INDENT_2) + b"\n")
    log(f"total: {len(days)} days, {totals.deliveries:,} deliveries, {totals.reports:,} test reports, "
        f"{totals.test_run_rows:,} test-run rows, {totals.ci_results:,} ci-results, "
        f"{totals.disk_bytes / 1e6:.1f} MB on disk, {totals.seconds:.1f} s -> {out}")
    return {"days": [d.isoformat() for d in days], "deliveries": totals.deliveries, "reports": totals.reports,
            "test_run_rows": totals.test_run_rows, "ci_results": totals.ci_results,
            "disk_bytes": totals.disk_bytes}
