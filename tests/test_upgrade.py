"""An upgrade: today's code reads a lake the previous release wrote. Partitions of `commit_health`
written before `failing_kinds` and `failed_attempt`, and of `job_failure` written before `captures`,
`run_attempt` and `log_complete`, sit in the windows beside the partitions today's code writes. The
grid and Dr. CI read them together (DuckDB, union_by_name) and show each row as its partition can
tell it: an old flaky cell as the previous release showed it (the latest attempt, the failure's
line), a new one with its failed attempt, and a failure without a line says whether its log was read,
whatever partition says so."""

from __future__ import annotations

import datetime as dt
import html
import re

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from hud_lake import DAY, REPO, T0, History

from resources.github import GitHubResource
from resources.lake import Lake, connect
from resources.storage import Store
from torchci_assets.derived.drci.build import build_comments
from torchci_assets.derived.drci.publish import publish
from torchci_assets.derived.failures.job_failure import JOB_FAILURE_SCHEMA
from torchci_assets.derived.hud.health import build_commit_health, build_pr_jobs
from torchci_assets.derived.site.site import publish_site
from torchci_assets.partitions import days_ending

OLD_DAY = days_ending(DAY, 4)[0]  # out of DAY's commit_health (its pushes' lookback), in the grid's window
NOW = T0 + dt.timedelta(hours=15)
SHARD = "linux-jammy / test (default, 1, 2, linux.4xlarge)"
LINE = "AssertionError: Tensor-likes are not close!"
# the columns each table gained in this release, and in the releases before for job_failure
NEW_HEALTH = ["failing_kinds", "failed_attempt"]
NEW_JOB_FAILURE = ["captures", "run_attempt", "log_complete"]
PR_HEAD = "cd" * 20
PR = 50


def flaky_commit(h: History, commit: int, day: str, run_id: int) -> tuple[str, int, int]:
    """A commit pushed on `day` whose test shard failed on attempt 1 (its log's line: LINE) and passed
    on attempt 2: (its sha, the failed job, the passing job)."""
    start = dt.datetime.fromisoformat(day).replace(hour=8, tzinfo=dt.timezone.utc)
    c = h.push(commit, start)
    one = h.job(c, SHARD, "failure", run_id=run_id, created=start, test_config="default", day=day)
    h.run(run_id, "pull", conclusion="failure", created=start, day=day)
    h.test_job(one, day=day)
    h.failing_test(c, one, "test_conv2d", day=day)
    h.add("job_failure", day, job_id=one, run_attempt=1, infra=False, line=LINE)
    later = start + dt.timedelta(hours=2)
    two = h.job(c, SHARD, "success", run_id=run_id, attempt=2, created=later, test_config="default", day=day)
    h.run(run_id, "pull", attempt=2, conclusion="success", created=later, day=day)
    h.test_job(two, attempt=2, day=day)
    return c, one, two


def as_previous_release_wrote(lake: Lake, day: str) -> None:
    """Rewrite `commit_health`'s partition of `day` as the previous release wrote it: without NEW_HEALTH,
    and a flaky group's line its failed attempt's, beside the latest attempt's job."""
    [path] = lake.files("commit_health", [day])
    t = pq.read_table(path)
    failed_line = pc.struct_field(t["failed_attempt"], "failure_line")
    t = t.set_column(t.schema.get_field_index("failure_line"), "failure_line",
                     pc.coalesce(t["failure_line"], failed_line))
    lake.write("commit_health", day, t.drop_columns(NEW_HEALTH))


def grid_cells(index: str) -> dict[str, tuple[str, str, str]]:
    """The first cell of each commit row of the grid (its only job group's): sha -> (css class, link,
    tooltip)."""
    out = {}
    for row in re.findall(r'<tr data-sha="(\w+)"(.*?)</tr>', index, re.S):
        cell = re.search(r'<td class="c (\w+)"><a href="([^"]*)" title="([^"]*)">', row[1])
        out[row[0]] = (cell[1], html.unescape(cell[2]), html.unescape(cell[3]))
    return out


def job_link(run_id: int, job_id: int) -> str:
    return f"https://github.com/{REPO}/actions/runs/{run_id}/job/{job_id}"


def test_the_grid_shows_old_and_new_commit_health_partitions_side_by_side(tmp_path):
    """A commit only an old partition holds keeps the cell the previous release drew; the commit of
    today's partition gets its failed attempt's job and says which attempt passed."""
    h = History()
    old, _, old_passed = flaky_commit(h, 1, OLD_DAY, 40)
    new, new_failed, _ = flaky_commit(h, 2, DAY, 50)
    lake = Lake.at(str(tmp_path / "lake"))
    h.write(lake)
    for day in (OLD_DAY, DAY):
        build_commit_health(lake, day, REPO, ("refs/heads/main",), min_groups=1, now=NOW)
    as_previous_release_wrote(lake, OLD_DAY)
    build_pr_jobs(lake, DAY, REPO, now=NOW)
    publish_site(lake, Store(str(tmp_path / "out")), DAY, REPO)

    con = connect()
    lake.register(con, "commit_health", [OLD_DAY, DAY], name="ch")
    read = con.execute("SELECT sha, failed_attempt.job_id, failing_kinds FROM ch ORDER BY sha").fetchall()
    assert read == [(old, None, None), (new, new_failed, [])]
    cells = grid_cells((tmp_path / "out" / "hud" / "index.html").read_text())
    assert set(cells) == {old, new}
    css, url, title = cells[old]
    assert css == "fla" and url == job_link(40, old_passed), cells[old]
    assert title.split("\n")[0].endswith("· attempt 2 of 2") and LINE in title.split("\n")
    css, url, title = cells[new]
    assert css == "fla" and url == job_link(50, new_failed), cells[new]
    assert "failed on attempt 1, passed on attempt 2" in title.split("\n")[0] and LINE in title.split("\n")
    assert "None" not in cells[old][2] + cells[new][2]


def pr_with_three_failed_builds(h: History) -> dict[str, int]:
    """Pull request PR's head failed three build jobs: their ids by name."""
    h.push(1, T0)
    h.add("pull_request", DAY, repo=REPO, number=PR, state="open", head_sha=PR_HEAD, head_ref="u/50",
          base_ref="main", labels=[], merged=None, updated_at=T0, received_at=T0)
    ids = {name: h.job(PR_HEAD, f"{name} / build", "failure", run_id=500, branch="u/50", day=DAY)
           for name in ("linux-jammy", "win-vs2022", "macos-arm64")}
    h.run(500, "pull", conclusion="failure", created=T0, event="pull_request")
    return ids


def test_dr_ci_says_whether_a_log_was_read_from_old_and_new_job_failure_partitions(tmp_path):
    """No log rule matched a line of the three builds' logs: the linux build's log is in yesterday's
    `job_failure` partition as an old release wrote it, the windows build's in today's, read in part;
    the mac build's log is not read yet."""
    h = History()
    ids = pr_with_three_failed_builds(h)
    lake = Lake.at(str(tmp_path / "lake"))
    h.write(lake)
    old_schema = pa.schema([f for f in JOB_FAILURE_SCHEMA if f.name not in NEW_JOB_FAILURE])
    lake.write("job_failure", days_ending(DAY, 2)[0], pa.Table.from_pylist(
        [{"job_id": ids["linux-jammy"], "infra": False, "line": None}], schema=old_schema))
    lake.write("job_failure", DAY, pa.Table.from_pylist(
        [{"job_id": ids["win-vs2022"], "run_attempt": 1, "infra": False, "line": None, "captures": [],
          "log_complete": False}], schema=JOB_FAILURE_SCHEMA))
    build_commit_health(lake, DAY, REPO, ("refs/heads/main",), min_groups=1, now=NOW)
    build_pr_jobs(lake, DAY, REPO, now=NOW)
    dry = GitHubResource(api_url="http://127.0.0.1:9")
    rows = build_comments(lake, dry, DAY, REPO, now=NOW).rows
    out = Store(str(tmp_path / "out"))
    publish(lake, out, dry, DAY, REPO, rows, enabled=False, today=dt.date.fromisoformat(DAY))
    publish_site(lake, out, DAY, REPO)

    body = out.read_bytes(f"drci/{PR}.md").decode()
    said = {name: body.split(f"/job/{job})", 1)[1].split("\n", 1)[0] for name, job in ids.items()}
    assert said == {"linux-jammy": " (log read: no log rule matched a line of it)",
                    "win-vs2022": " (log read only in part (cut short or unreadable): no log rule matched a line "
                                  "of what was read)",
                    "macos-arm64": " (log not read yet)"}, body
    assert "None" not in body
    page = html.unescape((tmp_path / "out" / "hud" / "pr" / f"{PR}.html").read_text())
    assert all(text.strip(" ()") in page for text in said.values())
