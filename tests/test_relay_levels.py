"""Backend health counts pull-request callbacks and push callbacks alike: callbacks built by the
vendored report_callback.py for both dispatch kinds, through the ci_result ingest. An L1 backend's
callbacks are answered `ignored` and not kept by the receiver, so its level says L2 is a maintainer's
decision."""

import datetime as dt
import json
from pathlib import Path

import yaml
from conftest import write_lines
from tests.receiving import CONFIG_YAML, L1_REPO, archived, served
from tests.test_receiver_callbacks import issuer, keys, record_dispatch, report  # noqa: F401 (fixtures)

from torchci_assets.config import parse_config
from resources.lake import Lake
from resources.storage import Store
from tests.relay_callbacks import job_callbacks
from torchci_assets.derived.backends.levels import L1_REASON, assess_backends, compute_health
from torchci_assets.ingest.ci_results import ingest_ci_results_day

DAY = "2026-11-20"
T0 = dt.datetime(2026, 11, 20, 6, 0, tzinfo=dt.timezone.utc)
REPO = "acme-ai/torch-npu"
PAYLOAD = next(p for p in json.loads((Path(__file__).parent / "data" / "octokit" / "examples.json").read_text())
               ["api.github.com"]["pull_request"] if p["action"] == "synchronize")


def test_pull_request_and_push_callbacks_both_count_towards_the_level(tmp_path):
    lines = []
    for i in range(6):
        push = {"event_type": "push", "delivery_id": f"push-{i}", "payload": {"after": f"{i:040x}"}}
        pr = {"event_type": "pull_request", "delivery_id": f"pr-{i}", "payload": PAYLOAD}
        start = T0 + dt.timedelta(minutes=10 * i)
        lines += job_callbacks(REPO, start, run_id=100 + i, job_name="build", client_payload=push)
        lines += job_callbacks(REPO, start, run_id=200 + i, job_name="build", client_payload=pr,
                               conclusion="failure" if i == 0 else "success")
    write_lines(tmp_path / "archive" / "ci-results" / f"day={DAY}" / "relay-1.jsonl", lines)
    lake = Lake.at(str(tmp_path / "lake"))
    ingest_ci_results_day(Store(str(tmp_path / "archive")), lake, DAY)
    (health,) = [h for h in compute_health(lake, DAY, (7,)).to_pylist() if h["repo"] == REPO]
    assert (health["completed_jobs"], health["successes"]) == (12, 11)
    assert health["commits"] == 12  # each delivery, push or pull request, is one relayed event


def test_an_l1_backend_cannot_report_so_its_level_says_l2_is_a_maintainers_decision(tmp_path, issuer, keys):
    record_dispatch(tmp_path, repo=L1_REPO)
    with served(tmp_path, keys=keys) as srv:
        answers = {srv.post_callback(report("in_progress", repo=L1_REPO, job_name=f"j{i}"),
                                     issuer.token(L1_REPO)).text for i in range(25)}
    assert answers == {'{"ok":true,"status":"ignored"}'}  # results are kept from L2 up, as upstream keeps them
    assert archived(srv.archive, "ci-results") == []
    cfg = parse_config(yaml.safe_load(CONFIG_YAML), "receiving.CONFIG_YAML")
    [a] = [a for a in assess_backends([], cfg) if a.repo == L1_REPO]
    assert (a.current_level, a.recommended_level, a.change, a.reasons) == ("L1", "L1", "keep", [L1_REASON])
