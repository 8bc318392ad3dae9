"""test-times.json and test-class-times.json in PyTorch's formats, from the daily time table.

PyTorch's run_test.py reads these to shard tests, so the shapes are exactly PyTorch's
(test-infra's update_test_times):

    test-times.json        {build_env: {test_config: {invoking_file: seconds}}}
    test-class-times.json  {build_env: {test_config: {invoking_file: {classname: seconds}}}}

with one extra build_env, `"default"`: `default[test_config]` averages a file's time over
the build_envs that ran it in that config (for a new build_env), and `default["default"]`
averages it over every build_env and config (for a new config, and for files that are
usually not in the default config, like distributed ones).

The seconds for a file are PyTorch's: per workflow run, the sum of its test times over the
shards that ran it, each shard at its latest clean attempt and whichever day its report landed
(see `results/sql/test_time_daily.sql` and `sql/window_times.sql`), averaged over the successful
main-branch runs of the window (default 14 days), each run once: a run whose shards all passed on
the day its first attempt reported counts as it was that day, and a "re-run all jobs" of it
landing on a later day adds nothing. The window is read from `test_time_daily`, a few thousand
rows a day, never from raw test rows. A day of it written by older SQL (its footer names the SQL
that wrote it) is rebuilt from its test_results before the window reads it: its rows could count
a run twice beside today's (`results.stats.rebuild_outdated_time_days`).

Publishing keeps what PyTorch keeps: entries of the previously published file that the
window did not see stay (a config that did not run for two weeks still needs its times;
manual edits persist); the `"default"` section is recomputed when the window has data. A
build_env with no job at all in `workflow_job` over the past RETIRED_AFTER_DAYS days is
dropped, as PyTorch's clean_up_test_times does: it was retired or renamed, and its times would
otherwise stay forever. That needs the lake to hold the whole month: a younger lake cannot
tell a retired build_env from one that has not run since the deployment began, and drops none.

Two cases keep the published files, for opposite reasons:
- nothing new: the window has no times at all (the first days of a deployment, a holiday, an
  archive without test reports). That is not a failure: the published file stays as it is
  (or stays unpublished), the report says so and the asset succeeds. Each file is judged on
  its own: a window with file times but no class times republishes test-times.json only.
- much less: the window has times, but a new file, or its `"default"` section, would lose more
  than `max_loss` of the published entries (or have none). The section is what the window
  alone computed (the rest of the file carries the published entries along), so a window
  that measured much less shows there. Something upstream is wrong (reports no longer parsed, a
  build_env renamed): an empty query once made PyTorch's planner fall back to a single
  shard. Nothing is published and the asset fails, with the old files still served.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field

import orjson
import pyarrow as pa

from resources.lake import Lake, connect
from resources.sql import SqlFiles, execute
from resources.storage import Store
from torchci_assets.derived.results.stats import define_run_times, rebuild_outdated_time_days
from torchci_assets.partitions import days_ending
from torchci_assets.publishing import kept_note, later_day, record_day, write_if_changed

DEFAULT = "default"
WINDOW_DAYS = 14
MAX_LOSS = 0.5
RETIRED_AFTER_DAYS = 30
# Days before the window read for the shards of runs straddling its first day: a run's reports land
# within this many days before its last one (a run started before midnight, a failed shard re-run
# the next day). A run spread wider counts only in the windows holding all of it.
RUN_LOOKBACK_DAYS = 2
TEST_TIMES_PATH = "stats/test-times.json"
TEST_CLASS_TIMES_PATH = "stats/test-class-times.json"
TEST_TIMES_DAY = "stats/test-times.day.json"  # the day both are for (publishing.record_day)

FILE_TIMES_SCHEMA = pa.schema([
    ("build_env", pa.string()), ("test_config", pa.string()), ("file", pa.string()),
    ("time", pa.float64()), ("runs", pa.int64()),
])
CLASS_TIMES_SCHEMA = pa.schema([
    ("build_env", pa.string()), ("test_config", pa.string()), ("file", pa.string()),
    ("classname", pa.string()), ("time", pa.float64()), ("runs", pa.int64()),
])


SQL = SqlFiles(__file__)
_DAILY_VIEW = dict(SQL.steps("daily_view"))


class PublishRefused(Exception):
    """The new files would replace the published ones with much less: keep the old ones."""


def window_times(lake: Lake, day: str, window_days: int = WINDOW_DAYS) -> tuple[list[dict], list[dict]]:
    """(per-file rows, per-class rows) averaged over the `window_days` days ending on `day`.

    Each row's time is sum(time) / sum(runs) over the window, i.e. the mean over every
    successful main-branch run, whichever day its shards ran (`window_times.sql`): a run counts
    in the windows holding its last day, like a run whose shards all landed on one day, the
    RUN_LOOKBACK_DAYS before the window supplying the shards of one straddling its first day. A
    run a day summed whole counts on that day only, whatever of it landed on other days.
    Partitions written before test_time_daily kept runs split over days are read as they are.
    """
    days = days_ending(day, window_days)
    con = connect()
    try:
        if not lake.files("test_time_daily", days):
            return [], []
        lake.register(con, "test_time_daily", days_ending(day, window_days + RUN_LOOKBACK_DAYS), name="daily_files")
        columns = {d[0] for d in con.execute("SELECT * FROM daily_files LIMIT 0").description}
        con.execute(_DAILY_VIEW["current" if "workflow_id" in columns else "summed_only"])
        define_run_times(con)
        rows = [dict(zip(("build_env", "test_config", "file", "classname", "time", "runs"), r))
                for r in execute(con, SQL["window_times"], {"default": DEFAULT, "first_day": days[0]}).fetchall()]
    finally:
        con.close()
    files = [{k: v for k, v in r.items() if k != "classname"} for r in rows if r["classname"] is None]
    classes = [r for r in rows if r["classname"] is not None]
    return files, classes


def active_build_envs(lake: Lake, day: str, days: int = RETIRED_AFTER_DAYS) -> set[str] | None:
    """The build_envs with a job in the `days` days ending on `day`; None when the lake's
    `workflow_job` does not reach back that far (see the module docstring)."""
    month = days_ending(day, days)
    if not any(d <= month[0] for d in lake.days("workflow_job")):
        return None
    con = connect()
    try:
        lake.register(con, "workflow_job", month, name="month")
        return {env for (env,) in execute(con, SQL["active_build_envs"]).fetchall()}
    finally:
        con.close()


def drop_retired(times: dict, active: set[str] | None) -> dict:
    """`times` without the build_envs not in `active` (all kept when `active` is None); the
    `"default"` averages, not a build_env, stay."""
    if active is None:
        return times
    return {env: cfgs for env, cfgs in times.items() if env == DEFAULT or env in active}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def gen_test_file_times(rows: list[dict], old: dict, keep_old: bool = True) -> dict:
    """test-times.json content from window rows (build_env, test_config, file, time) and the
    previously published content `old` (kept where the window has nothing, if `keep_old`)."""
    times: dict = {env: {cfg: dict(files) for cfg, files in cfgs.items()} for env, cfgs in old.items()} \
        if keep_old else {}
    per_config: dict = defaultdict(lambda: defaultdict(list))
    overall: dict = defaultdict(list)
    for r in rows:
        times.setdefault(r["build_env"], {}).setdefault(r["test_config"], {})[r["file"]] = r["time"]
        per_config[r["test_config"]][r["file"]].append(r["time"])
        overall[r["file"]].append(r["time"])
    if per_config:
        times[DEFAULT] = {cfg: {f: _mean(v) for f, v in files.items()} for cfg, files in per_config.items()}
        times[DEFAULT][DEFAULT] = {f: _mean(v) for f, v in overall.items()}
    return times


def gen_test_class_times(rows: list[dict], old: dict, keep_old: bool = True) -> dict:
    """test-class-times.json content, like `gen_test_file_times` one level deeper (per class)."""
    times: dict = {env: {cfg: {f: dict(classes) for f, classes in files.items()} for cfg, files in cfgs.items()}
                   for env, cfgs in old.items()} if keep_old else {}
    per_config: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    overall: dict = defaultdict(lambda: defaultdict(list))
    for r in rows:
        times.setdefault(r["build_env"], {}).setdefault(r["test_config"], {}) \
            .setdefault(r["file"], {})[r["classname"]] = r["time"]
        per_config[r["test_config"]][r["file"]][r["classname"]].append(r["time"])
        overall[r["file"]][r["classname"]].append(r["time"])
    if per_config:
        times[DEFAULT] = {cfg: {f: {c: _mean(v) for c, v in classes.items()} for f, classes in files.items()}
                          for cfg, files in per_config.items()}
        times[DEFAULT][DEFAULT] = {f: {c: _mean(v) for c, v in classes.items()} for f, classes in overall.items()}
    return times


def count_entries(times: dict) -> int:
    """Leaf entries (seconds values) of a test-times or test-class-times document."""
    return sum(count_entries(v) if isinstance(v, dict) else 1 for v in times.values())


def check_publishable(name: str, previous: dict | None, new: dict, max_loss: float = MAX_LOSS) -> None:
    """Raise PublishRefused when `new` is empty, or when it or its `"default"` section keeps less
    than (1 - max_loss) of the entries `previous` had there. The whole file carries the published
    entries along (keep_old), so it alone would never show a window that measured much less;
    the section, recomputed from the window only, does."""
    if count_entries(new) == 0:
        raise PublishRefused(f"{name}: the new file has no entries; keeping the published one")
    for what, before_doc, after_doc in (("file", previous or {}, new),
                                        (f'"{DEFAULT}" section', (previous or {}).get(DEFAULT) or {},
                                         new.get(DEFAULT) or {})):
        before, after = count_entries(before_doc), count_entries(after_doc)
        if before and after < (1 - max_loss) * before:
            raise PublishRefused(
                f"{name}: the new {what} has {after} entries, the published one {before}: it would lose "
                f"{1 - after / before:.0%} of them (limit {max_loss:.0%}); keeping the published one")


def dumps(times: dict) -> bytes:
    """The bytes PyTorch's `update_test_times.py` writes, `json.dumps(times, indent=2,
    sort_keys=True)`, so that a file this project publishes diffs against PyTorch's only where
    the times differ. orjson would spell small times (under 1e-4 s) and non-ASCII names otherwise
    (`0.0000476...` for `4.76...e-05`, raw UTF-8 for `\\uXXXX`)."""
    return json.dumps(times, indent=2, sort_keys=True).encode()


def _load(store: Store, path: str) -> dict | None:
    data = store.read_bytes_if_exists(path)
    return None if data is None else orjson.loads(data)


@dataclass
class TimesReport:
    day: str
    window_files: int  # (build_env, test_config, file) averages computed from the window
    window_classes: int
    entries: int | None  # in the published test-times.json (None: none published)
    class_entries: int | None
    previous_entries: int | None
    previous_class_entries: int | None
    nothing_new: str = ""  # why a file was kept as published, when one was
    later_day: str | None = None  # the later day the published files are for, which this one left alone
    days_rebuilt: list[str] = field(default_factory=list)  # days of test times older SQL wrote, rebuilt first
    days_outdated_kept: list[str] = field(default_factory=list)  # such days without test_results, read as they are

    @property
    def published(self) -> list[str]:
        """The files published this time."""
        if self.later_day:
            return []
        return [path for path, rows in ((TEST_TIMES_PATH, self.window_files),
                                        (TEST_CLASS_TIMES_PATH, self.window_classes)) if rows]


def publish_test_times(lake: Lake, outputs: Store, day: str, window_days: int = WINDOW_DAYS,
                       keep_old: bool = True, max_loss: float = MAX_LOSS) -> TimesReport:
    """Compute the window's times, write them to the lake (`test_times`, `test_class_times` for
    `day`), merge them with the published files and publish both, or neither (PublishRefused).

    A file whose part of the window has no times is not new: it stays as published (see the
    module docstring) and the report's `nothing_new` says why. When the published files are for
    a later day (this is a re-run or a backfill) only the lake tables are written: the report's
    `later_day` says which day is kept. The window's days of test_time_daily written by older SQL
    are rebuilt first (`rebuild_outdated_time_days`): their rows could count a run twice.
    """
    if not lake.files("test_time_daily", [day]):
        raise FileNotFoundError(f"test_time_daily has no partition for {day} in "
                                f"{lake.store.display('test_time_daily')}: materialize it first")
    outdated = rebuild_outdated_time_days(
        lake, {"test_time_daily": days_ending(day, window_days + RUN_LOOKBACK_DAYS)})
    report = _publish(lake, outputs, day, window_days, keep_old, max_loss)
    report.days_rebuilt, report.days_outdated_kept = outdated.rebuilt, outdated.kept
    return report


def _publish(lake: Lake, outputs: Store, day: str, window_days: int, keep_old: bool, max_loss: float) -> TimesReport:
    files, classes = window_times(lake, day, window_days)
    lake.write("test_times", day, pa.Table.from_pylist(files, schema=FILE_TIMES_SCHEMA))
    lake.write("test_class_times", day, pa.Table.from_pylist(classes, schema=CLASS_TIMES_SCHEMA))
    old_times, old_classes = _load(outputs, TEST_TIMES_PATH), _load(outputs, TEST_CLASS_TIMES_PATH)
    later = later_day(outputs, TEST_TIMES_DAY, day)
    if later:
        return TimesReport(day, len(files), len(classes), _count(old_times), _count(old_classes),
                           _count(old_times), _count(old_classes), later_day=later)
    active = active_build_envs(lake, day) if files or classes else None
    new_times = drop_retired(gen_test_file_times(files, old_times or {}, keep_old), active) if files else old_times
    new_classes = drop_retired(gen_test_class_times(classes, old_classes or {}, keep_old), active) \
        if classes else old_classes
    if files:
        check_publishable(TEST_TIMES_PATH, old_times, new_times, max_loss)
    if classes:
        check_publishable(TEST_CLASS_TIMES_PATH, old_classes, new_classes, max_loss)
    if classes:
        write_if_changed(outputs, TEST_CLASS_TIMES_PATH, dumps(new_classes))
    if files:
        write_if_changed(outputs, TEST_TIMES_PATH, dumps(new_times))
    if files or classes:
        record_day(outputs, TEST_TIMES_DAY, day)
    quiet = [path for path, rows in ((TEST_TIMES_PATH, files), (TEST_CLASS_TIMES_PATH, classes)) if not rows]
    nothing_new = ""
    if quiet:
        what = "test times" if len(quiet) == 2 else "file times" if not files else "class times"
        nothing_new = (f"no {what} from successful main-branch runs in the {window_days} days ending {day}: "
                       f"{kept_note(outputs, quiet)}")
    return TimesReport(day, len(files), len(classes), _count(new_times), _count(new_classes),
                       _count(old_times), _count(old_classes), nothing_new)


def _count(times: dict | None) -> int | None:
    return None if times is None else count_entries(times)
