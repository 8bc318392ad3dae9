# Written beside the simulated days (what was planted); its presence marks an archive as a simulation,
# which `torchci backfill` refuses to mix a real repository's days into.
GROUND_TRUTH = "ground-truth.json"
