"""upstream_commit_sensor over a real archive in tmp_path, polling and the job against 127.0.0.1."""

import gzip
import json
import re
from collections import Counter
from pathlib import Path

import dagster as dg
import pytest
from werkzeug import Response

from jobs.relay import POLL_INTERVAL_S, dispatch_job, upstream_commit_sensor
from resources.configured import ArchiveResource, LakeResource
from resources.github import GitHubResource
from resources.storage import Store
from torchci_assets.config import load_config
from torchci_assets.relay.pushes import (
    LOOKBACK_DAYS,
    ZERO_SHA,
    RelayCursor,
    scan_archive,
)

TOKEN = "ghp_testtoken000000000000000000000000"
DAY = "2026-11-22"
CONFIG = """
upstream: {repo: pytorch/pytorch, branches: [main, release/2.10]}
poll_commits: %s
allowlist:
  L1: [org-one/torch-fpga]
  L3:
    npu:
      acme-ai/torch-npu: []
"""
# The bulk of a real push payload is the repository object.
REPOSITORY = {"id": 65600975, "name": "pytorch", "full_name": "pytorch/pytorch", "private": False,
              "owner": {"login": "pytorch", "id": 21003710, "type": "Organization"},
              "html_url": "https://github.com/pytorch/pytorch", "default_branch": "main",
              "description": "Tensors and Dynamic neural networks in Python with strong GPU acceleration",
              **{f"{k}_url": f"https://api.github.com/repos/pytorch/pytorch/{k}" for k in
                 ("issues", "pulls", "commits", "branches", "tags", "labels", "releases", "hooks")}}



@pytest.fixture(autouse=True)
def relay_config(tmp_path, monkeypatch):
    path = tmp_path / "relay.yaml"
    path.write_text(CONFIG % "false")
    monkeypatch.setenv("TORCHCI_CONFIG", str(path))
    return path


@pytest.fixture
def archive(tmp_path) -> Path:
    root = tmp_path / "archive"
    (root / "webhooks").mkdir(parents=True)
    return root


def sha(n: int) -> str:
    return f"{n:040x}"


def push(after: str, before: str = sha(0), ref: str = "refs/heads/main", repo: str = "pytorch/pytorch",
         forced: bool = False, created: bool = False, deleted: bool = False, n_commits: int = 1) -> dict:
    commits = [{"id": sha(int(after, 16) * 100 + i)} for i in range(n_commits - 1)]
    head = None if deleted else {"id": after, "timestamp": "2026-11-22T03:00:00+00:00",
                                 "message": "Land #1234", "author": {"name": "a", "username": "a"}}
    if head:
        commits.append(head)
    return {"ref": ref, "before": before, "after": after, "created": created, "deleted": deleted,
            "forced": forced, "base_ref": None, "compare": "https://github.com/pytorch/pytorch/compare/x...y",
            "commits": commits, "head_commit": head, "pusher": {"name": "pytorchmergebot"},
            "repository": {**REPOSITORY, "full_name": repo}}


def line(delivery: str, payload: dict, event: str = "push", at: str = "2026-11-22T03:00:00.000Z") -> str:
    return json.dumps({"event": event, "delivery_id": delivery, "received_at": at, "payload": payload})


def write(archive: Path, name: str, lines: list[str], day: str = DAY, append: bool = False) -> None:
    folder = archive / "webhooks" / f"day={day}"
    folder.mkdir(parents=True, exist_ok=True)
    data = "".join(f"{x}\n" for x in lines).encode()
    if name.endswith(".gz"):
        data = gzip.compress(data)
    with open(folder / name, "ab" if append else "wb") as f:
        f.write(data)


def tick(instance, archive: Path, cursor: str | None, github: GitHubResource | None = None):
    resources = {"archive": ArchiveResource(uri=str(archive)), "github": github or GitHubResource()}
    with dg.build_sensor_context(instance=instance, cursor=cursor, resources=resources) as ctx:
        return upstream_commit_sensor(ctx)


def keys(result) -> list[str]:
    return [r.run_key for r in result.run_requests or []]


def op_config(request) -> dict:
    return request.run_config["ops"]["dispatch_to_downstreams"]["config"]


def test_sensor_is_on_by_default_and_ticks_often_enough_for_a_60s_demo():
    assert upstream_commit_sensor.default_status == dg.DefaultSensorStatus.RUNNING
    assert 15 <= upstream_commit_sensor.minimum_interval_seconds <= 30
    assert upstream_commit_sensor.job_name == dispatch_job.name


def test_first_tick_takes_the_archive_as_read_and_relays_what_lands_after(instance, archive):
    write(archive, "old.jsonl", [line("d-old", push(sha(1)))])
    first = tick(instance, archive, None)
    assert keys(first) == []
    size = (archive / f"webhooks/day={DAY}/old.jsonl").stat().st_size
    assert RelayCursor.from_json(first.cursor).files == {DAY: {"old.jsonl": size}}

    write(archive, "new.jsonl.gz", [line("d-new", push(sha(2), before=sha(1)))])
    second = tick(instance, archive, first.cursor)
    assert keys(second) == [f"pytorch/pytorch@{sha(2)}"]
    cfg = op_config(second.run_requests[0])
    assert (cfg["sha"], cfg["before"], cfg["delivery_id"], cfg["source"]) == (sha(2), sha(1), "d-new", "webhook")
    payload = json.loads(cfg["payload_json"])
    assert payload == push(sha(2), before=sha(1))  # the webhook payload, unchanged
    assert keys(tick(instance, archive, second.cursor)) == []


def test_a_push_torchci_backfill_wrote_is_history_and_not_dispatched(instance, archive):
    """`torchci backfill` writes main's past commits as pushes into the archive (`source: rest`),
    today's folder included: they are history, and the sensor dispatches none of them."""
    from torchci_assets.backfill.shapes import one_commit_push, push_delivery

    first = tick(instance, archive, None)
    commit = {"sha": sha(3), "parents": [{"sha": sha(2)}], "committer": {"login": "pytorchmergebot"},
              "commit": {"message": "Land #1234", "author": {"name": "a", "email": "a@x", "date": "2026-11-22T02:00:00Z"},
                         "committer": {"name": "m", "email": "m@x", "date": "2026-11-22T02:00:00Z"}}}
    _, rest = push_delivery(one_commit_push(commit), "refs/heads/main", {**REPOSITORY, "full_name": "pytorch/pytorch"})
    write(archive, "rest.jsonl", [rest.decode(), line("d-live", push(sha(4), before=sha(3)))])
    assert keys(tick(instance, archive, first.cursor)) == [f"pytorch/pytorch@{sha(4)}"]


def test_a_file_present_at_the_start_that_grows_relays_only_its_new_pushes(instance, archive):
    write(archive, "live.jsonl", [line("d-1", push(sha(1)))])
    first = tick(instance, archive, None)
    assert keys(first) == []
    write(archive, "live.jsonl", [line("d-1", push(sha(1))), line("d-2", push(sha(2), before=sha(1)))])
    assert keys(tick(instance, archive, first.cursor)) == [f"pytorch/pytorch@{sha(2)}"]


def test_a_burst_of_50_pushes_gives_50_requests_across_ticks_restarts_and_overlapping_files(instance, archive):
    cursor = tick(instance, archive, None).cursor
    pushes = [line(f"d-{i}", push(sha(100 + i), before=sha(99 + i)), at=f"2026-11-22T03:{i:02d}:00.000Z")
              for i in range(50)]
    noise = [line(f"job-{i}", {"action": "queued", "workflow_job": {"id": i}}, event="workflow_job")
             for i in range(30)]
    write(archive, "03-00.jsonl", pushes[:20] + noise[:10])
    # A redelivery of five pushes, in another (gzipped) file.
    write(archive, "03-20.jsonl.gz", noise[10:] + pushes[20:40] + pushes[5:10])
    t1 = tick(instance, archive, cursor)
    # An overlapping upload carrying the first file's deliveries again, and the last pushes.
    write(archive, "03-00-retry.jsonl", pushes[:20])
    write(archive, "03-40.jsonl", pushes[40:])
    t2 = tick(instance, archive, t1.cursor)
    # The daemon died before saving t2's cursor: the tick is evaluated again from t1's.
    t2_again = tick(instance, archive, t1.cursor)
    t3 = tick(instance, archive, t2.cursor)

    assert len(keys(t1)) == 40 and len(keys(t2)) == 10 and keys(t3) == []
    requested = keys(t1) + keys(t2)
    assert Counter(requested) == Counter({f"pytorch/pytorch@{sha(100 + i)}": 1 for i in range(50)})
    # A re-evaluated tick asks for the same run keys, which Dagster launches only once.
    assert keys(t2_again) == keys(t2)
    # Requests follow the pushes' order of arrival, and each keeps its first delivery id.
    assert [op_config(r)["delivery_id"] for r in t1.run_requests] == [f"d-{i}" for i in range(40)]


def test_deletions_are_skipped_force_pushes_dispatched_and_other_refs_ignored(archive):
    config = load_config()
    store = Store(str(archive))
    _, cursor = scan_archive(store, None, config)
    write(archive, "mixed.jsonl", [
        line("del", push(ZERO_SHA, before=sha(7), deleted=True)),
        line("force", push(sha(8), before=sha(7), forced=True)),
        line("feature", push(sha(9), ref="refs/heads/feature")),
        line("tag", push(sha(10), ref="refs/tags/v2.10.0", created=True)),
        line("fork", push(sha(11), repo="someone/pytorch")),
        line("stack", push(sha(12), before=sha(8), n_commits=5)),
        line("release", push(sha(13), ref="refs/heads/release/2.10", created=True, before=ZERO_SHA)),
        "{not json",
    ])
    report, _ = scan_archive(store, cursor, config)
    assert sorted((c.sha, c.forced, c.ref) for c in report.commits) == [
        (sha(8), True, "refs/heads/main"), (sha(12), False, "refs/heads/main"),
        (sha(13), False, "refs/heads/release/2.10")]
    assert {c.sha: len(c.payload["commits"]) for c in report.commits}[sha(12)] == 5
    assert len(report.skipped) == 1 and "deleted" in report.skipped[0]
    assert report.push_events == 7 and len(report.rejects) == 1


def test_the_cursor_follows_only_recent_days_and_rereads_a_file_that_grew(instance, archive):
    write(archive, "a.jsonl", [line("d-1", push(sha(1)))], day="2026-11-20")
    cursor = tick(instance, archive, None).cursor
    write(archive, "a.jsonl", [line("d-2", push(sha(2)))], day="2026-11-21")
    write(archive, "a.jsonl", [line("d-3", push(sha(3)))], day=DAY)
    t1 = tick(instance, archive, cursor)
    assert sorted(keys(t1)) == [f"pytorch/pytorch@{sha(2)}", f"pytorch/pytorch@{sha(3)}"]
    assert sorted(RelayCursor.from_json(t1.cursor).files) == ["2026-11-21", DAY]
    assert LOOKBACK_DAYS == 2

    write(archive, "a.jsonl", [line("d-4", push(sha(4), before=sha(3)))], day=DAY, append=True)
    t2 = tick(instance, archive, t1.cursor)
    assert keys(t2) == [f"pytorch/pytorch@{sha(4)}"]


def test_files_beyond_the_tick_budget_are_read_on_the_next_tick(archive):
    config = load_config()
    store = Store(str(archive))
    _, cursor = scan_archive(store, None, config)
    write(archive, "1.jsonl", [line("d-1", push(sha(1)))])
    write(archive, "2.jsonl", [line("d-2", push(sha(2)))])
    times = iter([0.0, 0.0, 30.0])  # start, before file 1, before file 2
    report, cursor = scan_archive(store, cursor, config, budget_s=20.0, clock=lambda: next(times))
    assert [c.sha for c in report.commits] == [sha(1)] and report.files_deferred == 1
    report, _ = scan_archive(store, cursor, config)
    assert [c.sha for c in report.commits] == [sha(2)]


class FakeCommitsApi:
    """GET /repos/pytorch/pytorch/commits: answers with the current head, logs each request."""

    def __init__(self, httpserver, head: str):
        self.head = head
        self.status = 200
        self.requests = []
        httpserver.expect_request("/repos/pytorch/pytorch/commits", method="GET").respond_with_handler(self)

    def __call__(self, request):
        self.requests.append(dict(request.args))
        if self.status != 200:
            return Response(json.dumps({"message": "boom"}), status=self.status, content_type="application/json")
        body = [{"sha": self.head, "html_url": f"https://github.com/pytorch/pytorch/commit/{self.head}",
                 "commit": {"message": "Land it", "author": {"name": "a", "date": "2026-11-22T03:00:00Z"},
                            "committer": {"name": "b", "date": "2026-11-22T03:00:00Z"}}}]
        return Response(json.dumps(body), status=200, content_type="application/json")


def rewind_poll(cursor: str) -> str:
    c = RelayCursor.from_json(cursor)
    c.polled_at -= POLL_INTERVAL_S + 1
    return c.to_json()


def test_polling_finds_a_head_whose_webhook_was_lost_without_double_dispatching(
        httpserver, instance, archive, relay_config):
    relay_config.write_text(CONFIG % "true")
    api = FakeCommitsApi(httpserver, sha(1))
    gh = GitHubResource(api_url=httpserver.url_for(""), token=TOKEN, backoff_base_s=0.01)
    t1 = tick(instance, archive, None, gh)
    assert keys(t1) == [] and RelayCursor.from_json(t1.cursor).heads["refs/heads/main"] == sha(1)
    assert api.requests[0] == {"sha": "main", "per_page": "1"}
    polls = len(api.requests)
    # Within the poll interval the API is left alone.
    assert keys(tick(instance, archive, t1.cursor, gh)) == [] and len(api.requests) == polls

    api.head = sha(2)  # its push webhook never arrived
    t2 = tick(instance, archive, rewind_poll(t1.cursor), gh)
    assert keys(t2) == [f"pytorch/pytorch@{sha(2)}"]
    cfg = op_config(t2.run_requests[0])
    assert (cfg["source"], cfg["before"], cfg["delivery_id"]) == ("poll", sha(1), sha(2))

    # The next head arrives by webhook and by polling in the same tick: one request.
    api.head = sha(3)
    write(archive, "w.jsonl", [line("d-3", push(sha(3), before=sha(2)))])
    t3 = tick(instance, archive, rewind_poll(t2.cursor), gh)
    assert keys(t3) == [f"pytorch/pytorch@{sha(3)}"] and op_config(t3.run_requests[0])["source"] == "webhook"
    # ...and in later ticks, polling finds nothing new.
    assert keys(tick(instance, archive, rewind_poll(t3.cursor), gh)) == []

    # An API outage does not stop webhook pushes from being relayed.
    api.status = 500
    write(archive, "w2.jsonl", [line("d-4", push(sha(4), before=sha(3)))])
    assert keys(tick(instance, archive, rewind_poll(t3.cursor), gh)) == [f"pytorch/pytorch@{sha(4)}"]


def test_a_branch_whose_poll_may_not_fit_in_the_tick_is_left_to_the_next(httpserver, relay_config):
    """Each branch's poll may take up to 40 s against an API that hangs: a tick 20 s in (a slow
    archive scan, a slow first branch) polls no further, and the next tick polls at once."""
    from jobs import relay as relay_job
    from torchci_assets.config import load_config

    relay_config.write_text(CONFIG % "true")
    api = FakeCommitsApi(httpserver, sha(1))
    gh = GitHubResource(api_url=httpserver.url_for(""), token=TOKEN)
    cursor, times = RelayCursor(), iter([0.0, 20.0])  # before main, before release/2.10
    with dg.build_sensor_context() as ctx:
        relay_job._poll(ctx, gh, load_config(), cursor, set(), 1000.0, 0.0, clock=lambda: next(times))
    assert [r["sha"] for r in api.requests] == ["main"] and cursor.polled_at is None
    assert list(cursor.heads) == ["refs/heads/main"]
    with dg.build_sensor_context() as ctx:
        relay_job._poll(ctx, gh, load_config(), cursor, set(), 1001.0, 0.0, clock=lambda: 0.0)
    assert [r["sha"] for r in api.requests] == ["main", "main", "release/2.10"] and cursor.polled_at == 1001.0


def test_without_credentials_the_sensor_never_polls(httpserver, instance, archive, relay_config):
    relay_config.write_text(CONFIG % "true")
    api = FakeCommitsApi(httpserver, sha(1))
    result = tick(instance, archive, None, GitHubResource(api_url=httpserver.url_for("")))
    assert keys(result) == [] and api.requests == []
    assert RelayCursor.from_json(result.cursor).polled_at is None


def test_from_an_archive_file_to_each_downstream_exactly_once(httpserver, instance, archive, tmp_path):
    seen = []

    def handler(request):
        seen.append((request.path.split("/")[2] + "/" + request.path.split("/")[3],
                     json.loads(request.data)["client_payload"]["sha"]))
        return Response(status=204)

    httpserver.expect_request(re.compile(r"^/repos/[^/]+/[^/]+/dispatches$"), method="POST").respond_with_handler(handler)
    cursor = tick(instance, archive, None).cursor
    write(archive, "burst.jsonl.gz", [line(f"d-{i}", push(sha(50 + i))) for i in range(3)]
          + [line("d-0", push(sha(50)))])
    result = tick(instance, archive, cursor)
    resources = {"github": GitHubResource(api_url=httpserver.url_for(""), token=TOKEN, write_interval_s=0),
                 "lake": LakeResource(uri=str(tmp_path / "lake"))}
    for request in result.run_requests:
        for _ in range(2):  # a duplicate launch of the same run key changes nothing
            assert dispatch_job.execute_in_process(run_config=request.run_config, instance=instance,
                                                   resources=resources, tags=request.tags).success
    assert Counter(seen) == Counter({(repo, sha(50 + i)): 1 for i in range(3)
                                     for repo in ("org-one/torch-fpga", "acme-ai/torch-npu")})
