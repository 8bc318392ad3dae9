"""Find the line that explains a failed job, with PyTorch's log classifier's semantics
(pytorch/test-infra `aws/lambda/log-classifier/src/{log,engine,rule_match}.rs`):

- Each line is cleaned before matching: the GitHub Actions timestamp prefix
  (`2026-11-01T12:00:00.1234567Z `, exactly seven fraction digits) is removed, then every
  ANSI escape sequence. Line numbers stay those of the file as given (1-based).
- Boilerplate lines are dropped (`##[error]Process completed with exit code N.`, OSDC and
  custom-container wrapper noise) and so is everything from the sccache compilation-log
  banner to its closing banner: they never explain a failure.
- Priority beats line order: the winner is the highest-priority rule (first in the file) that
  matches any line, and of that rule's matches the *last* line (later lines are closer to the
  failure). Captures are the rule's groups that took part in the match, or the whole match
  when the pattern has no group.
- The context is rule_match.rs's: the shell commands that led to the failure, i.e. the kept
  lines starting with `+` (bash `set -x` output) from the matched line back, newest first, at
  most CONTEXT_DEPTH (main.rs's default). Boilerplate and sccache lines are not kept, so they
  are never context.
- Invalid UTF-8 is replaced (U+FFFD) before matching, so that one stray byte (a cp1252 path on a
  Windows runner) does not stop `.` or `\\S` from matching the rest of its line. Rust's classifier
  refuses such a log outright; here the log is classified and flagged (`invalid_utf8`).

Speed: a log is fed as blocks of whole lines (a few MB each). A block is normalised in one or
two passes over its bytes (ANSI codes removed; timestamps are left in place, the prefilter
skips them at line starts), then the rules' combined prefilter (rules.py) finds the lines on
which some rule matches; only those lines are cleaned exactly and looked at in Python. Rules
ranked below the best match so far can never win, so they leave the prefilter. Command lines
between two such lines are found by a byte scan, and only the last CONTEXT_DEPTH of them are
looked at. A block that is not ASCII is checked for valid UTF-8 (a C-speed decode), and
replaced only when invalid.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field

from re2 import _re2

from torchci_assets.derived.failures.rules import SCCACHE_START, SCCACHE_STOP, Ruleset

CONTEXT_DEPTH = 12  # upstream main.rs's CONTEXT_DEPTH
# A context line is kept to this many bytes: more than the 4,096 characters job_failure stores
# (4 bytes a character at most, and one more so a cut line still shows as cut), and a bound on
# what a log of huge command lines can hold.
CONTEXT_LINE_BYTES = 4 * 4096 + 4
_UNANCHORED = _re2.RE2.Anchor.UNANCHORED

# Applied after a newline: the block is prefixed with one, so the first line is handled alike.
_TIMESTAMP = re.compile(rb"\n\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{7}Z ")
_LINE_TIMESTAMP = re.compile(rb"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{7}Z ")
# A command line of normalised text (`_clean` would leave it starting with `+`), from its newline.
_COMMAND = re.compile(rb"\n(?:\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{7}Z )?\+")
_STAMP_LEN = len(b"2026-11-01T12:00:00.1234567Z ")
# log.rs's ESCAPE_CODE_REGEX on UTF-8 bytes: ESC + one of @-Z \ ] ^ _, a C1 control character
# (U+0080-U+009F but U+009B), or a CSI sequence (ESC [ or U+009B, parameters, intermediates, a
# final byte). Factored by first byte so the scan skips to ESC / 0xC2 bytes.
_ANSI = re.compile(rb"\x1b(?:[@-Z\\-_]|\[[0-?]*[ -/]*[@-~])|\xc2(?:[\x80-\x9a\x9c-\x9f]|\x9b[0-?]*[ -/]*[@-~])")
# log.rs's IGNORE_LINE_REGEXES: lines always printed when a step fails that never say why.
_IGNORED = re.compile(
    rb"^##\[error\]Process completed with exit code \d+\.?$"
    rb"|\[OSDC\] Step script exited"
    rb"|^##\[error\]Executing the custom container implementation failed"
    rb"|^##\[error\]TypeError: Cannot read properties of null \(reading 'jobPod'\)"
    rb"|\[OSDC\] Step cancelled by GitHub Actions")


def valid_utf8(block: bytes) -> bytes | None:
    """`block` with invalid UTF-8 replaced by U+FFFD, or None when it is valid (the common case,
    checked without copying). RE2's `.` and `\\S` never match an invalid byte, so an unreplaced
    byte would hide the rest of its line from the rules. A line break is never part of an invalid
    sequence, so line numbers are unchanged."""
    if block.isascii():
        return None
    try:
        block.decode("utf-8")
    except UnicodeDecodeError:
        return block.decode("utf-8", "replace").encode()
    return None


def normalize(block: bytes, keep_stamps: bool = True) -> tuple[bytes, bool]:
    """(text, stamped): the block's lines without ANSI codes, after a leading b"\\n" (a sentinel
    that gives every line, the first included, a newline before it); `stamped` when the lines
    still carry their timestamp (see `_clean`). Line breaks are kept one for one, so line
    numbers are unchanged. Bytes stay bytes: RE2 matches UTF-8 without decoding, and only the
    reported lines are decoded. The block must be valid UTF-8 (see `valid_utf8`).

    log.rs removes a line's timestamp before its ANSI codes. Removing the codes first gives the
    same line unless a code comes before the timestamp (removing it would expose a timestamp
    log.rs keeps), so only a block with an escape code at a line start, or `keep_stamps` false,
    pays a pass removing timestamps first."""
    if b"\r" in block:
        block = block.replace(b"\r\n", b"\n")  # Rust's str::lines() drops the \r of a \r\n
    text = b"\n" + block
    stamped = keep_stamps and b"\n\x1b" not in text and b"\n\xc2" not in text
    if not stamped:
        text = _TIMESTAMP.sub(b"\n", text)
    if b"\x1b" in text or b"\xc2" in text:
        text = _ANSI.sub(b"", text)
    return text, stamped


def _clean(line: bytes, stamped: bool) -> bytes:
    """A line of normalised text as the rules see it: without its timestamp if it still has one."""
    return line[_STAMP_LEN:] if stamped and _LINE_TIMESTAMP.match(line) else line


def clean_line(raw: bytes) -> bytes:
    """One raw line (without its line break) as the rules see it."""
    return normalize(valid_utf8(raw) or raw, keep_stamps=False)[0][1:]


@dataclass
class Classification:
    rule: str | None = None
    rule_index: int | None = None
    line_number: int | None = None  # 1-based, in the file as given
    line: str | None = None  # cleaned: no timestamp, no ANSI codes
    captures: list[str] = field(default_factory=list)
    capture_spans: list[tuple[int, int]] = field(default_factory=list)  # byte offsets in the cleaned line
    context: list[str] = field(default_factory=list)  # up to CONTEXT_DEPTH commands (`+` lines) to `line`, newest first
    lines: int = 0  # lines read
    invalid_utf8: bool = False  # some bytes were not UTF-8 and were matched as U+FFFD

    def as_json(self) -> dict:
        """What `torchci classify-log --json` prints."""
        return {"rule": self.rule, "line_number": self.line_number, "line": self.line, "captures": self.captures}


def _decode(b: bytes) -> str:
    return b.decode("utf-8", "replace")


class Classifier:
    """Feed a log as blocks of whole lines, in order; `result()` gives the classification.

    Holds the last match of each rule still able to win (a line and its context) and the last
    CONTEXT_DEPTH command lines, so memory is bounded by the number of rules, whatever the log's
    length.
    """

    def __init__(self, ruleset: Ruleset):
        self.ruleset = ruleset
        self.live = len(ruleset)  # rules[:live] can still win
        self.lines = 0  # line breaks seen so far
        self.pending = False  # the last block ended without a line break
        self.ignoring = False  # inside an sccache compilation log
        self.invalid_utf8 = False
        self.last: dict[int, tuple[int, bytes, tuple[bytes, ...]]] = {}  # rule -> (line number, line, context)
        self.commands: deque[bytes] = deque(maxlen=CONTEXT_DEPTH)  # the last kept `+` lines, oldest first

    def feed(self, block: bytes) -> None:
        if not block:
            return
        if self.pending:
            raise ValueError("a block must start a line: the previous one did not end with a line break")
        replaced = valid_utf8(block)
        if replaced is not None:
            self.invalid_utf8, block = True, replaced
        text, stamped = normalize(block)
        end = len(text)
        counted_to, lines_before = 1, self.lines
        ends_line = block.endswith(b"\n")
        pos = 1
        live, prefilter = self.live, self.ruleset.prefilter(self.live)
        while pos <= end:
            if live != self.live:  # a better match: the rules below it leave the prefilter
                live, prefilter = self.live, self.ruleset.prefilter(self.live)
            hit = prefilter.Match(_UNANCHORED, text, pos, end)[0][0]
            if hit < 0:
                break
            start = text.rfind(b"\n", 0, hit) + 1
            if start == end and ends_line:  # an empty match after the final line break: not a line
                break
            stop = text.find(b"\n", hit)
            if stop < 0:
                stop = end
            self._commands(text, pos, start, stamped)
            lines_before += text.count(b"\n", counted_to, start)
            counted_to = start
            self._line(_clean(text[start:stop], stamped), lines_before + 1)
            pos = stop + 1
        self._commands(text, pos, end, stamped)
        self.last = {i: m for i, m in self.last.items() if i < self.live}  # outranked matches can never win
        self.lines += text.count(b"\n", 1)
        self.pending = not ends_line

    def _commands(self, text: bytes, pos: int, stop: int, stamped: bool) -> None:
        """Keep the command lines among the block's lines from `pos` to `stop`, none of which the
        prefilter matched (so none is an sccache marker): only the last CONTEXT_DEPTH can matter."""
        if self.ignoring or pos >= stop:
            return
        for m in deque(_COMMAND.finditer(text, pos - 1, stop), maxlen=CONTEXT_DEPTH):
            begin = m.start() + 1
            line_end = text.find(b"\n", begin, stop)
            self._command(_clean(text[begin:stop if line_end < 0 else line_end], stamped))

    def _command(self, line: bytes) -> None:
        if b"[OSDC]" in line and _IGNORED.search(line):
            return  # boilerplate is dropped before anything, so it is no context either
        self.commands.append(line[:CONTEXT_LINE_BYTES])

    def _line(self, line: bytes, number: int) -> None:
        """One (cleaned) line on which the prefilter matched: the per-line steps of log.rs and
        engine.rs, and rule_match.rs's context, which includes the matched line."""
        if (b"##[error]" in line or b"[OSDC]" in line) and _IGNORED.search(line):
            return
        if self.ignoring:
            if SCCACHE_STOP in line:
                self.ignoring = False
            return
        if SCCACHE_START in line:
            self.ignoring = True
            return
        if line.startswith(b"+"):
            self._command(line)
        context = None
        for i in self.ruleset.set_matcher.Match(line):
            if i < self.live:
                if context is None:
                    context = tuple(reversed(self.commands))
                self.last[i] = (number, line, context)
        if self.last:
            self.live = min(self.last) + 1

    def result(self) -> Classification:
        lines = self.lines + (1 if self.pending else 0)
        if not self.last:
            return Classification(lines=lines, invalid_utf8=self.invalid_utf8)
        index = min(self.last)
        number, line, context = self.last[index]
        rule = self.ruleset.rules[index]
        spans = rule.regex._regexp.Match(_UNANCHORED, line, 0, len(line))
        if rule.regex.groups == 0:
            kept = [spans[0]]
        else:
            kept = [s for s in spans[1:] if s[0] >= 0]
        return Classification(rule=rule.name, rule_index=index, line_number=number, line=_decode(line),
                              captures=[_decode(line[a:b]) for a, b in kept], capture_spans=list(kept),
                              context=[_decode(c) for c in context], lines=lines, invalid_utf8=self.invalid_utf8)


def classify_bytes(data: bytes, ruleset: Ruleset) -> Classification:
    """Classify a whole log held in memory (tests, small files); see Classifier for streams."""
    c = Classifier(ruleset)
    c.feed(data)
    return c.result()
