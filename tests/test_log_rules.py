"""The log classifier against PyTorch's: its ruleset loads unchanged, its regression fixtures
(real CI logs with the expected line marked) get PyTorch's verdicts, and the engine keeps the
semantics of `src/log.rs` and `src/engine.rs` (the cases of their unit tests are re-run here)."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from torchci_assets.derived.failures.classifier import (CONTEXT_DEPTH, CONTEXT_LINE_BYTES, Classifier,
                                                        classify_bytes, clean_line, normalize)
from torchci_assets.derived.failures.rules import (DEFAULT_RULES_PATH, RULES_ENV_VAR, RulesetError, line_anchored,
                                                   load_ruleset, parse_ruleset)

DATA = Path(__file__).parent / "data" / "log-classifier"
PYTORCH_RULES = DATA / "pytorch-ruleset.toml"
FIXTURES = sorted((DATA / "fixtures").glob("*.txt"))
MATCH_PREFIX = "#=MATCH=# "
TS = "2024-07-08T16:59:08.1747875Z "


@pytest.fixture(scope="module")
def pytorch_rules():
    return load_ruleset(PYTORCH_RULES)


def rules(*pairs: tuple[str, str]):
    body = "".join(f"[[rule]]\nname = '{n}'\npattern = '''{p}'''\n\n" for n, p in pairs)
    return parse_ruleset(body.encode(), "<test>")


def classify(text: str, ruleset):
    return classify_bytes(text.encode(), ruleset)


# ---- PyTorch's regression fixtures ------------------------------------------------------------


def _strip_with_map(raw: bytes) -> tuple[bytes, list[int]]:
    """log.rs's strip_line: the cleaned line and, per cleaned byte, its offset in `raw`."""
    ts = re.match(rb"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{7}Z ", raw)
    i = ts.end() if ts else 0
    ansi = re.compile(rb"\x1b(?:[@-Z\\-_]|\[[0-?]*[ -/]*[@-~])|\xc2(?:[\x80-\x9a\x9c-\x9f]|\x9b[0-?]*[ -/]*[@-~])")
    cleaned, where = bytearray(), []
    while i < len(raw):
        m = ansi.match(raw, i)
        if m:
            i = m.end()
            continue
        cleaned.append(raw[i])
        where.append(i)
        i += 1
    where.append(len(raw))
    return bytes(cleaned), where


def _annotate(raw: bytes, spans: list[tuple[int, int]]) -> bytes:
    """tests/classify.rs's annotate: ‹ › around each captured span, mapped back onto the raw line."""
    cleaned, where = _strip_with_map(raw)
    marks = []
    for s, e in spans:
        marks.append((where[s], 1))
        marks.append((where[e - 1] + 1 if e > s else where[s], 0))
    marks.sort()
    out, k = bytearray(), 0
    for idx in range(len(raw) + 1):
        while k < len(marks) and marks[k][0] == idx:
            out += "‹".encode() if marks[k][1] else "›".encode()
            k += 1
        if idx < len(raw):
            out.append(raw[idx])
    return bytes(out)


def _render_canonical(content: str, ruleset) -> str:
    """The fixture as PyTorch's harness would bless it with our classifier's verdict."""
    raw_lines = content.split("\n")[:-1] if content.endswith("\n") else content.split("\n")
    log = [ln[len(MATCH_PREFIX):].replace("‹", "").replace("›", "") if ln.startswith(MATCH_PREFIX) else ln
           for ln in raw_lines if not ln.startswith("#=SOURCE=#")]
    result = classify_bytes(("\n".join(log) + "\n").encode(), ruleset)
    out, n = [], 0
    for ln in raw_lines:
        if ln.startswith("#=SOURCE=#"):
            out.append(ln)
            continue
        n += 1
        bare = log[n - 1]
        if n == result.line_number:
            out.append(MATCH_PREFIX + _annotate(bare.encode(), result.capture_spans).decode())
        else:
            out.append(bare)
    return "\n".join(out) + "\n"


def test_pytorch_ships_41_fixtures_and_a_hundred_rules(pytorch_rules):
    assert len(FIXTURES) >= 40 and len(pytorch_rules) >= 100


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.stem)
def test_pytorch_fixture_gets_pytorchs_verdict(fixture, pytorch_rules):
    """Same line, same captures at the same places (the whole marked line must be identical)."""
    content = fixture.read_text(encoding="utf-8")
    canonical = _render_canonical(content, pytorch_rules)
    expected = [ln for ln in content.split("\n") if ln.startswith(MATCH_PREFIX)]
    got = [ln for ln in canonical.split("\n") if ln.startswith(MATCH_PREFIX)]
    assert got == expected
    assert canonical == content


def test_fixtures_classify_the_same_when_fed_line_by_line(pytorch_rules):
    """Blocks are an implementation detail: any split into whole lines gives the same verdict."""
    for fixture in FIXTURES[:12]:
        data = fixture.read_bytes()
        whole = classify_bytes(data, pytorch_rules)
        c = Classifier(pytorch_rules)
        for line in data.splitlines(keepends=True):
            c.feed(line)
        split = c.result()
        assert (split.rule, split.line_number, split.captures, split.context) == \
               (whole.rule, whole.line_number, whole.captures, whole.context), fixture.name


# ---- log.rs and engine.rs semantics -------------------------------------------------------------


def test_timestamp_and_escape_codes_are_stripped_before_matching():
    r = rules(("foo", "^test foo"))
    m = classify(f"2022-08-26T17:16:41.9362224Z \x1b[93;41mtest\x1b[0m foo\n{TS}lol!lol\n", r)
    assert (m.rule, m.line_number, m.line, m.captures) == ("foo", 1, "test foo", ["test foo"])
    # only the exact GitHub form is a timestamp (7 fraction digits and a space)
    assert classify("2022-08-26T17:16:41.936Z test foo\n", r).rule is None


def test_c1_control_codes_and_csi_are_removed_as_in_log_rs():
    assert clean_line("a\u009b31mb\u0085c\u009bé".encode()) == "abc\u009bé".encode()  # a lone CSI stays
    assert clean_line(b"\x1b(B\x1b[1;31mred\x1b[0m") == b"\x1b(Bred"  # ESC ( is no sequence log.rs knows


def test_priority_beats_line_order_and_the_last_match_of_the_winner_wins():
    r = rules(("higher priority", "^lol!"), ("lower priority", "^test"))
    m = classify("test foo\nlol!lol\ntest bar\n", r)
    assert (m.rule, m.line_number) == ("higher priority", 2)
    m = classify("test one\ntest two\nother\n", rules(("test", "^test (\\w+)")))
    assert (m.line_number, m.captures) == (2, ["two"])


def test_captures_are_the_groups_that_matched_or_the_whole_match():
    r = rules(("two", "^(a)(x)?(b)"))
    assert classify("abc\n", r).captures == ["a", "b"]
    assert classify("zz error: bad\n", rules(("whole", "error: \\w+"))).captures == ["error: bad"]


def test_sccache_compilation_log_is_ignored_between_its_banners():
    start = "=================== sccache compilation log ==================="
    stop = ("=========== If your build fails, please take a look at the log above for possible reasons "
            "===========")
    r = rules(("test", "^test"))
    assert classify(f"{start}\ntestt\n{stop}\n", r).rule is None
    assert classify(f"testt\n{start}\n{stop}\n", r).line_number == 1
    assert classify(f"{start}\n{stop}\ntestt\n", r).line_number == 3
    assert classify(f"{start}\ntest 1\n", r).rule is None  # never closed: ignored to the end


def test_boilerplate_error_lines_are_dropped():
    r = rules(("GHA error", "^##\\[error\\](.*)"))
    log = (f"{TS}##[error]RuntimeError: real failure\n{TS}##[error]Process completed with exit code 1.\n"
           f"{TS}[OSDC] Step script exited with code 1\n"
           f"{TS}##[error]Executing the custom container implementation failed with exit code 1.\n")
    m = classify(log, r)
    assert (m.line_number, m.captures) == (1, ["RuntimeError: real failure"])
    assert classify(f"{TS}##[error]TypeError: something real\n", r).line_number == 1


def test_line_numbers_count_every_line_of_the_file_as_given():
    r = rules(("boom", "boom"))
    m = classify("\ufeffbom line\r\n\r\n\n  \nboom\r\n", r)
    assert (m.line_number, m.line, m.lines) == (5, "boom", 5)
    assert classify("a\nb\nboom", r).line_number == 3  # no final line break
    assert classify("", r).lines == 0


def test_a_bom_keeps_the_first_timestamp_as_in_rust():
    r = rules(("ts", "^2026"))
    assert classify("\ufeff2026-11-01T12:00:00.1234567Z x\n", r).rule is None


def test_context_is_the_last_commands_newest_first_even_across_blocks():
    r = rules(("boom", "boom"))
    lines = [f"{TS}\x1b[32m+ step {i}\x1b[0m\n{TS}output {i}\n" for i in range(1, 16)] + [f"{TS}boom\n"]
    c = Classifier(r)
    c.feed("".join(lines[:6]).encode())
    c.feed("".join(lines[6:]).encode())
    m = c.result()
    assert m.line_number == 31
    assert m.context == [f"+ step {i}" for i in range(15, 3, -1)] and len(m.context) == CONTEXT_DEPTH
    assert classify("boom\n", r).context == []


def test_context_includes_a_matched_command_and_skips_what_the_classifier_drops():
    r = rules(("boom", "boom"))
    log = ("+ early\n"
           "=================== sccache compilation log ===================\n"
           "+ inside sccache\n"
           "=========== If your build fails, please take a look at the log above for possible reasons ===========\n"
           "+ echo '[OSDC] Step script exited'\n"
           "plain\n  + indented, not a command\n"
           "+ run boom\n"
           "+ later, after the match\n")
    m = classify(log, r)
    assert (m.line_number, m.context) == (8, ["+ run boom", "+ early"])


def test_a_huge_command_line_is_kept_cut():
    m = classify("+ " + "x" * (2 * CONTEXT_LINE_BYTES) + "\nboom\n", rules(("boom", "boom")))
    assert [len(c) for c in m.context] == [CONTEXT_LINE_BYTES]


# log.rs IGNORE_LINE_REGEXES, as upstream applies them to the cleaned line
_UPSTREAM_IGNORED = re.compile(r"^##\[error\]Process completed with exit code \d+\.?$|\[OSDC\] Step script exited"
                               r"|^##\[error\]Executing the custom container implementation failed"
                               r"|^##\[error\]TypeError: Cannot read properties of null \(reading 'jobPod'\)"
                               r"|\[OSDC\] Step cancelled by GitHub Actions")


def _fixture_log(fixture: Path) -> bytes:
    """A PyTorch regression fixture as the raw log it was cut from (markers removed)."""
    out = []
    for ln in fixture.read_text(encoding="utf-8").split("\n"):
        if ln.startswith("#=SOURCE=#"):
            continue
        if ln.startswith(MATCH_PREFIX):
            ln = ln[len(MATCH_PREFIX):].replace("‹", "").replace("›", "")
        out.append(ln)
    return "\n".join(out).encode()


def _upstream_context(data: bytes, line_number: int) -> list[str]:
    """rule_match.rs SerializedMatch::new: from the matched line back to line 1, over the lines
    Log::new kept (no boilerplate, nothing from an sccache banner to its closing one), each line
    starting with `+`, newest first, at most main.rs's CONTEXT_DEPTH (12)."""
    kept, ignoring = {}, False
    for i, raw in enumerate(data.decode().splitlines(), 1):
        line = clean_line(raw.encode()).decode()
        if _UPSTREAM_IGNORED.search(line):
            continue
        if ignoring:
            ignoring = "=========== If your build fails, please take a look at the log above" not in line
            continue
        if "=================== sccache compilation log ===================" in line:
            ignoring = True
            continue
        kept[i] = line
    commands = [kept[i] for i in range(line_number, 0, -1) if kept.get(i, "").startswith("+")]
    return commands[:12]


def test_context_is_upstreams_command_stack(pytorch_rules):
    data = _fixture_log(DATA / "fixtures" / "ghstack_out_of_sync.txt")
    m = classify_bytes(data, pytorch_rules)
    assert m.rule == "ghstack PR out of sync"
    assert m.context[0].startswith("+ python3 .github/scripts/trymerge.py")
    assert m.context == _upstream_context(data, m.line_number)


def test_context_agrees_with_upstream_on_pytorchs_fixtures(pytorch_rules):
    differ, with_commands = [], 0
    for fixture in FIXTURES:
        data = _fixture_log(fixture)
        m = classify_bytes(data, pytorch_rules)
        with_commands += bool(m.context)
        if m.context != _upstream_context(data, m.line_number):
            differ.append(fixture.stem)
    assert differ == [] and with_commands > 0


def test_a_block_must_end_with_a_line_break_unless_it_is_the_last():
    c = Classifier(rules(("x", "x")))
    c.feed(b"partial")
    with pytest.raises(ValueError, match="start a line"):
        c.feed(b"more\n")


def test_invalid_utf8_is_replaced_not_fatal():
    m = classify_bytes(b"ok\n\xff\xfe error: boom\n", rules(("e", "error: (\\w+)")))
    assert (m.line_number, m.captures, m.line, m.invalid_utf8) == (2, ["boom"], "\ufffd\ufffd error: boom", True)
    assert not classify("ok\nnaïve error: boom\n", rules(("e", "error: (\\w+)"))).invalid_utf8


def test_an_invalid_utf8_byte_is_matched_as_its_replacement(pytorch_rules):
    # a Windows runner whose workspace path has a cp1252 byte (ü = 0xFC) in every compiler line
    data = _fixture_log(DATA / "fixtures" / "msvc_compiler_error.txt").replace(b"actions-runner", b"actions-r\xfcnner")
    replaced = data.decode("utf-8", "replace").encode()
    want = classify_bytes(replaced, pytorch_rules)
    assert (want.rule, want.line_number) == ("MSVC compiler error", 59)
    got = classify_bytes(data, pytorch_rules)
    assert (got.rule, got.line_number, got.line, got.invalid_utf8) == (want.rule, 59, want.line, True)


# ---- the prefilter finds exactly the lines a per-line match finds -------------------------------

TRICKY = [
    ("anchored", "^ERROR: (.*)"), ("end", "done$"), ("text anchors", "\\Afoo\\z"),
    ("no multiline", "(?-m)^bar"), ("spaces", "^\\s*Error \\((\\w+)\\) Linter failed$"),
    ("negated class", "^(?:\\[WARNING [^\\]]+\\] )?(The PR is introducing)"), ("class caret", "[\\^$]x"),
    ("dollar in class", "cost [$]\\d+"), ("empty alternative", "^(?:|zz)$"), ("posix", "^[[:digit:]]+ ok$"),
    ("quoted", "\\Q^not an anchor$\\E"), ("case", "(?i)^fatal"), ("clock", "\\d\\d:\\d\\d:"), ("stamp", "^2024-"),
]


def test_line_anchored_rewrites_only_anchors():
    assert line_anchored("^a$") == "(?m:^)a(?m:$)"
    assert line_anchored("\\Aa\\z") == "(?m:^)a(?m:$)"
    assert line_anchored("[^$]\\^\\$") == "[^$]\\^\\$"
    assert line_anchored("[]^]x") == "[]^]x"
    assert line_anchored("\\Q^$\\E$") == "\\Q^$\\E(?m:$)"
    assert line_anchored("\\p{^Greek}[[:^alpha:]]^") == "\\p{^Greek}[[:^alpha:]](?m:^)"
    assert line_anchored("^a|\\Ab", "<ls>") == "<ls>a|<ls>b"


def test_prefilter_candidates_equal_per_line_matches_on_random_lines():
    rs = rules(*TRICKY)
    pieces = ["ERROR: x", "done", "foo", "bar", "  Error (X) Linter failed", "[WARNING a] The PR is introducing",
              "^x", "$x", "cost $12", "", "zz", "123 ok", "^not an anchor$", "FATAL", " ", "\t", "[WARNING ",
              "]", "\x1b[1m", "\u0085", TS, TS, "\ufeff", "12:34:"]
    rng = random.Random(7)
    for _ in range(400):
        lines = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 3))) for _ in range(rng.randint(1, 12))]
        text = "\n".join(lines) + rng.choice(["", "\n"])
        expected = {}
        rust_lines = text.split("\n")[:-1] if text.endswith("\n") or not text else text.split("\n")  # lines()
        for n, ln in enumerate(rust_lines, 1):
            for i in rs.set.Match(clean_line(ln.encode())) or ():
                expected[i] = n
        got = classify(text, rs)
        if not expected:
            assert got.rule is None, text
        else:
            best = min(expected)
            assert (got.rule_index, got.line_number) == (best, expected[best]), text


def test_normalize_keeps_line_breaks_one_for_one():
    raw = f"{TS}a\r\n\x1b[1m\x1b[0m\r\n{TS}{TS}b\n".encode()
    assert normalize(raw, keep_stamps=False) == (f"\na\n\n{TS}b\n".encode(), False)
    # an escape code at a line start: timestamps are removed before the codes, as log.rs does
    assert normalize(raw) == (f"\na\n\n{TS}b\n".encode(), False)
    assert normalize(f"{TS}a\x1b[0m\n{TS}{TS}b".encode()) == (f"\n{TS}a\n{TS}{TS}b".encode(), True)


def test_an_escape_code_before_a_timestamp_keeps_it_as_in_log_rs():
    r = rules(("stamp", "^2022"), ("text", "^text"))
    m = classify(f"\x1b[0m2022-08-26T17:16:41.9362224Z text\n{TS}text\n", r)
    assert (m.rule, m.line_number, m.line) == ("stamp", 1, "2022-08-26T17:16:41.9362224Z text")
    m = classify(f"{TS}\x1b[0m2022-08-26T17:16:41.9362224Z x\n", r)
    assert (m.rule, m.line) == ("stamp", "2022-08-26T17:16:41.9362224Z x")


# ---- rules files ---------------------------------------------------------------------------------


def test_default_ruleset_is_our_own_and_loads(monkeypatch):
    monkeypatch.delenv(RULES_ENV_VAR, raising=False)
    ours = load_ruleset()
    assert ours.source == str(DEFAULT_RULES_PATH) and len(ours) >= 15
    theirs = load_ruleset(PYTORCH_RULES)
    assert ours.digest != theirs.digest
    assert len({r.name for r in ours.rules} & {r.name for r in theirs.rules}) <= 2


def test_torchci_log_rules_points_to_another_file(monkeypatch, tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text("[[rule]]\nname = 'mine'\npattern = 'x'\n")
    monkeypatch.setenv(RULES_ENV_VAR, str(f))
    assert [r.name for r in load_ruleset().rules] == ["mine"]
    monkeypatch.setenv(RULES_ENV_VAR, str(tmp_path / "missing.toml"))
    with pytest.raises(RulesetError, match=r"missing.toml \(from \$TORCHCI_LOG_RULES\): cannot read"):
        load_ruleset()


@pytest.mark.parametrize("body,message", [
    (b"[[rule]\n", "not valid TOML"),
    (b"title = 'x'\n", "no \\[\\[rule\\]\\] entries"),
    (b"[[rule]]\npattern = 'x'\n", "rule 1: needs a non-empty string `name`"),
    (b"[[rule]]\nname = 'a'\npattern = 'x'\n[[rule]]\nname = 'b'\n", "rule 2 \\('b'\\): needs a non-empty string"),
    (b"[[rule]]\nname = 'bad'\npattern = '(unclosed'\n", "rule 1 \\('bad'\\): pattern .* is not valid here: missing \\)"),
    (b"[[rule]]\nname = 'look'\npattern = 'a(?=b)'\n", "rule 1 \\('look'\\): .*not valid here"),
    (b"\xff", "not UTF-8"),
])
def test_bad_rules_files_are_refused_with_the_rule_named(body, message):
    with pytest.raises(RulesetError, match=message):
        parse_ruleset(body, "rules.toml")


@pytest.mark.parametrize("pattern, what", [
    (r"^code [[a-c][0-9]]+$", "a `\\[` inside a character class"),  # a nested class (union) in Rust
    (r"^code [a-z&&[^aeiou]]+$", "`&&` inside a character class"),  # intersection with a nested class
    (r"^code [a-z&&aeiou]+$", "`&&` inside a character class"),  # intersection
    (r"^code [a-z--aeiou]+$", "`--` inside a character class"),  # difference
    (r"^code [a-z~~aeiou]+$", "`~~` inside a character class"),  # symmetric difference
])
def test_rust_only_class_syntax_is_refused_with_the_rule_named(pattern, what):
    """RE2 accepts these, reading `[ & - ~` as literals: a rule tested with Rust would never match."""
    body = f"[[rule]]\nname = 'ok'\npattern = 'x'\n[[rule]]\nname = 'rusty'\npattern = '''{pattern}'''\n"
    with pytest.raises(RulesetError, match=f"rule 2 \\('rusty'\\): pattern .* has {what}"):
        parse_ruleset(body.encode(), "rules.toml")


@pytest.mark.parametrize("pattern", [r"[[:alpha:]]+", r"[\[\]]", r"[a\-\-b]", r"[\w.-]+ && [-a] -- x", r"[]a-]",
                                     r"\Q[a&&b]\E", r"[&~-]"])
def test_classes_rust_and_re2_read_alike_are_accepted(pattern):
    parse_ruleset(f"[[rule]]\nname = 'n'\npattern = '''{pattern}'''\n".encode(), "rules.toml")


def test_unknown_keys_are_ignored_like_serde_does():
    rs = parse_ruleset(b"version = 2\n[[rule]]\nname = 'a'\npattern = 'x'\nowner = 'me'\n", "r.toml")
    assert [r.name for r in rs.rules] == ["a"]
