"""Unstable jobs on the HUD as PyTorch's HUD treats them (`isUnstableJob`): a failure of a job an
open UNSTABLE issue names (read from the published unstable-jobs.json) shows as unstable and does
not make the main commit red; the rest of the commit still counts."""

import dataclasses
import json

import pytest
from hud_lake import History
from test_hud_health import GROUP, TEST, health

from resources.storage import Store
from torchci_assets.derived.flakiness.job_issues import UNSTABLE_JOBS_PATH
from torchci_assets.derived.hud.pages import CELL_KINDS, cell_kind, grid_page
from torchci_assets.derived.hud.unstable import is_unstable, load_unstable_jobs, transform_job_name

OTHER = "linux-jammy-py3.10-clang18 / test (default, 1, 1, linux.2xlarge)"
OTHER_GROUP = "pull / linux-jammy-py3.10-clang18 / test (default, linux.2xlarge)"


def commit(h: History, other: str = "success") -> str:
    c = h.push(1)
    h.job(c, TEST.format(1), "success", run_id=10)
    h.job(c, TEST.format(2), "failure", run_id=10)
    h.job(c, OTHER, other, run_id=10)
    h.run(10, "pull", conclusion="failure")
    return c


@pytest.mark.parametrize("unstable, conclusion, state", [
    ([], "red", "new"),  # no issue: a red commit
    (["pull / linux-jammy-py3.10-gcc11 / test (default)"], "green", "unstable"),  # the config's issue
    (["pull / linux-jammy-py3.10-gcc11"], "green", "unstable"),  # the build's issue covers its tests
    (["pull / linux-jammy-py3.10-gcc11 / test (distributed)"], "red", "new"),  # another config
    (["trunk / linux-jammy-py3.10-gcc11"], "red", "new"),  # another workflow
])
def test_a_failure_of_a_job_an_unstable_issue_names_is_unstable_not_red(tmp_path, unstable, conclusion, state):
    h = History()
    c = commit(h)
    conclusions, rows = health(tmp_path, h, unstable_jobs=unstable)
    assert conclusions[c] == conclusion
    row = rows[(c, GROUP)]
    assert row["state"] == "failure" and row["blocking"] == (state == "new") and row["unstable"] == (state != "new")
    assert cell_kind(row["state"], row["failure_class"], row["unstable"]) == state
    assert rows[(c, OTHER_GROUP)]["unstable"] is False


def test_the_grid_shows_the_failure_as_unstable_and_the_commit_green(tmp_path):
    h = History()
    c = commit(h)
    _, rows = health(tmp_path, h, unstable_jobs=["pull / linux-jammy-py3.10-gcc11"])
    row = rows[(c, GROUP)]
    page = grid_page([row], [(GROUP, row["blocking"]), (OTHER_GROUP, True)], rows, [], "pytorch/pytorch", "now", "")
    assert '<td class="c uns">' in page and 'title="failure of an unstable job (UNSTABLE issue): not red' in page
    assert '<span class="badge green">' in page and '<td class="c new">' not in page


def test_an_unstable_job_does_not_hide_another_groups_failure(tmp_path):
    h = History()
    c = commit(h, other="failure")
    conclusions, rows = health(tmp_path, h, unstable_jobs=["pull / linux-jammy-py3.10-gcc11"])
    assert conclusions[c] == "red"
    assert rows[(c, GROUP)]["unstable"] and not rows[(c, OTHER_GROUP)]["unstable"]


def test_the_published_list_is_read_and_none_published_is_none(tmp_path):
    store = Store(str(tmp_path))
    assert load_unstable_jobs(store) == []
    entry = ["huydhn", "1", "https://github.com/pytorch/pytorch/issues/1", "pull", "linux-jammy-py3.10-gcc11", ""]
    bare = ["a-writer", "2", "https://github.com/pytorch/pytorch/issues/2", "", "", ""]  # a title of just UNSTABLE
    store.write_bytes(UNSTABLE_JOBS_PATH, json.dumps({"pull / linux-jammy-py3.10-gcc11": entry, "": bare}).encode())
    assert load_unstable_jobs(store) == ["pull / linux-jammy-py3.10-gcc11"]


@pytest.mark.parametrize("name, transformed", [  # PyTorch's transformJobName
    ("pull / linux-jammy-py3.10-gcc11 / test (default, 1, 5, linux.4xlarge)", "pull / linux-jammy-py3.10-gcc11 / test (default)"),
    ("trunk / macos-py3-arm64 / build", "trunk / macos-py3-arm64 / build"),
    ("inductor / unit-test / inductor-test / test (inductor, 2, 2, linux.g5)", "inductor / unit-test / inductor-test / test (inductor)"),
])
def test_job_names_are_read_as_workflow_job_config(name, transformed):
    assert transform_job_name(name) == transformed


def test_unstable_in_the_name_or_an_issue_title_contained_in_the_jobs():
    assert is_unstable("pull / linux-jammy / test (default, 1, 1, linux.2xlarge, unstable)", [])
    assert is_unstable("pull / linux-jammy / test (default, 1, 5, r)", ["pull / linux-jammy / test (default)"])
    assert not is_unstable("pull / linux-jammy / test (crossref, 1, 5, r)", ["pull / linux-jammy / test (default)"])
    assert CELL_KINDS["unstable"][0] == "U"


def test_unstable_as_written_anywhere_in_workflow_and_job_as_pytorch_matches_it(tmp_path):
    """isMatchingJobByName: `unstable` in `workflow / job`, case as written. A job of PyTorch's
    `unstable` workflow is unstable on the grid and in Dr. CI; a job merely named `Unstable` is neither."""
    from test_drci import failing_job, trunk

    from torchci_assets.derived.drci import classify as c

    h = History()
    sha = commit(h)
    h.job(sha, "linux-jammy-py3.10 / build", "failure", workflow="unstable", run_id=20)
    h.job(sha, "linux-jammy-py3.10 / test (default, 1, 1, linux.2xlarge, Unstable)", "failure", run_id=10)
    _, rows = health(tmp_path, h)
    assert rows[(sha, "unstable / linux-jammy-py3.10 / build")]["unstable"] is True
    assert rows[(sha, "pull / linux-jammy-py3.10 / test (default, linux.2xlarge, Unstable)")]["unstable"] is False
    verdict = lambda job: c.classify(job, trunk({}), c.Flaky()).cls  # noqa: E731
    assert verdict(dataclasses.replace(failing_job(name="linux-jammy-py3.10 / build"), workflow="unstable")) == c.UNSTABLE
    assert verdict(failing_job(name="linux-jammy-py3.10 / test (default, 1, 1, linux.2xlarge, Unstable)")) == c.NEW


def test_the_hud_reads_the_published_list_as_dr_ci_does_and_a_bad_one_stops_nothing(tmp_path):
    from torchci_assets.derived.flakiness.job_issues import load_unstable

    outputs = Store(str(tmp_path))
    for text, jobs in (('{"pull / a": ["u", "1", "https://x"], "pull / b": "https://x", "": []}', ["pull / a"]),
                       ('["pull / a"]', []), ('{"pull / a": [', [])):
        outputs.write_bytes(UNSTABLE_JOBS_PATH, text.encode())
        logs = []
        assert load_unstable_jobs(outputs, logs.append) == jobs == sorted(load_unstable(outputs))
        assert logs  # said, not raised
