"""The relay domain in the asset graph: the `dispatches` ledger that `dispatch_job` writes.

The job and the sensor that drive the relay live in `jobs/relay.py` (they act on the world);
declaring the ledger here shows it in the asset graph with its history.
"""

import dagster as dg

from torchci_assets.relay.check_runs import ACTIONS_TABLE
from torchci_assets.relay.dispatch import LEDGER_TABLE

dispatches = dg.AssetSpec(LEDGER_TABLE, group_name="relay", kinds={"parquet"},
                          description="Ledger of every repository_dispatch attempt: sha, downstream repo, "
                                      "status code, outcome (ok/refused/failed/unanswered/dry_run). Written by dispatch_job.")

relay_actions = dg.AssetSpec(ACTIONS_TABLE, group_name="relay", kinds={"parquet", "github"},
                             description="Ledger of the relay's other GitHub writes: upstream check runs "
                                         "(check_run), re-runs of downstream runs (rerun), and the per-head "
                                         "'check run wanted' flags of ciflow/crcr labels (wanted).")

defs = dg.Definitions(assets=[dispatches, relay_actions])
