"""The commits of a push, as the ingest keeps them: PyTorch's merge bot lands a stack of pull
requests (ghstack) in one push, whose `after` is only the last of them. Payloads are GitHub's own
examples (tests/data/octokit), a stack laid over the real push to `master`."""

import copy

import orjson
import pyarrow.parquet as pq
from hud_lake import DAY, REPO, sha

from conftest import envelope
from resources.lake import Lake
from resources.storage import Store
from torchci_assets.ingest.payloads import MAX_PUSH_COMMITS
from torchci_assets.ingest.webhooks import ingest_webhook_day


def real_push(octokit) -> dict:
    """GitHub's example push of one commit to a branch (`refs/heads/master`)."""
    return next(p for p in octokit["api.github.com"]["push"] if p["ref"] == "refs/heads/master")


def stack_push(octokit, before: int, commits: list[int], ref: str = "refs/heads/main") -> dict:
    """The real push with `commits` (oldest first) as its commits, the last its head, as the merge
    bot lands a stack: each commit is the example's commit with its id and message laid over."""
    p = copy.deepcopy(real_push(octokit))
    listed = []
    for i in commits:
        c = copy.deepcopy(p["commits"][0])
        c.update(id=sha(i), message=f"change {i}\n\nPull Request resolved: https://github.com/{REPO}/pull/{100 + i}")
        listed.append(c)
    p.update(ref=ref, before=sha(before), after=sha(commits[-1]), created=False, commits=listed,
             head_commit=listed[-1])
    p["repository"]["full_name"] = REPO
    return p


def line(event: str, delivery: str, payload: dict, minute: int) -> bytes:
    return orjson.dumps(envelope(event, delivery, payload, f"{DAY}T08:{minute:02d}:00.000Z")) + b"\n"


def push_rows(lake: Lake) -> dict[str, dict]:
    return {r["delivery_id"]: r for f in lake.files("push", [DAY])
            for r in pq.read_table(f, filesystem=lake.store.fs).to_pylist()}


def test_a_push_keeps_every_commit_it_lists_in_order(tmp_path, octokit):
    archive, lake = Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "lake"))
    tag_deleted = next(p for p in octokit["api.github.com"]["push"] if p["deleted"])
    trimmed = {k: v for k, v in real_push(octokit).items() if k != "commits"}  # a payload without the list
    archive.write_bytes(f"webhooks/day={DAY}/a.jsonl", b"".join([
        line("push", "stack", stack_push(octokit, 2, [3, 4, 5]), 30),
        line("push", "real", real_push(octokit), 31),
        line("push", "tag", tag_deleted, 32),
        line("push", "trimmed", trimmed, 33)]))
    report = ingest_webhook_day(archive, lake, DAY, workers=1)
    assert report.rejects == []
    rows = push_rows(lake)
    assert (rows["stack"]["after"], rows["stack"]["commit_count"]) == (sha(5), 3)
    assert rows["stack"]["commits"] == [sha(3), sha(4), sha(5)]
    assert rows["real"]["commits"] == [c["id"] for c in real_push(octokit)["commits"]] == [real_push(octokit)["after"]]
    assert (rows["tag"]["commits"], rows["tag"]["commit_count"]) == ([], 0)
    assert (rows["trimmed"]["commits"], rows["trimmed"]["commit_count"]) == (None, None)


def test_a_push_whose_commits_are_not_githubs_keeps_its_row_and_head_without_the_list(tmp_path, octokit):
    p = stack_push(octokit, 2, [3, 4, 5])
    no_id = copy.deepcopy(p)
    del no_id["commits"][1]["id"]
    bad = {"no-id": no_id, "not-objects": dict(p, commits=[sha(3), sha(4)]), "not-a-list": dict(p, commits="3,4,5"),
           "too-many": stack_push(octokit, 2, list(range(3, 3 + MAX_PUSH_COMMITS + 1)))}
    most = stack_push(octokit, 2, list(range(3, 3 + MAX_PUSH_COMMITS)))
    archive, lake = Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "lake"))
    archive.write_bytes(f"webhooks/day={DAY}/a.jsonl", b"".join(
        [line("push", name, payload, 30) for name, payload in bad.items()] + [line("push", "most", most, 31)]))
    report = ingest_webhook_day(archive, lake, DAY, workers=1)
    rows = push_rows(lake)
    assert report.rejects == [] and rows.keys() == {*bad, "most"}
    assert {name: (rows[name]["after"], rows[name]["commits"]) for name in bad} == \
        {name: (payload["after"], None) for name, payload in bad.items()}
    assert rows["most"]["commits"] == [sha(i) for i in range(3, 3 + MAX_PUSH_COMMITS)]


def test_a_day_of_stacks_built_by_increments_equals_the_day_built_at_once(tmp_path, octokit):
    files = {"a.jsonl": line("push", "s1", stack_push(octokit, 2, [3, 4, 5]), 30),
             "b.jsonl": line("push", "s2", stack_push(octokit, 5, [6, 7]), 40) + line("push", "one", real_push(octokit), 41)}
    at_once, stepped = Store(str(tmp_path / "a1")), Store(str(tmp_path / "a2"))
    lake_once, lake_stepped = Lake.at(str(tmp_path / "l1")), Lake.at(str(tmp_path / "l2"))
    for name, data in files.items():
        at_once.write_bytes(f"webhooks/day={DAY}/{name}", data)
    ingest_webhook_day(at_once, lake_once, DAY, workers=1)
    for name, data in files.items():
        stepped.write_bytes(f"webhooks/day={DAY}/{name}", data)
        report = ingest_webhook_day(stepped, lake_stepped, DAY, workers=1, incremental=True)
    assert report.mode == "increment"
    once, steps = push_rows(lake_once), push_rows(lake_stepped)
    assert steps == once and steps["s2"]["commits"] == [sha(6), sha(7)]
