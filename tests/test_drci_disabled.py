"""Dr. CI and the DISABLED issues (PyTorch's getDisabledTestIssues and isDisabledTestMentionedInPR): a
job whose failing tests open DISABLED issues disable on its platform failed on known flaky tests
(disabled while the job ran, or after): FLAKY, citing the issues. A pull request whose body says it
closes one of them runs the test on purpose (PyTorch's CI reads the same words), so its failure is
its own. The rule on hand-made jobs; the list and the bodies as the lake holds them."""

import datetime as dt

import pyarrow as pa
import pytest
from hud_lake import DAY, REPO, T0, History
from test_drci import T1, T2, failing_job, trunk
from test_drci_other_prs import PR_SCHEMA

from resources.lake import Lake, connect
from torchci_assets.derived.drci import classify as c
from torchci_assets.derived.drci.comment import Head, render
from torchci_assets.derived.drci.inputs import load_disabled, load_heads
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
    """Fixing the flaky test, it runs it: failing, the fix is not done."""
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
        assert load_disabled(con, lake, DAY) == {("test_add", "TestOps"): (issue(101, "linux"),),
                                                 ("test_send", "TestDist"): (issue(102),)}
        prs = load_heads(con, lake, DAY, REPO)
    finally:
        con.close()
    # 53's latest delivery carried no body: its last known one stands
    assert {n: p.closes for n, p in prs.items()} == {50: frozenset({101}), 51: frozenset(), 52: None,
                                                     53: frozenset({101})}
