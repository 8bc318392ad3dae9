"""DISABLED and UNSTABLE job issues, read back as PyTorch's CI reads them.

Besides tests, PyTorch disables whole CI jobs (`DISABLED pull / linux-jammy-py3.10 / test
(default)`: the job is skipped) and marks jobs unstable (`UNSTABLE ...`: the job runs, but its
failure does not block a merge or turn trunk red). pytorch/test-infra's
`.github/scripts/update_disabled_issues.py` publishes both lists on its `generated-stats` branch
as `disabled-jobs.json` and `unstable-jobs.json` (today it writes what the HUD's
`/api/flaky-tests/getDisabledTestsAndJobs` builds), and PyTorch's workflows read them from
there. This module builds the same files from the same issues, following that code to the letter:

- the open issues whose title contains the prefix (GitHub search `in:title`), read in URL order
  (a string sort: of two issues for one job the later URL wins);
- a DISABLED title counts unless it is a disabled test's: `DISABLED test_x (Suite)` exactly (a
  name with another character, `/` or `,`, is a job's) or an aggregate `DISABLED MULTIPLE ...`;
  every UNSTABLE title counts;
- the job is the rest of the title, stripped (an empty one too, as PyTorch keeps it);
- only the flaky bot (`pytorch-bot`) or an author with `admin` or `write` permission on the
  repository may disable or mark a job (anyone can open an issue: this keeps a stranger from
  switching CI jobs off); an author GitHub does not know as a collaborator may not (where
  PyTorch's code would fail the whole list). The same check keeps a stranger's DISABLED test
  issue out of the disabled-test list (`issues.trusted_test_issues`), where PyTorch's bot
  closes it as soon as it is filed; for test issues alone, two GitHub Apps PyTorch's bot
  authorizes count too (`TEST_ISSUE_APPS`);
- the entry is `[author, number, url, workflow, platform, config]`, the job name split on its
  first two `/` and each part stripped; the author as GitHub's GraphQL API names it (a bot
  without `[bot]`), the number the URL's last segment, a string.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable

from resources.github import GitHubError, GitHubResource
from resources.storage import Store
from torchci_assets.derived.flakiness.aggregates import is_aggregate
from torchci_assets.derived.flakiness.issue_text import DISABLED_PREFIX, issue_number, is_single_test_title
from torchci_assets.derived.flakiness.lists import dumps
from torchci_assets.publishing import write_if_changed

UNSTABLE_PREFIX = "UNSTABLE"
DISABLED_JOBS_PATH = "stats/disabled-jobs.json"
UNSTABLE_JOBS_PATH = "stats/unstable-jobs.json"
JOB_LISTS = {DISABLED_PREFIX: DISABLED_JOBS_PATH, UNSTABLE_PREFIX: UNSTABLE_JOBS_PATH}
MAY_CHANGE_JOBS = frozenset({"admin", "write"})
FLAKY_BOT = "pytorch-bot"  # PyTorch's bot may disable jobs whatever its permission says
# GitHub Apps whose DISABLED test issues PyTorch's bot authorizes (test-infra `utils.ts`
# `hasWritePermissions`: an App is no collaborator, so GitHub reports it no permission). Logins as
# the REST API gives them. Test issues only: the job lists ask GitHub alone, as upstream's do
# (`getDisabledTestsAndJobs.ts` checks with `hasWritePermissionsUsingOctokit`, no allowlist).
TEST_ISSUE_APPS = frozenset({"facebook-github-tools[bot]", "meta-codesync[bot]"})
_JOB_NAME_MAXSPLIT = 2
# GitHub logins: letters, digits and single hyphens; apps' bot accounts end in [bot]
_LOGIN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})(?:\[bot\])?")


def job_name(title: str | None, prefix: str) -> str | None:
    """The job an issue titled `title` disables (prefix DISABLED) or marks unstable (UNSTABLE),
    or None: another prefix, a disabled test's title (one test or an aggregate)."""
    if not title or not title.startswith(prefix):
        return None
    if prefix == DISABLED_PREFIX and (is_single_test_title(title) or is_aggregate(title)):
        return None
    return title[len(prefix):].strip()


def graphql_login(login: str) -> str:
    """A login as GitHub's GraphQL API gives an issue's author (a bot's without `[bot]`), which
    PyTorch's lists carry."""
    return login.removesuffix("[bot]")


def author(issue: dict) -> str:
    """A REST issue's author as `graphql_login` gives it; "" when GitHub names none (a deleted user)."""
    return graphql_login((issue.get("user") or {}).get("login") or "")


def job_entry(name: str, login: str, url: str) -> list[str]:
    parts = [p.strip() for p in name.split("/", _JOB_NAME_MAXSPLIT)]
    workflow, platform, config = (parts + ["", ""])[:3]
    return [login, issue_number(url), url, workflow, platform, config]


def condense_jobs(issues: Iterable[dict], prefix: str, may_change_jobs: Callable[[str], bool]) -> dict[str, list]:
    """disabled-jobs.json (prefix DISABLED) or unstable-jobs.json (UNSTABLE) from open issues
    (REST issue objects): `{job: [author, number, url, workflow, platform, config]}`."""
    out: dict[str, list] = {}
    for issue in sorted(issues, key=lambda i: i["html_url"]):
        name = job_name(issue.get("title"), prefix)
        who = author(issue)
        if name is not None and who and (who == FLAKY_BOT or may_change_jobs(who)):
            out[name] = job_entry(name, who, issue["html_url"])
    return out


def job_issues_query(repo: str, prefix: str) -> str:
    """PyTorch's query for the open issues of one prefix."""
    return f"repo:{repo} is:issue is:open in:title {prefix}"


class Permissions:
    """Whether a user may disable tests or jobs, or mark jobs unstable: PyTorch's flaky bot, this
    project's own accounts (`own`, logins as `graphql_login` gives them: an App's bot is no
    collaborator), or a user with `admin` or `write` permission on the repository, asked once per
    user and run. A user GitHub does not know as a collaborator (404) may not. `known`: GitHub's
    answers an earlier step of the same run got (`issues.run_answers`), so the steps that read
    DISABLED and UNSTABLE issues ask each author once between them."""

    def __init__(self, github: GitHubResource, repo: str, own: Iterable[str] = (),
                 known: dict[str, bool] | None = None):
        self.github = github
        self.repo = repo
        self.own = {graphql_login(login) for login in own}
        self.known: dict[str, bool] = dict(known or {})

    def __call__(self, user: str) -> bool:
        if user == FLAKY_BOT or user in self.own:
            return True
        if user not in self.known:
            self.known[user] = self._ask(user)
        return self.known[user]

    def wrote(self, issue: dict) -> bool:
        """Whether the author of a DISABLED test issue (one test or an aggregate) may disable its
        tests: as `__call__`, and the Apps PyTorch's bot authorizes (TEST_ISSUE_APPS), whose issues
        it leaves open for PyTorch's list. Never asked for a job's issue (see TEST_ISSUE_APPS)."""
        if (issue.get("user") or {}).get("login") in TEST_ISSUE_APPS:
            return True
        who = author(issue)
        return bool(who) and self(who)

    def _ask(self, user: str) -> bool:
        if not _LOGIN.fullmatch(user):  # not a GitHub login: never put it in a URL
            return False
        try:
            answer = self.github.request("GET", f"/repos/{self.repo}/collaborators/{user}/permission").json()
        except GitHubError as exc:
            if exc.status != 404:
                raise
            return False
        return str(answer.get("permission") or "").lower() in MAY_CHANGE_JOBS


def read_job_list(github: GitHubResource, repo: str, prefix: str, issues: list[dict] | None = None,
                  allowed: Permissions | None = None) -> dict[str, list]:
    """One list as of now. `issues`: the open issues when the caller has read them already (the
    disabled-test read-back has the DISABLED ones), else searched; `allowed`: the permissions the
    caller has asked already (each author is asked once a run)."""
    if issues is None:
        issues = github.search_issues(job_issues_query(repo, prefix))
    return condense_jobs(issues, prefix, allowed or Permissions(github, repo))


def publish_job_list(github: GitHubResource, repo: str, outputs: Store, prefix: str,
                     issues: list[dict] | None = None, allowed: Permissions | None = None) -> int:
    """Read one list and write it to the outputs (replaced whole, atomically, as the store writes;
    left as it is when GitHub fails); the number of jobs in it. The two lists are published by
    different steps: the unstable one by `unstable_jobs`, which the HUD waits for, the disabled one
    with the disabled tests, whose GitHub errors must not hold the HUD up."""
    doc = read_job_list(github, repo, prefix, issues, allowed)
    write_if_changed(outputs, JOB_LISTS[prefix], dumps(doc))
    return len(doc)


def read_job_lists(github: GitHubResource, repo: str, open_disabled: list[dict] | None = None,
                   allowed: Permissions | None = None) -> dict[str, dict[str, list]]:
    """Both lists as of now, keyed by their output path (`read_job_list` of each prefix)."""
    allowed = allowed or Permissions(github, repo)
    return {path: read_job_list(github, repo, prefix, open_disabled if prefix == DISABLED_PREFIX else None, allowed)
            for prefix, path in JOB_LISTS.items()}


def publish_job_lists(github: GitHubResource, repo: str, outputs: Store, open_disabled: list[dict] | None = None,
                      allowed: Permissions | None = None) -> dict[str, int]:
    """Read both lists, then write both (a GitHub error leaves both as they were); the number of
    jobs in each, by path."""
    lists = read_job_lists(github, repo, open_disabled, allowed)
    for path, doc in lists.items():
        write_if_changed(outputs, path, dumps(doc))
    return {path: len(doc) for path, doc in lists.items()}


def load_unstable(outputs: Store, log: Callable[[str], None] = lambda s: None) -> dict[str, list]:
    """The published unstable jobs, `{job: [author, number, url, workflow, platform, config]}`; {} when
    the file is absent (a dry run publishes none). A file that is not such a mapping is reported and
    ignored, entry by entry: one bad entry never costs the comments their other marks."""
    try:
        data = outputs.read_bytes_if_exists(UNSTABLE_JOBS_PATH)
        if data is None:
            return {}
        doc = json.loads(data)
    except (OSError, ValueError) as exc:
        log(f"{UNSTABLE_JOBS_PATH} is not readable JSON ({exc}); no job is treated as unstable")
        return {}
    if not isinstance(doc, dict):
        log(f"{UNSTABLE_JOBS_PATH} is not a mapping of job names; no job is treated as unstable")
        return {}
    good = {k: v for k, v in doc.items() if isinstance(k, str) and k.strip() and isinstance(v, list)
            and all(isinstance(x, str) for x in v)}
    if len(good) < len(doc):
        log(f"{UNSTABLE_JOBS_PATH}: {len(doc) - len(good)} malformed entries ignored")
    return good
