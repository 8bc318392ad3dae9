"""DISABLED issues as PyTorch writes and reads them: titles, the `Platforms:` line, bodies.

PyTorch disables a test through an open issue titled `DISABLED test_x (__main__.TestY)`; its
body may carry a `Platforms: linux, win` line (none, or one naming no platform PyTorch supports,
means everywhere). PyTorch publishes disabled-tests-condensed.json from what the HUD's API builds
(pytorch/test-infra `torchci/pages/api/flaky-tests/getDisabledTestsAndJobs.ts`, `getDisabledTests`),
and this module follows that code and the flaky bot's parsers it calls to the letter:

- a single-test issue (`lib/flakyBot/singleDisableIssue.ts`, `isSingleIssue`): the title is
  "DISABLED " then exactly `test_<name> (<suite>)` (`utils.ts` `parseTestName`: names of letters,
  digits, `-`, `_` and `.`; spaces around allowed, nothing else after the parenthesis). Its
  platforms (`parseBody`): every body line that, lower-cased and trimmed (indented lines too),
  starts with "platforms:" adds its comma-separated entries; only `supportedPlatforms` are kept,
  sorted and unique (an unknown name is dropped, so a line of only unknown names means everywhere);
- an aggregate issue (`aggregateDisableIssue.ts`, `isAggregateIssue`, `parseBody`): the title
  starts with "DISABLED MULTIPLE "; its tests are the non-blank lines of the first ``` block after
  "disable the following tests:" (any case), one `test_x (Suite): mac, windows` line each (no
  platforms: everywhere; a later line for the same test replaces an earlier one). Upstream's list
  fails as a whole on an aggregate without a block; here such an issue simply disables nothing;
- the issues are read in URL order (a string sort) and a test named by several keeps the FIRST
  issue's number (a string) and URL; a later issue without platforms makes it everywhere, a later
  one with platforms adds them unless it is everywhere already; the platforms end sorted and unique.

Not reproduced: upstream memoizes the single-issue `parseBody` per body text within its server
process and `updateMap` appends to the memoized list, so an issue whose body is the same text as an
earlier, merged one can inherit the platforms added to it, depending on the process's history.

JavaScript's whitespace (`trim`, regex `\\s`) is used where upstream trims or matches spaces, and
lines are split where it splits them (`\\r`, `\\n`), so odd characters read as they read there.

The flaky bot's own edits (`singleDisableIssue.ts`, `updateExistingIssueForFlakyTest`) are followed
too: title `DISABLED <test>`, the body starting with the `Platforms:` line, and on new flakiness the
missing platforms appended to the issue's own as read above (never narrowing a list a human wrote,
never touching an empty one, which already means everywhere).

The marker comment at the end of a body this project wrote lets a later run tell its own issues
from human-filed ones (GitHub renders it invisibly).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

DISABLED_PREFIX = "DISABLED"
_SINGLE_PREFIX = f"{DISABLED_PREFIX} "
_AGGREGATE_PREFIX = f"{DISABLED_PREFIX} MULTIPLE "
# JavaScript's whitespace (String.prototype.trim and regex \s: WhiteSpace and LineTerminator), which
# differs from Python's (no \x1c-\x1f or \x85; \ufeff is one).
_JS_SPACE = ("\t\n\v\f\r \xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B)))
             + "\u2028\u2029\u202f\u205f\u3000\ufeff")
_S = f"[{_JS_SPACE}]"
# utils.ts `disabledTestIssueTitle`, matched whole (its `^...$`)
_TEST_NAME = re.compile(rf"{_S}*(test_[a-zA-Z0-9-_\.]+){_S}+\(([a-zA-Z0-9-_\.]+)\){_S}*")
_PLATFORM_SPLIT = re.compile(rf"^{_S}+|{_S}*,{_S}*|{_S}+\Z")  # singleDisableIssue.ts parseBody
_BODY_LINE = re.compile(r"[^\r\n]+")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_MULTIPLE_START = "disable the following tests:"
_FENCE = "```"
_PLATFORMS_KEY = "platforms:"
MARKER = "<!-- torchci-dagster: disabled-test -->"
MAX_JOB_LINKS = 10
# GitHub refuses issue bodies over 65536 characters, and titles over 256 (a 422 on every try).
MAX_BODY_CHARS = 65536
MAX_TITLE_CHARS = 256
# the suite of a test PyTorch's runner runs: its file, run as `python test_x.py` (`runner_key`)
MODULE_SUITE = "__main__"

# The platform names the disabled list keeps (test-infra utils.ts `supportedPlatforms`); any other
# name in an issue is dropped before PyTorch's runner sees it. The runner also knows
# `dynamo_wrapped`, but the list never carries it, so this project never writes it.
PYTORCH_PLATFORMS = ("asan", "dynamo", "inductor", "linux", "mac", "macos", "rocm", "slow", "win", "windows", "xpu")
# This project's platform families (ingest/jobnames.py) that PyTorch does not name: both are
# Linux, so PyTorch's IS_LINUX is the narrowest condition that still covers them.
_AS_PYTORCH = {"linux-aarch64": "linux", "s390x": "linux"}
# Where the runner acts on each of PyTorch's names, as this project's platforms (after
# `pytorch_platforms`) and the test configurations a rerun job's name puts it in (`dynamo` where
# TEST_WITH_TORCHDYNAMO holds, inductor jobs included; `inductor`, see sql/test_configs.sql): `mac`
# and `macos` are one condition (IS_MACOS), `win` and `windows` too, and IS_LINUX holds on ROCm and
# XPU jobs as well (they run Linux). A name missing here (asan, slow) holds on any platform.
_RUNS_ON = {"linux": frozenset({"linux", "rocm", "xpu"}), "mac": frozenset({"mac"}), "macos": frozenset({"mac"}),
            "win": frozenset({"win"}), "windows": frozenset({"win"}), "rocm": frozenset({"rocm"}),
            "xpu": frozenset({"xpu"}), "dynamo": frozenset({"dynamo"}), "inductor": frozenset({"inductor"})}
# The names a name already disables a test for, beyond its own: PyTorch's flaky bot takes dynamo and
# inductor jobs for subsets of linux, and its runner's dynamo holds in inductor jobs.
_COVERS = {"linux": frozenset({"dynamo", "inductor"}), "dynamo": frozenset({"inductor"})}


def issue_title(test: str) -> str:
    """The exact title PyTorch's bot gives the issue of `test` ("test_x (__main__.TestY)", or
    "test_x (__main__)" for a test outside a class: `runner_key`)."""
    return f"{_SINGLE_PREFIX}{test}"


def _trim(text: str) -> str:
    """JavaScript's `trim`: upstream trims before it compares."""
    return text.strip(_JS_SPACE)


def parse_test_name(text: str) -> str | None:
    """`test_x (Suite)` when `text`, trimmed, is exactly a test's name (spaces between the two
    normalized), else None: utils.ts `parseTestName`, which both kinds of issue go through."""
    m = _TEST_NAME.fullmatch(_trim(text))
    return f"{m.group(1)} ({m.group(2)})" if m else None


def disabled_test(title: str | None) -> str | None:
    """The test a single-test DISABLED issue disables, read as upstream reads it (`isSingleIssue`,
    then `parseTestName` of the rest), or None (a DISABLED job, an aggregate, a title it cannot read)."""
    if not title or not title.startswith(_SINGLE_PREFIX):
        return None
    return parse_test_name(title[len(_SINGLE_PREFIX):])


def runner_key(name: str, cls: str) -> str:
    """The test `name` of class `cls` as PyTorch names it: "test_x (__main__.TestY)". A test outside
    a class (`cls` empty, a pytest function of the module) is "test_x (__main__)": the module's own,
    which reads back as no class (`method_and_class`). Not "test_x (__main__.)": PyTorch's runner
    disables every class whose name starts with the entry's class word, and an empty word is the
    start of every name, so that entry would disable test_x in every class of the file."""
    return f"{name} ({MODULE_SUITE}.{cls})" if cls else f"{name} ({MODULE_SUITE})"


def runner_test(key: str | None) -> str | None:
    """The test PyTorch's runner takes `key` ("test_x (Suite)") for, keyed as this project keys
    tests (`runner_key`): its method and the last part of its suite under `__main__`. The runner
    compares a disabled test's class name alone (common_utils.py `check_if_enable`), so an issue
    titled for `test_x (distributed.test_c10d.TestY)`, as PyTorch's bot titles a test whose class
    is not in `__main__` and as people copy it from a report, disables the same test as one for
    `test_x (__main__.TestY)`; `test_x (__main__.)`, as an earlier version of this project named a
    test outside a class, is `test_x (__main__)`."""
    if key is None:
        return None
    return runner_key(*method_and_class(key))


def listed_name(key: str) -> str:
    """The name the disabled list gives the test `key` names: `key` as written (an issue's title,
    as upstream keeps it), except one with an empty class word ("test_x (__main__.)", as an
    earlier version of this project titled a test outside a class), which PyTorch's runner would
    take for test_x of every class of the file: it is the test's own, "test_x (__main__)"."""
    return runner_test(key) if key.endswith(".)") else key


def as_listed(tests: dict) -> dict:
    """A disabled list (`{key: entry}`) with its keys as `listed_name` names them; an entry
    already written so wins over one renamed to it."""
    renamed = {listed_name(k): v for k, v in tests.items() if listed_name(k) != k}
    return {**renamed, **{k: v for k, v in tests.items() if listed_name(k) == k}}


def method_and_class(key: str) -> tuple[str, str]:
    """The two words of `key` ("test_x (Suite)") PyTorch's runner matches a test by: the method and
    the last part of the suite, the class name; "" for a test outside a class (`runner_key`)."""
    name, _, suite = key.partition(" (")
    cls = suite.rstrip(")").rsplit(".", 1)[-1]
    return name, "" if cls == MODULE_SUITE else cls


def titled_for_test(title: str | None, test: str) -> bool:
    """Whether a single-test issue so titled disables `test` in PyTorch's runner (`runner_test`)."""
    return runner_test(disabled_test(title)) == runner_test(test)


def titled_as(title: str | None, test: str) -> str:
    """`test` as the single-test issue so titled writes it (a dotted suite too), else `test`: a
    comment on the issue names the test as its title does, so a reader finds the test it means."""
    return disabled_test(title) or test


def line_for_test(names: Iterable[str], test: str) -> str | None:
    """Of `names` (tests as an aggregate's lines write them), the one that disables `test` in
    PyTorch's runner (`runner_test`), or None: `test` itself when written so, else the first. A
    line is read, widened, narrowed and dropped under the name its author wrote, never renamed."""
    same = [n for n in names if runner_test(n) == runner_test(test)]
    return test if test in same else next(iter(same), None)


def names_by_test(names: Iterable[str]) -> dict[str, str]:
    """Per test a name of `names` disables in PyTorch's runner (keyed `runner_test`), that name
    as `line_for_test` picks it: the test's own when written so, else the first. One pass, as a
    list of thousands is read against as many tests."""
    by_test: dict[str, str] = {}
    for name in names:
        test = runner_test(name)
        if name == test or test not in by_test:
            by_test[test] = name
    return by_test


def is_single_test_title(title: str | None) -> bool:
    """Whether upstream takes the title for one disabled test's (`isSingleIssue`)."""
    return disabled_test(title) is not None


def is_aggregate_title(title: str | None) -> bool:
    """Whether upstream takes the title for an aggregate's (`isAggregateIssue`)."""
    return bool(title) and title.startswith(_AGGREGATE_PREFIX)


def is_test_issue(title: str | None) -> bool:
    """Whether upstream takes an issue so titled for tests (one, or an aggregate), and so not for a
    disabled job (getDisabledTestsAndJobs.ts `filterDisableIssues`)."""
    return is_single_test_title(title) or is_aggregate_title(title)


def unreadable_reason(test: str) -> str | None:
    """Why PyTorch cannot disable `test` through an issue, or None when it can: its title parser
    must read exactly `test` back from the title filed for it, and GitHub must take the title. An
    issue it reads otherwise disables nothing, and a bot that finds issues by that reading files it
    again on every run; a title GitHub refuses fails every run, each time in a new issue's place."""
    title = issue_title(test)
    read = disabled_test(title)
    if read != test:
        how = f"reads no test in {title!r}" if read is None else f"reads {title!r} as {read!r}"
        return f"PyTorch's title parser {how} (a test name is letters, digits, '-', '_' and '.')"
    if len(title) > MAX_TITLE_CHARS:
        return f"its title would be {len(title)} characters; GitHub refuses over {MAX_TITLE_CHARS}"
    return None


def _aggregate_block(body: str) -> str | None:
    """The text of the first ``` block after "disable the following tests:", or None. Upstream's
    whole list fails on an aggregate whose block is missing; one broken issue should not do that."""
    start = body.lower().find(_MULTIPLE_START)
    parts = body[start:].split(_FENCE) if start >= 0 else []
    return parts[1] if len(parts) > 1 else None


def _listed_platforms(text: str) -> list[str]:
    """An aggregate line's platforms (`parsePlatformsFromString`, supported ones only), in order."""
    named = (_trim(x).lower() for x in text.split(","))
    return [p for p in named if p in PYTORCH_PLATFORMS]


def multiple_tests(title: str | None, body: str | None) -> list[tuple[str, list[str]]]:
    """The tests of an aggregate issue (`DISABLED MULTIPLE ...`) with their platforms, in order, as
    aggregateDisableIssue.ts `parseBody` reads them (a test listed twice: its later line)."""
    block = _aggregate_block(body or "") if is_aggregate_title(title) else None
    tests: dict[str, list[str]] = {}
    for line in (block or "").split("\n"):  # a blank line names no test
        name, *rest = line.split(":")
        key = parse_test_name(name)
        if key is not None:
            tests[key] = _listed_platforms(rest[0]) if rest else []
    return list(tests.items())


def _is_platforms_line(line: str) -> bool:
    return _trim(line.lower()).startswith(_PLATFORMS_KEY)


def parse_platforms(body: str | None) -> list[str]:
    """The platforms of a single issue's body as upstream reads them (singleDisableIssue.ts
    `parseBody`): every line starting with "platforms:" once trimmed, supported names only,
    sorted and unique; [] means every platform."""
    platforms: set[str] = set()
    for line in _BODY_LINE.findall(body or ""):
        if _is_platforms_line(line):
            named = _PLATFORM_SPLIT.split(_trim(line.lower())[len(_PLATFORMS_KEY):])
            platforms.update(p for p in named if p in PYTORCH_PLATFORMS)
    return sorted(platforms)


def issue_number(url: str) -> str:
    """PyTorch keeps the number as a string; it is the URL's last segment."""
    return url.rstrip("/").split("/")[-1]


def issue_tests(title: str | None, body: str | None) -> list[tuple[str, list[str]]]:
    """The tests an issue disables, with their platforms: its one test, or an aggregate's list."""
    test = disabled_test(title)
    return [(test, parse_platforms(body))] if test is not None else multiple_tests(title, body)


def _merge(out: dict[str, list], test: str, url: str, platforms: list[str]) -> None:
    """One issue's word on `test`, as getDisabledTestsAndJobs.ts `updateMap` takes it: the first
    issue (by URL) keeps its number and URL; a later one makes it everywhere or adds platforms."""
    entry = out.get(test)
    if entry is None:
        out[test] = [issue_number(url), url, list(platforms)]
    elif not platforms:
        entry[2] = []
    elif entry[2]:
        entry[2].extend(platforms)


def condense(issues: Iterable[dict]) -> dict[str, list]:
    """disabled-tests-condensed.json from open issues (REST issue objects), as upstream's
    `getDisabledTests` builds it: `{test: [number, html_url, [platforms]]}`, each test under
    its `listed_name`."""
    out: dict[str, list] = {}
    for issue in sorted(issues, key=lambda i: i["html_url"]):
        for test, platforms in issue_tests(issue.get("title"), issue.get("body")):
            _merge(out, listed_name(test), issue["html_url"], platforms)
    return {test: [number, url, sorted(set(platforms))] for test, (number, url, platforms) in out.items()}


def pytorch_platforms(platforms: Iterable[str]) -> list[str]:
    """This project's platform names as the disabled list keeps them, sorted and unique; names
    neither knows are dropped (so a list of only those becomes [], everywhere, which is also
    what upstream would make of them)."""
    out = {_AS_PYTORCH.get(p, p) for p in platforms}
    return sorted(p for p in out if p in PYTORCH_PLATFORMS)


def flaky_bot_platforms(os_platforms: Iterable[str], configs: Iterable[str]) -> list[str]:
    """Where PyTorch's flaky bot disables a test that flaked in jobs of `os_platforms` (this
    project's names) that are neither dynamo nor inductor jobs, and in jobs of `configs` (dynamo,
    inductor) (test-infra utils.ts `getPlatformsAffected`): the OS platforms, and the configurations
    only when linux is not among them, as they are subsets of linux. A test flaky only under dynamo
    is disabled there, not in every Linux job."""
    names = pytorch_platforms(os_platforms)
    return names if "linux" in names else sorted({*names, *configs})


def runs_on(platform: str) -> frozenset[str] | None:
    """The platforms (this project's, as `pytorch_platforms` names them) and test configurations
    (dynamo, inductor) where PyTorch's runner disables a test for the issue platform `platform`;
    None for one that may hold on any of them (asan, slow)."""
    return _RUNS_ON.get(platform)


def platforms_line(platforms: list[str]) -> str:
    return f"Platforms: {', '.join(platforms)}".rstrip()


def added_platforms(current: list[str], flaked: list[str]) -> list[str]:
    """Platforms to add to an issue whose list is `current` now that the test flaked on
    `flaked`: none when `current` is empty (it already disables everywhere), and none where
    PyTorch's runner already disables the test for a name of `current` (`runs_on`: an issue on
    `windows` covers a flake on `win`, one on `linux` a flake on `rocm`; `_COVERS`: one on `linux`
    a flake under dynamo). Adding such a name would change nothing CI does, yet rewrite the issue,
    comment on it and restart the count of clean reruns that re-enables the test."""
    if not current:
        return []
    covered = set(current).union(*(runs_on(p) or () for p in current), *(_COVERS.get(p, ()) for p in current))
    return [p for p in dict.fromkeys(flaked) if p not in covered and not (runs_on(p) or {p}) <= covered]


def with_platforms(body: str | None, platforms: list[str]) -> str:
    """`body` with its `Platforms:` line set to `platforms`: the first line upstream reads as one
    (indented too) is replaced in place and later ones dropped (they would add to it); a body
    without one gets it on top. Lines are split where upstream splits them (`\\r`, `\\n`), and
    each kept line keeps its own line break: a human's CRLF body stays CRLF."""
    text = body or ""
    if not text:
        return platforms_line(platforms) + "\n"
    breaks = _LINE_BREAK.findall(text) + [""]
    out: list[tuple[str, str]] = []
    placed = False
    for line, brk in zip(_LINE_BREAK.split(text), breaks):
        if _is_platforms_line(line):
            if not placed:
                out.append((platforms_line(platforms), brk))
                placed = True
            continue
        out.append((line, brk))
    if not placed:
        out = [(platforms_line(platforms), breaks[0] or "\n"), ("", breaks[0] or "\n"), *out]
    return "".join(line + brk for line, brk in out)


# ---- the evidence a new issue carries ---------------------------------------------------


@dataclass(frozen=True)
class PlatformEvidence:
    """One platform's counts on main, the evidence that disables a test (flips are main's by
    nature), and `elsewhere`, the flake events of pull requests and other branches, which do not."""

    platform: str
    runs: int
    failures: int
    flake_events: int
    rerun_passes: int
    same_commit_pairs: int
    flips: int
    elsewhere: int = 0


@dataclass(frozen=True)
class FailingJob:
    url: str
    job_name: str
    head_sha: str
    on_main: bool
    at: dt.datetime | None


@dataclass(frozen=True)
class Evidence:
    """Why a test is disabled: the flaky verdict's counts per platform on main over its window
    and the most recent jobs where it failed (or needed a rerun)."""

    test: str
    file: str = ""
    window_start: str = ""
    window_end: str = ""
    platforms: list[PlatformEvidence] = field(default_factory=list)
    jobs: list[FailingJob] = field(default_factory=list)
    failing_jobs: int = 0
    last_failure_at: dt.datetime | None = None
    # when it last flaked on main (flaky_tests' last_main_flake_at): only that reopens a closed
    # issue or widens an open one; a later failure on a pull request, or a break, does not
    last_main_flake_at: dt.datetime | None = None

    @property
    def flake_events(self) -> int:
        return sum(p.flake_events for p in self.platforms)

    @property
    def runs(self) -> int:
        return sum(p.runs for p in self.platforms)

    @property
    def elsewhere(self) -> int:
        return sum(p.elsewhere for p in self.platforms)


def _md(text: str) -> str:
    """Text safe inside a markdown link label or table cell."""
    return re.sub(r"([\[\]|`<>])", r"\\\1", " ".join(str(text).split()))[:200]


def _when(at: dt.datetime | None) -> str:
    return at.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC") if at else "time unknown"


def evidence_text(evidence: Evidence, platforms: list[str], branch: str = "main") -> list[str]:
    """The lines that say why the test is disabled: main's evidence, which decided it (as for
    PyTorch's bot, flakiness seen only on pull requests disables nothing), per platform that ran
    it on main or flaked there; other branches' flake events in a sentence of their own. They
    name the repository's main `branch` as its people call it (`master` in some)."""
    flaked_on = [p.platform for p in evidence.platforms if p.flake_events > 0]
    window = (f"the window {evidence.window_start} to {evidence.window_end}"
              if evidence.window_start else "the flaky verdict's window")
    elsewhere = evidence.elsewhere
    lines = [
        f"This test was disabled because it is flaky on {branch}: over {window} it had "
        f"{evidence.flake_events} flake event(s) in {evidence.runs} run(s) on {branch}"
        + (f", on {', '.join(flaked_on)}" if flaked_on else "") + ". A flake event is a failure "
        "that passed on a rerun in the same job, a failure on a commit where the test also "
        "passed, or a failure between two passing commits. Jobs that died or where most "
        "tests failed at once are not counted."
        + ("" if platforms else " It flaked on every platform that ran it: the empty `Platforms:` line "
           "disables it everywhere.")
        + (f" Pull requests and other branches had {elsewhere} more flake event(s) in the window; those do "
           "not disable a test." if elsewhere else ""),
        "",
        f"| platform | runs on {branch} | failures | flake events | rerun passes | same-commit pairs | flips |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    return lines + [f"| {_md(p.platform)} | {p.runs} | {p.failures} | {p.flake_events} | {p.rerun_passes} | "
                    f"{p.same_commit_pairs} | {p.flips} |" for p in evidence.platforms if p.runs or p.flake_events]


def render_body(evidence: Evidence, platforms: list[str], branch: str = "main") -> str:
    """The body of a new DISABLED issue: the `Platforms:` line first (PyTorch's bot puts it
    there and humans look for it there), the evidence, how to re-enable, and the marker; in the
    words of a repository whose main branch is `branch`."""
    parts = [platforms_line(platforms), "", *evidence_text(evidence, platforms, branch)]
    if evidence.jobs:
        parts += ["", f"Most recent failing jobs ({len(evidence.jobs)} of {evidence.failing_jobs}, "
                      f"{branch} first):"]
        parts += [f"- {_when(j.at)} [{_md(j.job_name or 'job')}]({j.url}) "
                  f"{'on' if j.on_main else 'off'} {branch} at `{j.head_sha[:12]}`" for j in evidence.jobs]
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
