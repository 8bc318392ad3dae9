"""`python -m torchci_assets.lake_columns [LAKE_URI] [--out FILE]`: write docs/tables.md.

The lake defaults to TORCHCI_LAKE_URI (./var/lake), which `make run` fills with simulated days.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from resources.configured import resolved_uri
from resources.lake import Lake
from torchci_assets.lake_columns.doc import UndescribedLake, render

DEFAULT_OUT = Path(__file__).resolve().parents[2] / "docs" / "tables.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torchci_assets.lake_columns", description=__doc__)
    parser.add_argument("lake", nargs="?", default=None,
                        help="the lake to read the column types from (default: TORCHCI_LAKE_URI, else ./var/lake)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"the page to write (default: {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    try:
        text = render(Lake.at(args.lake or resolved_uri("TORCHCI_LAKE_URI")))
    except UndescribedLake as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
