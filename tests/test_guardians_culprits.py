"""Signals on main and the autorevert's verdicts: pure functions over commit_health rows."""

import pytest

from tests.trunk_history import GROUP, history, row, sha

PULL = "pull / linux-jammy-py3.10-gcc11 / build"
from torchci_assets.derived.guardians.culprits import judge, judge_all, plan_bisection
from torchci_assets.derived.guardians.signals import build_history
from torchci_assets.guardian_config import AutorevertConfig


def verdict(states, **kw):
    """The trunk group's verdict; every commit also ran a pull job (so '.' is a commit on main)."""
    h = build_history(history(states) + history("g" * len(states), group=PULL), ("trunk",))
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
    v = verdict("gggR")
    assert (v.kind, v.culprit, v.restarts) == ("suspect", sha(3), ())
    assert verdict("gggRp").kind == "suspect"
    assert (verdict("gggRp", cfg=AutorevertConfig(min_red_commits=1)).kind) == "confirmed"


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
    v = verdict("gssssssrr")
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
    waiting = verdict("gssppssrr", cfg=AutorevertConfig(bisection_limit=2))
    assert (waiting.kind, waiting.restarts, waiting.reason) == ("suspect", (), "waiting for the runs in flight")
    # of the two stretches left (1-2 and 5-6) the older goes first
    assert verdict("gssppssrr", cfg=AutorevertConfig(bisection_limit=3)).restarts == (sha(1),)


def test_commits_that_never_ran_the_workflow_leave_a_suspect_range():
    v = verdict("g...rr")
    assert v.kind == "suspect" and v.suspects == tuple(sha(i) for i in range(1, 5)) and v.restarts == ()


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
    rows = [row(0, "success"), row(1, "failure"), row(2, "failure", tests=["test_b"]),
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
