"""`torchci backfill --repo OWNER/NAME (--since YYYY-MM-DD | --days N) [--branch NAME] [--prs]`."""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import sys
from typing import TYPE_CHECKING

from resources.names import repo_name_problem
from torchci_assets.cli_values import day, folder_problem
from torchci_assets.simulate import GROUND_TRUTH

if TYPE_CHECKING:
    from resources.github import GitHubError, GitHubResource
    from resources.storage import Store

EXIT_STOPPED = 75  # EX_TEMPFAIL: GitHub stopped answering; the same command continues
# bad credentials, no such repository or branch, no permission: the command or the credentials must
# change, running it again cannot help
EXIT_REFUSED = 2
# A backfill outlives an hour's budget: wait for the reset (an hour and a bit) instead of stopping.
MAX_WAIT_S = 3900.0


def github_from_env() -> GitHubResource:
    """The client with the project's credentials, read from the environment (never printed)."""
    from resources.github import GitHubResource
    from resources.uris import resolved_uri

    env = {k: os.environ.get(v) or None for k, v in (
        ("token", "GITHUB_TOKEN"), ("app_id", "GITHUB_APP_ID"), ("app_private_key", "GITHUB_APP_PRIVATE_KEY"),
        ("app_installation_id", "GITHUB_APP_INSTALLATION_ID"))}
    return GitHubResource(api_url=resolved_uri("GITHUB_API_URL"), max_total_wait_s=MAX_WAIT_S, **env)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="torchci backfill",
        description="Read a repository's CI history from GitHub's REST API (workflow runs with every attempt, "
                    "jobs, test-report artifacts (test-reports*, or the config's backfill.report_artifacts), "
                    "failed jobs' logs, the branch's pushes, pull requests) into "
                    "ordinary archive files under TORCHCI_ARCHIVE_URI; `torchci run` then builds the lake. "
                    "Credentials: GITHUB_TOKEN, or GITHUB_APP_ID + GITHUB_APP_PRIVATE_KEY (the App's "
                    "installation on the repository is looked up; none: unauthenticated, 60 requests an hour). "
                    "Interrupted, "
                    "the same command continues where it stopped.")
    p.add_argument("--repo", required=True, help="OWNER/NAME")
    when = p.add_mutually_exclusive_group(required=True)
    when.add_argument("--since", type=day, help="first day, YYYY-MM-DD (UTC)")
    when.add_argument("--days", type=int, help="the last N days, today included")
    p.add_argument("--branch", default=None,
                   help="branch whose runs and commits to read (default: the repository's default branch)")
    p.add_argument("--prs", action="store_true", help="also pull requests and their workflow runs")
    p.add_argument("--archive", default=None, help="archive root (default TORCHCI_ARCHIVE_URI)")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    problem = repo_name_problem(args.repo)
    if problem:
        parser().error(problem)
    today = dt.datetime.now(dt.timezone.utc).date()
    if args.days is not None and args.days < 1:
        parser().error("--days must be at least 1")
    since = args.since or today - dt.timedelta(days=args.days - 1)
    if since > today:
        parser().error("--since is in the future")
    if args.archive and (problem := folder_problem("--archive", args.archive)):
        parser().error(problem)
    from torchci_assets import preflight

    # before any request to GitHub: an archive on S3 that refuses the credentials, in one line
    archive = ({"--archive": args.archive} if args.archive
               else {"TORCHCI_ARCHIVE_URI": (os.environ.get("TORCHCI_ARCHIVE_URI") or "").strip()})
    if status := preflight.report_stores("torchci backfill", archive):
        return EXIT_REFUSED if status == 2 else EXIT_STOPPED
    return _backfill(args, since, today)


def _backfill(args: argparse.Namespace, since: dt.date, today: dt.date) -> int:
    """Read the history the parsed command asks for. The storage and GitHub clients, and Dagster
    with them, load only now, so `--help` and usage errors answer without them."""
    from resources.github import GitHubError
    from resources.storage import Store
    from resources.uris import resolved_uri
    from torchci_assets.backfill.history import BackfillOptions, backfill
    from torchci_assets.config import load_config

    store = Store(args.archive or resolved_uri("TORCHCI_ARCHIVE_URI"))
    if store.exists(GROUND_TRUTH):
        print(f"backfill {args.repo}: {simulated_archive(store, args.repo)}", file=sys.stderr)
        return EXIT_REFUSED
    gh = github_from_env()
    opts = BackfillOptions(repo=args.repo, since=since, until=today, branch=args.branch, prs=args.prs,
                           report_artifacts=load_config().backfill.report_artifacts)
    try:
        backfill(gh, store, opts, log=lambda s: print(s, flush=True), today=today)
    except GitHubError as exc:
        if (refused := _refusal(exc, args.repo)) is not None:
            print(f"backfill {args.repo}: {refused}", file=sys.stderr)
            return EXIT_REFUSED
        print(f"backfill {args.repo} stopped: {exc}. What was read is written and recorded; run the same "
              f"command again{_when(exc)} to continue.", file=sys.stderr)
        return EXIT_STOPPED
    return 0


def _when(exc: GitHubError) -> str:
    """When running the command again can succeed: a rate limit that outlasted the wait budget
    lifts when GitHub said (the next whole minute, UTC); any other stop, now."""
    if exc.retry_at is None:
        return ""
    at = dt.datetime.fromtimestamp(math.ceil(exc.retry_at / 60) * 60, dt.timezone.utc)
    return f" from {at:%Y-%m-%d %H:%M} UTC (GitHub's rate limit allows no more requests until then)"


def simulated_archive(store: Store, repo: str) -> str:
    """Why not backfill into `make run`'s sample: the test statistics (test times, flaky and slow
    tests) read every repository's reports, so its simulated days would count as the team's."""
    return (f"{store.display()} holds a simulated archive ({GROUND_TRUTH}, from `make run` or `torchci "
            f"simulate`): {repo}'s days would be mixed with its simulated pytorch/pytorch ones. Start from an "
            "empty archive: `make clean` (removes ./var), or set TORCHCI_ARCHIVE_URI to another folder")


def _refusal(exc: GitHubError, repo: str) -> str | None:
    """What to fix when GitHub refused for good (running the command again cannot help), else None."""
    from resources.github import rate_limited
    from torchci_assets.backfill.history import MissingBranch

    if exc.status == 401:
        return (f"GitHub refused the credentials ({exc}): check GITHUB_TOKEN, or GITHUB_APP_ID and "
                "GITHUB_APP_PRIVATE_KEY")
    if exc.status == 404 and str(exc).startswith(f"GET /repos/{repo}:"):
        return (f"no repository {repo} that these credentials can see ({exc}): check --repo, and that the "
                "token or the GitHub App can read it")
    if isinstance(exc, MissingBranch):
        return str(exc)
    if exc.status == 403 and not rate_limited(exc):
        return (f"GitHub refused a read ({exc}): the token or the GitHub App needs Actions: read and "
                "Contents: read on the repository (and Pull requests: read for --prs)")
    return None
