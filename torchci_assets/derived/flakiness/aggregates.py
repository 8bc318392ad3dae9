"""Many tests of one file flaking at once: one aggregate DISABLED issue, not one issue each.

When a file's fixture or a shared helper breaks, dozens of its tests flake together; one issue
per test floods the tracker and the owners. PyTorch's flaky bot (pytorch/test-infra
`torchci/lib/flakyBot/aggregateDisableIssue.ts`) then files one issue for the file, and the
disabled list (the HUD's `getDisabledTestsAndJobs`, see issue_text.py) takes every test listed in
it. The format, followed here to the letter:

    title   DISABLED MULTIPLE There are multiple flaky tests in <file>
    body    There are multiple flaky tests in <file>. Please investigate and fix the flakiness.

            disable the following tests:
            ```
            test_a (__main__.TestX): linux, win
            test_b (__main__.TestX):
            ```
            (then the example of one test, as a single issue's body)

A line with no platforms disables the test everywhere. An aggregate is filed when more than
AGGREGATE_ABOVE tests of one file would get a new issue in the same run; tests added later to a
file that already has an open aggregate are added to its list, and a listed test that flakes on
main somewhere new has its line widened. Its tests are re-enabled and retired one by one, their
lines narrowed or dropped, and the aggregate closed when none is left (aggregate_lifecycle.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from torchci_assets.derived.flakiness.issue_text import (DISABLED_PREFIX, is_aggregate_title, line_for_test,
                                                        multiple_tests, platforms_line)

# PyTorch's flaky bot files an aggregate above this many tests of one file
AGGREGATE_ABOVE = 4
AGGREGATE_LABEL = "aggregate flaky test issue"
_START = "disable the following tests:"
_FENCE = "```"


def aggregate_title(file: str) -> str:
    return f"{DISABLED_PREFIX} MULTIPLE There are multiple flaky tests in {file}"


def is_aggregate(title: str | None) -> bool:
    """Upstream's `isAggregateIssue`, read where the condensed list reads it."""
    return is_aggregate_title(title)


def tests_block(platforms: dict[str, list[str]]) -> str:
    """The list PyTorch parses: one `test: platforms` line per test, sorted."""
    lines = [f"{test}: {', '.join(platforms[test])}".strip() for test in sorted(platforms)]
    return "\n".join([_START, _FENCE, *lines, _FENCE]) + "\n"


def aggregate_body(file: str, platforms: dict[str, list[str]], example: str) -> str:
    """A new aggregate's body: the list, then one test's single-issue body as the example (it
    ends with this project's marker)."""
    return (f"There are multiple flaky tests in {file}. Please investigate and fix the flakiness.\n\n"
            f"{tests_block(platforms)}\nHere is an example:\n{example}")


def listed(title: str | None, body: str | None) -> dict[str, list[str]]:
    """The tests an aggregate issue lists, with their platforms."""
    return dict(multiple_tests(title, body))


def with_tests(title: str, body: str, added: dict[str, list[str]]) -> str:
    """`body` with `added` tests in its list, or their lines replaced under the names they are
    written with (`line_for_test`: a dotted suite stays dotted; see `with_list`)."""
    lines = listed(title, body)
    return with_list(body, {**lines, **{line_for_test(lines, t) or t: p for t, p in added.items()}})


def with_list(body: str, platforms: dict[str, list[str]]) -> str:
    """`body` with its list set to `platforms` (rewritten sorted, the rest kept as it is), as
    upstream's updateAggregateFlakyTestIssue and handleNoLongerFlakyTest rewrite it."""
    start = body.lower().find(_START)
    if start < 0:
        return f"{tests_block(platforms)}\n{body}"
    tail = _FENCE.join(body[start:].split(_FENCE)[2:])  # what follows the list's closing fence
    return body[:start] + tests_block(platforms) + tail.removeprefix("\n")


def stand_in(issue: dict, test: str, platforms: list[str], listed_at: str | None) -> dict:
    """One test of the aggregate `issue` as retiring and re-enabling read a single test's issue:
    the aggregate's number, URL, title, author and state, the test's line as the `Platforms:` body
    they parse, and `created_at` when the test was listed (its reruns count from then; the
    aggregate's filing when unknown). The aggregate itself is kept under `aggregate`."""
    keep = ("number", "html_url", "title", "user", "state", "state_reason", "closed_at", "updated_at")
    return {**{k: issue.get(k) for k in keep}, "created_at": listed_at or issue.get("created_at"),
            "body": platforms_line(platforms), "aggregate": issue, "listed_test": test}


def in_aggregate(issue: dict) -> dict | None:
    """The aggregate a `stand_in` stands for; None for a single test's issue."""
    return issue.get("aggregate")


def entry_name(issue: dict, test: str) -> str:
    """`test` as the list a stand-in comes from writes it (`listed_test`: an aggregate's line, or a
    dry run's published entry, with a dotted suite too), else `test`: a dry run's plan names the
    issue by it, as a live comment names the test as its issue does."""
    return issue.get("listed_test") or test


# what a live run does to a test's line of an aggregate, per re-enabling decision (a deleted test's
# line as a clean one's: "close"), in a dry run's words (`unsure_of_aggregate`; aggregate_lifecycle.py)
ON_AGGREGATE = {"close": "drops its line and closes the aggregate, with one comment",
                "narrow": "narrows its line, with one comment",
                "evidence": "writes nothing (a still-failing line gets no comment)"}


def unsure_of_aggregate(issue: dict, does: str) -> str:
    """A dry run's words on a stand-in whose entry is the only one naming its issue (`alone`, the
    entry's id): PyTorch's list gives an issue's number, URL and platforms, not its title, so such
    an issue may be the test's own or an aggregate left with this one line, on which a live run
    `does` otherwise; "" for any other stand-in."""
    if not issue.get("alone"):
        return ""
    return (f"; the published list does not say whether #{issue['alone']} is its own issue or an aggregate "
            f"listing it alone, on which a live run {does}")


def groups(tests: Iterable, file_of: Callable[[str], str], is_new: Callable[[str], bool],
           has_aggregate: Callable[[str], bool] = lambda file: False) -> dict[str, list]:
    """Per file, the wanted tests (objects with `.test`) that have no issue yet and go to the
    file's aggregate: all of them when there are more than AGGREGATE_ABOVE, or when the file has
    an open aggregate already."""
    by_file: dict[str, list] = {}
    for w in tests:
        if file_of(w.test) and is_new(w.test):
            by_file.setdefault(file_of(w.test), []).append(w)
    return {f: sorted(ws, key=lambda w: w.test) for f, ws in sorted(by_file.items())
            if len(ws) > AGGREGATE_ABOVE or has_aggregate(f)}
