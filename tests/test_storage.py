"""Store on both backends: listing days and files, reading, atomic publishing."""

import datetime as dt
import gzip
import logging
import os

import pyarrow.fs as pafs
import pytest

from conftest import Roots
from resources.storage import Store
from torchci_assets.partitions import partitions_for


def test_listing_days_folders_and_files(roots: Roots):
    a = roots.archive
    for rel in ["webhooks/day=2026-11-02/b.jsonl", "webhooks/day=2026-11-01/a.jsonl.gz",
                "webhooks/day=2026-11-01/sub/c.jsonl", "webhooks/day=2026-11-01/.a.jsonl.tmp-1",
                "webhooks/day=2026-11-01/_SUCCESS", "webhooks/day=2026-11-01/notes.txt",
                "webhooks/day=yesterday/x.jsonl", "webhooks/day=2026-11-03", "webhooks/.hidden/x.jsonl"]:
        a.write_bytes(rel, b"12345")
    assert a.list_days("webhooks") == ["2026-11-01", "2026-11-02"]  # a file named like a day is not one
    assert a.list_days("test-reports") == []
    assert a.list_dirs("webhooks") == ["day=2026-11-01", "day=2026-11-02", "day=yesterday"]
    files = a.list_files("webhooks/day=2026-11-01", (".jsonl", ".jsonl.gz"))
    assert [(f.path, f.size) for f in files] == [("webhooks/day=2026-11-01/a.jsonl.gz", 5),
                                                 ("webhooks/day=2026-11-01/sub/c.jsonl", 5)]
    assert a.list_files("nothing/here", (".jsonl",)) == []


def test_bytes_are_stored_as_given_and_gz_is_read_decompressed(roots: Roots):
    a = roots.archive
    data = gzip.compress(b'{"a": 1}\n' * 1000)
    a.write_bytes("x/day=2026-11-01/f.jsonl.gz", data)  # not compressed a second time
    assert a.read_bytes("x/day=2026-11-01/f.jsonl.gz") == data
    with a.open_input("x/day=2026-11-01/f.jsonl.gz") as f:
        assert f.read() == b'{"a": 1}\n' * 1000
    assert a.exists("x/day=2026-11-01/f.jsonl.gz")
    a.delete("x/day=2026-11-01/f.jsonl.gz")
    a.delete("x/day=2026-11-01/f.jsonl.gz")  # deleting what is gone is not an error
    assert not a.exists("x/day=2026-11-01/f.jsonl.gz")


def test_atomic_output_is_invisible_until_complete_and_a_failure_keeps_the_previous(roots: Roots):
    a = roots.archive
    a.write_bytes("out/test-times.json", b"old")
    with a.atomic_output("out/test-times.json") as out:
        out.write(b"new " * 1000)
        assert a.read_bytes("out/test-times.json") == b"old"  # readers still see the old file
    assert a.read_bytes("out/test-times.json") == b"new " * 1000

    with pytest.raises(RuntimeError):
        with a.atomic_output("out/test-times.json") as out:
            out.write(b"half")
            raise RuntimeError("killed mid-write")
    assert a.read_bytes("out/test-times.json") == b"new " * 1000
    with pytest.raises(RuntimeError):
        with a.atomic_output("out/new-file.json") as out:
            out.write(b"half")
            raise RuntimeError("killed mid-write")
    assert not a.exists("out/new-file.json")
    assert [e.path for e in a.list_files("out", ("",))] == ["out/test-times.json"]
    # and no temporary file is left behind, hidden or not
    left = a.fs.get_file_info(pafs.FileSelector(a.full("out"), recursive=True))
    assert [i.base_name for i in left] == ["test-times.json"]


def test_display_is_what_a_user_would_type(tmp_path):
    assert Store(str(tmp_path / "lake")).display("t/day=2026-11-01") == f"{tmp_path}/lake/t/day=2026-11-01"
    assert Store("s3://bucket/prefix/").display("t") == "s3://bucket/prefix/t"
    assert Store("s3://bucket").full("t/x.parquet") == "bucket/t/x.parquet"


def test_a_folder_only_shaped_like_a_day_is_skipped_with_a_warning(tmp_path, caplog):
    """The partitions start at the archive's first day: a stray `day=2026-02-30` must not stop the
    definitions loading, nor a folder name that is not UTF-8 the listing."""
    webhooks = tmp_path / "archive" / "webhooks"
    for name in ("2026-02-01", "2026-02-02", "2026-02-30", "0000-00-00", "2026-13-01"):
        (webhooks / f"day={name}").mkdir(parents=True)
    os.mkdir(os.path.join(os.fsencode(webhooks), b"day=2026-02-0\xff"))
    with caplog.at_level(logging.WARNING, logger="resources.storage"):
        assert Store(str(tmp_path / "archive")).list_days("webhooks") == ["2026-02-01", "2026-02-02"]
    assert "day=0000-00-00, day=2026-02-30, day=2026-13-01" in caplog.text
    keys = partitions_for({"TORCHCI_ARCHIVE_URI": str(tmp_path / "archive")}, today=dt.date(2026, 5, 1))
    assert keys.get_partition_keys() == ["2026-02-01", "2026-02-02"]
