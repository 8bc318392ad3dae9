"""The `torchci` command: one entry point, one module per subcommand.

Each subcommand lives next to the code it drives and exposes `main(argv) -> int`;
this file only dispatches, importing lazily so `torchci --help` stays fast. A subcommand's
module parses its arguments before it imports Dagster or the data libraries (about 1.5 CPU-s),
so its `--help` and usage errors are as fast (tests/test_cli_startup.py).
"""

from __future__ import annotations

import importlib
import sys

SUBCOMMANDS = {
    "run": ("torchci_assets.run", "materialize every asset for every archive day"),
    "simulate": ("torchci_assets.simulate.cli", "write a simulated PyTorch CI archive"),
    "backfill": ("torchci_assets.backfill.cli", "read a repository's CI history from GitHub's REST API"),
    "shard-plan": ("torchci_assets.derived.sharding.cli", "plan test shards from test times"),
    "classify-log": ("torchci_assets.derived.failures.cli", "find the failure line of a job log"),
    "query": ("torchci_assets.query", "run DuckDB SQL over the lake and print a table"),
    "serve": ("torchci_assets.receiver.cli", "receive GitHub webhooks and relay callbacks into the archive"),
}


# Commands that check every setting first (torchci_assets/preflight.py; they check again when
# called directly, which reports nothing twice).
PREFLIGHT = ("run", "serve", "backfill")


def version() -> str:
    """This package's version and Dagster's, as a bug report needs them."""
    from importlib.metadata import version as installed

    return f"torchci {installed('torchci-dagster')} (dagster {installed('dagster')})"


def _usage() -> str:
    lines = ["usage: torchci <command> [options]", "", "commands:"]
    lines += [f"  {name:<12} {help_}" for name, (_, help_) in SUBCOMMANDS.items()]
    lines += ["", "Run `torchci <command> --help` for a command's options, `torchci --version` for the version."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        print(version())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        print(f"torchci: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    if name in PREFLIGHT:  # before the command's module loads Dagster: a bad setting stops it in a moment
        from torchci_assets import preflight
        if not preflight.report(f"torchci {name}"):
            return 2
    module = importlib.import_module(SUBCOMMANDS[name][0])
    return module.main(rest)


if __name__ == "__main__":
    sys.exit(main())
