"""GitHubResource's search, pagination, pacing and non-idempotent writes, against a real HTTP
server on 127.0.0.1 (pytest-httpserver)."""

import datetime as dt
import time

import pytest
from fake_github_issues import FakeIssueTracker, created_within

from resources.github import GitHubError, GitHubResource, created_qualifier, split_created
from test_github_resource import Sleeps, client, reply, serve

UTC = dt.timezone.utc
DISABLED = "repo:pytorch/pytorch is:issue is:open in:title DISABLED"


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
                                                 "per_page": "2", "sort": "created", "order": "asc"}
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
    # a server that counts 1500 whatever the creation range (GitHub not reading `created:`) is no
    # reason to split ranges forever
    httpserver.clear()
    script = serve(httpserver, "/search/issues", search_page(httpserver, 1, 1500, items(1, 2)), method="GET")
    with pytest.raises(GitHubError, match="do not add up"):
        client(httpserver, search_interval_s=0).search_issues("q")
    assert len(script.requests) == 7  # the whole, its halves, their four halves


def test_creation_ranges_halve_by_time_the_later_half_left_open():
    now = dt.datetime(2025, 6, 1, tzinfo=UTC)
    first, later = split_created(None, None, now)
    assert first[0] is None and later[1] is None and later[0] - first[1] == dt.timedelta(seconds=1)
    github_launch = dt.datetime(2008, 1, 1, tzinfo=UTC)
    assert first[1] == github_launch + (now - github_launch) / 2
    a, b = dt.datetime(2024, 1, 1, tzinfo=UTC), dt.datetime(2024, 1, 1, 0, 0, 3, tzinfo=UTC)
    assert split_created(a, b, now) == ((a, a + dt.timedelta(seconds=1)), (a + dt.timedelta(seconds=2), b))
    assert split_created(a, a, now) is None  # one second: nothing to split
    assert split_created(now, None, now) is None
    assert created_qualifier(None, None) == ""
    assert created_qualifier(a, b) == "created:2024-01-01T00:00:00Z..2024-01-01T00:00:03Z"
    assert created_qualifier(None, b) == "created:<=2024-01-01T00:00:03Z"
    assert created_qualifier(a, None) == "created:>=2024-01-01T00:00:00Z"


def test_the_fake_reads_created_as_github_does():
    # GitHub's syntax: a date stands for its whole day, a time for its second, `*` for no bound
    assert created_within("2024-01-01..2024-02-01", "2024-02-01T23:59:59Z")
    assert not created_within("2024-01-01..2024-02-01", "2024-02-02T00:00:00Z")
    assert created_within("2024-01-01T10:00:00Z..2024-01-01T10:00:05Z", "2024-01-01T10:00:05Z")
    assert not created_within("2024-01-01T10:00:00Z..2024-01-01T10:00:05Z", "2024-01-01T10:00:06Z")
    assert created_within(">=2024-03-01", "2024-03-01T00:00:00Z")
    assert not created_within(">2024-03-01", "2024-03-01T12:00:00Z")
    assert created_within("<=2024-03-01T00:00:00Z", "2024-03-01T00:00:00Z")
    assert not created_within("<2024-03-01", "2024-03-01T00:00:00Z")
    assert created_within("2024-03-01..*", "2030-01-01T00:00:00Z")
    assert created_within("*..2024-03-01", "2009-01-01T00:00:00Z")
    assert created_within("2024-03-01", "2024-03-01T18:00:00Z")
    assert not created_within("2024-03-01", "2024-03-02T00:00:00Z")


def searches(fake) -> list[dict]:
    return [a for m, p, a in fake.requests if p == "/search/issues"]


def test_a_search_matching_more_than_github_returns_is_read_in_creation_ranges(httpserver):
    fake = FakeIssueTracker(httpserver)
    filed = [fake.add(f"DISABLED test_{i} (__main__.T)", age=dt.timedelta(hours=7 * (i // 3))) for i in range(2500)]
    fake.add("DISABLED test_done (__main__.T)", state="closed")
    sleeps = Sleeps()
    found = client(httpserver, _sleep=sleeps).search_issues(DISABLED)
    assert sorted(i["number"] for i in found) == sorted(i["number"] for i in filed)  # each once
    asked = searches(fake)
    assert asked[0] == {"q": DISABLED, "per_page": "100", "sort": "created", "order": "asc"}  # the whole: 2500
    assert all(a["q"].startswith(DISABLED + " created:") for a in asked[1:])
    assert len(sleeps) == len(asked) - 1  # every search spaced for the search limit


def test_the_creation_ranges_start_at_the_oldest_match_not_at_githubs_launch(httpserver):
    """Issues filed over the last two years: the ranges are halved from the oldest match's
    creation (the whole search's first page, oldest first, names it), so no search of the 30 a
    minute is spent on the empty years before it."""
    fake = FakeIssueTracker(httpserver)
    filed = [fake.add(f"DISABLED test_{i} (__main__.T)", age=dt.timedelta(hours=17 * i)) for i in range(1001)]
    found = client(httpserver, search_interval_s=0).search_issues(DISABLED)
    assert len(found) == 1001
    ranges = {a["q"].split(" created:")[1] for a in searches(fake) if " created:" in a["q"]}
    empty = [r for r in ranges if not any(created_within(r, i["created_at"]) for i in filed)]
    assert empty == [] and len(searches(fake)) == 1 + 11  # the whole, then the pages of its two halves


def test_a_search_matching_at_most_1000_costs_its_pages_alone(httpserver):
    fake = FakeIssueTracker(httpserver)
    for i in range(1000):
        fake.add(f"DISABLED test_{i} (__main__.T)", age=dt.timedelta(hours=i))
    assert len(client(httpserver).search_issues(DISABLED)) == 1000
    assert [a.get("page", "1") for a in searches(fake)] == [str(n) for n in range(1, 11)]
    assert all(a["q"] == DISABLED for a in searches(fake))


def test_issues_filed_while_the_ranges_are_read_are_in_the_list(httpserver):
    fake = FakeIssueTracker(httpserver)
    for i in range(1500):
        fake.add(f"DISABLED test_{i} (__main__.T)", age=dt.timedelta(hours=i))
    answer = fake.search

    def filing_after_the_first(request):
        response = answer(request)
        if len(fake.requests) == 1:
            fake.add("DISABLED test_new (__main__.T)", age=dt.timedelta(0))
        return response

    httpserver.clear()
    httpserver.expect_request("/search/issues", method="GET").respond_with_handler(filing_after_the_first)
    found = client(httpserver, search_interval_s=0).search_issues(DISABLED)
    assert len(found) == 1501 and "DISABLED test_new (__main__.T)" in {i["title"] for i in found}


def test_more_than_github_returns_created_in_one_second_is_an_error_not_a_partial_list(httpserver):
    fake = FakeIssueTracker(httpserver)
    at = dt.datetime(2025, 3, 1, 12, 0, 7, tzinfo=UTC)
    fake.clock = lambda: at
    for i in range(1001):
        fake.add(f"DISABLED test_{i} (__main__.T)", age=dt.timedelta(0))
    with pytest.raises(GitHubError, match="1001 matches created in one second, 2025-03-01T12:00:07Z"):
        client(httpserver, search_interval_s=0).search_issues(DISABLED)


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
