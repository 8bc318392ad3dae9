"""The trunk world the guardians' eval runs in: planted breakages show from their commit,
restarts behave as GitHub's re-runs do, and its job tables say through the HUD's SQL what its
commit_health rows say."""

import pyarrow as pa

import pytest

from resources.lake import Lake
from torchci_assets.derived.guardians.inputs import known_flaky_tests, main_attempt_rows, main_signal_rows
from torchci_assets.derived.guardians.passes import judged
from torchci_assets.derived.hud.health import build_commit_health
from torchci_assets.derived.hud.inputs import arrow_schema
from torchci_assets.guardian_config import AutorevertConfig
from torchci_assets.simulate import trunk
from torchci_assets.simulate.trunk import GROUPS, NEW_JOB, T0, TrunkWorld, blames, write_job_tables

REPO = "pytorch/pytorch"
DAY = T0.date().isoformat()


def state(world, kind, i, minute):
    g = GROUPS[kind]
    return world._row(g, i, world.shas[i], minute)


def test_a_planted_break_fails_from_its_commit_on():
    world = TrunkWorld(3)
    p = next(p for p in world.plantings if p.kind == "breaks_test")
    late = 2000
    assert state(world, "breaks_test", p.commit - 1, late)["state"] in ("success", "flaky")
    for i in (p.commit, p.commit + 1):
        row = state(world, "breaks_test", i, late)
        assert row["state"] == "failure" and p.test in row["failing_tests"] and row["failure_class"] == "new"


def test_periodic_jobs_skip_commits_until_a_rerun_runs_them():
    world = TrunkWorld(3)
    skipped = next(i for i in range(1, 10) if i % GROUPS["breaks_periodic"].every)
    assert state(world, "breaks_periodic", skipped, 2000)["state"] == "skipped"
    assert world.restart("periodic", world.shas[skipped], "rerun", 2000) == 1
    assert state(world, "breaks_periodic", skipped, 2001)["state"] == "pending"
    assert state(world, "breaks_periodic", skipped, 2300)["state"] in ("success", "failure")


def test_a_rerun_is_refused_while_the_run_is_in_flight_and_reruns_only_failed_jobs():
    world = TrunkWorld(3)
    p = next(p for p in world.plantings if p.kind == "breaks_test")
    pushed = world.pushed_min(p.commit)
    assert world.restart("pull", world.shas[p.commit], "rerun-failed-jobs", pushed + 10) == 0
    started = world.restart("pull", world.shas[p.commit], "rerun-failed-jobs", pushed + 200)
    failed = [k for k in GROUPS if GROUPS[k].workflow == "pull" and state(world, k, p.commit, pushed + 199)["state"]
              == "failure"]
    assert started == len(failed) >= 1
    row = state(world, "breaks_test", p.commit, pushed + 400)
    assert (row["state"], row["attempts"]) == ("failure", 2)


def test_infrastructure_and_known_flaky_failures_are_classed_so():
    world = TrunkWorld(3)
    infra = next(p for p in world.plantings if p.kind == "infra_only")
    classes = {state(world, "infra_only", i, 2000)["failure_class"] for i in range(infra.commit - 8, infra.commit + 6)}
    assert "infra" in classes and "new" not in classes
    known = {state(world, "known_flaky", i, 2000)["failure_class"] for i in range(40)}
    assert known <= {None, "known_flaky"} and "known_flaky" in known


def hud_lake(tmp_path, world, minute):
    """The world's job tables as of `minute` with commit_health built from them, as the refresh does."""
    lake = Lake.at(str(tmp_path / f"lake-{minute}"))
    write_job_tables(world, lake, minute)
    pushes = [{"repo": REPO, "ref": "refs/heads/main", "after": s, "deleted": False, "received_at": world.pushed_at(i)}
              for i, s in enumerate(world.shas) if world.pushed_min(i) <= minute]
    lake.write("push", DAY, pa.Table.from_pylist(pushes, schema=arrow_schema("push")))
    build_commit_health(lake, DAY, REPO, ("refs/heads/main",), min_groups=1, now=world.at(minute))
    return lake


@pytest.mark.parametrize("seed", [3, 2])  # 2: with the landrace's new job, its death at startup and its retry
def test_the_job_tables_say_what_the_rows_say_through_the_hud_and_give_every_attempt_its_start(tmp_path, seed):
    # the eval feeds the world's rows as commit_health and the guardians read the attempts from
    # the job tables: the two must agree, reruns, infrastructure and known flaky failures included
    world = TrunkWorld(seed)
    broken = next(p for p in world.plantings if p.kind == "breaks_test")
    world.restart("pull", world.shas[broken.commit], "rerun-failed-jobs", world.pushed_min(broken.commit) + 200)
    world.restart("periodic", world.shas[5], "rerun", 300)
    world.restart("trunk", world.shas[10], "rerun", 300)
    keys = ("workflow", "state", "failure_class", "failing_tests", "failing_test_count", "attempts", "run_id",
            "run_attempt")

    def cell(r):  # (the HUD lists a group's failing tests in no particular order)
        return {k: sorted(r[k]) if k == "failing_tests" else r[k] for k in keys}
    for minute in (150, 700):
        lake = hud_lake(tmp_path, world, minute)
        at = world.at(minute)
        # (a commit pushed moments ago has a row without a group: nothing ran yet)
        hud = {(r["sha"], r["job_group"]): cell(r) for r in main_signal_rows(lake, at)
               if r["job_group"] is not None}
        rows = [r for r in world.rows(minute) if r["attempts"]]  # a skipped job has no cell on the HUD
        assert {(r["sha"], r["job_group"]): cell(r) for r in rows} == hud
        attempts = main_attempt_rows(lake, at, [r["sha"] for r in rows])
        started = {(a["sha"], a["job_group"], a["run_attempt"]): a["started_at"] for a in attempts}
        assert started == {(s, g, k + 1): world.at(start) for (g, i), atts in world.attempts.items()
                           for k, (start, _) in enumerate(atts) if start <= minute for s in [world.shas[i]]
                           if world.pushed_min(i) <= minute}
    classes = {r["failure_class"] for r in hud.values()}
    assert {"infra", "known_flaky", "new"} <= classes
    assert known_flaky_tests(lake, at) == {world.known_flaky_test}


def test_a_flaky_test_beside_a_broken_one_fails_and_passes_on_one_commit_while_the_job_fails_on_both():
    world = TrunkWorld(3, flaky_rate=0.5)
    broken = next(p for p in world.plantings if p.kind == "breaks_test")
    beside = next(p for p in world.plantings if p.kind == "flaky_beside")
    assert beside.group == broken.group and blames(broken.group, beside) and not blames(broken.group + " :: "
                                                                                        + broken.test, beside)
    mixed = [i for i in range(broken.commit, len(world.shas))
             if len({beside.test in world.outcome(beside.group, i, k, 0)[2] for k in (0, 1)}) == 2]
    assert mixed and all(world.outcome(beside.group, i, k, 0)[0] for i in mixed for k in (0, 1))


def landrace(world):
    p = next(p for p in world.plantings if p.kind == "breaks_new_job")
    return p, [world.attempts[NEW_JOB.name, i] for i in (p.commit - 1, p.commit, p.commit + 1)]


def test_in_half_the_worlds_the_last_commits_are_a_landrace_whose_only_green_started_after_the_reds():
    assert not any(p.kind == "breaks_new_job" for p in TrunkWorld(3).plantings)
    world = TrunkWorld(2)
    p, (added, culprit, last) = landrace(world)
    assert p.commit + 1 == len(world.shas) - 1 and p.group == NEW_JOB.name and p.commit in world.culprits()
    # the job is there from the commit that added it: no row before, a whole-run rerun of an older
    # commit does not run it
    with_job = {r["sha"] for r in world.rows(2000) if r["job_group"] == NEW_JOB.name}
    assert [i for i, s in enumerate(world.shas) if s in with_job] == [p.commit - 1, p.commit, p.commit + 1]
    world.restart("pull", world.shas[10], "rerun", 2000)
    assert (NEW_JOB.name, 10) not in world.attempts
    # its first run died at once of infrastructure; the retry, after that commit's run completed,
    # started after the culprit's and the last commit's first (and only) attempts
    (dead_start, dead_end), (retry_start, _) = added
    assert dead_end - dead_start == 1 and world.outcome(NEW_JOB.name, p.commit - 1, 0, dead_end)[1] == "infra"
    assert world.outcome(NEW_JOB.name, p.commit - 1, 1, 2000) == (False, None, [])
    assert len(culprit) == len(last) == 1 and culprit[0][0] < last[0][0] < retry_start
    for i in (p.commit, p.commit + 1):
        assert world.outcome(NEW_JOB.name, i, 0, 2000) == (True, "new", [p.test])


def test_the_landrace_makes_the_infrastructure_check_re_run_the_first_red(tmp_path):
    # the shape the eval exists to show: once the retried green has passed, every failure started
    # before every success, so the first red's failed jobs are re-run
    world = TrunkWorld(2)
    p, (added, _, _) = landrace(world)
    minute = added[1][1] + 1
    lake = Lake.at(str(tmp_path / "lake"))
    write_job_tables(world, lake, minute)
    _, verdicts = judged(lake, AutorevertConfig(), world.at(minute), True, world.rows(minute))
    (v,) = [v for v in verdicts if v.signal.key == p.group + " :: " + p.test]
    assert (v.kind, v.culprit) == ("restart", world.shas[p.commit])
    assert v.reason.startswith("every failure started before every success below it")
    assert world.shas[p.commit] in v.restarts


def test_the_landrace_draws_its_own_chances_the_rest_of_the_world_is_unchanged(monkeypatch):
    with_it = TrunkWorld(2)
    monkeypatch.setattr(trunk, "LANDRACE_EVERY", 10**9)
    without = TrunkWorld(2)
    assert not any(p.kind == "breaks_new_job" for p in without.plantings)
    assert {k: v for k, v in with_it.attempts.items() if k[0] != NEW_JOB.name} == without.attempts
    assert [p for p in with_it.plantings if p.kind != "breaks_new_job"] == [
        p for p in without.plantings if p.kind != "breaks_last"]


def test_in_the_other_worlds_the_last_commit_breaks_a_test_and_is_re_run_while_fewer_than_3_failures_stand(
        tmp_path):
    # no newer commit runs it: once its failing run was re-run to confirm, its own two failures are
    # all there are, and the pinned culprit's rule re-runs it again; it is never confirmed, as no
    # second red commit follows
    world = TrunkWorld(3)
    (p,) = [p for p in world.plantings if p.kind == "breaks_last"]
    assert p.commit == len(world.shas) - 1 and p.commit not in world.culprits()
    g = next(g for g in GROUPS.values() if g.name == p.group)
    run_done = max(world.attempts[x.name, p.commit][0][1] for x in GROUPS.values()
                   if x.workflow == g.workflow and (x.name, p.commit) in world.attempts)
    assert world.restart(g.workflow, world.shas[p.commit], "rerun-failed-jobs", run_done + 1) >= 1
    minute = world.attempts[g.name, p.commit][1][1] + 1
    lake = Lake.at(str(tmp_path / "lake"))
    write_job_tables(world, lake, minute)
    _, verdicts = judged(lake, AutorevertConfig(), world.at(minute), True, world.rows(minute))
    (v,) = [v for v in verdicts if v.signal.key == p.group + " :: " + p.test]
    assert (v.kind, v.culprit) == ("restart", world.shas[p.commit]) and world.shas[p.commit] in v.restarts
    assert v.reason == "2 failure(s) from it on, fewer than 3 failures: restart its failed jobs"
    assert not any(p.kind == "breaks_last" for p in TrunkWorld(2).plantings)  # the landrace ends those
