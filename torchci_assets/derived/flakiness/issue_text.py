"""DISABLED issues as PyTorch writes and reads them: titles, the `Platforms:` line, bodies.

PyTorch disables a test through an open issue titled `DISABLED test_x (__main__.TestY)`; its
body may carry a `Platforms: linux, win` line (none, or an empty one, means everywhere). Two
pieces of pytorch/test-infra define the format, and both are followed here to the letter:

- `.github/scripts/update_disabled_issues.py` builds disabled-tests-condensed.json from the open
  issues: an issue is a test's when its title starts with "DISABLED" and matches
  `DISABLED\\s*test_.+\\s*\\(.+\\)` or `DISABLED MULTIPLE`. A single-test title names the test
  `test_<name> (<suite>)` (names of letters, digits, `-`, `_` and `.`; anything after the
  closing parenthesis ignored); every body line that starts with "platforms:" (case-insensitive,
  not indented) adds its comma-separated, stripped, lower-cased entries. An aggregate issue
  (`DISABLED MULTIPLE ...`) lists its tests in the block after "disable the following tests:",
  one `test_x (Suite): mac, windows` line each (no platforms: everywhere). The number is the
  URL's last segment, as a string; issues are read in URL order, and a test named by several
  issues takes the later URL and the union of their platforms (everywhere if either says so).
- `torchci/lib/flakyBot/singleDisableIssue.ts` files them: title `DISABLED <test>`, the body
  starting with the `Platforms:` line, and on new flakiness the missing platforms appended to
  the issue's own (never narrowing a list a human wrote, never touching an empty one, which
  already means everywhere).

The marker comment at the end of a body this project wrote lets a later run tell its own issues
from human-filed ones (GitHub renders it invisibly).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

DISABLED_PREFIX = "DISABLED"
_TEST_TITLE = re.compile(r"DISABLED\s*test_.+\s*\(.+\)")
_MULTIPLE_TITLE = re.compile(r"DISABLED MULTIPLE")
_TEST_NAME = re.compile(r"(test_[a-zA-Z0-9-_\.]+)\s+\(([a-zA-Z0-9-_\.]+)\)")
_TEST_NAME_ONLY = re.compile(_TEST_NAME.pattern + r"\s*")
_MULTIPLE_START = "disable the following tests:"
_PLATFORMS_KEY = "platforms:"
MARKER = "<!-- torchci-dagster: disabled-test -->"
MAX_JOB_LINKS = 10
# GitHub refuses issue bodies over 65536 characters.
MAX_BODY_CHARS = 65536

# The platform names PyTorch's test runner acts on (common_utils.py `platform_to_conditional`);
# an unknown name is ignored there, and a list of only unknown names disables everywhere.
PYTORCH_PLATFORMS = ("asan", "dynamo", "dynamo_wrapped", "inductor", "linux", "mac", "macos", "rocm",
                     "slow", "win", "windows", "xpu")
# This project's platform families (ingest/jobnames.py) that PyTorch does not name: both are
# Linux, so PyTorch's IS_LINUX is the narrowest condition that still covers them.
_AS_PYTORCH = {"linux-aarch64": "linux", "s390x": "linux"}
# Where the runner acts on each of PyTorch's names, as this project's platforms (after
# `pytorch_platforms`): `mac` and `macos` are one condition (IS_MACOS), `win` and `windows` too, and
# IS_LINUX holds on ROCm and XPU jobs as well (they run Linux). A name missing here is a test
# configuration, not an OS (asan, dynamo, dynamo_wrapped, inductor, slow): it holds on any platform.
_RUNS_ON = {"linux": frozenset({"linux", "rocm", "xpu"}), "mac": frozenset({"mac"}), "macos": frozenset({"mac"}),
            "win": frozenset({"win"}), "windows": frozenset({"win"}), "rocm": frozenset({"rocm"}),
            "xpu": frozenset({"xpu"})}


def issue_title(test: str) -> str:
    """The exact title PyTorch's bot gives the issue of `test` ("test_x (__main__.TestY)")."""
    return f"{DISABLED_PREFIX} {test}"


def is_test_issue(title: str | None) -> bool:
    """Whether update_disabled_issues.py takes an issue so titled for tests (one, or an aggregate),
    and so not for a disabled job."""
    return bool(title) and title.startswith(DISABLED_PREFIX) and bool(
        _TEST_TITLE.match(title) or _MULTIPLE_TITLE.match(title))


def is_single_test_title(title: str | None) -> bool:
    """Whether PyTorch takes the title for one disabled test's (the flaky bot's isSingleIssue):
    `DISABLED ` then exactly `test_x (Suite)`, spaces around it allowed."""
    rest = (title or "").removeprefix(f"{DISABLED_PREFIX} ")
    return rest != (title or "") and _TEST_NAME_ONLY.fullmatch(rest.strip()) is not None


def test_key(text: str) -> str | None:
    """`test_x (Suite)` from the start of `text` (whitespace between the two normalized), or None."""
    m = _TEST_NAME.match(text)
    return f"{m.group(1)} ({m.group(2)})" if m else None


def unreadable_reason(test: str) -> str | None:
    """Why PyTorch cannot disable `test` through an issue, or None when it can: its title parser
    must read exactly `test` back from the title filed for it. An issue it reads otherwise
    disables nothing, and a bot that finds issues by that reading files it again on every run."""
    title = issue_title(test)
    read = disabled_test(title)
    if read == test:
        return None
    how = f"reads no test in {title!r}" if read is None else f"reads {title!r} as {read!r}"
    return f"PyTorch's title parser {how} (a test name is letters, digits, '-', '_' and '.')"


def disabled_test(title: str | None) -> str | None:
    """The test a single-test DISABLED issue disables, read as update_disabled_issues.py reads
    it, or None (a DISABLED job, an aggregate issue, a title it cannot read)."""
    if not is_test_issue(title):
        return None
    return test_key(title.strip()[len(DISABLED_PREFIX):].strip())


def multiple_tests(title: str | None, body: str | None) -> list[tuple[str, list[str]]]:
    """The tests of an aggregate issue (`DISABLED MULTIPLE ...`) with their platforms, in order."""
    if not is_test_issue(title) or not _MULTIPLE_TITLE.match(title.strip()) or body is None:
        return []
    start = body.lower().find(_MULTIPLE_START)
    tests = []
    for line in body[start:].splitlines()[2:]:  # the "disable ..." line, then the opening fence
        if "```" in line:
            break
        name, *rest = line.split(":")
        key = test_key(name.strip())
        if key is not None:
            platforms = rest[0].strip().lower() if rest else ""
            tests.append((key, [x.strip() for x in platforms.split(",") if x.strip()]))
    return tests


def parse_platforms(body: str | None) -> list[str]:
    """The platforms of an issue body, exactly as update_disabled_issues.py parses them
    (repeats kept, order of appearance; [] means every platform)."""
    platforms: list[str] = []
    for line in (body or "").splitlines():
        line = line.lower()
        if line.startswith(_PLATFORMS_KEY):
            platforms.extend(x.strip() for x in line[len(_PLATFORMS_KEY):].split(",") if x.strip())
    return platforms


def issue_number(url: str) -> str:
    """PyTorch keeps the number as the URL's last segment, a string."""
    return url.rstrip("/").split("/")[-1]


def condense(issues: Iterable[dict]) -> dict[str, list]:
    """disabled-tests-condensed.json from open issues (REST issue objects), as PyTorch builds it:
    `{test: [number, html_url, [platforms]]}`."""
    out: dict[str, list] = {}
    for issue in sorted(issues, key=lambda i: i["html_url"]):
        url, title, body = issue["html_url"], issue.get("title"), issue.get("body")
        test = disabled_test(title)
        named = [(test, parse_platforms(body))] if test is not None else multiple_tests(title, body)
        for key, platforms in named:
            if key in out:
                before = out[key][2]
                platforms = [] if not before or not platforms else sorted(set(before + platforms))
            out[key] = [issue_number(url), url, platforms]
    return out


def pytorch_platforms(platforms: Iterable[str]) -> list[str]:
    """This project's platform names as PyTorch's runner knows them, sorted and unique; names
    neither knows are dropped (so a list of only those becomes [], everywhere, which is also
    what PyTorch would make of them)."""
    out = {_AS_PYTORCH.get(p, p) for p in platforms}
    return sorted(p for p in out if p in PYTORCH_PLATFORMS)


def runs_on(platform: str) -> frozenset[str] | None:
    """The platforms (this project's, as `pytorch_platforms` names them) where PyTorch's runner
    disables a test for the issue platform `platform`; None for a test configuration (dynamo,
    inductor, slow, ...), which may hold on any of them."""
    return _RUNS_ON.get(platform)


def platforms_line(platforms: list[str]) -> str:
    return f"Platforms: {', '.join(platforms)}".rstrip()


def added_platforms(current: list[str], flaked: list[str]) -> list[str]:
    """Platforms to add to an issue whose list is `current` now that the test flaked on
    `flaked`: none when `current` is empty (it already disables everywhere)."""
    if not current:
        return []
    return [p for p in dict.fromkeys(flaked) if p not in current]


def with_platforms(body: str | None, platforms: list[str]) -> str:
    """`body` with its `Platforms:` line set to `platforms`: the first such line is replaced in
    place and later ones dropped (they would add to it); a body without one gets it on top."""
    lines = (body or "").splitlines()
    out: list[str] = []
    placed = False
    for line in lines:
        if line.lower().startswith(_PLATFORMS_KEY):
            if not placed:
                out.append(platforms_line(platforms))
                placed = True
            continue
        out.append(line)
    if not placed:
        out = [platforms_line(platforms), ""] + out
    return "\n".join(out)


# ---- the evidence a new issue carries ---------------------------------------------------


@dataclass(frozen=True)
class PlatformEvidence:
    platform: str
    runs: int
    failures: int
    flake_events: int
    rerun_passes: int
    same_commit_pairs: int
    flips: int


@dataclass(frozen=True)
class FailingJob:
    url: str
    job_name: str
    head_sha: str
    on_main: bool
    at: dt.datetime | None


@dataclass(frozen=True)
class Evidence:
    """Why a test is disabled: the flaky verdict's counts per platform over its window and the
    most recent jobs where it failed (or needed a rerun)."""

    test: str
    file: str = ""
    window_start: str = ""
    window_end: str = ""
    platforms: list[PlatformEvidence] = field(default_factory=list)
    jobs: list[FailingJob] = field(default_factory=list)
    failing_jobs: int = 0
    last_failure_at: dt.datetime | None = None

    @property
    def flake_events(self) -> int:
        return sum(p.flake_events for p in self.platforms)

    @property
    def runs(self) -> int:
        return sum(p.runs for p in self.platforms)


def _md(text: str) -> str:
    """Text safe inside a markdown link label or table cell."""
    return re.sub(r"([\[\]|`<>])", r"\\\1", " ".join(str(text).split()))[:200]


def _when(at: dt.datetime | None) -> str:
    return at.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC") if at else "time unknown"


def render_body(evidence: Evidence, platforms: list[str]) -> str:
    """The body of a new DISABLED issue: the `Platforms:` line first (PyTorch's bot puts it
    there and humans look for it there), the evidence, how to re-enable, and the marker."""
    flaked_on = [p.platform for p in evidence.platforms if p.flake_events > 0]
    window = (f"the window {evidence.window_start} to {evidence.window_end}"
              if evidence.window_start else "the flaky verdict's window")
    parts = [
        platforms_line(platforms),
        "",
        f"This test was disabled because it is flaky in CI: over {window} it had "
        f"{evidence.flake_events} flake event(s) in {evidence.runs} run(s)"
        + (f", on {', '.join(flaked_on)}" if flaked_on else "") + ". A flake event is a failure "
        "that passed on a rerun in the same job, a failure on a commit where the test also "
        "passed, or a failure on main between two passing commits. Jobs that died or where most "
        "tests failed at once are not counted."
        + ("" if platforms else " It flaked on every platform that ran it: the empty `Platforms:` line "
           "disables it everywhere."),
        "",
        "| platform | runs | failures | flake events | rerun passes | same-commit pairs | flips on main |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    parts += [f"| {_md(p.platform)} | {p.runs} | {p.failures} | {p.flake_events} | {p.rerun_passes} | "
              f"{p.same_commit_pairs} | {p.flips} |" for p in evidence.platforms]
    if evidence.jobs:
        parts += ["", f"Most recent failing jobs ({len(evidence.jobs)} of {evidence.failing_jobs}, "
                      "main first):"]
        parts += [f"- {_when(j.at)} [{_md(j.job_name or 'job')}]({j.url}) "
                  f"{'on main' if j.on_main else 'off main'} at `{j.head_sha[:12]}`" for j in evidence.jobs]
    if evidence.file:
        parts += ["", f"Test file: `{_md(evidence.file)}`"]
    parts += [
        "",
        "To re-enable the test, close this issue. To change where it is disabled, edit the "
        "`Platforms:` line: a comma-separated list of " + ", ".join(PYTORCH_PLATFORMS)
        + " (an empty list disables it everywhere).",
        "",
        MARKER,
    ]
    body = "\n".join(parts)
    return body if len(body) <= MAX_BODY_CHARS else body[:MAX_BODY_CHARS - len(MARKER) - 1] + "\n" + MARKER
