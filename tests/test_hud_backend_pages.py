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
from torchci_assets.derived.hud.svg import duration
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


def levels_of(lake: Lake, day: str, now_ms: int | None = None) -> dict:
    """backend-levels.json as backend_levels would publish it for `day`, judged at `now_ms`, with the config's
    windows and zombie timeout."""
    from torchci_assets.config import load_config
    from torchci_assets.derived.backends.levels import assess_backends, health_windows, levels_document

    config = load_config()
    health = compute_health(lake, day, health_windows(config), now_ms=now_ms,
                            zombie_timeout_s=config.zombie_timeout_seconds).to_pylist()
    return levels_document(assess_backends(health, config), day, config)


def levels_at_noon(tmp_path) -> dict:
    """backend-levels.json at noon, from the lake `views` wrote."""
    return levels_of(Lake.at(str(tmp_path / "lake")), DAY, int(T0.replace(hour=12).timestamp() * 1000))


def test_a_backend_page_shows_its_heads_and_the_level_windows(tmp_path):
    v = views(tmp_path)
    files = backend_pages.render(v, "pytorch/pytorch", "now", "hud", levels=levels_at_noon(tmp_path))
    assert sorted(files) == ["hud/backends/acme-ai/torch-npu.html", "hud/backends/org-two/torch-tpu.html"]
    page = files["hud/backends/acme-ai/torch-npu.html"]
    week = window_cells(page, 7)
    assert (week["completed jobs"], week["success rate"]) == ("3", "66.7%") and window_cells(page, 28)
    assert f"backend-levels.json for {DAY}" in page
    heads = page.split('id="heads"')[1]
    assert heads.count("<tr>") == 3 and "push" in heads and HEAD[:10] in heads
    assert 'href="../../backends.html"' in page  # two folders down


def test_a_backend_page_without_published_levels_says_it_has_no_figures(tmp_path):
    page = backend_pages.render(views(tmp_path), "pytorch/pytorch", "now", "hud")["hud/backends/acme-ai/torch-npu.html"]
    assert 'id="windows"' not in page and "backend-levels.json has no figures for this backend yet" in page


def test_the_page_leaves_out_self_reports_as_the_levels_do(tmp_path):
    """A nightly run reports itself: neither the backend's level, nor its page's windows, nor its heads count it
    (the windows did, so the page said 4 completed jobs where backends.html's criteria said 3)."""
    env = action_env("completed", repo=L3, run_id=9, job_name="nightly", conclusion="failure", delivery_id="n-1",
                     event_type="nightly")
    v = views(tmp_path, [forwarded(build_payload(env, T0), L3, T0, "L3")])
    page = backend_pages.render(v, "pytorch/pytorch", "now", "hud", levels=levels_at_noon(tmp_path))[
        f"hud/{backend_pages.backend_path(L3)}"]
    assert (window_cells(page, 7)["completed jobs"], window_cells(page, 7)["success rate"]) == ("3", "66.7%")
    assert page.split('id="heads"')[1].count("<tr>") == 3 and "nightly" not in page


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


def slow_lost_and_pending_callbacks(t0: dt.datetime) -> list[dict]:
    """An L3 backend's day from `t0` (08:00): a build that passes; a test job that passes after 7 h, past the 6 h
    a job may take; one that started and never completed (the relay times it out); and, at 20:00, one queued
    30 minutes that started 3.5 h before the day's end and is still running: pending."""
    late = t0.replace(hour=20)
    return (job_callbacks(L3, t0, run_id=1, job_name="build", queue_s=60, exec_s=600, level="L3",
                          client_payload=PR_DISPATCH)
            + job_callbacks(L3, t0, run_id=1, job_name="slow", queue_s=120, exec_s=7 * 3600, level="L3",
                            client_payload=PR_DISPATCH)
            + job_callbacks(L3, t0, run_id=1, job_name="lost", queue_s=300, completes=False, level="L3",
                            client_payload=PR_DISPATCH)
            + job_callbacks(L3, late, run_id=4, job_name="build", queue_s=1800, completes=False, level="L3",
                            client_payload=PUSH_DISPATCH))


def published_levels_and_backend_page(tmp_path) -> tuple[dict, str, str]:
    """The levels published for hud_lake's day from those callbacks (as backend_levels publishes them), then
    the site for that day: (backend-levels.json, backends.html, the backend's page)."""
    from hud_lake import DAY as HUD_DAY
    from hud_lake import T0 as HUD_T0
    from test_hud_site import build, history

    from torchci_assets.config import load_config
    from torchci_assets.derived.backends.levels import (allowlist_proposal, assess_backends, health_windows,
                                                       levels_json, publish_levels)
    from torchci_assets.derived.site.site import publish_site

    write_lines(tmp_path / "archive" / "ci-results" / f"day={HUD_DAY}" / "relay-1.jsonl",
                slow_lost_and_pending_callbacks(HUD_T0))
    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    history().write(lake)
    ingest_ci_results_day(Store(str(tmp_path / "archive")), lake, HUD_DAY)
    build(lake)
    config = load_config()
    health = compute_health(lake, HUD_DAY, health_windows(config), zombie_timeout_s=6 * 3600).to_pylist()
    assessments = assess_backends(health, config)
    publish_levels(out, HUD_DAY, levels_json(assessments, HUD_DAY, config),
                   allowlist_proposal(assessments, HUD_DAY, config))
    publish_site(lake, out, HUD_DAY, "pytorch/pytorch")
    return (json.loads(out.read_bytes("backend-levels.json")), out.read_bytes("hud/backends.html").decode(),
            out.read_bytes(f"hud/{backend_pages.backend_path(L3)}").decode())


def window_cells(page: str, days: int) -> dict[str, str]:
    """The backend page's row for a window, by column header (tags stripped)."""
    windows = page.split('id="windows"')[1].split("</table>")[0]
    headers = [re.sub(r"<[^>]+>", "", h) for h in re.findall(r"<th>(.*?)</th>", windows)]
    rows = [re.findall(r"<td>(.*?)</td>", r) for r in windows.split("<tr>")[2:]]
    row = next(r for r in rows if r[0] == f"{days} days")
    return dict(zip(headers, (re.sub(r"<[^>]+>", "", c) for c in row)))


def test_a_backends_page_shows_the_figures_its_level_is_judged_on(tmp_path):
    """One job completed after 7 h, one lost, one pending: the page's completed jobs, success rate and queue
    times are the levels' own (were 3 completed jobs, 66.7% and queue p50 3m, p90 22m where backend-levels.json
    and the card said 2, 33.3%, 2m and 4m: the page counted the lost job as completed, the 7-hour job as a success
    and the pending job's queue time)."""
    levels, card_page, page = published_levels_and_backend_page(tmp_path)
    backend = next(b for b in levels["backends"] if b["repo"].lower() == L3)
    criteria = {(c["level"], c["name"]): c for c in backend["criteria"]}
    week = backend["health"]["7"]
    # the levels' judgement, as docs/relay.md states it
    assert (week["jobs"], week["completed_jobs"], week["lost"], week["pending"], week["successes"]) == (3, 2, 1, 1, 1)
    cells = window_cells(page, 7)
    assert cells["completed jobs"] == str(criteria["L2", "min_completed_jobs"]["value"]) == "2"
    assert cells["success rate"] == f'{100 * criteria["L2", "min_success_rate"]["value"]:.1f}%' == "33.3%"
    assert cells["queue p90"] == duration(criteria["L3", "max_queue_time_p90_s"]["value"]) == "4m"
    assert cells["queue p50"] == duration(week["queue_p50_s"]) == "2m"
    assert (cells["judged jobs"], cells["lost: timed out by the relay"], cells["pending"]) == ("3", "1", "1")
    # and backends.html's card shows those same criteria values
    card = card_page.split(f'data-repo="{backend["repo"]}"')[1].split('<div class="card"')[0]
    assert ">2<" in card and ">0.3333<" in card
    # the pull request's head among the recent heads: the 7-hour job and the lost one failed (was 1: the lost one)
    head = next(r for r in page.split('id="heads"')[1].split("<tr>") if HEAD[:10] in r)
    assert re.findall(r"<td>(\d+)</td>", head) == ["3", "2", "0"]  # jobs, failed, running
