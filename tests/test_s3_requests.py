"""What the lake and the archive cost in S3 requests, counted by the S3 server itself
(`counting_s3`): on a real endpoint each request is 20-50 ms, so a refresh's freshness on S3 is
its number of requests more than its CPU."""

import collections
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from conftest import free_port, s3_environment, wait_for_port
from counting_s3 import CountingS3
from resources.lake import Lake

ROOT = Path(__file__).resolve().parent.parent
BUCKET = "torchci-requests"
DAY = "2026-11-20"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = free_port()
    s3 = CountingS3(port, tmp_path_factory.mktemp("s3") / "requests.log")
    try:
        wait_for_port(port, s3.proc)
        with s3_environment(s3.endpoint, BUCKET):
            yield s3
    finally:
        s3.stop()


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


def test_the_steps_of_a_refresh_that_read_their_tables_many_times_list_each_folder_once(server, tmp_path):
    """A refresh of a small day after one new webhook file and one run's reports, counted at the
    server: the steps that read their tables many times (the HUD's pages, the flaky verdicts,
    commit health) list each folder they read once (one they write in again after their write)."""
    from refresh_day import DAY as SIM_DAY
    from refresh_day import generate

    generate(tmp_path / "source")
    uri = fresh_uri()
    env = {**os.environ, "TORCHCI_FIRST_DAY": SIM_DAY, "PYTHONPATH": str(ROOT),
           **{f"TORCHCI_{k}_URI": f"{uri}/{k.lower()}" for k in ("ARCHIVE", "LAKE", "OUTPUTS")}}
    out = subprocess.run([sys.executable, str(ROOT / "tests" / "refresh_day.py"), str(tmp_path / "source"), "1"],
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    refresh = json.loads(out.stdout.splitlines()[-1])[1]
    requests = [r for r in server.requests(refresh["start"]) if r[0] <= refresh["end"]]
    for step in ("hud_site", "flaky_tests_assets", "commit_health"):
        start, end = refresh["steps"][step]
        during = [(op, where) for at, op, where in requests if start <= at <= end]
        written = {where.rsplit("/", 1)[0] + "/" for op, where in during
                   if op in ("PutObject", "CreateMultipartUpload", "CopyObject", "DeleteObject")}
        listed = collections.Counter(where for op, where in during if op == "ListObjects" and "/lake/" in where
                                     and "/day=" in where and where not in written)
        assert len(listed) > 10 and max(listed.values()) == 1, (step, listed.most_common(3))
