"""Test reports as GitHub Actions artifact zips, made by zipping real pytest JUnit output
(tests/data/junit-artifact), read by the test-report ingest like bare reports."""

import io
import struct
import zipfile
import zlib
from pathlib import Path

import duckdb
import pytest

from resources.lake import Lake
from resources.storage import Store
from torchci_assets.ingest.reports import ingest_test_run_day

DAY = "2026-11-02"
DATA = Path(__file__).parent / "data" / "junit-artifact"
JOB = "15000000001/2/42000000007"
OPS = "test/test-reports/python-pytest/test_ops/test_ops-5f2c.xml"
CONV = "test/test-reports/python-pytest/nn/test_convolution/nn.test_convolution-9a1e.xml"


def make_zip(members: dict[str, bytes], method=zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def real(name: str) -> bytes:
    return (DATA / name).read_bytes()


def put(root: Path, rel: str, data: bytes) -> None:
    path = root / "test-reports" / f"day={DAY}" / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def ingest(root: Path):
    lake = Lake.at(str(root / "lake"))
    report = ingest_test_run_day(Store(str(root / "archive")), lake, DAY)
    rows = duckdb.sql(f"SELECT * EXCLUDE (message) FROM read_parquet('{root}/lake/test_run/day={DAY}/*.parquet', "
                      "hive_partitioning=false) ORDER BY ALL").fetchall()
    return report, rows


def test_a_zip_reads_like_its_reports_as_bare_files(tmp_path):
    put(tmp_path / "bare" / "archive", f"{JOB}/{OPS}", real("test_ops.xml"))
    put(tmp_path / "bare" / "archive", f"{JOB}/{CONV}", real("test_convolution.xml"))
    put(tmp_path / "zipped" / "archive", f"{JOB}/test-reports-runattempt2-test-default-1-2-linux.2xlarge_42000000007.zip",
        make_zip({"test/": b"", OPS: real("test_ops.xml"), CONV: real("test_convolution.xml"),
                  "test/test-reports/usage_log.txt": b"not a report"}))
    bare, bare_rows = ingest(tmp_path / "bare")
    zipped, zipped_rows = ingest(tmp_path / "zipped")
    assert zipped.reject_count == bare.reject_count == 0
    assert zipped_rows == bare_rows and len(zipped_rows) == 6
    # the invoking file comes from the member's folders, as from a bare file's
    files = duckdb.sql(f"SELECT DISTINCT invoking_file, status FROM '{tmp_path}/zipped/lake/test_run/*/*.parquet' "
                       "ORDER BY ALL").fetchall()
    assert ("nn/test_convolution", "failed") in files and ("test_ops", "skipped") in files


def _rejects(report) -> list[tuple[str, str]]:
    return [(r.location, r.reason.split(":")[0]) for r in report.rejects["test-reports"]]


def test_bombs_traversal_and_broken_members_are_rejected_and_the_rest_is_read(tmp_path, monkeypatch):
    root = tmp_path / "archive"
    bomb = b"<testsuite>" + b" " * (40 << 20) + b"</testsuite>"  # 40 MB of spaces: ~1000x
    zname = f"{JOB}/test-reports-x_42000000007.zip"
    put(root, zname, make_zip({"test/../../evil.xml": real("test_ops.xml"),
                               "/abs/test_ops.xml": real("test_ops.xml"),
                               "test/test-reports/python-pytest/bomb/bomb.xml": bomb,
                               OPS: real("test_ops.xml")}))
    good = make_zip({CONV: real("test_convolution.xml")})
    put(root, "15000000001/2/42000000008/test-reports-y_42000000008.zip", good)
    report, rows = ingest(tmp_path)
    where = f"test-reports/day={DAY}/{zname}"
    assert sorted(_rejects(report)) == sorted([
        (f"{where}/test/../../evil.xml", "unsafe-path"), (f"{where}//abs/test_ops.xml", "unsafe-path"),
        (f"{where}/test/test-reports/python-pytest/bomb/bomb.xml", "zip-bomb")])
    assert {r[2] for r in rows} == {42000000007, 42000000008} and len(rows) == 6


def test_the_zip_total_cap_counts_bytes_actually_decompressed(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHCI_MAX_ZIP_BYTES", str(len(real("test_ops.xml")) + 100))
    put(tmp_path / "archive", f"{JOB}/test-reports-x_42000000007.zip",
        make_zip({OPS: real("test_ops.xml"), CONV: real("test_convolution.xml")}))
    report, rows = ingest(tmp_path)
    assert [reason for _, reason in _rejects(report)] == ["zip-too-large"]
    assert len(rows) == 4  # test_ops.xml, read before the budget ran out


@pytest.mark.parametrize("damage", ["truncated", "crc"])
def test_a_damaged_zip_is_a_reject_naming_it(tmp_path, damage):
    data = make_zip({OPS: real("test_ops.xml"), CONV: real("test_convolution.xml")}, zipfile.ZIP_STORED)
    if damage == "truncated":  # the central directory is cut off
        data = data[: len(data) - 60]
    else:  # a byte of the first member's content changes: its CRC no longer matches
        i = data.index(b"test_add")
        data = data[:i] + b"X" + data[i + 1:]
    zname = f"{JOB}/test-reports-x_42000000007.zip"
    put(tmp_path / "archive", zname, data)
    put(tmp_path / "archive", f"{JOB}/{CONV}", real("test_convolution.xml"))  # the day's other report
    report, rows = ingest(tmp_path)
    ((location, reason),) = _rejects(report)
    assert reason == "corrupt-zip"
    if damage == "truncated":
        assert location == f"test-reports/day={DAY}/{zname}"
        assert len(rows) == 2
    else:
        assert location == f"test-reports/day={DAY}/{zname}/{OPS}"
        assert len(rows) == 2  # the zip's CONV member and the bare CONV fold into the same tests


def patch_member(data: bytes, name: str, *, flag: int = 0, method: int | None = None) -> bytes:
    """`data` with member `name` marked in its local header and its central directory entry, as a
    zipper that encrypts (flag bit 0) or uses another compression method (Deflate64 is 9) writes it."""
    out = bytearray(data)
    for sig, flag_at, method_at, name_len_at, header in ((b"PK\x03\x04", 6, 8, 26, 30), (b"PK\x01\x02", 8, 10, 28, 46)):
        i = out.find(sig)
        while i >= 0:
            n = int.from_bytes(out[i + name_len_at:i + name_len_at + 2], "little")
            if bytes(out[i + header:i + header + n]) == name.encode():
                out[i + flag_at] |= flag
                if method is not None:
                    out[i + method_at:i + method_at + 2] = method.to_bytes(2, "little")
            i = out.find(sig, i + 4)
    return bytes(out)


@pytest.mark.parametrize("patch, reason", [({"flag": 1}, "encrypted"), ({"method": 9}, "unsupported-method")],
                         ids=["encrypted", "deflate64"])
def test_a_member_zipfile_cannot_open_is_a_reject_and_the_rest_is_read(tmp_path, patch, reason):
    data = patch_member(make_zip({OPS: real("test_ops.xml"), CONV: real("test_convolution.xml")}), OPS, **patch)
    zname = f"{JOB}/test-reports-x_42000000007.zip"
    put(tmp_path / "archive", zname, data)
    report, rows = ingest(tmp_path)
    assert _rejects(report) == [(f"test-reports/day={DAY}/{zname}/{OPS}", reason)]
    assert len(rows) == 2  # test_convolution.xml's tests


def flood_zip(report: bytes, extra: int, zip64: bool) -> bytes:
    """A zip of one stored report and `extra` central directory entries of 7-byte names (no data:
    listing does not read it), ended by a plain end record or a zip64 one as zippers write them."""
    crc, name = zlib.crc32(report), OPS.encode()
    local = struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, 0, 0, 0, crc, len(report), len(report), len(name), 0)
    entry = struct.Struct("<4s6H3L5H2L")
    directory = b"".join([entry.pack(b"PK\x01\x02", 20, 20, 0, 0, 0, 0, crc, len(report), len(report), len(name),
                                     0, 0, 0, 0, 0, 0) + name,
                          *(entry.pack(b"PK\x01\x02", 20, 20, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0) + b"%07d" % i
                            for i in range(extra))])
    offset, count = len(local) + len(report), extra + 1
    short = min(count, 0xFFFF)
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, short, short, len(directory), offset, 0)
    if zip64:
        at = offset + len(directory)
        end = (struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, count, count, len(directory), offset)
               + struct.pack("<4sLQL", b"PK\x06\x07", 0, at, 1) + end)
    return local + report + directory + end


@pytest.mark.parametrize("zip64", [False, True], ids=["plain", "zip64"])
def test_a_zip_whose_directory_is_too_large_to_list_is_rejected_before_it_is_listed(tmp_path, zip64):
    """zipfile builds every entry of the directory (non-reports too) before MAX_MEMBERS can be checked."""
    extra = (8 << 20) // 53 + 1  # a directory of 8 MiB: ~50 MB of zipfile's objects, for one report
    zname = f"{JOB}/test-reports-x_42000000007.zip"
    put(tmp_path / "archive", zname, flood_zip(real("test_ops.xml"), extra, zip64))
    put(tmp_path / "archive", f"15000000001/2/42000000008/{CONV}", real("test_convolution.xml"))
    report, rows = ingest(tmp_path)
    assert _rejects(report) == [(f"test-reports/day={DAY}/{zname}", "zip-too-many")]
    assert len(rows) == 2  # the other job's report


@pytest.mark.parametrize("zip64", [False, True], ids=["plain", "zip64"])
def test_the_directory_extent_is_read_where_zipfile_reads_it(zip64):
    from torchci_assets.ingest.report_zips import directory_extent

    data = flood_zip(real("test_ops.xml"), 10, zip64)
    assert len(zipfile.ZipFile(io.BytesIO(data)).infolist()) == 11
    assert directory_extent(io.BytesIO(data)) == (11, 46 + len(OPS) + 10 * (46 + 7))
    commented = make_zip({OPS: b"x"})[:-2] + struct.pack("<H", 5) + b"hello"  # an archive comment
    assert directory_extent(io.BytesIO(commented)) == (1, 46 + len(OPS))
    assert directory_extent(io.BytesIO(b"not a zip")) is None
