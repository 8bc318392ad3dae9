"""The HUD's downstream backend views, from `ci_result` as the ingest writes it from callbacks
report_callback.py builds for pull_request and push dispatches."""

import datetime as dt
import json
from pathlib import Path

from conftest import write_lines
from resources.lake import Lake
from resources.storage import Store
from tests.relay_callbacks import job_callbacks
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


def views(tmp_path):
    lines = (job_callbacks(L3, T0, run_id=1, job_name="build", queue_s=120, exec_s=600, level="L3",
                           client_payload=PR_DISPATCH)
             + job_callbacks(L3, T0, run_id=1, job_name="test", queue_s=60, exec_s=900, conclusion="failure",
                             level="L3", client_payload=PR_DISPATCH)
             + job_callbacks(L2, T0, run_id=2, job_name="build", queue_s=300, completes=False,
                             client_payload=PR_DISPATCH)
             + job_callbacks(L3, T0, run_id=3, job_name="build", queue_s=30, exec_s=60, level="L3",
                             client_payload=PUSH_DISPATCH))
    write_lines(tmp_path / "archive" / "ci-results" / f"day={DAY}" / "relay-1.jsonl", lines)
    lake = Lake.at(str(tmp_path / "lake"))
    ingest_ci_results_day(Store(str(tmp_path / "archive")), lake, DAY)
    return backend_pages.load(lake, DAY)


def test_the_pr_page_section_lists_each_backends_jobs_on_the_head_by_level(tmp_path):
    v = views(tmp_path)
    jobs = backend_pages.jobs_by_head(v)[HEAD]
    assert sorted((j["repo"], j["job_name"], j["status"], j["conclusion"]) for j in jobs) == [
        (L3, "build", "completed", "success"), (L3, "test", "completed", "failure"), (L2, "build", "in_progress", None)]
    html = backend_pages.pr_section(jobs)
    checked, reported = html.split('id="backends-checked"')[1].split('id="backends-reported"')
    assert checked.count("<tr>") == 3 and L2 not in checked  # header and two L3 jobs
    assert "failure" in checked and "10m" in checked and "15m" in checked  # conclusion, execution times
    assert 'href="../backends/acme-ai/torch-npu.html"' in checked
    assert f'href="https://github.com/{L3}/actions/runs/1"' in checked
    assert reported.count("<tr>") == 2 and "5m" in reported  # the L2 job, queued 5 minutes


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
