"""`python -m torchci_assets.docs_tables [LAKE_URI] [--out FILE]`: write docs/tables.md.

The lake defaults to TORCHCI_LAKE_URI (./var/lake), which `make run` fills with simulated days. The
ledgers written outside the daily assets (the guardians', Dr. CI's, the relay's) are in no lake
`make run` fills, so their types come from the schemas their writers declare; this entry point
sits above those writers so the page's generator (in lake_columns, below them) need not import them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from resources.lake import Lake
from resources.uris import resolved_uri
from torchci_assets.derived.drci import merge_base, publish
from torchci_assets.derived.guardians import alert_issues, ledger
from torchci_assets.lake_columns.doc import UndescribedLake, render
from torchci_assets.relay import check_runs, dispatch

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "docs" / "tables.md"

# The ledgers' schemas as their writers declare them (tests/test_lake_columns.py checks each against
# what its real writer writes).
LEDGER_SCHEMAS = {alert_issues.TABLE: alert_issues.SCHEMA, ledger.TABLE: ledger.SCHEMA,
                  dispatch.LEDGER_TABLE: dispatch.LEDGER_SCHEMA, merge_base.TABLE: merge_base.SCHEMA,
                  publish.LEDGER: publish.LEDGER_SCHEMA, check_runs.ACTIONS_TABLE: check_runs.ACTIONS_SCHEMA}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torchci_assets.docs_tables", description=__doc__)
    parser.add_argument("lake", nargs="?", default=None,
                        help="the lake to read the column types from (default: TORCHCI_LAKE_URI, else ./var/lake)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"the page to write (default: {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    try:
        text = render(Lake.at(args.lake or resolved_uri("TORCHCI_LAKE_URI")), LEDGER_SCHEMAS)
    except UndescribedLake as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
