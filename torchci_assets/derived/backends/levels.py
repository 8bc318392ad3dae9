"""Downstream backend health and the relay level each backend has earned.

Health (`backend_health`, one row per repo and window) is measured over windows ending on
day D, read from the `ci_result` and `ci_callback_minutes` partitions of those days only.
A job seen on several days (in progress on one, completed the next) is merged to its
highest state, then judged as of the end of D (or now, while D is not over). A completed job is
judged with the same rule as ingest: one completed more than 6 h after its start is an
infrastructure failure, whatever its conclusion. A job that never completed is timed out as the
relay's sweeper times it out (`cleanup_handler.py`, which reports it to the HUD as completed
`timed_out`): once `zombie_timeout_seconds` of the config (6 h by default) passed since its first
callback reached the receiver, it is a timeout and an infrastructure failure; before that it is
pending, left out of every figure until a later window judges it. A `completed` callback arriving
after the timeout wins: the job is then judged as any completed one. A job's start is the
earliest its callbacks reported, else the relay's measure (`completed_at - execution_time`, see
`ci_results.started_at_sql`).

Job measures are about what the relay dispatched: nightly and periodic self-reports (no
dispatch, no relay timings, a commit time of nothing) stay in `ci_result` but are left out of
them; they still count towards the callback rate, which limits every callback.

Measures, per repo and window:
- jobs: judged jobs (completed, or timed out without completing); completed_jobs: those that
  completed; timeouts: those completed `timed_out` and those timed out without completing; lost:
  the latter alone;
- success_rate: jobs that succeeded within 6 h / jobs;
- infra_availability: share of jobs not lost to infrastructure; test_failure_rate likewise;
- queue_p50_s / queue_p90_s: the relay-measured queue time of the jobs;
- commit_time_p95_s: per delivery (one upstream commit relayed), the time from its first
  job entering the queue to its last job completing; a job that never completed counts as
  completing when it timed out (it never did, and that is the least it cost). Deliveries with
  a pending job are left out;
- callback_peak_per_minute: the most callbacks the repo sent in one minute.

A repository is one whatever the letter case of its name: GitHub's names are case-insensitive
and the OIDC `repository` claim follows a rename, so one backend can report under two spellings
in a window. Health is keyed by the lower-cased name and shown under the allowlist's spelling
when the repo is listed, else the spelling seen last.

Levels (`assess_backends`): L1 has no criteria; L2 needs every L2 criterion over the L2
window; L3 every L2 and L3 criterion (the L3 thresholds apply to the same window); L4 every
L3 criterion, the L4 success rate over the L4 window, and the repo in `maintainer_approved`.
Without approval a backend that meets the L4 measures is capped at L3 and told why. A
missing measure (no judged jobs) fails its criterion, so the eligible level needs evidence.

The recommendation asks more of a demotion than of an eligible level. It promotes one level at
a time from L2 up, and demotes at once, but only as far as measured failures take it: a
criterion with no data never demotes, because a backend nothing was dispatched to, or one whose
results stopped coming (an outage on its side or ours, or a week of nightly self-reports only),
looks the same as a healthy backend nobody asked anything of. An L1 backend is never promoted:
the relay ignores callbacks below L2 (answered `ignored`, not kept, as upstream does), so there is nothing to measure it on,
and listing it at L2 is a maintainer's decision. A repo that reports results but is not in the
allowlist is reported with current level none and no recommendation, because adding a repository
to the relay is a maintainer's decision too.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import duckdb
import pyarrow as pa

from resources.lake import Lake, connect
from resources.sql import Columns, SqlFiles, compose, relation
from resources.storage import Store
from torchci_assets.config import LEVELS, ZOMBIE_TIMEOUT_S, AllowlistEntry, TorchciConfig, dump_allowlist
from torchci_assets.ingest.ci_results import (
    CALLBACK_MINUTES_SCHEMA,
    CI_RESULT_SCHEMA,
    SELF_REPORT_EVENTS,
    define_callback_macros,
    judged_as_of_ms,
    judgement,
)
from torchci_assets.partitions import days_ending

HEALTH_SCHEMA = pa.schema([
    ("repo", pa.string()), ("window_days", pa.int32()),
    ("jobs", pa.int64()), ("completed_jobs", pa.int64()), ("successes", pa.int64()),
    ("test_failures", pa.int64()), ("infra_failures", pa.int64()), ("timeouts", pa.int64()),
    ("lost", pa.int64()), ("pending", pa.int64()),
    ("success_rate", pa.float64()), ("infra_availability", pa.float64()), ("test_failure_rate", pa.float64()),
    ("queue_p50_s", pa.float64()), ("queue_p90_s", pa.float64()),
    ("commits", pa.int64()), ("commit_time_p95_s", pa.float64()),
    ("callbacks", pa.int64()), ("callback_peak_per_minute", pa.int64()),
])

SQL = SqlFiles(__file__)

LEVELS_SCHEMA = pa.schema([
    ("repo", pa.string()), ("in_allowlist", pa.bool_()), ("current_level", pa.string()),
    ("eligible_level", pa.string()), ("recommended_level", pa.string()), ("change", pa.string()),
    ("device", pa.string()), ("unmet_criteria", pa.list_(pa.string())), ("reasons", pa.list_(pa.string())),
])


def health_windows(config: TorchciConfig) -> tuple[int, ...]:
    """The window lengths the criteria need: the L2/L3 window and the L4 window."""
    return tuple(sorted({config.thresholds.L2.window_days, config.thresholds.L4.window_days}))


_AS_IS = "CREATE TEMP VIEW {{view}} AS SELECT * FROM {{files}}"
_WITH_ADDED = "CREATE TEMP VIEW {{view}} AS SELECT *, {{added}} FROM {{files}}"


def _register(con: duckdb.DuckDBPyConnection, lake: Lake, table: str, days: list[str], schema: pa.Schema) -> None:
    """The table's partitions for `days` as a view; an empty one when none was materialized.

    Partitions written before a column was added lack it: the view has it as NULL.
    """
    if not lake.register(con, table, days, name=f"{table}_files"):
        empty = pa.Table.from_pylist([], schema=schema.append(pa.field("day", pa.string())))
        con.register(table, empty)
        return
    have = {row[0] for row in con.execute(compose("DESCRIBE {{files}}", files=f"{table}_files")).fetchall()}
    added = Columns({f.name: "VARCHAR" for f in schema if f.name not in have})
    con.execute(compose(_WITH_ADDED if added else _AS_IS, view=table, files=f"{table}_files", added=added))


def compute_health(lake: Lake, day: str, windows: tuple[int, ...], now_ms: int | None = None,
                   zombie_timeout_s: int = ZOMBIE_TIMEOUT_S) -> pa.Table:
    """One `backend_health` row per repo and window ending on `day` (see the module docstring);
    jobs are judged at the end of `day`, or at `now_ms` (default: now) if that is earlier, and
    those that never completed time out after `zombie_timeout_s`, the relay's zombie timeout."""
    firsts = {w: days_ending(day, w)[0] for w in windows}
    con = connect()
    try:
        days = days_ending(day, max(windows))
        _register(con, lake, "ci_result", days, CI_RESULT_SCHEMA)
        _register(con, lake, "ci_callback_minutes", days, CALLBACK_MINUTES_SCHEMA)
        define_callback_macros(con)
        values = {**judgement(judged_as_of_ms(day, now_ms)), "zombie_timeout_s": int(zombie_timeout_s),
                  "window_days": list(firsts),
                  "first_days": [dt.date.fromisoformat(f) for f in firsts.values()],
                  "self_report_events": list(SELF_REPORT_EVENTS)}
        return relation(con, SQL["backend_health"], values).to_arrow_table().cast(HEALTH_SCHEMA)
    finally:
        con.close()


# ---- levels ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Criterion:
    level: str
    name: str  # the threshold's name in the config (or `maintainer_approved`)
    metric: str  # the backend_health column measured
    window_days: int
    value: Any
    threshold: Any
    op: str  # ">=", "<=" or "=="
    met: bool

    def describe(self) -> str:
        if self.metric == "maintainer_approved":
            return f"{self.level} {self.name}: the repo is not in maintainer_approved"
        shown = "no data" if self.value is None else _fmt(self.value)
        return (f"{self.level} {self.name}: {self.metric} over {self.window_days} days is {shown}, "
                f"needs {self.op} {_fmt(self.threshold)}")


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() else f"{v:.4g}"
    return str(v)


def _criterion(level: str, name: str, metric: str, health: dict, window: int, threshold: Any,
               op: str) -> Criterion:
    value = health.get(metric)
    if value is None:
        met = False
    elif op == ">=":
        met = value >= threshold
    elif op == "<=":
        met = value <= threshold
    else:
        met = value == threshold
    return Criterion(level, name, metric, window, value, threshold, op, met)


def criteria_for(repo: str, health_by_window: dict[int, dict], config: TorchciConfig) -> list[Criterion]:
    """Every criterion of L2..L4 for `repo`, measured on its health rows (keyed by window length)."""
    t = config.thresholds
    short, long_ = t.L2.window_days, t.L4.window_days
    s, lg = _evidence(health_by_window.get(short, {})), _evidence(health_by_window.get(long_, {}))
    return [
        _criterion("L2", "min_completed_jobs", "completed_jobs", s, short, t.L2.min_completed_jobs, ">="),
        _criterion("L2", "min_success_rate", "success_rate", s, short, t.L2.min_success_rate, ">="),
        _criterion("L2", "max_commit_time_p95_s", "commit_time_p95_s", s, short, t.L2.max_commit_time_p95_s, "<="),
        _criterion("L2", "max_callbacks_per_minute", "callback_peak_per_minute", s, short,
                   t.L2.max_callbacks_per_minute, "<="),
        _criterion("L3", "min_success_rate", "success_rate", s, short, t.L3.min_success_rate, ">="),
        _criterion("L3", "min_infra_availability", "infra_availability", s, short, t.L3.min_infra_availability,
                   ">="),
        _criterion("L3", "max_queue_time_p90_s", "queue_p90_s", s, short, t.L3.max_queue_time_p90_s, "<="),
        _criterion("L4", "min_success_rate", "success_rate", lg, long_, t.L4.min_success_rate, ">="),
        _criterion("L4", "maintainer_approved", "maintainer_approved",
                   {"maintainer_approved": config.is_approved(repo)}, long_, True, "=="),
    ]


def _evidence(row: dict) -> dict:
    """A window's measures as evidence: without a judged job its zero count of completed jobs says
    nothing about the backend (nothing was dispatched, or its results did not come), so it is no
    data, like the rates that have no jobs to divide by."""
    if row.get("jobs"):
        return row
    return {**row, "completed_jobs": None}


def eligible_level(criteria: list[Criterion]) -> tuple[str, list[str]]:
    """The highest level whose criteria, and every lower level's, are all met; with the reasons
    it is not higher (each unmet criterion above it, and the approval cap when that is all)."""
    eligible = "L1"
    for level in LEVELS[1:]:
        if all(c.met for c in criteria if c.level == level):
            eligible = level
        else:
            break
    above = LEVELS[LEVELS.index(eligible) + 1:]
    unmet = [c for c in criteria if c.level in above and not c.met]
    reasons = [c.describe() for c in unmet]
    if eligible == "L3" and [c.name for c in unmet if c.level == "L4"] == ["maintainer_approved"]:
        reasons = ["meets every L4 measure but is not in maintainer_approved: capped at L3 until the "
                   "maintainers approve it"]
    return eligible, reasons


def measured_level(criteria: list[Criterion]) -> str:
    """The highest level no measured criterion rules out: a criterion with no data counts as met.
    A demotion goes no lower, so that only failures that were measured take a level away."""
    return eligible_level([c if c.value is not None else replace(c, met=True) for c in criteria])[0]


def recommend(current: str | None, eligible: str, measured: str | None = None) -> tuple[str | None, str]:
    """(recommended level, change): one level up at a time from L2 (L1 backends cannot report, so
    L2 is granted by a maintainer), straight down to `measured` (default: `eligible`)."""
    if current is None:
        return None, "not_allowlisted"
    have, can = LEVELS.index(current), LEVELS.index(eligible)
    floor = LEVELS.index(measured or eligible)
    if can > have and current != "L1":
        return LEVELS[have + 1], "promote"
    if floor < have:
        return LEVELS[floor], "demote"
    return current, "keep"


_DEVICE_NOISE = {"torch", "pytorch", "backend", "ext", "extension", "plugin", "for", "upstream", "ci"}


def placeholder_device(repo: str) -> str:
    """A device name guessed from the repo name (`acme-ai/torch-npu` -> `npu`), for a repo that
    needs a device-keyed entry (L3, L4) but has none yet; flagged for a maintainer to confirm."""
    name = repo.split("/", 1)[1].lower()
    words = [w for w in re.split(r"[^a-z0-9]+", name) if w and w not in _DEVICE_NOISE]
    return "-".join(words) or re.sub(r"[^a-z0-9]+", "-", name).strip("-") or "device"


@dataclass
class Assessment:
    repo: str
    current_level: str | None
    eligible_level: str
    recommended_level: str | None
    change: str  # promote, demote, keep or not_allowlisted
    reasons: list[str]
    criteria: list[Criterion]
    health: dict[int, dict] = field(default_factory=dict)
    device: str | None = None
    device_placeholder: bool = False
    oncalls: tuple[str, ...] = ()

    @property
    def in_allowlist(self) -> bool:
        return self.current_level is not None


L1_REASON = ("L1 backends cannot report results (the relay takes callbacks from L2 up), so L2 cannot be "
             "measured here: listing it at L2 is a maintainer's decision")


def _health_by_repo(health_rows: list[dict]) -> dict[str, tuple[str, dict[int, dict]]]:
    """Health rows keyed by the lower-cased repo: (the spelling seen, {window_days: row}). Rows
    that differ only in the case of the name are one repo; where two cover the same window (a
    partition written before names were folded), the one with more judged jobs is kept."""
    out: dict[str, tuple[str, dict[int, dict]]] = {}
    for row in health_rows:
        _, windows = out.setdefault(row["repo"].lower(), (row["repo"], {}))
        have = windows.get(row["window_days"])
        if have is None or (row.get("jobs") or 0) > (have.get("jobs") or 0):
            windows[row["window_days"]] = row
    return out


def _reasons(current: str | None, eligible: str, recommended: str | None, change: str, judged: bool,
             short: int, reasons: list[str]) -> list[str]:
    """The reasons shown for a recommendation, most important first."""
    if current == "L1":
        return [L1_REASON] + (reasons if judged else [])
    if not judged:
        reasons.insert(0, f"no judged jobs in the last {short} days")
    if change == "promote":
        reasons.insert(0, f"eligible for {eligible}: promoted one level, {current} -> {recommended}")
    elif change == "demote":
        kept = "" if recommended == eligible else " (criteria without data in the window do not demote)"
        reasons.insert(0, f"no longer meets {current}: demoted to {recommended}{kept}")
    elif change == "not_allowlisted":
        reasons.insert(0, f"reports results but is not in the allowlist (eligible for {eligible}); adding it "
                          "is a maintainer's decision, so it is left out of the proposal")
    elif LEVELS.index(eligible) < LEVELS.index(current):
        reasons.insert(0, f"no evidence in the last {short} days: not demoted" if not judged else
                       f"not demoted: the {current} criteria it misses have no data in the window")
    return reasons


def assess_backends(health_rows: list[dict], config: TorchciConfig) -> list[Assessment]:
    """An assessment for every allowlisted repo and every repo with results, sorted by repo; a
    repo is named as in the allowlist when it is listed there, else as last seen."""
    by_key = _health_by_repo(health_rows)
    for e in config.allowlist:
        by_key.setdefault(e.repo.lower(), (e.repo, {}))
    short = config.thresholds.L2.window_days
    out = []
    for key in sorted(by_key):
        seen_as, health = by_key[key]
        entry = config.entry_for(seen_as)
        repo = entry.repo if entry else seen_as
        criteria = criteria_for(repo, health, config)
        eligible, reasons = eligible_level(criteria)
        current = entry.level if entry else None
        recommended, change = recommend(current, eligible, measured_level(criteria))
        judged = bool(health.get(short, {}).get("jobs"))
        reasons = _reasons(current, eligible, recommended, change, judged, short, reasons)
        device, placeholder = None, False
        if recommended in ("L3", "L4"):
            device = entry.device if entry and entry.device else placeholder_device(repo)
            placeholder = not (entry and entry.device)
            if placeholder:
                reasons.append(f"{recommended} entries are keyed by device: {device!r} is a placeholder from the "
                               "repo name, to be confirmed")
        out.append(Assessment(repo, current, eligible, recommended, change, reasons, criteria, health,
                              device, placeholder, entry.oncalls if entry else ()))
    return out


def levels_document(assessments: list[Assessment], day: str, config: TorchciConfig) -> dict:
    """The content of `backend-levels.json`."""
    t = config.thresholds
    return {
        "day": day,
        "config": config.source,
        "windows": {"L2": t.L2.window_days, "L3": t.L2.window_days, "L4": t.L4.window_days},
        "backends": [{
            "repo": a.repo,
            "in_allowlist": a.in_allowlist,
            "current_level": a.current_level,
            "eligible_level": a.eligible_level,
            "recommended_level": a.recommended_level,
            "change": a.change,
            "device": a.device,
            "device_placeholder": a.device_placeholder,
            "reasons": a.reasons,
            "criteria": [asdict(c) for c in a.criteria],
            "health": {str(w): {k: v for k, v in row.items() if k not in ("repo", "window_days")}
                       for w, row in sorted(a.health.items())},
        } for a in assessments],
    }


def levels_json(assessments: list[Assessment], day: str, config: TorchciConfig) -> bytes:
    return (json.dumps(levels_document(assessments, day, config), indent=2) + "\n").encode()


def allowlist_proposal(assessments: list[Assessment], day: str, config: TorchciConfig) -> str:
    """The allowlist with every listed repo at its recommended level, in the relay's YAML format.

    L3 entries are keyed by device (the existing one, else a placeholder named in a comment), as
    the relay requires; the other levels are lists of repos. Repos outside the allowlist are left out.
    """
    entries = []
    notes = []
    for a in assessments:
        if a.recommended_level is None:
            continue
        device = a.device if a.recommended_level == "L3" else None
        entries.append(AllowlistEntry(a.repo, a.recommended_level, device, a.oncalls))
        if a.change != "keep":
            notes.append(f"# {a.repo}: {a.current_level} -> {a.recommended_level} ({a.change})")
        if a.device_placeholder and device:
            notes.append(f"# {a.repo}: device {a.device!r} is a placeholder derived from the repo name")
    header = [f"# Allowlist proposed from downstream results up to {day} (torchci-dagster backend_levels).",
              f"# Current allowlist: {config.source or 'bundled default'}. Review before applying.",
              *notes]
    body = dump_allowlist(entries) if entries else "{}\n"
    return "\n".join(header) + "\n" + body


def levels_table(assessments: list[Assessment]) -> pa.Table:
    """The `backend_levels` lake rows: one per assessed repo."""
    return pa.Table.from_pylist([{
        "repo": a.repo, "in_allowlist": a.in_allowlist, "current_level": a.current_level,
        "eligible_level": a.eligible_level, "recommended_level": a.recommended_level, "change": a.change,
        "device": a.device, "unmet_criteria": [f"{c.level}.{c.name}" for c in a.criteria if not c.met],
        "reasons": a.reasons,
    } for a in assessments], schema=LEVELS_SCHEMA)


LEVELS_FILE = "backend-levels.json"
PROPOSAL_FILE = "allowlist-proposal.yaml"


def publish_levels(store: Store, day: str, levels: bytes, proposal: str) -> bool:
    """Write both files atomically, unless the published ones are for a later day: a backfill
    of an old partition must not replace the current assessment. Returns whether it wrote."""
    if store.exists(LEVELS_FILE):
        try:
            published_day = json.loads(store.read_bytes(LEVELS_FILE)).get("day")
        except (ValueError, AttributeError):
            published_day = None  # unreadable: replace it
        if isinstance(published_day, str) and published_day > day:
            return False
    store.write_bytes(PROPOSAL_FILE, proposal.encode())
    store.write_bytes(LEVELS_FILE, levels)
    return True
