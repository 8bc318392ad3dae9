"""GitHub's naming rules for `owner/repo`, shared by every layer that reads or sends repository names.

It sits at the bottom (resources) because the ingest of downstream results, the configuration's
allowlist and the GitHub client all validate names the same way, and a lower layer must not
import a higher one to do so.
"""

from __future__ import annotations

import re

# GitHub's rules: an account name is 1-39 alphanumerics or single hyphens, not starting or
# ending with a hyphen; a repository name is 1-100 of [A-Za-z0-9._-], not "." or "..".
_OWNER_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}$")
_REPO_RE = re.compile(r"^[A-Za-z0-9._-]{1,100}$")


def repo_name_problem(name: object) -> str | None:
    """Why `name` is not a valid `owner/repo` on GitHub, or None when it is."""
    if not isinstance(name, str):
        return f"must be an 'owner/repo' string, got {type(name).__name__}"
    owner, sep, repo = name.partition("/")
    if not sep or "/" in repo:
        return f"{name!r} must have the form 'owner/repo'"
    if not _OWNER_RE.match(owner):
        return (f"{name!r}: owner {owner!r} must be 1-39 letters, digits or single hyphens, "
                "not starting or ending with a hyphen")
    if not _REPO_RE.match(repo) or repo in (".", "..") or repo.lower().endswith(".git"):
        return (f"{name!r}: repository {repo!r} must be 1-100 letters, digits, '.', '-' or '_' "
                "(not '.', '..' or ending in '.git')")
    return None
