"""Owner labels of new DISABLED issues, from the test file's `# Owner(s):` header read through
the fake GitHub contents API."""

import pytest
from fake_github_issues import FakeIssueTracker, json_response

from resources.github import GitHubError, GitHubResource
from torchci_assets.derived.flakiness.owners import OwnerLookup, owner_labels, parse_owners

REPO = "pytorch/pytorch"


@pytest.mark.parametrize("text, owners", [
    ('# Owner(s): ["module: fft"]\nimport blah;\nrest of file', ["module: fft"]),  # PyTorch's own test case
    ('#!/usr/bin/env python3\r\n# Owner(s): ["module: nn", "oncall: jit"]\r\n', ["module: nn", "oncall: jit"]),
    ('import torch\n# Owner(s): ["module: a"]\n# Owner(s): ["module: b"]\n', ["module: a"]),  # the first header
    ('# Owner(s): []\n', None),
    ('# Owner(s): ["module: nn"\n', None),  # not JSON
    ('# Owner(s): "module: nn"\n', None),  # not a list
    ('# Owners: ["module: nn"]\n', None),
    ('    # Owner(s): ["module: nn"]\n', None),  # must start the line
    ('', None),
])
def test_the_header_is_read_as_pytorchs_flaky_bot_reads_it(text, owners):
    assert parse_owners(text) == owners


def test_a_known_module_is_triaged_and_no_owner_gets_the_unknown_label():
    assert owner_labels(["module: fft"]) == ["module: fft", "triaged"]
    assert owner_labels(["oncall: jit"]) == ["oncall: jit"]  # routed to an oncall, not triaged
    assert owner_labels(None) == ["module: unknown"]
    assert owner_labels(["module: unknown"]) == ["module: unknown"]
    assert owner_labels(None, "needs owner") == ["needs owner"]


def lookup(httpserver, warnings=None, **kw) -> OwnerLookup:
    gh = GitHubResource(api_url=httpserver.url_for(""), token="t0ken", backoff_base_s=0.0, **kw)
    return OwnerLookup(gh, REPO, "main", warn=(warnings if warnings is not None else []).append)


def test_each_file_is_read_once_at_the_branch_head(httpserver):
    fake = FakeIssueTracker(httpserver)
    fake.files["test/distributed/test_c10d_nccl.py"] = '# Owner(s): ["oncall: distributed"]\n' + "x = 1\n" * 5000
    owners = lookup(httpserver)
    assert owners("distributed/test_c10d_nccl.py") == ["oncall: distributed"]
    assert owners("distributed/test_c10d_nccl.py") == ["oncall: distributed"]
    reads = [(p, a) for m, p, a in fake.requests if "/contents/" in p]
    assert reads == [(f"/repos/{REPO}/contents/test/distributed/test_c10d_nccl.py", {"ref": "main"})]


def test_a_missing_file_or_a_bad_path_is_unknown_and_says_why(httpserver):
    fake = FakeIssueTracker(httpserver)
    warnings = []
    owners = lookup(httpserver, warnings, max_retries=0)
    assert owners("test_gone.py") == ["module: unknown"]
    assert owners("nn/../test_nn.py") == ["module: unknown"]
    assert owners("test_nn.py?ref=evil") == ["module: unknown"]
    assert [p for m, p, a in fake.requests] == [f"/repos/{REPO}/contents/test/test_gone.py"]  # the others never asked
    assert len(warnings) == 3 and "404" in warnings[0] and "not a test file path" in warnings[1]


def test_a_5xx_that_retries_fix_is_read_and_github_down_raises_for_the_filing_to_stop(httpserver):
    """A 502 the client's retries get past is no outage; one through the whole budget is GitHub down,
    not a file without owners: labelling the issue `module: unknown` for good would be wrong, and the
    create after it would wait out the same budget (the filing stops, test_github_outage_flaky)."""
    fake = FakeIssueTracker(httpserver)
    fake.files["test/test_nn.py"] = '# Owner(s): ["module: nn"]\n'
    httpserver.expect_ordered_request(f"/repos/{REPO}/contents/test/test_nn.py").respond_with_response(
        json_response(502, {"message": "Bad Gateway"}))
    warnings = []
    assert lookup(httpserver, warnings, max_retries=1)("test_nn.py") == ["module: nn", "triaged"]
    httpserver.expect_ordered_request(f"/repos/{REPO}/contents/test/test_sparse.py").respond_with_response(
        json_response(502, {"message": "Bad Gateway"}))
    with pytest.raises(GitHubError) as raised:
        lookup(httpserver, warnings, max_retries=0)("test_sparse.py")
    assert raised.value.unavailable and "502" in str(raised.value) and warnings == []
