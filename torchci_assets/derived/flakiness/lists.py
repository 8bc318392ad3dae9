"""disabled-tests-condensed.json and slow-tests.json in PyTorch's formats.

PyTorch's CI downloads both and its test runner reads them unchanged:

    disabled-tests-condensed.json  {"test_x (__main__.TestY)": [issue_number, issue_url, [platforms]]}
    slow-tests.json                {"test_x (__main__.TestY)": seconds}

A test outside a class (a pytest function of the module) is "test_x (__main__)" in both (`pytorch_key`).

Disabling follows PyTorch's bar: a test is disabled when its verdict is `flaky` and its flake
evidence on the main branch spans at least DISABLE_MIN_JOBS distinct jobs, on the platforms where
it flaked there, named as PyTorch's runner names them (flakes seen only on pull requests disable
nothing; an aarch64 or s390x job is `linux`, since the runner drops a name it does not know) and as
its flaky bot picks them (a test flaky only in dynamo jobs is disabled on `dynamo`, not `linux`); the
empty list, which means every platform, only when it flaked on every platform that ran it, at
least two. A disabled test stays disabled until it has been clean for a whole window: at least
REENABLE_MIN_RUNS runs and no flake event; then it is dropped from the file and listed in
reenabled-tests.json. Without runs it stays (no evidence it was fixed). In
PyTorch, disabled tests still run in the rerun-disabled-tests jobs, which supply those runs.

Two sources, one format. With the DISABLED-issue loop on (credentials and
`disabled_issues.enabled`, see `issues.py`), the file is PyTorch's own: built from the open
DISABLED issues of the upstream repo exactly as PyTorch builds it (the HUD's getDisabledTestsAndJobs)
(`publish_disabled_from_issues`), so the issue number and URL are real, a human closing an
issue re-enables its test and a maintainer filing one disables it (the issues given are those
whose authors may: `issues.trusted_test_issues`). PyTorch's tooling compares the
number with "Fixes #N" in PR bodies to run a disabled test on the PR that fixes it. Otherwise
(dry run) the file comes from the verdict alone as below (`publish_disabled_tests`), and the id
is a stable hash of the test's key ("local-" + 12 hex digits) with an empty url.

A day's list is decided against the list as it stood before the day's first publication (the
previous day's, kept in DISABLED_TESTS_BEFORE), not against whatever the day's last intra-day
refresh published: a test a morning refresh disabled on evidence that was later withdrawn (its jobs
ended `cancelled`, its log turned out infrastructure) is decided again from the evidence of now,
so the list a day of refreshes publishes is the list the day built at once publishes. Re-enabling
still reads history: only a test of the previous day's list can be re-enabled, as before. A
re-run or backfill of an earlier day publishes nothing when a later day's list is published (the
day it is for is kept in DISABLED_TESTS_DAY, as for slow-tests.json); in a dry run, when the
re-run day is the one a later day's list is decided against (yesterday's daily run after today's
first refresh), its list becomes that baseline, and the later day's next run decides against it.
Its lake table, which the HUD's metrics count for that day, never takes today's list
(`_past_day`): live, the open issues are today's, so a table written keeps its list and a day
never run carries over the latest earlier day's; a dry run decides an older day (its baseline no
longer kept) against the latest earlier day's table, and keeps one written. A kept list's counts
are the day's verdict's (`_kept_table`): the last refresh that wrote it had not seen the whole day.

A quiet window (no test in `flaky_tests`; no clean main-branch pass for the slow list) has
nothing new to say in a dry run: the published files stay as they are, and the report's
`nothing_new` says why (see `torchci_assets.publishing`). A window with evidence publishes
whatever it decides, an empty list included. From issues, the open issues are the evidence:
their list is published every time.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import orjson
import pyarrow as pa

from resources.lake import Lake, connect
from resources.sql import SqlFiles, execute
from resources.storage import Store
from torchci_assets.derived.results.columns import STATS_COLUMNS_ADDED, register_current
from torchci_assets.derived.results.stats import define_seconds_sum
from torchci_assets.derived.flakiness.flaky import FLAKY_COLUMNS_ADDED
from torchci_assets.derived.flakiness.issue_text import (
    as_listed,
    condense,
    flaky_bot_platforms,
    names_by_test,
    pytorch_platforms,
    runner_key,
    runner_test,
)
from torchci_assets.partitions import days_ending
from torchci_assets.publishing import kept_note, later_day, record_day, recorded_day, write_if_changed

DISABLE_MIN_JOBS = 3
REENABLE_MIN_RUNS = 50
MASS_REENABLE_MIN = 10
SLOW_TEST_SECONDS = 60.0
SLOW_EXCLUDED_JOBS = "%asan%"  # a LIKE pattern over build_env and test_config, as PyTorch's over job names
SQL = SqlFiles(__file__)
_SLOW = dict(SQL.steps("slow_tests"))
DISABLED_TESTS_PATH = "stats/disabled-tests-condensed.json"
REENABLED_TESTS_PATH = "stats/reenabled-tests.json"
DISABLED_TESTS_DAY = "stats/disabled-tests.day.json"  # the day the disabled list is for (publishing.record_day)
# per day, the list it is decided against: {day: {"after": the day of that list or null, "tests": {...}}}
DISABLED_TESTS_BEFORE = "stats/disabled-tests.before.json"
BEFORE_DAYS_KEPT = 3  # the latest days' baselines kept: today's, and yesterday's for its daily run
SLOW_TESTS_PATH = "stats/slow-tests.json"
SLOW_TESTS_DAY = "stats/slow-tests.day.json"  # the day slow-tests.json is for (publishing.record_day)

DISABLED_SCHEMA = pa.schema([
    ("test", pa.string()), ("id", pa.string()), ("url", pa.string()), ("platforms", pa.list_(pa.string())),
    ("status", pa.string()), ("flake_events", pa.int64()), ("runs", pa.int64()),
    ("closed_at", pa.timestamp("ms", tz="UTC")),
])
SLOW_SCHEMA = pa.schema([
    ("test", pa.string()), ("seconds", pa.float64()), ("build_env", pa.string()), ("test_config", pa.string()),
    ("clean_passes", pa.int64()),
])


def pytorch_key(classname: str, name: str) -> str:
    """PyTorch's test id: "test_x (__main__.TestY)"; a dotted classname keeps its last part, and a
    test outside a class (classname empty) is "test_x (__main__)" (`issue_text.runner_key`; the SQL
    that keys tests calls the macro of sql/test_key.sql, which says the same)."""
    return runner_key(name, classname.rsplit(".", 1)[-1])


def define_pytorch_key(con) -> None:
    """The macro pytorch_key(name, classname) (sql/test_key.sql), in `con`: the queries that key
    tests key them as `pytorch_key` does."""
    execute(con, SQL["test_key"])


LOCAL_PREFIX = "local-"


def stable_id(key: str) -> str:
    return LOCAL_PREFIX + hashlib.sha1(key.encode()).hexdigest()[:12]


def is_local(entry_id: str) -> bool:
    """Whether a published entry's id is a dry run's (`stable_id`): it names no issue, and a live
    run files one for its test."""
    return str(entry_id).startswith(LOCAL_PREFIX)


# what Python's json.dump escapes with ensure_ascii (its default) and orjson writes raw: DEL and
# every non-ASCII character (orjson escapes the control characters itself, as json does)
_NOT_ASCII = re.compile("[\x7f-\U0010ffff]")


def _ascii_escape(m: re.Match) -> str:
    """`\\uXXXX` as json.dumps writes it: lower-case hex, a surrogate pair beyond U+FFFF."""
    code = ord(m.group())
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 | code >> 10:04x}\\u{0xDC00 | code & 0x3FF:04x}"


def dumps(doc) -> bytes:
    """PyTorch's files byte for byte: what its `update_disabled_issues.py` writes with
    `json.dump(data, f, sort_keys=True, indent=2)`, non-ASCII characters escaped. orjson does the
    work; a document with none (nearly all) is taken as orjson wrote it."""
    out = orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
    return out if out.isascii() and b"\x7f" not in out else _NOT_ASCII.sub(_ascii_escape, out.decode()).encode()


UNKNOWN_PLATFORM = "unknown"  # the jobs whose webhooks never came (see sql/window_views.sql)


def disable_platforms(flaky_platforms: list[str], platforms: list[str]) -> list[str]:
    """Where to disable, in PyTorch's platform names (`pytorch_platforms`: linux-aarch64 and s390x
    are its linux), since its runner drops a name it does not know and a list left empty disables
    the test everywhere: the platforms where it flaked; [] (everywhere) when that is every platform
    that ran it, and more than one, or when it flaked only in jobs of no known platform (which may
    have been any)."""
    flaked = pytorch_platforms(flaky_platforms)
    ran = set(pytorch_platforms(platforms))
    return [] if len(flaked) > 1 and set(flaked) >= ran else flaked


def _merge_platforms(a: list[str], b: list[str]) -> list[str]:
    return [] if not a or not b else sorted(set(a) | set(b))


@dataclass
class DisabledDecision:
    disabled: dict  # the condensed file's content
    reenabled: dict  # key -> {"id", "runs"}
    new: list[str]  # keys disabled today that were not before
    nothing_new: str = ""  # why the published files were kept, when they were
    later_day: str | None = None  # the later day the published files are for, when that kept them
    past_day: str = ""  # what an earlier day's table holds, when a later day's list is published (`_past_day`)
    source: str = ""  # where the table's list came from, when not from the run's own source
    # re-enabled key -> when its DISABLED issue closed, as GitHub says (`publish_disabled_from_issues`);
    # not in the published files, only in the lake table, for Dr. CI's rule of tests re-enabled since a merge base
    closed_at: dict = field(default_factory=dict)


def main_evidence(row: dict) -> tuple[int, list[str]]:
    """A `flaky_tests` row's flake events and flaky platforms on main, the evidence that disables
    a test (flakiness seen only on pull requests must not disable it for everyone), the platforms
    as PyTorch's flaky bot names them (`flaky_bot_platforms`: dynamo, not linux, for a test flaky
    only in dynamo jobs). A row without them (NULL: a partition written before they were counted)
    decides as it did then: on every branch's evidence, or on each platform's of main."""
    events = row.get("main_flake_events")
    if events is None:
        return row["flake_events"], list(row["flaky_platforms"] or [])
    if row.get("main_flaky_os_platforms") is None:
        return events, list(row.get("main_flaky_platforms") or [])
    return events, flaky_bot_platforms(row["main_flaky_os_platforms"], row.get("main_flaky_configs") or [])


def decide_disabled(rows: list[dict], previous: dict) -> DisabledDecision:
    """rows: `flaky_tests` rows (classname, name, verdict, flake_events, main_flake_events, runs,
    platforms, flaky_platforms, main_flaky_platforms); previous: the condensed list the day is
    decided against (`disabled_baseline`: the previous day's; {} if none). Disabling reads main's
    evidence (`main_evidence`); re-enabling asks for a window clean on every branch. An entry is
    its test's as PyTorch's runner matches it (`names_by_test`: one written with a dotted suite,
    as a maintainer may title the issue, too), and stays under the name written: the test is
    listed once, and that entry is re-enabled on the test's runs. One an earlier version wrote
    with an empty class word is renamed (`as_listed`), neither new nor re-enabled."""
    previous = as_listed(previous)
    by_key: dict[str, list[dict]] = {}
    for r in rows:
        by_key.setdefault(pytorch_key(r["classname"], r["name"]), []).append(r)
    written = names_by_test(previous)
    disabled: dict = {}
    for key, rs in by_key.items():
        name = written.get(key, key)
        for r in rs:
            events, flaked = main_evidence(r)
            if r["verdict"] == "flaky" and events >= DISABLE_MIN_JOBS:
                where = disable_platforms(flaked, list(r["platforms"]))
                old = disabled.get(name) or previous.get(name)
                ident, url = (old[0], old[1]) if old else (stable_id(key), "")
                merged = where if name not in disabled else _merge_platforms(disabled[name][2], where)
                disabled[name] = [ident, url, merged]
    reenabled = {}
    for key, entry in previous.items():
        if key in disabled:
            continue
        rs = by_key.get(runner_test(key), [])
        runs = sum(r["runs"] for r in rs)
        if runs >= REENABLE_MIN_RUNS and all(r["flake_events"] == 0 for r in rs):
            reenabled[key] = {"id": entry[0], "runs": runs}
        else:  # in PyTorch's names: a name its runner does not know would disable the test everywhere
            disabled[key] = [entry[0], entry[1], pytorch_platforms(entry[2])]
    return DisabledDecision(disabled, reenabled, sorted(k for k in disabled if k not in previous))


def load_published(store: Store) -> dict:
    """The published condensed file ({} before the first publish)."""
    data = store.read_bytes_if_exists(DISABLED_TESTS_PATH)
    return {} if data is None else orjson.loads(data)


@dataclass
class Baseline:
    """What the decision for `day` stands on: `tests`, the list it is decided against; `shown`,
    the day the published list is for; `entries`, the kept baselines by day
    (DISABLED_TESTS_BEFORE); `kept`, whether `tests` is the one kept for `day` (else it is the
    published list)."""

    day: str
    tests: dict
    shown: str | None
    entries: dict
    kept: bool

    @property
    def later(self) -> str | None:
        """The later day the published list is for, when there is one: `day` must not replace it."""
        return self.shown if self.shown is not None and self.shown > self.day else None


def _kept_baselines(outputs: Store) -> dict:
    """DISABLED_TESTS_BEFORE's entries; {} when absent or unreadable (then a day starts anew from
    the published list, as before the file existed)."""
    try:
        data = outputs.read_bytes_if_exists(DISABLED_TESTS_BEFORE)
        doc = {} if data is None else orjson.loads(data)
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict):
        return {}
    return {d: e for d, e in doc.items() if isinstance(e, dict) and isinstance(e.get("tests"), dict)}


def disabled_baseline(outputs: Store, day: str) -> Baseline:
    """The list `day` is decided against: the one kept for it at its first publication, while that
    still follows the day published before it (a first publication that stopped before recording
    its day is taken up against the same list); else the published list, which before `day`'s
    first publication is the previous day's."""
    shown = recorded_day(outputs, DISABLED_TESTS_DAY)
    entries = _kept_baselines(outputs)
    entry = entries.get(day)
    if entry is not None and ((shown is not None and shown >= day) or entry.get("after") == shown):
        return Baseline(day, entry["tests"], shown, entries, kept=True)
    return Baseline(day, load_published(outputs), shown, entries, kept=False)


def _keep_baselines(outputs: Store, base: Baseline, decided: dict, publishing: bool = True) -> None:
    """Record what later decisions stand on: the day's own baseline (at its first publication;
    a day that publishes nothing needs none, and writes nothing CI could mistake for news), and
    the day's list `decided` as the baseline of a later day decided against it (yesterday's daily
    run after today's first refresh: today's next run decides against the settled list). Only
    the latest BEFORE_DAYS_KEPT days are kept. `base` is `day`'s own (an earlier day whose own
    is no longer kept never comes here: `_past_day_from_verdict`)."""
    entries = dict(base.entries)
    for later, entry in entries.items():
        if later > base.day and entry.get("after") == base.day:
            entries[later] = {**entry, "tests": decided}
    if publishing and not base.kept and base.later is None:
        entries[base.day] = {"after": base.shown if base.shown != base.day else None, "tests": base.tests}
    kept = dict(sorted(entries.items())[-BEFORE_DAYS_KEPT:])
    if kept != base.entries:
        write_if_changed(outputs, DISABLED_TESTS_BEFORE, dumps(kept))


def _rows(con, sql: str, values: dict | None = None) -> list[dict]:
    cur = execute(con, sql, values)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def flaky_rows(lake: Lake, day: str, keys: Iterable[str] | None = None) -> list[dict]:
    """The `flaky_tests` rows of `day` that decide_disabled reads: all of them, or with `keys`
    (test ids) only those a decision on the tests flaky in the window and on `keys` reads."""
    con = connect()
    try:
        if register_current(con, lake, "flaky_tests", [day], "f", FLAKY_COLUMNS_ADDED) == 0:
            raise FileNotFoundError(f"flaky_tests has no partition for {day}: materialize it first")
        tests = None if keys is None else sorted({runner_test(k) for k in keys})  # as the rows key them
        define_pytorch_key(con)
        return _rows(con, SQL["disabling_rows"], {"keys": tests})
    finally:
        con.close()


def publish_disabled_tests(lake: Lake, outputs: Store, day: str) -> DisabledDecision:
    """Decide from `flaky_tests` of `day` and the list `day` is decided against
    (`disabled_baseline`); write the `disabled_tests` lake table and publish the condensed file
    and the re-enabled list, unless a later day's are published."""
    base = disabled_baseline(outputs, day)
    if base.later and not base.kept:
        return _past_day_from_verdict(lake, day, base.later)
    rows = flaky_rows(lake, day, keys=base.tests)
    decision = decide_disabled(rows, base.tests)
    if rows or lake.rows_in(lake.files("flaky_tests", [day])):  # `rows` holds only what a decision reads
        _publish(lake, outputs, day, decision, rows, base)
    else:
        _record(lake, day, decision, rows)
        _keep_baselines(outputs, base, decision.disabled, publishing=False)
        decision.nothing_new = (f"no test in flaky_tests for the window ending {day}: "
                                f"{kept_note(outputs, [DISABLED_TESTS_PATH, REENABLED_TESTS_PATH])}")
    return decision


class MassReenableRefused(ValueError):
    """Most disabled tests lost their open issue at once (`publish_disabled_from_issues`)."""


def keep_published(lake: Lake, outputs: Store, day: str) -> DisabledDecision:
    """What stands when the open issues could not be read: the published files, left as they are.
    A day with no `disabled_tests` partition yet gets one of the list it is decided against, the
    one CI goes on reading, so that the HUD shows it rather than no disabled test at all; one
    written earlier in the day stays; an earlier day's, when a later day's list is shown, is
    `_past_day_from_issues`'."""
    base = disabled_baseline(outputs, day)
    if base.later:
        return _past_day_from_issues(lake, day, base.later, "the open issues could not be read now")
    decision = DisabledDecision(dict(base.tests), {}, [])
    if not lake.files("disabled_tests", [day]):
        _record(lake, day, decision, _verdict_rows(lake, day, base.tests))
    return decision


def publish_disabled_from_issues(lake: Lake, outputs: Store, day: str, issues: list[dict],
                                 allow_mass_reenable: bool = False, reenabled_here: Iterable[str] = (),
                                 close_times: Callable[[list[str]], Mapping[str, dt.datetime]] | None = None
                                 ) -> DisabledDecision:
    """Publish the condensed file built from `issues` (the open DISABLED issues, REST objects)
    as PyTorch builds it; a test of the previous day's list (`disabled_baseline`) without an open
    issue now is listed as re-enabled. A later day's published list is left as it is. The
    verdict's counts fill the lake table's flake_events and runs when `day` has a `flaky_tests`
    partition; the list itself does not need one.

    Re-enabling most disabled tests at once would turn CI red everywhere, and is far more
    likely a search outage than a human decision: a list that lost more than half of a
    previous one of MASS_REENABLE_MIN or more entries is refused unless `allow_mass_reenable`
    (MassReenableRefused, raised before anything is written). The tests this project re-enabled itself (`reenabled_here`, from its ledger: an aggregate
    closed on rerun evidence takes all its tests at once) are not counted as lost.

    `close_times`: for the issue numbers (as the list's ids) of the tests re-enabled since the day's
    table was written, when each closed, as far as it can tell (GitHub's `closed_at`); the table's
    times are kept, and a test without one is re-enabled all the same, its close time unknown (null).
    """
    base = disabled_baseline(outputs, day)
    previous = as_listed(base.tests)  # as `condense` names the tests: a renamed one is not re-enabled
    disabled = condense(issues)
    if base.later:
        return _past_day_from_issues(lake, day, base.later, f"the open issues now say {len(disabled)}")
    rows = _verdict_rows(lake, day, [*previous, *disabled])
    here = set(reenabled_here)
    kept = sum(1 for k in previous if k in disabled or k in here)
    if len(previous) >= MASS_REENABLE_MIN and kept < len(previous) / 2 and not allow_mass_reenable:
        raise MassReenableRefused(
            f"only {kept} of the {len(previous)} published disabled tests still have an open DISABLED issue "
            f"({len(disabled)} open now): refusing to re-enable them all at once. If the issues really were "
            "closed, materialize with allow_mass_reenable: true.")
    runs = _events(rows)
    reenabled = {k: {"id": v[0], "runs": runs.get(runner_test(k), (0, 0))[1]} for k, v in previous.items()
                 if k not in disabled}
    decision = DisabledDecision(disabled, reenabled, sorted(k for k in disabled if k not in previous))
    before = _table_decision(lake, day) if lake.files("disabled_tests", [day]) else DisabledDecision({}, {}, [])
    decision.closed_at = {k: t for k, t in before.closed_at.items() if k in reenabled}
    if close_times is not None and (unknown := _newly_reenabled(decision, before)):
        found = close_times(sorted(set(unknown.values())))
        decision.closed_at.update({k: found[i] for k, i in unknown.items() if found.get(i) is not None})
    _publish(lake, outputs, day, decision, rows, base)
    return decision


def _newly_reenabled(decision: DisabledDecision, before: DisabledDecision) -> dict[str, str]:
    """The tests `decision` re-enables that the day's table (`before`) did not: key -> issue number (as
    the id). Only they are asked about: a test the table re-enabled without a close time was asked
    before (an issue open again, gone, past a run's reads), and asking again every refresh would
    spend GitHub's rate limit on what it did not say."""
    return {k: v["id"] for k, v in decision.reenabled.items() if k not in before.reenabled and v["id"].isdigit()}


def _verdict_rows(lake: Lake, day: str, keys: Iterable[str]) -> list[dict]:
    """The rows of `day`'s verdict a list of `keys` reads its counts from; none without a verdict."""
    return flaky_rows(lake, day, keys=keys) if lake.files("flaky_tests", [day]) else []


def _earlier_table(lake: Lake, day: str) -> tuple[str | None, dict]:
    """The latest day before `day` with a `disabled_tests` table, and the list of the tests it
    disabled, condensed; (None, {}) when there is none."""
    for earlier in reversed([d for d in lake.days("disabled_tests") if d < day]):
        if lake.files("disabled_tests", [earlier]):
            return earlier, _table_decision(lake, earlier).disabled
    return None, {}


def _table_decision(lake: Lake, day: str) -> DisabledDecision:
    """The decision `day`'s `disabled_tests` table holds (none newly disabled: the table does not say)."""
    return _decision_of(lake.read_files(lake.files("disabled_tests", [day])).to_pylist())


def _decision_of(rows: list[dict]) -> DisabledDecision:
    """The decision a `disabled_tests` table's `rows` hold."""
    return DisabledDecision({r["test"]: [r["id"], r["url"], list(r["platforms"] or [])] for r in rows
                             if r["status"] == "disabled"},
                            {r["test"]: {"id": r["id"], "runs": r["runs"]} for r in rows if r["status"] == "reenabled"},
                            [], closed_at={r["test"]: r["closed_at"] for r in rows  # none in a table older than it
                                           if r["status"] == "reenabled" and r.get("closed_at") is not None})


def _past_day_from_issues(lake: Lake, day: str, later: str, now: str) -> DisabledDecision:
    """A live run of `day` while a `later` day's list is published: the open issues are today's, not
    `day`'s, so they go in no table of it. A day never run gets the list CI went on reading then,
    the one the latest earlier day's table holds (nothing was published for `day`); `now` says what
    the issues say now, for the materialization."""
    before, previous = _earlier_table(lake, day)
    carried = DisabledDecision(previous, {}, [],
                               source=f"{before}'s table, carried over" if before else "none: no earlier day's table")
    held = (f"the {len(previous)} test(s) of {before}'s, which CI went on reading" if before
            else "no test: no earlier day has a table either")
    return _past_day(lake, day, later, now, previous, carried, _verdict_rows(lake, day, previous),
                     f"carried over: no list was published for {day}; the table holds {held}")


def _past_day_from_verdict(lake: Lake, day: str, later: str) -> DisabledDecision:
    """A dry run of `day` while a `later` day's list is published and `day`'s own baseline is no
    longer kept: it is decided against the latest earlier day's table, as a run of every day in
    turn decides it, never against the list published now."""
    before, previous = _earlier_table(lake, day)
    rows = flaky_rows(lake, day, keys=previous)
    decision = decide_disabled(rows, previous)
    decision.source = f"flaky verdict (dry run), against {before}'s table" if before else "flaky verdict (dry run)"
    return _past_day(lake, day, later, f"the verdict now says {len(decision.disabled)}", previous, decision, rows,
                     f"decided: no list was published for {day}; the table is its verdict's decision against "
                     + (f"{before}'s table" if before else "no earlier list (no earlier day has a table)"))


def _past_day(lake: Lake, day: str, later: str, now: str, previous: dict, backfill: DisabledDecision,
              rows: list[dict], backfilled: str) -> DisabledDecision:
    """An earlier `day` than the `later` one published keeps its table: it says what CI read that
    day, which the HUD's metrics count. A day without one (never run) gets `backfill`, with the
    verdict's `rows`; `backfilled` says so, `now` what the issues or the verdict say now."""
    if lake.files("disabled_tests", [day]):
        decision = _kept_table(lake, day)
        decision.new = sorted(k for k in decision.disabled if k not in previous)
        decision.source = f"{day}'s table as written before"
        decision.past_day = (f"kept: a later day ({later}) is published; the table holds the "
                             f"{len(decision.disabled)} test(s) disabled on {day}; {now}")
    else:
        decision = backfill
        _record(lake, day, decision, rows)
        decision.past_day = f"{backfilled}; {now}"
    decision.later_day = later
    return decision


def _kept_table(lake: Lake, day: str) -> DisabledDecision:
    """`day`'s table kept: its list is what CI read at the day's end, but its counts are those of
    the run that wrote it, the day's last intra-day refresh, which had not seen the reports landed
    after it. They are counted again from the day's verdict, the whole day's once its daily run
    rebuilt it; a day without a verdict keeps the counts it was written with."""
    written = lake.read_files(lake.files("disabled_tests", [day])).to_pylist()
    decision = _decision_of(written)
    if lake.files("flaky_tests", [day]):
        rows = flaky_rows(lake, day, keys=[*decision.disabled, *decision.reenabled])
        runs = _events(rows)
        for key, entry in decision.reenabled.items():
            entry["runs"] = runs.get(runner_test(key), (0, 0))[1]
        table = _table(decision, rows)
        if table.to_pylist() != written:
            lake.write("disabled_tests", day, table)
    return decision


def _events(rows: list[dict]) -> dict[str, tuple[int, int]]:
    """Per test key: flake events and runs, summed over its files. Keyed as the rows key a test: an
    entry's are read under its `runner_test` (one written with a dotted suite too)."""
    events: dict[str, tuple[int, int]] = {}
    for r in rows:
        key = pytorch_key(r["classname"], r["name"])
        e, n = events.get(key, (0, 0))
        events[key] = (e + r["flake_events"], n + r["runs"])
    return events


def _publish(lake: Lake, outputs: Store, day: str, decision: DisabledDecision, rows: list[dict],
             base: Baseline) -> None:
    """Record the decision, and publish it unless a later day's list is published (then
    `decision.later_day` says which). The baselines are written first and the day last, so a
    publication that stops half way is taken up again against the same baseline."""
    _record(lake, day, decision, rows)
    _keep_baselines(outputs, base, decision.disabled)
    decision.later_day = base.later
    if decision.later_day:
        return
    # unchanged files are left as they are: CI downloads them, a refresh rewrites them every minute
    write_if_changed(outputs, REENABLED_TESTS_PATH, dumps(decision.reenabled))
    write_if_changed(outputs, DISABLED_TESTS_PATH, dumps(decision.disabled))
    record_day(outputs, DISABLED_TESTS_DAY, day)


def _record(lake: Lake, day: str, decision: DisabledDecision, rows: list[dict]) -> None:
    """The `disabled_tests` lake table of `day`: what the decision says, with the verdict's counts."""
    lake.write("disabled_tests", day, _table(decision, rows))


def _table(decision: DisabledDecision, rows: list[dict]) -> pa.Table:
    """A `disabled_tests` table of `decision`, with the counts of the verdict's `rows`."""
    events = _events(rows)
    counts = {k: events.get(runner_test(k), (0, 0)) for k in decision.disabled}
    table = [{"test": k, "id": v[0], "url": v[1], "platforms": v[2], "status": "disabled",
              "flake_events": counts[k][0], "runs": counts[k][1], "closed_at": None}
             for k, v in sorted(decision.disabled.items())]
    table += [{"test": k, "id": v["id"], "url": "", "platforms": [], "status": "reenabled", "flake_events": 0,
               "runs": v["runs"], "closed_at": decision.closed_at.get(k)} for k, v in sorted(decision.reenabled.items())]
    return pa.Table.from_pylist(table, schema=DISABLED_SCHEMA)


def slow_tests(lake: Lake, day: str, window_days: int) -> list[dict] | None:
    """Per test key, its mean time over clean passes on main in the window, over every
    configuration but ASAN's and outside PyTorch's periodic workflow (`slow_tests.sql` says why),
    for tests where that exceeds SLOW_TEST_SECONDS; None when the window has no such clean pass at
    all (nothing was measured)."""
    con = connect()
    try:
        define_seconds_sum(con)
        if register_current(con, lake, "test_daily_stats", days_ending(day, window_days), "s",
                            STATS_COLUMNS_ADDED) == 0:
            raise FileNotFoundError(f"test_daily_stats has no partition in the window ending {day}")
        (measured,) = execute(con, _SLOW["measured"]).fetchone()
        if not measured:
            return None
        rows = _rows(con, _SLOW["slow_tests"], {"slow_seconds": SLOW_TEST_SECONDS, "excluded_jobs": SLOW_EXCLUDED_JOBS})
    finally:
        con.close()
    return [{"test": pytorch_key(r["classname"], r["name"]),
             **{k: r[k] for k in ("seconds", "build_env", "test_config", "clean_passes")}} for r in rows]


def publish_slow_tests(lake: Lake, outputs: Store, day: str, window_days: int,
                       branch: str = "main") -> tuple[int, str, str | None]:
    """Write the `slow_tests` lake table for `day` and publish slow-tests.json: (its size, why it
    was kept as published when the window measured nothing, in the words of a repository whose
    main branch is `branch`, and the later day the published list is for when that kept it: a
    re-run or backfill of an earlier day must not replace it)."""
    rows = slow_tests(lake, day, window_days)
    lake.write("slow_tests", day, pa.Table.from_pylist(rows or [], schema=SLOW_SCHEMA))
    if rows is None:
        return 0, (f"no clean {branch}-branch pass in the {window_days} days ending {day}: "
                   f"{kept_note(outputs, [SLOW_TESTS_PATH])}"), None
    later = later_day(outputs, SLOW_TESTS_DAY, day)
    if later:
        return len(rows), "", later
    write_if_changed(outputs, SLOW_TESTS_PATH, dumps({r["test"]: r["seconds"] for r in rows}))
    record_day(outputs, SLOW_TESTS_DAY, day)
    return len(rows), "", None
