"""Dr. CI and the DISABLED issues (PyTorch's getDisabledTestIssues, isDisabledTestMentionedInPR and
isRecentlyCloseDisabledTest): a job whose failing tests open DISABLED issues disable on its platform
failed on known flaky tests (disabled while the job ran, or after): FLAKY, citing the issues. A pull
request whose body says it closes one of them runs the test on purpose (PyTorch's CI reads the same
words), so no issue excuses its failure. A test whose issue closed after the merge base is FLAKY too, and
the comment says to rebase. The rules on hand-made jobs; the lists and the bodies as the lake holds
them."""

import datetime as dt

import pyarrow as pa
import pytest
from hud_lake import DAY, REPO, T0, History
from test_drci import T1, T2, failing_job, trunk
from test_drci_other_prs import PR_SCHEMA

from resources.lake import Lake, connect
from torchci_assets.derived.drci import classify as c
from torchci_assets.derived.drci.comment import Head, render
from torchci_assets.derived.drci.inputs import attach_people, load_disabled, load_heads, register_people
from torchci_assets.derived.flakiness.lists import DISABLED_SCHEMA
from torchci_assets.derived.hud.health import build_pr_jobs

CLOSE = "AssertionError: Tensor-likes are not close!"
URL = "https://github.com/pytorch/pytorch/issues/{}"


def issue(number: int, *platforms: str) -> c.DisabledIssue:
    return c.DisabledIssue(number, URL.format(number), platforms)


def judged(job: c.HeadJob, closes: frozenset[int] | None = frozenset(), **disabled) -> c.Verdict:
    """`disabled`: method_Class=issues, e.g. test_add_TestOps=(issue(1),)."""
    by_test = {tuple(k.rsplit("_", 1)): v for k, v in disabled.items()}
    return c.classify(job, trunk({}), c.Flaky(disabled=by_test, closes=closes))


def test_a_failing_test_an_open_disabled_issue_disables_is_flaky_and_the_comment_links_the_issue():
    v = judged(failing_job([(T1, CLOSE)]), test_add_TestOps=(issue(101),))
    assert (v.cls, [i.number for i in v.disabled]) == (c.FLAKY, [101])
    body = render(Head(REPO, 7, "ab" * 20, None, None, "https://github.com", None), [v], 0)
    assert f"(disabled by [#101]({URL.format(101)}))" in body


@pytest.mark.parametrize("platforms,cls", [
    (("linux",), c.FLAKY),          # the job's name says linux
    (("win", "mac"), c.NEW),        # disabled elsewhere: here it is a failure like any
    ((), c.FLAKY),                  # no platform: everywhere
])
def test_an_issue_disables_a_test_on_its_platforms_only(platforms, cls):
    assert judged(failing_job([(T1, CLOSE)]), test_add_TestOps=(issue(102, *platforms),)).cls == cls


def test_a_pull_request_that_says_it_closes_the_issue_owns_the_failure():
    """Fixing the flaky test, it runs it: failing, the fix is not done (no known flake here either)."""
    job = failing_job([(T1, CLOSE)])
    assert judged(job, frozenset({103}), test_add_TestOps=(issue(103),)).cls == c.NEW
    assert judged(job, frozenset({999}), test_add_TestOps=(issue(103),)).cls == c.FLAKY
    assert judged(job, None, test_add_TestOps=(issue(103),)).cls == c.NEW  # its body unknown: it may say so


def test_every_failing_test_must_be_disabled_and_a_build_is_never_flaky():
    assert judged(failing_job([(T1, CLOSE), (T2, "AssertionError: boom")]), test_add_TestOps=(issue(104),)).cls == c.NEW
    assert judged(failing_job([(T1, CLOSE), (T2, "AssertionError: boom")]), test_add_TestOps=(issue(104),),
                  test_conv_TestNN=(issue(105),)).disabled == (issue(104), issue(105))
    build = failing_job([(T1, CLOSE)], name="linux-jammy-py3.10-gcc11 / build")
    assert judged(build, test_add_TestOps=(issue(106),)).cls == c.NEW


def test_the_test_is_matched_by_its_method_and_the_last_part_of_its_class():
    """As PyTorch's runner and Dr. CI match an issue's `test_x (module.TestY)` to a test."""
    assert c.test_words("TestOps.test_add (test_ops.py)") == ("test_add", "TestOps")
    assert c.test_words("distributed.test_c10d.TestDist.test_send (test_c10d.py)") == ("test_send", "TestDist")
    assert c.test_words("test_free (test_mod.py)") == ("test_free", "")


def test_the_day_s_list_and_the_pull_requests_bodies_as_the_lake_holds_them(tmp_path):
    """The issues come from the day's disabled_tests (local ids, re-enabled tests left out); what a pull
    request closes from its latest pull_request webhook that says (an edited body), unknown from rows
    without a body (written before the lake kept it)."""
    lake = Lake.at(str(tmp_path / "lake"))
    lake.write("disabled_tests", DAY, pa.Table.from_pylist([
        {"test": "test_add (__main__.TestOps)", "id": "101", "url": URL.format(101), "platforms": ["linux"],
         "status": "disabled", "flake_events": 3, "runs": 9},
        {"test": "test_send (distributed.test_c10d.TestDist)", "id": "102", "url": URL.format(102), "platforms": [],
         "status": "disabled", "flake_events": 3, "runs": 9},
        {"test": "test_conv (__main__.TestNN)", "id": "local-0123456789ab", "url": "", "platforms": [],
         "status": "disabled", "flake_events": 3, "runs": 9},
        {"test": "test_old (__main__.TestNN)", "id": "103", "url": URL.format(103), "platforms": [],
         "status": "reenabled", "flake_events": 0, "runs": 0},
    ], schema=DISABLED_SCHEMA))
    h = History()
    for number in (50, 51, 52, 53):
        h.job(f"{number:040x}", "linux-jammy / test (default, 1, 1, linux.4xlarge)", "failure", run_id=number,
              branch=f"u/{number}", created=T0)
    h.write(lake)
    build_pr_jobs(lake, DAY, REPO, now=T0.replace(hour=20))
    at = [T0 + dt.timedelta(minutes=m) for m in range(3)]

    def delivery(number: int, closes: list[int] | None, minute: int) -> dict:
        return {"repo": REPO, "number": number, "action": "edited", "state": "open", "head_sha": f"{number:040x}",
                "head_ref": f"u/{number}", "base_ref": "main", "labels": [], "merged": False, "updated_at": at[minute],
                "author": "ada", "closes": closes, "received_at": at[minute], "delivery_id": f"{number}-{minute}"}

    lake.write("pull_request", DAY, pa.Table.from_pylist(
        [delivery(50, [], 0), delivery(50, [101], 1), delivery(51, [101], 0), delivery(51, [], 2),
         delivery(52, None, 0), delivery(53, [101], 0), delivery(53, None, 2)], schema=PR_SCHEMA))
    con = connect()
    try:
        disabled, reenabled = load_disabled(con, lake, DAY)
        assert disabled == {("test_add", "TestOps"): (issue(101, "linux"),), ("test_send", "TestDist"): (issue(102),)}
        assert reenabled == {("test_old", "TestNN"): (c.DisabledIssue(103, ""), dt.datetime(2026, 10, 5,
                                                                                          tzinfo=dt.timezone.utc))}
        assert register_people(con, lake, DAY)
        prs = load_heads(con, lake, DAY, REPO, people=True)
        attach_people(con, REPO, prs)
    finally:
        con.close()
    # 53's latest delivery carried no body: its last known one stands
    assert {n: p.closes for n, p in prs.items()} == {50: frozenset({101}), 51: frozenset(), 52: None,
                                                     53: frozenset({101})}


# ---- a DISABLED issue closed after the merge base -----------------------------------------------

BASE_PUSHED = dt.datetime(2026, 10, 3, 18, tzinfo=dt.timezone.utc)
REENABLED_ON = dt.datetime(2026, 10, 4, tzinfo=dt.timezone.utc)  # the start of the day the list dropped it


def after_base(job: c.HeadJob, closes: frozenset[int] | None = frozenset(),
               base_pushed: dt.datetime | None = BASE_PUSHED) -> c.Verdict:
    reenabled = {("test_add", "TestOps"): (c.DisabledIssue(201, ""), REENABLED_ON)}
    return c.classify(job, trunk({}), c.Flaky(closes=closes, reenabled=reenabled, base_pushed=base_pushed))


def test_a_test_re_enabled_after_the_merge_base_is_flaky_and_the_comment_says_to_rebase():
    """Disabled at the merge base, fixed on main and its issue closed since: the pull request's CI runs
    it without the fix (upstream's isRecentlyCloseDisabledTest)."""
    v = after_base(failing_job([(T1, CLOSE)]))
    assert (v.cls, v.rebase, [i.number for i in v.disabled]) == (c.FLAKY, True, [201])
    body = render(Head(REPO, 7, "ab" * 20, None, None, "https://github.com", None), [v], 0)
    assert ("(disabled by [#201](https://github.com/pytorch/pytorch/issues/201) until after the merge base: "
            "rebase onto viable/strict to run the fixed test)") in body


@pytest.mark.parametrize("closes,base_pushed", [
    (frozenset(), REENABLED_ON + dt.timedelta(hours=2)),  # pushed the day it was re-enabled: it may have the fix
    (frozenset({201}), BASE_PUSHED),                      # the pull request is the fix
    (None, BASE_PUSHED),                                  # its body unknown
    (frozenset(), None),                                  # its merge base's push unknown
])
def test_a_re_enabled_test_s_failure_is_the_pull_request_s_unless_its_base_surely_lacks_the_fix(closes, base_pushed):
    assert after_base(failing_job([(T1, CLOSE)]), closes, base_pushed).cls == c.NEW


def test_the_tests_re_enabled_over_the_window_and_not_disabled_again(tmp_path):
    lake = Lake.at(str(tmp_path / "lake"))

    def listed(day: str, **status: str) -> None:
        lake.write("disabled_tests", day, pa.Table.from_pylist([
            {"test": f"{name} (__main__.TestOps)", "id": "local-0123456789ab" if name == "test_local" else
             str(200 + len(name)), "url": "", "platforms": [], "status": s, "flake_events": 0, "runs": 0}
            for name, s in status.items()], schema=DISABLED_SCHEMA))

    listed("2026-10-03", test_add="disabled", test_again="disabled", test_local="disabled")
    listed("2026-10-04", test_add="reenabled", test_again="reenabled", test_local="reenabled")
    listed(DAY, test_again="disabled")  # disabled again: no longer re-enabled
    con = connect()
    try:
        disabled, reenabled = load_disabled(con, lake, DAY)
    finally:
        con.close()
    assert reenabled == {("test_add", "TestOps"): (c.DisabledIssue(208, ""), REENABLED_ON)}
    assert disabled == {("test_again", "TestOps"): (c.DisabledIssue(210, ""),)}  # today's list alone


@pytest.mark.parametrize("closed_hour,cls", [(15, c.FLAKY), (9, c.NEW), (None, c.NEW)])
def test_a_close_on_the_merge_base_s_day_is_judged_by_its_time_when_the_list_recorded_it(tmp_path, closed_hour, cls):
    """Base pushed at 10:00 on the day the list dropped the test: its issue closed at 15:00 means main
    still had the test disabled then (FLAKY, rebase); at 09:00 the base has the fix (the failure is
    the pull request's); with no close time recorded, the day's start, the same."""
    lake = Lake.at(str(tmp_path / "lake"))
    at = None if closed_hour is None else REENABLED_ON.replace(hour=closed_hour)
    lake.write("disabled_tests", "2026-10-03", pa.Table.from_pylist([
        {"test": "test_add (__main__.TestOps)", "id": "201", "url": URL.format(201), "platforms": [],
         "status": "disabled", "flake_events": 2, "runs": 9}], schema=DISABLED_SCHEMA.remove(
        DISABLED_SCHEMA.get_field_index("closed_at"))))  # a partition from before the column
    lake.write("disabled_tests", "2026-10-04", pa.Table.from_pylist([
        {"test": "test_add (__main__.TestOps)", "id": "201", "url": "", "platforms": [], "status": "reenabled",
         "flake_events": 0, "runs": 9, "closed_at": at}], schema=DISABLED_SCHEMA))
    con = connect()
    try:
        _, reenabled = load_disabled(con, lake, DAY)
    finally:
        con.close()
    assert reenabled == {("test_add", "TestOps"): (c.DisabledIssue(201, ""), at or REENABLED_ON)}
    flaky = c.Flaky(closes=frozenset(), reenabled=reenabled, base_pushed=REENABLED_ON.replace(hour=10))
    assert c.classify(failing_job([(T1, CLOSE)]), trunk({}), flaky).cls == cls
