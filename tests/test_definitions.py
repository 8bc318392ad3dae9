"""The code location loads, and its asset keys are a visible contract.

Renaming an asset silently breaks lineage and materialization history; this snapshot turns
that into a reviewed diff.
"""

import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
from conftest import ram_instance

from torchci_assets.definitions import defs

ROOT = Path(__file__).resolve().parent.parent

EXPECTED_ASSETS = {
    "webhook_events", "workflow_job", "workflow_run", "push", "pull_request", "webhook_rejects",
    "ci_result", "ci_callback_minutes", "ci_result_rejects", "backend_health", "backend_levels",
    "test_run", "test_run_rejects", "test_results", "test_jobs", "test_daily_stats", "test_sha_outcomes",
    "test_time_daily", "test_time_sha_daily", "test_times", "shard_plans", "test_time_regressions",
    "flaky_tests", "flaky_test_platforms", "disabled_issues", "disabled_tests", "unstable_jobs", "slow_tests",
    "smoke_tests",
    "job_failure", "log_rejects",
    "commit_health", "pr_jobs", "ci_metrics_daily", "hud_site", "drci_comments",
}
LEDGERS = {"dispatches", "relay_actions"}  # written by the relay jobs, not materialized by `torchci run`
ARCHIVE = {"webhook_archive", "test_report_archive", "test_run_archive", "ci_result_archive", "log_archive"}
# One group per domain folder (the folder the asset's code lives in).
GROUPS = {"ingest": "torchci_assets.ingest", "results": "torchci_assets.derived.results",
          "flakiness": "torchci_assets.derived.flakiness", "sharding": "torchci_assets.derived.sharding",
          "failures": "torchci_assets.derived.failures", "hud": "torchci_assets.derived.hud",
          "backends": "torchci_assets.derived.backends", "relay": "torchci_assets.relay",
          "drci": "torchci_assets.derived.drci", "guardians": "torchci_assets.derived.guardians"}
# A domain folder whose assets show in another's group: the static site is the HUD to its users, but
# lives apart from the HUD's code because it also shows the domains built on the HUD (Dr. CI, guardians).
GROUP_OF_FOLDER = {"torchci_assets.derived.site": "hud"}
GUARDIAN_LEDGERS = {"autorevert_events", "alerts"}  # written by trunk_guardians_job, from commit_health
GITHUB_READS = {"unstable_jobs"}  # read from GitHub's issues alone, nothing of the archive or the lake


def test_asset_keys_snapshot():
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert keys == EXPECTED_ASSETS | LEDGERS | GUARDIAN_LEDGERS | ARCHIVE


def test_groups_are_the_domains_and_lineage_starts_at_the_archive():
    from torchci_assets.definitions import DOMAINS

    graph = defs.resolve_asset_graph()
    for domain in DOMAINS:
        package = domain.__name__.rsplit(".", 1)[0]
        keys = [k for a in domain.defs.assets for k in ([a.key] if isinstance(a, dg.AssetSpec) else a.keys)]
        (group,) = {graph.get(k).group_name for k in keys}
        assert group == GROUP_OF_FOLDER.get(package) or GROUPS[group] == package, (package, group)
    assert {graph.get(k).group_name for k in graph.get_all_asset_keys()} == set(GROUPS)
    roots = {k.to_user_string() for k in graph.get_all_asset_keys() if not graph.get(k).parent_keys}
    assert roots == ARCHIVE | LEDGERS | GITHUB_READS  # every other asset's lineage goes back to an archive folder
    assert not any(graph.get(dg.AssetKey(k)).is_materializable for k in ARCHIVE)


def test_asset_functions_follow_one_naming_rule():
    """`<key>_asset` for an asset function (the key given by `name=`), `<what it reads>_assets` for a
    multi-asset: never the bare key, so a module can import the plain function of the same name."""
    from torchci_assets.definitions import DOMAINS

    for domain in DOMAINS:
        for assets in domain.defs.assets:
            if not isinstance(assets, dg.AssetsDefinition):
                continue
            fn = assets.op.compute_fn.decorated_fn.__name__
            if len(assets.keys) == 1:
                assert fn == f"{assets.key.to_user_string()}_asset", fn
            else:
                assert fn.endswith("_assets") and fn == assets.op.name, fn


def test_every_asset_is_daily_partitioned_so_torchci_run_reaches_it():
    graph = defs.resolve_asset_graph()
    for key in graph.materializable_asset_keys:
        assert isinstance(graph.get(key).partitions_def, dg.DailyPartitionsDefinition), key
    # the implicit job `torchci run` executes must cover every asset
    job = defs.resolve_implicit_global_asset_job_def()
    assert {k.to_user_string() for k in job.asset_layer.executable_asset_keys} == EXPECTED_ASSETS


def test_the_intra_day_refresh_runs_what_users_wait_for_in_one_process_and_leaves_windows_to_the_daily_run():
    from jobs.refresh import DAILY_ONLY_ASSETS

    assert defs.resolve_sensor_def("archive_refresh_sensor").job_name == "archive_refresh"
    job = defs.resolve_job_def("archive_refresh")
    refreshed = {k.to_user_string() for k in job.asset_layer.executable_asset_keys}
    assert refreshed == EXPECTED_ASSETS - set(DAILY_ONLY_ASSETS)
    assert {"test_run", "workflow_job", "test_daily_stats", "disabled_tests", "unstable_jobs", "commit_health",
            "pr_jobs", "drci_comments", "hud_site"} <= refreshed
    assert not refreshed & {"test_time_daily", "test_times", "shard_plans", "smoke_tests", "ci_metrics_daily"}
    assert job.executor_def.name == "in_process"  # no process per step
    graph = defs.resolve_asset_graph()
    for key in refreshed:  # whatever a refreshed asset reads of its own day is refreshed too
        same_day = {p.to_user_string() for p in graph.get(dg.AssetKey(key)).parent_keys} - ARCHIVE - GUARDIAN_LEDGERS
        assert same_day - refreshed <= {"backend_levels", "ci_metrics_daily", "test_time_regressions"}, key


def test_every_schedule_and_sensor_says_what_it_runs_and_when_it_starts_by_itself():
    """The UI lists schedules and sensors with their description beside their status: one without
    says nothing of what it runs, and one that starts stopped must say why (credentials) and that
    it can be started by hand."""
    from resources.credentials import has_credentials

    timed = [*defs.schedules, *defs.sensors]
    assert {d.name for d in timed} >= {"daily_schedule", "archive_refresh_sensor", "trunk_guardians_job_schedule",
                                       "zombie_check_run_schedule", "gap_repair_job_schedule"}
    for d in timed:
        assert d.description and len(d.description.strip()) > 40, d.name
        running = d.default_status in (dg.DefaultScheduleStatus.RUNNING, dg.DefaultSensorStatus.RUNNING)
        if not running or d.name in ("zombie_check_run_schedule", "gap_repair_job_schedule"):
            assert "credentials" in d.description and "started in the UI" in d.description, d.name
    on = {d.name for d in timed if d.default_status == dg.DefaultScheduleStatus.RUNNING}
    assert ("zombie_check_run_schedule" in on) == has_credentials()
    talking = [d for d in timed if talks_to_github(d)]
    assert {"upstream_commit_sensor", "pull_request_sensor", "check_run_sensor"} <= {d.name for d in talking}
    for d in talking:  # on from the start or not, it sends nothing to GitHub without credentials: it says so
        assert "credentials" in d.description, d.name


def talks_to_github(timed) -> bool:
    """Whether a schedule or sensor calls GitHub in its tick, or runs a job of ops (no asset) that does:
    what it does without credentials is its own to say (an asset says it in its own description)."""
    names = [t.job_name for t in timed.targets] if isinstance(timed, dg.SensorDefinition) else [timed.job_name]
    jobs = [defs.resolve_job_def(n) for n in names]
    return "github" in timed.required_resource_keys or any(
        "github" in j.required_resource_keys and not j.asset_layer.executable_asset_keys for j in jobs)


def test_ingest_assets_have_checks():
    checks = {(c.asset_key.to_user_string(), c.name) for c in defs.resolve_asset_graph().asset_check_keys}
    for table in ("webhook_events", "workflow_job", "workflow_run", "push", "pull_request"):
        assert (table, "required_columns_not_null") in checks
    assert ("webhook_events", "reject_rate_below_threshold") in checks


def test_dagster_validates_the_workspace(tmp_path):
    out = subprocess.run([str(Path(sys.executable).parent / "dagster"), "definitions", "validate",
                          "-w", "workspace.yaml"], cwd=ROOT, capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "DAGSTER_HOME": str(tmp_path), "HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert "All code locations passed validation" in out.stderr + out.stdout


def test_every_asset_has_an_owner_its_domain_tag_and_a_link_to_its_code():
    graph = defs.resolve_asset_graph()
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        assert node.owners == ["team:pytorch-dev-infra"], key
        assert node.tags["domain"] == node.group_name, key
        if node.is_materializable:
            (ref,) = node.metadata["dagster/code_references"].code_references
            assert ref.file_path.startswith(str(ROOT / "torchci_assets")) and not ref.file_path.endswith(
                "lake_metadata.py"), (key, ref)  # the asset function, not the decorator wrapping it


def test_the_files_ci_reads_have_a_freshness_policy_and_nothing_else_does():
    graph = defs.resolve_asset_graph()
    fresh = {k.to_user_string(): graph.get(k).freshness_policy for k in graph.get_all_asset_keys()
             if graph.get(k).freshness_policy is not None}
    assert set(fresh) == {"test_times", "disabled_tests", "slow_tests", "smoke_tests", "shard_plans",
                          "backend_levels", "hud_site"}
    policy = fresh["test_times"]  # published nightly: late after a day and an hour, failed after 27 h
    assert (policy.warn_window.to_timedelta().total_seconds(), policy.fail_window.to_timedelta().total_seconds()) == \
        (25 * 3600, 27 * 3600)


def test_every_check_is_described_and_per_partition_and_the_ingest_key_checks_block():
    from torchci_assets.partitions import daily_partitions

    graph = defs.resolve_asset_graph()
    specs = {(k.asset_key.to_user_string(), k.name): graph.get_check_spec(k) for k in graph.asset_check_keys}
    assert len(specs) >= 27
    for key, spec in specs.items():
        assert spec.description and len(spec.description) > 40, key
        assert spec.partitions_def == daily_partitions, key
    blocking = {k for k, s in specs.items() if s.blocking}
    assert ("workflow_job", "required_columns_not_null") in blocking and ("test_run", "unique_test_per_job") in blocking
    assert {name for _, name in blocking} <= {"required_columns_not_null", "unique_test_per_job"} | {
        name for _, name in specs if name.startswith("unique_")}
    assert {asset for asset, _ in blocking} <= {"webhook_events", "workflow_job", "workflow_run", "push",
                                                "pull_request", "test_run", "ci_result"}
    assert not any(s.blocking for (asset, name), s in specs.items() if name == "reject_rate_below_threshold")


def test_a_reject_rate_check_names_the_asset_listing_its_rejects():
    """Too many rejects sends a user to the records that could not be read: the check's description
    names the asset holding them, which reads the same archive folders as the checked asset (there
    is no asset called `rejects`: each source's part of that table is an asset of its own)."""
    import re

    graph = defs.resolve_asset_graph()
    sources = {k: {p for p in graph.get(k).parent_keys if p.to_user_string() in ARCHIVE}
               for k in graph.get_all_asset_keys()}
    checked = [k for k in graph.asset_check_keys if k.name == "reject_rate_below_threshold"]
    assert len(checked) == 4
    for key in checked:
        named = set(re.findall(r"\b\w+_rejects\b", graph.get_check_spec(key).description))
        holders = {k.to_user_string() for k in graph.get_all_asset_keys() if k.to_user_string().endswith("_rejects")
                   and sources[k] & sources[key.asset_key]}
        assert named == holders and len(holders) == 1, (key.asset_key.to_user_string(), named, holders)


# ---- lineage: what each asset's code reads is what the graph shows ------------------------------

def _window(asset: str, table: str) -> tuple[int, int]:
    """The days of `table` that `asset` declares it reads, as offsets from its own day (0, 0: the same day)."""
    node = defs.resolve_asset_graph().get(dg.AssetKey(asset))
    assert dg.AssetKey(table) in node.parent_keys, f"{asset} reads {table} but declares only " \
        f"{sorted(k.to_user_string() for k in node.parent_keys)}"
    mapping = node.partition_mappings.get(dg.AssetKey(table))
    if isinstance(mapping, dg.TimeWindowPartitionMapping):
        return mapping.start_offset, mapping.end_offset
    return 0, 0


def _read_windows():
    from torchci_assets.derived.drci.inputs import EARLIER_PR_JOBS, LANDED_DAYS, TRUNK_DAYS
    from torchci_assets.derived.drci.publish import LEDGER_LOOKBACK_DAYS as POSTS_DAYS
    from torchci_assets.derived.flakiness.flaky import WINDOW_DAYS as FLAKY_DAYS
    from torchci_assets.derived.flakiness.reenable import WINDOW_DAYS as RERUN_DAYS
    from torchci_assets.derived.flakiness.retired import LOOKBACK_DAYS, RETIRE_AFTER_DAYS
    from torchci_assets.derived.results.stats import JOB_LOOKAHEAD_DAYS, JOB_LOOKBACK_DAYS
    from torchci_assets.derived.sharding.times import RETIRED_AFTER_DAYS

    jobs = (-JOB_LOOKBACK_DAYS, JOB_LOOKAHEAD_DAYS)
    return [  # (asset, table, days read): each found by reading the code named
        ("test_jobs", "workflow_job", jobs), ("test_jobs", "workflow_run", jobs),  # results/stats.py, test_jobs.sql
        ("test_daily_stats", "test_jobs", (0, 0)), ("test_sha_outcomes", "test_jobs", (0, 0)),  # stats.py
        ("test_daily_stats", "test_run", (0, 0)),  # results/increments.py: the parts counted
        ("test_times", "workflow_job", (1 - RETIRED_AFTER_DAYS, 0)),  # sharding/times.py active_build_envs
        ("drci_comments", "pull_request", (1 - LANDED_DAYS, 0)),  # drci/inputs.py register_people
        # drci/inputs.py: the merge bases' failures, and those of the earlier pull requests (attach_earlier_tests)
        ("drci_comments", "test_results", (1 - max(TRUNK_DAYS, LANDED_DAYS), 0)),
        ("drci_comments", "pr_jobs", (-max(EARLIER_PR_JOBS), 0)),  # drci/inputs.py load_earlier_heads
        # drci/publish.py deleted_comments: the comments deleted on GitHub over the posts' lookback (a
        # posting run alone reads them, so the day below does not), beyond the trunk days of the extracts
        ("drci_comments", "webhook_events", (-POSTS_DAYS, 0)),
        ("disabled_issues", "test_results", (1 - RERUN_DAYS, 0)),  # flakiness/reenable.py rerun_evidence
        ("disabled_issues", "test_daily_stats", (1 - RETIRE_AFTER_DAYS - LOOKBACK_DAYS, 0)),  # retired.py
        ("flaky_tests", "push", (-FLAKY_DAYS, 0)),  # flakiness/flaky.py: the window and the day before it
    ]


def test_the_asset_graph_shows_what_each_asset_reads_and_over_which_days():
    """Lineage, staleness and "materialize upstream" in the UI follow the declared dependencies, and a
    run orders its steps by them: an undeclared read can run before what it reads. Each case is a
    read found in the code; the test below finds them by running a day."""
    wrong = [f"{asset} reads {table} over {days}, declares {_window(asset, table)}"
             for asset, table, days in _read_windows() if _window(asset, table) != days]
    assert not wrong, wrong


def test_the_hud_waits_for_the_unstable_list_and_never_for_the_disabled_list():
    """commit_health and pr_jobs read stats/unstable-jobs.json, which unstable_jobs publishes: they
    depend on it, in the daily run and in the intra-day refresh alike, so an UNSTABLE issue reaches the
    HUD in the run that reads it. A failed step skips what depends on it, and the disabled list fails on
    GitHub errors, which must not stop the HUD or what the trunk guardians read: neither disabled asset
    is upstream of them, nor of the unstable list, whose own check does not block."""
    graph = defs.resolve_asset_graph()
    for name in ("all_assets_daily", "archive_refresh"):
        job = defs.resolve_job_def(name)
        deps = job.graph.dependency_structure

        def upstream_of(node: str) -> set[str]:
            return {o.node_name for outs in deps.input_to_upstream_outputs_for_node(node).values() for o in outs}
        for reader in ("commit_health", "pr_jobs"):
            assert "unstable_jobs" in upstream_of(reader), (name, reader)
        before_hud = dg.AssetSelection.assets("commit_health", "pr_jobs").upstream().resolve(graph)
        assert not {dg.AssetKey("disabled_tests"), dg.AssetKey("disabled_issues")} & before_hud
    specs = [graph.get_check_spec(k) for k in graph.asset_check_keys if k.asset_key == dg.AssetKey("unstable_jobs")]
    assert specs and not any(s.blocking for s in specs)


def test_a_github_incident_in_the_disabled_loop_skips_nothing():
    """A failed step skips what depends on it. Downstream of the DISABLED-issue loop (the steps that
    read and write GitHub's issues) are the daily CI metrics and the HUD, which show the disabled
    list, Dr. CI, which calls a failure of a disabled test FLAKY, and the guardians' alerts ledger,
    written by trunk_guardians_job (no asset run executes it, so none skips it). The loop fails its checks, not its steps, on GitHub's errors
    (tests/test_hud_outage.py), and none of them blocks: so nothing is skipped. An asset newly
    downstream of the loop must be added here knowingly."""
    graph = defs.resolve_asset_graph()
    loop = dg.AssetSelection.assets("disabled_issues", "disabled_tests")
    downstream = {k.to_user_string() for k in (loop.downstream() - loop).resolve(graph)}
    assert downstream == {"ci_metrics_daily", "hud_site", "alerts", "drci_comments"}
    assert not graph.get(dg.AssetKey("alerts")).is_executable
    for name in ("all_assets_daily", "archive_refresh"):
        executed = {k.to_user_string() for k in defs.resolve_job_def(name).asset_layer.executable_asset_keys}
        assert "hud_site" in executed and "alerts" not in executed, name
    reads_issues = {"disabled_issues", "disabled_tests", "unstable_jobs"}
    specs = [graph.get_check_spec(k) for k in graph.asset_check_keys if k.asset_key.to_user_string() in reads_issues]
    assert {s.asset_key.to_user_string() for s in specs} == reads_issues and not any(s.blocking for s in specs)


@pytest.fixture(scope="module")
def reads_of_a_day(tmp_path_factory):
    """A simulated day through the daily job in process, recording per step the lake partitions it
    lists (every read of a table lists its folders: `Lake.files`, and the extracts Dr. CI keeps of
    big tables, `resources.lake_extracts`, list them through the lake's `Store.list_files`), and
    each materialization's columns as the UI's Columns view shows them."""
    import datetime as dt

    from jobs.daily import all_assets_job
    from resources.configured import ArchiveResource, LakeResource, OutputsResource
    from resources.github import GitHubResource
    from resources.storage import Store
    from torchci_assets.definitions import DOMAINS
    from torchci_assets.simulate.generate import generate_archive
    from torchci_assets.simulate.world import Options

    root = tmp_path_factory.mktemp("reads")
    archive, lake, outputs = root / "archive", root / "lake", root / "outputs"
    generate_archive(archive, [dt.date.fromisoformat(READ_DAY)], Options(
        seed=5, commits_per_day=6, prs_per_day=2, configs=4, test_files=8, tests_per_file=6, backends=1,
        platform_failures=0), log=lambda _: None)
    assets = [a for d in DOMAINS for a in d.defs.assets if isinstance(a, dg.AssetsDefinition)]
    job = dg.Definitions(assets=assets, jobs=[all_assets_job], resources={
        "archive": ArchiveResource(uri=str(archive)), "lake": LakeResource(uri=str(lake)),
        "outputs": OutputsResource(uri=str(outputs)), "github": GitHubResource()}).resolve_job_def(all_assets_job.name)
    lake_reads, list_files = [], Store.list_files

    def recorded_list_files(self, prefix, *args, **kwargs):
        step = dg.OpExecutionContext.get()
        if step is not None and self.uri == str(lake):
            table, _, day = prefix.partition("/day=")
            lake_reads.append((step.op.name, table, [day] if day else None))
        return list_files(self, prefix, *args, **kwargs)

    mp = pytest.MonkeyPatch()
    mp.setattr(Store, "list_files", recorded_list_files)
    try:
        with ram_instance() as instance:
            result = job.execute_in_process(partition_key=READ_DAY, instance=instance)
            assert result.success
    finally:
        mp.undo()
    keys = {a.op.name: {k.to_user_string() for k in a.keys} for a in assets}
    columns = {e.asset_key.to_user_string(): e.materialization.metadata["dagster/column_schema"].value
               for e in result.get_asset_materialization_events()
               if "dagster/column_schema" in e.materialization.metadata}
    return {"keys": keys, "lake": lake_reads, "lake_root": lake, "columns": columns}


READ_DAY = "2026-11-20"
# Lake tables that are no asset, each read only by the steps that write it, so the graph has no
# edge to draw: {table: the assets whose steps keep it}. Each is named in those assets' descriptions
# (the rejects assets' shared table aside: each is its part of it), and no other domain's code names it.
OWN_TABLES = {
    "rejects": {"webhook_rejects", "test_run_rejects", "ci_result_rejects", "log_rejects"},  # lake_metadata
    "drci_merge_bases": {"drci_comments"},  # GitHub's compare answers cached per head sha (drci/merge_base.py)
    "drci_posts": {"drci_comments"},  # the ledger of the comments posted (drci/publish.py)
}


def test_every_partition_a_day_reads_is_a_declared_dependency(reads_of_a_day):
    """Each lake partition a step lists (its own day's partitions of its own tables aside) falls within
    a window that one of the step's assets declares on that table; the checks below find reads the
    hand-made list above misses (a new window, a helper reading one more table)."""
    import datetime as dt

    graph = defs.resolve_asset_graph()
    keys = reads_of_a_day["keys"]
    day = dt.date.fromisoformat(READ_DAY)
    wrong = set()
    for node, table, days in reads_of_a_day["lake"]:
        if dg.AssetKey(table) not in graph.get_all_asset_keys():
            if not keys[node] & OWN_TABLES.get(table, set()):
                wrong.add(f"{node} reads {table}, which is no asset and not a table of its own (OWN_TABLES)")
            continue
        offsets = (-10 ** 6, 10 ** 6) if days is None else tuple(
            (dt.date.fromisoformat(d) - day).days for d in (days[0], days[-1]))
        if table in keys[node] and offsets == (0, 0):
            continue  # the step's own partition: what it writes, or an increment of it
        own = keys[node] - {k for k in keys[node] if k.endswith("_rejects")}  # rejects read no table
        for asset in own:
            try:
                start, end = _window(asset, table)
            except AssertionError:
                wrong.add(f"{asset} reads {table} {offsets} and does not declare it")
                continue
            if not start <= offsets[0] <= offsets[1] <= end:
                wrong.add(f"{asset} reads {table} {offsets}, declares {(start, end)}")
    assert not sorted(wrong), sorted(wrong)



def test_the_tables_an_asset_keeps_for_itself_are_named_in_its_description_and_read_by_no_other_domain():
    """A cache or ledger of one asset's own draws no edge in the graph: its description says it is
    there, and no other domain's code reads it (which would be an undeclared dependency)."""
    from torchci_assets.lake_metadata import REJECT_PARTS

    graph = defs.resolve_asset_graph()
    assert OWN_TABLES["rejects"] == set(REJECT_PARTS)
    for table, owners in OWN_TABLES.items():
        assert dg.AssetKey(table) not in graph.get_all_asset_keys(), table
        if table == "rejects":
            continue
        folders = {Path(graph.get(dg.AssetKey(o)).metadata["dagster/code_references"].code_references[0].file_path
                        ).parent for o in owners}
        for owner in owners:
            assert table in graph.get(dg.AssetKey(owner)).description, (owner, table)
        naming = {p.relative_to(ROOT) for p in (ROOT / "torchci_assets").rglob("*") if p.suffix in (".py", ".sql")
                  and not any(p.is_relative_to(f) for f in folders) and table in p.read_text()}
        assert not naming, (table, sorted(map(str, naming)))


# ---- what the Columns view says of each lake table (torchci_assets/lake_columns/*.yaml) -----------

def tables_written_outside_a_day() -> set[str]:
    """The tables of guardians.yaml and ledgers.yaml: ledgers written as things are done (by the
    guardians' job, Dr. CI's posts with credentials, the relay), which a day's assets in dry run never
    write; test_lake_columns.py checks them against their writers."""
    import yaml

    from torchci_assets.lake_columns import FOLDER

    return {table for name in ("guardians.yaml", "ledgers.yaml")
            for table in yaml.safe_load((FOLDER / name).read_text())}


def _columns_shown(reads_of_a_day) -> dict[tuple[str, str], str | None]:
    """(table, column) -> the description the Columns view shows, over every table the day wrote
    (the rejects assets show their parts of the `rejects` table)."""
    from torchci_assets.lake_metadata import REJECT_PARTS

    return {("rejects" if key in REJECT_PARTS else key, column.name): column.description
            for key, schema in reads_of_a_day["columns"].items() for column in schema.columns}


def test_the_columns_view_shows_each_columns_meaning_from_its_tables_yaml_file(reads_of_a_day):
    from torchci_assets.lake_columns import column_description

    shown = _columns_shown(reads_of_a_day)
    assert {"workflow_job", "test_results", "rejects"} <= {table for table, _ in shown}
    assert column_description("workflow_job", "queue_s").startswith("Seconds from the job's creation")
    assert shown[("workflow_job", "queue_s")] == column_description("workflow_job", "queue_s")
    assert not {f"{t}.{c}" for (t, c), text in shown.items() if text != column_description(t, c)}


def test_every_column_of_every_lake_table_a_day_writes_says_what_it_means(reads_of_a_day):
    bare = sorted(f"{t}.{c}" for (t, c), text in _columns_shown(reads_of_a_day).items() if not text)
    assert not bare, f"{len(bare)} columns without a description: {bare}"


def test_every_described_table_and_column_is_in_the_lake_a_day_writes(reads_of_a_day):
    """A table or column described but no longer written (a typo, a dropped column) is an error,
    as is a column written but not described."""
    from resources.lake import Lake
    from torchci_assets.lake_columns import table_docs
    from torchci_assets.lake_columns.doc import column_mismatch, lake_schema

    lake = Lake.at(str(reads_of_a_day["lake_root"]))
    outside = tables_written_outside_a_day()
    assert set(table_docs()) - set(lake.tables()) == outside
    wrong = [problem for table, doc in table_docs().items() if table not in outside
             for problem in column_mismatch(table, doc, [name for name, _ in lake_schema(lake, table)])]
    assert not wrong


def test_docs_tables_md_is_what_its_script_writes_from_a_materialized_day(reads_of_a_day, tmp_path):
    """docs/tables.md cannot drift from the YAML files or the lake: `make docs-tables` writes it."""
    out = tmp_path / "tables.md"
    run = subprocess.run([sys.executable, "-m", "torchci_assets.docs_tables", str(reads_of_a_day["lake_root"]),
                          "--out", str(out)], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    assert out.read_text() == (ROOT / "docs" / "tables.md").read_text(), "run `make docs-tables`"


def test_what_the_ui_shows_speaks_to_users():
    """The descriptions the UI shows beside assets, checks, jobs, ops, schedules and sensors name
    what a user sees (assets, tables, files, settings), never a code module or an issue number."""
    import re

    graph = defs.resolve_asset_graph()
    jobs = [defs.resolve_job_def(j.name) for j in defs.jobs]
    shown = {**{f"asset {k.to_user_string()}": graph.get(k).description for k in graph.get_all_asset_keys()},
             **{f"check {k.name}": graph.get_check_spec(k).description for k in graph.asset_check_keys},
             **{f"job {j.name}": j.description for j in jobs},
             **{f"op {n.name}": n.description for j in jobs for n in j.all_node_defs},
             **{f"{d.name}": d.description for d in [*defs.schedules, *defs.sensors]}}
    internal = re.compile(r"\b(torchci_assets|resources)\.[a-z_]|(?<![\w/-])jobs\.[a-z_]|#\d+\b")
    assert not {what: internal.search(text)[0] for what, text in shown.items() if text and internal.search(text)}


# The relay's ledgers and what writes them directly: sensors (their ticks write) and jobs (their runs
# write). Which code writes a ledger no definition says; which sensors and schedules start those jobs
# the definitions do (`ledger_writers`).
LEDGER_WRITERS = {
    "dispatches": ("dispatch_job", "pull_request_sensor", "pull_request_dispatch_job"),
    "relay_actions": ("check_run_sensor", "check_run_job", "check_run_label_job", "rerun_job", "zombie_check_run_job"),
}


def ledger_writers(ledger: str) -> set[str]:
    """The ledger's writers as the UI lists them: its direct writers and the sensors and schedules
    that start any of those jobs."""
    direct = set(LEDGER_WRITERS[ledger])
    started = {s.name: {t.job_name for t in s.targets} for s in defs.sensors} | \
              {s.name: {s.job_name} for s in defs.schedules}
    return direct | {starter for starter, jobs in started.items() if direct & jobs}


def test_a_relay_ledgers_description_names_every_sensor_and_job_writing_it():
    """A ledger is no asset `torchci run` materializes: its page in the UI is where a user learns
    what writes it, so its description names each writer (a word of its own: `check_run_job` is not
    `zombie_check_run_job`), and each name is one the UI lists."""
    import re

    graph = defs.resolve_asset_graph()
    listed = {j.name for j in defs.jobs} | {d.name for d in [*defs.sensors, *defs.schedules]}
    for ledger in LEDGER_WRITERS:
        writers = ledger_writers(ledger)
        assert writers <= listed, (ledger, writers - listed)
        text = graph.get(dg.AssetKey(ledger)).description
        assert [w for w in sorted(writers) if not re.search(rf"(?<!\w){w}(?!\w)", text)] == [], ledger


def test_drci_comments_says_which_partitions_post_and_what_newer_ones_it_reads():
    """A re-run of an old day recomputes it and posts nothing; yesterday's partition reads the newest
    partitions after its day (no declared dependency can say so) only to leave them their pull
    requests: the asset's description says both, naming the tables read."""
    from torchci_assets.derived.drci.publish import NEWER_VIEWS

    text = defs.resolve_asset_graph().get(dg.AssetKey("drci_comments")).description
    assert "older than yesterday" in text and "posts nothing" in text
    newer = next((s for s in text.split(". ") if "newer" in s or "after its day" in s), "")
    assert all(t in newer for t in [*(table for table, _ in NEWER_VIEWS), "pull_request"]), newer


def test_a_key_check_says_which_columns_are_the_key():
    """A `unique_*` check's name joins its key's columns with underscores, which columns also hold
    (`unique_job_id_run_attempt`): its description is its own sentence or names each column, never
    a reference back to the name."""
    import re

    from torchci_assets.checks import DESCRIPTIONS

    graph = defs.resolve_asset_graph()
    keys = [k for k in graph.asset_check_keys if k.name.startswith("unique_")]
    assert len(keys) >= 8
    for key in keys:
        description = graph.get_check_spec(key).description
        assert "unique_" not in description, (key.name, description)
        if key.name not in DESCRIPTIONS:
            columns = re.findall(r"`([a-z_]+)`", description)
            assert "_".join(columns) == key.name.removeprefix("unique_"), (key.name, description)
