"""GitHub down during a pass of the flaky bot's issue loop: the filing of DISABLED issues, the
closing of deleted tests' issues, the re-enabling on rerun evidence and the aggregates' lines stop
at the first request that gave up (no answer or a 5xx through the client's whole retry budget),
say so once with how many wait, and the next run, GitHub back, files, comments and closes each
once. A 4xx for one issue still fails that issue only. Against the fake issues API on 127.0.0.1
(fake_github_issues.py) behind the `outage` fixture of github_outage.py.
"""

import datetime as dt

from fake_github_issues import FakeIssueTracker, Scripted, json_response
from github_outage import ATTEMPTS, outage  # noqa: F401 (the fixture)
from test_aggregate_lifecycle import aggregate
from test_disabled_issues import TEST_B, built, config, github, metadata, run as run_assets, world  # noqa: F401
from test_reenable import BOT, DAY, REPO, clean, lake_with
from test_retired_tests import lake as retired_lake  # noqa: F401 (a fixture: test_gone deleted from test_a.py)

from resources.lake import Lake
from resources.storage import Store
from torchci_assets.config import DisabledIssuesConfig, parse_config
from torchci_assets.derived.flakiness.aggregates import aggregate_body, aggregate_title
from torchci_assets.derived.flakiness.issue_text import MARKER, Evidence
from torchci_assets.derived.flakiness.issues import IssueTracker, Wanted, file_disabled_issues, run_unstable_jobs
from torchci_assets.derived.flakiness.job_issues import UNSTABLE_JOBS_PATH
from torchci_assets.derived.flakiness.lifecycle import run_lifecycle
from torchci_assets.derived.flakiness.owners import OwnerLookup

TESTS = [f"test_{c} (__main__.TestOutage)" for c in "pqr"]  # filed in this order: most flake events first
READS = 2  # the filing's read of the issues: the DISABLED search and the last hour's list
PER_TEST = 4  # a new test's title search, the list before its create, the create and the list after it


def wanted() -> list[Wanted]:
    return [Wanted(t, ["linux"], ["linux"], 10 - i) for i, t in enumerate(TESTS)]


def filing(httpserver, tmp_path, warned: list | None = None):
    return file_disabled_issues(IssueTracker(github(httpserver), REPO), Lake.at(str(tmp_path / "lake")), DAY,
                                wanted(), {}, ["skipped"], 10, "run-0001",
                                warn=(warned if warned is not None else []).append)


def filed_once(fake) -> bool:
    return all(len(fake.titled(f"DISABLED {t}")) == 1 for t in TESTS)


def test_the_filing_stops_at_the_first_test_that_met_the_outage_and_files_each_once_when_github_is_back(
        httpserver, tmp_path, outage):
    fake = FakeIssueTracker(httpserver)
    outage.down_from = READS + 1  # the issues read; the first test's title search meets the outage
    warned: list[str] = []
    report = filing(httpserver, tmp_path, warned)
    assert len(outage.requests) == READS + ATTEMPTS  # one request's retries, not one per test
    assert report.unavailable.startswith("GitHub was unavailable") and "HTTP 503" in report.unavailable
    assert "3 test(s) wait for the next run" in report.unavailable and "nothing lost" in report.unavailable
    assert sorted(report.failed) == sorted(TESTS) and report.rows == []
    assert [w for w in warned if "GitHub was unavailable" in w] == [report.unavailable]
    outage.down_from = None
    again = filing(httpserver, tmp_path)
    assert again.count("created") == 3 and not again.failed and not again.unavailable and filed_once(fake)


def test_github_going_down_mid_filing_keeps_what_was_filed_and_files_the_rest_once(httpserver, tmp_path, outage):
    fake = FakeIssueTracker(httpserver)
    outage.down_from = READS + PER_TEST + 1  # the first test filed; the second's title search meets the outage
    report = filing(httpserver, tmp_path)
    assert report.tests("created") == TESTS[:1] and len(outage.requests) == READS + PER_TEST + ATTEMPTS
    assert sorted(report.failed) == sorted(TESTS[1:]) and "2 test(s) wait" in report.unavailable
    outage.down_from = None
    again = filing(httpserver, tmp_path)
    assert again.tests("found") == TESTS[:1] and sorted(again.tests("created")) == sorted(TESTS[1:])
    assert filed_once(fake)


def test_an_owner_lookup_that_met_the_outage_stops_the_filing_before_its_create(httpserver, tmp_path, outage):
    """The owners of a new issue's test file are read before its create: GitHub down there is one
    retry budget spent, not a second one on the create, and no issue filed as `module: unknown`."""
    fake = FakeIssueTracker(httpserver)
    fake.files["test/test_nn.py"] = '# Owner(s): ["module: nn"]\n'
    evidence = {t: Evidence(t, file="test_nn.py") for t in TESTS}

    def filing_with_owners(warned=None):
        return file_disabled_issues(IssueTracker(github(httpserver), REPO), Lake.at(str(tmp_path / "lake")), DAY,
                                    wanted(), evidence, ["skipped"], 10, "run-0001",
                                    warn=(warned if warned is not None else []).append,
                                    owners=OwnerLookup(github(httpserver), REPO, "main"))
    outage.down_from = READS + 2  # the issues read and the first test's title search; then its owners
    report = filing_with_owners()
    assert len(outage.requests) == READS + 1 + ATTEMPTS
    assert all("/contents/test/test_nn.py" in path for _, path in outage.requests[-ATTEMPTS:])
    assert sorted(report.failed) == sorted(TESTS) and "3 test(s) wait" in report.unavailable and not fake.issues
    outage.down_from = None
    again = filing_with_owners()
    assert again.count("created") == 3 and filed_once(fake)
    assert all({lb["name"] for lb in fake.titled(f"DISABLED {t}")[0]["labels"]} == {"skipped", "module: nn", "triaged"}
               for t in TESTS)


def test_a_create_github_took_as_it_went_down_is_found_not_filed_again(httpserver, tmp_path, outage):
    """The first create takes effect but GitHub answers 503 (not resent: it may have been made), and
    the list looking for it meets the outage: the next run finds the issue rather than filing one."""
    fake = FakeIssueTracker(httpserver)
    fake.fail("create", Scripted(json_response(503, {"message": "Service Unavailable"}), after_effect=True))
    outage.down_from = READS + 4  # the title search, the list and the create answered; the list after it not
    report = filing(httpserver, tmp_path)
    assert len(outage.requests) == READS + 3 + ATTEMPTS and "3 test(s) wait" in report.unavailable
    assert len(fake.issues) == 1
    outage.down_from = None
    again = filing(httpserver, tmp_path)
    assert again.tests("found") == TESTS[:1] and again.count("created") == 2 and filed_once(fake)


def test_a_refused_create_fails_that_test_alone(httpserver, tmp_path):
    fake = FakeIssueTracker(httpserver)
    fake.fail("create", json_response(422, {"message": "Validation Failed"}))
    report = filing(httpserver, tmp_path)
    assert list(report.failed) == TESTS[:1] and "422" in report.failed[TESTS[0]] and not report.unavailable
    assert sorted(report.tests("created")) == sorted(TESTS[1:])


# ---- after the filing: retiring, re-enabling, the aggregates' lines ----------------------------


FIXED = [f"test_fixed_{c} (__main__.TestR)" for c in "abc"]


def lifecycle(httpserver, lake, tmp_path, logged: list | None = None):
    return run_lifecycle(github(httpserver), lake, Store(str(tmp_path / "outputs")), DAY, "run-0001", REPO,
                         DisabledIssuesConfig(enabled=True), "test config",
                         warn=(logged if logged is not None else []).append)


def fixed_issues(fake) -> list[dict]:
    return [fake.add(f"DISABLED {t}", "Platforms: linux\n\nflaky", age=dt.timedelta(days=20), user=BOT) for t in FIXED]


def closed_once(fake, issues: list[dict]) -> bool:
    return all(fake.issues[i["number"]]["state"] == "closed" and len(fake.comments[i["number"]]) == 1
               for i in issues)


def test_re_enabling_stops_at_the_first_issue_that_met_the_outage_and_closes_each_once_when_back(
        httpserver, tmp_path, outage):
    fake = FakeIssueTracker(httpserver)
    issues = fixed_issues(fake)
    lake = lake_with(tmp_path, [r for t in FIXED for r in clean(t, "linux")])
    outage.down_from = READS + 1  # the open issues read back; the first issue's comments meet the outage
    logged: list[str] = []
    life = lifecycle(httpserver, lake, tmp_path, logged)
    assert len(outage.requests) == READS + ATTEMPTS
    assert "GitHub was unavailable" in life.unavailable and "3 issue(s) wait" in life.unavailable
    assert sorted(life.reenabling.failed) == sorted(FIXED) and life.reenabling.rows == []
    assert [w for w in logged if "GitHub was unavailable" in w] == [life.unavailable]
    outage.down_from = None
    again = lifecycle(httpserver, lake, tmp_path)
    assert sorted(r["test"] for r in again.reenabling.rows) == sorted(FIXED) and closed_once(fake, issues)


def test_retiring_that_met_the_outage_leaves_the_re_enabling_after_it_for_the_next_run(
        httpserver, retired_lake, tmp_path, outage):  # noqa: F811
    fake = FakeIssueTracker(httpserver)
    gone = fake.add("DISABLED test_gone (__main__.TestA)", "Platforms: linux", age=dt.timedelta(days=20), user=BOT)
    issues = fixed_issues(fake)
    lake_with(tmp_path, [r for t in FIXED for r in clean(t, "linux")])  # the same lake: its rerun results
    outage.down_from = READS + 1
    life = lifecycle(httpserver, retired_lake, tmp_path)
    assert len(outage.requests) == READS + ATTEMPTS  # the deleted test's close; no re-enabling tried
    assert list(life.retirement.failed) == ["test_gone (__main__.TestA)"] and life.reenabling.decisions == []
    assert "1 issue(s) wait" in life.unavailable
    outage.down_from = None
    lifecycle(httpserver, retired_lake, tmp_path)
    assert closed_once(fake, [gone, *issues])


def test_the_aggregates_lines_stop_at_the_first_aggregate_that_met_the_outage(httpserver, tmp_path, outage):
    fake = FakeIssueTracker(httpserver)
    other = "test_other.py"
    burst = [f"test_op_{i:02d} (__main__.TestBurst)" for i in range(2)]
    more = [f"test_op_{i:02d} (__main__.TestOther)" for i in range(2)]
    first = aggregate(fake, {t: ["linux"] for t in burst}, age=dt.timedelta(days=20))
    second = fake.add(aggregate_title(other), aggregate_body(other, {t: ["linux"] for t in more},
                                                             f"Platforms: linux\n{MARKER}"),
                      user=BOT, age=dt.timedelta(days=20), labels=["skipped"])
    lake = lake_with(tmp_path, [r for t in [*burst, *more] for r in clean(t, "linux")])
    outage.down_from = READS + 1  # the issues read; the first aggregate's comments meet the outage
    life = lifecycle(httpserver, lake, tmp_path)
    assert len(outage.requests) == READS + ATTEMPTS and "2 aggregate(s) wait" in life.unavailable
    assert life.aggregates.rows == [] and sorted(life.aggregates.failed) == sorted([*burst, *more])
    outage.down_from = None
    again = lifecycle(httpserver, lake, tmp_path)
    assert sorted(again.aggregates.closed) == sorted([first["number"], second["number"]])
    assert closed_once(fake, [first, second])


def test_a_gone_issue_fails_its_re_enabling_alone(httpserver, tmp_path):
    fake = FakeIssueTracker(httpserver)
    issues = fixed_issues(fake)
    fake.fail("update", json_response(410, {"message": "This issue was deleted"}))
    life = lifecycle(httpserver, lake_with(tmp_path, [r for t in FIXED for r in clean(t, "linux")]), tmp_path)
    assert list(life.reenabling.failed) == FIXED[:1] and "410" in life.reenabling.failed[FIXED[0]]
    assert not life.unavailable and closed_once(fake, issues[1:])


# ---- the assets: what is published stays --------------------------------------------------------


def test_github_going_down_mid_filing_is_said_once_and_the_published_lists_stay(httpserver, world, outage,
                                                                               instance):  # noqa: F811
    """The first run files both tests' issues; then one is deleted, and the next run, looking it up
    again, meets the outage: the filing stops there, retiring and re-enabling wait, and the lists CI
    and the HUD read stay as published, the steps reading them back each asking once."""
    fake = FakeIssueTracker(httpserver)
    outage.down_from = None
    assert run_assets(world, github(httpserver), instance).success
    published, before = world.published(), len(outage.requests)
    (b,) = fake.titled(f"DISABLED {TEST_B}")
    del fake.issues[b["number"]], fake.search_view[b["number"]]
    # the DISABLED search, the list, the aggregates' read of test_b's issue (gone); its own lookup's read of it
    outage.down_from = before + 4
    result = run_assets(world, github(httpserver), instance)
    assert result.success and world.published() == published
    assert len(outage.requests) == before + 3 + 3 * ATTEMPTS  # the filing, disabled_tests, unstable_jobs
    said = metadata(result, "disabled_issues")["github_unavailable"]
    assert said.startswith("GitHub was unavailable") and "nothing lost; 2 test(s) wait" in said  # test_b, then test_a
    (check,) = [c for c in result.get_asset_check_evaluations() if c.asset_key.to_user_string() == "disabled_issues"]
    assert not check.passed and check.metadata["github_unavailable"].value == said
    assert metadata(result, "disabled_tests")["published"] is False
    assert metadata(result, "unstable_jobs")["published"] is False
    logged = [e.message for e in instance.all_logs(result.run_id) if "GitHub was unavailable" in (e.message or "")]
    assert len(logged) == 1
    outage.down_from = None
    again = run_assets(world, github(httpserver), instance)
    assert again.success and len(fake.titled(f"DISABLED {TEST_B}")) == 1 and "github_unavailable" not in \
        metadata(again, "disabled_issues")


def test_the_unstable_list_stops_at_the_first_permission_that_met_the_outage(httpserver, tmp_path, outage):
    fake = FakeIssueTracker(httpserver)
    for who in ("a", "b", "c"):
        fake.add(f"UNSTABLE trunk / job-{who} / test (default)", "a job", user=f"maintainer-{who}")
    outage.down_from = 2  # the UNSTABLE search; the first author's permission meets the outage
    outputs = Store(str(tmp_path / "out"))
    outputs.write_bytes(UNSTABLE_JOBS_PATH, b"{}")
    report = run_unstable_jobs(github(httpserver), Lake.at(str(tmp_path / "lake")), outputs, DAY, "run-0001",
                               parse_config({"upstream": {"repo": REPO}, "disabled_issues": {"enabled": True}}))
    assert len(outage.requests) == 1 + ATTEMPTS and report.jobs is None and "503" in report.error
    assert outputs.read_bytes(UNSTABLE_JOBS_PATH) == b"{}"
