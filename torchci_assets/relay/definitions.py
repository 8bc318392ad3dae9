"""The relay domain in the asset graph: its two ledgers, `dispatches` and `relay_actions`.

The job and the sensor that drive the relay live in `jobs/relay.py` (they act on the world);
declaring the ledger here shows it in the asset graph with its history.
"""

import dagster as dg

from torchci_assets.relay.check_runs import ACTIONS_TABLE
from torchci_assets.relay.dispatch import LEDGER_TABLE

dispatches = dg.AssetSpec(LEDGER_TABLE, group_name="relay", kinds={"parquet", "github"},
                          description="Ledger of every repository_dispatch attempt: sha, downstream repo, "
                                      "status code, outcome. A live send writes a claimed row before calling "
                                      "GitHub and its outcome row after (ok/refused/failed/unanswered, or "
                                      "withdrawn: given up to a racing writer); a dry run writes dry_run alone. "
                                      "Written by "
                                      "dispatch_job (a run per new upstream head, started by upstream_commit_sensor), "
                                      "and for pull_request deliveries by pull_request_sensor's ticks and the "
                                      "pull_request_dispatch_job runs it starts for what a tick could not finish; a run that failed "
                                      "(GitHub down past its retries) is run again by relay_catch_up_sensor.")

relay_actions = dg.AssetSpec(ACTIONS_TABLE, group_name="relay", kinds={"parquet", "github"},
                             description="Ledger of the relay's other GitHub writes: upstream check runs "
                                         "(check_run), re-runs of downstream runs (rerun), and the per-head "
                                         "'check run wanted' flags of ciflow/crcr labels (wanted). A live write records a "
                                         "claimed row before calling GitHub and its outcome after (ok/refused/failed, "
                                         "or withdrawn: given up to a racing writer); a dry run records dry_run, and a "
                                         "timed-out check run of a repository no longer L3 or L4 not_wanted. Written by "
                                         "check_run_sensor's ticks and the check_run_job runs it starts (the check "
                                         "runs of downstream callbacks); by check_run_label_job (a label's wanted "
                                         "flags and check runs) and rerun_job (re-runs asked from the Checks tab), "
                                         "both started by pull_request_sensor; and by zombie_check_run_job, which "
                                         "zombie_check_run_schedule starts (check runs completed as timed out). A run "
                                         "of the first three that failed (GitHub down past its retries) is run "
                                         "again by relay_catch_up_sensor; the zombie sweep by its next schedule.")

defs = dg.Definitions(assets=[dispatches, relay_actions])
