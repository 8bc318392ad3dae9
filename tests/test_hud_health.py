"""`commit_health` and `pr_jobs` on hand-made CI histories: PyTorch's red/flaky/green/pending
semantics, placeholder job ids, the 36 h rule, and how failures are told apart."""

import datetime as dt

import pyarrow as pa
import pytest
from hud_lake import DAY, REPO, T0, History, schema, sha

from resources.lake import Lake, connect
from torchci_assets.derived.hud.health import build_commit_health, build_pr_jobs

NOW = dt.datetime(2026, 10, 5, 20, 0, tzinfo=dt.timezone.utc)  # the partition is judged "now", before midnight


def health(tmp_path, h: History, now=NOW, **kw) -> tuple[dict, dict]:
    """({sha: conclusion}, {(sha, job_group): row})."""
    lake = Lake.at(str(tmp_path / "lake"))
    h.write(lake)
    build_commit_health(lake, DAY, REPO, kw.pop("branches", ("refs/heads/main",)), min_groups=kw.pop("min_groups", 1),
                        now=now, **kw)
    con = connect()
    lake.register(con, "commit_health", [DAY], name="c")
    cur = con.execute("SELECT * FROM c")
    names = [d[0] for d in cur.description]
    rows = [dict(zip(names, r)) for r in cur.fetchall()]
    return {r["sha"]: r["conclusion"] for r in rows}, {(r["sha"], r["job_group"]): r for r in rows}


TEST = "linux-jammy-py3.10-gcc11 / test (default, {}, 2, linux.4xlarge)"
GROUP = "pull / linux-jammy-py3.10-gcc11 / test (default, linux.4xlarge)"


def test_shards_are_one_group_and_a_group_failing_on_every_attempt_is_red(tmp_path):
    h = History()
    c = h.push(1)
    h.job(c, TEST.format(1), "success", run_id=10)
    h.job(c, TEST.format(2), "failure", run_id=10)
    h.job(c, TEST.format(2), "failure", run_id=10, attempt=2, created=T0 + dt.timedelta(hours=1))
    h.job(c, "lintrunner / linux-job", "success", workflow="Lint", run_id=11)
    h.run(10, "pull", conclusion="failure")
    conclusions, rows = health(tmp_path, h)
    assert conclusions[c] == "red"
    row = rows[(c, GROUP)]
    assert (row["state"], row["attempts"], row["run_attempt"], row["jobs"]) == ("failure", 2, 2, 1)
    assert row["failure_class"] == "new"  # no failing test known: a new failure, not an explained one
    assert rows[(c, "Lint / lintrunner / linux-job")]["state"] == "success"


def test_a_group_that_failed_then_passed_on_rerun_makes_the_commit_flaky(tmp_path):
    h = History()
    c = h.push(1)
    h.job(c, TEST.format(1), "success", run_id=10)
    h.job(c, TEST.format(2), "failure", run_id=10)
    h.job(c, TEST.format(2), "success", run_id=10, attempt=2, created=T0 + dt.timedelta(hours=1))
    conclusions, rows = health(tmp_path, h)
    assert conclusions[c] == "flaky"
    assert rows[(c, GROUP)]["state"] == "flaky" and rows[(c, GROUP)]["failure_class"] is None


def test_in_flight_is_pending_until_36_hours_then_a_failure_of_the_infrastructure(tmp_path):
    h = History()
    young, old = h.push(1, T0), h.push(2, T0 - dt.timedelta(hours=40))
    h.job(young, TEST.format(1), None, run_id=10, created=T0)
    h.run(10, "pull", status="in_progress", created=T0)
    h.job(old, TEST.format(1), None, run_id=20, created=T0 - dt.timedelta(hours=40), day="2026-10-03")
    h.run(20, "pull", status="in_progress", created=T0 - dt.timedelta(hours=40), day="2026-10-03")
    h.push(3, T0 - dt.timedelta(hours=40))  # a push with no job at all after 40 h: nothing ran
    conclusions, rows = health(tmp_path, h)
    assert conclusions[young] == "pending" and rows[(young, GROUP)]["state"] == "pending"
    assert conclusions[old] == "red"
    assert (rows[(old, GROUP)]["failure_class"], rows[(old, GROUP)]["infra_reason"]) == ("infra", "abandoned")
    assert conclusions[sha(3)] == "no_signal"


def test_a_placeholder_job_id_never_finalized_does_not_keep_the_commit_pending(tmp_path):
    h = History()
    c = h.push(1)
    # GitHub's dead placeholder: queued forever, no conclusion; then the id that really ran
    h.job(c, TEST.format(1), None, run_id=10, status="queued", job_id=501)
    h.job(c, TEST.format(1), "success", run_id=10, job_id=502)
    conclusions, rows = health(tmp_path, h)
    assert conclusions[c] == "green"
    assert rows[(c, GROUP)]["job_id"] == 502 and rows[(c, GROUP)]["jobs"] == 1


def test_a_job_of_a_completed_run_is_resolved_even_without_its_own_conclusion(tmp_path):
    h = History()
    c = h.push(1)
    h.job(c, TEST.format(1), None, run_id=10, status="queued")
    h.run(10, "pull", status="completed", conclusion="success")
    conclusions, _ = health(tmp_path, h)
    assert conclusions[c] == "green"


def test_only_blocking_workflows_decide_the_conclusion_and_too_few_groups_is_no_signal(tmp_path):
    h = History()
    c = h.push(1)
    h.job(c, TEST.format(1), "success", run_id=10)
    h.job(c, "linux-noble-rocm / test (default, 1, 1, linux.rocm.gpu)", "failure", workflow="rocm", run_id=12)
    h.job(c, TEST.format(2) + " (unstable)", "failure", run_id=10)
    conclusions, rows = health(tmp_path, h)
    assert conclusions[c] == "green"
    rocm = rows[(c, "rocm / linux-noble-rocm / test (default, linux.rocm.gpu)")]
    assert rocm["state"] == "failure" and not rocm["blocking"]
    conclusions, _ = health(tmp_path / "again", h, min_groups=11)  # PyTorch's "more than 10 groups"
    assert conclusions[c] == "no_signal"


def test_failures_are_told_apart_known_flaky_broken_infra_new(tmp_path):
    h = History()
    commits = [h.push(i) for i in range(1, 6)]
    kinds = {}
    for i, (c, case) in enumerate(zip(commits, ("flaky", "broken", "infra", "new", "log"))):
        j = h.job(c, TEST.format(1), "failure", run_id=100 + i, test_config="default")
        kinds[c] = case
        if case == "infra":
            h.test_job(j, infra_reason="mass-failure")
            continue
        if case == "log":  # the log classifier's job_failure row says infrastructure
            h.add("job_failure", DAY, job_id=j, run_attempt=1, infra=True, line="##[error]The runner has received "
                                                                               "a shutdown signal.")
            h.test_job(j)
            continue
        h.test_job(j)
        h.failing_test(c, j, f"test_{case}")
    h.verdict("test_flaky", "flaky")
    h.verdict("test_broken", "broken")
    h.verdict("test_new", "healthy")
    _, rows = health(tmp_path, h)
    got = {kinds[c]: rows[(c, GROUP)] for c in commits}
    assert {k: r["failure_class"] for k, r in got.items()} == {
        "flaky": "known_flaky", "broken": "broken_on_main", "infra": "infra", "new": "new", "log": "infra"}
    assert got["broken"]["failing_tests"] == ["TestNN.test_broken (test_nn.py)"]
    assert got["infra"]["infra_reason"] == "mass-failure"
    assert got["log"]["failure_line"].startswith("##[error]The runner")


def test_a_real_failure_next_to_an_infra_failure_is_new_and_a_test_job_without_results_is_infra(tmp_path):
    h = History()
    c, d = h.push(1), h.push(2)
    j1 = h.job(c, TEST.format(1), "failure", run_id=10, test_config="default")
    j2 = h.job(c, TEST.format(2), "failure", run_id=10, test_config="default")
    h.test_job(j1, infra_reason="job-died")
    h.test_job(j2)
    h.failing_test(c, j2, "test_regressed")
    h.job(d, TEST.format(1), "failure", run_id=20, test_config="default")  # no test_jobs row: no results at all
    _, rows = health(tmp_path, h)
    assert rows[(c, GROUP)]["failure_class"] == "new" and rows[(c, GROUP)]["failing_jobs"] == 2
    assert (rows[(d, GROUP)]["failure_class"], rows[(d, GROUP)]["infra_reason"]) == ("infra", "no-test-results")


def test_late_deliveries_of_the_window_count_and_time_to_signal_is_for_first_attempt_greens(tmp_path):
    h = History()
    c, r = h.push(1), h.push(2)
    # queued the day before (the push too), completed today: the latest state across days wins
    h.push(1, T0 - dt.timedelta(days=1))
    h.job(c, TEST.format(1), None, run_id=10, job_id=900, created=T0 - dt.timedelta(days=1), day="2026-10-04")
    h.job(c, TEST.format(1), "success", run_id=10, job_id=900, created=T0 - dt.timedelta(days=1))
    h.run(10, "pull", created=T0 - dt.timedelta(hours=2), minutes=90)
    h.run(11, "trunk", created=T0 - dt.timedelta(hours=2), minutes=150)
    h.job(c, "linux-jammy-cuda / build", "success", workflow="trunk", run_id=11)
    h.job(r, TEST.format(1), "success", run_id=12)
    h.run(12, "pull", attempt=1, conclusion="failure")
    h.run(12, "pull", attempt=2, conclusion="success")
    conclusions, rows = health(tmp_path, h)
    assert conclusions[c] == "green" and rows[(c, GROUP)]["time_to_signal_s"] == 150 * 60
    assert rows[(r, GROUP)]["time_to_signal_s"] is None  # needed a second attempt: no first-attempt signal


def test_a_quiet_day_writes_an_empty_partition(tmp_path):
    lake = Lake.at(str(tmp_path / "lake"))
    lake.write("workflow_job", DAY, pa.Table.from_pylist([], schema=schema("workflow_job")))
    report = build_commit_health(lake, DAY, REPO, ("refs/heads/main",), now=NOW)
    assert report.commits == 0 and report.rows == 0 and lake.files("commit_health", [DAY])
    assert build_pr_jobs(lake, DAY, REPO, now=NOW).rows == 0 and lake.files("pr_jobs", [DAY])


def test_commit_health_names_the_tables_it_read_and_their_files(tmp_path):
    """The materialization's `files_read` says, per table the user knows from the graph, how many
    files of the window were read (a table without any is a gap upstream)."""
    lake = Lake.at(str(tmp_path / "lake"))
    lake.write("workflow_job", DAY, pa.Table.from_pylist([], schema=schema("workflow_job")))
    report = build_commit_health(lake, DAY, REPO, ("refs/heads/main",), now=NOW)
    assert report.inputs == {"push": 0, "workflow_job": 1, "workflow_run": 0, "test_jobs": 0, "test_sha_outcomes": 0,
                             "flaky_tests": 0, "job_failure": 0}


def test_pr_jobs_follow_the_latest_head_and_carry_the_l3_l4_downstream_results(tmp_path):
    h = History()
    old, new = sha(0xA1), sha(0xA2)
    for head, at in ((old, T0), (new, T0 + dt.timedelta(hours=1))):
        h.add("pull_request", DAY, repo=REPO, number=42, state="open", head_sha=head, head_ref="gh/x/1/head",
              base_ref="main", labels=["ciflow/trunk"], merged=None, updated_at=at, received_at=at)
    h.job(old, TEST.format(1), "failure", run_id=30, branch="gh/x/1/head")
    j = h.job(new, TEST.format(1), "failure", run_id=31, branch="gh/x/1/head", test_config="default")
    h.job(new, TEST.format(2), "success", run_id=31, branch="gh/x/1/head")
    h.test_job(j)
    h.failing_test(new, j, "test_broken")
    h.verdict("test_broken", "broken")
    for repo, level, kind in (("acme/torch-npu", "L3", "test"), ("acme/torch-tpu", "L4", "infrastructure"),
                              ("acme/torch-dpu", "L2", "none")):
        h.add("ci_result", DAY, repo=repo, level=level, head_sha=new, workflow_name="npu-ci", run_id=7, run_attempt=1,
              job_name="test (default, 1, 1)", status="completed", conclusion="failure", started_at=T0,
              completed_at=T0 + dt.timedelta(minutes=30), execution_s=1800.0, failed=3, callback_at=T0,
              failure_kind=kind)
    lake = Lake.at(str(tmp_path / "lake"))
    h.write(lake)
    report = build_pr_jobs(lake, DAY, REPO, now=NOW)
    con = connect()
    lake.register(con, "pr_jobs", [DAY], name="p")
    cur = con.execute("SELECT * FROM p ORDER BY source, name")
    names = [d[0] for d in cur.description]
    rows = [dict(zip(names, r)) for r in cur.fetchall()]
    assert report.pull_requests == 1 and {r["head_sha"] for r in rows} == {new}
    assert report.downstream_rows == 2
    assert report.failure_classes == {"infra": 1, "new": 1, "broken_on_main": 1, "known_flaky": 0}
    github = [r for r in rows if r["source"] == "github"]
    assert [(r["state"], r["failure_class"]) for r in github] == [("failure", "broken_on_main"), ("success", None)]
    downstream = {r["source"]: (r["level"], r["state"], r["failure_class"]) for r in rows if r["source"] != "github"}
    assert downstream == {"acme/torch-npu": ("L3", "failure", "new"), "acme/torch-tpu": ("L4", "failure", "infra")}


@pytest.mark.parametrize("stale_hours,expected", [(36, "pending"), (6, "red")])
def test_the_stale_bound_is_a_parameter(tmp_path, stale_hours, expected):
    h = History()
    c = h.push(1, T0 - dt.timedelta(hours=10))
    h.job(c, TEST.format(1), None, run_id=10, created=T0 - dt.timedelta(hours=10))
    conclusions, _ = health(tmp_path, h, stale_hours=stale_hours)
    assert conclusions[c] == expected


def test_a_pull_request_failure_its_group_also_has_on_main_is_broken_on_main(tmp_path):
    h = History()
    c = h.push(1, T0)
    build, test = "linux-jammy / build", TEST.format(1)
    h.job(c, build, "failure", run_id=10)  # main's build is broken (no test to compare)
    h.job(c, test, "success", run_id=10)
    pr_head = sha(0xB1)
    h.add("pull_request", DAY, repo=REPO, number=7, state="open", head_sha=pr_head, head_ref="gh/y/1/head",
          base_ref="main", labels=[], merged=None, updated_at=T0, received_at=T0)
    later = T0 + dt.timedelta(hours=1)
    h.job(pr_head, build, "failure", run_id=40, created=later, branch="gh/y/1/head")
    h.job(pr_head, test, "failure", run_id=40, created=later, branch="gh/y/1/head")  # green on main: the PR's own
    h.job(pr_head, "linux-other / build", "failure", run_id=40, created=T0 - dt.timedelta(hours=2),
          branch="gh/y/1/head")  # started before any main commit of the window: nothing to compare with
    got = {r["name"]: r["failure_class"] for r in pr_rows(tmp_path, h)}
    assert got == {build: "broken_on_main", test: "new", "linux-other / build": "new"}


def pr_rows(tmp_path, h: History) -> list[dict]:
    """The pr_jobs rows of `h`'s day, GitHub's only, by name."""
    lake = Lake.at(str(tmp_path / "lake"))
    h.write(lake)
    build_commit_health(lake, DAY, REPO, ("refs/heads/main",), min_groups=1, now=NOW)
    build_pr_jobs(lake, DAY, REPO, now=NOW)
    con = connect()
    lake.register(con, "pr_jobs", [DAY], name="p")
    cur = con.execute("SELECT * FROM p WHERE source = 'github' ORDER BY name")
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def test_a_pull_request_job_is_the_newest_runs_latest_attempt_not_an_older_runs_rerun(tmp_path):
    """A workflow run again on the same head (a re-pushed ciflow tag) replaces the older run, whose
    attempt 2 must not win over the newer run's attempt 1, even when re-run after it started."""
    h = History()
    head, branch = sha(0xC1), "gh/z/1/head"
    h.add("pull_request", DAY, repo=REPO, number=11, state="open", head_sha=head, head_ref=branch,
          base_ref="main", labels=[], merged=None, updated_at=T0, received_at=T0)
    a, b = TEST.format(1), TEST.format(2)
    for name in (a, b):
        h.job(head, name, "failure", workflow="trunk", run_id=500, attempt=1, created=T0, branch=branch)
    h.job(head, a, "failure", workflow="trunk", run_id=500, attempt=2, created=T0 + dt.timedelta(hours=1),
          branch=branch)
    h.job(head, a, "success", workflow="trunk", run_id=600, created=T0 + dt.timedelta(hours=3), branch=branch)
    h.job(head, b, "success", workflow="trunk", run_id=600, created=T0 + dt.timedelta(hours=3), branch=branch)
    h.job(head, b, "failure", workflow="trunk", run_id=500, attempt=2, created=T0 + dt.timedelta(hours=4),
          branch=branch)
    h.job(head, b, "failure", workflow="trunk", run_id=600, attempt=2, created=T0 + dt.timedelta(hours=5),
          branch=branch)  # within the newest run, its latest attempt
    rows = pr_rows(tmp_path, h)
    assert [(r["name"], r["state"], r["run_id"], r["run_attempt"], r["attempts"]) for r in rows] == [
        (a, "success", 600, 1, 3), (b, "failure", 600, 2, 4)]


def test_a_pull_request_job_failed_by_cancellation_only_is_marked_cancelled(tmp_path):
    """Dr. CI lists those apart (to retry); a job still counts as failed either way."""
    h = History()
    head, branch = sha(0xC2), "gh/z/2/head"
    h.add("pull_request", DAY, repo=REPO, number=12, state="open", head_sha=head, head_ref=branch,
          base_ref="main", labels=[], merged=None, updated_at=T0, received_at=T0)
    h.job(head, "linux / build", "cancelled", run_id=70, branch=branch)
    h.job(head, "linux / docs", "failure", run_id=70, branch=branch)
    h.job(head, "linux / lint", "cancelled", run_id=70, branch=branch)
    h.job(head, "linux / lint", "failure", run_id=70, attempt=2, created=T0 + dt.timedelta(hours=1), branch=branch)
    h.job(head, "linux / test", "cancelled", run_id=70, branch=branch)
    h.job(head, "linux / test", "success", run_id=70, attempt=2, created=T0 + dt.timedelta(hours=1), branch=branch)
    rows = pr_rows(tmp_path, h)
    assert [(r["name"], r["state"], r["failure_class"], r["cancelled"]) for r in rows] == [
        ("linux / build", "failure", "new", True), ("linux / docs", "failure", "new", False),
        ("linux / lint", "failure", "new", False), ("linux / test", "success", None, False)]


def test_a_pull_request_failure_is_broken_on_main_only_when_main_fails_every_one_of_its_tests(tmp_path):
    """One failing test main does not share makes the job the pull request's own (as Dr. CI says it is);
    a list cut at MAX_LISTED_TESTS cannot show that every test is shared."""
    h = History()
    c = h.push(1, T0)
    pr_head, branch, later = sha(0xB2), "gh/y/2/head", T0 + dt.timedelta(hours=1)
    h.add("pull_request", DAY, repo=REPO, number=8, state="open", head_sha=pr_head, head_ref=branch,
          base_ref="main", labels=[], merged=None, updated_at=T0, received_at=T0)
    cases = {"linux-shared / test (default, 1, 1, linux.2xlarge)": (["test_a"], ["test_a"]),
             "linux-mixed / test (default, 1, 1, linux.2xlarge)": (["test_a"], ["test_a", "test_new"]),
             "linux-many / test (default, 1, 1, linux.2xlarge)": ([f"test_{i}" for i in range(7)],) * 2}
    for run, (name, (on_main, on_pr)) in enumerate(cases.items()):
        j = h.job(c, name, "failure", run_id=10 + run)
        for t in on_main:
            h.failing_test(c, j, t)
        j = h.job(pr_head, name, "failure", run_id=40 + run, created=later, branch=branch)
        for t in on_pr:
            h.failing_test(pr_head, j, t)
    got = {r["name"].split(" /")[0]: (r["failure_class"], r["failing_test_count"]) for r in pr_rows(tmp_path, h)}
    assert got == {"linux-shared": ("broken_on_main", 1), "linux-mixed": ("new", 2), "linux-many": ("new", 7)}


@pytest.mark.parametrize("branches", [("refs/heads/main", "refs/heads/release/2.9"),
                                      ("refs/heads/release/2.9", "refs/heads/main"),
                                      ("refs/heads/release/2.9", "refs/heads/master")])
def test_only_the_main_branch_is_main_whatever_other_branches_are_relayed(tmp_path, branches):
    """A release branch's pushes also run trunk: in main's timeline, its green commit pushed after main
    broke would hide the break (and shift the guardians' culprit)."""
    main = branches[1] if branches[1] == "refs/heads/master" else "refs/heads/main"
    h = History()
    for i, (ref, conclusion) in enumerate(((main, "failure"), ("refs/heads/release/2.9", "success")), start=1):
        at = T0 + dt.timedelta(minutes=10 * i)
        h.add("push", DAY, repo=REPO, ref=ref, after=sha(i), deleted=False, received_at=at)
        h.job(sha(i), TEST.format(1), conclusion, workflow="trunk", run_id=i, created=at)
    conclusions, _ = health(tmp_path, h, branches=branches)
    assert conclusions == {sha(1): "red"}


def test_pr_jobs_lineage_names_its_own_previous_day_which_it_reads():
    import dagster as dg

    from torchci_assets.definitions import defs

    node = defs.resolve_asset_graph().get(dg.AssetKey("pr_jobs"))
    assert dg.AssetKey("pr_jobs") in node.parent_keys
    mapping = node.partition_mappings[dg.AssetKey("pr_jobs")]
    assert (mapping.start_offset, mapping.end_offset) == (-1, -1)


def test_a_job_whose_completed_webhook_was_lost_in_a_failed_run_is_pending_then_abandoned(tmp_path):
    """The run's `completed` (conclusion failure) arrived, one job's did not: that job may well be the
    run's failure, so it is pending, not a success, until its conclusion arrives (gap repair reads it
    from GitHub); after STALE_HOURS without one it is abandoned, an infrastructure failure."""
    h = History()
    old_at = T0 - dt.timedelta(hours=40)
    young, old = h.push(1, T0), h.push(2, old_at)
    for c, run_id, at in ((young, 10, T0), (old, 20, old_at)):
        day = at.date().isoformat()
        h.job(c, TEST.format(1), "success", run_id=run_id, created=at, day=day)
        h.job(c, TEST.format(2), None, run_id=run_id, created=at, day=day)  # in progress; its `completed` lost
        h.run(run_id, "pull", conclusion="failure", created=at, day=day)
    conclusions, rows = health(tmp_path, h)
    assert conclusions[young] == "pending" and rows[(young, GROUP)]["state"] == "pending"
    assert rows[(young, GROUP)]["failure_class"] is None
    assert conclusions[old] == "red" and rows[(old, GROUP)]["state"] == "failure"
    assert (rows[(old, GROUP)]["failure_class"], rows[(old, GROUP)]["infra_reason"]) == ("infra", "abandoned")


def test_a_rerun_job_completed_after_midnight_by_an_older_github_is_the_rerun_s(tmp_path):
    """A rerun's job queued before midnight (attempt 2), its completion after midnight from an older
    GitHub without run_attempt: that day's ingest knows no attempt for the job and writes 1. A job id
    belongs to one attempt, so the HUD takes the rerun's from the job's other day (it kept the rerun
    pending, the commit with it, until it called it abandoned)."""
    h = History()
    before = T0 - dt.timedelta(hours=9)  # 23:00 the day before
    c = h.push(1, before)
    h.job(c, TEST.format(1), "failure", run_id=10, created=before, day=before.date().isoformat())
    rerun_at = before + dt.timedelta(minutes=30)
    rerun = h.job(c, TEST.format(1), None, run_id=10, attempt=2, created=rerun_at, day=before.date().isoformat())
    h.job(c, TEST.format(1), "failure", run_id=10, attempt=1, job_id=rerun, created=rerun_at)  # its completion
    h.run(10, "pull", conclusion="failure", created=before, day=before.date().isoformat())
    conclusions, rows = health(tmp_path, h)
    row = rows[(c, GROUP)]
    assert (row["state"], row["attempts"], row["run_attempt"]) == ("failure", 2, 2)
    assert conclusions[c] == "red"


@pytest.mark.parametrize("run_conclusion,job_status,state,commit", [
    ("success", "in_progress", "success", "green"),   # the run says none of its jobs failed
    ("skipped", "queued", "skipped", "green"),  # every job of the run was skipped
    ("failure", "in_progress", "pending", "pending"),  # it may be the run's failure
    ("timed_out", "in_progress", "pending", "pending"),
    ("failure", "queued", "pending", "pending"),
    ("cancelled", "queued", "skipped", "green"),  # cancelled before it got a runner: nothing ran, nothing failed
    ("cancelled", "in_progress", "pending", "pending"),  # cancelled while it ran would be a failure: unknown
])
def test_a_job_without_conclusion_in_a_completed_run_is_what_the_runs_conclusion_allows(
        tmp_path, run_conclusion, job_status, state, commit):
    """The same job on a main commit and on a pull request's head: both tables say the same."""
    h = History()
    c, head, branch = h.push(1), sha(0xC3), "gh/z/3/head"
    h.add("pull_request", DAY, repo=REPO, number=13, state="open", head_sha=head, head_ref=branch,
          base_ref="main", labels=[], merged=None, updated_at=T0, received_at=T0)
    for run_id, on, on_branch in ((10, c, "main"), (40, head, branch)):
        h.job(on, TEST.format(1), None, run_id=run_id, status=job_status, branch=on_branch)
        h.run(run_id, "pull", conclusion=run_conclusion)
    [row] = pr_rows(tmp_path, h)
    conclusions, groups = health(tmp_path / "main", h)
    assert (row["state"], row["failure_class"]) == (state, None)
    assert (groups[(c, GROUP)]["state"], conclusions[c]) == (state, commit)


def both_tables(tmp_path, h: History) -> dict[str, list[tuple]]:
    """Every row of commit_health and pr_jobs for `h`'s day, in a total order."""
    lake = Lake.at(str(tmp_path / "lake"))
    h.write(lake)
    build_commit_health(lake, DAY, REPO, ("refs/heads/main",), min_groups=1, now=NOW)
    build_pr_jobs(lake, DAY, REPO, now=NOW)
    con = connect()
    got = {}
    for table in ("commit_health", "pr_jobs"):
        lake.register(con, table, [DAY], name="t")
        got[table] = con.execute("SELECT * FROM t ORDER BY ALL").fetchall()
    return got


def shuffled(h: History) -> History:
    """The same history, every table's rows in the opposite order (as another ingest could write them)."""
    again = History()
    again.rows = {key: rows[::-1] for key, rows in h.rows.items()}
    return again


def test_the_same_history_gives_the_same_rows_whatever_the_order_of_its_input_rows(tmp_path):
    """Two builds of a day write the same tables: the failure line is the linked job's (the longest
    failing one; of a job's ids, the latest), the failing tests listed that job's first, each job's
    in its own order (new failures first), not as rows happened to arrive."""
    h = History()
    c, pr_head, branch = h.push(1), sha(0xD1), "gh/d/1/head"
    h.add("pull_request", DAY, repo=REPO, number=21, state="open", head_sha=pr_head, head_ref=branch,
          base_ref="main", labels=[], merged=None, updated_at=T0, received_at=T0)
    long = h.job(c, TEST.format(1), "failure", run_id=10, minutes=50, test_config="default")
    short = h.job(c, TEST.format(2), "failure", run_id=10, minutes=20, test_config="default")
    for j, tests in ((short, ("test_c", "test_a")), (long, ("test_d", "test_b"))):
        h.test_job(j)
        h.add("job_failure", DAY, job_id=j, run_attempt=1, infra=False, line=f"FAILED job {j}")
        for t in tests:
            h.failing_test(c, j, t)
    h.verdict("test_b", "flaky")
    # a job GitHub gave two ids (a placeholder that failed too): each has a log line, the latest id is linked
    name = "linux-jammy / build"
    ids = [h.job(head, name, "failure", run_id=run, branch=b) for head, run, b in
           ((c, 20, "main"), (c, 20, "main"), (pr_head, 30, branch), (pr_head, 30, branch))]
    for j in ids:
        h.add("job_failure", DAY, job_id=j, run_attempt=1, infra=False, line=f"error: job {j}")
    got = both_tables(tmp_path / "as_written", h)
    assert got == both_tables(tmp_path / "reversed", shuffled(h))
    _, rows = health(tmp_path / "health", h)
    row = rows[(c, GROUP)]
    assert (row["job_id"], row["failure_line"]) == (long, f"FAILED job {long}")
    assert row["failing_tests"] == [f"TestNN.{t} (test_nn.py)" for t in ("test_d", "test_b", "test_a", "test_c")]
    assert rows[(c, f"pull / {name}")]["failure_line"] == f"error: job {ids[1]}"
    pr = {r["name"]: r for r in pr_rows(tmp_path / "pr", h)}
    assert (pr[name]["job_id"], pr[name]["failure_line"]) == (ids[3], f"error: job {ids[3]}")
