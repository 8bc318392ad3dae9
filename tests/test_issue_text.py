"""DISABLED issue titles, bodies and `Platforms:` lines, as PyTorch writes and reads them.

"Upstream" is what PyTorch publishes today: the HUD's getDisabledTestsAndJobs (pytorch/test-infra
torchci/pages/api/flaky-tests/getDisabledTestsAndJobs.ts) with the flaky bot's parsers
(torchci/lib/flakyBot/singleDisableIssue.ts, aggregateDisableIssue.ts, utils.ts)."""

import datetime as dt
import json

import pytest
from conftest import pytorch_bytes

from torchci_assets.derived.flakiness.issue_text import (
    MARKER,
    MAX_JOB_LINKS,
    PYTORCH_PLATFORMS,
    Evidence,
    FailingJob,
    PlatformEvidence,
    added_platforms,
    condense,
    flaky_bot_platforms,
    issue_title,
    line_for_test,
    names_by_test,
    multiple_tests,
    parse_platforms,
    pytorch_platforms,
    render_body,
    disabled_test,
    runs_on,
    unreadable_reason,
    with_platforms,
)
from torchci_assets.derived.flakiness.lists import dumps



def issue(number, title, body, repo="pytorch/pytorch"):
    return {"number": number, "title": title, "body": body, "state": "open",
            "html_url": f"https://github.com/{repo}/issues/{number}"}


@pytest.mark.parametrize("title, test", [
    ("DISABLED test_conv (__main__.TestNN)", "test_conv (__main__.TestNN)"),
    ("DISABLED   test_conv (__main__.TestNN)  ", "test_conv (__main__.TestNN)"),  # PyTorch strips
    ("DISABLED test_x_cuda (__main__.TestFooCUDA)", "test_x_cuda (__main__.TestFooCUDA)"),
    # upstream's isSingleIssue wants "DISABLED " (with its space) and then exactly the test
    # (parseTestName's regex is anchored at both ends); the old update_disabled_issues.py took both
    ("DISABLEDtest_conv (__main__.TestNN)", None),
    ("DISABLED pull / linux-jammy-py3.10-gcc11 / test (default)", None),  # a disabled job, not a test
    ("DISABLED conv (__main__.TestNN)", None),  # not a test_ name
    ("disabled test_conv (__main__.TestNN)", None),  # the prefix is case-sensitive
    ("[DISABLED] test_conv (__main__.TestNN)", None),
    ("DISABLED test_conv", None),
    ("DISABLED test_conv   (__main__.TestNN) on ROCm", None),  # text after the parenthesis: a job's title
    ("DISABLED test_conv (__main__.TestNN))", None),
    ("DISABLED \ttest_conv\t(__main__.TestNN)\t", "test_conv (__main__.TestNN)"),
    ("DISABLED test_gemm/2d_cuda (__main__.TestMatmul)", None),  # a name it cannot read: neither list
    ("DISABLED test_addmm_ATen,Triton (__main__.TestCK)", None),
    ("DISABLED MULTIPLE test_nn", None),  # an aggregate: its tests are in the body
    (None, None),
])
def test_titles_are_read_as_upstream_reads_them(title, test):
    assert disabled_test(title) == test


def test_our_title_is_the_bots_and_reads_back_to_the_test():
    assert issue_title("test_conv (__main__.TestNN)") == "DISABLED test_conv (__main__.TestNN)"
    assert disabled_test(issue_title("test_conv (__main__.TestNN)")) == "test_conv (__main__.TestNN)"


@pytest.mark.parametrize("test, reason", [
    ("test_conv (__main__.TestNN)", None),
    ("test_x-y.z_1 (__main__.Test_A.B-c)", None),
    ("test_pow_shape_(2, 3) (__main__.TestBinary)", "reads no test in"),
    ("test_naïve (__main__.TestUnicode)", "reads no test in"),
    ("test_case[x] (__main__.TestParam)", "reads no test in"),
    ("test_gemm/2d_cuda (__main__.TestMatmul)", "reads no test in"),
    ("test_a (__main__.TestX) again", "reads no test in"),  # upstream reads the whole title, not up to ")"
    ("test_a  (__main__.TestX)", "as 'test_a (__main__.TestX)'"),
])
def test_a_test_pytorch_cannot_read_back_from_its_title_is_told_apart(test, reason):
    why = unreadable_reason(test)
    assert why is None if reason is None else reason in why


def test_issue_platforms_map_to_where_pytorchs_runner_acts_on_them():
    assert runs_on("mac") == runs_on("macos") == {"mac"} and runs_on("windows") == runs_on("win") == {"win"}
    assert runs_on("linux") == {"linux", "rocm", "xpu"}  # IS_LINUX holds on ROCm and XPU jobs
    # where the runner's TEST_WITH_TORCHDYNAMO / TEST_WITH_TORCHINDUCTOR hold: rerun jobs whose names say so
    assert runs_on("dynamo") == {"dynamo"} and runs_on("inductor") == {"inductor"}
    assert runs_on("slow") is None and runs_on("asan") is None  # a test configuration, on any platform


@pytest.mark.parametrize("os_platforms, configs, platforms", [
    ([], ["dynamo"], ["dynamo"]),  # flaky only in dynamo jobs: disabled there, not on all of linux
    (["linux"], ["dynamo", "inductor"], ["linux"]),  # dynamo and inductor are subsets of linux
    (["linux-aarch64"], ["inductor"], ["linux"]),  # PyTorch's linux
    (["rocm", "win"], ["dynamo"], ["dynamo", "rocm", "win"]),
    (["unknown"], [], []),  # no known platform: everywhere, as before
])
def test_a_flaky_test_is_disabled_where_pytorchs_flaky_bot_would(os_platforms, configs, platforms):
    assert flaky_bot_platforms(os_platforms, configs) == platforms


# Upstream's singleDisableIssue.parseBody: lines trimmed before matching, supported names only, sorted
# and unique (the old update_disabled_issues.py kept indented lines out and every name in order).
@pytest.mark.parametrize("body, platforms", [
    ("Platforms: linux, win\n\nflaky", ["linux", "win"]),
    ("platforms: ROCm ,  Mac,\r\nmore", ["mac", "rocm"]),  # case, spaces, CRLF, trailing comma; sorted
    ("Platforms:\n\nflaky everywhere", []),
    ("no platforms line here", []),
    (None, []),
    ("  Platforms: linux", ["linux"]),  # an indented line counts: upstream trims each line first
    ("\tplatforms:win\r\rmore", ["win"]),
    ("Platforms: linux\nPlatforms: win, linux", ["linux", "win"]),  # every line adds; unique
    ("See below.\nPLATFORMS: xpu", ["xpu"]),
    ("Platforms: cuda, linux", ["linux"]),  # a name upstream does not support is dropped
    ("Platforms: cuda", []),  # ... so a line of only such names disables everywhere
    ("Platforms: linux-aarch64, s390x", []),
    ("Platforms: dynamo_wrapped", []),  # PyTorch's runner knows it, upstream's list does not
    ("Platforms: linux win", []),  # no comma: one name, not a supported one
    ("Notes\u2028Platforms: win", []),  # upstream splits lines at \r and \n only
])
def test_platforms_are_parsed_as_upstream_parses_them(body, platforms):
    assert parse_platforms(body) == platforms


def test_condensing_the_real_issues_gives_pytorchs_published_file_byte_for_byte():
    """PyTorch's file of a day, turned back into the issues it came from (title and a
    `Platforms:` line), condenses to the same bytes."""
    raw = pytorch_bytes("disabled-tests-condensed.2026-08-22.json")
    published = json.loads(raw)
    issues = [issue(int(number), f"DISABLED {test}", f"Platforms: {', '.join(platforms)}\n\nThis test was "
                    "disabled because it is failing in CI.", ) for test, (number, _, platforms) in published.items()]
    issues.append(issue(1, "DISABLED pull / linux-jammy / test (default)", "a job, not a test"))
    assert dumps(condense(issues)) == raw


def test_of_two_issues_for_one_test_the_first_url_keeps_the_number_and_the_platforms_add_up():
    # Upstream's updateMap keeps the FIRST issue by URL (the old update_disabled_issues.py kept the
    # later one); "…/issues/100" sorts before "…/issues/99" as text, which is what upstream compares
    old, new = issue(99, "DISABLED test_a (__main__.T)", "Platforms: win"), \
        issue(100, "DISABLED test_a (__main__.T)", "Platforms: linux")
    assert condense([old, new]) == condense([new, old]) == {
        "test_a (__main__.T)": ["100", "https://github.com/pytorch/pytorch/issues/100", ["linux", "win"]]}
    everywhere = issue(101, "DISABLED test_a (__main__.T)", "no platforms line")
    assert condense([old, new, everywhere])["test_a (__main__.T)"] == [
        "100", "https://github.com/pytorch/pytorch/issues/100", []]
    # an everywhere issue first stays everywhere whatever a later one lists
    assert condense([everywhere, issue(1010, "DISABLED test_a (__main__.T)", "Platforms: mac")]) == {
        "test_a (__main__.T)": ["101", "https://github.com/pytorch/pytorch/issues/101", []]}


def test_an_issue_naming_only_unsupported_platforms_disables_everywhere_and_overrides_the_others():
    cuda, linux = issue(3, "DISABLED test_c (__main__.T)", "Platforms: cuda"), \
        issue(4, "DISABLED test_c (__main__.T)", "Platforms: linux, cuda")
    assert condense([linux, cuda]) == {"test_c (__main__.T)": ["3", "https://github.com/pytorch/pytorch/issues/3", []]}
    assert condense([linux])["test_c (__main__.T)"][2] == ["linux"]


def test_an_indented_platforms_line_limits_the_test_to_its_platforms():
    body = "Flaky since the upgrade.\n\n  Platforms: win, mac\n"
    assert condense([issue(1, "DISABLED test_a (__main__.TestA)", body)]) == {
        "test_a (__main__.TestA)": ["1", "https://github.com/pytorch/pytorch/issues/1", ["mac", "win"]]}


def test_a_title_with_text_after_the_parenthesis_disables_nothing():
    assert condense([issue(5, "DISABLED test_a (__main__.T) on ROCm", "Platforms: rocm")]) == {}


AGGREGATE = """Many tests of test_nn flaked together.

disable the following tests:
```
test_conv (__main__.TestNN): Mac, windows
test_pool  (__main__.TestNN)
test_gemm/2d (__main__.TestNN): linux
not a test line
test_relu (__main__.TestNN): rocm: extra
```
test_after_the_block (__main__.TestNN): linux
"""


def test_an_aggregate_issue_disables_each_test_of_its_block_with_its_own_platforms():
    agg = issue(300, "DISABLED MULTIPLE test_nn", AGGREGATE)
    single = issue(301, "DISABLED test_conv (__main__.TestNN)", "Platforms: linux")
    url = "https://github.com/pytorch/pytorch/issues/"
    assert condense([agg, single]) == {  # test_conv keeps the aggregate's number: its URL comes first
        "test_conv (__main__.TestNN)": ["300", url + "300", ["linux", "mac", "windows"]],
        "test_pool (__main__.TestNN)": ["300", url + "300", []],
        "test_relu (__main__.TestNN)": ["300", url + "300", ["rocm"]],
    }
    assert condense([issue(302, "DISABLED MULTIPLE broken", None)]) == {}  # no body: skipped, as PyTorch does


def test_an_aggregate_reads_the_first_block_after_its_heading_blank_lines_and_all():
    body = ("Please Disable The Following Tests:\n\n```\n\ntest_b1 (__main__.TestB): mac, CUDA\n"
            "  test_b2 (__main__.TestB)  \ntest_b1 (__main__.TestB): Win\n```\n```\ntest_b3 (__main__.TestB)\n```")
    # a test listed twice takes its later line, as upstream's Map.set does
    assert multiple_tests("DISABLED MULTIPLE test_b", body) == [
        ("test_b1 (__main__.TestB)", ["win"]), ("test_b2 (__main__.TestB)", [])]
    assert multiple_tests("DISABLED MULTIPLEtest_b", body) == []  # upstream wants "DISABLED MULTIPLE "


def test_an_aggregate_without_a_block_disables_nothing_and_breaks_nothing():
    # upstream's parseBody throws on it (its whole list fails); here only that issue is left out
    no_fence = issue(7, "DISABLED MULTIPLE test_b", "disable the following tests:\ntest_b1 (__main__.TestB): mac")
    no_heading = issue(8, "DISABLED MULTIPLE test_c", "```\ntest_c1 (__main__.TestC)\n```")
    single = issue(9, "DISABLED test_d (__main__.TestD)", "Platforms: win")
    assert condense([no_fence, no_heading, single]) == {
        "test_d (__main__.TestD)": ["9", "https://github.com/pytorch/pytorch/issues/9", ["win"]]}


def test_project_platforms_map_to_names_pytorch_acts_on():
    assert pytorch_platforms(["win", "linux", "rocm", "mac", "xpu"]) == ["linux", "mac", "rocm", "win", "xpu"]
    # Linux families PyTorch does not name are disabled as linux, never dropped into "everywhere"
    assert pytorch_platforms(["linux-aarch64", "s390x"]) == ["linux"]
    assert pytorch_platforms(["linux-aarch64", "linux"]) == ["linux"]
    assert pytorch_platforms(["unknown"]) == []
    assert pytorch_platforms([]) == []


def test_every_platform_this_project_writes_is_one_upstream_keeps():
    # a name upstream dropped would make a one-name list "everywhere"
    assert all(parse_platforms(f"Platforms: {p}") == [p] for p in PYTORCH_PLATFORMS)
    for ours in (["linux-aarch64"], ["s390x"], ["linux-aarch64", "s390x", "win"]):
        body = render_body(evidence(jobs=0), pytorch_platforms(ours))
        assert parse_platforms(body) == pytorch_platforms(ours) != []
        assert condense([issue(1, "DISABLED test_a (__main__.TestX)", body)])["test_a (__main__.TestX)"][2] != []


def test_new_platforms_are_appended_and_an_everywhere_issue_is_left_alone():
    assert added_platforms(["rocm"], ["linux", "rocm"]) == ["linux"]
    assert added_platforms(["rocm", "linux"], ["linux"]) == []
    assert added_platforms([], ["linux", "win"]) == []  # [] already means everywhere


def test_a_platform_the_runner_already_disables_the_test_on_is_not_added():
    # one condition for PyTorch's runner: IS_WINDOWS, IS_MACOS; IS_LINUX holds on ROCm and XPU jobs
    assert added_platforms(["windows"], ["win"]) == [] and added_platforms(["win"], ["windows"]) == []
    assert added_platforms(["macos"], ["mac"]) == [] and added_platforms(["mac"], ["macos"]) == []
    assert added_platforms(["linux"], ["rocm", "xpu"]) == []
    # but not the other way round, and a test configuration covers no platform
    assert added_platforms(["rocm"], ["linux"]) == ["linux"]
    assert added_platforms(["dynamo"], ["linux", "dynamo"]) == ["linux"]
    assert added_platforms(["windows"], ["win", "mac"]) == ["mac"]


def test_the_platforms_line_is_replaced_in_place_and_the_rest_kept():
    body = "Platforms: rocm\r\n\r\nHuman notes: flaky since the ROCm upgrade.\nplatforms: mac\nEnd"
    updated = with_platforms(body, ["rocm", "mac", "win"])
    # each kept line keeps its own line break (a human's CRLF stays CRLF)
    assert updated == "Platforms: rocm, mac, win\r\n\r\nHuman notes: flaky since the ROCm upgrade.\nEnd"
    assert with_platforms("Platforms: win\r\n\r\nflaky on Windows\r\n", ["win", "linux"]) == \
        "Platforms: win, linux\r\n\r\nflaky on Windows\r\n"
    assert parse_platforms(updated) == ["mac", "rocm", "win"]  # read back sorted, as upstream reads it
    # an indented line is one upstream reads, so it is the one replaced (and no other line adds to it)
    assert with_platforms("Notes\n   Platforms: rocm\n  platforms: mac\nEnd", ["rocm", "win"]) == \
        "Notes\nPlatforms: rocm, win\nEnd"
    # a body without a line gets one on top (a human-filed issue that said nothing)
    assert with_platforms("flaky", ["linux"]).splitlines()[0] == "Platforms: linux"
    assert with_platforms(None, ["linux"]) == "Platforms: linux\n"


def evidence(jobs=25):
    at = dt.datetime(2026, 11, 2, 10, 0, tzinfo=dt.timezone.utc)
    return Evidence(
        "test_a (__main__.TestX)", "test_x.py", "2026-10-20", "2026-11-02",
        [PlatformEvidence("linux", 400, 5, 4, 3, 1, 0), PlatformEvidence("win", 300, 0, 0, 0, 0, 0)],
        [FailingJob(f"https://github.com/pytorch/pytorch/actions/runs/{100 + i}/job/{9000 + i}",
                    f"linux-jammy [x] / test (default, {i}, 30, linux.4xlarge)", f"{i:040x}", i % 2 == 0,
                    at - dt.timedelta(hours=i)) for i in range(min(jobs, MAX_JOB_LINKS))],
        failing_jobs=jobs, last_failure_at=at)


def test_the_body_leads_with_the_platforms_and_carries_the_evidence():
    body = render_body(evidence(), ["linux"])
    lines = body.splitlines()
    assert lines[0] == "Platforms: linux" and parse_platforms(body) == ["linux"]
    assert "over the window 2026-10-20 to 2026-11-02 it had 4 flake event(s) in 700 run(s) on main, on linux." in body
    assert "other branches" not in body  # none flaked elsewhere
    assert "| linux | 400 | 5 | 4 | 3 | 1 | 0 |" in lines and "| win | 300 | 0 | 0 | 0 | 0 | 0 |" in lines
    links = [line for line in lines if line.startswith("- ")]
    assert len(links) == MAX_JOB_LINKS and "(10 of 25, main first)" in body
    assert "(https://github.com/pytorch/pytorch/actions/runs/100/job/9000)" in links[0]
    assert "[linux-jammy \\[x\\] / test (default, 0, 30, linux.4xlarge)]" in links[0]  # brackets escaped
    assert "Test file: `test_x.py`" in body
    assert body.rstrip().endswith(MARKER)


def test_a_body_for_everywhere_has_an_empty_platforms_line_that_parses_to_all():
    body = render_body(evidence(jobs=0), [])
    assert body.splitlines()[0] == "Platforms:" and parse_platforms(body) == []
    assert "disables it everywhere" in body and "failing jobs" not in body


def test_a_tests_line_is_the_one_the_runner_takes_for_it_as_written():
    """PyTorch's runner matches a line by method and class name alone; of several lines for one
    test, the one written as the test is asked for is its own, else the first."""
    lines = ["test_a (distributed.test_c10d.TestX)", "test_a (__main__.TestX)", "test_ab (m.TestX)"]
    assert line_for_test(lines, "test_a (__main__.TestX)") == "test_a (__main__.TestX)"
    assert line_for_test(lines, "test_a (other.TestX)") == "test_a (distributed.test_c10d.TestX)"
    assert line_for_test(lines[::-1], "test_ab (__main__.TestX)") == "test_ab (m.TestX)"
    assert line_for_test(lines, "test_a (m.TestXY)") is None and line_for_test(lines, "test_b (m.TestX)") is None
    # all at once, per test as its runs key it: the same picks
    by_test = names_by_test(lines)
    assert by_test == {"test_a (__main__.TestX)": "test_a (__main__.TestX)",
                       "test_ab (__main__.TestX)": "test_ab (m.TestX)"}
    assert names_by_test(lines[:1] + lines[2:] + ["test_a (x.TestX)"])["test_a (__main__.TestX)"] == lines[0]
