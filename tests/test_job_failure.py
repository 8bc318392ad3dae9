"""Job logs in the archive -> `job_failure`, and its infrastructure verdicts in test_jobs.

Archive reading runs on local folders and on a local S3 server (the `roots` fixture); the
classification itself is covered by test_log_rules.py."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import Roots, envelope
from test_test_stats import D, day, job_payload, lake, query, run_row, webhooks, write_test_run

from resources.configured import ArchiveResource, LakeResource
from resources.lake import Lake, connect
from resources.storage import Store
from torchci_assets.config import DEFAULT_INFRA_RULES, ConfigError, parse_config
from torchci_assets.derived.failures.assets import job_failure_assets
from torchci_assets.derived.failures.job_failure import CLASSIFIED_PART, build_job_failure, classify_log
from torchci_assets.derived.failures.rules import DEFAULT_RULES_PATH, load_ruleset
from torchci_assets.derived.results.stats import build_test_results
from torchci_assets.ingest.commit import hidden_path
from torchci_assets.ingest.logs import LogBlocks, list_job_logs
from torchci_assets.ingest.webhooks import ingest_webhook_day
from torchci_assets.simulate.logs import SHUTDOWN

TS = "2026-11-10T00:30:00.1234567Z "
IMA = "RuntimeError: CUDA error: an illegal memory access was encountered"
ROOT = Path(__file__).resolve().parent.parent


def gha(*lines: str) -> bytes:
    return "".join(f"{TS}{line}\n" for line in lines).encode()


def pytest_log(*failed: str, extra: tuple[str, ...] = ()) -> bytes:
    return gha("##[group]Run .ci/pytorch/test.sh", "\x1b[36;1m.ci/pytorch/test.sh\x1b[0m", "##[endgroup]",
               "test_ops.py::TestOps::t0 PASSED [0.1000s] [ 50%]", *extra,
               *(f"FAILED [0.2000s] test_ops.py::TestOps::{t} - AssertionError: boom" for t in failed),
               "RuntimeError: test_ops 1/1 failed!", "##[error]Process completed with exit code 1.")


@pytest.fixture(scope="module")
def rules():
    return load_ruleset(DEFAULT_RULES_PATH)


def rules_bytes() -> bytes:
    return DEFAULT_RULES_PATH.read_bytes()


# ---- reading the archive ------------------------------------------------------------------------


def test_listing_keeps_job_logs_and_rejects_the_rest(roots: Roots):
    base = f"logs/day={D}"
    for name in ("11.log", "12.log.gz", "12.log", "notes.txt", "sub/13.log", "0014.log", "15.log.bz2", ".16.log"):
        roots.write_bytes(f"{base}/{name}", b"x\n")
    logs, rejects = list_job_logs(roots.archive, D)
    assert [(j.job_id, j.path) for j in logs] == [(11, f"{base}/11.log"), (12, f"{base}/12.log")]
    reasons = {r.location.rsplit("/", 1)[-1]: r.reason for r in rejects}
    assert reasons["12.log.gz"] == f"second log for job 12 (kept {base}/12.log)"
    assert "name is not <job id>.log" in reasons["notes.txt"] and "name is not" in reasons["0014.log"]
    assert "not directly in the day folder" in reasons["13.log"] and "15.log.bz2" in reasons
    assert ".16.log" not in reasons  # hidden files are uploads in progress


def test_log_blocks_stream_whole_lines_and_cut_long_ones(tmp_path):
    lines = [f"{TS}line {i}".encode() for i in range(50)]
    lines[10] = b"x" * 5000  # longer than max_line: cut, and counted
    data = b"\n".join(lines) + b"\nlast line without a break"
    (tmp_path / "1.log.gz").write_bytes(gzip.compress(data))
    reader = LogBlocks(Store(str(tmp_path)), "1.log.gz", max_line=1000)
    blocks = list(reader)
    assert all(b.endswith(b"\n") for b in blocks[:-1])
    text = b"".join(blocks)
    assert text.split(b"\n")[10] == b"x" * 1000 and text.count(b"\n") == 50
    assert (reader.long_lines, reader.bytes_read, reader.error) == (1, len(data), None)


def test_a_long_line_across_chunks_is_cut_once(tmp_path, monkeypatch):
    import torchci_assets.ingest.lines as lines_mod
    monkeypatch.setattr(lines_mod, "CHUNK", 64)  # force many small chunks
    data = b"a\n" + b"y" * 700 + b"\nboom\n"
    (tmp_path / "2.log").write_bytes(data)
    reader = LogBlocks(Store(str(tmp_path)), "2.log", max_line=100)
    text = b"".join(reader)
    assert text == b"a\n" + b"y" * 100 + b"\nboom\n" and reader.long_lines == 1


def test_a_highly_compressible_log_inflates_in_bounded_blocks(tmp_path):
    """A 48 MB log of one repeated line gzips to ~100 KB: a single read must not inflate it whole."""
    from torchci_assets.ingest.lines import CHUNK, iter_chunks
    line = f"{TS}test_ops.py::TestOps::test_x PASSED [0.0010s] [ 50%]\n".encode()
    data = line * (48 * (1 << 20) // len(line))
    (tmp_path / "4.log.gz").write_bytes(gzip.compress(data) + gzip.compress(b"second member\n"))
    chunks = list(iter_chunks(Store(str(tmp_path)), "4.log.gz"))
    assert max(map(len, chunks)) <= CHUNK and b"".join(chunks) == data + b"second member\n"
    reader = LogBlocks(Store(str(tmp_path)), "4.log.gz")
    assert max(len(b) for b in reader) <= CHUNK + reader.max_line and reader.error is None


def test_a_truncated_gzip_keeps_what_came_before_the_cut(tmp_path, rules):
    body = pytest_log("t1") + b"".join(f"{TS}filler {i}\n".encode() for i in range(20000))
    z = gzip.compress(body)
    (tmp_path / "3.log.gz").write_bytes(z[: len(z) * 3 // 4])
    r = classify_log(Store(str(tmp_path)), "3.log.gz", rules)
    assert r.error and "end-of-stream" in r.error
    assert (r.rule, r.captures) == ("pytest failure", ["test_ops.py::TestOps::t1"])
    assert 0 < r.lines < 20000 + 9


# ---- job_failure ------------------------------------------------------------------------------


def failure_day(roots: Roots, lk: Lake, infra=DEFAULT_INFRA_RULES, rules=None, workers=None):
    ruleset = rules or load_ruleset(DEFAULT_RULES_PATH)
    return build_job_failure(roots.archive, lk, D, ruleset, rules_bytes(), infra, workers=workers)


def jobs_into(roots: Roots, on_day: str, payloads: list[dict]) -> Lake:
    """Archive workflow_job deliveries of `on_day` under `roots` and ingest them into its lake."""
    lines = [envelope("workflow_job", f"{on_day}-{i}", p, f"{on_day}T12:00:{i:02d}.000Z") for i, p in enumerate(payloads)]
    roots.write(f"webhooks/day={on_day}/hooks.jsonl", lines)
    lk = Lake.at(roots.lake_uri)
    assert ingest_webhook_day(roots.archive, lk, on_day).rejects == []
    return lk


def test_job_failure_classifies_failed_jobs_and_skips_successful_ones(roots: Roots):
    lk = jobs_into(roots, day(-1), [job_payload(1, 101, "a" * 40, conclusion="failure"),
                                    job_payload(2, 102, "a" * 40, conclusion="success"),
                                    job_payload(4, 104, "a" * 40, conclusion="failure", attempt=2)])
    base = f"logs/day={D}"
    roots.write_bytes(f"{base}/1.log.gz", gzip.compress(pytest_log("t1", "t2")))
    roots.write_bytes(f"{base}/2.log", pytest_log("never"))  # the job succeeded: skipped
    roots.write_bytes(f"{base}/3.log", gha("starting", f"  what():  {IMA[14:]}", "done"))  # job not found
    roots.write_bytes(f"{base}/4.log", gha("all good", "nothing to see"))  # no rule matches
    roots.write_bytes(f"{base}/5.log.gz", b"not gzip at all")  # unreadable

    report = failure_day(roots, lk)

    rows = {r["job_id"]: r for r in query_lake(lk, "job_failure")}
    assert set(rows) == {1, 3, 4}
    assert {k: rows[1][k] for k in ("run_attempt", "conclusion", "rule", "line_number", "captures", "infra",
                                   "log_complete")} == {
        "run_attempt": 1, "conclusion": "failure", "rule": "pytest failure", "line_number": 6,
        "captures": ["test_ops.py::TestOps::t2"], "infra": False, "log_complete": True}
    assert rows[1]["line"] == "FAILED [0.2000s] test_ops.py::TestOps::t2 - AssertionError: boom"
    assert rows[1]["context"] == [] and rows[1]["log_invalid_utf8"] is False  # no `+` command in this log
    assert (rows[3]["rule"], rows[3]["infra"], rows[3]["run_attempt"], rows[3]["captures"]) == \
           ("CUDA device error", True, None, ["an illegal memory access was encountered"])
    assert (rows[4]["rule"], rows[4]["line_number"], rows[4]["infra"], rows[4]["log_lines"], rows[4]["run_attempt"]) \
        == (None, None, False, 2, 2)
    assert (report.logs, report.rows, report.skipped_successful, report.jobs_not_found, report.infra) == (5, 3, 1, 2, 1)
    [reject] = query_lake(lk, "rejects")
    assert reject["location"] == f"{base}/5.log.gz" and "nothing could be read" in reject["reason"]


def test_the_infra_list_decides_and_processes_agree_with_one(tmp_path):
    roots = Roots(str(tmp_path))
    for job_id in range(1, 9):
        body = gha("x", f"  what():  {IMA[14:]}") if job_id % 2 else pytest_log(f"t{job_id}")
        roots.write_bytes(f"logs/day={D}/{job_id}.log", body)
    lk = Lake.at(roots.lake_uri)
    failure_day(roots, lk, workers=1)
    serial = query_lake(lk, "job_failure")
    failure_day(roots, lk, workers=2)
    assert query_lake(lk, "job_failure") == serial
    assert sum(r["infra"] for r in serial) == 4
    failure_day(roots, lk, infra=("pytest failure",))
    assert {r["job_id"] for r in query_lake(lk, "job_failure") if r["infra"]} == {2, 4, 6, 8}


def test_rows_carry_the_commands_before_the_failure_and_flag_invalid_utf8(tmp_path):
    roots = Roots(str(tmp_path))
    roots.write_bytes(f"logs/day={D}/1.log", gha("+ cd /w/pytorch", "+ .ci/pytorch/test.sh", "building",
                                                "FAILED [0.2000s] test_ops.py::TestOps::t1 - AssertionError: boom"))
    # a cp1252 byte (0xFC) in a path: matched as U+FFFD, the rest of the line still matches
    roots.write_bytes(f"logs/day={D}/2.log", gha("+ cd C:/actions-r@nner", "FAILED [0.2000s] r@/test_x.py::T::t - boom")
                      .replace(b"@", b"\xfc"))
    lk = Lake.at(roots.lake_uri)
    report = failure_day(roots, lk)
    rows = {r["job_id"]: r for r in query_lake(lk, "job_failure")}
    assert rows[1]["context"] == ["+ .ci/pytorch/test.sh", "+ cd /w/pytorch"] and not rows[1]["log_invalid_utf8"]
    assert (rows[2]["rule"], rows[2]["captures"], rows[2]["context"], rows[2]["log_invalid_utf8"]) == \
        ("pytest failure", ["r\ufffd/test_x.py::T::t"], ["+ cd C:/actions-r\ufffdnner"], True)
    assert report.invalid_utf8 == 1


def test_partitions_written_before_log_invalid_utf8_are_still_read(tmp_path):
    roots = Roots(str(tmp_path))
    roots.write_bytes(f"logs/day={D}/1.log", pytest_log("t1"))
    lk = Lake.at(roots.lake_uri)
    failure_day(roots, lk)
    old = pq.read_table(lk.files("job_failure", [D])[0], filesystem=lk.store.fs)
    lk.write("job_failure", day(-1), old.drop_columns(["log_invalid_utf8"]).set_column(
        0, "job_id", pa.array([9], pa.int64())))
    con = connect()
    try:
        assert lk.register(con, "job_failure", [day(-1), D])
        got = con.sql("SELECT job_id, rule, log_invalid_utf8 FROM job_failure ORDER BY job_id").fetchall()
    finally:
        con.close()
    assert got == [(1, "pytest failure", False), (9, "pytest failure", None)]


def test_a_refresh_classifies_again_what_an_older_classifier_kept(tmp_path):
    """Results kept before the context became upstream's (no `invalid_utf8`) are not reused."""
    roots = Roots(str(tmp_path))
    roots.write_bytes(f"logs/day={D}/1.log", gha("+ make", "FAILED [0.2000s] test_ops.py::TestOps::t1 - boom"))
    lk = Lake.at(roots.lake_uri)
    failure_day(roots, lk)
    kept = lk.store.full(hidden_path(lk, "job_failure", D, CLASSIFIED_PART))
    table = pq.read_table(kept, filesystem=lk.store.fs)
    stale = table.drop_columns(["invalid_utf8"]).set_column(
        table.column_names.index("context"), "context", pa.array([["5 lines before"]], pa.list_(pa.string())))
    pq.write_table(stale, kept, filesystem=lk.store.fs)
    report = build_job_failure(roots.archive, lk, D, load_ruleset(DEFAULT_RULES_PATH), rules_bytes(),
                               DEFAULT_INFRA_RULES, reuse=True)
    assert report.reused == 0 and query_lake(lk, "job_failure")[0]["context"] == ["+ make"]


# ---- infra verdicts in test_jobs ---------------------------------------------------------------


def test_a_cuda_error_in_the_log_makes_the_job_infra_suspect_even_on_a_later_day(tmp_path):
    webhooks(tmp_path, D, [("workflow_job", job_payload(j, 100 + j, "a" * 40, conclusion="failure"))
                           for j in (1, 2, 3)])
    rows = []
    for j in (1, 2, 3):  # 2 of 20 tests fail with one message: no heuristic calls that infra
        rows += [run_row(j, 100 + j, f"t{i}", "failed" if i < 2 else "passed", message=IMA if i < 2 else None)
                 for i in range(20)]
    write_test_run(tmp_path, D, rows)
    roots = Roots(str(tmp_path))
    roots.write_bytes(f"logs/day={D}/1.log", gha("t0 FAILED", f"FAILED [1.0s] test_ops.py::TestOps::t0 - {IMA}"))
    roots.write_bytes(f"logs/day={D}/2.log", pytest_log("t0", "t1"))
    build_job_failure(roots.archive, lake(tmp_path), D, load_ruleset(DEFAULT_RULES_PATH), rules_bytes(),
                      DEFAULT_INFRA_RULES)
    # job 3's log arrives the next day: test_results reads job_failure over D-2..D+1
    late = Roots(str(tmp_path))
    late.write_bytes(f"logs/day={day(1)}/3.log.gz", gzip.compress(gha(SHUTDOWN)))
    build_job_failure(late.archive, lake(tmp_path), day(1), load_ruleset(DEFAULT_RULES_PATH), rules_bytes(),
                      DEFAULT_INFRA_RULES)

    report = build_test_results(lake(tmp_path), D)

    jobs = {r["job_id"]: (r["failure_rule"], r["infra_reason"]) for r in query(tmp_path, "test_jobs", "SELECT * FROM t")}
    assert jobs == {1: ("CUDA device error", "log-infra"), 2: ("pytest failure", None),
                    3: ("runner lost", "log-infra")}
    flags = query(tmp_path, "test_results", "SELECT job_id, bool_and(infra_suspect) AS s FROM t GROUP BY ALL")
    assert {r["job_id"]: r["s"] for r in flags} == {1: True, 2: False, 3: True}
    assert report.infra_jobs == {"log-infra": 2}


# ---- the asset, the config and the CLI ---------------------------------------------------------


def test_asset_materializes_with_checks_and_metadata(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHCI_LOG_RULES", raising=False)
    roots = Roots(str(tmp_path))
    roots.write_bytes(f"logs/day={D}/7.log", pytest_log("t1"))
    roots.write_bytes(f"logs/day={D}/readme.md", b"hello\n")
    result = dg.materialize([job_failure_assets], partition_key=D, resources={
        "archive": ArchiveResource(uri=roots.archive_uri), "lake": LakeResource(uri=roots.lake_uri)})
    assert result.success
    checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    assert checks == {"unique_job_id": True, "reject_rate_below_threshold": False}  # 1 reject in 2 files
    meta = {e.asset_key.to_user_string(): e.materialization.metadata for e in result.get_asset_materialization_events()}
    assert meta["job_failure"]["rows"].value == 1 and meta["job_failure"]["rules"].value == {"pytest failure": 1}
    assert meta["job_failure"]["ruleset"].value.startswith(f"{DEFAULT_RULES_PATH} (")
    assert meta["log_rejects"]["rows"].value == 1
    assert job_failure_assets.specs_by_key[dg.AssetKey("job_failure")].code_version.startswith("rules-")


def test_infra_rules_are_configurable_and_checked():
    base = {"upstream": {"repo": "pytorch/pytorch"}}
    assert parse_config(base).infra_rules == DEFAULT_INFRA_RULES
    assert parse_config({**base, "log_classifier": {"infra_rules": ["runner lost"]}}).infra_rules == ("runner lost",)
    with pytest.raises(ConfigError, match=r"log_classifier.infra_rules\[1\]: must be a rule name"):
        parse_config({**base, "log_classifier": {"infra_rules": ["ok", 3]}})
    with pytest.raises(ConfigError, match="log_classifier: unknown key 'infra'"):
        parse_config({**base, "log_classifier": {"infra": []}})


def test_classify_log_cli_prints_the_contract(tmp_path):
    log = tmp_path / "90834162653.log.gz"
    log.write_bytes(gzip.compress(pytest_log("t1")))
    out = subprocess.run([str(Path(sys.executable).parent / "torchci"), "classify-log", str(log), "--json"],
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == {"rule": "pytest failure", "line_number": 5,
                               "line": "FAILED [0.2000s] test_ops.py::TestOps::t1 - AssertionError: boom",
                               "captures": ["test_ops.py::TestOps::t1"]}
    theirs = subprocess.run([str(Path(sys.executable).parent / "torchci"), "classify-log", "--rules",
                             str(ROOT / "tests/data/log-classifier/pytorch-ruleset.toml"), "-", "--json"],
                            input=pytest_log("t1").decode(), capture_output=True, text=True, check=True).stdout
    # PyTorch's pytest rule wants test names starting with test_: theirs falls to run_test.py's summary
    assert json.loads(theirs) == {"rule": "Python Test File RuntimeError", "line_number": 6,
                                  "line": "RuntimeError: test_ops 1/1 failed!", "captures": ["test_ops"]}


def test_classify_log_cli_errors_and_text_output(tmp_path, capsys):
    from torchci_assets.derived.failures.cli import main
    (tmp_path / "ok.log").write_bytes(gha("nothing here"))
    assert main([str(tmp_path / "ok.log")]) == 3  # no rule matched: not the exit status of a match
    assert capsys.readouterr().out == "no rule matched (1 lines)\n"
    (tmp_path / "bad.toml").write_text("[[rule]]\nname = 'x'\npattern = '('\n")
    assert main(["--rules", str(tmp_path / "bad.toml"), str(tmp_path / "ok.log")]) == 1
    assert "rule 1 ('x'): pattern '(' is not valid here" in capsys.readouterr().err
    assert main([str(tmp_path / "missing.log")]) == 1
    assert "missing.log: no such file" in capsys.readouterr().err
    (tmp_path / "cut.log.gz").write_bytes(gzip.compress(pytest_log("t9"))[:-12])
    assert main([str(tmp_path / "cut.log.gz")]) == 0
    captured = capsys.readouterr()
    assert "read stopped after line" in captured.err and "test_ops.py::TestOps::t9" in captured.out


def query_lake(lk: Lake, table: str) -> list[dict]:
    from resources.lake import connect
    con = connect()
    lk.register(con, table, [D], name="t")
    cur = con.execute("SELECT * FROM t ORDER BY ALL")
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]
