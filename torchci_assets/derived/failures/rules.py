"""Log classification rules in PyTorch's `ruleset.toml` format (pytorch/test-infra
`aws/lambda/log-classifier/ruleset.toml`): ordered `[[rule]]` tables with a `name` and a
`pattern`, the first rule the highest priority.

The patterns are written for Rust's `regex` crate, which descends from RE2, so they are
compiled with RE2 (google-re2) rather than Python's `re`: the same syntax (`(?<name>..)`,
`\\pL`, `[[:alpha:]]`, `\\z`), the same guarantees (no backtracking, no look-around, linear
time) and the same leftmost-first matching. The differences: Rust's `\\d`, `\\w`, `\\s` and `\\b`
are Unicode-aware, RE2's are ASCII (visible only on non-ASCII text); Rust's verbose mode `(?x)`
is refused here with the rule named; and so is Rust's class syntax that RE2 accepts with
another meaning (nested classes, `&&`, `--`, `~~` inside a class), which would otherwise load
and silently never match. PyTorch's own file loads and classifies unchanged
(tests/test_log_rules.py runs its regression fixtures).

Every rule is also compiled into one combined *prefilter*: all patterns as alternatives, with
`^`/`$`/`\\A`/`\\z` rewritten to line anchors and `never_nl` so no alternative can span a
newline. Run over a whole block of normalised log text it reports exactly the lines on which
some rule matches, so the per-line work is done for those lines only.
"""

from __future__ import annotations

import hashlib
import os
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import re2

RULES_ENV_VAR = "TORCHCI_LOG_RULES"
DEFAULT_RULES_PATH = Path(__file__).with_name("default_rules.toml")
PREFILTER_MAX_MEM = 64 << 20  # RE2's DFA cache for the combined pattern (allocated as used)

# PyTorch's classifier (src/log.rs) ignores the lines between these two markers (an sccache
# compilation log full of misleading errors); the prefilter must see them to track the state.
SCCACHE_START = b"=================== sccache compilation log ==================="
SCCACHE_STOP = (b"=========== If your build fails, please take a look at the log above for possible reasons "
                b"===========")
# Where a line starts for the prefilter: at a line start, after the line's timestamp if it still has one.
LINE_START = r"(?m:^)(?:\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{7}Z )?"


class RulesetError(ValueError):
    """A rules file that cannot be used; the message names the file and the rule."""


def _options(*, prefilter: bool = False) -> re2.Options:
    o = re2.Options()
    o.log_errors = False  # RE2 would print parse errors to stderr; we raise them instead
    if prefilter:
        o.never_nl = True
        o.never_capture = True
        o.max_mem = PREFILTER_MAX_MEM
    return o


@dataclass(frozen=True)
class Rule:
    index: int  # 0 = highest priority
    name: str
    pattern: str
    regex: re2._Regexp = field(repr=False, compare=False)


class Ruleset:
    """An ordered list of rules, with the combined prefilters and the rule set matcher built once."""

    def __init__(self, rules: list[Rule], source: str, digest: str):
        self.rules = tuple(rules)
        self.source = source
        self.digest = digest
        self._prefilters: dict[int, object] = {}
        self.set = re2.Set.SearchSet(_options())
        for r in self.rules:
            self.set.Add(r.pattern)
        self.set.Compile()
        self.set_matcher = self.set._set  # the raw RE2::Set: Match(bytes) -> rule indices, without the wrapper

    def __len__(self) -> int:
        return len(self.rules)

    def __repr__(self) -> str:
        return f"Ruleset({self.source!r}, {len(self.rules)} rules)"

    def prefilter(self, live: int):
        """The raw RE2 object matching any line on which one of the first `live` rules matches,
        or either sccache marker. Cached: a log's live rules shrink as better matches are found."""
        regex = self._prefilters.get(live)
        if regex is None:
            parts = [f"(?:{line_anchored(r.pattern, LINE_START)})" for r in self.rules[:live]]
            parts += [re2.escape(m.decode()) for m in (SCCACHE_START, SCCACHE_STOP)]
            regex = re2.compile("|".join(parts), _options(prefilter=True))._regexp
            if len(self._prefilters) >= 8:
                self._prefilters.clear()
            self._prefilters[live] = regex
        return regex


def _tokens(pattern: str) -> Iterator[tuple[str, str]]:
    """`pattern` as (token, kind) pairs that join back into it. Kinds: `text` and `escape` outside
    a character class; `open` (`[`, `[^`, with a leading literal `]`), `close`, `posix` (`[:alpha:]`),
    `class_escape` and `class_char` inside one.

    A small scanner, not a parser: it skips escapes (`\\Q...\\E`, `\\p{..}`, `\\x{..}`) and tells a
    class's own characters from the same characters outside it, which is all its callers need.
    """
    i, n = 0, len(pattern)
    in_class = False
    while i < n:
        c = pattern[i]
        if c == "\\":
            nxt = pattern[i + 1:i + 2]
            if nxt == "Q":
                end = pattern.find("\\E", i + 2)
                j = n if end < 0 else end + 2
            elif nxt in ("p", "P", "x") and pattern[i + 2:i + 3] == "{":
                end = pattern.find("}", i + 2)
                j = n if end < 0 else end + 1
            elif nxt in ("p", "P"):
                j = i + 3
            else:
                j = i + 2
            yield pattern[i:j], "class_escape" if in_class else "escape"
            i = j
        elif in_class:
            if pattern.startswith("[:", i):
                end = pattern.find(":]", i + 2)
                j = n if end < 0 else end + 2
                yield pattern[i:j], "posix"
                i = j
                continue
            if c == "]":
                in_class = False
                yield c, "close"
            else:
                yield c, "class_char"
            i += 1
        elif c == "[":
            in_class = True
            j = i + 1
            if pattern[j:j + 1] == "^":
                j += 1
            if pattern[j:j + 1] == "]":  # a `]` first in a class is a literal
                j += 1
            yield pattern[i:j], "open"
            i = j
        else:
            yield c, "text"
            i += 1


def line_anchored(pattern: str, line_start: str = "(?m:^)") -> str:
    """`pattern` with its text anchors made line anchors (`^`, `\\A` -> `line_start`; `$`, `\\z` ->
    `(?m:$)`), so that matched against many lines at once it behaves as against each line.

    Inside a character class `^` negates and `$` is a literal, so only tokens outside one change.
    Run only on patterns RE2 already accepted.
    """
    out: list[str] = []
    for token, kind in _tokens(pattern):
        if kind == "escape":
            token = {"\\A": line_start, "\\z": "(?m:$)"}.get(token, token)
        elif kind == "text":
            token = line_start if token == "^" else "(?m:$)" if token == "$" else token
        out.append(token)
    return "".join(out)


def rust_only_class(pattern: str) -> str | None:
    """What in `pattern` is class syntax of Rust's regex that RE2 accepts with another meaning, or
    None. Rust nests classes (`[[a-c][0-9]]`) and combines them (`&&` intersection, `--`
    difference, `~~` symmetric difference); RE2 reads each of those characters as a literal, so a
    rule written and tested for PyTorch's classifier would load here and silently never match."""
    previous = None
    for token, kind in _tokens(pattern):
        if kind != "class_char":
            previous = None
            continue
        if token == "[":
            return "a `[` inside a character class (a nested class in Rust)"
        if token == previous and token in "&-~":
            return f"`{token * 2}` inside a character class (a set operation in Rust)"
        previous = token
    return None


def parse_ruleset(data: bytes, source: str) -> Ruleset:
    """A Ruleset from the bytes of a rules file; RulesetError naming `source` and the rule if unusable.

    Like PyTorch's loader, unknown keys are ignored (a rules file may carry comments-as-data),
    but a rule without a string `name` and `pattern`, or with a pattern RE2 refuses, is an error.
    """
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise RulesetError(f"{source}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except tomllib.TOMLDecodeError as e:
        raise RulesetError(f"{source}: not valid TOML: {e}") from None
    raw = doc.get("rule")
    if not isinstance(raw, list) or not raw:
        raise RulesetError(f"{source}: no [[rule]] entries (each needs a name and a pattern, "
                           "the first rule the highest priority)")
    rules = []
    for i, entry in enumerate(raw):
        where = f"{source}: rule {i + 1}"
        if not isinstance(entry, dict):
            raise RulesetError(f"{where}: must be a [[rule]] table")
        name, pattern = entry.get("name"), entry.get("pattern")
        if not isinstance(name, str) or not name.strip():
            raise RulesetError(f"{where}: needs a non-empty string `name`")
        if not isinstance(pattern, str) or not pattern:
            raise RulesetError(f"{where} ({name!r}): needs a non-empty string `pattern`")
        try:
            regex = re2.compile(pattern, _options())
        except re2.error as e:
            reason = e.args[0].decode() if e.args and isinstance(e.args[0], bytes) else str(e)
            raise RulesetError(f"{where} ({name!r}): pattern {pattern!r} is not valid here: {reason}") from None
        rust_only = rust_only_class(pattern)
        if rust_only:
            raise RulesetError(f"{where} ({name!r}): pattern {pattern!r} has {rust_only}, which RE2 reads as "
                               "literal characters; write the class without nesting or set operations, and "
                               "escape a literal `[`, `&&`, `--` or `~~` inside a class with `\\`") from None
        rules.append(Rule(i, name, pattern, regex))
    ruleset = Ruleset(rules, source, hashlib.sha256(data).hexdigest())
    try:
        ruleset.prefilter(len(ruleset))
    except re2.error as e:
        reason = e.args[0].decode() if e.args and isinstance(e.args[0], bytes) else str(e)
        raise RulesetError(f"{source}: the {len(rules)} rules do not fit in one combined pattern ({reason}); "
                           "split or simplify the largest patterns") from None
    return ruleset


def rules_path(path: str | os.PathLike | None = None) -> Path:
    """The rules file to use: `path`, else $TORCHCI_LOG_RULES, else the bundled default."""
    return Path(path or os.environ.get(RULES_ENV_VAR) or DEFAULT_RULES_PATH)


def load_ruleset(path: str | os.PathLike | None = None) -> Ruleset:
    """The ruleset at `path`, $TORCHCI_LOG_RULES or the bundled default."""
    where = rules_path(path)
    try:
        data = where.read_bytes()
    except OSError as e:
        origin = f" (from ${RULES_ENV_VAR})" if not path and os.environ.get(RULES_ENV_VAR) else ""
        raise RulesetError(f"{where}{origin}: cannot read the log rules: {e.strerror}") from None
    return parse_ruleset(data, str(where))
