"""Main's grid and a test job that failed without test reports: PyTorch uploads a run's reports only
once the whole run completed, so until they are due (Dr. CI's rule: an hour after the run ended) the
cell is a failure awaiting its reports, not infrastructure; `commit_health`, which the trunk guardians
read, calls it infrastructure all along."""

import datetime as dt
import html
import re

from hud_lake import DAY, History, publish_grid

from resources.lake import connect
from torchci_assets.derived.hud.pages import CELL_KINDS

END = dt.datetime(2026, 10, 6, 0, 0, tzinfo=dt.timezone.utc)  # DAY's site is generated as of its end
RUN_START = END - dt.timedelta(hours=6)
TEST_JOB = "linux-jammy / test (default, 1, 2, linux.4xlarge)"
GROUP = "pull / linux-jammy / test (default, linux.4xlarge)"


def failed_early(run_ended_ago: dt.timedelta | None) -> History:
    """A main commit whose test shard failed 3 hours before END with no test report; its run still in
    progress (`run_ended_ago` None: another job of it runs) or completed that long before END."""
    h = History()
    c = h.push(1, RUN_START)
    h.job(c, "linux-jammy / build", "success", run_id=50, created=RUN_START)
    # queued at END-4h, 60 s in the queue, 59 minutes of running: failed at END-3h
    h.job(c, TEST_JOB, "failure", run_id=50, created=END - dt.timedelta(hours=4), minutes=59, test_config="default")
    if run_ended_ago is None:  # another config of the run still runs
        h.job(c, "linux-jammy / test (distributed, 1, 1, linux.4xlarge)", None, run_id=50, test_config="distributed",
              created=END - dt.timedelta(hours=4))
        h.run(50, "pull", status="in_progress", conclusion=None, created=RUN_START, minutes=1)
    else:
        h.run(50, "pull", conclusion="failure", created=RUN_START,
              minutes=(END - run_ended_ago - RUN_START).total_seconds() / 60)
    return h


def shown(tmp_path, h: History) -> tuple[str, str, tuple]:
    """(css class, tooltip) of the grid's one failed cell once `h` is published, and what `commit_health`,
    which the trunk guardians read, says of its group: (state, failure_class, infra_reason)."""
    lake, index = publish_grid(tmp_path, h, END)
    cells = [(css, html.unescape(title)) for css, title in
             re.findall(r'<td class="c (\w+)"><a href="[^"]*" title="([^"]*)">', index)]
    failed = [c for c in cells if "1 failed" in c[1]]
    assert len(failed) == 1, cells
    con = connect()
    lake.register(con, "commit_health", [DAY], name="c")
    row = con.execute("SELECT state, failure_class, infra_reason FROM c WHERE job_group = ?", [GROUP]).fetchone()
    return *failed[0], row


# what the trunk guardians read, whatever the grid shows: infrastructure, no evidence on the code
GUARDIANS_READ = ("failure", "infra", "no-test-results")
INFRA_CSS, INFRA_LABEL = CELL_KINDS["infra"][1:]


def test_a_test_job_failed_in_a_run_still_in_progress_is_not_shown_as_infrastructure(tmp_path):
    css, title, read = shown(tmp_path, failed_early(None))
    assert css != INFRA_CSS and not title.startswith(INFRA_LABEL)
    assert title.startswith("failure: test reports not in yet")
    assert "infrastructure an hour after its workflow run ends" in title
    assert read == GUARDIANS_READ


def test_once_the_run_completed_two_hours_ago_the_same_failure_is_infrastructure(tmp_path):
    css, title, read = shown(tmp_path, failed_early(dt.timedelta(hours=2)))
    assert css == INFRA_CSS and title.startswith(INFRA_LABEL) and "infrastructure: no-test-results" in title
    assert read == GUARDIANS_READ


def test_a_run_completed_half_an_hour_ago_says_when_its_reports_are_due(tmp_path):
    css, title, _ = shown(tmp_path, failed_early(dt.timedelta(minutes=30)))
    assert css != INFRA_CSS and title.startswith("failure: test reports not in yet")
    assert "infrastructure from 2026-10-06 00:30 UTC" in title  # an hour after the run's end, 23:30


def test_a_run_whose_completed_delivery_was_lost_counts_from_its_last_job(tmp_path):
    """Heard running, but none of its jobs is still pending: it ended with its last job (Dr. CI's
    `settle_runs`), 3 hours ago here, so the reports are overdue."""
    h = failed_early(None)
    h.rows[("workflow_job", DAY)] = [j for j in h.rows[("workflow_job", DAY)] if j["conclusion"] is not None]
    css, title, _ = shown(tmp_path, h)
    assert css == INFRA_CSS and title.startswith(INFRA_LABEL)
