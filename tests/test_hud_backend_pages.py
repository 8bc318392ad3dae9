"""The HUD's downstream backend views, from `ci_result` as the ingest writes it from callbacks
report_callback.py builds for pull_request and push dispatches."""

import datetime as dt
import json
import re
from pathlib import Path

import pyarrow as pa

from conftest import write_lines
from resources.lake import Lake
from resources.storage import Store
from tests.relay_callbacks import action_env, build_payload, forwarded, job_callbacks
from torchci_assets.derived.backends.levels import compute_health
from torchci_assets.derived.hud import backend_pages
from torchci_assets.ingest.ci_results import ingest_ci_results_day

DAY = "2026-11-20"
T0 = dt.datetime(2026, 11, 20, 9, 0, tzinfo=dt.timezone.utc)
PAYLOAD = next(p for p in json.loads((Path(__file__).parent / "data" / "octokit" / "examples.json").read_text())
               ["api.github.com"]["pull_request"] if p["action"] == "synchronize")
HEAD = PAYLOAD["pull_request"]["head"]["sha"]
PR_DISPATCH = {"event_type": "pull_request", "delivery_id": "pr-delivery", "payload": PAYLOAD}
PUSH_DISPATCH = {"event_type": "push", "delivery_id": "push-delivery", "payload": {"after": "b" * 40}}
L3, L2 = "acme-ai/torch-npu", "org-two/torch-tpu"


def pr_callbacks(t0: dt.datetime) -> list[dict]:
    """The pull request's head, dispatched at `t0`: an L3 backend's build passes and its test job fails 3
    tests; an L2 backend's build reports in_progress and nothing more."""
    return (job_callbacks(L3, t0, run_id=1, job_name="build", queue_s=120, exec_s=600, level="L3",
                          client_payload=PR_DISPATCH)
            + job_callbacks(L3, t0, run_id=1, job_name="test", queue_s=60, exec_s=900, conclusion="failure",
                            test_results={"passed": 40, "failed": 3, "skipped": 0}, level="L3",
                            client_payload=PR_DISPATCH)
            + job_callbacks(L2, t0, run_id=2, job_name="build", queue_s=300, completes=False,
                            client_payload=PR_DISPATCH))


def views(tmp_path, extra: list[dict] = ()):
    lines = (list(extra) + pr_callbacks(T0)
             + job_callbacks(L3, T0, run_id=3, job_name="build", queue_s=30, exec_s=60, level="L3",
                             client_payload=PUSH_DISPATCH))
    write_lines(tmp_path / "archive" / "ci-results" / f"day={DAY}" / "relay-1.jsonl", lines)
    lake = Lake.at(str(tmp_path / "lake"))
    ingest_ci_results_day(Store(str(tmp_path / "archive")), lake, DAY)
    # at noon, while the L2 job has run for less than the relay's zombie timeout (6 h)
    noon = int(T0.replace(hour=12).timestamp() * 1000)
    return backend_pages.load(lake, DAY, now_ms=noon, zombie_timeout_s=6 * 3600)


def test_the_pr_page_section_lists_each_backends_jobs_on_the_head_by_level(tmp_path):
    v = views(tmp_path)
    jobs = backend_pages.jobs_by_head(v)[HEAD]
    assert sorted((j["repo"], j["job_name"], j["status"], j["conclusion"]) for j in jobs) == [
        (L3, "build", "completed", "success"), (L3, "test", "completed", "failure"), (L2, "build", "in_progress", None)]
    html = backend_pages.pr_section(jobs)
    checked, reported = html.split('id="downstream-checked"')[1].split('id="downstream-reported"')
    assert checked.count("<tr>") == 3 and L2 not in checked  # header and two L3 jobs
    assert "failure" in checked and "10m" in checked and "15m" in checked  # conclusion, execution times
    assert 'href="../backends/acme-ai/torch-npu.html"' in checked
    assert f'href="https://github.com/{L3}/actions/runs/1"' in checked
    # the L2 job, queued 5 minutes, still running
    assert reported.count("<tr>") == 2 and "5m" in reported and "in_progress" in reported


def test_a_backend_page_shows_its_heads_and_the_level_windows(tmp_path):
    v = views(tmp_path)
    files = backend_pages.render(v, "pytorch/pytorch", "now", "hud")
    assert sorted(files) == ["hud/backends/acme-ai/torch-npu.html", "hud/backends/org-two/torch-tpu.html"]
    page = files["hud/backends/acme-ai/torch-npu.html"]
    windows = {w["window_days"]: w for w in v.windows if w["repo"] == L3}
    assert windows[7]["completed"] == 3 and abs(windows[7]["success_rate"] - 2 / 3) < 1e-9
    assert "66.7%" in page and "7 days" in page and "28 days" in page
    heads = page.split('id="heads"')[1]
    assert heads.count("<tr>") == 3 and "push" in heads and HEAD[:10] in heads
    assert 'href="../../backends.html"' in page  # two folders down


def test_the_level_windows_leave_out_self_reports_as_the_levels_do(tmp_path):
    """A nightly run reports itself: neither the backend's level nor its page's windows count it (they did, so
    the page said 4 completed jobs where backends.html's criteria said 3)."""
    env = action_env("completed", repo=L3, run_id=9, job_name="nightly", conclusion="failure", delivery_id="n-1",
                     event_type="nightly")
    v = views(tmp_path, [forwarded(build_payload(env, T0), L3, T0, "L3")])
    week = next(w for w in v.windows if w["repo"] == L3 and w["window_days"] == 7)
    noon = int(T0.replace(hour=12).timestamp() * 1000)
    health = next(h for h in compute_health(Lake.at(str(tmp_path / "lake")), DAY, (7,), now_ms=noon,
                                            zombie_timeout_s=6 * 3600).to_pylist() if h["repo"] == L3)
    assert week["completed"] == health["completed_jobs"] == 3
    assert abs(week["success_rate"] - 2 / 3) < 1e-9


def test_a_backend_page_links_only_the_pull_request_pages_the_site_has(tmp_path):
    """Its heads go back 28 days, the pull requests' pages a week: an older one links to GitHub."""
    job = {"repo": L3, "level": "L3", "event_type": "pull_request", "workflow_name": "npu", "job_name": "build",
           "status": "completed", "conclusion": "success", "run_id": 1, "run_attempt": 1, "queue_s": 1.0,
           "execution_s": 2.0, "callback_at": T0}
    v = backend_pages.BackendViews(jobs=[{**job, "head_sha": "a" * 40}, {**job, "head_sha": "b" * 40}],
                                   pr_numbers={"a" * 40: 7, "b" * 40: 42})
    files = backend_pages.render(v, "pytorch/pytorch", "now", "hud", published={7})
    page = files[f"hud/{backend_pages.backend_path(L3)}"]
    assert 'href="../../pr/7.html"' in page and "pr/42.html" not in page
    assert 'href="https://github.com/pytorch/pytorch/pull/42"' in page


def test_the_page_of_a_backend_gone_from_the_window_is_deleted(tmp_path):
    from hud_lake import DAY as HUD_DAY
    from hud_lake import History
    from test_hud_site import build

    from torchci_assets.derived.site.site import publish_site
    from torchci_assets.ingest.ci_results import CI_RESULT_SCHEMA

    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    History().write(lake)
    row = {f.name: None for f in CI_RESULT_SCHEMA}
    row.update(repo="acme/npu", level="L3", event_type="push", head_sha="c" * 40, workflow_name="npu", job_name="t",
               run_id=5, run_attempt=1, status="completed", conclusion="failure", callback_at=T0, failure_kind="test",
               received_at=T0)
    lake.write("ci_result", HUD_DAY, pa.Table.from_pylist([row], schema=CI_RESULT_SCHEMA))
    build(lake)
    publish_site(lake, out, HUD_DAY, "pytorch/pytorch")
    assert out.exists("hud/backends/acme/npu.html")
    report = publish_site(lake, out, "2026-11-10", "pytorch/pytorch")  # 36 days later: out of its 28-day window
    assert report.deleted == ["hud/backends/acme/npu.html"] and not out.exists("hud/backends/acme/npu.html")


def published_pr_page(tmp_path) -> tuple[str, str]:
    """The site published for hud_lake's day, with L3 and L2 backends' callbacks (real relay lines,
    ingested) on pull request 2's head: pr/2.html, and pr/7.html whose head no backend ran on."""
    from hud_lake import DAY as HUD_DAY
    from hud_lake import T0 as HUD_T0
    from test_hud_site import build, history

    from torchci_assets.derived.site.site import publish_site

    lines = pr_callbacks(HUD_T0)
    write_lines(tmp_path / "archive" / "ci-results" / f"day={HUD_DAY}" / "relay-1.jsonl", lines)
    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    ingest_ci_results_day(Store(str(tmp_path / "archive")), lake, HUD_DAY)
    h = history()
    h.add("pull_request", HUD_DAY, repo="pytorch/pytorch", number=2, state="open", head_sha=HEAD, head_ref="b",
          base_ref="main", labels=[], merged=None, updated_at=HUD_T0, received_at=HUD_T0)
    h.write(lake)
    build(lake)
    publish_site(lake, out, HUD_DAY, "pytorch/pytorch")
    return out.read_bytes("hud/pr/2.html").decode(), out.read_bytes("hud/pr/7.html").decode()


def test_a_pull_requests_page_lists_each_downstream_job_once_in_one_section(tmp_path):
    """One section, the L3/L4 jobs (check runs on the pull request) apart from the L2 ones, each job with
    its result, failed tests or reason, queue and execution times and a link to its run."""
    page, _ = published_pr_page(tmp_path)
    assert len(re.findall(r"<h2[^>]*>Downstream", page)) == 1
    section = page.split('id="downstream"')[1]
    checked, reported = section.split('id="downstream-checked"')[1].split('id="downstream-reported"')
    assert checked.count(f">{L3}<") == 2 and L2 not in checked and reported.count(f">{L2}<") == 1
    test_row = next(r for r in checked.split("<tr>") if "/ test<" in r)
    assert "3 tests failed" in test_row and "15m" in test_row and "1m" in test_row
    assert f'href="https://github.com/{L3}/actions/runs/1"' in test_row
    assert 'href="../backends/acme-ai/torch-npu.html"' in test_row
    # the L2 job never completed: timed out by the relay at the end of the day, 6 h after it started
    assert "timed_out (no completed callback within 6h00m)" in reported and "infrastructure" in reported
    assert page.count(f">{L3}<") == 2  # nowhere else on the page


def test_a_pull_request_no_backend_ran_on_says_so_once(tmp_path):
    _, page = published_pr_page(tmp_path)
    assert len(re.findall(r"<h2[^>]*>Downstream", page)) == 1
    assert page.count("has reported on this head") == 1
