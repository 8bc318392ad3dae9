"""One pull request event that reaches the receiver twice, from a repository webhook and from the
GitHub App's webhook (each its own delivery id), starts one downstream run per backend, not two;
two events of the same head that differ in what happened are still two dispatches."""

import copy
import json
from collections import Counter

import dagster as dg

from jobs.relay_prs import pull_request_sensor
from tests.test_relay_pull_requests import (  # noqa: F401 (fixtures)
    REPOS, pr_payload, quick_ticks, relay_config, roots, sensor_started)


def deliveries_to_tick(httpserver, instance, roots, *payloads) -> Counter:
    """Dispatches per downstream after one sensor tick over these deliveries, each its own id."""
    server, folder, resources, first = sensor_started(httpserver, instance, roots)
    lines = [json.dumps({"event": "pull_request", "delivery_id": f"guid-{n}", "received_at": "2026-11-25T10:00:00Z",
                         "payload": payload}) for n, payload in enumerate(payloads)]
    (folder / "new.jsonl").write_text("\n".join(lines) + "\n")
    with dg.build_sensor_context(instance=instance, cursor=first.cursor, resources=resources) as ctx:
        pull_request_sensor(ctx)
    return Counter(repo for repo, _ in server.dispatches())


def test_one_event_from_the_repository_hook_and_the_app_hook_is_dispatched_once(httpserver, instance, roots):
    repo_hook = pr_payload("synchronize")
    app_hook = {**copy.deepcopy(repo_hook), "installation": {"id": 42, "node_id": "x"}}
    assert deliveries_to_tick(httpserver, instance, roots, repo_hook, app_hook) == Counter(REPOS)


def test_the_same_action_on_the_same_head_at_another_time_is_dispatched_again(httpserver, instance, roots):
    first = pr_payload("synchronize")
    later = copy.deepcopy(first)
    later["pull_request"]["updated_at"] = "2030-01-01T00:00:00Z"
    assert deliveries_to_tick(httpserver, instance, roots, first, later) == Counter({r: 2 for r in REPOS})
