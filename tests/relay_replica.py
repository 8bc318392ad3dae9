"""One replica of the relay's sensors, as its own process, for the tests of replicas racing.

`python -m tests.relay_replica SENSOR LAKE ARCHIVE API_URL CURSOR_FILE GO_FILE OUT_FILE` creates
OUT_FILE.ready once set up, waits until GO_FILE exists (so two replicas tick together), runs one tick of SENSOR
(`pull_request_sensor` or `check_run_sensor`) from the cursor in CURSOR_FILE against the given
lake, archive and GitHub API (a token: it really sends), and writes the tick's outcomes and the
run configs of what it left to runs as JSON to OUT_FILE. The relay config comes from TORCHCI_CONFIG, as in a deployment.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import dagster as dg

from jobs import relay_prs
from resources.configured import ArchiveResource, LakeResource
from resources.github import GitHubResource

TOKEN = "ghp_testtoken000000000000000000000000"


def main(sensor: str, lake: str, archive: str, api_url: str, cursor_file: str, go_file: str, out_file: str) -> None:
    resources = {"archive": ArchiveResource(uri=archive), "lake": LakeResource(uri=lake),
                 "github": GitHubResource(api_url=api_url, token=TOKEN, backoff_base_s=0.01, write_interval_s=0)}
    cursor = Path(cursor_file).read_text()
    Path(out_file + ".ready").touch()  # imported and set up: the test says go when both are
    deadline = time.monotonic() + 60
    while not Path(go_file).exists() and time.monotonic() < deadline:
        time.sleep(0.005)
    with dg.build_sensor_context(cursor=cursor, resources=resources) as context:
        result = getattr(relay_prs, sensor)(context)
    outcomes = {}
    for event in result.asset_events:
        outcomes.update(event.metadata["outcomes"].data)
    Path(out_file).write_text(json.dumps({"outcomes": outcomes, "runs": [r.run_config for r in result.run_requests]}))


if __name__ == "__main__":
    main(*sys.argv[1:])
