"""The documentation a new user walks (README.md, docs/, deploy/README.md, bench/README.md) says what
the code does: its links land, the functions the README's journey names exist where it says, the
settings it names are the ones the code reads with the defaults it gives, and the make targets and
command options it shows exist. Prose does not move when the code does (a function renamed, a
default changed), so each is checked against the code here."""

import contextlib
import io
import re
from pathlib import Path

import pytest

from jobs.gap_repair import REPAIR_EVERY_MIN, repair_limit
from resources.configured import DEFAULT_URIS
from torchci_assets.cadence import refresh_interval_s
from torchci_assets.checks import max_reject_rate
from torchci_assets.cli import SUBCOMMANDS
from torchci_assets.cli import main as torchci
from torchci_assets.derived.sharding.regressions import max_cost_share
from torchci_assets.ingest.junit import max_report_bytes
from torchci_assets.ingest.lines import max_line_bytes
from torchci_assets.ingest.report_zips import max_zip_bytes
from torchci_assets.preflight import known_variables
from torchci_assets.receiver.settings import ReceiverSettings, parse_size

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "deploy" / "README.md",
        ROOT / "bench" / "README.md"]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def prose(text: str) -> str:
    """`text` without fenced blocks and inline code, whose brackets are examples, not links."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def anchors(path: Path) -> set[str]:
    """The #fragments GitHub gives a Markdown file's headings (a repeated one gets -1, -2, ...)."""
    found, seen = set(), {}
    for heading in re.findall(r"^#+ +(.+)$", re.sub(r"^```.*?^```", "", path.read_text(), flags=re.M | re.S),
                              flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", re.sub(r"<[^>]+>", "", heading).strip().lower()).replace(" ", "-")
        n = seen[slug] = seen.get(slug, -1) + 1
        found.add(f"{slug}-{n}" if n else slug)
    return found


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """The relative links of one document whose file, or #anchor in it, does not exist."""
    broken = []
    for target in LINK.findall(prose(path.read_text())):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, fragment = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists() or (fragment and dest.suffix == ".md" and fragment not in anchors(dest)):
            broken.append(f"{path.relative_to(root)}: {target}")
    return broken


def test_the_link_check_finds_a_missing_file_and_a_missing_anchor(tmp_path):
    (tmp_path / "other.md").write_text("# Top\n\n## Two words, here\n\n## Top\n")
    doc = tmp_path / "doc.md"
    doc.write_text("[a](other.md#two-words-here) [b](other.md#top-1) [c](missing.md) [d](other.md#nowhere) "
                   "`[e](nowhere.md)` [f](https://example.org/x.md) [g](#local)\n\n## Local\n")
    assert broken_links(doc, tmp_path) == ["doc.md: missing.md", "doc.md: other.md#nowhere"]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(path):
    assert broken_links(path) == []


def journey_names() -> list[tuple[str, str]]:
    """(file, name) for each function the README's journey chart names on an edge: the names in
    an edge's label are defined in one of the files that label names."""
    readme = (ROOT / "README.md").read_text()
    chart = readme[readme.index("```mermaid"):readme.index("```", readme.index("```mermaid") + 3)]
    found = []
    for label in re.findall(r'-->\|"([^"]+)"\|', chart):
        files = re.findall(r"([\w/]+\.py):", label)
        without_paths = re.sub(r"[\w/]+\.(py|sql)", "", label)
        found += [(" or ".join(files), name) for name in re.findall(r"\b[a-z]+(?:_[a-z0-9]+)+\b", without_paths)]
    return found


def defined_in(files: str, name: str) -> bool:
    sources = [p for f in files.split(" or ") for p in (ROOT / "torchci_assets").rglob(Path(f).name)
               if p.as_posix().endswith(f)]
    return any(re.search(rf"^\s*(def|class) {name}\b", p.read_text(), re.M) for p in sources)


def test_the_readme_journey_names_functions_where_they_are():
    names = journey_names()
    assert "ingest_webhook_day" in [n for _, n in names] and len(names) > 10
    assert [f"{f}: {n}" for f, n in names if not defined_in(f, n)] == []


def config_table() -> list[tuple[list[str], list[str]]]:
    """(variables, default tokens) of each row of docs/operations.md's configuration table."""
    ops = (ROOT / "docs" / "operations.md").read_text()
    section = ops[ops.index("## Configuration"):ops.index("\n## ", ops.index("## Configuration") + 3)]
    rows = []
    for line in section.splitlines():
        cells = line.split(" | ")
        if line.startswith("| `") and len(cells) == 3:
            rows.append((re.findall(r"`([A-Z][A-Z0-9_]+)`", cells[0]), re.findall(r"`([^`]+)`", cells[2])))
    return rows


def test_the_settings_the_docs_name_are_the_ones_the_code_reads():
    named = set()
    for path in DOCS:
        named |= set(re.findall(r"\bTORCHCI_[A-Z0-9_]*[A-Z0-9]\b(?![*a-z])", path.read_text()))
    tabled = {v for variables, _ in config_table() for v in variables if v.startswith("TORCHCI_")}
    assert sorted(named - known_variables()) == []
    assert sorted(known_variables() - tabled) == []


def code_defaults() -> dict[str, float | str]:
    """What the code falls back to for each setting left unset, read from the code itself."""
    receiver = ReceiverSettings.from_env({})
    attrs = {"SPOOL_DIR": "spool_dir", "CALLBACK_RATE_LIMIT": "callbacks_per_minute"}
    found = {f"TORCHCI_{k}": getattr(receiver, attrs.get(k, k.lower()))
             for k in ("WEBHOOK_MAX_BYTES", "CALLBACK_MAX_BYTES", "OIDC_LEEWAY_S", "CALLBACK_RATE_LIMIT",
                       "ROLL_INTERVAL_S", "ROLL_BYTES", "PUSH_ROLL_S", "HEADER_TIMEOUT_S", "BODY_TIMEOUT_S",
                       "INFLIGHT_BYTES", "SPOOL_HIGH_WATER", "ROLL_BACKLOG_S", "SPOOL_DIR")}
    found.update(DEFAULT_URIS)
    found.update({"TORCHCI_OIDC_ISSUER": receiver.oidc_issuer, "TORCHCI_OIDC_AUDIENCE": receiver.oidc_audience,
                  "TORCHCI_WEBHOOK_EVENTS": ",".join(sorted(receiver.events)),
                  "TORCHCI_MAX_REJECT_RATE": max_reject_rate(), "TORCHCI_REFRESH_MINUTES": refresh_interval_s({}) / 60,
                  "TORCHCI_MAX_LINE_BYTES": max_line_bytes(), "TORCHCI_MAX_REPORT_BYTES": max_report_bytes(),
                  "TORCHCI_MAX_ZIP_BYTES": max_zip_bytes(), "TORCHCI_MAX_REGRESSION_SHARE": max_cost_share(),
                  "TORCHCI_GAP_REPAIR_MINUTES": repair_limit().total_seconds() / 60 + REPAIR_EVERY_MIN})
    return found


def as_documented(token: str, code: object) -> object:
    """The documented default token in the code default's type."""
    if isinstance(code, str):
        return ",".join(sorted(token.split(","))) if "," in code else token
    if isinstance(code, Path):
        return Path(token)
    return parse_size(token, "doc") if re.search(r"[A-Za-z]$", token) else type(code)(float(token))


def test_the_documented_defaults_are_the_codes(monkeypatch):
    for name in [n for n in known_variables() if n.startswith("TORCHCI_")]:
        monkeypatch.delenv(name, raising=False)
    code = code_defaults()
    documented = {v: t for variables, tokens in config_table() for v, t in zip(variables, tokens)
                  if v in code and len(tokens) >= len(variables)}
    assert len(documented) == len(code), sorted(set(code) - set(documented))
    wrong = {v: (t, code[v]) for v, t in documented.items() if as_documented(t, code[v]) != code[v]}
    assert wrong == {}


def test_the_make_targets_the_docs_show_exist():
    targets = set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))
    shown = set()
    for text in [path.read_text() for path in DOCS]:
        shown |= set(re.findall(r"`make ([a-z][\w-]*)", text))  # in a sentence
        for block in re.findall(r"^```sh\n(.*?)^```", text, re.M | re.S):  # on a command line
            shown |= set(re.findall(r"(?:^|&& )make ([a-z][\w-]*)", block, re.M))
    assert {"run", "clean", "bench-freshness"} <= shown
    assert sorted(shown - targets) == []


def command_help(command: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        torchci([command, "--help"])
    return out.getvalue()


def test_the_command_options_the_docs_show_exist():
    helps = {command: command_help(command) for command in SUBCOMMANDS}
    missing = []
    for path in DOCS:
        for command, rest in re.findall(r"torchci ([a-z][a-z-]+)((?: +[^\s`|#]+)*)", path.read_text()):
            options = re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", rest) if command in helps else []
            missing += [f"{path.relative_to(ROOT)}: torchci {command} {o}" for o in options if o not in helps[command]]
    assert sorted(set(missing)) == []
