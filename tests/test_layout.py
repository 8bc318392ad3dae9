"""The house rules, checked on the source: names pytest would mistake for tests, and imports
that climb from a lower layer to a higher one.

Layers, lowest first: `resources` (storage, the lake, GitHub) < the core modules of
`torchci_assets` (partitions, checks, config, publishing) < `ingest` (archive -> lake) < the domains
(`derived/<domain>`, `relay`) < `jobs` < the entry points (definitions, the CLI). A module may
import its own layer and the layers below it, never above: so storage never learns about
assets, and the archive readers never depend on what is computed from them.

Domains may import each other, but never round a loop: the one that consumes another's results
sits above it (the trunk guardians and Dr. CI read the HUD's classification of jobs; the static
site composes every domain's pages), so each can be read, tested and changed without the others
that build on it.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("resources", "torchci_assets", "jobs")

# (module prefix, layer); the longest matching prefix wins.
LAYERS = [
    ("resources", 0),
    ("torchci_assets.partitions", 1),
    ("torchci_assets.archive_days", 1),
    ("torchci_assets.cadence", 1),
    ("torchci_assets.checks", 1),
    ("torchci_assets.cli_values", 1),
    ("torchci_assets.config", 1),
    ("torchci_assets.config_error", 1),
    ("torchci_assets.guardian_config", 1),
    ("torchci_assets.publishing", 1),
    ("torchci_assets.staging", 1),
    ("torchci_assets.lake_metadata", 1),
    ("torchci_assets.lake_columns", 1),
    ("torchci_assets.conventions", 1),
    ("torchci_assets.shown", 1),
    ("torchci_assets.ingest", 2),
    ("torchci_assets.derived", 3),
    ("torchci_assets.relay", 3),
    ("torchci_assets.simulate", 3),
    ("torchci_assets.receiver", 3),
    ("torchci_assets.backfill", 3),
    ("jobs", 4),
    ("torchci_assets", 5),  # definitions, cli, run, query: the entry points
    ("torchci_assets.receiver.cli", 5),  # `torchci serve`: an entry point (it runs the preflight)
    ("torchci_assets.backfill.cli", 5),  # `torchci backfill`: an entry point (it asks S3 first, as the preflight does)
]


def layer_of(module: str) -> int:
    best = max((p for p, _ in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return dict(LAYERS)[best]


def modules() -> list[tuple[str, Path]]:
    out = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out.append((name, path))
    return out


def project_imports(name: str, path: Path) -> list[tuple[int, str]]:
    """(line, imported module) for every import of a project module, relative ones resolved."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = name.split(".")[: -node.level] if path.name != "__init__.py" else \
                    name.split(".")[: len(name.split(".")) - node.level + 1]
                base = ".".join(package + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            targets = [base]
        else:
            continue
        found += [(node.lineno, t) for t in targets if t.split(".")[0] in PACKAGES]
    return found


def test_layer_table_matches_the_folders():
    """Every module falls under a declared layer (a new top-level module must be placed)."""
    names = [n for n, _ in modules()]
    assert names and all(any(n == p or n.startswith(p + ".") for p, _ in LAYERS) for n in names)


@pytest.mark.parametrize("name,path", modules(), ids=lambda v: v if isinstance(v, str) else "")
def test_no_import_climbs_to_a_higher_layer(name, path):
    mine = layer_of(name)
    bad = [f"{path.relative_to(ROOT)}:{line} imports {target} (layer {layer_of(target)} > {mine})"
           for line, target in project_imports(name, path) if layer_of(target) > mine]
    assert not bad, "\n".join(bad)


def test_ingest_and_resources_import_nothing_from_derived_relay_or_jobs():
    higher = ("torchci_assets.derived", "torchci_assets.relay", "torchci_assets.receiver", "jobs")
    bad = []
    for name, path in modules():
        if name.startswith(("resources", "torchci_assets.ingest")):
            bad += [f"{name} imports {t}" for _, t in project_imports(name, path) if t.startswith(higher)]
    assert not bad, bad


def test_the_checker_sees_a_climbing_import(tmp_path):
    """The checks above would catch the import they forbid (so a green run means something)."""
    module = tmp_path / "webhooks.py"
    module.write_text("from torchci_assets.derived.flakiness.flaky import build_flaky_tests\nimport jobs.relay\n")
    imports = project_imports("torchci_assets.ingest.webhooks", module)
    assert [t for _, t in imports] == ["torchci_assets.derived.flakiness.flaky", "jobs.relay"]
    assert all(layer_of(t) > layer_of("torchci_assets.ingest.webhooks") for _, t in imports)


# Packages of the code location that are domains: each folder under `derived/`, and the other
# packages of `torchci_assets` (ingest, relay, receiver, backfill, simulate).
def _domain_packages() -> list[str]:
    top = [p for p in (ROOT / "torchci_assets").iterdir() if (p / "__init__.py").exists() and p.name != "derived"]
    derived = [p for p in (ROOT / "torchci_assets" / "derived").iterdir() if (p / "__init__.py").exists()]
    return sorted(".".join(p.relative_to(ROOT).parts) for p in top + derived)


DOMAIN_PACKAGES = _domain_packages()


def unit_of(module: str) -> str:
    """The node of the import graph a module belongs to: its domain package, else the module."""
    return max((d for d in DOMAIN_PACKAGES if module == d or module.startswith(d + ".")), key=len, default=module)


def import_graph(mods: list[tuple[str, Path]]) -> dict[tuple[str, str], list[str]]:
    """(importing unit, imported unit) -> the imports that make that edge, as `file:line imports module`."""
    edges: dict[tuple[str, str], list[str]] = {}
    for name, path in mods:
        where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
        for line, target in project_imports(name, path):
            if unit_of(name) != unit_of(target):
                edges.setdefault((unit_of(name), unit_of(target)), []).append(f"{where}:{line} imports {target}")
    return edges


def import_cycles(edges) -> list[list[str]]:
    """The groups of units that reach each other through their imports (each group sorted)."""
    after: dict[str, set[str]] = {}
    for a, b in edges:
        after.setdefault(a, set()).add(b)

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in after.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    reaches = {u: reach(u) for u in after}
    groups = {frozenset(v for v in reaches[u] if u in reaches.get(v, ())) for u in reaches if u in reaches[u]}
    return sorted(sorted(g) for g in groups)


def _explain(cycle: list[str], edges) -> str:
    return " <-> ".join(cycle) + "".join(f"\n  {i}" for (a, b), found in sorted(edges.items())
                                         if a in cycle and b in cycle for i in found)


def test_domains_import_each_other_without_a_cycle():
    edges = import_graph(modules())
    bad = [_explain(c, edges) for c in import_cycles(edges) if set(c) & set(DOMAIN_PACKAGES)]
    assert not bad, "domains importing each other round a loop:\n" + "\n".join(bad)


def test_no_module_imports_another_that_imports_it_back():
    """Not even inside a function: a module of a loop may be used half-loaded, and neither side can
    be read, tested or moved without the other."""
    edges = import_graph(modules())
    bad = [_explain(c, edges) for c in import_cycles(edges)]
    assert not bad, "modules importing each other round a loop:\n" + "\n".join(bad)


def test_the_checker_sees_a_planted_cycle(tmp_path):
    """The graph above is built from the domains' packages and would show a loop between two of them."""
    assert {"torchci_assets.derived.hud", "torchci_assets.derived.guardians", "torchci_assets.relay",
            "torchci_assets.ingest", "torchci_assets.receiver"} <= set(DOMAIN_PACKAGES)
    assert "torchci_assets.derived" not in DOMAIN_PACKAGES and "torchci_assets.config" not in DOMAIN_PACKAGES
    site, inputs, signals = tmp_path / "site.py", tmp_path / "inputs.py", tmp_path / "signals.py"
    site.write_text("from torchci_assets.derived.guardians import hud as guardians_hud\n")
    inputs.write_text("from torchci_assets.derived.hud import health\n")
    signals.write_text("from .inputs import WINDOW\nfrom resources.lake import Lake\n")
    planted = [("torchci_assets.derived.hud.site", site), ("torchci_assets.derived.guardians.inputs", inputs),
               ("torchci_assets.derived.guardians.signals", signals)]
    edges = import_graph(planted)
    assert import_cycles(edges) == [["torchci_assets.derived.guardians", "torchci_assets.derived.hud"]]
    assert edges[("torchci_assets.derived.hud", "torchci_assets.derived.guardians")] == \
        ["site.py:1 imports torchci_assets.derived.guardians"]
    assert import_cycles(import_graph(planted[1:])) == []  # one way only: no loop
    back = tmp_path / "assets.py"  # the HUD importing the site that shows it, in the real tree
    back.write_text("from torchci_assets.derived.site.site import SITE_DIR\n")
    cycles = import_cycles(import_graph(modules() + [("torchci_assets.derived.hud.assets", back)]))
    assert any({"torchci_assets.derived.hud", "torchci_assets.derived.site"} <= set(c) for c in cycles)


def test_no_product_module_is_named_like_a_test():
    """pytest, editors and every Python developer read `test_*.py` as a test file."""
    offenders = [str(p.relative_to(ROOT)) for _, p in modules() if p.name.startswith("test_")
                 or any(part.startswith("test_") for part in p.relative_to(ROOT).parts[:-1])]
    assert not offenders, offenders


def test_readme_map_names_every_top_level_and_domain_folder():
    """A newcomer's map: every top-level folder and every package folder of the code location."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Where things are"):]
    section = section[: section.find("\n## ", 1) if "\n## " in section[1:] else len(section)]
    folders = [p.name + "/" for p in ROOT.iterdir()
               if p.is_dir() and not p.name.startswith((".", "_")) and p.name not in ("var", "build")
               and not p.name.endswith(".egg-info")]
    folders += [str(p.parent.relative_to(ROOT)) + "/" for p in (ROOT / "torchci_assets").rglob("__init__.py")
                if "__pycache__" not in p.parts]
    missing = sorted(f for f in set(folders) if f"`{f}`" not in section)
    assert not missing, f"README 'Where things are' does not name: {missing}"
