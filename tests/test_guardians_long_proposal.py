"""A culprit that breaks hundreds of tests still gets its revert request: GitHub refuses a comment
over 65,536 characters (422), so the proposal names a few job groups in `-m`, lists a capped
number of signals and counts the rest; a comment GitHub refuses all the same is recorded once and
not sent again."""

import datetime as dt

from fake_github_pulls import MAX_BODY_CHARS, FakePullRequests

from resources.github import GitHubResource
from resources.lake import Lake
from tests.fake_github_reruns import FakeActions
from tests.trunk_history import GROUP, T0, row, sha
from torchci_assets.derived.guardians import ledger
from torchci_assets.derived.guardians.actions import Guardian, Planned
from torchci_assets.derived.guardians.passes import autorevert_pass
from torchci_assets.derived.guardians.proposal import marker, revert_comment
from torchci_assets.guardian_config import AutorevertConfig

REPO = "pytorch/pytorch"
TOKEN = "ghp_FAKEtokenGUARDIANS0123456789"
ON = AutorevertConfig(enabled=True)
# what a change to a common operator does: every out= variant of test_ops fails
TESTS = [f"TestCommonCUDA.test_out_op{i:03d}_cuda_float32 (test_ops.py)" for i in range(300)]


def client(httpserver) -> GitHubResource:
    gh = GitHubResource(api_url=httpserver.url_for(""), token=TOKEN, write_interval_s=0.0)
    gh._sleep = lambda s: None
    return gh


def test_a_culprit_that_breaks_hundreds_of_tests_gets_one_revert_request_github_accepts(tmp_path, httpserver):
    rows = [row(0, "success"), row(1, "success", attempts=1), row(2, "success"),
            row(3, "failure", tests=TESTS, attempts=2), row(4, "failure", tests=TESTS, attempts=2)]
    fake, prs = FakeActions(httpserver, REPO), FakePullRequests(httpserver, REPO)
    fake.add_pull(sha(3), 4242, merged_at_unset=True)
    lake = Lake.at(str(tmp_path / "lake"))
    for minutes in (0, 25, 70, 135, 200, 300, 400):
        autorevert_pass(client(httpserver), lake, REPO, ON, T0 + dt.timedelta(hours=1, minutes=minutes), rows=rows)
    (body,) = prs.bodies(4242)
    assert len(body) <= MAX_BODY_CHARS and body.endswith(marker(sha(3)))
    command = body.splitlines()[0]
    assert command.startswith('@pytorchbot revert -m "Reverted automatically by the trunk guardian: ')
    assert GROUP in command and "test_out_op" not in command and len(command) < 400
    # the group and the first tests are named, the rest counted
    assert f"`{GROUP}`" in body and f"`{GROUP} :: {TESTS[0]}`" in body
    listed = sum(f"`{GROUP} :: {t}`" in body for t in TESTS)
    assert 0 < listed < len(TESTS) and f"...and {len(TESTS) - listed} more, see the HUD" in body
    done = [r for r in ledger.read(lake, T0 + dt.timedelta(hours=9)) if r["phase"] == "done" and r["action"] == "revert"]
    assert [r["outcome"] for r in done] == ["ok"]


def test_the_body_fits_whatever_the_signals_and_the_configured_message():
    signals = [(wf, f"{wf} / linux-build-{g} / test (default, linux.4xlarge)" + (f" :: {t}" if t else ""))
               for wf in ("trunk", "pull", "periodic") for g in range(40) for t in ["", *TESTS[:20]]]
    body = revert_comment(sha(3), signals, "Reverted: {signals} failed", "nosignal")
    command = body.splitlines()[0]
    assert command == ('@pytorchbot revert -m "Reverted: periodic / linux-build-0 / test (default, linux.4xlarge), '
                       'periodic / linux-build-1 / test (default, linux.4xlarge), periodic / linux-build-10 / test '
                       '(default, linux.4xlarge) and 117 more job group(s) failed" -c nosignal')
    assert len(body) <= MAX_BODY_CHARS and body.endswith(marker(sha(3)))
    # a configured message longer than GitHub takes: the comment is cut, its marker kept
    long = revert_comment(sha(3), signals[:3], "x" * 70_000, "nosignal")
    assert len(long) <= MAX_BODY_CHARS and long.endswith("\n" + marker(sha(3)))


def test_a_comment_github_refuses_is_recorded_once_and_not_sent_again(tmp_path, httpserver):
    fake, prs = FakeActions(httpserver, REPO), FakePullRequests(httpserver, REPO)
    fake.add_pull(sha(3), 4242)
    prs.max_body_chars = 100  # every proposal is over the limit: GitHub's 422
    lake = Lake.at(str(tmp_path / "lake"))
    planned = Planned("revert", sha(3), "", (("trunk", GROUP),))
    for minutes in (0, 30, 100, 200, 400, 800):
        Guardian(client(httpserver), lake, REPO, ON, T0 + dt.timedelta(minutes=minutes)).run([planned])
    assert prs.count("POST") == 1 and not prs.bodies(4242)
    done = [r for r in ledger.read(lake, T0 + dt.timedelta(hours=20)) if r["phase"] == "done"]
    assert [(r["outcome"], r["failed"]) for r in done] == [("refused", True)]
    assert "422" in done[0]["notes"]
