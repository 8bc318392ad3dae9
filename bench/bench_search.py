"""The search requests of a read of every open DISABLED issue, at 1,000 and more.

GitHub returns at most 1,000 results of a search; one that matches more is read in creation-date
ranges halved until each matches at most 1,000 (`GitHubResource.search_issues`). The issues: N open
DISABLED issues filed at an even pace over the last --days days. GitHub: the fake issues API
(tests/fake_github_issues.py) on 127.0.0.1, which serves the first 1,000 results of a query and
reads `created:`. Reported per N: the search requests of one read, the pages alone (N/100), and
the read's time at GitHub's 30 searches a minute (the client's 2 s spacing).

Run as `make bench-search` (python bench/bench_search.py [--days 730 180]).
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import sys
from pathlib import Path

from pytest_httpserver import HTTPServer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from fake_github_issues import FakeIssueTracker  # noqa: E402

from resources.github import GitHubResource  # noqa: E402

QUERY = "repo:pytorch/pytorch is:issue is:open in:title DISABLED"
SIZES = (1000, 1001, 2000, 2500, 5000, 10000)


def requests_of_a_read(n: int, days: int) -> int:
    server = HTTPServer(host="127.0.0.1", port=0)
    server.start()
    try:
        fake = FakeIssueTracker(server)
        at = dt.datetime.now(dt.timezone.utc)
        fake.clock = lambda: at
        for i in range(n):
            fake.add(f"DISABLED test_{i} (__main__.T)", age=dt.timedelta(seconds=int(i * days * 86400 / n)))
        found = GitHubResource(api_url=server.url_for(""), token="t", search_interval_s=0).search_issues(QUERY)
        assert len(found) == n, f"read {len(found)} of {n}"
        return len(fake.requests)
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, nargs="+", default=[730, 180])
    args = parser.parse_args()
    logging.disable(logging.CRITICAL)
    print("| issues filed over | open DISABLED issues | search requests | pages alone | at 30 a minute |")
    print("|---|---|---|---|---|")
    for days in args.days:
        for n in SIZES:
            sent = requests_of_a_read(n, days)
            print(f"| {days} days | {n:,} | {sent} | {-(-n // 100)} | {sent * 2} s |")


if __name__ == "__main__":
    main()
