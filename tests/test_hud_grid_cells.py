"""Main's grid: what a cell of a job group says of its jobs. A group's cell links to the failing job
that tells the most of the group's attempt (a log-matched infrastructure failure rather than a shard
whose test reports are not in yet, a new failure rather than an infrastructure one), says how many
of its jobs failed and how, and shows only the lines of the attempt its kind is about: a failed
group's latest attempt, a flaky group's failed attempt (and which attempt passed)."""

import datetime as dt
import html
import re

from hud_lake import DAY, REPO, History, publish_grid

from resources.lake import connect

END = dt.datetime(2026, 10, 6, 0, 0, tzinfo=dt.timezone.utc)  # DAY's site is generated as of its end
RUN_START = END - dt.timedelta(hours=6)
GROUP = "pull / linux-jammy / test (default, linux.4xlarge)"
SHARD_1 = "linux-jammy / test (default, 1, 2, linux.4xlarge)"
SHARD_2 = "linux-jammy / test (default, 2, 2, linux.4xlarge)"
RUNNER_LOST = "##[error]The runner has received a shutdown signal."
ASSERTION = "AssertionError: Tensor-likes are not close!"


def two_shards_failed(h: History, second: str) -> tuple[int, int]:
    """A commit whose two test shards failed in one attempt of a run still in progress (another config
    runs): shard 1, the longer, without any test report yet; shard 2 as `second` says (`failed_as`).
    Returns their ids."""
    c = h.push(1, RUN_START)
    h.job(c, "linux-jammy / build", "success", run_id=50, created=RUN_START)
    early = END - dt.timedelta(hours=4)
    one = h.job(c, SHARD_1, "failure", run_id=50, created=early, minutes=59, test_config="default")
    two = h.job(c, SHARD_2, "failure", run_id=50, created=early, minutes=20, test_config="default")
    h.job(c, "linux-jammy / test (distributed, 1, 1, linux.4xlarge)", None, run_id=50, test_config="distributed",
          created=early)
    h.run(50, "pull", status="in_progress", conclusion=None, created=RUN_START, minutes=1)
    failed_as(h, c, two, second)
    return one, two


def failed_as(h: History, commit: str, job: int, how: str) -> None:
    """Job `job` of attempt 1 failed as `how` says: `infra`, its log matched an infrastructure rule (the
    runner was lost); `new`, a test that fails nowhere else, with the assertion its log shows."""
    if how == "infra":
        h.add("job_failure", DAY, job_id=job, run_attempt=1, infra=True, line=RUNNER_LOST)
    else:
        h.test_job(job)
        h.failing_test(commit, job, "test_conv2d")
        h.add("job_failure", DAY, job_id=job, run_attempt=1, infra=False, line=ASSERTION)


def published(tmp_path, h: History) -> tuple[str, str, str, tuple]:
    """(css class, link, tooltip) of GROUP's cell once `h` is published, and what `commit_health`, which
    the trunk guardians read, says of the group: (state, failure_class, run_id, run_attempt)."""
    lake, index = publish_grid(tmp_path, h, END)
    groups = [html.unescape(g) for g in re.findall(r'<th class="job[^"]*" title="([^"]*)"', index)]
    cells = re.findall(r'<td class="c (\w+)"><a href="([^"]*)" title="([^"]*)">|<td></td>', index)
    css, url, title = cells[groups.index(GROUP)]
    con = connect()
    lake.register(con, "commit_health", [DAY], name="c")
    read = con.execute("SELECT state, failure_class, run_id, run_attempt FROM c WHERE job_group = ?",
                       [GROUP]).fetchone()
    return css, html.unescape(url), html.unescape(title), read


def job_link(run_id: int, job_id: int) -> str:
    return f"https://github.com/{REPO}/actions/runs/{run_id}/job/{job_id}"


def test_a_shard_whose_log_matched_an_infra_rule_makes_the_cell_infrastructure_though_another_awaits_reports(
        tmp_path):
    """PyTorch's HUD lists every failed job of a group; the group's log-matched shard already says
    infrastructure, the shard without reports does not say more until its run ends."""
    one, two = two_shards_failed(h := History(), "infra")
    css, url, title, read = published(tmp_path, h)
    assert css == "inf" and title.startswith("failure: infrastructure ·"), title
    assert url == job_link(50, two)
    lines = title.split("\n")
    assert f"job: {SHARD_2}" in lines and "infrastructure: log" in lines and RUNNER_LOST in lines
    assert "failed jobs: 1 infrastructure (log), 1 awaiting test reports" in lines
    assert read == ("failure", "infra", 50, 1)


def test_a_shard_with_a_new_failing_test_is_the_cells_job_not_the_shard_awaiting_its_reports(tmp_path):
    one, two = two_shards_failed(h := History(), "new")
    css, url, title, read = published(tmp_path, h)
    assert css == "new" and title.startswith("failure (new) ·"), title
    assert url == job_link(50, two)
    lines = title.split("\n")
    assert f"job: {SHARD_2}" in lines and ASSERTION in lines
    assert not any(line.startswith("infrastructure:") for line in lines), lines
    assert "failed jobs: 1 new, 1 awaiting test reports" in lines
    assert read == ("failure", "new", 50, 1)


def test_a_single_failed_job_gets_no_count_line(tmp_path):
    h = History()
    c = h.push(1, RUN_START)
    job = h.job(c, SHARD_1, "failure", run_id=50, created=RUN_START, test_config="default")
    h.test_job(job)
    h.failing_test(c, job, "test_conv2d")
    h.run(50, "pull", conclusion="failure", created=RUN_START)
    css, url, title, _ = published(tmp_path, h)
    assert css == "new" and url == job_link(50, job)
    assert not any(line.startswith("failed jobs:") for line in title.split("\n")), title


def rerun(h: History, first: str, second: str | None) -> tuple[int, int]:
    """A commit whose test job failed on attempt 1 as `first` says (`failed_as`) and was rerun as attempt 2: `second` its conclusion. Returns the two jobs' ids."""
    c = h.push(1, RUN_START)
    one = h.job(c, SHARD_1, "failure", run_id=50, created=RUN_START, test_config="default")
    h.run(50, "pull", conclusion="failure", created=RUN_START)
    failed_as(h, c, one, first)
    later = RUN_START + dt.timedelta(hours=2)
    two = h.job(c, SHARD_1, second, run_id=50, attempt=2, created=later, test_config="default")
    h.run(50, "pull", attempt=2, conclusion=second, created=later)
    return one, two


def test_a_flaky_cell_links_the_failed_attempt_and_says_which_attempt_passed(tmp_path):
    one, two = rerun(h := History(), "new", "success")
    h.test_job(two, attempt=2)
    css, url, title, read = published(tmp_path, h)
    assert css == "fla" and url == job_link(50, one)
    lines = title.split("\n")
    assert "failed on attempt 1, passed on attempt 2" in lines[0], lines
    assert f"job: {SHARD_1}" in lines and ASSERTION in lines
    assert read == ("flaky", None, 50, 2)  # the guardians still read the latest attempt's run


def test_a_group_that_failed_again_shows_its_latest_attempts_failure_not_the_first_ones(tmp_path):
    """The rerun failed as a build would (no test report, no log line read yet): a new failure. The
    first attempt's infrastructure reason and log line are not the cell's."""
    one, two = rerun(h := History(), "infra", "failure")
    h.test_job(two, attempt=2)
    css, url, title, read = published(tmp_path, h)
    assert css == "new" and url == job_link(50, two)
    lines = title.split("\n")
    assert "attempt 2 of 2" in lines[0]
    assert RUNNER_LOST not in title and "infrastructure: log" not in title, lines
    assert read == ("failure", "new", 50, 2)
