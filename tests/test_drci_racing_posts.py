"""Two publish runs racing on the same pull requests with different bodies (an older and a newer
computation, each creating the comment): whichever body GitHub is left showing, the next run that
computes a body gets it shown, never trusting a ledger row that a racing write may have overtaken.
Against the fake GitHub on 127.0.0.1 (fake_github_pulls.py)."""

import threading

from fake_github_pulls import FakePullRequests
from test_drci import HEAD, REPO, TODAY, body, gh

from resources.lake import Lake
from resources.storage import Store
from torchci_assets.derived.drci.publish import body_hash, last_posted, publish

ROUNDS = 40


def post(httpserver, tmp_path, number: int, text: str):
    lake, outputs = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    return publish(lake, outputs, gh(httpserver), TODAY.isoformat(), REPO,
                   [{"pr": number, "head_sha": HEAD, "pr_state": "open", "body": text}], enabled=True, today=TODAY)


def race(httpserver, tmp_path, number: int, texts: tuple[str, str]) -> None:
    start = threading.Barrier(len(texts))

    def run(text):
        start.wait()
        post(httpserver, tmp_path, number, text)

    threads = [threading.Thread(target=run, args=(t,)) for t in texts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_after_two_racing_runs_the_next_run_gets_its_body_shown(httpserver, tmp_path):
    fake = FakePullRequests(httpserver, REPO)
    lake = Lake.at(str(tmp_path / "lake"))
    for n in range(1, ROUNDS + 1):
        older, newer = body(f"## :x: 1 New Failure (run A, PR {n})"), body(f"## :white_check_mark: No Failures (B, {n})")
        race(httpserver, tmp_path, n, (older, newer))
        assert len(fake.bodies(n)) == 1  # exactly one comment, whoever won
        # the next run computes the body the ledger last recorded (the one it would skip on trust)
        recorded = last_posted(lake, TODAY.isoformat())[n].body_sha256
        text = newer if recorded == body_hash(newer) else older
        post(httpserver, tmp_path, n, text)
        assert fake.bodies(n) == [text], f"PR {n}: GitHub shows another body than the one last computed"
        # and once it is shown, a run with the same body sends nothing
        before = len(fake.requests)
        assert post(httpserver, tmp_path, n, text).actions.get("recorded") == 1 and len(fake.requests) == before


def test_a_post_that_read_its_clock_before_another_runs_create_and_edited_that_comment_is_the_one_vouched_for(
        httpserver, tmp_path):
    """The interleaving the race above meets now and then, made certain: run B reads its clock, is
    descheduled while run A lists, creates and confirms its comment, then lists, finds A's comment
    and edits it. GitHub shows B's body, so the ledger must vouch for B's: its row is stamped once
    it listed, after A's create, not when it first read the clock."""
    import datetime as dt

    fake = FakePullRequests(httpserver, REPO)
    lake, outputs = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    older, newer = body("## :x: 1 New Failure (run A)"), body("## :white_check_mark: No Failures (B)")
    b_started = dt.datetime.now(dt.timezone.utc)
    post(httpserver, tmp_path, 7, older)  # run A, whole, after B read its clock
    sent = len(fake.requests)  # B's clock reads before its first request: all taken before A ran
    publish(lake, outputs, gh(httpserver), TODAY.isoformat(), REPO,
            [{"pr": 7, "head_sha": HEAD, "pr_state": "open", "body": newer}], enabled=True, today=TODAY,
            clock=lambda: b_started if len(fake.requests) == sent else dt.datetime.now(dt.timezone.utc))
    assert fake.bodies(7) == [newer]
    assert last_posted(lake, TODAY.isoformat())[7].body_sha256 == body_hash(newer)
    # so the next run computing the older body again gets it shown, rather than skipping it on trust
    post(httpserver, tmp_path, 7, older)
    assert fake.bodies(7) == [older]
