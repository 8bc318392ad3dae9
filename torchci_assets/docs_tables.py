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

from resources.configured import resolved_uri
from resources.lake import Lake
from torchci_assets.derived.drci.merge_base import SCHEMA as DRCI_MERGE_BASES
from torchci_assets.derived.drci.publish import LEDGER_SCHEMA as DRCI_POSTS
from torchci_assets.derived.guardians.alert_issues import SCHEMA as ALERTS
from torchci_assets.derived.guardians.ledger import SCHEMA as AUTOREVERT_EVENTS
from torchci_assets.lake_columns.doc import UndescribedLake, render
from torchci_assets.relay.check_runs import ACTIONS_SCHEMA as RELAY_ACTIONS
from torchci_assets.relay.dispatch import LEDGER_SCHEMA as DISPATCHES

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "docs" / "tables.md"

# The ledgers' schemas as their writers declare them (tests/test_lake_columns.py checks each against
# what its real writer writes).
LEDGER_SCHEMAS = {"alerts": ALERTS, "autorevert_events": AUTOREVERT_EVENTS, "dispatches": DISPATCHES,
                  "drci_merge_bases": DRCI_MERGE_BASES, "drci_posts": DRCI_POSTS, "relay_actions": RELAY_ACTIONS}


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
