"""GitHub's front end during an outage, for the tests of every writer that loops over items (Dr. CI,
the trunk guardians, the flaky bot's issues): every request to the test server answered 503 from the
`down_from`-th on, whichever fake (fake_github_*.py) would serve it, as GitHub answers then."""

import threading

import pytest

from fake_github_issues import json_response
from resources.github import GitHubResource

ATTEMPTS = GitHubResource().max_retries + 1  # one request's attempts before the client gives up


class Outage:
    """Every request answered 503 from the `down_from`-th on (None: GitHub up); `requests` logs each one."""

    def __init__(self, serve, down_from: int | None = 1):
        self.serve, self.down_from, self.requests, self.lock = serve, down_from, [], threading.Lock()

    def dispatch(self, request):
        with self.lock:
            self.requests.append((request.method, request.path))
            down = self.down_from is not None and len(self.requests) >= self.down_from
        return json_response(503, {"message": "Service Unavailable"}) if down else self.serve(request)


@pytest.fixture
def outage(httpserver, monkeypatch) -> Outage:
    """GitHub down from the first request on, until the test moves `down_from` (the server, shared by the
    session's tests, answers as before once the test ends)."""
    down = Outage(httpserver.dispatch)
    monkeypatch.setattr(httpserver, "dispatch", down.dispatch)
    return down
