"""The trunk world the guardians' eval runs in: planted breakages show from their commit, and
restarts behave as GitHub's re-runs do."""

from torchci_assets.simulate.trunk import GROUPS, TrunkWorld


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
