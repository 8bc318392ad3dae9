"""Dr. CI's posting when the configured author, GitHub's lists or the body's size do not go as
planned: a pull request still carries one comment, never one more per run, and a body GitHub
would refuse is never sent.

Against the fake comments API on 127.0.0.1 (fake_github_pulls.py), which answers creates as
`torchci-bot[bot]` and refuses bodies over GitHub's limit as GitHub does.
"""

import datetime as dt
import json
import os
import random
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import envelope, pytorch_json, write_lines
from fake_github_issues import json_response
from fake_github_pulls import BOT, FakePullRequests
from resources.github import GitHubError
from resources.lake import Lake
from resources.storage import Store
from test_drci import BASE, HEAD, REPO, TODAY, TOKEN, body, gh
from torchci_assets.derived.drci import classify as c
from torchci_assets.derived.drci.comment import MARKER_END, MARKER_START, MAX_BODY_CHARS, Head, render
from torchci_assets.derived.drci.post import upsert
from torchci_assets.derived.drci.extracts import DELETED_RECORD, deleted_comment_ids
from torchci_assets.derived.drci.publish import publish
from torchci_assets.ingest.webhook_scan import WEBHOOK_EVENTS_SCHEMA
from torchci_assets.ingest.webhooks import ingest_webhook_day


def run(httpserver, tmp_path, prs=(5,), author=None, text=None, now=None):
    """One Dr. CI run posting on `prs` over the same lake (the ledger carries over between runs), at `now`."""
    lake, outputs = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    rows = [{"pr": n, "head_sha": HEAD, "pr_state": "open", "body": text or body()} for n in prs]
    return publish(lake, outputs, gh(httpserver), TODAY.isoformat(), REPO, rows, enabled=True, today=TODAY,
                   author=author, **({"clock": lambda: now} if now else {}))


# ---- the author the comments are taken as ours by ---------------------------------------------


def test_an_author_spelt_in_another_case_finds_its_comment_and_posts_once(httpserver, tmp_path):
    """GitHub logins ignore case: `Torchci-Bot[bot]` in the config is the `torchci-bot[bot]` GitHub answers with."""
    fake = FakePullRequests(httpserver, REPO)
    reports = [run(httpserver, tmp_path, author="Torchci-Bot[bot]") for _ in range(3)]
    assert fake.bodies(5) == [body()] and fake.count("POST") == 1
    assert reports[0].actions["created"] == 1 and all(not r.failed and not r.stopped for r in reports)
    # a changed body edits that comment in place
    assert upsert(gh(httpserver), REPO, 5, body("## :x: 2 New Failures"), author="TORCHCI-BOT[bot]").action == "edited"
    assert fake.bodies(5) == [body("## :x: 2 New Failures")] and fake.count("POST") == 1


def test_posting_as_another_account_than_the_author_stops_and_says_what_to_set(httpserver, tmp_path):
    """The token is not the app `drci.author` names: no run may leave a comment it will not find
    again (each would add one); the first create tells what to set and posting stops. Nor may a
    later run create (and delete) one again: each create notifies the pull request's subscribers,
    and a refresh runs every few minutes. The stop holds until the configuration changes."""
    fake = FakePullRequests(httpserver, REPO)
    for _ in range(3):
        report = run(httpserver, tmp_path, prs=(5, 6), author="my-app[bot]")
        assert fake.comments.get(5, []) == [] and 6 not in fake.comments  # PR 6 is not tried
        assert sorted(report.failed) == [5, 6] and all(v.startswith("stopped: ") for v in report.failed.values())
        assert "set drci.author to 'torchci-bot[bot]'" in report.stopped and "'my-app[bot]'" in report.stopped
    assert (fake.count("POST"), fake.count("DELETE")) == (1, 1)
    assert fake.count("GET") == 1  # the first run's list: the later runs ask GitHub nothing
    # the same author spelt in another case is the same account: still stopped
    assert run(httpserver, tmp_path, prs=(5, 6), author="My-App[bot]").stopped and fake.count("POST") == 1
    # set as told, the next run posts once on each
    report = run(httpserver, tmp_path, prs=(5, 6), author="torchci-bot[bot]")
    assert report.actions["created"] == 2 and not report.stopped and fake.bodies(5) == fake.bodies(6) == [body()]


class PostingAs(FakePullRequests):
    """The fake comments API answering creates as `login`: the account of the credentials in use."""

    login = "torchci-bot[bot]"

    def add_comment(self, number: int, body: str, user: dict | None = None) -> dict:
        return super().add_comment(number, body, user or {**BOT, "login": self.login})


def test_posting_with_the_authors_own_credentials_resumes_and_the_stop_does_not_lapse(httpserver, tmp_path):
    """The other way to fix it: keep `drci.author`, post with that account's credentials. The stop
    was found with the old credentials, so the new ones post; and a stop kept for weeks still holds."""
    fake = PostingAs(httpserver, REPO)
    lake, outputs = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    rows = [{"pr": 5, "head_sha": HEAD, "pr_state": "open", "body": body()}]

    logged: list[str] = []

    def on(day: dt.date, token: str = TOKEN):
        return publish(lake, outputs, gh(httpserver, token=token), day.isoformat(), REPO, rows, enabled=True,
                       today=day, author="my-app[bot]", log=logged.append)

    for days in (0, 1, 10, 20, 30, 40):  # past the ledger's 14-day lookback, several times
        assert "set drci.author to 'torchci-bot[bot]'" in on(TODAY + dt.timedelta(days=days)).stopped
        assert "STOPPED" in logged[-1] and "set drci.author to 'torchci-bot[bot]'" in logged[-1]  # the run's log
    assert (fake.count("POST"), fake.count("DELETE")) == (1, 1)
    fake.login = "my-app[bot]"
    report = on(TODAY + dt.timedelta(days=41), token="ghp_myapp000000000000000000000000000000")
    assert report.actions["created"] == 1 and not report.stopped and fake.bodies(5) == [body()]


def test_a_comment_created_but_not_listed_after_stops_the_run_and_is_adopted_by_the_next(httpserver, tmp_path):
    """GitHub answered 201 but the list right after does not show the comment yet: a failure of that
    pull request alone would let the run go on (and a later run create again); posting stops."""
    fake = FakePullRequests(httpserver, REPO)
    fake.fail("list", json_response(200, []), json_response(200, []))  # before the create, and just after it
    report = run(httpserver, tmp_path, prs=(5, 6))
    assert fake.bodies(5) == [body()] and 6 not in fake.comments and fake.count("POST") == 1
    assert "not listed after its create" in report.stopped and sorted(report.failed) == [5, 6]
    report = run(httpserver, tmp_path, prs=(5, 6))
    assert report.actions == {"closed": 0, "unchanged": 1, "created": 1}
    assert fake.bodies(5) == fake.bodies(6) == [body()] and fake.count("POST") == 2


# ---- a head failing in hundreds of jobs ---------------------------------------------------------


MESSAGE = ("AssertionError: Tensor-likes are not close!\n\nMismatched elements: 1 / 64 (1.6%)\n"
           "Greatest absolute difference: " + "9" * 300)


def many_failures(n: int = 300, broken: int = 40) -> list[c.Verdict]:
    """`n` failing test jobs named as PyTorch's are (its build environments and test configs from
    its published test times, four shards each, a failing test from the config's own files); the
    last `broken` of them BROKEN TRUNK, the others NEW."""
    times = pytorch_json("test-times.2026-08-20.json")
    pairs = [(env, cfg, sorted(files)) for env, configs in sorted(times.items()) if env != "default" and "/" not in env
             for cfg, files in sorted(configs.items()) if cfg]
    jobs = []
    for env, cfg, files in pairs:
        for shard in (1, 2, 3, 4):
            if len(jobs) < n:
                f = files[(shard * 7) % len(files)]
                jobs.append(c.HeadJob(name=f"{env} / test ({cfg}, {shard}, 4, linux.4xlarge)", job_group=f"pull / {env}",
                                      state="failure", job_id=16_000_000_000 + len(jobs), run_id=15_000_000_000,
                                      workflow="pull", tests=(c.FailedTest(f"TestOps.test_x ({f}.py)",
                                                                           c.message_key(MESSAGE)),)))
    main = c.MainFailure(BASE, "g", 1, 2, merge_base=True)
    assert len(jobs) == n
    return [c.Verdict(j, c.NEW) if i < n - broken else c.Verdict(j, c.BROKEN_TRUNK, "on the merge base", main=main)
            for i, j in enumerate(jobs)]


def listed(text: str, title: str) -> tuple[int, int]:
    """(jobs listed, jobs said to be more) in the section titled `title`."""
    section = text[text.index(f"<b>{title}</b>"):]
    section = section[:section.index("</details>")]
    more = re.search(r"^\* \.\.\. and (\d+) more ", section, re.M)
    return len(re.findall(r"^\* \[", section, re.M)), int(more[1]) if more else 0


def test_a_head_failing_in_300_jobs_gets_a_body_github_accepts_with_every_count(httpserver, tmp_path):
    verdicts = many_failures()
    head = Head(REPO, 5, HEAD, BASE, hud_url="https://hud.example.org/hud")
    text = render(head, verdicts, pending=4)
    assert len(text) < MAX_BODY_CHARS and text.startswith(MARKER_START + "\n") and text.endswith(MARKER_END)
    assert "\n## :x: 260 New Failures, 4 Pending, 40 Unrelated Failures\n" in text
    assert f"As of commit {HEAD} with merge base {BASE}:" in text
    new, broken = listed(text, "NEW FAILURES"), listed(text, "BROKEN TRUNK")
    assert sum(new) == 260 and sum(broken) == 40 and new[1] > 0
    assert new[0] == broken[0] or broken[1] == 0  # the same number of jobs listed in each section
    assert "* ... and %d more (see [the HUD page](https://hud.example.org/hud/pr/5.html))" % new[1] in text
    # the same classification in another order is the same body: an unchanged head costs no edit
    shuffled = list(verdicts)
    random.Random(3).shuffle(shuffled)
    assert render(head, shuffled, pending=4) == text
    # without a HUD to link, the line still says where the rest is
    plain = render(Head(REPO, 5, HEAD, BASE), verdicts, pending=4)
    assert len(plain) < MAX_BODY_CHARS and "* ... and %d more (see the HUD page)\n" % listed(plain, "NEW FAILURES")[1] in plain
    # posted over the previous head's green comment, which must not stay
    fake = FakePullRequests(httpserver, REPO)
    fake.add_comment(5, body("## :white_check_mark: No Failures"))
    report = run(httpserver, tmp_path, text=text)
    assert report.actions["edited"] == 1 and not report.failed and fake.bodies(5) == [text]


def test_a_body_that_fits_lists_every_job():
    verdicts = many_failures(n=30, broken=10)
    text = render(Head(REPO, 5, HEAD, BASE), verdicts, pending=0)
    assert listed(text, "NEW FAILURES") == (20, 0) and listed(text, "BROKEN TRUNK") == (10, 0)
    assert "more (see" not in text


def test_the_fake_refuses_a_body_over_githubs_limit_as_github_does(httpserver):
    """The check the test above relies on: GitHub's 422 for a comment body over 65,536 characters."""
    fake = FakePullRequests(httpserver, REPO)
    with pytest.raises(GitHubError) as refused:
        upsert(gh(httpserver), REPO, 5, MARKER_START + "x" * MAX_BODY_CHARS + MARKER_END)
    assert refused.value.status == 422 and fake.comments == {}


# ---- a comment a maintainer deleted ----------------------------------------------------------------


def deleted_on_github(fake: FakePullRequests, tmp_path, octokit, number: int, comment: dict, at: str) -> None:
    """Someone deletes `comment` of pull request `number` on GitHub, which sends the `issue_comment`
    webhook (action `deleted`, the comment as it was) that the receiver archives; the day is ingested."""
    with fake.lock:
        fake.comments[number].remove(comment)
    opened = next(p for p in octokit["api.github.com"]["pull_request"] if p["action"] == "opened")
    payload = {"action": "deleted", "issue": {"number": number, "pull_request": {"url": ""}}, "comment": comment,
               "repository": {**opened["repository"], "full_name": REPO}, "sender": opened["sender"]}
    folder = tmp_path / "archive" / "webhooks" / f"day={TODAY.isoformat()}"
    n = len(list(folder.glob("*.jsonl"))) if folder.exists() else 0
    write_lines(folder / f"hooks-{n}.jsonl", [{"event": "issue_comment", "delivery_id": f"gh-deleted-{comment['id']}",
                                               "received_at": at, "payload": payload}], gz=False)
    ingest_webhook_day(Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "lake")), TODAY.isoformat(),
                       workers=1)


def test_a_comment_a_maintainer_deleted_is_posted_again_once_at_no_cost_to_the_others(httpserver, tmp_path, octokit):
    """PyTorch's Dr. CI writes its comment at every run, so a deleted one comes back. Here an unchanged
    body costs no request at all; GitHub's webhook of the deletion is what brings it back, once, for
    that pull request only (3 requests), and a deleted comment of someone else's changes nothing."""
    fake = FakePullRequests(httpserver, REPO)
    assert run(httpserver, tmp_path, prs=(5, 6)).actions["created"] == 2
    before = len(fake.requests)
    assert run(httpserver, tmp_path, prs=(5, 6)).actions == {"closed": 0, "recorded": 2}
    assert len(fake.requests) == before  # nothing changed: GitHub is not asked

    deleted_on_github(fake, tmp_path, octokit, 5, fake.comments[5][0], f"{TODAY.isoformat()}T10:00:00Z")
    assert fake.bodies(5) == []
    report = run(httpserver, tmp_path, prs=(5, 6))
    assert report.actions == {"closed": 0, "recorded": 1, "restored": 1, "created": 1}
    assert fake.bodies(5) == [body()] and fake.bodies(6) == [body()]
    assert [(m, p) for m, p, _ in fake.requests[before:]] == [
        ("GET", f"/repos/{REPO}/issues/5/comments"), ("POST", f"/repos/{REPO}/issues/5/comments"),
        ("GET", f"/repos/{REPO}/issues/5/comments")]
    # acted on once: the new comment is the one recorded, and the deletion was of the old one
    before = len(fake.requests)
    assert run(httpserver, tmp_path, prs=(5, 6)).actions == {"closed": 0, "recorded": 2}
    # a human's comment deleted: not ours, nothing to restore
    human = fake.add_comment(6, "LGTM", user={**BOT, "login": "octocat", "type": "User"})
    deleted_on_github(fake, tmp_path, octokit, 6, human, f"{TODAY.isoformat()}T11:00:00Z")
    assert run(httpserver, tmp_path, prs=(5, 6)).actions == {"closed": 0, "recorded": 2}
    assert len(fake.requests) == before
    # deleted again: restored again
    deleted_on_github(fake, tmp_path, octokit, 5, fake.comments[5][0], f"{TODAY.isoformat()}T12:00:00Z")
    assert run(httpserver, tmp_path, prs=(5, 6)).actions["restored"] == 1 and fake.bodies(5) == [body()]


def test_a_comment_deleted_without_a_webhook_is_found_by_a_look_every_few_hours_and_posted_again_once(
        httpserver, tmp_path):
    """The deletion's webhook was lost, and the ledger was written before it kept the comments' node
    ids: an unchanged body costs nothing within VERIFY_AFTER of its post, then one GET of the recorded
    comment (404: deleted) brings it back, once; a comment still there costs that GET only, gives its
    node id, and is not looked at again for VERIFY_AFTER, then by GraphQL."""
    from torchci_assets.derived.drci.publish import VERIFY_AFTER

    fake = FakePullRequests(httpserver, REPO)
    assert run(httpserver, tmp_path, prs=(5, 6)).actions["created"] == 2
    for part in (tmp_path / "lake" / "drci_posts").glob("day=*/*.parquet"):  # as an older version wrote it
        pq.write_table(pq.read_table(part).drop_columns(["node_id"]), part)
    gone = fake.comments[5].pop()  # deleted on GitHub; no webhook ever reaches the lake
    before = len(fake.requests)
    assert run(httpserver, tmp_path, prs=(5, 6)).actions == {"closed": 0, "recorded": 2}
    assert len(fake.requests) == before  # within VERIFY_AFTER: GitHub is not asked
    later = dt.datetime.now(dt.timezone.utc) + VERIFY_AFTER + dt.timedelta(minutes=1)
    report = run(httpserver, tmp_path, prs=(5, 6), now=later)
    assert report.actions == {"closed": 0, "verified": 1, "restored": 1, "created": 1}
    assert fake.bodies(5) == [body()] and fake.bodies(6) == [body()]
    assert [(m, p) for m, p, _ in fake.requests[before:]] == [
        ("GET", f"/repos/{REPO}/issues/comments/{gone['id']}"),
        ("GET", f"/repos/{REPO}/issues/comments/{fake.comments[6][0]['id']}"), ("GET", f"/repos/{REPO}/issues/5/comments"),
        ("POST", f"/repos/{REPO}/issues/5/comments"), ("GET", f"/repos/{REPO}/issues/5/comments")]
    # each look and each post counts as the latest: nothing is asked again for VERIFY_AFTER
    before = len(fake.requests)
    assert run(httpserver, tmp_path, prs=(5, 6), now=later).actions == {"closed": 0, "recorded": 2}
    assert len(fake.requests) == before
    # then both by their node ids, the one a post recorded and the one the GET gave
    later += VERIFY_AFTER + dt.timedelta(minutes=1)
    assert run(httpserver, tmp_path, prs=(5, 6), now=later).actions == {"closed": 0, "verified": 2}
    assert fake.requests[before:] == [("POST", "/graphql", {"ids": sorted(
        [fake.comments[5][0]["node_id"], fake.comments[6][0]["node_id"]], key=lambda n: int(n[3:]))})]


def test_the_looks_at_recorded_comments_are_bounded_per_run_oldest_first(httpserver, tmp_path, monkeypatch):
    """A deployment's first run after a pause finds every comment due: VERIFY_PER_RUN looks a run, the
    longest unseen first, and the next runs take the rest; a look that fails is tried again later."""
    from torchci_assets.derived.drci import publish as pub

    monkeypatch.setattr(pub, "VERIFY_PER_RUN", 2)
    fake = FakePullRequests(httpserver, REPO)
    for n in (7, 5, 6):  # posted in this order: 7 is the longest unseen
        run(httpserver, tmp_path, prs=(n,))
    later = dt.datetime.now(dt.timezone.utc) + pub.VERIFY_AFTER + dt.timedelta(minutes=1)
    ids = {n: fake.comments[n][0]["id"] for n in (5, 6, 7)}
    fake.fail("graphql", *[json_response(502, {"message": "Server Error"})] * 6)  # the first look fails, its 5 retries too
    before = len(fake.requests)
    assert run(httpserver, tmp_path, prs=(5, 6, 7), now=later).actions == {"closed": 0, "recorded": 3}
    assert looked(fake, before) == {ids[5], ids[7]}  # the two longest unseen; 6 waits
    before = len(fake.requests)
    assert run(httpserver, tmp_path, prs=(5, 6, 7), now=later).actions == {"closed": 0, "recorded": 1, "verified": 2}
    assert looked(fake, before) == {ids[5], ids[7]}  # again, their look having failed
    before = len(fake.requests)
    assert run(httpserver, tmp_path, prs=(5, 6, 7), now=later).actions == {"closed": 0, "recorded": 2, "verified": 1}
    assert looked(fake, before) == {ids[6]}
    before = len(fake.requests)
    assert run(httpserver, tmp_path, prs=(5, 6, 7), now=later).actions == {"closed": 0, "recorded": 3}
    assert len(fake.requests) == before


def looked(fake, since: int) -> set[int]:
    """The ids of the comments looked at since request `since` (a GET alone, or by node id in a GraphQL query)."""
    return ({int(p.rsplit("/", 1)[1]) for m, p, _ in fake.requests[since:] if m == "GET" and "/issues/comments/" in p}
            | {int(n[3:]) for m, p, a in fake.requests[since:] if p == "/graphql" for n in a["ids"]})


def webhook_files_read(monkeypatch) -> list[str]:
    """The webhook_events files the lake is asked to read from now on (their footers, or their rows);
    every file written is taken as settled (`lake_extracts.SETTLED_S`), as an hour later."""
    from resources import lake_extracts

    monkeypatch.setattr(lake_extracts, "SETTLED_S", 0)
    read: list[str] = []
    digest, register = Lake.file_digest, Lake.register_files

    def counted_digest(self, path):
        read.extend([path] if "/webhook_events/" in path else [])
        return digest(self, path)

    def counted_register(self, con, files, name):
        read.extend(f for f in files if "/webhook_events/" in f)
        return register(self, con, files, name)

    monkeypatch.setattr(Lake, "file_digest", counted_digest)
    monkeypatch.setattr(Lake, "register_files", counted_register)
    return read


def webhook_listing(tmp_path) -> dict[str, tuple]:
    """Full path -> (size, version) of the lake's webhook_events files, as a listing gives them."""
    store = Lake.at(str(tmp_path / "lake")).store
    return {store.full(e.path): (e.size, e.stamp) for e in store.list_files("webhook_events", (".parquet",))}


def test_a_refresh_reads_only_the_webhook_files_new_since_the_last_for_deletions(httpserver, tmp_path, octokit,
                                                                                 monkeypatch):
    """Every publish asks which of its comments were deleted, over the ledger's 14 days of webhooks:
    a run with nothing new reads none of their files, one after a deletion landed reads only the
    files that came or changed since, and a lost or garbled record of what was read costs a read of
    every file, never a comment restored twice or a deletion missed."""
    from resources import lake_extracts

    monkeypatch.setattr(lake_extracts, "SETTLED_S", 0)  # every file written is settled, as an hour later
    fake = FakePullRequests(httpserver, REPO)
    for back in (1, 2, 3):  # the days before in the window: GitHub's webhooks, as received and ingested
        day = (TODAY - dt.timedelta(days=back)).isoformat()
        events = [envelope("pull_request", f"{day}-{i}", p, f"{day}T12:00:00.000Z")
                  for i, p in enumerate(octokit["api.github.com"]["pull_request"][:5])]
        write_lines(tmp_path / "archive" / "webhooks" / f"day={day}" / "hooks.jsonl", events, gz=False)
        ingest_webhook_day(Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "lake")), day, workers=1)
    run(httpserver, tmp_path, prs=(5, 6))
    deleted_on_github(fake, tmp_path, octokit, 6, fake.comments[6][0], f"{TODAY.isoformat()}T09:00:00Z")
    assert run(httpserver, tmp_path, prs=(5, 6)).actions["restored"] == 1
    read = webhook_files_read(monkeypatch)
    assert run(httpserver, tmp_path, prs=(5, 6)).actions == {"closed": 0, "recorded": 2} and read == []

    before = webhook_listing(tmp_path)
    deleted_on_github(fake, tmp_path, octokit, 5, fake.comments[5][0], f"{TODAY.isoformat()}T10:00:00Z")
    after = webhook_listing(tmp_path)
    landed = {path for path, version in after.items() if before.get(path) != version}
    assert len(after) == 4 and len(landed) == 1  # today's file, rewritten with the new delivery
    assert run(httpserver, tmp_path, prs=(5, 6)).actions["restored"] == 1 and fake.bodies(5) == [body()]
    assert sorted(read) == sorted(landed)

    for damage in (b"{not json", None):  # garbled, then lost
        lake = Lake.at(str(tmp_path / "lake"))
        lake.store.write_bytes(DELETED_RECORD, damage) if damage else lake.store.delete(DELETED_RECORD)
        read.clear()
        assert run(httpserver, tmp_path, prs=(5, 6)).actions == {"closed": 0, "recorded": 2}
        assert sorted(read) == sorted(after) and len(fake.bodies(5)) == len(fake.bodies(6)) == 1


def webhook_part(lake: Lake, day: str, part: str, first_id: int) -> set[int]:
    """A part of webhook_events as the ingest writes them: a comment deleted (`first_id`) among
    other deliveries; the ids it says were deleted."""
    rows = [{"event": event, "action": action, "delivery_id": f"{day}-{part}-{i}", "repo": REPO,
             "received_at": dt.datetime.fromisoformat(f"{day}T12:00:00+00:00"),
             "payload": json.dumps({"action": action, "comment": {"id": first_id + i}})}
            for i, (event, action) in enumerate([("issue_comment", "deleted"), ("issue_comment", "created"),
                                                 ("workflow_job", "completed")])]
    lake.write("webhook_events", day, pa.Table.from_pylist(rows, schema=WEBHOOK_EVENTS_SCHEMA), part=part)
    return {first_id}


def test_the_record_of_deletions_follows_rewritten_files_and_both_partitions_of_a_night(tmp_path, monkeypatch):
    """After midnight yesterday's partition and today's both publish, each over its own 14 days:
    neither makes the other read its files again. A day's parts merged into one file (the ingests'
    compaction) cost a read of that file, and the deletions they hold are still found."""
    lake = Lake.at(str(tmp_path / "lake"))
    days = [(TODAY - dt.timedelta(days=back)).isoformat() for back in (2, 1, 0)]
    ids = {day: webhook_part(lake, day, "part-a", 1000 * n) | webhook_part(lake, day, "part-b", 1000 * n + 500)
           for n, day in enumerate(days, 1)}
    read = webhook_files_read(monkeypatch)
    assert deleted_comment_ids(lake, days) == set().union(*ids.values()) and len(read) == 6
    read.clear()
    assert deleted_comment_ids(lake, days[:2]) == ids[days[0]] | ids[days[1]] and read == []
    assert deleted_comment_ids(lake, days) == set().union(*ids.values()) and read == []

    folder = f"webhook_events/day={days[1]}"
    parts = [lake.store.full(e.path) for e in lake.store.list_files(folder, (".parquet",))]
    merged = pa.concat_tables(pq.read_table(p, filesystem=lake.store.fs) for p in parts)
    lake.write("webhook_events", days[1], merged.select(WEBHOOK_EVENTS_SCHEMA.names).cast(WEBHOOK_EVENTS_SCHEMA),
               part="merged")
    for p in parts:
        lake.store.fs.delete_file(p)
    assert deleted_comment_ids(lake, days) == set().union(*ids.values())
    assert read == [lake.store.full(f"{folder}/merged.parquet")]


def test_a_webhook_file_rewritten_within_its_version_s_tick_is_read_again(tmp_path, monkeypatch):
    """S3 keeps the second of a write: a file rewritten within it, with the same size, lists as the
    same version (played here on a local file by putting its size, time and inode back). Until a file
    is older than that, the record does not vouch for it, and a deletion it now holds is found."""
    lake = Lake.at(str(tmp_path / "lake"))
    day = TODAY.isoformat()
    assert deleted_comment_ids(lake, [day]) == set()
    webhook_part(lake, day, "part-a", 1000)
    path = tmp_path / "lake" / "webhook_events" / f"day={day}" / "part-a.parquet"
    assert deleted_comment_ids(lake, [day]) == {1000}
    stat = path.stat()
    other = Lake.at(str(tmp_path / "other"))  # the same deliveries, another comment deleted: the same size
    webhook_part(other, day, "part-a", 2000)
    swapped = (tmp_path / "other" / "webhook_events" / f"day={day}" / "part-a.parquet").read_bytes()
    assert len(swapped) == stat.st_size and swapped != path.read_bytes()
    with open(path, "r+b") as f:  # in place: the same inode
        f.write(swapped)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_ino == stat.st_ino and path.stat().st_mtime_ns == stat.st_mtime_ns
    assert deleted_comment_ids(lake, [day]) == {2000}


def test_the_looks_of_a_run_cost_one_graphql_request_and_a_deleted_comment_is_posted_again_once(httpserver, tmp_path):
    """500 open pull requests looked at once per VERIFY_AFTER by a GET each cost ~2,000 requests a day:
    the comments due are asked in one GraphQL `nodes` query by the node ids their posts recorded, and
    one GitHub no longer resolves (deleted, its webhook lost) is posted again, as after a GET's 404."""
    from torchci_assets.derived.drci.publish import VERIFY_AFTER

    fake = FakePullRequests(httpserver, REPO)
    assert run(httpserver, tmp_path, prs=(5, 6, 7)).actions["created"] == 3
    fake.comments[6].pop()  # deleted on GitHub; no webhook ever reaches the lake
    later = dt.datetime.now(dt.timezone.utc) + VERIFY_AFTER + dt.timedelta(minutes=1)
    before = len(fake.requests)
    report = run(httpserver, tmp_path, prs=(5, 6, 7), now=later)
    assert report.actions == {"closed": 0, "verified": 2, "restored": 1, "created": 1}
    assert [(m, p) for m, p, _ in fake.requests[before:]] == [
        ("POST", "/graphql"), ("GET", f"/repos/{REPO}/issues/6/comments"), ("POST", f"/repos/{REPO}/issues/6/comments"),
        ("GET", f"/repos/{REPO}/issues/6/comments")]
    assert [fake.bodies(n) for n in (5, 6, 7)] == [[body()]] * 3
    # the looks and the new post count as seen: nothing is asked for VERIFY_AFTER, then one query again
    before = len(fake.requests)
    assert run(httpserver, tmp_path, prs=(5, 6, 7), now=later).actions == {"closed": 0, "recorded": 3}
    assert len(fake.requests) == before
    again = run(httpserver, tmp_path, prs=(5, 6, 7), now=later + VERIFY_AFTER + dt.timedelta(minutes=1))
    assert again.actions == {"closed": 0, "verified": 3}
    assert [(m, p) for m, p, _ in fake.requests[before:]] == [("POST", "/graphql")]


def test_comments_nearly_due_are_looked_at_in_the_query_of_one_due(httpserver, tmp_path):
    """Comments posted at different times fall due one by one, and a refresh runs every few minutes: a
    query each would cost nearly a request per look again. A comment unseen for half of VERIFY_AFTER
    comes along in the query of one due; one seen more recently waits."""
    from torchci_assets.derived.drci.publish import VERIFY_AFTER

    fake = FakePullRequests(httpserver, REPO)
    t0 = dt.datetime.now(dt.timezone.utc)
    for n, hours in ((5, 0), (6, 2), (7, 4)):
        run(httpserver, tmp_path, prs=(n,), now=t0 + dt.timedelta(hours=hours))
    before = len(fake.requests)
    look_at = t0 + VERIFY_AFTER + dt.timedelta(minutes=1)  # 5 unseen for 6 h, 6 for 4 h, 7 for 2 h
    assert run(httpserver, tmp_path, prs=(5, 6, 7), now=look_at).actions == {"closed": 0, "verified": 2, "recorded": 1}
    assert looked(fake, before) == {fake.comments[n][0]["id"] for n in (5, 6)}
    assert [p for _, p, _ in fake.requests[before:]] == ["/graphql"]
    before = len(fake.requests)  # 7 is due only 6 h after its post; nothing is asked before
    assert run(httpserver, tmp_path, prs=(5, 6, 7), now=t0 + dt.timedelta(hours=9)).actions == {"closed": 0, "recorded": 3}
    assert len(fake.requests) == before
