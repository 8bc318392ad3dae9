"""test-times.json and test-class-times.json in PyTorch's formats, from the daily time table.

PyTorch's run_test.py reads these to shard tests, so the shapes are exactly PyTorch's
(test-infra's update_test_times):

    test-times.json        {build_env: {test_config: {invoking_file: seconds}}}
    test-class-times.json  {build_env: {test_config: {invoking_file: {classname: seconds}}}}

with one extra build_env, `"default"`: `default[test_config]` averages a file's time over
the build_envs that ran it in that config (for a new build_env), and `default["default"]`
averages it over every build_env and config (for a new config, and for files that are
usually not in the default config, like distributed ones).

The seconds for a file are PyTorch's: per workflow run attempt, the sum of its test times
over the shards that ran it (see `derived.results.stats._TIME_DAILY_SQL`), averaged over the successful
main-branch runs of the window (default 14 days). The window is read from `test_time_daily`,
a few thousand rows a day, never from raw test rows.

Publishing keeps what PyTorch keeps: entries of the previously published file that the
window did not see stay (a config that did not run for two weeks still needs its times;
manual edits persist); the `"default"` section is recomputed when the window has data.

Two cases keep the published files, for opposite reasons:
- nothing new: the window has no times at all (the first days of a deployment, a holiday, an
  archive without test reports). That is not a failure: the published file stays as it is
  (or stays unpublished), the report says so and the asset succeeds. Each file is judged on
  its own: a window with file times but no class times republishes test-times.json only.
- much less: the window has times, but a new file would lose more than `max_loss` of the
  published entries (or have none). Something upstream is wrong (reports no longer parsed, a
  build_env renamed): an empty query once made PyTorch's planner fall back to a single
  shard. Nothing is published and the asset fails, with the old files still served.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import orjson
import pyarrow as pa

from resources.lake import Lake, connect
from resources.sql import SqlFiles, execute
from resources.storage import Store
from torchci_assets.partitions import days_ending
from torchci_assets.publishing import kept_note

DEFAULT = "default"
WINDOW_DAYS = 14
MAX_LOSS = 0.5
TEST_TIMES_PATH = "stats/test-times.json"
TEST_CLASS_TIMES_PATH = "stats/test-class-times.json"

FILE_TIMES_SCHEMA = pa.schema([
    ("build_env", pa.string()), ("test_config", pa.string()), ("file", pa.string()),
    ("time", pa.float64()), ("runs", pa.int64()),
])
CLASS_TIMES_SCHEMA = pa.schema([
    ("build_env", pa.string()), ("test_config", pa.string()), ("file", pa.string()),
    ("classname", pa.string()), ("time", pa.float64()), ("runs", pa.int64()),
])


SQL = SqlFiles(__file__)


class PublishRefused(Exception):
    """The new files would replace the published ones with much less: keep the old ones."""


def window_times(lake: Lake, day: str, window_days: int = WINDOW_DAYS) -> tuple[list[dict], list[dict]]:
    """(per-file rows, per-class rows) averaged over the `window_days` days ending on `day`.

    Each row's time is sum(time) / sum(runs) over the window, i.e. the mean over every
    successful main-branch run attempt, whichever day it ran.
    """
    con = connect()
    try:
        if lake.register(con, "test_time_daily", days_ending(day, window_days), name="daily") == 0:
            return [], []
        rows = [dict(zip(("build_env", "test_config", "file", "classname", "time", "runs"), r))
                for r in execute(con, SQL["window_times"], {"default": DEFAULT}).fetchall()]
    finally:
        con.close()
    files = [{k: v for k, v in r.items() if k != "classname"} for r in rows if r["classname"] is None]
    classes = [r for r in rows if r["classname"] is not None]
    return files, classes


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
    """Raise PublishRefused when `new` is empty or keeps less than (1 - max_loss) of `previous`'s entries."""
    after = count_entries(new)
    if after == 0:
        raise PublishRefused(f"{name}: the new file has no entries; keeping the published one")
    if previous:
        before = count_entries(previous)
        if after < (1 - max_loss) * before:
            raise PublishRefused(
                f"{name}: the new file has {after} entries, the published one {before}: it would lose "
                f"{1 - after / before:.0%} of them (limit {max_loss:.0%}); keeping the published one")


def dumps(times: dict) -> bytes:
    """PyTorch's layout: sorted keys, two-space indent."""
    return orjson.dumps(times, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)


def _load(store: Store, path: str) -> dict | None:
    return orjson.loads(store.read_bytes(path)) if store.exists(path) else None


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

    @property
    def published(self) -> list[str]:
        """The files written this time."""
        return [path for path, rows in ((TEST_TIMES_PATH, self.window_files),
                                        (TEST_CLASS_TIMES_PATH, self.window_classes)) if rows]


def publish_test_times(lake: Lake, outputs: Store, day: str, window_days: int = WINDOW_DAYS,
                       keep_old: bool = True, max_loss: float = MAX_LOSS) -> TimesReport:
    """Compute the window's times, write them to the lake (`test_times`, `test_class_times` for
    `day`), merge them with the published files and publish both, or neither (PublishRefused).

    A file whose part of the window has no times is not new: it stays as published (see the
    module docstring) and the report's `nothing_new` says why.
    """
    if not lake.files("test_time_daily", [day]):
        raise FileNotFoundError(f"test_time_daily has no partition for {day} in "
                                f"{lake.store.display('test_time_daily')}: materialize it first")
    files, classes = window_times(lake, day, window_days)
    lake.write("test_times", day, pa.Table.from_pylist(files, schema=FILE_TIMES_SCHEMA))
    lake.write("test_class_times", day, pa.Table.from_pylist(classes, schema=CLASS_TIMES_SCHEMA))
    old_times, old_classes = _load(outputs, TEST_TIMES_PATH), _load(outputs, TEST_CLASS_TIMES_PATH)
    new_times = gen_test_file_times(files, old_times or {}, keep_old) if files else old_times
    new_classes = gen_test_class_times(classes, old_classes or {}, keep_old) if classes else old_classes
    if files:
        check_publishable(TEST_TIMES_PATH, old_times, new_times, max_loss)
    if classes:
        check_publishable(TEST_CLASS_TIMES_PATH, old_classes, new_classes, max_loss)
    if classes:
        outputs.write_bytes(TEST_CLASS_TIMES_PATH, dumps(new_classes))
    if files:
        outputs.write_bytes(TEST_TIMES_PATH, dumps(new_times))
    quiet = [path for path, rows in ((TEST_TIMES_PATH, files), (TEST_CLASS_TIMES_PATH, classes)) if not rows]
    nothing_new = ""
    if quiet:
        what = "test times" if len(quiet) == 2 else "file times" if not files else "class times"
        nothing_new = (f"no {what} from successful main-branch runs in the {window_days} days ending {day}: "
                       f"{kept_note(outputs, quiet)}")
    return TimesReport(
        day, len(files), len(classes),
        None if new_times is None else count_entries(new_times),
        None if new_classes is None else count_entries(new_classes),
        None if old_times is None else count_entries(old_times),
        None if old_classes is None else count_entries(old_classes),
        nothing_new,
    )
