"""A `completed` callback whose conclusion GitHub would not take for a check run (none: the action's
`conclusion` input left out, so report_callback.py sends null; a word of the workflow's own such as
`passed`; `Success`, which GitHub's enum does not match) is refused by the receiver with a 400 naming
the field and the values it takes, and nothing is archived. The relay answers it 200 and then fails
to create its check run (GitHub's 422, logged and dropped), so its in-progress check run stays on the
pull request for good. Also what a Buildkite build reports as its run id, a UUID, which neither can
read. A real receiver on 127.0.0.1 with GitHub Actions OIDC tokens from a throwaway issuer, bodies
built by pytorch/test-infra's report_callback.py (vendored)."""

import json

import pytest

from receiving import L2_REPO, archived, served
from test_receiver_callbacks import issuer, keys, record_dispatch, report  # noqa: F401  (fixtures)

ACCEPTED = ("action_required", "cancelled", "failure", "neutral", "skipped", "success", "timed_out")


@pytest.mark.parametrize("conclusion", ["", "passed", "Success", "stale"])
def test_a_completed_callback_without_a_conclusion_github_takes_is_refused_and_not_kept(
        tmp_path, issuer, keys, conclusion):
    record_dispatch(tmp_path)
    with served(tmp_path, keys=keys) as srv:
        answer = srv.post_callback(report("completed", conclusion=conclusion), issuer.token(L2_REPO))
    assert answer.status_code == 400
    detail = answer.json()["detail"]
    assert "body.workflow.conclusion" in detail and all(value in detail for value in ACCEPTED)
    assert json.dumps(conclusion or None) in detail
    assert archived(srv.archive, "ci-results") == []


@pytest.mark.parametrize("conclusion", ACCEPTED)
def test_a_completed_callback_with_a_conclusion_github_takes_is_kept(tmp_path, issuer, keys, conclusion):
    record_dispatch(tmp_path)
    with served(tmp_path, keys=keys) as srv:
        answer = srv.post_callback(report("completed", conclusion=conclusion), issuer.token(L2_REPO))
    assert (answer.status_code, answer.json()) == (200, {"ok": True, "status": "completed"})
    [kept] = archived(srv.archive, "ci-results")
    assert kept["untrusted"]["callback_payload"]["workflow"]["conclusion"] == conclusion


def test_an_in_progress_callback_needs_no_conclusion(tmp_path, issuer, keys):
    record_dispatch(tmp_path)
    with served(tmp_path, keys=keys) as srv:
        answer = srv.post_callback(report("in_progress", conclusion="success"), issuer.token(L2_REPO))
    assert answer.status_code == 200  # report_callback.py drops it: null, as the relay expects


def test_a_buildkite_build_id_as_run_id_is_refused_naming_the_field(tmp_path, issuer, keys):
    record_dispatch(tmp_path)
    body = json.loads(report("completed", conclusion="success"))
    body["workflow"]["run_id"] = "0190a1b2-3c4d-7e5f-8a9b-0c1d2e3f4a5b"  # BUILDKITE_BUILD_ID
    with served(tmp_path, keys=keys) as srv:
        answer = srv.post_callback(body, issuer.token(L2_REPO))
    assert answer.status_code == 400 and "body.workflow.run_id" in answer.json()["detail"]
    assert archived(srv.archive, "ci-results") == []
