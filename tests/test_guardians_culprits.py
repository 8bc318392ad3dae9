"""Signals on main and the autorevert's verdicts: pure functions over commit_health rows."""

import pytest

from tests.trunk_history import GROUP, history, row, sha

PULL = "pull / linux-jammy-py3.10-gcc11 / build"
from torchci_assets.derived.guardians.actions import plan
from torchci_assets.derived.guardians.culprits import judge, judge_all, plan_bisection
from torchci_assets.derived.guardians.signals import build_history
from torchci_assets.guardian_config import AutorevertConfig


def verdict(states, green_attempts=1, attempts=None, **kw):
    """The trunk group's verdict; every commit also ran a pull job (so '.' is a commit on main).
    `green_attempts`: attempts of commit 0 when it is green (2: it passed twice, which is enough
    successes below a first red without re-running it); `attempts`: {row: attempts} for others."""
    rows = history(states)
    if states[0] == "g":
        rows[0] = {**rows[0], "attempts": green_attempts}
    for i, n in (attempts or {}).items():
        rows[i] = {**rows[i], "attempts": n, "run_attempt": n}
    h = build_history(rows + history("g" * len(states), group=PULL), ("trunk",))
    (signal,) = h.signals
    return judge(signal, h, **kw)


def test_green_then_reds_with_the_first_failing_its_rerun_confirms_the_first_red():
    v = verdict("gggRr")
    assert (v.kind, v.culprit, v.failures) == ("confirmed", sha(3), 3)


@pytest.mark.parametrize("states", ["gggr", "gggrr", "gggrrr"])
def test_a_first_red_that_failed_once_is_restarted_to_confirm(states):
    v = verdict(states)
    assert (v.kind, v.culprit, v.restarts) == ("restart", sha(3), (sha(3),))


def test_a_confirmed_failure_waits_for_a_newer_red_commit():
    # failed on three attempts (enough failures), but on no newer commit yet
    v = verdict("gggR", attempts={3: 3})
    assert (v.kind, v.culprit, v.restarts) == ("suspect", sha(3), ())
    assert verdict("gggRp", attempts={3: 3}).kind == "suspect"
    assert (verdict("gggRp", attempts={3: 3}, cfg=AutorevertConfig(min_red_commits=1)).kind) == "confirmed"


@pytest.mark.parametrize("states, why", [
    ("rrrr", "failing since before the window"),
    ("ggrg", "passing on the newest"),
    ("gggf", "passing on the newest"),   # recovered on rerun: flaky, not broken
    ("gggi", "passing on the newest"),   # infra says nothing: the last word is green
    ("gggk", "passing on the newest"),   # a known flaky test
    ("giii", "passing on the newest"),
    ("iiii", "no result"),
])
def test_no_suspicion_without_a_real_failure_after_a_green(states, why):
    v = verdict(states)
    assert v.kind == "ineligible" and why.split(":")[0] in v.reason


def test_infra_and_pending_between_reds_do_not_break_the_pattern():
    v = verdict("ggRirp")
    assert (v.kind, v.culprit) == ("confirmed", sha(2))


def test_a_gap_of_skipped_commits_is_bisected_from_the_middle():
    v = verdict("gssssssRr", green_attempts=2)
    assert v.kind == "restart" and v.culprit is None
    assert v.suspects == tuple(sha(i) for i in range(1, 8))
    # gap positions 1..6: middle of the whole is 3, then the middle of the larger rest (4..6) is 5
    assert v.restarts == (sha(3), sha(5))


def test_after_the_restarts_answer_the_culprit_is_pinned():
    # restarts showed 3 green and 5 red; 4 still skipped: bisect again there
    v = verdict("gssgsrsrr")
    assert v.restarts == (sha(4),)
    v = verdict("gssgRrsrr")  # 4 red (twice): it directly follows the green 3
    assert (v.kind, v.culprit) == ("confirmed", sha(4))


def test_runs_in_flight_count_against_the_bisection_budget():
    waiting = verdict("gssppssRr", green_attempts=2, cfg=AutorevertConfig(bisection_limit=2))
    assert (waiting.kind, waiting.restarts, waiting.reason) == ("suspect", (), "waiting for the runs in flight")
    # of the two stretches left (1-2 and 5-6) the older goes first
    assert verdict("gssppssRr", green_attempts=2, cfg=AutorevertConfig(bisection_limit=3)).restarts == (sha(1),)


def test_commits_that_never_ran_the_workflow_leave_a_suspect_range():
    v = verdict("g...Rr", green_attempts=2)
    assert v.kind == "suspect" and v.suspects == tuple(sha(i) for i in range(1, 5)) and v.restarts == ()
    # with fewer than 3 failures the first red is still re-run, though the range stays as it is
    assert verdict("g...rr", green_attempts=2).restarts == (sha(4),)


def test_a_new_test_failure_in_a_group_already_red_is_pinned_by_its_test_signal():
    rows = [row(0, "failure", tests=["test_a"]), row(1, "failure", tests=["test_a"]),
            row(2, "failure", tests=["test_a", "test_b"], attempts=2), row(3, "failure", tests=["test_a", "test_b"])]
    h = build_history(rows)
    verdicts = {v.signal.key: v for v in judge_all(h)}
    assert verdicts[GROUP].kind == "ineligible"
    assert verdicts[GROUP + " :: test_a"].kind == "ineligible"
    assert (verdicts[GROUP + " :: test_b"].kind, verdicts[GROUP + " :: test_b"].culprit) == ("confirmed", sha(2))


def test_a_test_is_unknown_where_its_group_stopped_before_it():
    # commit 1 failed without listing test_b (a build failure): test_b's history there is unknown
    rows = [row(0, "success", attempts=2), row(1, "failure"), row(2, "failure", tests=["test_b"], attempts=2),
            row(3, "failure", tests=["test_b"])]
    verdicts = {v.signal.key: v for v in judge_all(build_history(rows))}
    assert verdicts[GROUP].culprit == sha(1)
    test_b = verdicts[GROUP + " :: test_b"]
    assert test_b.kind == "restart" and test_b.restarts == (sha(1),)


def test_watched_workflows_filter_the_signals():
    rows = history("ggRr") + history("ggRr", group="periodic / x / test (default, linux.2xlarge)")
    assert {s.workflow for s in build_history(rows, ("periodic",)).signals} == {"periodic"}
    assert len(build_history(rows).signals) == 2


@pytest.mark.parametrize("covered, limit, expected", [
    ([False] * 7, 1, [3]),
    ([False] * 7, 3, [1, 3, 5]),
    ([False, True, False, False, False], 3, [0, 3]),  # one in flight: two more, largest stretch first
    ([False] * 4, 10, [0, 1, 2, 3]),
    ([True, True], 5, []),
])
def test_plan_bisection(covered, limit, expected):
    assert plan_bisection(covered, limit) == expected


def test_a_commit_without_any_job_yet_stays_on_the_line_but_gives_no_signal():
    # commit 2 was just pushed: commit_health has its row with no workflow, job group nor state
    rows = [row(0, "success"), row(1, "success"), row(3, "failure", attempts=2), row(4, "failure")]
    rows.append({**row(2, "success"), "workflow": None, "job_group": None, "state": None, "run_id": None})
    h = build_history(rows)
    assert h.commits == tuple(sha(i) for i in range(5)) and [s.key for s in h.signals] == [GROUP]
    v = judge(h.signals[0], h)
    # commit 2 never ran the workflow: it may be the culprit, and there is no run of it to restart
    assert (v.kind, v.suspects) == ("suspect", (sha(2), sha(3)))


def test_a_known_flaky_test_in_a_group_red_for_another_reason_gets_no_signal():
    # test_a broken since before the window; test_flaky, known flaky, flaked on 2 (twice) and 3
    rows = [row(0, "failure", tests=["test_a"]), row(1, "failure", tests=["test_a"]),
            row(2, "failure", tests=["test_flaky", "test_a"], attempts=2),
            row(3, "failure", tests=["test_flaky", "test_a"])]
    blind = {v.signal.key: v.kind for v in judge_all(build_history(rows))}
    assert blind[GROUP + " :: test_flaky"] == "confirmed"  # what the flakes look like without the verdicts
    verdicts = {v.signal.key: v.kind for v in judge_all(build_history(rows, known_flaky=frozenset({"test_flaky"})))}
    assert verdicts == {GROUP: "ineligible", GROUP + " :: test_a": "ineligible"}


def test_a_signal_seen_flaky_in_the_window_blames_no_one():
    # commit 1 failed, then passed on a rerun: the signal is flaky, its later reds prove nothing
    v = verdict("gfgRrr")
    assert v.kind == "ineligible" and v.reason.startswith(f"flaky: failed and passed on {sha(1)[:10]}")


def test_a_single_green_attempt_below_the_reds_is_run_again_before_blaming():
    # one green run may predate a breakage from outside: the green is re-run (a whole rerun)
    v = verdict("gRr")
    assert (v.kind, v.culprit, v.restarts) == ("restart", sha(1), (sha(0),))
    h = build_history(history("gRr"))
    assert [(p.commit_sha, p.mode) for p in plan(judge_all(h), h)] == [(sha(0), "rerun")]
    assert verdict("gRr", green_attempts=2).kind == "confirmed"  # it passed again: the first red broke it
    assert verdict("fRr").kind == "ineligible"  # it failed this time: not the commit's doing
    # with a gap to bisect, and a first red to confirm (or with fewer than 3 failures), the green goes along
    assert verdict("gssrr").restarts == (sha(0), sha(1), sha(2), sha(3))
    assert verdict("grr").restarts == (sha(0), sha(1))


def test_inside_a_gap_a_first_red_with_fewer_than_three_failures_is_re_run_beside_the_bisection():
    # upstream (signal.py, REQUIRE_FAILED_EVENTS): fewer than 3 failures from the first red on and
    # the first red not in flight: its failed jobs are re-run, gap or no gap
    v = verdict("gssssssrr", green_attempts=2)
    assert v.kind == "restart" and v.restarts == (sha(3), sha(5), sha(7))
    assert "fewer than 3 failures" in v.reason
    # the red's failed jobs, the gap's whole runs (and the green's, which passed on one attempt)
    h = build_history(history("gssssssrr") + history("ggggggggg", group=PULL), ("trunk",))
    modes = {p.commit_sha: p.mode for p in plan(judge_all(h), h)}
    assert modes == {sha(0): "rerun", sha(3): "rerun", sha(5): "rerun", sha(7): "rerun-failed-jobs"}
    # three failures (the first red failed twice): the bisection alone
    assert verdict("gssssssRr", green_attempts=2).restarts == (sha(3), sha(5))
    # the first red's re-run in flight (shown pending, or ordered and not shown yet): not again
    assert verdict("gssssssrr", green_attempts=2, in_flight=frozenset({("trunk", sha(7))})).restarts == (sha(3), sha(5))


def test_a_pinned_culprit_with_fewer_than_three_failures_is_re_run_again():
    # failed on its two attempts, no newer commit has run it: a third failure is asked for
    v = verdict("gggR", green_attempts=2)
    assert (v.kind, v.culprit, v.restarts) == ("restart", sha(3), (sha(3),))
    assert "fewer than 3 failures" in v.reason
    # even where the thresholds ask for less, upstream's 3 failures stand before a culprit
    loose = AutorevertConfig(confirm_attempts=1, min_red_commits=1)
    assert verdict("gggRp", green_attempts=2, cfg=loose).kind == "restart"
    assert verdict("gggRr", green_attempts=2, cfg=loose).kind == "confirmed"


def _gap_job_not_made(build_state: str, attempt: int) -> list:
    """trunk's test group ran on 0 (green, twice), 2 and 3 (red); on 1 its job was never made
    (not even skipped), while trunk's build group ran there in run 1001, at `attempt`."""
    build = "trunk / linux-jammy-py3.10-gcc11 / build"
    rows = [{**row(0, "success"), "attempts": 2}, row(2, "failure", attempts=2), row(3, "failure")]
    return rows + [{**row(1, build_state, group=build), "run_attempt": attempt}]


def test_a_gap_commit_whose_job_was_not_made_in_the_whole_rerun_gives_no_signal_once_the_run_ends():
    rerun = frozenset({("trunk", sha(1), 1001, 1)})  # the whole run 1001 re-run from its attempt 1

    def judged(build_state, attempt, reruns=rerun):
        h = build_history(_gap_job_not_made(build_state, attempt), ("trunk",))
        (signal,) = [s for s in h.signals if s.key == GROUP]
        return judge(signal, h, reruns=reruns)

    assert judged("success", 1, frozenset()).restarts == (sha(1),)  # not re-run yet: bisect it
    assert judged("success", 1).restarts == (sha(1),)  # the lake does not show the re-run yet
    # the re-run is running: the test job may still be made (a reusable workflow's jobs come late)
    assert judged("pending", 2).restarts == (sha(1),)
    v = judged("success", 2)  # it ended without the test job
    assert (v.kind, v.restarts, v.suspects) == ("suspect", (), (sha(1), sha(2)))
    assert v.reason == "1 commit(s) between green and red cannot give the signal: 1 did not run it when re-run"


def test_only_a_whole_run_rerun_after_the_skip_says_a_gap_commit_cannot_give_the_signal():
    rows = [{**r, "attempts": 2} if r["sha"] == sha(0) else r for r in history("gsRr")]
    h = build_history(rows)
    (signal,) = h.signals
    assert judge(signal, h, reruns=frozenset({("trunk", sha(1), 1001, 1)})).restarts == (sha(1),)  # skip of attempt 1
    shown = build_history([{**r, "run_attempt": 2} if r["sha"] == sha(1) else r for r in rows])
    assert judge(shown.signals[0], shown, reruns=frozenset({("trunk", sha(1), 1001, 1)})).kind == "suspect"
    assert judge(shown.signals[0], shown, reruns=frozenset({("periodic", sha(1), 1001, 1)})).restarts == (sha(1),)
