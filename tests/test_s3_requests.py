"""What the lake and the archive cost in S3 requests, counted by the S3 server itself
(`counting_s3`): on a real endpoint each request is 20-50 ms, so a refresh's freshness on S3 is
its number of requests more than its CPU."""

import collections
import datetime as dt
import hashlib
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from counting_s3 import serving
from resources.lake import Lake, connect
from resources.storage import s3_options

ROOT = Path(__file__).resolve().parent.parent
BUCKET = "torchci-requests"
DAY = "2026-11-20"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("s3") / "requests.log", BUCKET) as s3:
        yield s3


def fresh_uri() -> str:
    return f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}"


def test_a_lake_lists_a_day_folder_once_until_it_writes_there(server):
    """A step reads the same tables again and again (the HUD's pages, the flaky verdicts' windows):
    its lake lists each day folder once, and again only after writing in the lake itself."""
    lake = Lake.at(fresh_uri(), keep_listings=True)
    lake.write("t", DAY, pa.table({"x": [1]}), part="data")
    since = time.time()
    first = lake.files("t", [DAY])
    again = [lake.files("t", [DAY]) for _ in range(3)]
    assert server.counts(since)["ListObjects"] == 1
    assert again == [first] * 3 and [p.rsplit("/", 1)[1] for p in first] == ["data.parquet"]
    lake.write("t", DAY, pa.table({"x": [2]}), part="inc-1")
    assert [p.rsplit("/", 1)[1] for p in lake.files("t", [DAY])] == ["data.parquet", "inc-1.parquet"]


def test_a_store_keeping_listings_answers_every_listing_of_a_folder_from_one_until_it_changes_there(server):
    """A step's store (`Lake(keep_listings=True)`): the Parquet files, the hidden files, the
    journals and the staging files of a folder come from one listing, taken again after its own
    write there and not before; a folder with folders in it is listed to the bottom, its files
    there included; a folder three levels down (whose changes are not counted) is never kept."""
    lake = Lake.at(fresh_uri(), keep_listings=True)
    store, folder = lake.store, f"t/day={DAY}"
    lake.write("t", DAY, pa.table({"x": [1]}), part="a")
    store.write_bytes(f"{folder}/_manifest.json", b"{}")
    since = time.time()
    assert names(lake.files("t", [DAY])) == ["a.parquet"]
    assert [e.path.rsplit("/", 1)[1] for e in store.list_folder(folder)] == ["_manifest.json", "a.parquet"]
    assert store.journals(folder) == [] and store.sweep_staging(folder, lambda owner: False) == []
    assert listed(server, since) == [f"{store.root}/{folder}/"]
    lake.write("t", DAY, pa.table({"x": [2]}), part="b")
    since = time.time()
    assert names(lake.files("t", [DAY])) == ["a.parquet", "b.parquet"] == names(lake.files("t", [DAY]))
    assert len(listed(server, since)) == 1
    store.write_bytes(f"u/day={DAY}/deep/x.parquet", store.read_bytes(f"{folder}/a.parquet"))
    assert [e.path for e in store.list_files(f"u/day={DAY}", (".parquet",))] == [f"u/day={DAY}/deep/x.parquet"]
    since = time.time()
    assert len(store.list_folder(f"u/day={DAY}/deep")) == 1 == len(store.list_folder(f"u/day={DAY}/deep"))
    assert len(listed(server, since)) == 2


def window(last: str, length: int = 14) -> list[str]:
    end = dt.date.fromisoformat(last)
    return [(end - dt.timedelta(days=length - 1 - i)).isoformat() for i in range(length)]


def listed(server, since: float) -> list[str]:
    return [where for _, op, where in server.requests(since) if op == "ListObjects"]


@pytest.mark.parametrize("keep_listings", [False, True])
def test_a_window_of_a_table_that_has_one_of_its_days_lists_the_table_not_every_day(server, keep_listings):
    """A 14-day window over a table that has only its last day (a young archive or table): the
    oldest day's folder, found empty, has the table's day folders listed, and only the day there
    is: three listings, not fourteen. A day another process adds is seen at the next read of a
    lake that keeps no listings; one that keeps them lists nothing again until it writes there."""
    lake = Lake.at(fresh_uri(), keep_listings=keep_listings)
    lake.write("t", DAY, pa.table({"x": [1]}))
    root = lake.store.root
    since = time.time()
    assert names(lake.files("t", window(DAY))) == ["data.parquet"]
    assert listed(server, since) == [f"{root}/t/day=2026-11-07/", f"{root}/t/", f"{root}/t/day={DAY}/"]
    with pafs.S3FileSystem(**s3_options()).open_output_stream(f"{root}/t/day=2026-11-19/other.parquet") as out:
        pq.write_table(pa.table({"x": [2]}), out)  # not through this process's Store
    since = time.time()
    again = names(lake.files("t", window(DAY)))
    assert (len(listed(server, since)), again) == ((0, ["data.parquet"]) if keep_listings else
                                                   (4, ["data.parquet", "other.parquet"]))
    lake.write("t", "2026-11-18", pa.table({"x": [3]}), part="mine")
    assert names(lake.files("t", window(DAY))) == ["data.parquet", "mine.parquet", "other.parquet"]


def test_a_window_of_a_table_that_has_all_its_days_lists_each_day_once_and_nothing_more(server):
    """The archive of a deployment past its first weeks has every day of a window: each is listed,
    the table's days are not."""
    lake = Lake.at(fresh_uri())
    for day in window(DAY, 4):
        lake.write("t", day, pa.table({"x": [1]}))
    since = time.time()
    assert len(lake.files("t", window(DAY, 4))) == 4
    assert sorted(listed(server, since)) == [f"{lake.store.root}/t/day={d}/" for d in window(DAY, 4)]


class _ReadsMidway:
    """The filesystem of a store whose deletes and renames let another reader list the folder
    first, as a reader in another thread of the process may between a change's start and its end."""

    def __init__(self, fs, read):
        self._fs, self._read = fs, read

    def __getattr__(self, name):
        return getattr(self._fs, name)

    def delete_file(self, path):
        self._read()
        self._fs.delete_file(path)

    def move(self, src, dest):
        self._read()
        self._fs.move(src, dest)


@pytest.mark.parametrize("change", ["delete", "rename"])
def test_a_listing_taken_while_another_store_changes_the_folder_is_not_kept_past_the_change(server, change):
    """Two Stores of one lake in a process (a code server's sensors and steps, tests) share the
    count of writes per folder; a listing taken while the other changed the folder is taken again."""
    uri = fresh_uri()
    writer, reader = Lake.at(uri), Lake.at(uri, keep_listings=True)
    writer.write("t", DAY, pa.table({"x": [1]}), part="a")
    staged = f"t/day={DAY}/.b.parquet.tmp"
    writer.store.write_bytes(staged, writer.store.read_bytes(f"t/day={DAY}/a.parquet"))
    if change == "delete":
        writer.store.commit_files([], [(staged, f"t/day={DAY}/b.parquet")])
    midway = []
    writer.store.fs = _ReadsMidway(writer.store.fs, lambda: midway.append(names(reader.files("t", [DAY]))))
    if change == "delete":
        writer.store.delete(f"t/day={DAY}/b.parquet")
    else:
        writer.store.commit_files([], [(staged, f"t/day={DAY}/b.parquet")])
    before, after = (["a.parquet", "b.parquet"], ["a.parquet"]) if change == "delete" else \
        (["a.parquet"], ["a.parquet", "b.parquet"])
    assert midway == [before]
    assert names(reader.files("t", [DAY])) == after


def names(paths: list[str]) -> list[str]:
    return sorted(p.rsplit("/", 1)[1] for p in paths)


def two_days(lake: Lake) -> list[str]:
    """A table of two day files, the second with a column the first lacks; their paths, listed."""
    lake.write("t", DAY, pa.table({"x": [1, 2]}))
    lake.write("t", "2026-11-21", pa.table({"x": [3], "y": ["a"]}))
    return lake.files("t", [DAY, "2026-11-21"])


def test_reading_files_the_lake_listed_asks_no_sizes(server):
    """pyarrow opens a file by path with a HeadObject for its size; the listing gave it already."""
    lake = Lake.at(fresh_uri())
    files = two_days(lake)
    since = time.time()
    assert lake.read_files(files, columns=["y", "x"]).to_pylist() == [
        {"y": None, "x": 1}, {"y": None, "x": 2}, {"y": "a", "x": 3}]
    assert lake.rows_in(files) == 3
    con = connect()
    lake.register_files(con, files, "t")
    assert con.execute("SELECT day::VARCHAR, x, y FROM t ORDER BY x").fetchall() == [
        (DAY, 1, None), (DAY, 2, None), ("2026-11-21", 3, "a")]
    assert server.counts(since)["HeadObject"] == 0


def test_a_view_reads_each_footer_once(server):
    """A view over S3 files reads each file's footer to learn its schema; its query reads the data
    and not the footer again: two GetObjects a small file, the footer and its one row group."""
    lake = Lake.at(fresh_uri())
    files = two_days(lake)
    since = time.time()
    con = connect()
    lake.register_files(con, files, "t")
    assert con.execute("SELECT sum(x), count(y) FROM t").fetchall() == [(6, 1)]
    assert server.counts(since)["GetObject"] == 2 * len(files)


def test_a_file_another_writer_replaced_since_the_listing_is_read_as_it_is_now(server):
    """A listing kept by a step (or read a moment before) can hold a size another process's write
    has changed since: the read at that size fails, and the file is read again at its size now."""
    lake = Lake.at(fresh_uri(), keep_listings=True)
    files = two_days(lake)
    bigger = pa.table({"x": list(range(100, 1100))})
    with pafs.S3FileSystem(**s3_options()).open_output_stream(files[0]) as out:  # not through this process's Store
        pq.write_table(bigger, out)
    assert lake.files("t", [DAY, "2026-11-21"]) == files  # the kept listing, and its sizes
    assert lake.rows_in(files) == 1001
    assert lake.read_files(files[:1], columns=["x"]).column("x").to_pylist() == list(range(100, 1100))
    con = connect()
    lake.register_files(con, files, "t")
    assert con.execute("SELECT count(*), sum(x) FROM t").fetchall() == [(1001, sum(range(100, 1100)) + 3)]


def test_a_record_is_read_with_one_head_and_one_get(server):
    """A step's records (an extract's index, a layout, a ledger's note) are read where they may be
    missing: the open's HeadObject says so, no HeadObject of its own first."""
    lake = Lake.at(fresh_uri())
    lake.store.write_bytes("t/day=2026-11-20/_index.json", b'{"a": 1}')
    since = time.time()
    assert lake.read_record("t/day=2026-11-20/_index.json", json.loads) == {"a": 1}
    assert lake.read_record("t/day=2026-11-20/_gone.json", json.loads) is None
    assert server.counts(since) == {"HeadObject": 2, "GetObject": 1}


def test_an_extract_read_after_its_folder_was_listed_asks_no_size(server):
    """Lake extracts are named from their folder's listing (`Store.list_folder`) and then read."""
    lake = Lake.at(fresh_uri())
    lake.write("t", DAY, pa.table({"x": [1, 2]}), part="_extract")
    lake.store.list_folder(f"t/day={DAY}")
    since = time.time()
    assert lake.rows_in([lake.store.full(f"t/day={DAY}/_extract.parquet")]) == 2
    assert server.counts(since)["HeadObject"] == 0


def footer_digest(lake: Lake, rel: str) -> str:
    """`Lake.file_digest` as it was first written: the file's place and its footer, read apart."""
    data = lake.store.read_bytes(rel)
    start = max(0, len(data) - 8 - int.from_bytes(data[-8:-4], "little")) if len(data) >= 12 else 0
    return hashlib.sha256(("/".join(rel.rsplit("/", 3)[-3:])).encode() + data[start:]).hexdigest()


def test_a_file_digest_is_one_get_of_the_footer_and_the_same_digest(server):
    """Naming an extract digests its source's footer at every refresh until the index vouches for
    the file: one ranged read of the file's end, not one for the footer's length and another for
    the footer. A footer larger than that read takes a second one. The digest is the same as
    ever: a changed one would rename every extract once."""
    lake = Lake.at(fresh_uri())
    lake.write("t", DAY, pa.table({"x": [1, 2]}))
    wide = pa.table({f"column_{i:04d}_{'y' * 40}": [i] for i in range(1500)})  # a footer over 64 KiB
    lake.write("t", DAY, wide, part="wide")
    small, big = lake.files("t", [DAY])
    for path, gets in ((small, 1), (big, 2)):
        since = time.time()
        digest = lake.file_digest(path)
        assert server.counts(since) == {"HeadObject": 1, "GetObject": gets}
        assert digest == footer_digest(lake, path.split("/", 2)[2])


def test_a_file_this_process_wrote_is_read_without_a_head(server):
    """A step reads back what it wrote a moment before (its own partition's footers for the
    catalog, its kept sums, a classification it keeps): the size it wrote is the size to read."""
    lake = Lake.at(fresh_uri())
    lake.write("t", DAY, pa.table({"x": [1, 2, 3]}), part="_kept")
    path = lake.store.full(f"t/day={DAY}/_kept.parquet")
    since = time.time()
    assert lake.rows_in([path]) == 3
    assert lake.read_files([path]).column("x").to_pylist() == [1, 2, 3]
    assert server.counts(since)["HeadObject"] == 0


def test_an_extract_index_the_listing_does_not_show_is_not_asked_for(server, tmp_path):
    """A day's extracts list their folder anyway (which extracts are there): an index that the
    listing does not show is not opened to learn that it is missing."""
    from resources import lake_extracts
    from resources.sql import SqlFiles

    lake = Lake.at(fresh_uri())
    lake.write("src", DAY, pa.table({"x": [1, 2, 3]}))
    (tmp_path / "sql").mkdir()
    (tmp_path / "sql" / "picked.sql").write_text("SELECT x FROM src WHERE x > 1")
    extract = lake_extracts.Extract("picked", "src", "readers", SqlFiles(str(tmp_path / "module.py")))
    since = time.time()
    files = lake_extracts.day_extracts(lake, extract, DAY)
    assert lake.read_files(files).column("x").to_pylist() == [2, 3]
    assert [w for _, op, w in server.requests(since) if op == "HeadObject" and w.endswith("index.json")] == []


def test_a_pass_reading_an_extract_over_overlapping_windows_brings_each_day_up_to_date_once(server, tmp_path):
    """Dr. CI reads test_results' failures three times a refresh, over windows of three and seven
    days: the days read before are not listed nor their sources' footers read again."""
    from resources import lake_extracts
    from resources.sql import SqlFiles

    lake = Lake.at(fresh_uri())
    days = ["2026-11-19", DAY]
    for i, day in enumerate(days):
        lake.write("src", day, pa.table({"x": [i, 10 + i]}))
    (tmp_path / "sql").mkdir()
    (tmp_path / "sql" / "picked.sql").write_text("SELECT x FROM src WHERE x > 5")
    extract = lake_extracts.Extract("picked", "src", "readers", SqlFiles(str(tmp_path / "module.py")))
    seen = lake_extracts.ExtractPass()
    con = connect()
    assert lake_extracts.register_extract(con, lake, extract, days[1:], "v", seen) == 1
    since = time.time()
    assert lake_extracts.register_extract(con, lake, extract, days, "v", seen) == 2
    assert con.execute("SELECT x FROM v ORDER BY x").fetchall() == [(10,), (11,)]
    assert [w for _, op, w in server.requests(since) if op == "ListObjects"] == [
        f"{lake.store.root}/src/day=2026-11-19/", f"{lake.store.root}/readers/day=2026-11-19/"]


def _drci_lake(uri: str) -> tuple[Lake, str, dt.datetime]:
    """A lake on S3 of a day with main's commits, a pull request and their jobs, ready for Dr. CI:
    the lake, the day and the time to build as of."""
    from hud_lake import DAY as HUD_DAY
    from test_drci import HEAD, _main_broke_the_build_and_so_did_pr_50
    from torchci_assets.derived.hud.health import build_commit_health, build_pr_jobs

    h, now = _main_broke_the_build_and_so_did_pr_50()
    h.job(HEAD, "linux-jammy / build", "failure", run_id=500, branch="u/50")
    lake = Lake.at(uri)
    h.write(lake)
    build_commit_health(lake, HUD_DAY, "pytorch/pytorch", ("refs/heads/main",), min_groups=1, now=now)
    build_pr_jobs(lake, HUD_DAY, "pytorch/pytorch", now=now)
    return lake, HUD_DAY, now


def test_a_dr_ci_build_lists_each_folder_of_its_four_extracts_once_and_removes_retired_extracts(server):
    """Dr. CI keeps four extracts in `drci_comments/day=D` over windows of 3 to 9 days: a build
    lists each of those folders once, its own writes there kept in the listing, each of its
    sources' day folders once (two of the extracts are of `webhook_events`) and its merge bases'
    days once; the files of an extract it no longer reads (`_deleted_comments-*`), found by those
    listings, go without another."""
    from resources.github import GitHubResource
    from torchci_assets.derived.drci.build import build_comments
    from torchci_assets.derived.drci.inputs import JOB_DAYS, WINDOW_DAYS
    from torchci_assets.partitions import days_ending

    lake, day, now = _drci_lake(fresh_uri())
    offline = GitHubResource(api_url="http://127.0.0.1:9")

    def listed_during_a_build() -> tuple[collections.Counter, set[str], list[dict], list[str]]:
        since = time.time()
        rows = build_comments(lake, offline, day, "pytorch/pytorch", now=now).rows
        requests = server.requests(since)
        written = {where.rsplit("/", 1)[0] + "/" for _, op, where in requests
                   if op in ("PutObject", "CreateMultipartUpload", "CopyObject", "DeleteObject")}
        deleted = [where.rsplit("/", 1)[1] for _, op, where in requests if op == "DeleteObject"]
        days = collections.Counter(where for _, op, where in requests if op == "ListObjects" and "/day=" in where)
        assert max(days.values()) == 1, days.most_common(3)
        # the merge bases' cache, read for the closed pull requests' heads and the open ones'
        assert [where for _, op, where in requests if op == "ListObjects" and "/drci_merge_bases/" in where] == [
            f"{lake.store.root}/drci_merge_bases/"]
        return collections.Counter(where.rsplit("/day=", 1)[1] for where in days
                                   if "/drci_comments/day=" in where), written, rows, deleted

    listed, written, first, _ = listed_during_a_build()
    assert f"{lake.store.root}/drci_comments/day={day}/" in written  # the extracts of the day's files, made
    # The oldest day of each window (3 and 9 days) is listed, found empty: the other days of the
    # window are named by one listing of drci_comments' days, none there yet, today's neither.
    probed = {days_ending(day, WINDOW_DAYS)[0], days_ending(day, JOB_DAYS)[0]}
    assert listed == {f"{d}/": 1 for d in probed}
    older = days_ending(day, WINDOW_DAYS)[0]
    retired = [f"day={day}/_deleted_comments-{'0' * 32}.pq", f"day={day}/_deleted_comments-index.json",
               f"day={older}/_deleted_comments-{'1' * 32}.pq"]
    kept = [f"day={day}/_deleted_comments-{'0' * 31}.pq", f"day={day}/_deleted_comments_v2-index.json",
            f"day={day}/_deleted_comments.json"]
    for rel in retired + kept:
        lake.store.write_bytes(f"drci_comments/{rel}", b"x")
    listed, _, again, deleted = listed_during_a_build()
    # the folders there now (today's, the 3-day window's oldest) and the 9-day window's oldest, once each
    assert listed == {f"{d}/": 1 for d in {*probed, day}}
    assert sorted(deleted) == sorted(rel.rsplit("/", 1)[1] for rel in retired)
    assert sorted(e.path.split("/", 1)[1] for d in (older, day) for e in lake.store.list_folder(f"drci_comments/day={d}")
                  if e.path.startswith("drci_comments/day=") and "_deleted_comments" in e.path) == sorted(kept)
    assert [r["body"] for r in again] == [r["body"] for r in first] and len(first) == 1


def test_footers_read_by_path_after_a_listing_ask_no_sizes(server):
    """The catalog's metadata of a partition, the daily stats' check and the time tables' versions
    read footers of files the lake just listed."""
    from torchci_assets.derived.results.stats import (TIME_ROWS_VERSION_KEY, daily_stats_totals,
                                                       outdated_time_days, time_rows_version)
    from torchci_assets.lake_metadata import table_metadata

    uri = fresh_uri()
    writer = Lake.at(uri)
    writer.write("test_results", DAY, pa.table({"x": [1, 2, 3]}))
    writer.write("test_daily_stats", DAY, pa.table({"runs": [2], "infra_runs": [1]}))
    today = pa.schema([("runs", pa.int64())], metadata={TIME_ROWS_VERSION_KEY: time_rows_version()})
    writer.write("test_daily_stats", "2026-11-21", pa.table({"runs": [1]}, schema=today))
    lake = Lake.at(uri)  # another process's lake: it knows only what it lists
    since = time.time()
    assert table_metadata(lake, "test_results", DAY)["dagster/row_count"] == 3
    assert daily_stats_totals(lake, DAY) == (3, 3)
    assert outdated_time_days(lake, {"test_daily_stats": [DAY, "2026-11-21"]}) == [DAY]
    assert server.counts(since)["HeadObject"] == 0


def test_a_small_file_goes_up_as_one_put_with_its_content_type(server):
    """A file under a part (pyarrow's 10 MB) is one PutObject, not a multipart upload of three
    requests, and S3 keeps the content type it is served with (the HUD's pages, the JSON lists)."""
    store = Lake.at(fresh_uri()).store
    since = time.time()
    store.write_bytes("hud/index.html", b"<html></html>")
    assert server.counts(since) == {"PutObject": 1}
    with store.fs.open_input_stream(store.full("hud/index.html")) as f:
        assert f.metadata()["Content-Type"] == b"text/html; charset=utf-8"


@pytest.fixture(scope="module")
def a_refresh(server, tmp_path_factory) -> tuple[dict, list[tuple[float, str, str]]]:
    """A refresh of a small day after one new webhook file and one run's reports (`refresh_day`):
    its steps' times and the requests the server answered during it."""
    from refresh_day import DAY as SIM_DAY
    from refresh_day import generate

    source = tmp_path_factory.mktemp("day") / "source"
    generate(source)
    uri = fresh_uri()
    env = {**os.environ, "TORCHCI_FIRST_DAY": SIM_DAY, "PYTHONPATH": str(ROOT),
           **{f"TORCHCI_{k}_URI": f"{uri}/{k.lower()}" for k in ("ARCHIVE", "LAKE", "OUTPUTS")}}
    out = subprocess.run([sys.executable, str(ROOT / "tests" / "refresh_day.py"), str(source), "1"],
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    refresh = json.loads(out.stdout.splitlines()[-1])[1]
    return refresh, [r for r in server.requests(refresh["start"]) if r[0] <= refresh["end"]]


CHANGES = ("PutObject", "CreateMultipartUpload", "CopyObject", "DeleteObject", "DeleteObjects")


def during(a_refresh, step: str) -> list[tuple[str, str]]:
    refresh, requests = a_refresh
    start, end = refresh["steps"][step]
    return [(op, where) for at, op, where in requests if start <= at <= end]


def test_the_steps_of_a_refresh_that_read_their_tables_many_times_list_each_folder_once(a_refresh):
    """The steps that read their tables many times (the HUD's pages, the flaky verdicts, commit
    health) list each folder they read once (one they write in again after their write)."""
    for step in ("hud_site", "flaky_tests_assets", "commit_health"):
        requests = during(a_refresh, step)
        written = {where.rsplit("/", 1)[0] + "/" for op, where in requests if op in CHANGES}
        listed = collections.Counter(where for op, where in requests if op == "ListObjects" and "/lake/" in where
                                     and "/day=" in where and where not in written)
        assert len(listed) > 5 and max(listed.values()) == 1, (step, len(listed), listed.most_common(3))


def listed_again_unchanged(requests: list[tuple[str, str]]) -> list[str]:
    """The listings of a folder that this step listed before and has not changed since. A listing
    of `folder/name/` (whether `name` is a folder: how pyarrow asks if a file is missing) counts
    as one of `folder`."""
    seen, again = set(), []
    for op, where in requests:
        folder = where.rstrip("/")
        if op == "ListObjects":
            folder = folder.rsplit("/", 1)[0] if folder.endswith((".parquet", ".json", ".pq")) else folder
            if folder in seen:
                again.append(folder)
            seen.add(folder)
        elif op in CHANGES:
            seen.discard(folder.rsplit("/", 1)[0])
    return again


@pytest.mark.parametrize("step", ["webhook_assets", "test_run_assets", "ci_result_assets", "job_failure_assets",
                                  "test_results_assets", "test_daily_stats_assets", "commit_health",
                                  "flaky_tests_assets"])
def test_a_step_writing_the_day_lists_a_folder_again_only_after_changing_it(a_refresh, step):
    """An ingest's increment reads its folders for its manifest's check, its commit (journals
    left, files already there), its manifest, the sweep of staging files, its checks and its
    catalog metadata; the steps after it read theirs as many times: one listing of each folder
    serves them all until the step changes something there. What it lists is its own (one run of
    a partition at a time; in `rejects`, its own parts) or its inputs', which no other run writes."""
    requests = during(a_refresh, step)
    again = listed_again_unchanged(requests)
    assert again == [], (len(again), collections.Counter(again).most_common(4))
    assert sum(op == "ListObjects" for op, _ in requests) > 2
