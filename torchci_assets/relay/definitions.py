"""The relay domain in the asset graph: the `dispatches` ledger that `dispatch_job` writes.

The job and the sensor that drive the relay live in `jobs/relay.py` (they act on the world);
declaring the ledger here shows it in the asset graph with its history.
"""

import dagster as dg

from torchci_assets.relay.dispatch import LEDGER_TABLE

dispatches = dg.AssetSpec(LEDGER_TABLE, group_name="relay", kinds={"parquet"},
                          description="Ledger of every repository_dispatch attempt: sha, downstream repo, "
                                      "status code, outcome (ok/refused/failed/dry_run). Written by dispatch_job.")

defs = dg.Definitions(assets=[dispatches])
