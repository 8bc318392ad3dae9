"""Archive test reports and test-runs JSONL -> `test_run`: real pytest output, every dialect, rejects."""

import gzip
import shutil

import dagster as dg
from conftest import DATA
from test_junit import run_real_pytest

import torchci_assets.ingest.assets as assets
from resources import ArchiveResource, LakeResource
from resources.lake import Lake, connect
from resources.storage import Store
from torchci_assets.ingest.reports import ingest_test_run_day

DAY = "2026-11-01"  # the day run_real_pytest files its report under


def report_dir(tmp_path, run_id, job_id, attempt=1, day=DAY):
    return (tmp_path / "archive" / "test-reports" / f"day={day}" / str(run_id) / str(attempt) / str(job_id)
            / "test" / "test-reports" / "python-pytest")


def place(tmp_path, data: bytes, run_id, job_id, name, module="test_mod", gz=False):
    folder = report_dir(tmp_path, run_id, job_id) / module
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (name + (".gz" if gz else ""))
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def rows(tmp_path, table="test_run", where="true"):
    con = connect()
    Lake.at(str(tmp_path / "lake")).register(con, table, [DAY], name="t")
    cur = con.execute(f"SELECT * FROM t WHERE {where} ORDER BY ALL")
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def materialize(tmp_path):
    return dg.materialize([assets.test_run_assets], partition_key=DAY, raise_on_error=False, resources={
        "archive": ArchiveResource(uri=str(tmp_path / "archive")), "lake": LakeResource(uri=str(tmp_path / "lake"))})


def archive_with_every_dialect(tmp_path):
    """Real pytest output (job 456), both XML dialects, Surefire, nested suites, gzip, JSONL."""
    run_real_pytest(tmp_path, "-p", "rerunfailures", "--reruns", "2")
    junit = DATA / "junit"
    place(tmp_path, (junit / "pytorch_style.xml").read_bytes(), 200, 2001, "nn.test_convolution-1.xml",
          module="nn.test_convolution")
    place(tmp_path, (junit / "nested_suites.xml").read_bytes(), 200, 2002, "test_jit-2.xml", module="test_jit", gz=True)
    place(tmp_path, (junit / "surefire.xml").read_bytes(), 200, 2003, "surefire-3.xml", module="cache")
    runs = tmp_path / "archive" / "test-runs" / f"day={DAY}"
    runs.mkdir(parents=True)
    (runs / "part-000.jsonl.gz").write_bytes(gzip.compress((junit / "pytorch_test_runs.jsonl").read_bytes()))


def test_every_dialect_and_real_pytest_land_in_test_run(tmp_path):
    archive_with_every_dialect(tmp_path)
    result = materialize(tmp_path)
    assert result.success

    real = {r["name"]: r for r in rows(tmp_path, where="job_id = 456")}
    assert (real["test_flaky"]["status"], real["test_flaky"]["rerun_count"]) == ("passed", 1)
    assert (real["test_fails"]["status"], real["test_fails"]["rerun_count"]) == ("failed", 2)
    assert real["test_fails"]["message"].startswith("AssertionError: arithmetic is broken")
    assert real["test_skipped"]["status"] == "skipped"
    assert {(r["workflow_id"], r["workflow_run_attempt"], r["file"], r["invoking_file"]) for r in real.values()} == \
        {(123, 1, "nn/test_generated.py", "nn/test_generated")}
    assert len(real) == 10

    jobs = {r["job_id"] for r in rows(tmp_path)}
    assert {456, 2001, 2002, 2003, 5001} <= jobs  # 5001: the JSONL rows
    nested = {(r["file"], r["classname"], r["name"]) for r in rows(tmp_path, where="job_id = 2002")}
    assert ("jit/test_dce.py", "TestDCE", "test_setattr_removed") in nested
    # the same test repeated in the nested suites is one row with its attempts
    [repeated] = rows(tmp_path, where="job_id = 2002 AND name = 'test_pass'")
    assert (repeated["file"], repeated["time"], repeated["rerun_count"]) == ("test_jit.py", 1.0, 1)
    surefire = {r["name"]: r for r in rows(tmp_path, where="job_id = 2003")}
    assert (surefire["survivesRestart"]["status"], surefire["survivesRestart"]["rerun_count"]) == ("passed", 2)
    assert (surefire["loadsConfig"]["status"], surefire["loadsConfig"]["time"]) == ("failed", 1234.5)
    jsonl = {r["name"]: r for r in rows(tmp_path, where="job_id = 5001")}
    assert (jsonl["test_conv_broken_cuda"]["status"], jsonl["test_conv_broken_cuda"]["rerun_count"]) == ("failed", 2)

    checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    assert checks == {"unique_test_per_job": True, "required_columns_not_null": True,
                      "reject_rate_below_threshold": True}
    meta = {e.asset_key.to_user_string(): e.materialization.metadata for e in result.get_asset_materialization_events()}
    assert meta["test_run"]["rows"].value == len(rows(tmp_path))
    assert (meta["test_run"]["files"].value, meta["test_run"]["rejects"].value) == (5, 0)
    assert meta["test_run"]["bytes"].value > 0

    again = materialize(tmp_path)  # a re-run replaces the partition exactly
    assert again.success and len(rows(tmp_path)) == meta["test_run"]["rows"].value


def test_hostile_and_broken_inputs_become_rejects_and_the_rest_is_kept(tmp_path):
    archive_with_every_dialect(tmp_path)
    good = ingest_test_run_day(Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "lake")), DAY).rows
    junit = DATA / "junit"
    place(tmp_path, (junit / "billion_laughs.xml").read_bytes(), 300, 3001, "bomb.xml")
    whole = (junit / "pytorch_style.xml").read_bytes()
    place(tmp_path, gzip.compress(whole)[:-40], 300, 3002, "cut.xml", gz=False).rename(
        report_dir(tmp_path, 300, 3002) / "test_mod" / "cut.xml.gz")
    place(tmp_path, whole[: len(whole) // 2], 300, 3003, "half.xml")
    place(tmp_path, b"<html><body>502 Bad Gateway</body></html>", 300, 3004, "proxy.xml")
    stray = tmp_path / "archive" / "test-reports" / f"day={DAY}" / "not-a-run" / "report.xml"
    stray.parent.mkdir(parents=True)
    shutil.copy(junit / "pytorch_style.xml", stray)
    runs = tmp_path / "archive" / "test-runs" / f"day={DAY}"
    (runs / "part-001.jsonl").write_bytes(
        b'{"classname": "TestX", "file": "test_x.py", "name": "test_ok", "time": 1, '
        b'"job_id": 7001, "workflow_id": 700, "workflow_run_attempt": 1}\n'
        b'{not json\n'
        b'{"classname": "TestX", "name": "test_bad_time", "time": "soon", "job_id": 7001, '
        b'"workflow_id": 700, "workflow_run_attempt": 1}\n')

    result = materialize(tmp_path)
    assert result.success  # rejects fail a check, never the run

    reports = {r["location"].split(":")[0].rsplit("/", 1)[1]: r["reason"].split(":")[0]
               for r in rows(tmp_path, "rejects", "source = 'test-reports'")}
    assert reports == {"bomb.xml": "doctype", "cut.xml.gz": "truncated", "half.xml": "truncated",
                       "proxy.xml": "bad-root", "report.xml": "bad-path"}
    lines = {r["location"].rsplit(":", 1)[1]: r for r in rows(tmp_path, "rejects", "source = 'test-runs'")}
    assert sorted(lines) == ["2", "3"]
    assert lines["2"]["reason"].startswith("invalid JSON") and lines["2"]["sample"] == "{not json"
    assert "soon" in lines["3"]["reason"]

    assert len(rows(tmp_path)) == good + 1  # everything before, plus the good JSONL line
    assert not rows(tmp_path, where="job_id BETWEEN 3001 AND 3004")
    checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    assert checks["reject_rate_below_threshold"] is False and checks["unique_test_per_job"] is True


def test_a_test_rerun_in_a_second_report_of_the_job_is_one_row(tmp_path):
    first = (b'<testsuite><testcase classname="TestNN" file="nn/test_nn.py" name="test_a" time="2">'
             b'<failure message="AssertionError: boom"/></testcase>'
             b'<testcase classname="TestNN" file="nn/test_nn.py" name="test_b" time="1"/></testsuite>')
    rerun = (b'<testsuite><testcase classname="TestNN" file="nn/test_nn.py" name="test_a" time="3"/></testsuite>')
    place(tmp_path, rerun, 100, 1, "nn.test_nn-0a.xml", module="nn.test_nn")
    place(tmp_path, first, 100, 1, "nn.test_nn-ff.xml", module="nn.test_nn")
    logged = []
    report = ingest_test_run_day(Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "lake")), DAY,
                                 log=logged.append, progress_every=1)
    got = {r["name"]: r for r in rows(tmp_path)}
    assert (got["test_a"]["status"], got["test_a"]["rerun_count"], got["test_a"]["time"], got["test_a"]["message"]) == \
        ("passed", 1, 5.0, "AssertionError: boom")
    assert got["test_a"]["invoking_file"] == "nn.test_nn"
    assert (got["test_b"]["status"], got["test_b"]["rerun_count"]) == ("passed", 0)
    assert (report.staged_rows, report.rows) == (3, 2)
    assert len(logged) == 2 and logged[-1].startswith(f"test_run day={DAY}: file 2/2")


def test_a_day_without_files_writes_an_empty_partition(tmp_path):
    result = materialize(tmp_path)
    assert result.success and rows(tmp_path) == []


def test_a_test_case_with_a_nan_time_or_no_name_costs_only_itself(tmp_path):
    """Issue 9: one `time="NaN"` used to reject the whole report; now it is a reject at its line
    and every other test of the report lands in `test_run`."""
    data = (b'<testsuites><testsuite name="pytest">\n'
            b'<testcase classname="TestA" file="test_a.py" name="test_one" time="1"/>\n'
            b'<testcase classname="TestA" file="test_a.py" name="test_nan" time="NaN"/>\n'
            b'<testcase classname="TestA" file="test_a.py" time="2"/>\n'
            b'<testcase classname="TestA" file="test_a.py" name="test_two" time="3"><failure message="x"/></testcase>\n'
            b'</testsuite></testsuites>\n')
    path = place(tmp_path, data, 300, 3001, "test_a-1.xml", module="test_a", gz=True)
    result = materialize(tmp_path)
    assert result.success
    assert [(r["name"], r["status"]) for r in rows(tmp_path)] == [("test_one", "passed"), ("test_two", "failed")]
    rel = str(path.relative_to(tmp_path / "archive"))
    rejects = {r["location"].rsplit(":", 1)[0]: r["reason"] for r in rows(tmp_path, "rejects")}
    assert rejects == {f"{rel}:3": "bad-time: test case 'test_nan': time 'NaN' is not a finite non-negative number",
                       f"{rel}:4": "bad-testcase: <testcase> without a name"}
