"""The archive simulator: determinism, layout, payload shapes, id consistency, quirks and
that the planted ground truth is really in the data."""

from __future__ import annotations

import collections
import datetime as dt
import gzip
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from torchci_assets.simulate.catalog import skip_reason
from torchci_assets.simulate.cli import main
from torchci_assets.simulate.generate import generate_archive
from torchci_assets.simulate.world import Options, World

D1, D2 = dt.date(2026, 11, 1), dt.date(2026, 11, 2)
TINY = dict(commits_per_day=8, prs_per_day=6, configs=12, test_files=16, tests_per_file=10, backends=4)
REPORT_RE = re.compile(r"day=(\d{4}-\d\d-\d\d)/(\d+)/(\d+)/(\d+)/test/test-reports/python-pytest/"
                       r"([^/]+)/\5-[0-9a-f]{16}\.xml(\.gz)?$")
TEST_JOB_RE = re.compile(r"^(.+) / test \(([\w-]+), (\d+), (\d+), ([\w.-]+)\)$")


def _generate(out: Path, days=(D1, D2), **kw) -> Path:
    generate_archive(out, list(days), Options(**{**TINY, **kw}), log=lambda _: None)
    return out


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _torn_and_whole(root: Path):
    """(day folder, line) of every webhook line, split into those cut short and the rest."""
    torn, whole = [], []
    for f in sorted((root / "webhooks").glob("day=*/*.jsonl.gz")):
        day = f.parent.name[4:]
        with gzip.open(f, "rt") as fh:
            for line in fh:
                try:
                    whole.append((day, json.loads(line)))
                except json.JSONDecodeError:
                    torn.append((day, line))
    return torn, whole


def _envelopes(root: Path):
    """(day folder, envelope) for every whole webhook line."""
    yield from _torn_and_whole(root)[1]


def _reports(root: Path):
    for p in sorted((root / "test-reports").rglob("*.xml*")):
        data = p.read_bytes()
        if p.name.endswith(".gz"):
            data = gzip.decompress(data)
        yield p, ET.fromstring(data)


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    return _generate(tmp_path_factory.mktemp("archive"))


@pytest.fixture(scope="module")
def envelopes(archive):
    return list(_envelopes(archive))


@pytest.fixture(scope="module")
def truth(archive):
    return json.loads((archive / "ground-truth.json").read_text())


@pytest.fixture(scope="module")
def jobs(envelopes):
    """job id -> list of workflow_job payloads received for it."""
    out = collections.defaultdict(list)
    for _, e in envelopes:
        if e["event"] == "workflow_job":
            out[e["payload"]["workflow_job"]["id"]].append(e["payload"]["workflow_job"])
    return out


def test_same_seed_gives_identical_bytes_and_another_seed_differs(archive, tmp_path):
    again = _files(_generate(tmp_path / "again"))
    assert again == _files(archive)
    other = _files(_generate(tmp_path / "other", days=(D1,), seed=1))
    hooks = [k for k in other if k.startswith("webhooks/")]
    assert hooks and all(other[k] != again.get(k) for k in hooks)


def test_a_day_does_not_depend_on_the_days_generated_before_it(archive, tmp_path):
    alone = _files(_generate(tmp_path / "alone", days=(D2,)))
    both = _files(archive)
    day2 = {k: v for k, v in both.items() if f"day={D2}" in k}
    assert day2 and {k: v for k, v in alone.items() if f"day={D2}" in k} == day2


def test_layout(archive):
    for section in ("webhooks", "test-reports", "test-runs", "ci-results"):
        assert sorted(p.name for p in (archive / section).iterdir()) == [f"day={D1}", f"day={D2}"]
    assert (archive / "ground-truth.json").is_file()
    reports = [p for p in (archive / "test-reports").rglob("*") if p.is_file()]
    assert reports and all(REPORT_RE.search(str(p)) for p in reports)
    assert any(p.name.endswith(".xml.gz") for p in reports) and any(p.name.endswith(".xml") for p in reports)


def test_envelopes_have_four_keys_and_land_in_their_day(envelopes):
    events = collections.Counter()
    for day, e in envelopes:
        assert set(e) == {"event", "delivery_id", "received_at", "payload"}
        assert e["received_at"].startswith(day) and e["received_at"].endswith("Z")
        assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", e["delivery_id"])
        events[(e["event"], e["payload"].get("action"))] += 1
    for key in [("workflow_job", a) for a in ("queued", "waiting", "in_progress", "completed")] + \
               [("workflow_run", a) for a in ("requested", "in_progress", "completed")] + \
               [("push", None)] + [("pull_request", a) for a in ("opened", "synchronize", "labeled", "closed")]:
        assert events[key] > 0, key


def test_a_collector_crash_leaves_a_cut_line_then_the_whole_delivery(archive, truth):
    torn, _ = _torn_and_whole(archive)
    assert len(torn) == truth["quirks"]["torn_lines"] == len({d for d, _ in torn}) > 0  # one a day
    for f in sorted((archive / "webhooks").glob("day=*/*.jsonl.gz")):
        lines = gzip.decompress(f.read_bytes()).decode().splitlines()
        for cut, after in zip(lines, lines[1:]):
            if (f.parent.name[4:], cut + "\n") in torn:
                assert after.startswith(cut) and len(after) > len(cut)
                json.loads(after)


def test_payload_sizes_are_realistic(envelopes):
    sizes = collections.defaultdict(list)
    for _, e in envelopes:
        sizes[e["event"]].append(len(json.dumps(e["payload"], separators=(",", ":"))))
    assert 5_000 <= min(sizes["workflow_job"]) and max(sizes["workflow_job"]) <= 15_000
    assert all(5_000 <= s <= 25_000 for v in sizes.values() for s in v)


def test_job_names_follow_pytorch_naming(jobs):
    test_jobs = 0
    for payloads in jobs.values():
        wj = payloads[0]
        m = TEST_JOB_RE.match(wj["name"])
        if m:
            test_jobs += 1
            assert 1 <= int(m.group(3)) <= int(m.group(4))
            assert wj["labels"] == [m.group(5)]
    assert test_jobs > 0
    names = {p[0]["name"] for p in jobs.values()}
    assert "get-label-type / runner-determinator" in names
    assert any(n.endswith(" / build") for n in names)
    assert any(n.startswith("unit-test / inductor-test / test (inductor,") for n in names)


def test_report_paths_match_workflow_job_deliveries(archive, jobs):
    for p in (archive / "test-reports").rglob("*.xml*"):
        day, run_id, attempt, job_id = REPORT_RE.search(str(p)).groups()[:4]
        seen = jobs[int(job_id)]
        assert seen, f"no workflow_job delivery for job {job_id}"
        assert all(wj["run_id"] == int(run_id) for wj in seen)
        assert all(wj.get("run_attempt", int(attempt)) == int(attempt) for wj in seen)


def test_runs_and_pushes_agree(envelopes, jobs):
    main_shas = {e["payload"]["after"] for _, e in envelopes
                 if e["event"] == "push" and e["payload"]["ref"] == "refs/heads/main"}
    runs = {(e["payload"]["workflow_run"]["id"], e["payload"]["workflow_run"]["run_attempt"]):
            e["payload"]["workflow_run"] for _, e in envelopes if e["event"] == "workflow_run"}
    push_runs = [r for r in runs.values() if r["event"] == "push"]
    assert push_runs and sum(r["head_sha"] in main_shas for r in push_runs) > 0.8 * len(push_runs)
    for payloads in jobs.values():
        for wj in payloads:
            if (wj["run_id"], wj.get("run_attempt")) in runs:
                assert runs[(wj["run_id"], wj["run_attempt"])]["head_sha"] == wj["head_sha"]


def test_reattempts_get_new_job_ids_under_the_same_run(truth, jobs):
    assert truth["reattempted_runs"]
    for r in truth["reattempted_runs"]:
        assert r["rerun_job_ids"] and not set(r["rerun_job_ids"]) & set(r["failed_job_ids"])
        for jid in r["rerun_job_ids"]:
            for wj in jobs.get(jid, []):
                assert wj["run_id"] == r["run_id"] and wj.get("run_attempt", 2) == 2


def test_quirks_occur_at_the_requested_rates(tmp_path):
    root = _generate(tmp_path / "quirky", days=(D1,), duplicate_rate=0.05, out_of_order_rate=0.2,
                     old_payload_rate=0.05, test_reports=False)
    envs = [e for _, e in _envelopes(root)]
    ids = collections.Counter(e["delivery_id"] for e in envs)
    dup_share = sum(n - 1 for n in ids.values()) / len(envs)
    assert 0.03 < dup_share < 0.07
    for did, n in ids.items():
        if n > 1:
            copies = [e for e in envs if e["delivery_id"] == did]
            assert all(c["payload"] == copies[0]["payload"] for c in copies)
            break
    order: dict[int, list[str]] = collections.defaultdict(list)
    for e in envs:
        if e["event"] == "workflow_job":
            order[e["payload"]["workflow_job"]["id"]].append(e["payload"]["action"])
    both = [a for a in order.values() if "in_progress" in a and "completed" in a]
    late = sum(a.index("completed") < a.index("in_progress") for a in both)
    assert 0.05 < late / len(both) < 0.25  # test and build jobs (most of them) at 20%
    wjs = [e["payload"]["workflow_job"] for e in envs if e["event"] == "workflow_job"]
    assert 0.02 < sum("workflow_name" not in w for w in wjs) / len(wjs) < 0.05
    assert any("steps" not in w for w in wjs) and all("run_id" in w for w in wjs)
    truth = json.loads((root / "ground-truth.json").read_text())
    assert truth["quirks"]["duplicate_deliveries"] == sum(n - 1 for n in ids.values())
    assert not (root / "test-reports").exists()


def test_reports_parse_and_reruns_only_hit_planted_tests(archive, truth):
    planted = {(v["classname"], v["name"]) for k in ("flaky_tests", "platform_failures")
               for t in truth[k] for v in t["variants"]}
    planted |= {(t["classname"], t["name"]) for k in ("broken_tests", "pr_caused_failures") for t in truth[k]}
    flaky = {(v["classname"], v["name"]) for t in truth["flaky_tests"] for v in t["variants"]}
    rerun_seen, dialects = set(), collections.Counter()
    for _, root in _reports(archive):
        assert root.tag == "testsuites" and root.get("name") == "pytest tests"
        suite = root.find("testsuite")
        cases = suite.findall("testcase")
        assert int(suite.get("tests")) == len(cases)
        assert int(suite.get("failures")) == sum(c.find("failure") is not None for c in cases)
        assert int(suite.get("skipped")) == sum(c.find("skipped") is not None for c in cases)
        for c in cases:
            dotted = c.get("classname").startswith("test.")
            dialects["pytest" if dotted else "pytorch"] += 1
            assert (c.get("file") is None) == dotted
            if c.find("rerun") is not None:
                key = (c.get("classname").rsplit(".", 1)[-1], c.get("name"))
                assert key in planted
                rerun_seen.add(key)
    assert rerun_seen & flaky
    assert dialects["pytest"] > 0 and dialects["pytorch"] > 0


def test_flaky_tests_fail_at_their_planted_rate_and_mostly_pass_on_rerun():
    world = World(Options(seed=3))
    flaky = [r for r in world.rules if r.kind == "flaky"]
    assert 0.005 <= min(r.rate for r in flaky) < 0.05 and 0.1 < max(r.rate for r in flaky) <= 0.30
    expected = observed = passed_on_rerun = 0.0
    for act in world.activities(D1):
        for job in act.jobs:
            if job.kind != "test" or job.conclusion == "skipped":
                continue
            for f in job.files:
                for r in world.rules_by_file.get(f.path, ()):
                    if r.kind == "flaky" and (r.platforms is None or job.cfg.platform in r.platforms) \
                            and not skip_reason(r.template, job.cfg):
                        expected += r.rate
            for o in job.outcomes.values():
                if o.kind == "flaky":
                    observed += 1
                    passed_on_rerun += not o.tries[-1]
    assert 0.8 < observed / expected < 1.2
    assert passed_on_rerun / observed > 0.9


def test_test_runs_rows_and_xml_reports_cover_disjoint_jobs(archive):
    rows = []
    for f in (archive / "test-runs").glob("day=*/*.jsonl.gz"):
        with gzip.open(f, "rt") as fh:
            rows += [json.loads(line) for line in fh]
    assert rows
    for r in rows[:500]:
        assert {"classname", "file", "invoking_file", "name", "time", "failure", "error", "skipped", "rerun",
                "job_id", "workflow_id", "workflow_run_attempt"} <= set(r)
        assert r["file"].endswith(".py") and "/" not in r["invoking_file"]
        for k in ("failure", "error", "skipped"):
            assert r[k] is None or "message" in r[k]
    xml_jobs = {int(REPORT_RE.search(str(p)).group(4)) for p in (archive / "test-reports").rglob("*.xml*")}
    assert xml_jobs and not xml_jobs & {r["job_id"] for r in rows}


def test_infra_failures_are_in_the_data(archive, truth, jobs):
    infra = truth["infra_failed_jobs"]
    assert infra
    for j in infra:
        completed = [wj for wj in jobs.get(j["job_id"], []) if wj["status"] == "completed"]
        if completed:
            assert completed[0]["conclusion"] == j["conclusion"] in ("failure", "cancelled")
        reports = list((archive / "test-reports").glob(f"day=*/{j['run_id']}/{j['run_attempt']}/{j['job_id']}"))
        if j["report"] == "missing":
            assert not reports
    assert any(jobs.get(j["job_id"]) for j in infra)
    ima = [j for j in infra if j["kind"] == "cuda_illegal_memory_access"]
    assert ima
    for p, root in _reports(archive):
        if int(REPORT_RE.search(str(p)).group(4)) in {j["job_id"] for j in ima}:
            if any("illegal memory access" in (e.get("message") or "") for e in root.iter("error")):
                break
    else:
        pytest.fail("no report shows the illegal memory access of an infra-failed job")


def test_broken_tests_fail_on_their_first_commit(archive, truth, jobs):
    sha_of_job = {jid: p[0]["head_sha"] for jid, p in jobs.items()}
    broken = truth["broken_tests"]
    assert broken
    checked = 0
    for p, root in _reports(archive):
        jid = int(REPORT_RE.search(str(p)).group(4))
        for b in broken:
            if sha_of_job.get(jid) != b["first_commit"]:
                continue
            for c in root.iter("testcase"):
                if c.get("classname").rsplit(".", 1)[-1] == b["classname"] and c.get("name") == b["name"]:
                    assert c.find("failure") is not None or c.find("error") is not None
                    checked += 1
    assert checked > 0


def test_backend_results_follow_their_profiles(archive, truth, envelopes):
    recs = []
    for f in sorted((archive / "ci-results").glob("day=*/*.jsonl.gz")):
        with gzip.open(f, "rt") as fh:
            recs += [json.loads(line) for line in fh]
    push_ids = {e["delivery_id"] for _, e in envelopes if e["event"] == "push"}
    assert sum(r["untrusted"]["callback_payload"]["delivery_id"] in push_ids for r in recs) > 0.8 * len(recs)
    profile = {b["repo"]: b["profile"] for b in truth["backends"]}
    done = collections.defaultdict(list)
    per_minute = collections.Counter()
    for r in recs:
        repo, wf = r["trusted"]["verified_repo"], r["untrusted"]["callback_payload"]["workflow"]
        assert set(wf) >= {"schema_version", "status", "conclusion", "name", "url", "run_id", "run_attempt",
                           "job_name", "check_run_id", "started_at", "completed_at"}
        if wf["status"] == "completed" and r["untrusted"]["callback_payload"]["event_type"] == "push":
            assert set(wf["test_results"]) == {"passed", "failed", "skipped"}
            done[profile[repo]].append(wf["conclusion"])
            per_minute[(profile[repo], wf["completed_at"][:16])] += 1
    rate = {p: v.count("success") / len(v) for p, v in done.items()}
    assert rate["healthy"] > 0.85 and 0.4 < rate["demote"] < 0.8
    assert "timed_out" in done["flaky_infrastructure"]
    assert max(n for (p, _), n in per_minute.items() if p == "abusive") >= 100
    assert max(n for (p, _), n in per_minute.items() if p == "healthy") < 20


def test_cli_prints_progress_and_totals(tmp_path, capsys):
    rc = main(["--out", str(tmp_path / "cli"), "--days", "1", "--start", str(D1), "--commits-per-day", "3",
               "--prs-per-day", "2", "--configs", "4", "--test-files", "8", "--tests-per-file", "5"])
    out = capsys.readouterr().out.splitlines()
    assert rc == 0 and out[0].startswith(str(D1)) and "deliveries" in out[0] and out[-1].startswith("total:")
    assert (tmp_path / "cli" / "webhooks" / f"day={D1}").is_dir()
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path / "bad"), "--configs", "999"])


def test_unstable_issues_mark_pr_jobs_and_every_failed_one_is_unstable_in_the_truth(truth, jobs):
    """The planted UNSTABLE issues are open issues as GitHub returns them, their titles read by the
    flakiness domain as PyTorch's script reads them; a failed PR job of a marked test config or
    build environment is UNSTABLE in the truth whatever else broke it, and no other job is."""
    from torchci_assets.derived.flakiness.job_issues import UNSTABLE_PREFIX, condense_jobs

    issues = truth["unstable_issues"]
    listed = condense_jobs(issues, UNSTABLE_PREFIX, lambda author: True)
    config_mark, env_mark = (i for i in issues)
    assert sorted(listed) == sorted([f"pull / {config_mark['build_env']} / test ({config_mark['test_config']})",
                                     f"pull / {env_mark['build_env']}"])
    assert env_mark["test_config"] is None and env_mark["build_env"] != config_mark["build_env"]
    archived = {c["sha"] for c in truth["main_commits"]}
    seen = collections.Counter()
    for rec in truth["pr_failed_jobs"]:
        env, _, rest = rec["name"].partition(" / ")
        marked = rec["workflow"] == "pull" and (
            env == env_mark["build_env"]
            or (env == config_mark["build_env"] and rest.startswith(f"test ({config_mark['test_config']},")))
        assert (rec["class"] == "UNSTABLE") == marked, rec
        assert rec["cause"] in ("NEW", "BROKEN TRUNK", "FLAKY", "INFRA") and (marked or rec["cause"] == rec["class"])
        seen[marked] += 1
        assert re.fullmatch(r"[0-9a-f]{40}", rec["merge_base"])
        assert [w for w in jobs[rec["job_id"]] if w["status"] == "completed"][0]["conclusion"] in ("failure", "cancelled")
    assert seen[True] and seen[False]
    # a PR's merge base is the main commit it branched from: the archive's, but for PRs of its first hours
    assert sum(r["merge_base"] in archived for r in truth["pr_failed_jobs"]) > len(truth["pr_failed_jobs"]) / 2
    assert World(Options(seed=0, unstable_jobs=0)).unstable == ()


def test_an_s3_out_is_refused_not_written_to_a_local_folder_named_s3(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as usage:
        main(["--out", "s3://bucket/archive", "--days", "1"])
    assert usage.value.code == 2 and "the simulator writes a local folder" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
