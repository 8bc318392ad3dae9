"""Webhook archive -> lake: real payloads, GitHub's delivery quirks, rejects, atomic rewrites."""

import datetime as dt
import gzip
import json
from concurrent.futures import ThreadPoolExecutor

import dagster as dg
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from conftest import Roots, envelope
from resources.configured import ArchiveResource, LakeResource
from resources.lake import Lake, connect
from resources.storage import Store
from torchci_assets.ingest import webhooks
from torchci_assets.ingest.assets import webhook_assets
from torchci_assets.ingest.webhooks import ingest_webhook_day

DAY = "2026-11-01"


def ingest(roots, day=DAY):
    return ingest_webhook_day(Store(roots.archive_uri), Lake.at(roots.lake_uri), day)


def rows(roots, table, day=DAY, order="1"):
    con = connect()
    Lake.at(roots.lake_uri).register(con, table, [day], name="t")
    cur = con.execute(f"SELECT * FROM t ORDER BY {order}")
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def day_file(name, day=DAY):
    return f"webhooks/day={day}/{name}"


def ts(text):
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


# ---- real payloads nobody here wrote -------------------------------------------------------

def test_octokit_examples_come_out_typed(roots, octokit):
    lines, expected = [], {"workflow_job": {}, "workflow_run": {}, "push": [], "pull_request": []}
    rank = {"queued": 1, "waiting": 2, "in_progress": 3, "completed": 4}
    n = 0
    for source, events in octokit.items():
        for event, examples in events.items():
            for payload in examples:
                n += 1
                lines.append(envelope(event, f"{source}-{n}", payload, f"2026-11-01T10:{n % 60:02d}:00.000Z"))
                if event == "workflow_job":
                    job = payload["workflow_job"]
                    key = (job["id"], job.get("run_attempt", 1))
                    best = expected["workflow_job"].get(key)
                    if best is None or rank[job["status"]] >= rank[best["status"]]:  # ties: the later delivery
                        expected["workflow_job"][key] = job
                elif event == "workflow_run":
                    run = payload["workflow_run"]
                    expected["workflow_run"][(run["id"], run.get("run_attempt", 1))] = run
                else:
                    expected[event].append((f"{source}-{n}", payload))
    roots.write(day_file("octokit.jsonl.gz"), lines)
    report = ingest(roots)
    assert report.rejects == [] and report.deliveries == n

    events = {r["delivery_id"]: r for r in rows(roots, "webhook_events")}
    for line in lines:
        got = events[line["delivery_id"]]
        assert json.loads(got["payload"]) == line["payload"]  # verbatim payload text
        assert got["event"] == line["event"] and got["action"] == line["payload"].get("action")
        assert got["repo"] == line["payload"]["repository"]["full_name"]

    jobs = {(r["id"], r["run_attempt"]): r for r in rows(roots, "workflow_job")}
    assert jobs.keys() == expected["workflow_job"].keys()
    for key, job in expected["workflow_job"].items():
        got = jobs[key]
        assert (got["run_id"], got["name"], got["status"], got["conclusion"], got["head_sha"], got["runner_name"]) == \
            (job["run_id"], job["name"], job["status"], job["conclusion"], job["head_sha"], job["runner_name"])
        assert got["labels"] == job["labels"]
        assert got["started_at"] == ts(job["started_at"]) and got["completed_at"] == ts(job.get("completed_at"))
        if job.get("completed_at") and job.get("started_at"):
            assert got["duration_s"] == (ts(job["completed_at"]) - ts(job["started_at"])).total_seconds()

    runs = {(r["id"], r["run_attempt"]): r for r in rows(roots, "workflow_run")}
    assert runs.keys() == expected["workflow_run"].keys()
    for key, run in expected["workflow_run"].items():
        assert (runs[key]["head_sha"], runs[key]["event"], runs[key]["name"], runs[key]["workflow_id"]) == \
            (run["head_sha"], run["event"], run["name"], run.get("workflow_id"))

    pushes = {r["delivery_id"]: r for r in rows(roots, "push")}
    assert len(pushes) == len(expected["push"])
    for delivery, p in expected["push"]:
        got = pushes[delivery]
        assert (got["ref"], got["before"], got["after"], got["forced"], got["deleted"], got["created"]) == \
            (p["ref"], p["before"], p["after"], p["forced"], p["deleted"], p["created"])
        head = p.get("head_commit") or {}
        assert got["head_commit_id"] == head.get("id")
        assert got["head_commit_timestamp"] == ts(head.get("timestamp"))

    prs = {r["delivery_id"]: r for r in rows(roots, "pull_request")}
    assert len(prs) == len(expected["pull_request"])
    for delivery, p in expected["pull_request"]:
        got, pr = prs[delivery], p["pull_request"]
        assert (got["number"], got["action"], got["state"], got["head_sha"], got["base_ref"], got["merged"]) == \
            (p["number"], p["action"], pr["state"], pr["head"]["sha"], pr["base"]["ref"], pr.get("merged"))
        assert got["labels"] == [label["name"] for label in pr["labels"]]
        assert got["author"] == pr["user"]["login"]  # Dr. CI tells another author's pull requests by it
        assert got["closes"] == []  # "This is a pretty simple change that we need to pull into master."


def test_the_issues_a_pull_request_s_body_says_it_closes_are_kept(roots, octokit):
    """PyTorch's CI runs a DISABLED test in a pull request whose body says it fixes the test's issue,
    so Dr. CI needs them: the closing words PyTorch's CI reads, with an issue number or URL, each
    issue once; none for an empty body; unknown (null) when the payload carries no body, or one
    that is not text, which rejects nothing (the row's other fields stand)."""
    example = octokit["api.github.com"]["pull_request"][0]
    bodies = {"fixes": "Fixes #1234 and closes https://github.com/pytorch/pytorch/issues/567.\n"
                       "Resolved #1234; see #89, fix #7x, Fixes#5",
              "empty": None, "absent": ..., "number": 42}
    lines = []
    for i, (name, body) in enumerate(bodies.items()):
        payload = json.loads(json.dumps(example))
        if body is ...:
            del payload["pull_request"]["body"]
        else:
            payload["pull_request"]["body"] = body
        lines.append(envelope("pull_request", name, payload, f"2026-11-01T10:0{i}:00.000Z"))
    roots.write(day_file("bodies.jsonl"), lines)
    ingest(roots)
    got = {r["delivery_id"]: r["closes"] for r in rows(roots, "pull_request")}
    assert got == {"fixes": [1234, 567, 7], "empty": [], "absent": None, "number": None}
    assert rows(roots, "rejects") == []


# ---- GitHub's delivery quirks ----------------------------------------------------------------

def job_payload(job_id, status, **fields):
    job = {"id": job_id, "run_id": 77, "run_attempt": 1, "status": status, "head_sha": "abc",
           "name": "linux-jammy-py3.10-gcc11 / test (default, 2, 5, linux.4xlarge)",
           "labels": ["linux.4xlarge"], "workflow_name": "pull", "head_branch": "main",
           "created_at": "2026-11-01T10:00:00Z", "started_at": None, "completed_at": None,
           "conclusion": None, "runner_name": None}
    job.update(fields)
    return {"action": status, "workflow_job": job, "repository": {"full_name": "pytorch/pytorch"}}


def test_duplicates_across_files_are_dropped_and_state_follows_the_lattice(roots):
    queued = envelope("workflow_job", "d-queued", job_payload(1, "queued"), "2026-11-01T10:00:01Z")
    started = envelope("workflow_job", "d-started", job_payload(
        1, "in_progress", started_at="2026-11-01T10:05:00Z", runner_name="i-0abc"), "2026-11-01T10:05:01Z")
    # completed arrives first, and from an older GitHub that omitted created_at and run_attempt
    done_payload = job_payload(1, "completed", started_at="2026-11-01T10:05:00Z",
                               completed_at="2026-11-01T10:35:30Z", conclusion="success", runner_name="i-0abc")
    del done_payload["workflow_job"]["created_at"], done_payload["workflow_job"]["run_attempt"]
    done = envelope("workflow_job", "d-done", done_payload, "2026-11-01T10:35:31Z")
    roots.write(day_file("a.jsonl.gz"), [done, queued])
    roots.write(day_file("b.jsonl"), [started, done, queued])  # redeliveries in another file
    report = ingest(roots)
    assert report.duplicates == 2 and report.deliveries == 3
    [job] = rows(roots, "workflow_job")
    assert job["status"] == "completed" and job["conclusion"] == "success"
    assert job["created_at"] == ts("2026-11-01T10:00:00Z")  # filled in from the queued delivery
    assert job["queue_s"] == 300 and job["duration_s"] == 1830.0
    assert (job["build_env"], job["test_config"], job["shard"], job["num_shards"], job["platform"]) == \
        ("linux-jammy-py3.10-gcc11", "default", 2, 5, "linux")
    assert len(rows(roots, "webhook_events")) == 3


def test_job_still_running_keeps_its_highest_state(roots):
    roots.write(day_file("a.jsonl"), [
        envelope("workflow_job", "2", job_payload(5, "in_progress", started_at="2026-11-01T10:01:00Z"), "2026-11-01T10:01:00Z"),
        envelope("workflow_job", "1", job_payload(5, "queued"), "2026-11-01T10:02:00Z"),  # late queued
    ])
    ingest(roots)
    [job] = rows(roots, "workflow_job")
    assert job["status"] == "in_progress" and job["duration_s"] is None and job["queue_s"] == 60


def test_reattempt_is_a_separate_row(roots):
    roots.write(day_file("a.jsonl"), [
        envelope("workflow_job", "1", job_payload(9, "completed", conclusion="failure")),
        envelope("workflow_job", "2", job_payload(10, "completed", conclusion="success", run_attempt=2)),
    ])
    ingest(roots)
    assert [(r["id"], r["run_id"], r["run_attempt"], r["conclusion"]) for r in rows(roots, "workflow_job")] == \
        [(9, 77, 1, "failure"), (10, 77, 2, "success")]


def test_rerun_job_completed_by_an_older_github_stays_in_its_attempt(roots):
    # A job id belongs to one attempt. When its completion comes from an older GitHub that omits
    # run_attempt, the job is still the rerun's: read as attempt 1, the rerun would stay in progress
    # forever and the HUD would show its commit pending instead of red.
    queued = envelope("workflow_job", "q", job_payload(11, "queued", run_attempt=2), "2026-11-01T10:00:01Z")
    started = envelope("workflow_job", "s", job_payload(
        11, "in_progress", run_attempt=2, started_at="2026-11-01T10:05:00Z"), "2026-11-01T10:05:01Z")
    done_payload = job_payload(11, "completed", started_at="2026-11-01T10:05:00Z",
                               completed_at="2026-11-01T10:20:00Z", conclusion="failure")
    del done_payload["workflow_job"]["run_attempt"]
    done = envelope("workflow_job", "d", done_payload, "2026-11-01T10:20:01Z")
    roots.write(day_file("a.jsonl"), [queued, started, done])
    ingest(roots)
    assert [(r["id"], r["run_attempt"], r["status"], r["conclusion"]) for r in rows(roots, "workflow_job")] == \
        [(11, 2, "completed", "failure")]


# ---- every reject reason ---------------------------------------------------------------------

def test_every_reject_reason_is_recorded_and_nothing_else_is_lost(roots):
    good = [envelope("push", f"good-{i}", {"ref": "refs/heads/main", "after": f"{i:040x}", "before": "0" * 40,
                                           "repository": {"full_name": "pytorch/pytorch"}}) for i in range(3)]
    bad_lines = [
        (b'{"event": "push", "delivery_id": "x", ', "invalid JSON"),
        (b"[1, 2, 3]", "invalid envelope: a JSON list"),
        (envelope("push", "no-event", {})  | {"event": None}, "missing field: event"),
        ({"event": "push", "delivery_id": "no-payload", "received_at": "2026-11-01T00:00:00Z"}, "missing field: payload"),
        (envelope("push", 12345, {"ref": "x"}), "wrong type: delivery_id is int"),
        (envelope("push", "bad-time", {"ref": "x"}, received_at="yesterday"), "wrong type: received_at 'yesterday'"),
        (envelope("push", "str-payload", "not an object"), "wrong type: payload is str"),
    ]
    roots.write(day_file("mixed.jsonl"), [good[0]] + [b for b, _ in bad_lines] + [good[1]])
    # typed-field problems: the delivery is kept in bronze, the typed row is rejected
    roots.write(day_file("typed.jsonl"), [
        envelope("workflow_job", "job-str-id", job_payload("seven", "queued")),
        envelope("workflow_job", "job-bad-time", job_payload(8, "in_progress", started_at="soon")),
        envelope("pull_request", "pr-no-object", {"action": "opened", "number": 3}),
    ])
    # a gzip cut short: the lines before the cut are kept, the cut is one reject
    whole = gzip.compress(b"".join(json.dumps(x).encode() + b"\n" for x in [good[2]] * 1 + [
        envelope("push", f"tail-{i}", {"ref": "refs/heads/x", "repository": {"full_name": "a/b"}}) for i in range(2000)]))
    roots.write_bytes(day_file("truncated.jsonl.gz"), whole[: len(whole) // 2])

    report = ingest(roots)
    rejects = rows(roots, "rejects", order="location")
    by_location = {r["location"]: r["reason"] for r in rejects}
    for i, (_, reason) in enumerate(bad_lines):
        assert by_location[f"webhooks/day={DAY}/mixed.jsonl:{i + 2}"].startswith(reason)
    assert by_location[f"webhooks/day={DAY}/typed.jsonl:1"] == \
        "workflow_job: wrong type: workflow_job.id is str, expected int"
    assert by_location[f"webhooks/day={DAY}/typed.jsonl:2"] == \
        "workflow_job: wrong type: started_at 'soon' is not a timestamp"
    assert by_location[f"webhooks/day={DAY}/typed.jsonl:3"] == "pull_request: missing field: pull_request"
    [cut] = [r for r in rejects if "truncated.jsonl.gz" in r["location"]]
    assert cut["reason"].startswith("truncated or corrupt gzip: stopped after line")
    assert all(r["source"] == "webhooks" for r in rejects) and len(rejects) == len(report.rejects) == 11

    events = {r["delivery_id"] for r in rows(roots, "webhook_events")}
    kept_tail = {d for d in events if d.startswith("tail-")}
    assert {"good-0", "good-1", "good-2", "job-str-id", "job-bad-time", "pr-no-object"} <= events
    assert 0 < len(kept_tail) < 2000  # the head of the cut file survived
    assert [r["id"] for r in rows(roots, "workflow_job")] == [8]  # its bad timestamp is null, the row stays
    assert rows(roots, "workflow_job")[0]["started_at"] is None



def test_a_line_that_is_not_utf8_is_rejected_as_such_with_the_bytes_offset(tmp_path):
    """A Latin-1 byte in a title (an old proxy re-encoding a delivery) is no surrogate: the reject
    says what is wrong, where, and the lines around it are kept."""
    roots = Roots(str(tmp_path))
    good = [json.dumps(envelope("push", f"good-{i}", {"ref": "refs/heads/main", "after": f"{i:040x}",
                                                       "repository": {"full_name": "pytorch/pytorch"}})).encode()
            for i in range(2)]
    bad = json.dumps(envelope("pull_request", "latin-1", {"action": "opened", "number": 7,
                                                           "pull_request": {"title": "caf@"}})).encode()
    offset = bad.index(b"caf@") + 3
    bad = bad.replace(b"caf@", b"caf\xe9")
    roots.write_bytes(day_file("latin1.jsonl"), b"\n".join([good[0], bad, good[1]]) + b"\n")
    report = ingest(roots)
    [reject] = rows(roots, "rejects")
    assert reject["location"] == f"webhooks/day={DAY}/latin1.jsonl:2"
    assert reject["reason"] == f"invalid UTF-8 at byte {offset}" and len(report.rejects) == 1
    assert {r["delivery_id"] for r in rows(roots, "webhook_events")} == {"good-0", "good-1"}

def test_empty_day_writes_empty_partitions(roots):
    report = ingest(roots, day="2026-10-31")
    assert report.files == 0
    lake = Lake.at(roots.lake_uri)
    for table in ("webhook_events", "workflow_job", "workflow_run", "push", "pull_request"):
        files = lake.files(table, ["2026-10-31"])
        assert files and sum(pq.read_metadata(f, filesystem=lake.store.fs).num_rows for f in files) == 0


# ---- idempotent and atomic -------------------------------------------------------------------

def _snapshot(roots):
    store = Store(roots.lake_uri)
    tables = {e.path: pq.read_table(store.full(e.path), filesystem=store.fs) for e in store.list_files("", (".parquet",))}
    return {path: t.sort_by([(t.schema.names[0], "ascending")]) for path, t in tables.items()}


def _hidden_files(roots):
    """Temporary files left in the lake (Store.list_files hides them, so list the filesystem)."""
    store = Store(roots.lake_uri)
    infos = store.fs.get_file_info(pafs.FileSelector(store.full(""), recursive=True, allow_not_found=True))
    return [i.path for i in infos if i.base_name.startswith(".")]


def test_rematerializing_replaces_the_partition_exactly(roots, octokit):
    payloads = octokit["api.github.com"]["workflow_job"]
    roots.write(day_file("a.jsonl.gz"),
                [envelope("workflow_job", f"d{i}", p) for i, p in enumerate(payloads)])
    ingest(roots)
    first = _snapshot(roots)
    ingest(roots)
    second = _snapshot(roots)
    assert first.keys() == second.keys()
    assert all(first[k].equals(second[k]) for k in first)
    assert not _hidden_files(roots)


def test_a_run_killed_mid_write_leaves_the_previous_partition(roots, octokit, monkeypatch):
    payloads = octokit["api.github.com"]["workflow_job"]
    roots.write(day_file("a.jsonl.gz"),
                [envelope("workflow_job", f"d{i}", p) for i, p in enumerate(payloads)])
    ingest(roots)
    before = _snapshot(roots)
    # new data lands, then the run dies while writing the typed tables
    roots.write(day_file("b.jsonl"), [envelope("push", "new", {"ref": "refs/heads/main"})])

    def die(*args, **kwargs):
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(webhooks, "_reduce_typed", die)
    with pytest.raises(KeyboardInterrupt):
        ingest(roots)
    after = _snapshot(roots)
    assert after.keys() == before.keys() and all(before[k].equals(after[k]) for k in before)
    assert not _hidden_files(roots)


# ---- as a Dagster asset ------------------------------------------------------------------------

def _materialize(roots, day=DAY, instance=None):
    return dg.materialize(
        [webhook_assets], partition_key=day, raise_on_error=False, instance=instance,
        resources={"archive": ArchiveResource(uri=roots.archive_uri),
                   "lake": LakeResource(uri=roots.lake_uri)},
    )


def test_asset_materializes_with_metadata_and_checks(roots, octokit):
    roots.write(day_file("a.jsonl.gz"),
                [envelope("workflow_job", f"d{i}", p) for i, p in enumerate(octokit["api.github.com"]["workflow_job"])]
                + [envelope("workflow_job", "d0", octokit["api.github.com"]["workflow_job"][0])])
    result = _materialize(roots)
    assert result.success
    meta = {m.asset_key.to_user_string(): m.metadata for m in result.asset_materializations_for_node("webhook_assets")}
    assert meta["webhook_events"]["rows"].value == 8 and meta["webhook_events"]["duplicates_dropped"].value == 1
    assert meta["webhook_rejects"]["rows"].value == 0
    # the catalog's own keys, read back from the Parquet footers (torchci_assets.lake_metadata)
    jobs = meta["workflow_job"]
    assert jobs["dagster/row_count"].value == jobs["rows"].value == 4  # 8 deliveries of 4 jobs' states
    assert {"id", "run_attempt", "build_env"} <= {c.name for c in jobs["dagster/column_schema"].schema.columns}
    assert jobs["dagster/uri"].value.endswith(f"workflow_job/day={DAY}")
    assert meta["webhook_rejects"]["dagster/uri"].value.endswith(f"rejects/day={DAY}")
    checks = {(c.asset_key.to_user_string(), c.check_name): c.passed for c in result.get_asset_check_evaluations()}
    assert len(checks) == 11 and all(checks.values())


def test_reject_rate_check_fails_on_a_damaged_day(roots):
    roots.write(day_file("a.jsonl"), [b"not json"] * 5 + [
        envelope("push", "ok", {"ref": "refs/heads/main", "repository": {"full_name": "a/b"}})])
    result = _materialize(roots)
    assert result.success  # a failed check flags the day; it does not lose the good rows
    checks = {c.check_name: c for c in result.get_asset_check_evaluations() if c.asset_key.to_user_string() == "webhook_events"}
    assert checks["reject_rate_below_threshold"].passed is False
    assert checks["reject_rate_below_threshold"].metadata["rejects"].value == 5


# ---- a backfill: many day partitions at once against one lake -------------------------------

def test_a_backfill_of_8_days_with_4_concurrent_runs_writes_each_partition_exactly_once(tmp_path):
    """Runs share no DuckDB file and no lock, so concurrent partitions must not see each other's
    rows. Each day has its own jobs, one job spanning midnight (queued today, completed the next
    day) and one delivery id reused on every day: each partition keeps exactly its own rows.
    Local folders only: Dagster's per-run overhead makes each run
    most of a second; 8 days are two rounds of the 4 workers, and S3's
    publishing is covered by the tests above on both backends."""
    roots = Roots(str(tmp_path))
    days = [(dt.date(2026, 11, 1) + dt.timedelta(days=i)).isoformat() for i in range(8)]
    for i, day in enumerate(days):
        lines = [envelope("workflow_job", f"{day}-{k}", job_payload(1000 * i + k, "completed", conclusion="success"),
                          f"{day}T10:00:0{k}Z") for k in range(3)]
        lines.append(envelope("workflow_job", f"{day}-span", job_payload(7, "queued" if i % 2 == 0 else "completed"),
                              f"{day}T23:59:00Z"))
        lines.append(envelope("push", "same-delivery-id", {"ref": f"refs/heads/{day}"}, f"{day}T12:00:00Z"))
        roots.write(day_file("a.jsonl.gz", day), lines)

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda day: _materialize(roots, day), days))
    assert all(r.success for r in results)
    assert sorted(r.dagster_run.tags["dagster/partition"] for r in results) == days

    lake, con = Lake.at(roots.lake_uri), connect()
    for table in ("workflow_job", "push", "webhook_events"):
        lake.register(con, table, days)
    for i, day in enumerate(days):
        jobs = con.execute("SELECT id, status FROM workflow_job WHERE day = ? ORDER BY id", [day]).fetchall()
        assert jobs == sorted([(7, "queued" if i % 2 == 0 else "completed")] + [(1000 * i + k, "completed") for k in range(3)])
        assert con.execute("SELECT ref FROM push WHERE day = ?", [day]).fetchall() == [(f"refs/heads/{day}",)]
        assert con.execute("SELECT delivery_id FROM webhook_events WHERE day = ? ORDER BY 1", [day]).fetchall() == \
            [(d,) for d in sorted([f"{day}-{k}" for k in range(3)] + [f"{day}-span", "same-delivery-id"])]
    assert con.execute("SELECT count(*) FROM webhook_events").fetchone() == (5 * len(days),)
    assert lake.days("workflow_job") == days
    assert not _hidden_files(roots)
