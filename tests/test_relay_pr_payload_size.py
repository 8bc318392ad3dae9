"""Whether a pull request's webhook payload fits GitHub's 64 KB client_payload is judged on the
bytes the dispatch sends (UTF-8, non-ASCII characters as they are), so a description in Chinese
or Japanese that fits is dispatched verbatim rather than cut."""

from resources.github import validate_dispatch
from tests.fake_github_relay import FakeRelayGitHub
from tests.test_relay_pull_requests import (  # noqa: F401 (fixtures)
    L3, client_payload_of, dispatch, event_of, github, pr_payload, quick_ticks, relay_config, roots)


def described(text: str) -> dict:
    payload = pr_payload("opened")
    payload["pull_request"]["body"] = text
    return payload


def sendable(payload: dict) -> bool:
    """Whether GitHub takes it as a client_payload, as the client checks it before sending."""
    try:
        validate_dispatch("o/r", "pull_request", {"event_type": "pull_request", "delivery_id": "d", "payload": payload})
    except ValueError:
        return False
    return True


def test_a_cjk_description_that_fits_is_dispatched_verbatim(httpserver, instance, roots):
    payload = described("修复" * 7000)  # 14,000 characters, 42,000 bytes as sent
    assert sendable(payload)
    server = FakeRelayGitHub(httpserver)
    assert dispatch(event_of("pull_request", payload), github(httpserver), roots, instance).success
    assert client_payload_of(server, L3)["payload"] == payload


def test_one_that_does_not_fit_is_still_cut_to_fit():
    payload = described("修复" * 12000)
    assert not sendable(payload)
    event = event_of("pull_request", payload)
    assert event.payload["pull_request"]["body"] == ("修复" * 1000)
    assert sendable(event.payload)
