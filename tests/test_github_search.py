"""GitHubResource's search, pagination, pacing and non-idempotent writes, against a real HTTP
server on 127.0.0.1 (pytest-httpserver)."""

import time

import pytest

from resources.github import GitHubError, GitHubResource
from test_github_resource import Sleeps, client, reply, serve


def search_page(httpserver, n, total, items, last=False, **extra):
    headers = {} if last else {"Link": f'<{httpserver.url_for("/search/issues")}?q=x&per_page=2&page={n + 1}>; '
                                       'rel="next"'}
    return reply(200, {"total_count": total, "incomplete_results": False, "items": items, **extra}, headers)


def items(*ids):
    return [{"id": i, "number": i, "title": f"DISABLED test_{i} (__main__.T)"} for i in ids]


def test_search_follows_pages_and_spaces_its_calls_for_the_search_limit(httpserver):
    script = serve(httpserver, "/search/issues", search_page(httpserver, 1, 5, items(1, 2)),
                   search_page(httpserver, 2, 5, items(3, 4)), search_page(httpserver, 3, 5, items(5), last=True),
                   method="GET")
    sleeps = Sleeps()
    gh = client(httpserver, _sleep=sleeps)  # default search_interval_s: 2 s, 30 a minute
    found = gh.search_issues("repo:pytorch/pytorch is:issue is:open in:title DISABLED", per_page=2)
    assert [i["number"] for i in found] == [1, 2, 3, 4, 5]
    assert script.requests[0].args.to_dict() == {"q": "repo:pytorch/pytorch is:issue is:open in:title DISABLED",
                                                 "per_page": "2"}
    assert script.requests[1].args.to_dict()["page"] == "2"
    assert len(sleeps) == 2 and all(1.9 <= s <= 2.0 for s in sleeps)  # between pages, not before the first


def test_an_exhausted_search_bucket_is_waited_out_before_the_next_search(httpserver):
    reset = int(time.time()) + 3
    last = {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(reset), "X-RateLimit-Resource": "search"}
    serve(httpserver, "/search/issues", reply(200, {"total_count": 1, "incomplete_results": False,
                                                    "items": items(1)}, last), method="GET")
    serve(httpserver, "/repos/a/b/issues", reply(200, []), method="GET")
    sleeps = Sleeps()
    gh = client(httpserver, _sleep=sleeps, search_interval_s=0)
    gh.search_issues("q")
    gh.paginate("/repos/a/b/issues")  # the core bucket is another: no wait
    assert sleeps == []
    gh.search_issues("q")  # waits for the reset instead of collecting a 403
    (wait,) = sleeps
    assert 2.5 <= wait <= 4.0


def test_a_secondary_rate_limit_on_search_is_retried(httpserver):
    limited = reply(403, {"message": "You have exceeded a secondary rate limit. Please wait a few minutes."},
                    {"Retry-After": "3"})
    serve(httpserver, "/search/issues", limited, search_page(httpserver, 1, 1, items(7), last=True), method="GET")
    sleeps = Sleeps()
    assert [i["number"] for i in client(httpserver, _sleep=sleeps).search_issues("q")] == [7]
    assert sleeps == [3]


def test_incomplete_or_oversized_searches_are_errors_not_partial_lists(httpserver):
    serve(httpserver, "/search/issues", reply(200, {"total_count": 3, "incomplete_results": True,
                                                    "items": items(1)}), method="GET")
    with pytest.raises(GitHubError, match="incomplete results"):
        client(httpserver).search_issues("q")
    httpserver.clear()
    serve(httpserver, "/search/issues", search_page(httpserver, 1, 1500, items(1, 2)), method="GET")
    with pytest.raises(GitHubError, match="1500 matches, more than the 1000 GitHub returns"):
        client(httpserver).search_issues("q")


def test_pages_that_do_not_add_up_are_read_again_once(httpserver):
    # an issue closed between two pages shifts the second page: 3 counted, 2 read
    shifted = [search_page(httpserver, 1, 3, items(1, 2)), search_page(httpserver, 2, 3, items(2), last=True)]
    whole = [search_page(httpserver, 1, 2, items(1, 3)), search_page(httpserver, 2, 2, [], last=True)]
    serve(httpserver, "/search/issues", *shifted, *whole, method="GET")
    gh = client(httpserver, search_interval_s=0)
    assert sorted(i["number"] for i in gh.search_issues("q", per_page=2)) == [1, 3]
    httpserver.clear()
    serve(httpserver, "/search/issues", *shifted, method="GET")  # keeps disagreeing
    with pytest.raises(GitHubError, match="read 1 results but GitHub counted 3"):
        client(httpserver, search_interval_s=0).search_issues("q", per_page=2)


def test_a_create_without_a_clear_answer_is_not_resent(httpserver):
    script = serve(httpserver, "/repos/a/b/issues", reply(502, {"message": "Server Error"}), reply(201, {"number": 1}))
    with pytest.raises(GitHubError) as info:
        client(httpserver).request("POST", "/repos/a/b/issues", json_body={"title": "t"}, retry_ambiguous=False)
    assert info.value.ambiguous and info.value.status == 502 and len(script.requests) == 1
    # a timeout is as ambiguous: GitHub may have created it
    gh = GitHubResource(api_url="http://127.0.0.1:9", token="t", connect_timeout_s=0.2)
    gh._sleep = Sleeps()
    with pytest.raises(GitHubError) as info:
        gh.request("POST", "/repos/a/b/issues", json_body={}, retry_ambiguous=False)
    assert info.value.ambiguous and info.value.status is None


def test_a_rate_limited_create_is_retried_because_github_did_nothing(httpserver):
    secondary = reply(403, {"message": "You have exceeded a secondary rate limit"}, {"Retry-After": "2"})
    script = serve(httpserver, "/repos/a/b/issues", secondary, reply(201, {"number": 5}))
    sleeps = Sleeps()
    resp = client(httpserver, _sleep=sleeps).request("POST", "/repos/a/b/issues", json_body={"title": "t"},
                                                     retry_ambiguous=False)
    assert resp.json() == {"number": 5} and len(script.requests) == 2 and sleeps == [2]


def test_writes_are_spaced_and_reads_are_not(httpserver):
    serve(httpserver, "/repos/a/b/issues/1", reply(200, {"number": 1}), method="PATCH")
    serve(httpserver, "/repos/a/b/issues/1", reply(200, {"number": 1}), method="GET")
    sleeps = Sleeps()
    gh = client(httpserver, _sleep=sleeps)
    for _ in range(2):
        gh.request("GET", "/repos/a/b/issues/1")
    assert sleeps == []
    for _ in range(3):
        gh.request("PATCH", "/repos/a/b/issues/1", json_body={"state": "open"})
    assert len(sleeps) == 2 and all(0.9 <= s <= 1.0 for s in sleeps)


def test_paginate_refuses_or_truncates_when_pages_remain(httpserver):
    def page(request):
        n = int(request.args.get("page", 1))
        return reply(200, [{"n": n}], {"Link": f'<{httpserver.url_for("/repos/a/b/issues")}?page={n + 1}>; rel="next"'})

    serve(httpserver, "/repos/a/b/issues", page, method="GET")
    with pytest.raises(GitHubError, match="more than 2 pages"):
        client(httpserver, max_pages=2).paginate("/repos/a/b/issues")
    assert client(httpserver, max_pages=2).paginate("/repos/a/b/issues", must_complete=False) == [{"n": 1}, {"n": 2}]


@pytest.mark.parametrize("api, web", [("https://api.github.com", "https://github.com"),
                                      ("https://ghe.example.com/api/v3/", "https://ghe.example.com"),
                                      ("http://127.0.0.1:8080", "http://127.0.0.1:8080")])
def test_links_for_humans_use_the_web_address(api, web):
    assert GitHubResource(api_url=api).web_url == web
