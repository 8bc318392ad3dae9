"""GitHubResource against a real HTTP server on 127.0.0.1 (pytest-httpserver)."""

import base64
import datetime as dt
import json
import logging
import sys
import time
from pathlib import Path

import pytest
from werkzeug import Response

from resources.github import DispatchResult, GitHubError, GitHubResource

TOKEN = "ghp_FAKEtoken0123456789abcdefSECRET"



class Script:
    """Serves the given responses in order (the last one repeats) and counts requests."""

    def __init__(self, *responses):
        self.responses = list(responses)
        self.requests = []

    def __call__(self, request):
        self.requests.append(request)
        item = self.responses[min(len(self.requests), len(self.responses)) - 1]
        return item if isinstance(item, Response) else item(request)


def reply(status, body=None, headers=None):
    return Response("" if body is None else json.dumps(body), status=status, headers=headers,
                    content_type="application/json")


def serve(httpserver, path, *responses, method="POST"):
    script = Script(*responses)
    httpserver.expect_request(path, method=method).respond_with_handler(script)
    return script


def client(httpserver, _sleep=None, **kw):
    """A client of the test server whose retries do not really wait (unless told)."""
    kw.setdefault("token", TOKEN)
    gh = GitHubResource(api_url=httpserver.url_for(""), **kw)
    gh._sleep = Sleeps() if _sleep is None else _sleep
    return gh


class Sleeps(list):
    """A stand-in for time.sleep that records the waits instead of waiting."""

    def __call__(self, seconds):
        self.append(seconds)


def test_dispatch_success_sends_github_headers_and_body(httpserver):
    script = serve(httpserver, "/repos/acme-ai/torch-npu/dispatches", reply(204))
    result = client(httpserver).dispatch("acme-ai/torch-npu", "pytorch-commit",
                                         {"sha": "abc123", "n": 1})
    assert result == DispatchResult(repo="acme-ai/torch-npu", event_type="pytorch-commit",
                                    status=204, ok=True, refused=False, dry_run=False,
                                    error="", attempts=1, waited_s=0.0)
    (req,) = script.requests
    assert req.headers["Authorization"] == f"Bearer {TOKEN}"
    assert req.headers["Accept"] == "application/vnd.github+json"
    assert req.headers["X-GitHub-Api-Version"] == "2022-11-28"
    assert req.headers["User-Agent"] == "torchci-dagster"
    assert req.headers["Content-Type"] == "application/json"
    assert json.loads(req.data) == {"event_type": "pytorch-commit",
                                    "client_payload": {"sha": "abc123", "n": 1}}


def test_429_retry_after_is_honoured_with_a_real_clock(httpserver):
    script = serve(httpserver, "/repos/a/b/dispatches",
                   reply(429, {"message": "slow down"}, {"Retry-After": "1"}), reply(204))
    gh = client(httpserver)
    gh._sleep = time.sleep
    start = time.monotonic()
    result = gh.dispatch("a/b", "e", {})
    elapsed = time.monotonic() - start
    assert result.ok and result.attempts == 2 and result.waited_s == 1.0
    assert len(script.requests) == 2
    assert elapsed >= 1.0


def test_502_storm_then_success_backs_off_exponentially(httpserver):
    script = serve(httpserver, "/repos/a/b/dispatches", *[reply(502)] * 5, reply(204))
    sleeps = Sleeps()
    result = client(httpserver, _sleep=sleeps).dispatch("a/b", "e", {})
    assert result.ok and result.status == 204 and result.attempts == 6
    assert sleeps == [1, 2, 4, 8, 16]
    assert result.waited_s == 31
    assert len(script.requests) == 6


def test_502_storm_longer_than_the_retries_is_a_clear_failure(httpserver):
    script = serve(httpserver, "/repos/a/b/dispatches", reply(502, {"message": "Server Error"}))
    result = client(httpserver).dispatch("a/b", "e", {})
    assert len(script.requests) == 6  # the first attempt and max_retries=5 retries
    assert (result.ok, result.refused, result.status) == (False, False, 502)
    assert result.error == "HTTP 502: Server Error (gave up: after 6 attempts)"


def test_the_total_wait_budget_stops_retries_early(httpserver):
    script = serve(httpserver, "/repos/a/b/dispatches", reply(503))
    sleeps = Sleeps()
    result = client(httpserver, _sleep=sleeps, max_total_wait_s=5).dispatch("a/b", "e", {})
    assert sleeps == [1, 2]  # a further 4 s would make 7 s > 5 s
    assert len(script.requests) == 3
    assert not result.ok and not result.refused
    assert "a further 4s wait would exceed the 5s budget" in result.error


def test_403_is_refused_for_that_repo_without_retry(httpserver):
    denied = serve(httpserver, "/repos/locked/repo/dispatches",
                   reply(403, {"message": "Resource not accessible by integration"}))
    fine = serve(httpserver, "/repos/open/repo/dispatches", reply(204))
    gh = client(httpserver)
    refused = gh.dispatch("locked/repo", "e", {})
    accepted = gh.dispatch("open/repo", "e", {})
    assert len(denied.requests) == 1 and len(fine.requests) == 1
    assert (refused.ok, refused.refused, refused.status) == (False, True, 403)
    assert refused.error == "HTTP 403: Resource not accessible by integration"
    assert accepted.ok and not accepted.refused


def test_404_from_request_raises_with_the_status(httpserver):
    serve(httpserver, "/repos/a/gone", reply(404, {"message": "Not Found"}), method="GET")
    with pytest.raises(GitHubError) as info:
        client(httpserver).request("GET", "/repos/a/gone")
    assert info.value.status == 404
    assert "Not Found" in str(info.value)


def test_403_secondary_rate_limit_is_retried(httpserver):
    secondary = {"message": "You have exceeded a secondary rate limit. Please wait."}
    script = serve(httpserver, "/repos/a/b/dispatches", reply(403, secondary),
                   reply(403, secondary, {"Retry-After": "7"}), reply(204))
    sleeps = Sleeps()
    result = client(httpserver, _sleep=sleeps).dispatch("a/b", "e", {})
    assert result.ok and len(script.requests) == 3
    # Without Retry-After GitHub asks for at least a minute; with it, exactly what it says.
    assert sleeps == [60, 7]


def test_exhausted_rate_limit_waits_until_reset(httpserver):
    reset = int(time.time()) + 2
    limited = reply(403, {"message": "API rate limit exceeded"},
                    {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(reset)})
    script = serve(httpserver, "/repos/a/b/commits", limited, reply(200, []), method="GET")
    sleeps = Sleeps()
    assert client(httpserver, _sleep=sleeps).list_commits("a/b", "main") == []
    assert len(script.requests) == 2
    (wait,) = sleeps
    assert 1.5 <= wait <= 3.0  # until the reset second, plus 1 s for clock skew


def test_rate_limit_reset_beyond_the_budget_gives_up_without_waiting(httpserver):
    limited = reply(429, {"message": "API rate limit exceeded"},
                    {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(int(time.time()) + 3600)})
    script = serve(httpserver, "/repos/a/b/dispatches", limited)
    sleeps = Sleeps()
    result = client(httpserver, _sleep=sleeps).dispatch("a/b", "e", {})
    assert sleeps == [] and len(script.requests) == 1
    assert result.status == 429 and not result.refused and "budget" in result.error


def test_a_call_that_gave_up_says_when_github_asked_to_be_asked_again_only_for_a_rate_limit(httpserver):
    """A limit whose reset outlasts the wait budget: the error carries the reset (plus the second of
    skew), for a command to say when to run again; an outage's backoff promises no such time."""
    reset = int(time.time()) + 3600
    limited = reply(403, {"message": "API rate limit exceeded"},
                    {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(reset)})
    serve(httpserver, "/repos/a/limited", limited, method="GET")
    serve(httpserver, "/repos/a/down", reply(502, {"message": "Server Error"}), method="GET")
    gh = client(httpserver)
    with pytest.raises(GitHubError) as info:
        gh.request("GET", "/repos/a/limited")
    assert info.value.retry_at == pytest.approx(reset + 1, abs=1)
    with pytest.raises(GitHubError) as down:
        gh.request("GET", "/repos/a/down")
    assert (down.value.status, down.value.retry_at) == (502, None)


def test_read_timeout_is_retried(threaded_server):
    def stalled(request):
        time.sleep(0.6)
        return reply(200, [{"sha": "late"}])

    script = serve(threaded_server, "/repos/a/b/commits", stalled, reply(200, [{"sha": "s1"}]),
                   method="GET")
    sleeps = Sleeps()
    gh = client(threaded_server, _sleep=sleeps, read_timeout_s=0.2)
    assert gh.list_commits("a/b", "main") == [{"sha": "s1"}]
    assert len(script.requests) == 2
    assert sleeps == [1]


def test_connection_refused_ends_in_an_error_without_a_status(httpserver):
    gh = GitHubResource(api_url="http://127.0.0.1:9", token=TOKEN, max_retries=1,
                        connect_timeout_s=0.5)
    gh._sleep = Sleeps()
    result = gh.dispatch("a/b", "e", {})
    assert result.status is None and not result.ok and not result.refused
    assert result.attempts == 2 and result.error.startswith("ConnectionError")


def test_token_never_appears_in_logs_errors_or_reprs(httpserver, caplog):
    caplog.set_level(logging.DEBUG)
    # A server that echoes the credential back must not get it into our texts either.
    echo = lambda req: reply(401, {"message": f"Bad credentials: {req.headers['Authorization']}"})
    serve(httpserver, "/repos/a/echo/dispatches", echo)
    serve(httpserver, "/repos/a/storm/dispatches", reply(502))
    serve(httpserver, "/repos/a/echo", echo, method="GET")
    gh = client(httpserver, max_retries=2)
    results = [gh.dispatch("a/echo", "e", {}), gh.dispatch("a/storm", "e", {})]
    with pytest.raises(GitHubError) as info:
        gh.request("GET", "/repos/a/echo")
    assert results[0].refused and results[0].error == "HTTP 401: Bad credentials: Bearer ***"
    texts = [caplog.text, str(info.value), repr(info.value), repr(gh), str(gh),
             *map(repr, results)]
    assert caplog.text  # the calls were logged ...
    assert all(TOKEN not in t for t in texts)  # ... without the secret


def test_a_token_read_from_a_file_is_trimmed_and_one_that_is_no_token_is_never_sent_or_shown(httpserver, caplog):
    """Secrets mounted from files end with a newline, which requests refuses in a header with an
    error quoting the whole header: the token is trimmed, and what is still no token is refused
    by name, never by value."""
    caplog.set_level(logging.DEBUG)
    script = serve(httpserver, "/repos/a/b/dispatches", reply(204))
    assert client(httpserver, token=TOKEN + "\n").dispatch("a/b", "e", {}).ok
    assert [r.headers["Authorization"] for r in script.requests] == [f"Bearer {TOKEN}"]
    for bad in (TOKEN[:10] + "\n" + TOKEN[10:], TOKEN[:10] + " " + TOKEN[10:]):
        with pytest.raises(ValueError, match="GITHUB_TOKEN is not a token") as info:
            client(httpserver, token=bad).dispatch("a/b", "e", {})
        assert TOKEN[:10] not in str(info.value) and TOKEN[10:] not in str(info.value)
    assert len(script.requests) == 1 and TOKEN[10:] not in caplog.text


def test_a_request_that_cannot_be_made_ends_in_an_error_without_the_credential(httpserver, rsa_key, caplog):
    """An App installation token with a newline (the server's answer) makes requests raise while
    building the header, quoting it: the call ends in one error, the token redacted."""
    caplog.set_level(logging.DEBUG)
    key, pem = rsa_key
    serve(httpserver, "/app/installations/42/access_tokens", token_endpoint(key.public_key(), 3600, [], "\n"))
    installation(httpserver, "a/b", 42)
    dispatches = serve(httpserver, "/repos/a/b/dispatches", reply(204))
    gh = client(httpserver, token=None, app_id="1234", app_private_key=pem, app_installation_id="42")
    result = gh.dispatch("a/b", "e", {})
    assert not result.ok and result.status is None and result.attempts == 1 and dispatches.requests == []
    assert result.error.startswith("InvalidHeader") and "***" in result.error
    assert "ghs_installation1" not in result.error + caplog.text


def test_dry_run_sends_no_write_and_records_it(httpserver):
    posts = serve(httpserver, "/repos/a/b/dispatches", reply(204))
    gets = serve(httpserver, "/repos/a/b/commits", reply(200, [{"sha": "s"}]), method="GET")
    gh = GitHubResource(api_url=httpserver.url_for(""))
    assert gh.dry_run
    result = gh.dispatch("a/b", "pytorch-commit", {"sha": "s"})
    assert gh.request("post", "/repos/a/b/dispatches", json_body={"x": 1}) is None
    assert posts.requests == []
    assert (result.dry_run, result.ok, result.status, result.attempts) == (True, False, None, 0)
    url = httpserver.url_for("/repos/a/b/dispatches")
    assert gh.dry_run_requests == [
        {"method": "POST", "url": url,
         "json": {"event_type": "pytorch-commit", "client_payload": {"sha": "s"}}},
        {"method": "POST", "url": url, "json": {"x": 1}},
    ]
    # Reads still work, unauthenticated.
    assert gh.list_commits("a/b", "main") == [{"sha": "s"}]
    assert "Authorization" not in gets.requests[0].headers
    assert not GitHubResource(token=TOKEN).dry_run


@pytest.mark.parametrize("args, message", [
    (("a/b", "e" * 101, {}), "event_type is 101 characters; GitHub allows at most 100"),
    (("a/b", "", {}), "event_type must be a non-empty string"),
    (("a/b", "e", {f"k{i}": i for i in range(11)}), "11 top-level keys; GitHub allows at most 10"),
    (("a/b", "e", {"blob": "x" * 65530}), "client_payload is 65541 bytes as JSON"),
    (("a/b", "e", {"t": {1, 2}}), "client_payload is not serializable as JSON"),
    (("a/b", "e", ["list"]), "client_payload must be a JSON object, got list"),
    (("a/../../x", "e", {}), "dispatch target"),
])
def test_invalid_dispatch_is_rejected_before_sending(httpserver, args, message):
    script = serve(httpserver, "/repos/a/b/dispatches", reply(204))
    with pytest.raises(ValueError, match="^.*" + message.replace("(", r"\(").replace(")", r"\)")):
        client(httpserver).dispatch(*args)
    assert script.requests == []


def test_payload_at_the_limits_is_accepted(httpserver):
    serve(httpserver, "/repos/a/b/dispatches", reply(204))
    payload = {f"k{i}": "" for i in range(9)}
    payload["blob"] = "x" * (65535 - len(json.dumps({**payload, "blob": ""}, separators=(",", ":"))))
    assert client(httpserver).dispatch("a/b", "e" * 100, payload).ok


def test_list_commits_follows_links_up_to_the_bound(httpserver):
    def page(n):
        link = f'<{httpserver.url_for("/repos/a/b/commits")}?sha=main&page={n + 1}>; rel="next"'
        return reply(200, [{"sha": f"c{n}"}], {"Link": link})

    script = serve(httpserver, "/repos/a/b/commits", page(1), page(2), page(3), method="GET")
    gh = client(httpserver, max_pages=2)
    since = dt.datetime(2026, 11, 1, 12, 0, tzinfo=dt.timezone.utc)
    assert gh.list_commits("a/b", "main", since=since, per_page=1) == [{"sha": "c1"}, {"sha": "c2"}]
    assert len(script.requests) == 2
    first, second = script.requests
    assert first.args.to_dict() == {"sha": "main", "per_page": "1", "since": "2026-11-01T12:00:00Z"}
    assert second.args.to_dict() == {"sha": "main", "page": "2"}


def test_pagination_never_follows_a_foreign_host(httpserver):
    serve(httpserver, "/repos/a/b/commits",
          reply(200, [], {"Link": '<https://evil.example/steal?page=2>; rel="next"'}), method="GET")
    with pytest.raises(ValueError, match="refusing to call 'https://evil.example"):
        client(httpserver).list_commits("a/b", "main")


def test_partial_app_config_is_an_error_not_a_dry_run(httpserver):
    gh = client(httpserver, token=None, app_id="123")
    assert not gh.dry_run
    with pytest.raises(ValueError, match="GITHUB_APP_PRIVATE_KEY not set"):
        gh.dispatch("a/b", "e", {})


def test_app_auth_without_cryptography_says_what_is_missing(httpserver, monkeypatch):
    # Not installed: the package and any of its modules another test already imported.
    for name in [m for m in sys.modules if m.startswith("cryptography.")] + ["cryptography"]:
        monkeypatch.setitem(sys.modules, name, None)
    gh = client(httpserver, token=None, app_id="1", app_private_key="pem", app_installation_id="2")
    with pytest.raises(RuntimeError, match="needs the 'cryptography' package"):
        gh.dispatch("a/b", "e", {})


# ---- GitHub App flow (needs the `cryptography` package) -------------------------------


def _b64decode(part):
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


@pytest.fixture(scope="module")
def rsa_key():
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    return key, pem


def token_endpoint(public_key, expires_in_s, seen_claims, token_suffix=""):
    """A fake /access_tokens that checks the JWT's RS256 signature like GitHub does."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding

    def handle(request):
        jwt = request.headers["Authorization"].removeprefix("Bearer ")
        header, claims, signature = jwt.split(".")
        public_key.verify(_b64decode(signature), f"{header}.{claims}".encode(),
                          padding.PKCS1v15(), hashes.SHA256())  # raises if forged
        assert json.loads(_b64decode(header)) == {"alg": "RS256", "typ": "JWT"}
        seen_claims.append(json.loads(_b64decode(claims)))
        expires = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=expires_in_s)
        n = len(seen_claims)
        return reply(201, {"token": f"ghs_installation{n}{token_suffix}",
                           "expires_at": expires.strftime("%Y-%m-%dT%H:%M:%SZ")})

    return handle


def installation(httpserver, owner_repo, installation_id, seen=None):
    """GitHub's `GET /repos/{owner}/{repo}/installation`: the App's installation on the
    repository's account, for a request signed with the App's JWT (an installation token is 401)."""
    def handle(request):
        if seen is not None:
            seen.append(request.headers.get("Authorization", ""))
        if not request.headers.get("Authorization", "").startswith("Bearer ey"):
            return reply(401, {"message": "A JSON web token could not be decoded"})
        if installation_id is None:
            return reply(404, {"message": "Not Found"})
        owner = owner_repo.split("/")[0]
        return reply(200, {"id": int(installation_id), "account": {"login": owner}, "app_id": 1234,
                           "target_type": "Organization", "repository_selection": "selected",
                           "access_tokens_url": f"https://api.github.com/app/installations/{installation_id}/access_tokens"})

    return serve(httpserver, f"/repos/{owner_repo}/installation", handle, method="GET")


def test_app_auth_mints_and_caches_an_installation_token(httpserver, rsa_key, caplog):
    caplog.set_level(logging.DEBUG)
    key, pem = rsa_key
    claims = []
    minting = serve(httpserver, "/app/installations/42/access_tokens",
                    token_endpoint(key.public_key(), 3600, claims))
    installation(httpserver, "a/b", 42)
    dispatches = serve(httpserver, "/repos/a/b/dispatches", reply(204))
    gh = client(httpserver, token=None, app_id="1234", app_private_key=pem,
                app_installation_id="42")
    assert gh.dispatch("a/b", "e", {}).ok and gh.dispatch("a/b", "e", {}).ok
    assert len(minting.requests) == 1  # cached for the second call
    assert [r.headers["Authorization"] for r in dispatches.requests] == \
        ["Bearer ghs_installation1"] * 2
    (c,) = claims
    assert c["iss"] == 1234 and 0 < c["exp"] - c["iat"] <= 600
    assert c["iat"] <= time.time() <= c["exp"]
    assert "ghs_installation1" not in caplog.text and "BEGIN PRIVATE KEY" not in caplog.text
    assert "BEGIN" not in repr(gh)


def test_app_token_close_to_expiry_is_renewed(httpserver, rsa_key):
    key, pem = rsa_key
    claims = []
    minting = serve(httpserver, "/app/installations/42/access_tokens",
                    token_endpoint(key.public_key(), 120, claims))  # inside the 5 min margin
    installation(httpserver, "a/b", 42)
    dispatches = serve(httpserver, "/repos/a/b/dispatches", reply(204))
    # A key pasted into an env var with literal "\n" still works.
    gh = client(httpserver, token=None, app_id="1234", app_private_key=pem.replace("\n", "\\n"),
                app_installation_id="42")
    gh.dispatch("a/b", "e", {})
    gh.dispatch("a/b", "e", {})
    assert len(minting.requests) == 2
    assert [r.headers["Authorization"] for r in dispatches.requests] == \
        ["Bearer ghs_installation1", "Bearer ghs_installation2"]


def test_failed_token_exchange_raises_with_status(httpserver, rsa_key):
    _, pem = rsa_key
    serve(httpserver, "/app/installations/42/access_tokens",
          reply(404, {"message": "Integration not found"}))
    installation(httpserver, "a/b", 42)
    gh = client(httpserver, token=None, app_id="1234", app_private_key=pem,
                app_installation_id="42")
    with pytest.raises(GitHubError, match="installation token request failed: HTTP 404") as info:
        gh.dispatch("a/b", "e", {})
    assert info.value.status == 404


def test_each_repository_is_reached_with_its_own_accounts_installation(httpserver, rsa_key, caplog):
    """An installation's token reaches one account's repositories: the upstream and downstreams
    of other organizations each get their account's installation (looked up once per owner);
    a call outside a repository uses GITHUB_APP_INSTALLATION_ID, and a repository whose account
    has not installed the App is refused with GitHub's 404, nothing sent to it."""
    caplog.set_level(logging.DEBUG)
    key, pem = rsa_key
    for inst in (42, 43, 7):
        serve(httpserver, f"/app/installations/{inst}/access_tokens",
              lambda request, inst=inst: reply(201, {"token": f"ghs_inst{inst}", "expires_at": "2099-01-01T00:00:00Z"}))
    lookups = []
    installation(httpserver, "pytorch/pytorch", 42, lookups)
    installation(httpserver, "pytorch/test-infra", 42, lookups)
    installation(httpserver, "acme-ai/torch-npu", 43, lookups)
    installation(httpserver, "nobody/there", None, lookups)
    sent = {repo: serve(httpserver, f"/repos/{repo}/dispatches", reply(204))
            for repo in ("pytorch/pytorch", "pytorch/test-infra", "acme-ai/torch-npu", "nobody/there")}
    search = serve(httpserver, "/search/issues", reply(200, {"total_count": 0, "incomplete_results": False,
                                                              "items": []}), method="GET")
    gh = client(httpserver, token=None, app_id="1234", app_private_key=pem, app_installation_id="7")
    results = {repo: gh.dispatch(repo, "e", {}) for repo in sent}
    assert gh.search_issues("repo:pytorch/pytorch DISABLED") == []
    assert {repo: [r.headers["Authorization"] for r in s.requests] for repo, s in sent.items()} == {
        "pytorch/pytorch": ["Bearer ghs_inst42"], "pytorch/test-infra": ["Bearer ghs_inst42"],
        "acme-ai/torch-npu": ["Bearer ghs_inst43"], "nobody/there": []}
    assert [r.headers["Authorization"] for r in search.requests] == ["Bearer ghs_inst7"]
    assert len(lookups) == 3 and all(a.startswith("Bearer ey") for a in lookups)  # pytorch's once
    refused = results["nobody/there"]
    assert (refused.ok, refused.refused, refused.status) == (False, True, 404)
    assert "not installed on nobody" in refused.error
    assert all(r.ok for repo, r in results.items() if repo != "nobody/there")
    assert "ghs_inst" not in caplog.text and "Bearer ey" not in caplog.text


def test_next_pages_naming_the_repository_by_id_carry_its_installations_token(httpserver, rsa_key):
    """GitHub's next-page links of a repository's lists name it by id (`/repositories/<id>/...`):
    every page goes with the installation of the repository the list is of, not the default one."""
    _, pem = rsa_key
    for inst in (43, 7):
        serve(httpserver, f"/app/installations/{inst}/access_tokens",
              lambda request, inst=inst: reply(201, {"token": f"ghs_inst{inst}", "expires_at": "2099-01-01T00:00:00Z"}))
    installation(httpserver, "acme-ai/torch-npu", 43)
    page2 = httpserver.url_for("/repositories/65600975/commits") + "?sha=main&page=2"
    first = serve(httpserver, "/repos/acme-ai/torch-npu/commits",
                  reply(200, [{"sha": "a"}], {"Link": f'<{page2}>; rel="next"'}), method="GET")
    second = serve(httpserver, "/repositories/65600975/commits", reply(200, [{"sha": "b"}]), method="GET")
    for default in ("7", None):
        gh = client(httpserver, token=None, app_id="1234", app_private_key=pem, app_installation_id=default)
        assert [c["sha"] for c in gh.list_commits("acme-ai/torch-npu", "main")] == ["a", "b"]
    assert [r.headers["Authorization"] for r in first.requests + second.requests] == ["Bearer ghs_inst43"] * 4


def test_a_token_that_expired_during_a_rate_limit_wait_is_renewed_for_the_retry(httpserver, rsa_key):
    """Waiting out a spent hourly budget can outlast an installation token: the retry after the
    wait carries a token valid then, not the one the first attempt had."""
    key, pem = rsa_key
    # 301 s: valid for one more second (tokens are renewed 5 minutes before GitHub's expiry)
    serve(httpserver, "/app/installations/42/access_tokens", token_endpoint(key.public_key(), 301, []))
    installation(httpserver, "a/b", 42)
    reset = str(int(time.time()) + 2400)

    def dispatches(request):
        if len(script.requests) == 1:
            return reply(403, {"message": "API rate limit exceeded"},
                         {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": reset})
        if request.headers["Authorization"] != "Bearer ghs_installation2":
            return reply(401, {"message": "Bad credentials"})
        return reply(204)

    script = serve(httpserver, "/repos/a/b/dispatches", dispatches)
    waits = []
    gh = client(httpserver, token=None, app_id="1234", app_private_key=pem, app_installation_id="42",
                max_total_wait_s=3900, _sleep=lambda s: (waits.append(s), time.sleep(1.2)))
    result = gh.dispatch("a/b", "e", {})
    assert result.ok and len(waits) == 1 and waits[0] > 2000
    assert [r.headers["Authorization"] for r in script.requests] == \
        ["Bearer ghs_installation1", "Bearer ghs_installation2"]


def test_a_401_to_an_installation_token_is_retried_once_with_a_new_token(httpserver, rsa_key):
    """GitHub can revoke an installation token before its expiry: one 401 is retried with a fresh
    token; a second is final (a personal token's 401 is final at once)."""
    key, pem = rsa_key
    minting = serve(httpserver, "/app/installations/42/access_tokens", token_endpoint(key.public_key(), 3600, []))
    installation(httpserver, "a/b", 42)
    installation(httpserver, "a/c", 42)
    ok = serve(httpserver, "/repos/a/b/dispatches", reply(401, {"message": "Bad credentials"}), reply(204))
    never = serve(httpserver, "/repos/a/c/dispatches", reply(401, {"message": "Bad credentials"}))
    gh = client(httpserver, token=None, app_id="1234", app_private_key=pem, app_installation_id="42")
    assert gh.dispatch("a/b", "e", {}).ok
    assert [r.headers["Authorization"] for r in ok.requests] == ["Bearer ghs_installation1", "Bearer ghs_installation2"]
    refused = gh.dispatch("a/c", "e", {})
    assert refused.refused and refused.status == 401 and len(never.requests) == 2 and len(minting.requests) == 3
    personal = serve(httpserver, "/repos/a/d/dispatches", reply(401, {"message": "Bad credentials"}))
    assert client(httpserver).dispatch("a/d", "e", {}).refused and len(personal.requests) == 1


def test_the_account_a_client_writes_as_is_a_tokens_user_or_an_apps_bot(httpserver, rsa_key):
    """What GitHub will name as the author of an issue this client files: `GET /user` for a
    token, `<slug>[bot]` from `GET /app` (signed with the App's JWT, no installation token) for
    an App; nothing in dry run; a refusal is GitHub's error, for the caller to fall back."""
    examples = json.loads((Path(__file__).parent / "data" / "octokit-openapi" / "examples.json").read_text())
    user = serve(httpserver, "/user", reply(200, examples["private-user"]), reply(403, {"message": "no"}),
                 method="GET")
    assert client(httpserver).account() == examples["private-user"]["login"] == "octocat"
    assert user.requests[0].headers["Authorization"] == f"Bearer {TOKEN}"
    with pytest.raises(GitHubError) as refused:
        client(httpserver).account()
    assert refused.value.status == 403
    key, pem = rsa_key
    app = serve(httpserver, "/app", reply(200, examples["integration"]), method="GET")
    gh = client(httpserver, token=None, app_id="1234", app_private_key=pem, app_installation_id="42")
    assert gh.account() == "octoapp[bot]"
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding

    header, claims, signature = app.requests[0].headers["Authorization"].removeprefix("Bearer ").split(".")
    key.public_key().verify(_b64decode(signature), f"{header}.{claims}".encode(), padding.PKCS1v15(),
                            hashes.SHA256())  # the App's own JWT, as GitHub requires for /app
    assert json.loads(_b64decode(claims))["iss"] == 1234
    assert GitHubResource(api_url=httpserver.url_for("")).account() is None


def test_graphql_goes_to_graphql_beside_the_rest_root_and_no_elsewhere():
    """GitHub's GraphQL endpoint is not under GitHub Enterprise Server's REST root (`/api/v3`) but beside
    it: the client calls it there, and still refuses any other address outside the REST root."""
    from resources.github import GitHubResource

    assert GitHubResource().graphql_url == "https://api.github.com/graphql"
    ghes = GitHubResource(api_url="https://ghe.example.com/api/v3/")
    assert ghes.graphql_url == "https://ghe.example.com/api/graphql"
    assert ghes._url(ghes.graphql_url) == "https://ghe.example.com/api/graphql"
    with pytest.raises(ValueError, match="refusing"):
        ghes._url("https://ghe.example.com/api/other")
