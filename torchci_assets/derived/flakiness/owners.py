"""Owner labels for a new DISABLED issue, read from the test file as PyTorch's flaky bot reads them.

Every PyTorch test file starts with a header such as `# Owner(s): ["module: nn"]`, and the
flaky-test bot (pytorch/test-infra `torchci/lib/flakyBot/utils.ts`, `getTestOwnerLabels`)
labels each issue it files with those owners, so the issue lands in the owning team's queue:

- the first line that starts with `# Owner(s): ` holds a JSON list of labels;
- no owner (no header, an unreadable one, a file GitHub does not have) gives one label for
  unknown owners (PyTorch's `module: unknown`, configurable here); GitHub down through the whole
  retry budget is no answer about the owners: the filing stops there, the issue waits for the next run;
- an issue with a known `module: ...` owner is also labelled `triaged`, since a team owns it.

The file is read through the contents API at the upstream's branch head (the file as the tests
run it now), once per file and run. PyTorch's bot also adds platform labels (`module: windows`
...); those are left out here, as this project's platform names are not PyTorch's.
"""

from __future__ import annotations

import base64
import json
import re
from urllib.parse import quote

from resources.github import GitHubError, GitHubResource, unavailable

OWNER_PREFIX = "# Owner(s): "
UNKNOWN_OWNER = "module: unknown"
TRIAGED = "triaged"
TEST_ROOT = "test/"
# A test file's path as reports give it: folders and a .py name, nothing that climbs.
_SAFE_PATH = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*(/[A-Za-z0-9_][A-Za-z0-9_.\-]*)*\.py")


def parse_owners(text: str) -> list[str] | None:
    """The owners of a test file's text, or None when it names none it can read."""
    for line in re.split(r"[\r\n]+", text):
        if line.startswith(OWNER_PREFIX):
            try:
                owners = json.loads(line[len(OWNER_PREFIX):])
            except ValueError:
                return None
            if isinstance(owners, list) and all(isinstance(o, str) for o in owners):
                return owners or None
            return None
    return None


def owner_labels(owners: list[str] | None, unknown_label: str = UNKNOWN_OWNER) -> list[str]:
    """The labels an issue gets for these owners (None: unknown)."""
    labels = list(dict.fromkeys(owners or [])) or [unknown_label]
    if any(x.startswith("module: ") and x not in (UNKNOWN_OWNER, unknown_label) for x in labels):
        labels.append(TRIAGED)
    return labels


class OwnerLookup:
    """Owner labels by test file, read once per file from the upstream repo at `ref`."""

    def __init__(self, github: GitHubResource, repo: str, ref: str, unknown_label: str = UNKNOWN_OWNER,
                 warn=lambda message: None):
        self.github, self.repo, self.ref = github, repo, ref
        self.unknown_label = unknown_label
        self.warn = warn
        self.known: dict[str, list[str]] = {}

    def __call__(self, file: str) -> list[str]:
        if file not in self.known:
            self.known[file] = owner_labels(self._owners(file), self.unknown_label)
        return self.known[file]

    def _owners(self, file: str) -> list[str] | None:
        if not _SAFE_PATH.fullmatch(file or "") or ".." in file.split("/"):
            self.warn(f"owners of {file!r}: not a test file path; labelled {self.unknown_label!r}")
            return None
        path = f"/repos/{self.repo}/contents/{quote(TEST_ROOT + file)}"
        try:
            answer = self.github.request("GET", path, params={"ref": self.ref}).json()
            text = base64.b64decode(answer.get("content") or "").decode("utf-8", "replace")
        except (GitHubError, ValueError) as exc:
            if unavailable(exc):  # the create after it would wait out the same retries: the filing stops
                raise
            self.warn(f"owners of {TEST_ROOT}{file} at {self.ref}: {exc}; labelled {self.unknown_label!r}")
            return None
        owners = parse_owners(text)
        if owners is None:
            self.warn(f"{TEST_ROOT}{file} has no readable '{OWNER_PREFIX.strip()}' line; labelled "
                      f"{self.unknown_label!r}")
        return owners
