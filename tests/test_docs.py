"""The documentation a new user walks (README.md, docs/, deploy/README.md, bench/README.md) says what
the code does: its links land, the functions the README's journey names exist where it says, the
settings it names are the ones the code reads with the defaults it gives, and the make targets and
command options it shows exist; the jobs, sensors, schedules and checks it names are Dagster's, those
said to start by themselves do, the concurrency pools, groups and fresh files it lists are the code
location's, the configuration defaults it quotes are the bundled file's, and the code map's files are
where it says. Prose does not move when the code does (a function renamed, a default changed), so
each is checked against the code here."""

import contextlib
import io
import re
from pathlib import Path

import pytest
import yaml

from jobs.gap_repair import REPAIR_EVERY_MIN, repair_limit
from resources.uris import DEFAULT_URIS
from torchci_assets.backfill.gaps import repair_reserve
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
                  "TORCHCI_GAP_REPAIR_MINUTES": repair_limit().total_seconds() / 60 + REPAIR_EVERY_MIN,
                  "TORCHCI_GAP_REPAIR_RESERVE": repair_reserve()})
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


def make_commands(text: str) -> list[str]:
    """The `make` commands a doc shows, from the target to the end of the command: in a sentence's
    code, and on a command line of a shell block."""
    shown = re.findall(r"`(make [a-z][^`]*)`", text)
    for block in re.findall(r"^```sh\n(.*?)^```", text, re.M | re.S):
        shown += re.findall(r"(?:^|&& )(make [a-z][^#&\n]*)", block, re.M)
    return [command.strip() for command in shown]


def test_the_make_targets_the_docs_show_exist():
    targets = set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))
    commands = [command for path in DOCS for command in make_commands(path.read_text())]
    shown = {command.split()[1] for command in commands}
    assert {"run", "clean", "bench-freshness"} <= shown
    assert sorted(shown - targets) == []
    # make takes an option after the target for its own (`make bench-drci --intervals 3` stops with
    # "unrecognized option"): a script's options are shown on the script
    assert [c for c in commands if re.search(r" --?[a-z]", c)] == []


def test_the_make_command_check_finds_an_option_make_would_refuse():
    doc = "`make dev DEV_PORT=3001`, `make bench-drci --intervals 3 2`\n\n```sh\nmake run && make serve  # x\n```\n"
    assert make_commands(doc) == ["make dev DEV_PORT=3001", "make bench-drci --intervals 3 2", "make run", "make serve"]


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


@pytest.fixture(scope="module")
def repository():
    from torchci_assets.definitions import defs
    return defs.get_repository_def()


def dagster_names(repository) -> dict[str, set[str]]:
    """The names the UI lists: assets, jobs (not Dagster's implicit one), sensors, schedules, checks."""
    return {"asset": {k.to_user_string() for k in repository.asset_graph.get_all_asset_keys()},
            "job": {j.name for j in repository.get_all_jobs() if not j.name.startswith("__")},
            "sensor": {s.name for s in repository.sensor_defs},
            "schedule": {s.name for s in repository.schedule_defs},
            "check": {k.name for k in repository.asset_graph.asset_check_keys}}


def python_names(folder: str) -> set[str]:
    """The module-level names defined in a folder's files (a doc's code map names `archive_refresh_job`)."""
    return {name for path in (ROOT / folder).glob("*.py")
            for name in re.findall(r"^(?:def |class )?(\w+)\s*[(=:]", path.read_text(), re.M)}


def named_definitions(text: str) -> dict[str, set[str]]:
    """The Dagster names a doc shows: a `*_job`, `*_sensor` or `*_schedule` in code, and a name in code
    followed by the kind of thing it is (the `pages_under_2mb` check; not "the `bc_linter` job", which
    is PyTorch's)."""
    found = {kind: set(re.findall(rf"`(\w+_{kind})`", text)) for kind in ("job", "sensor", "schedule")}
    for kind in ("sensor", "schedule", "check", "asset"):
        found[kind] = found.get(kind, set()) | set(re.findall(rf"`([a-z]\w*)` {kind}s?\b", text))
    return found


def stale_definitions(paths: list[Path], defined: dict[str, set[str]], python: set[str],
                      root: Path = ROOT) -> list[str]:
    everything = set().union(*defined.values())
    stale = []
    for path in paths:
        for kind, names in named_definitions(path.read_text()).items():
            known = defined[kind] | (everything | python if kind == "job" else set())  # `workflow_job` is an asset
            stale += [f"{path.relative_to(root)}: {kind} {n}" for n in sorted(names - known)]
    return stale


def test_the_dagster_names_the_docs_show_are_defined(repository):
    defined = dagster_names(repository)
    python = python_names("jobs")
    assert {"all_assets_daily", "gap_repair_job"} <= defined["job"]
    assert stale_definitions(DOCS, defined, python) == []
    shown = " ".join(path.read_text() for path in DOCS)
    unnamed = {kind: sorted(n for n in defined[kind] if f"`{n}`" not in shown)
               for kind in ("job", "sensor", "schedule")}
    assert unnamed == {"job": [], "sensor": [], "schedule": []}


def test_the_name_check_finds_a_stale_job_sensor_or_check(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("`old_sensor` ticks; the `gone` check and the `nightly_job`; `workflow_job` and `helper_job` are "
                   "fine, and so are the `live` check and PyTorch's `lint` job")
    defined = {"asset": {"workflow_job"}, "job": set(), "sensor": set(), "schedule": set(), "check": {"live"}}
    assert stale_definitions([doc], defined, {"helper_job"}, tmp_path) == [
        "doc.md: job nightly_job", "doc.md: sensor old_sensor", "doc.md: check gone"]


def operations_bullet(title: str) -> str:
    """The bullet of docs/operations.md that starts with `title` in bold, to its end."""
    ops = (ROOT / "docs" / "operations.md").read_text()
    start = ops.index(f"- **{title}**")
    return re.split(r"\n(?:- |\n)", ops[start:], maxsplit=1)[0]


def test_the_schedules_and_sensors_the_docs_say_start_on_their_own_do(repository):
    from resources.credentials import has_credentials

    always, _, rest = operations_bullet("Schedules and sensors").partition("are on from the start;")
    with_credentials = set(re.findall(r"`(\w+)`", rest.partition("are on from the start only where")[0]))
    always = set(re.findall(r"`(\w+)`", always))
    timed = {d.name: d.default_status.value == "RUNNING" for d in [*repository.schedule_defs, *repository.sensor_defs]}
    assert sorted(always | with_credentials) == sorted(timed) and not always & with_credentials
    assert {name: timed[name] for name in always} == dict.fromkeys(always, True)
    assert {name: timed[name] for name in with_credentials} == dict.fromkeys(with_credentials, has_credentials())


def test_the_concurrency_pools_the_docs_name_are_the_ones_steps_run_in(repository):
    ops = [op for a in repository.asset_graph.assets_defs if a.is_executable for op in a.node_def.iterate_op_defs()]
    ops += [op for job in repository.get_all_jobs() for op in job.graph.iterate_op_defs()]
    pools = {op.pool for op in ops} - {None}
    assert "drci" in pools
    assert set(re.findall(r"`([a-z_]+)`", operations_bullet("Parallel runs"))) == pools


def bundled_config() -> dict[str, list]:
    """Each key of the bundled configuration with the values it has wherever it appears."""
    found: dict[str, list] = {}

    def walk(node):
        items = node.items() if isinstance(node, dict) else enumerate(node if isinstance(node, list) else [])
        for key, value in items:
            if isinstance(key, str) and not isinstance(value, dict):
                found.setdefault(key, []).append(value)
            walk(value)

    walk(yaml.safe_load((ROOT / "torchci_assets" / "default_config.yaml").read_text()))
    return found


UNIT_S = {"h": 3600, "min": 60, "s": 1}
KEY_UNIT_S = {"_seconds": 1, "_s": 1, "_min": 60, "_minutes": 60}


def wrong_config_numbers(text: str, config: dict[str, list]) -> list[str]:
    """A configuration key in code followed by its default in parentheses, `restart_interval_min` (20) or
    `backoff_min` (20, 40, 60 min), `zombie_timeout_seconds` (6 h by default), whose number is not the
    bundled file's."""
    number, wrong = r"\d+(?:,\d{3})*(?:\.\d+)?", []
    for key, numbers, unit in re.findall(rf"`([a-z][a-z0-9_]*)` \(({number}(?:, {number})*)(?: (h|min|s)\b)?", text):
        scale = UNIT_S.get(unit, 1) / next((s for suffix, s in KEY_UNIT_S.items() if key.endswith(suffix)), 1)
        shown = [float(n.replace(",", "")) * (scale if unit else 1) for n in numbers.split(", ")]
        values = [v if isinstance(v, list) else [v] for v in config.get(key, [])]
        if values and shown not in values:
            wrong.append(f"{key} ({numbers}): {config[key]}")
    return wrong


def test_the_config_defaults_the_docs_give_are_the_bundled_ones():
    config = bundled_config()
    assert config["restart_interval_min"] == [20] and [20, 40, 60] in config["backoff_min"]
    assert wrong_config_numbers("`restart_interval_min` (2,000) and `backoff_min` (20, 40 min), `other` (3), "
                                "`zombie_timeout_seconds` (6 h), `zombie_timeout_seconds` (3 h)", config) == [
        "restart_interval_min (2,000): [20]", "backoff_min (20, 40): [[20, 40, 60]]",
        "zombie_timeout_seconds (3): [21600]"]
    documented = [k for path in DOCS for k in re.findall(r"`([a-z_]+)` \(\d", path.read_text()) if k in config]
    assert len(documented) >= 10
    assert [w for path in DOCS for w in wrong_config_numbers(path.read_text(), config)] == []


def missing_code_files(readme: str, root: Path = ROOT) -> list[str]:
    """The files of the README's code map ("Where things are") that are not in the folder their row names."""
    rows = readme[readme.index("| folder | what lives there |"):].split("\n\n")[0].splitlines()[2:]
    missing = []
    for row in rows:
        folder, _, cell = row.removeprefix("| `").partition("` | ")
        for name in re.findall(r"`([\w/.-]+\.(?:py|sql|toml))`", cell):
            if not (root / name).exists() and not any((root / folder).rglob(name)):
                missing.append(f"{folder}: {name}")
    return missing


def test_the_code_map_names_files_where_they_are(tmp_path):
    (tmp_path / "src" / "cli").mkdir(parents=True)
    (tmp_path / "src" / "cli" / "main.py").write_text("")
    table = "| folder | what lives there |\n|---|---|\n| `src/` | the cli (`main.py`, `old.py`) |\n\n`gone.py`"
    assert missing_code_files(table, tmp_path) == ["src/: old.py"]
    readme = (ROOT / "README.md").read_text()
    assert "`staging.py`" in readme
    assert missing_code_files(readme) == []


def test_the_ui_the_docs_describe_has_those_groups_and_fresh_files(repository):
    graph = repository.asset_graph
    groups = {graph.get(k).group_name for k in graph.get_all_asset_keys()}
    fresh = {k.to_user_string(): graph.get(k).freshness_policy for k in graph.get_all_asset_keys()
             if graph.get(k).freshness_policy is not None}
    external = {k.to_user_string(): graph.get(k).group_name for k in graph.get_all_asset_keys()
                if not graph.get(k).is_materializable}  # the archive's folders, and ledgers written outside assets
    domains, _, lineage = operations_bullet("Groups are domains").partition("Lineage")
    assert set(re.findall(r"`(\w+)`", domains)) == groups
    assert set(re.findall(r"`(\w+)`", lineage.partition("The records")[0])) == {
        name for name, group in external.items() if group == "ingest"}
    catalog = operations_bullet("Catalog")
    assert set(re.findall(r"`(\w+)`", catalog.partition("the ledgers (")[2].partition(")")[0])) == {
        name for name, group in external.items() if group != "ingest"}
    assert set(re.findall(r"`(\w+)`", catalog.partition("the files CI reads (")[2].partition(")")[0])) == set(fresh)
    hours = {(p.warn_window.to_timedelta().total_seconds() / 3600, p.fail_window.to_timedelta().total_seconds() / 3600)
             for p in fresh.values()}
    assert hours == {tuple(float(h) for h in re.findall(r"(\d+) hours (?:warns|fails)", catalog))}
