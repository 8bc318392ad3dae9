"""Gap repair and runs GitHub answers 404 for: a run is taken for deleted only when GitHub answered
404 twice, at least `CONFIRM_GONE_AFTER` apart. GitHub answers 404 for a run it has just created
(replication lag) and on passing errors behind its load balancers; one such answer taken for a
deletion would lose the run's jobs from every table for good."""

import datetime as dt
import json

from conftest import write_lines
from fake_github_actions import FakeActions, reply
from test_gap_repair import (DAY, JOB, JOBLESS_RUN, NOW, REPO, RUN, archive_with_lost_completion, client,
                             completed_job, fake_api, hook, jobs_in_lake, run_job)

from resources.lake import Lake
from resources.storage import Store
from torchci_assets.backfill import gone
from torchci_assets.backfill.gaps import CONFIRM_GONE_AFTER, repair_gaps
from torchci_assets.ingest.webhooks import ingest_webhook_day

NOT_FOUND = {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}


def meta(result) -> dict:
    (output,) = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
    return {k: v.value for k, v in output.event_specific_data.metadata.items()}


def test_a_run_github_answers_404_for_once_is_asked_again_and_repaired(tmp_path, httpserver, octokit):
    """One 404 for a run that exists (GitHub's replica had not caught up): the run is suspected, not
    asked about on the next passes, asked again once CONFIRM_GONE_AFTER has passed, and its jobs,
    whose deliveries were all lost, reach the lake."""
    archive, lake = archive_with_lost_completion(tmp_path, octokit)
    api = fake_api(httpserver, octokit, completed_job(octokit))
    api.fail(rf"/runs/{JOBLESS_RUN}/attempts/1$", reply(404, NOT_FOUND))
    report = repair_gaps(client(httpserver), archive, lake, NOW)
    assert (report.gone, report.suspected, report.looked_up) == ([], [(REPO, JOBLESS_RUN, 1)], 1)
    assert report.problem is None
    ingest_webhook_day(archive, lake, DAY, workers=1)  # the stale job's repair: its run is not asked again
    asked = api.count(rf"/runs/{JOBLESS_RUN}/")
    report = repair_gaps(client(httpserver), archive, lake, NOW + dt.timedelta(minutes=5))
    assert (report.suspected_waiting, api.count(rf"/runs/{JOBLESS_RUN}/")) == (1, asked)
    report = repair_gaps(client(httpserver), archive, lake, NOW + CONFIRM_GONE_AFTER)
    assert (report.gone, report.suspected, report.cleared, report.looked_up) == ([], [], [(REPO, JOBLESS_RUN, 1)], 1)
    ingest_webhook_day(archive, lake, DAY, workers=1)
    assert [(job_id, run_id) for job_id, run_id, *_ in jobs_in_lake(tmp_path)] == [
        (JOB, RUN), (JOBLESS_RUN * 10 + 1, JOBLESS_RUN), (JOBLESS_RUN * 10 + 2, JOBLESS_RUN)]
    assert gone.load(Store(str(tmp_path / "archive"))) == gone.Gone()  # the suspicion is cleared


def test_a_deleted_run_is_confirmed_by_a_second_404_and_then_never_asked_again(tmp_path, httpserver, octokit,
                                                                              monkeypatch):
    """A run really deleted answers 404 again: the second 404, CONFIRM_GONE_AFTER after the first,
    makes it deleted (`runs_gone`), and later passes neither ask about it nor count it again, for the
    two days its jobs stay in the lake. A deleted run costs one request more than one 404 would."""
    archive_with_lost_completion(tmp_path, octokit)
    api = fake_api(httpserver, octokit, completed_job(octokit))
    api.runs.clear()
    api.jobs.clear()
    first = meta(run_job(tmp_path, httpserver, monkeypatch))
    assert (first["runs_gone"], first["runs_suspected_gone"], first["failed"]) == (0, 2, 0)
    assert api.count(r"/runs/\d+/attempts/1") == 2
    waiting = meta(run_job(tmp_path, httpserver, monkeypatch, now=NOW + dt.timedelta(minutes=25)))
    assert (waiting["runs_suspected_waiting"], api.count(r"/runs/\d+/attempts/1")) == (2, 2)
    second = meta(run_job(tmp_path, httpserver, monkeypatch, now=NOW + CONFIRM_GONE_AFTER))
    assert (second["runs_gone"], second["runs_suspected_gone"], second["failed"]) == (2, 0, 0)
    assert api.count(r"/runs/\d+/attempts/1") == 4
    for later in (dt.timedelta(hours=1), dt.timedelta(hours=20)):
        after = meta(run_job(tmp_path, httpserver, monkeypatch, now=NOW + later))
        assert (after["runs_gone"], after["runs_known_gone"], after["runs_suspected_waiting"]) == (0, 2, 0)
    assert api.count(r"/runs/\d+/attempts/1") == 4


def test_a_note_of_deleted_runs_written_before_suspicions_reads_as_confirmed(tmp_path, httpserver, octokit):
    """A gone.json of an earlier version holds only runs GitHub answered 404 for: they stay deleted."""
    archive, lake = archive_with_lost_completion(tmp_path, octokit)
    api = fake_api(httpserver, octokit, completed_job(octokit))
    noted = {gone.Gone.run_key((REPO, run_id, 1)): "2021-09-13T03:00:00+00:00" for run_id in (RUN, JOBLESS_RUN)}
    archive.write_bytes(gone.PATH, json.dumps({"runs": noted, "pulls": {}}).encode())
    report = repair_gaps(client(httpserver), archive, lake, NOW)
    assert (report.known_gone, report.suspected_waiting, report.looked_up, api.requests) == (2, 0, 0, [])


def test_overlapping_passes_keep_each_others_suspicions_and_clearings(tmp_path):
    """Two passes read the notes, one after the other writes: a suspicion one noted and a suspicion
    the other cleared (GitHub answered for the run after all) are both kept as that pass left them."""
    store = Store(str(tmp_path / "archive"))
    first = gone.load(store)
    first.suspect_run((REPO, 1, 1), NOW)
    gone.save(store, first)
    slow, quick = gone.load(store), gone.load(store)
    quick.clear_run((REPO, 1, 1))
    quick.suspect_run((REPO, 2, 1), NOW)
    gone.save(store, quick)
    slow.suspect_run((REPO, 3, 1), NOW)
    slow.add_run((REPO, 2, 1), NOW)  # confirmed: no longer a suspicion
    gone.save(store, slow)
    notes = gone.load(store)
    assert notes.suspected == {gone.Gone.run_key((REPO, 3, 1)): NOW.isoformat()}
    assert sorted(notes.runs) == [gone.Gone.run_key((REPO, 2, 1))]


def test_overlapping_passes_keep_each_others_first_404s_of_pull_requests(tmp_path):
    """A pull request's first 404 stays noted through a pass that did not hear of it (past its
    lookups), and goes only when a pass did: the slower of two passes neither drops the first 404
    the other noted nor brings back one the other cleared (GitHub answered for it)."""
    store = Store(str(tmp_path / "archive"))
    first = gone.load(store)
    first.set_pulls(REPO, [], [5, 8], unheard={5, 6, 7, 8})
    gone.save(store, first)
    slow, quick = gone.load(store), gone.load(store)
    quick.set_pulls(REPO, [], [6], unheard={8})  # answered for #5 and #7, 404 for #6
    gone.save(store, quick)
    slow.set_pulls(REPO, [], [7], unheard={5, 6, 8})  # 404 for #7; past its lookups: #5, #6, #8
    gone.save(store, slow)
    assert gone.load(store).pulls_suspected == {REPO: [6, 7, 8]}


RERUN = 2202229900


def test_a_failed_re_run_is_asked_about_by_its_own_age_not_the_first_attempts(tmp_path, httpserver, octokit):
    """A re-run's `created_at` is its first attempt's, hours ago: its second attempt, requested ten
    minutes ago and failed with no failing job heard, is no gap before the limit has passed since the
    re-run (the failing job's deliveries may still land), as a new run's attempt is not. The lake
    keeps an attempt's last update of the day, here its completion two minutes ago: the age counts
    from there."""
    passed = dict(completed_job(octokit), run_id=RERUN, run_attempt=2, name="linters", conclusion="success",
                  completed_at="2021-09-13T03:26:00Z")
    failing = dict(passed, id=JOB + 1, name="build", conclusion="failure")
    run = {"id": RERUN, "run_attempt": 2, "status": "completed", "conclusion": "failure", "name": "CI",
           "created_at": "2021-09-13T00:30:00Z", "run_started_at": "2021-09-13T03:20:00Z",
           "updated_at": "2021-09-13T03:28:00Z", "head_branch": "main"}

    def run_as(updated: dict):
        def edit(p):
            p["repository"] = octokit["api.github.com"]["workflow_job"][1]["repository"]
            p["workflow_run"].update(run, **updated)
        return edit

    write_lines(tmp_path / "archive" / "webhooks" / f"day={DAY}" / "hooks.jsonl", [
        hook(octokit, "workflow_run", "requested", "2021-09-13T03:20:01.000Z",
             run_as({"status": "queued", "conclusion": None, "updated_at": "2021-09-13T03:20:00Z"})),
        hook(octokit, "workflow_job", "completed", "2021-09-13T03:26:01.000Z",
             lambda p: p["workflow_job"].update(passed)),
        hook(octokit, "workflow_run", "completed", "2021-09-13T03:28:01.000Z", run_as({}))], gz=False)
    archive, lake = Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "lake"))
    ingest_webhook_day(archive, lake, DAY, workers=1)
    api = FakeActions(httpserver, repo=REPO)
    api.add_run(run, [passed, failing])
    for minutes in (0, 5, 15):
        report = repair_gaps(client(httpserver), archive, lake, NOW + dt.timedelta(minutes=minutes))
        assert (report.unexplained_runs, api.count(rf"/runs/{RERUN}/")) == (0, 0)
    report = repair_gaps(client(httpserver), archive, lake, NOW + dt.timedelta(minutes=30))
    assert (report.unexplained_runs, report.looked_up, report.unheard_jobs) == (1, 1, 1)
