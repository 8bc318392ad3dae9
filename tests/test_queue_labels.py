"""A job's machine, as its runner labels name it, is one definition for the guardians' queue alerts and
the HUD's metrics: the first label that is not one of GitHub's default self-hosted labels."""

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from hud_lake import DAY, REPO, History, sha

from resources.lake import Lake, connect
from resources.storage import Store
from torchci_assets.derived.guardians.alert_conditions import current_alerts, rule_for
from torchci_assets.derived.hud.inputs import define_runner_machine
from torchci_assets.derived.hud.metrics import build_ci_metrics
from torchci_assets.config import parse_config
from torchci_assets.guardian_config import TEAM_QUEUE_RULES
from torchci_assets.simulate.catalog import CATALOG

NOW = dt.datetime(2026, 11, 30, 21, tzinfo=dt.timezone.utc)
TEAM = "acme/widgets"
OCTOKIT = Path(__file__).parent / "data/octokit/examples.json"


def queued(labels: list[str], jobs: int, first_id: int) -> list[dict]:
    return [{"id": first_id + i, "run_attempt": 1, "status": "queued", "labels": labels,
             "created_at": NOW - dt.timedelta(hours=3)} for i in range(jobs)]


def queue_alert(tmp_path, repo: str, jobs: list[dict]) -> tuple[str, ...]:
    lake = Lake.at(str(tmp_path / "lake"))
    lake.write("workflow_job", NOW.strftime("%Y-%m-%d"), pa.Table.from_pylist(jobs))
    cfg = parse_config({"upstream": {"repo": repo}}).guardians.alerts
    [queue] = [a for a in current_alerts(lake, Store(str(tmp_path / "archive")), [], repo, cfg, NOW)
               if a.kind == "queue"]
    return queue.lines


def metrics_labels(tmp_path, label_lists: list[list[str]]) -> dict[str, int]:
    """The `runner` rows' labels of one day whose completed jobs asked for `label_lists`, with their jobs."""
    h = History()
    for i, labels in enumerate(label_lists):
        h.job(sha(1), f"job {i}", "success", labels=tuple(labels), run_id=i + 1)
    lake = Lake.at(str(tmp_path / "metrics"))
    h.write(lake)
    build_ci_metrics(lake, DAY, REPO, ("refs/heads/main",))
    rows = pa.Table.from_batches(
        [b for f in lake.files("ci_metrics_daily", [DAY]) for b in pq.read_table(f).to_batches()]).to_pylist()
    return {r["label"]: r["jobs"] for r in rows if r["dimension"] == "runner"}


def test_a_busy_self_hosted_pool_is_alerted_by_its_own_label(tmp_path):
    """`runs-on: [self-hosted, linux, gpu-a100]`: GitHub lists the labels as the workflow does, so every
    self-hosted pool was one machine named `self-hosted`, a quiet CPU pool's jobs mixed into it."""
    jobs = queued(["self-hosted", "linux", "gpu-a100"], 60, 1) + queued(["self-hosted", "Linux", "cpu-pool"], 10, 100)
    assert queue_alert(tmp_path, TEAM, jobs) == ("gpu-a100",)


def test_the_queue_and_the_metrics_name_the_machine_alike(tmp_path):
    """GitHub's default labels in any case (it matches labels so) and in any place are passed over; a
    job asking for default labels alone is named by them, as its workflow lists them."""
    lists = [["self-hosted", "linux", "gpu-a100"], ["SELF-HOSTED", "macOS", "ARM64", "m2-pro"],
             ["self-hosted", "Windows", "X64", "win-gpu"], ["k8s", "self-hosted", "ARM"],
             ["self-hosted", "linux", "x64"]]
    expected = {"gpu-a100": 1, "m2-pro": 1, "win-gpu": 1, "k8s": 1, "self-hosted, linux, x64": 1}
    assert metrics_labels(tmp_path, lists) == expected
    jobs = [j for i, labels in enumerate(lists) for j in queued(labels, 51, 1000 * (i + 1))]
    assert queue_alert(tmp_path, TEAM, jobs) == tuple(sorted(expected))


def test_github_s_own_payloads_name_their_machines():
    """The workflow_job examples of GitHub's API description (octokit): `[self-hosted, k8s]` runs on
    `k8s`, a hosted job on its image, a custom runner's first custom label."""
    examples = json.loads(OCTOKIT.read_text())["api.github.com"]["workflow_job"]
    label_lists = {tuple(e["workflow_job"]["labels"]) for e in examples}
    assert label_lists == {("gpu", "db-app", "dc-03"), ("ubuntu-latest",), ("self-hosted", "k8s")}
    assert {machines(list(ls)) for ls in label_lists} == {"gpu", "ubuntu-latest", "k8s"}


def machines(labels: list[str]) -> str:
    """The machine the macro the queue alerts and the metrics call names for `labels`."""
    con = connect()
    define_runner_machine(con)
    try:
        return con.execute("SELECT runner_machine($labels)", {"labels": labels}).fetchone()[0]
    finally:
        con.close()


def pytorch_label_lists() -> list[list[str]]:
    """The runner labels PyTorch's workflows ask for (the simulator's catalog of them), one each."""
    runners = {r for cfg in CATALOG for r in (cfg.runner, cfg.build_runner)}
    return [[r] for r in sorted(runners | {"linux.2xlarge", "ubuntu-latest", "lf.linux.2xlarge"})]


def test_pytorch_s_machines_are_its_first_labels_as_before(tmp_path):
    """PyTorch's jobs ask for one label, the machine itself: both the queue alert's groups (its first
    label, as before) and the metrics' runner rows are unchanged, so each group meets the queue rule
    it met before."""
    lists = pytorch_label_lists()
    assert len(lists) > 10
    assert metrics_labels(tmp_path, lists) == {ls[0]: 1 for ls in lists}
    jobs = [j for i, labels in enumerate(lists) for j in queued(labels, 51, 1000 * (i + 1))]
    alerted = queue_alert(tmp_path, "pytorch/pytorch", jobs)
    assert alerted == tuple(sorted(ls[0] for ls in lists))  # 3 hours over every rule's wait


def test_a_team_s_queue_rules_still_leave_github_s_hosted_runners_out(tmp_path):
    """A hosted job's only label is its image: still its machine, still matched by `alert: false`."""
    hosted = ["ubuntu-latest", "ubuntu-24.04-arm", "macos-14", "windows-2022"]
    assert [machines([h]) for h in hosted] == hosted
    assert all(not rule_for(h, TEAM_QUEUE_RULES).alert for h in hosted)
    jobs = [j for i, h in enumerate(hosted) for j in queued([h], 60, 1000 * (i + 1))]
    assert queue_alert(tmp_path, TEAM, jobs + queued(["self-hosted", "linux", "x64", "gpu-a100"], 60, 9000)) \
        == ("gpu-a100",)
