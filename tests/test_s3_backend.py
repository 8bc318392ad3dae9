"""What only S3 has: endpoint settings, multipart uploads, the lake read through pyarrow, the
relay sensor's cursor over an S3 archive. The shared behaviour is tested on both backends by
the tests that take the `roots` fixture."""

import json
import os

import dagster as dg
import pyarrow as pa
import pyarrow.fs as pafs

from conftest import S3_BUCKET, Roots, envelope, jsonl_bytes
from jobs.relay import upstream_commit_sensor
from resources.configured import ArchiveResource
from resources.github import GitHubResource
from resources.lake import Lake, connect
from resources.storage import Store, s3_options
from torchci_assets.relay.pushes import RelayCursor


def test_endpoint_and_region_come_from_the_environment(monkeypatch):
    for key in ("TORCHCI_S3_ENDPOINT", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(key, raising=False)
    assert s3_options() == {"region": "us-east-1"}  # AWS itself: the SDK's default endpoint
    monkeypatch.setenv("TORCHCI_S3_ENDPOINT", "http://minio.local:9000")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    assert s3_options() == {"region": "eu-west-1", "scheme": "http", "endpoint_override": "minio.local:9000"}
    monkeypatch.setenv("TORCHCI_S3_ENDPOINT", "storage.example.com")
    monkeypatch.setenv("AWS_REGION", "ap-south-1")
    assert s3_options() == {"region": "ap-south-1", "scheme": "https", "endpoint_override": "storage.example.com"}


def test_a_large_file_goes_up_in_parts_and_appears_only_when_complete(s3_server):
    store = Store(f"s3://{S3_BUCKET}/large-{os.getpid()}")
    payload = os.urandom(1 << 20) * 12  # 12 MB: above pyarrow's 10 MB part size, so a multipart upload
    with store.atomic_output("outputs/big.bin") as out:
        for i in range(0, len(payload), 1 << 20):
            out.write(payload[i:i + (1 << 20)])
        assert not store.exists("outputs/big.bin")
    assert store.read_bytes("outputs/big.bin") == payload
    # nothing but the object itself: no staging keys, no folder markers
    keys = [i.path for i in store.fs.get_file_info(pafs.FileSelector(store.full(""), recursive=True))
            if i.type == pafs.FileType.File]
    assert keys == [store.full("outputs/big.bin")]


def test_objects_are_served_with_their_content_type(s3_server):
    """A website bucket serves the HUD with the type its objects were stored with: a page stored
    as application/octet-stream would be downloaded, not shown. Read with a signed HEAD (pyarrow's):
    moto answers an anonymous one 403 for an object a PutObject made, as for boto3's own, where S3
    leaves anonymous reads to the bucket's policy."""
    prefix = f"types-{os.getpid()}"
    store = Store(f"s3://{S3_BUCKET}/{prefix}")
    for rel in ("hud/index.html", "stats/test-times.json", "webhooks/day=2026-11-01/a.jsonl.gz"):
        store.write_bytes(rel, b"{}")
    kinds = {rel: store.fs.open_input_stream(store.full(rel)).metadata()["Content-Type"].decode()
             for rel in ("hud/index.html", "stats/test-times.json", "webhooks/day=2026-11-01/a.jsonl.gz")}
    assert kinds == {"hud/index.html": "text/html; charset=utf-8",
                     "stats/test-times.json": "application/json; charset=utf-8",
                     "webhooks/day=2026-11-01/a.jsonl.gz": "application/octet-stream"}


def test_lake_views_on_s3_match_local_ones_across_schema_changes(s3_server, tmp_path):
    """A column added on a later day, types promoted: S3 (pyarrow dataset) and local (DuckDB)
    give the same rows, the same types and the same `day` DATE column."""
    local, remote = Lake.at(str(tmp_path / "lake")), Lake.at(f"s3://{S3_BUCKET}/views-{os.getpid()}")
    for lake in (local, remote):
        lake.write("t", "2026-11-01", pa.table({"id": pa.array([1, 2], pa.int32()), "name": ["a", "b"]}))
        lake.write("t", "2026-11-02", pa.table({"id": pa.array([3], pa.int64()), "name": ["c"], "extra": [1.5]}))
    results = []
    for lake in (local, remote):
        con = connect()
        assert lake.register(con, "t", ["2026-11-01", "2026-11-02"]) == 2
        cur = con.execute("SELECT * FROM t ORDER BY id")
        results.append(([(d[0], str(d[1])) for d in cur.description], cur.fetchall()))
    assert results[0] == results[1]
    assert results[0][0] == [("id", "BIGINT"), ("name", "VARCHAR"), ("extra", "DOUBLE"), ("day", "DATE")]


def test_the_relay_sensor_cursor_works_over_an_s3_archive(s3_server, monkeypatch, tmp_path):
    (tmp_path / "relay.yaml").write_text("upstream: {repo: pytorch/pytorch, branches: [main]}\n"
                                         "allowlist: {L1: [org/backend]}\n")
    monkeypatch.setenv("TORCHCI_CONFIG", str(tmp_path / "relay.yaml"))
    roots = Roots(f"s3://{S3_BUCKET}/sensor-{os.getpid()}")

    def push(n):
        return envelope("push", f"d{n}", {"ref": "refs/heads/main", "after": f"{n:040x}", "before": f"{n - 1:040x}",
                                          "repository": {"full_name": "pytorch/pytorch"},
                                          "head_commit": {"id": f"{n:040x}"}}, "2026-11-22T03:00:00Z")

    def tick(cursor):
        with dg.build_sensor_context(cursor=cursor, resources={
                "archive": ArchiveResource(uri=roots.archive_uri), "github": GitHubResource()}) as ctx:
            result = upstream_commit_sensor(ctx)
        return [r.run_key for r in result.run_requests or []], result.cursor

    roots.write("webhooks/day=2026-11-22/a.jsonl", [push(1)])
    keys, cursor = tick(None)
    assert keys == [] and RelayCursor.from_json(cursor).files == {"2026-11-22": {"a.jsonl": len(jsonl_bytes("a", [push(1)]))}}
    roots.write("webhooks/day=2026-11-22/b.jsonl.gz", [push(2)])
    keys, cursor = tick(cursor)
    assert keys == [f"pytorch/pytorch@{2:040x}"]
    roots.write("webhooks/day=2026-11-22/b.jsonl.gz", [push(2), push(3)])  # an object rewritten larger
    keys, cursor = tick(cursor)
    assert keys == [f"pytorch/pytorch@{3:040x}"]
    assert tick(cursor)[0] == []
    assert json.loads(cursor)  # the cursor is plain JSON, stored by Dagster whatever the backend
