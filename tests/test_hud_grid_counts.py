"""Main's grid: a cell's count of its failed jobs ("failed jobs: 1 infrastructure (log), ...") judges
each job as the page judges the cell's own job, at the page's time. A test shard whose reports may
still land is counted as awaiting them, not as an infrastructure failure for want of them, and once
its reports are overdue it is counted as infrastructure, as its cell would then show it."""

import datetime as dt
import html
import re

import pyarrow as pa
import pyarrow.parquet as pq
from hud_lake import DAY, History, publish_grid, sha
from test_hud_grid_cells import END, GROUP, RUN_START, RUNNER_LOST, SHARD_1, SHARD_2

from resources.storage import Store
from torchci_assets.derived.site.site import publish_site
from torchci_assets.partitions import days_ending


def shards_failed(run_ended_ago: dt.timedelta | None, second: str) -> History:
    """A commit whose two test shards failed 3 hours before END in one attempt: shard 1 without any
    test report; shard 2 as `second` says: `infra`, its log matched an infrastructure rule; `new`, a
    failing test; `no-reports`, no report either. Their run still runs (`run_ended_ago` None: another
    config runs) or completed that long before END."""
    h = History()
    c = h.push(1, RUN_START)
    h.job(c, "linux-jammy / build", "success", run_id=50, created=RUN_START)
    early = END - dt.timedelta(hours=4)
    h.job(c, SHARD_1, "failure", run_id=50, created=early, minutes=59, test_config="default")
    two = h.job(c, SHARD_2, "failure", run_id=50, created=early, minutes=20, test_config="default")
    if second == "infra":
        h.add("job_failure", DAY, job_id=two, run_attempt=1, infra=True, line=RUNNER_LOST)
    elif second == "new":
        h.test_job(two)
        h.failing_test(c, two, "test_conv2d")
    if run_ended_ago is None:
        h.job(c, "linux-jammy / test (distributed, 1, 1, linux.4xlarge)", None, run_id=50, test_config="distributed",
              created=early)
        h.run(50, "pull", status="in_progress", conclusion=None, created=RUN_START, minutes=1)
    else:
        h.run(50, "pull", conclusion="failure", created=RUN_START,
              minutes=(END - run_ended_ago - RUN_START).total_seconds() / 60)
    return h


def cells(index: str) -> dict[str, tuple[str, list[str]]]:
    """GROUP's cell of each commit row of the grid: sha -> (css class, tooltip lines)."""
    groups = [html.unescape(g) for g in re.findall(r'<th class="job[^"]*" title="([^"]*)"', index)]
    out = {}
    for commit, row in re.findall(r'<tr data-sha="(\w+)"(.*?)</tr>', index, re.S):
        tds = re.findall(r'<td class="c (\w+)"><a href="[^"]*" title="([^"]*)">|<td></td>', row)
        css, title = tds[groups.index(GROUP)]
        out[commit] = (css, html.unescape(title).split("\n"))
    return out


def cell(tmp_path, h: History) -> tuple[str, list[str]]:
    """(css class, tooltip lines) of GROUP's cell of the one commit once `h` is published."""
    [shown] = cells(publish_grid(tmp_path, h, END)[1]).values()
    return shown


def counted(lines: list[str]) -> str:
    [line] = [line for line in lines if line.startswith("failed jobs: ")]
    return line


def test_a_shard_awaiting_its_reports_is_counted_so_beside_a_log_matched_infrastructure_failure(tmp_path):
    """The run still runs: shard 1's reports cannot be in yet, so it is not an infrastructure failure."""
    css, lines = cell(tmp_path, shards_failed(None, "infra"))
    assert css == "inf" and f"job: {SHARD_2}" in lines, lines
    assert counted(lines) == "failed jobs: 1 infrastructure (log), 1 awaiting test reports"


def test_within_the_hour_after_the_run_ended_the_shard_still_awaits_its_reports(tmp_path):
    css, lines = cell(tmp_path, shards_failed(dt.timedelta(minutes=30), "infra"))
    assert css == "inf" and counted(lines) == "failed jobs: 1 infrastructure (log), 1 awaiting test reports"


def test_once_its_reports_are_overdue_the_shard_is_counted_as_infrastructure(tmp_path):
    css, lines = cell(tmp_path, shards_failed(dt.timedelta(hours=2), "infra"))
    assert css == "inf"
    assert counted(lines) == "failed jobs: 1 infrastructure (log), 1 infrastructure (no-test-results)"


def test_a_new_failure_beside_a_shard_awaiting_its_reports(tmp_path):
    css, lines = cell(tmp_path, shards_failed(None, "new"))
    assert css == "new" and counted(lines) == "failed jobs: 1 new, 1 awaiting test reports"


def test_a_cell_awaiting_reports_counts_its_own_job_as_awaiting_them_too(tmp_path):
    """Both shards lack reports in a run still running: the cell is `R`, and so is each job it counts."""
    css, lines = cell(tmp_path, shards_failed(None, "no-reports"))
    assert css == "awr" and lines[0].startswith("failure: test reports not in yet"), lines
    assert counted(lines) == "failed jobs: 2 awaiting test reports"


def test_a_partition_written_before_the_counted_jobs_had_ids_is_counted_as_it_was(tmp_path):
    """An upgrade: yesterday's `commit_health` partition, as the previous release wrote it (each counted
    job's class and reason, no id), sits in the grid's window beside today's. Its commit's count cannot
    tell which job awaits its reports and says what `commit_health` says; today's commit's count can."""
    lake, _ = publish_grid(tmp_path, shards_failed(None, "infra"), END)
    [path] = lake.files("commit_health", [DAY])
    t = pq.read_table(path)
    old_kinds = pa.list_(pa.struct([("failure_class", pa.string()), ("infra_reason", pa.string())]))
    kinds = [[{k: v for k, v in kind.items() if k != "job_id"} for kind in row or []]
             for row in t["failing_kinds"].to_pylist()]
    old = t.set_column(t.schema.get_field_index("failing_kinds"), "failing_kinds", pa.array(kinds, old_kinds))
    old = old.set_column(t.schema.get_field_index("sha"), "sha", pa.array([sha(2)] * len(t)))
    lake.write("commit_health", days_ending(DAY, 2)[0], old)
    publish_site(lake, Store(str(tmp_path / "out")), DAY, "pytorch/pytorch")

    shown = cells((tmp_path / "out" / "hud" / "index.html").read_text())
    assert counted(shown[sha(2)][1]) == "failed jobs: 1 infrastructure (log), 1 infrastructure (no-test-results)"
    assert counted(shown[sha(1)][1]) == "failed jobs: 1 infrastructure (log), 1 awaiting test reports"
