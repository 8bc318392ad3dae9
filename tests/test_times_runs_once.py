"""Each workflow run counts once in the per-commit test times that test-time regressions read, as it
does in test_time_daily: each shard at its latest clean attempt, whichever day its report landed;
and a window never counts a run twice because a day of it was written by an older version."""

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from test_test_stats import LINUX, day, job_payload, lake, run_row, webhooks, write_test_run
from test_test_times import NN, OPS, build_times, file_runs, nn, outputs, rerun_all

from resources.lake import connect
from torchci_assets.derived.results.stats import build_test_results, build_test_time_daily
from torchci_assets.derived.sharding.regressions import find_test_time_regressions, write_test_time_regressions
from torchci_assets.derived.sharding.times import TEST_TIMES_PATH, publish_test_times

FILE = "nn/test_nn"
SHA_COLUMNS = ("build_env", "test_config", "file", "head_sha", "runs", "time", "first_at")


def commit_times(tmp_path, on_day: str) -> dict:
    """{(file, sha): (runs, seconds)} of the runs test_time_sha_daily counts whole on `on_day`."""
    con = connect()
    try:
        lake(tmp_path).register(con, "test_time_sha_daily", [on_day], name="t")
        found = con.execute("SELECT file, head_sha, sum(runs), sum(time) FROM t WHERE runs > 0 GROUP BY ALL").fetchall()
    finally:
        con.close()
    return {(f, sha): (runs, seconds) for f, sha, runs, seconds in found}


def test_a_commits_runs_count_once_each_shard_at_its_latest_clean_attempt(tmp_path):
    """Run 100 (commit a) is re-run whole the same day: one run, at its latest attempt, as
    test_time_daily counts it. Run 200 (commit b) re-runs its failed shard 2: one run of shard 1's
    first attempt and shard 2's second (10 + 22 s), not a run of the re-run shard's 22 s alone."""
    a, b = "a" * 40, "b" * 40
    webhooks(tmp_path, day(0), [
        ("workflow_job", job_payload(11, 100, a, shard=1, shards=2, attempt=1)),
        ("workflow_job", job_payload(12, 100, a, shard=2, shards=2, attempt=1)),
        ("workflow_job", job_payload(13, 100, a, shard=1, shards=2, attempt=2)),
        ("workflow_job", job_payload(14, 100, a, shard=2, shards=2, attempt=2)),
        ("workflow_job", job_payload(21, 200, b, shard=1, shards=2, attempt=1)),
        ("workflow_job", job_payload(22, 200, b, shard=2, shards=2, attempt=1, conclusion="failure")),
        ("workflow_job", job_payload(23, 200, b, shard=2, shards=2, attempt=2))])
    write_test_run(tmp_path, day(0), [
        nn(11, 100, 10.0, attempt=1), nn(12, 100, 20.0, name="test_pool", attempt=1),
        run_row(11, 100, "test_add", time=5.0, file=OPS, classname="TestOps", attempt=1),
        nn(13, 100, 12.0, attempt=2), nn(14, 100, 22.0, name="test_pool", attempt=2),
        run_row(13, 100, "test_add", time=7.0, file=OPS, classname="TestOps", attempt=2),
        nn(21, 200, 10.0, attempt=1), nn(22, 200, 20.0, name="test_pool", attempt=1, status="failed"),
        run_row(21, 200, "test_add", time=5.0, file=OPS, classname="TestOps", attempt=1),
        nn(23, 200, 22.0, name="test_pool", attempt=2)])
    build_times(tmp_path, day(0))
    assert commit_times(tmp_path, day(0)) == {
        (FILE, a): (1, 34.0), ("test_ops", a): (1, 7.0), (FILE, b): (1, 32.0), ("test_ops", b): (1, 5.0)}
    # the same runs test_time_daily counts, with the same times
    assert file_runs(tmp_path, day(0)) == {FILE: (33.0, 2), "test_ops": (6.0, 2)}


# ---- what test-time regressions report ------------------------------------------------------

def two_shard_run(run: int, sha: str, shard1: float, shard2: float, *, attempt: int = 1, failed: int = 0,
                  shards=(1, 2)) -> tuple[list, list]:
    """(webhook payloads, test rows) of `shards` of one attempt of a run of NN split over two
    shards; shard `failed` fails (its test fails)."""
    hooks, rows = [], []
    for shard, seconds, name in ((1, shard1, "test_conv"), (2, shard2, "test_pool")):
        if shard not in shards:
            continue
        job = run * 1000 + attempt * 10 + shard
        hooks.append(("workflow_job", job_payload(job, run, sha, shard=shard, shards=2, attempt=attempt,
                                                  conclusion="failure" if shard == failed else "success")))
        rows.append(nn(job, run, seconds, name=name, attempt=attempt, status="failed" if shard == failed else "passed"))
    return hooks, rows


def land(tmp_path, on_day: str, *parts: tuple[list, list]) -> None:
    webhooks(tmp_path, on_day, [h for hooks, _ in parts for h in hooks])
    write_test_run(tmp_path, on_day, [r for _, rows in parts for r in rows])


def pushed(tmp_path, on_day: str, shas: list[str]) -> None:
    """The commits' pushes to main that day, in this order: the order regressions bisect in."""
    at = dt.datetime.fromisoformat(f"{on_day}T01:00:00+00:00")
    lake(tmp_path).write("push", on_day, pa.Table.from_pylist([
        {"repo": "pytorch/pytorch", "ref": "refs/heads/main", "after": sha, "received_at": at + dt.timedelta(minutes=i)}
        for i, sha in enumerate(shas)]))


def sha(n: int) -> str:
    return f"{n:040x}"


def test_a_culprit_whose_failed_shard_was_re_run_is_named_and_its_re_run_counts_once(tmp_path):
    """NN takes 100 + 100 s for six days; on D-1 commit Y makes it 400 + 400 s. Y's shard 1 failed
    and was re-run: counted as the re-run shard alone (400 s), Y looked fast and Z was named. On D,
    Z is re-run whole ("re-run all jobs"): counted again, its runs were one too many."""
    for back in range(7, 1, -1):
        land(tmp_path, day(-back), two_shard_run(back, sha(back), 100.0, 100.0))
        pushed(tmp_path, day(-back), [sha(back)])
    x, y, z, w, v = (sha(n) for n in (0xA, 0xB, 0xC, 0xD, 0xE))
    land(tmp_path, day(-1), two_shard_run(10, x, 100.0, 100.0),
         two_shard_run(11, y, 400.0, 400.0, failed=1), two_shard_run(11, y, 400.0, 400.0, attempt=2, shards=(1,)),
         two_shard_run(12, z, 400.0, 400.0), two_shard_run(13, w, 400.0, 400.0))
    pushed(tmp_path, day(-1), [x, y, z, w])
    land(tmp_path, day(0), two_shard_run(12, z, 410.0, 410.0, attempt=2), two_shard_run(14, v, 400.0, 400.0))
    pushed(tmp_path, day(0), [v])
    build_times(tmp_path, *(day(-back) for back in range(7, -1, -1)))
    [row] = find_test_time_regressions(lake(tmp_path), day(0)).rows
    assert (row["file"], row["before_s"], row["after_s"], row["since"]) == (FILE, 200.0, 800.0, dt.date.fromisoformat(day(-1)))
    assert (row["first_slow_sha"], row["last_fast_sha"]) == (y, x)
    assert row["slow_runs"] == 4  # Y, Z, W and V once each


def test_runs_straddling_midnight_count_whole_on_their_last_day(tmp_path):
    """Every night a run's shard 1 reports before midnight and its shard 2 after: counted as two
    runs of half the time, NN seemed to take 100 s, and two whole runs of 150 + 150 s on D looked
    like a regression from 100 s. Each run counts whole (200 s) on its last day: 300 s is the move."""
    for back in range(7, 0, -1):  # run `back`: shard 1 on D-back, shard 2 on the next day
        parts = [two_shard_run(back, sha(back), 100.0, 100.0, shards=(1,))]
        if back < 7:
            parts.append(two_shard_run(back + 1, sha(back + 1), 100.0, 100.0, shards=(2,)))
        land(tmp_path, day(-back), *parts)
        pushed(tmp_path, day(-back), [sha(back)])
    land(tmp_path, day(0), two_shard_run(1, sha(1), 100.0, 100.0, shards=(2,)),
         two_shard_run(20, sha(0x20), 150.0, 150.0), two_shard_run(21, sha(0x21), 150.0, 150.0))
    pushed(tmp_path, day(0), [sha(0x20), sha(0x21)])
    build_times(tmp_path, *(day(-back) for back in range(7, -1, -1)))
    [row] = find_test_time_regressions(lake(tmp_path), day(0)).rows
    assert (row["before_s"], row["after_s"], row["first_slow_sha"], row["last_fast_sha"]) == (
        200.0, 300.0, sha(0x20), sha(1))
    assert row["slow_runs"] == 2


# ---- days written by an older version ----------------------------------------------------------

# the columns test_time_daily had before its shard rows carried their commit
OLDER_DAILY = ("build_env", "test_config", "file", "classname", "runs", "time", "workflow_id", "shard", "num_shards",
               "attempt", "clean")


def rewrite_as_older(tmp_path, table: str, on_day: str, columns: tuple, rows: list[dict] | None = None,
                     keep=lambda r: True) -> None:
    """Replace the day's partition of `table` by `rows` (else its own rows that `keep` keeps) as an
    older version wrote it: its `columns` only, without the stamp of the version that wrote it."""
    lk = lake(tmp_path)
    [path] = lk.files(table, [on_day])
    current = pq.read_table(path, filesystem=lk.store.fs)
    schema = pa.schema([current.schema.field(c) for c in columns])
    rows = [r for r in current.to_pylist() if keep(r)] if rows is None else rows
    lk.write(table, on_day, pa.Table.from_pylist([{c: r[c] for c in columns} for r in rows], schema=schema))


def daily_row(file, classname, time, runs=1) -> dict:
    return {"build_env": LINUX, "test_config": "default", "file": file, "classname": classname, "runs": runs,
            "time": time, "workflow_id": None, "shard": None, "num_shards": None, "attempt": None, "clean": None}


def test_days_written_before_runs_had_markers_are_rebuilt_and_count_a_re_run_once(tmp_path):
    """Run 100 passed on D-1 and was re-run whole on D. D-1 as written before it marked the runs it
    summed: D's re-run joined into a second run. D as written before a day summed only runs from
    their first attempt: it summed the re-run again. Both days are rebuilt from their test_results."""
    rerun_all(tmp_path, -1, 0)
    build_times(tmp_path, day(-1), day(0))
    rewrite_as_older(tmp_path, "test_time_daily", day(-1), OLDER_DAILY, keep=lambda r: not (r["workflow_id"] and r["file"] is None))
    assert file_runs(tmp_path, day(0)) == {FILE: (32.0, 2), "test_ops": (6.0, 2)}  # what the window read
    report = publish_test_times(lake(tmp_path), outputs(tmp_path), day(0))
    assert json.loads(outputs(tmp_path).read_bytes(TEST_TIMES_PATH))[LINUX]["default"] == {FILE: 30.0, "test_ops": 5.0}
    assert report.days_rebuilt == [day(-1)] and report.days_outdated_kept == []
    rewrite_as_older(tmp_path, "test_time_daily", day(0), OLDER_DAILY, rows=[
        daily_row(FILE, None, 34.0), daily_row(FILE, "TestNN", 34.0),
        daily_row("test_ops", None, 7.0), daily_row("test_ops", "TestOps", 7.0)])
    report = publish_test_times(lake(tmp_path), outputs(tmp_path), day(0))
    assert json.loads(outputs(tmp_path).read_bytes(TEST_TIMES_PATH))[LINUX]["default"] == {FILE: 30.0, "test_ops": 5.0}
    assert report.days_rebuilt == [day(0)]
    # rebuilt once: the next window reads them as they are
    assert publish_test_times(lake(tmp_path), outputs(tmp_path), day(0)).days_rebuilt == []


def test_the_days_a_window_rebuilds_are_materializations_of_their_own_in_dagster(tmp_path):
    """The rebuilt partitions of both time tables are recorded for the run that wrote them, so the
    Dagster UI does not show them as written when they were first built."""
    import dagster as dg

    from resources.configured import LakeResource, OutputsResource
    from torchci_assets.derived.sharding import assets as sharding

    rerun_all(tmp_path, -1, 0)
    build_times(tmp_path, day(-1), day(0))
    rewrite_as_older(tmp_path, "test_time_daily", day(-1), OLDER_DAILY, keep=lambda r: not (r["workflow_id"] and r["file"] is None))
    result = dg.materialize([sharding.test_times_asset], partition_key=day(0), resources={
        "lake": LakeResource(uri=str(tmp_path / "lake")), "outputs": OutputsResource(uri=str(tmp_path / "outputs"))})
    recorded = {(e.asset_key.to_user_string(), e.partition) for e in result.get_asset_materialization_events()}
    assert recorded == {("test_times", day(0)), ("test_time_daily", day(-1)), ("test_time_sha_daily", day(-1))}


def test_a_day_written_by_an_older_version_without_its_test_results_is_read_as_it_is(tmp_path):
    lake(tmp_path).write("test_time_daily", day(-1), pa.Table.from_pylist([daily_row("test_ops", None, 16.0, runs=2)]))
    land(tmp_path, day(0), ([("workflow_job", job_payload(21, 200, "b" * 40))],
                            [run_row(21, 200, "test_add", time=7.0, file=OPS, classname="TestOps")]))
    build_times(tmp_path, day(0))
    report = publish_test_times(lake(tmp_path), outputs(tmp_path), day(0))
    assert (report.days_rebuilt, report.days_outdated_kept) == ([], [day(-1)])
    assert json.loads(outputs(tmp_path).read_bytes(TEST_TIMES_PATH))[LINUX]["default"] == {"test_ops": 23.0 / 3}


def test_commit_times_written_when_attempts_counted_as_runs_are_rebuilt(tmp_path):
    """test_time_sha_daily as written before: commit a's run re-run whole the same day, two runs."""
    rerun_all(tmp_path, -1, 0)
    build_times(tmp_path, day(-1), day(0))
    at = dt.datetime.fromisoformat(f"{day(-1)}T01:00:00+00:00")
    rewrite_as_older(tmp_path, "test_time_sha_daily", day(-1), SHA_COLUMNS, rows=[
        {"build_env": LINUX, "test_config": "default", "file": FILE, "head_sha": "a" * 40, "runs": 2, "time": 64.0,
         "first_at": at}])
    report = write_test_time_regressions(lake(tmp_path), day(0))
    assert commit_times(tmp_path, day(-1)) == {(FILE, "a" * 40): (1, 30.0), ("test_ops", "a" * 40): (1, 5.0)}
    assert report.days_rebuilt == [day(-1)]


def test_only_a_change_to_the_statements_makes_the_time_days_look_written_by_other_sql(tmp_path, monkeypatch):
    """Any edit of the time tables' SQL used to rebuild the window's 16 days once: a reworded
    comment or a re-indented line does not change what the SQL writes, so it rebuilds nothing;
    a changed statement still does."""
    import shutil

    from resources import sql as sql_files
    from resources.sql import SqlFiles
    from torchci_assets.derived.results import stats

    sql = tmp_path / "results" / "sql"
    shutil.copytree(Path(stats.__file__).parent / "sql", sql)

    def version() -> str:
        monkeypatch.setattr(stats, "SQL", SqlFiles(str(tmp_path / "results" / "stats.py")))
        stats.time_rows_version.cache_clear()
        sql_files._read.cache_clear()  # each file is read once per process
        return stats.time_rows_version()

    try:
        shipped = version()
        path = sql / "time_runs.sql"
        text = path.read_text()
        path.write_text("-- reworded: " + text.replace("\n    ", "\n        ").replace("-- The day's", "-- Each day's"))
        assert version() == shipped
        path.write_text(text.replace("coalesce(shard, 1) AS shard", "coalesce(shard, 2) AS shard"))
        assert version() != shipped
        path.write_text(text)
        assert version() == shipped
        macro = sql / "seconds_sum.sql"  # how every time table sums its times
        macro.write_text(macro.read_text().replace("round(s * 1e6)", "floor(s * 1e6)"))
        assert version() != shipped
    finally:
        monkeypatch.undo()
        stats.time_rows_version.cache_clear()
