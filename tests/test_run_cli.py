"""`torchci run` as a user runs it: the real CLI in a subprocess, on an archive of real GitHub
webhook payloads (`@octokit/webhooks-examples`) and nothing else: a quiet day for every
publishing asset. Then the front door: a DAGSTER_HOME that does not exist yet, the first daily
partition, and `--select` re-running part of the graph without re-ingesting. Last, GitHub failing
the DISABLED-issue loop: the run ends saying which checks could not read it and what to fix, and
exits 3 when GitHub refused the credentials."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import dagster as dg
import pytest
from conftest import envelope, write_lines

from resources.storage import Store
from torchci_assets.partitions import FIRST_DAY_VAR, first_day

D1, D2 = "2026-11-20", "2026-11-21"
TORCHCI = str(Path(sys.executable).parent / "torchci")

# What a deployment had published before the quiet days: none of it may change.
PUBLISHED = {
    "stats/test-times.json": {"linux-jammy-py3.10-gcc11": {"default": {"test_ops": 612.5}}},
    "stats/test-class-times.json": {"linux-jammy-py3.10-gcc11": {"default": {"test_ops": {"TestCommon": 600.1}}}},
    "stats/slow-tests.json": {"test_huge (__main__.TestLinalg)": 75.2},
    "stats/disabled-tests-condensed.json": {"test_flaky (__main__.TestNN)": ["local-0123456789ab", "", ["linux"]]},
    "stats/reenabled-tests.json": {},
    "smoke-tests/rocm.json": {"platform": "rocm", "tests": []},
    "shard-plans/linux-jammy-py3.10-gcc11/default.json": {"shards": [{"files": ["test_ops"]}]},
    "backend-levels.json": {"day": "2026-11-19", "backends": []},
    "allowlist-proposal.yaml": "L2:\n- acme-ai/torch-npu\n",
}
PUBLISHING = ["backend_levels", "disabled_tests", "shard_plans", "slow_tests", "smoke_tests", "test_times"]


def octokit_archive(root: Path, octokit: dict, days=(D1, D2)) -> Path:
    """Every workflow_job, workflow_run, push and pull_request example, delivered on each day."""
    for day in days:
        lines = [envelope(event, f"{day}-{source}-{event}-{i}", payload, f"{day}T12:00:00.000Z")
                 for source, events in octokit.items() for event, payloads in events.items()
                 for i, payload in enumerate(payloads)]
        write_lines(root / "webhooks" / f"day={day}" / "octokit.jsonl.gz", lines)
    return root


def run_cli(tmp: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHCI_", "DAGSTER_"))}
    clean.update({"TORCHCI_ARCHIVE_URI": str(tmp / "archive"), "TORCHCI_LAKE_URI": str(tmp / "lake"),
                  "TORCHCI_OUTPUTS_URI": str(tmp / "outputs"), **env})
    return subprocess.run([TORCHCI, "run", *args], env=clean, cwd=tmp, capture_output=True, text=True, timeout=300)


def instance_at(home: Path) -> dg.DagsterInstance:
    """The Dagster instance a run recorded into, opened as the UI would (from its DAGSTER_HOME)."""
    with mock.patch.dict(os.environ, {"DAGSTER_HOME": str(home)}):
        return dg.DagsterInstance.get()


def mtimes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*.parquet")}


@pytest.fixture(scope="module")
def quiet(tmp_path_factory):
    """Two quiet days processed with everything published before; (tmp, result, published bytes)."""
    tmp = tmp_path_factory.mktemp("quiet")
    octokit_archive(tmp / "archive", json.loads((Path(__file__).parent / "data/octokit/examples.json").read_text()))
    outputs = Store(str(tmp / "outputs"))
    for path, content in PUBLISHED.items():
        outputs.write_bytes(path, content.encode() if isinstance(content, str) else json.dumps(content).encode())
    before = {p: outputs.read_bytes(p) for p in PUBLISHED}
    (tmp / "home").mkdir()
    result = run_cli(tmp, DAGSTER_HOME=str(tmp / "home"))
    return tmp, result, before


def test_a_quiet_archive_of_real_webhooks_processes_with_exit_0(quiet):
    tmp, result, _ = quiet
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for i, day in enumerate((D1, D2), 1):
        assert f"[{i}/2] {day}: ok" in result.stdout
    assert f"nothing new to publish: {', '.join(PUBLISHING)}" in result.stdout
    # the real payloads were ingested: 52 deliveries a day, none rejected
    assert "  webhook_events                    104" in result.stdout and "Rejects: 0" in result.stdout


def test_a_quiet_day_keeps_every_published_file_and_says_so(quiet):
    tmp, _, before = quiet
    outputs = Store(str(tmp / "outputs"))
    assert {p: outputs.read_bytes(p) for p in PUBLISHED} == before
    # the HUD's pages are a view of the lake, redrawn every run; every file CI reads is as it was
    files = [p.path for p in outputs.list_files("", (".json", ".yaml")) if not p.path.startswith("hud/")]
    assert sorted(files) == sorted(PUBLISHED)
    instance = instance_at(tmp / "home")
    for asset in PUBLISHING:
        event = instance.get_latest_materialization_event(dg.AssetKey(asset))
        assert event.dagster_event.partition == D2
        reason = event.asset_materialization.metadata["nothing_new"].value
        assert reason.startswith("no ") and ("kept" in reason or "stay as they are" in reason), (asset, reason)


def test_what_the_ui_shows_of_the_run_says_something_and_reads_at_a_glance(quiet):
    """Every metadata entry of the run's materializations and checks, as the UI lists them: none is
    an empty text (which reads as something said), and no figure has more than six decimals."""
    tmp, _, _ = quiet
    instance = instance_at(tmp / "home")
    shown = {}
    kinds = {dg.DagsterEventType.ASSET_MATERIALIZATION, dg.DagsterEventType.ASSET_CHECK_EVALUATION}
    for run in instance.get_run_records():
        for entry in instance.all_logs(run.dagster_run.run_id, of_type=kinds):
            data = entry.dagster_event.event_specific_data
            checked = entry.dagster_event.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION
            what = (data.asset_key if checked else data.materialization.asset_key).to_user_string()
            metadata = data.metadata if checked else data.materialization.metadata
            shown.update({(what, key): entry.value for key, entry in metadata.items()})
    assert len({what for what, _ in shown}) > 20
    assert [k for k, v in shown.items() if v == ""] == []
    assert [(k, v) for k, v in shown.items() if isinstance(v, float) and v != round(v, 6)] == []


# ---- the front door --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def rerun(quiet):
    """After the full run: a new DAGSTER_HOME that does not exist, partitions from D2 on, and only
    test_times and what is downstream of it. (tmp, result, lake mtimes before, home)."""
    tmp, _, _ = quiet
    before = mtimes(tmp / "lake")
    home = tmp / "fresh" / "dagster-home"
    result = run_cli(tmp, "--select", "key:test_times+", DAGSTER_HOME=str(home), **{FIRST_DAY_VAR: D2})
    return tmp, result, before, home


def test_a_missing_dagster_home_is_created_and_named(rerun):
    tmp, result, _, home = rerun
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"Runs are recorded in the Dagster instance at {home} (created now)." in result.stdout
    assert (home / "dagster.yaml").is_file()
    instance = instance_at(home)
    assert type(instance.event_log_storage).__name__ == "OpenSqliteEventLogStorage"  # the project's storage
    [run] = instance.get_runs()
    assert run.tags["torchci/source"] == "torchci run" and run.tags["dagster/partition"] == D2
    assert run.tags["torchci/run_id"] == run.run_id  # what tells it from a re-execution inheriting its tags


def test_select_re_materializes_only_the_selection_without_re_ingesting(rerun):
    tmp, result, before, home = rerun
    assert result.returncode == 0
    assert "2 asset(s) selected by 'key:test_times+'" in result.stdout
    # the first day is before TORCHCI_FIRST_DAY: skipped, and said so
    assert f"skipping 1 archive day(s) {D1}..{D1}, before the first daily partition {D2}" in result.stderr
    after = mtimes(tmp / "lake")
    changed = {p.split("/")[0] + "/" + p.split("/")[1] for p in after if after[p] != before.get(p)}
    assert changed == {f"test_times/day={D2}", f"test_class_times/day={D2}", f"shard_plans/day={D2}"}
    instance = instance_at(home)
    [run] = instance.get_runs()
    assert {k.to_user_string() for k in run.asset_selection} == {"test_times", "shard_plans"}


def test_a_bad_selection_or_first_day_is_a_usage_error(tmp_path):
    write_lines(tmp_path / "archive" / "webhooks" / f"day={D1}" / "a.jsonl.gz",
                [envelope("ping", "d-1", {}, f"{D1}T12:00:00.000Z")])  # a day to run: the selection is what is wrong
    result = run_cli(tmp_path, "--select", "key:no_such_asset", DAGSTER_HOME=str(tmp_path / "h"))
    assert result.returncode == 2
    assert "--select 'key:no_such_asset' matches no asset. Asset keys: backend_health" in result.stderr
    assert not (tmp_path / "h").exists()  # nothing was run, nothing recorded
    result = run_cli(tmp_path, DAGSTER_HOME=str(tmp_path / "h"), **{FIRST_DAY_VAR: "yesterday"})
    assert (result.returncode, result.stderr.strip()) == (
        2, "torchci run: TORCHCI_FIRST_DAY='yesterday' is not a day: use YYYY-MM-DD")


def test_a_range_with_no_archive_day_names_the_archive_s_days_and_exits_1(tmp_path):
    write_lines(tmp_path / "archive" / "webhooks" / f"day={D1}" / "a.jsonl.gz",
                [envelope("ping", "d-1", {}, f"{D1}T12:00:00.000Z")])
    result = run_cli(tmp_path, "--from", "2026-12-01", DAGSTER_HOME=str(tmp_path / "h"))
    assert (result.returncode, result.stderr.strip()) == (
        1, f"torchci run: no archive day from 2026-12-01: {tmp_path / 'archive'} has 1 day(s), {D1}..{D1}")
    assert not (tmp_path / "h").exists()  # nothing was run, nothing recorded


def test_an_archive_out_of_reach_is_one_line_saying_what_to_check_before_any_run(tmp_path):
    from conftest import free_port

    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens: every listing fails at once
    result = run_cli(tmp_path, TORCHCI_ARCHIVE_URI="s3://torchci-archive/archive", TORCHCI_S3_ENDPOINT=closed,
                     AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="y", DAGSTER_HOME=str(tmp_path / "home"))
    assert (result.returncode, result.stdout) == (1, "")
    [line] = result.stderr.splitlines()
    assert line.startswith("torchci run: TORCHCI_ARCHIVE_URI='s3://torchci-archive/archive': "
                           f"cannot reach S3 at {closed} (")
    assert line.endswith("); check TORCHCI_S3_ENDPOINT and AWS_REGION, and that the endpoint is up")
    assert not (tmp_path / "home").exists()  # nothing was run, nothing recorded


def test_an_instance_database_out_of_reach_is_one_line_saying_what_to_check(tmp_path, octokit):
    from conftest import free_port

    octokit_archive(tmp_path / "archive", octokit)
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "dagster.yaml").write_text((Path(__file__).parents[1] / "dagster.postgres.yaml").read_text())
    result = run_cli(tmp_path, DAGSTER_HOME=str(tmp_path / "home"), DAGSTER_PG_HOST="127.0.0.1",
                     DAGSTER_PG_PORT=str(free_port()), DAGSTER_PG_DB="dagster", DAGSTER_PG_USERNAME="torchci",
                     DAGSTER_PG_PASSWORD="pg-secret-value")
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 1 and "Traceback" not in result.stderr and "pg-secret-value" not in result.stderr
    assert last.startswith(f"torchci run: the Dagster instance of {tmp_path / 'home'}/dagster.yaml cannot reach its "
                           "database (connection to server at")
    assert last.endswith("check its DAGSTER_PG_* settings and that the server is up")
    # dagster-postgres's retries are one line saying what is waited for, not a psycopg error per try
    assert "Retrying failed database connection" not in result.stderr
    assert result.stderr.count("does not answer; retrying") == 1


# ---- the first daily partition -------------------------------------------------------------------

def test_the_code_location_starts_its_partitions_at_the_archive_s_first_day(tmp_path, octokit):
    """What the UI and the daemon load: the definitions, in a fresh process, without TORCHCI_FIRST_DAY."""
    octokit_archive(tmp_path / "archive", octokit, days=(D2,))
    write_lines(tmp_path / "archive" / "ci-results" / "day=2026-11-17" / "relay.jsonl", [b"{}"])
    code = ("from torchci_assets.definitions import defs\n"
            "keys = defs.resolve_implicit_global_asset_job_def().partitions_def.get_partition_keys()\n"
            "print(keys[0], len(keys))")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHCI_", "DAGSTER_"))}
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, timeout=120,
                         env={**clean, "TORCHCI_ARCHIVE_URI": str(tmp_path / "archive")}, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    first, count = out.stdout.split()
    assert (first, int(count)) == ("2026-11-17", 5)  # 2026-11-17..D2: they end with the archive's data


def test_partitions_end_on_the_archive_s_last_day_or_today_for_a_live_archive(tmp_path):
    from torchci_assets.partitions import partitions_for

    today = dt.datetime.now(dt.timezone.utc).date()
    archive = tmp_path / "archive"
    (archive / "webhooks" / "day=2026-11-03").mkdir(parents=True)
    (archive / "logs" / "day=2026-11-05").mkdir(parents=True)
    ended = partitions_for({"TORCHCI_ARCHIVE_URI": str(archive)})
    assert ended.get_partition_keys() == ["2026-11-03", "2026-11-04", "2026-11-05"]
    (archive / "webhooks" / f"day={today}").mkdir(parents=True)  # files landing today: it rolls with the clock
    live = partitions_for({"TORCHCI_ARCHIVE_URI": str(archive)})
    assert (live.get_partition_keys()[0], live.get_last_partition_key()) == ("2026-11-03", today.isoformat())
    deployed = partitions_for({"TORCHCI_ARCHIVE_URI": str(tmp_path / "none"), FIRST_DAY_VAR: "2026-11-01"})
    assert (deployed.get_partition_keys()[0], deployed.get_last_partition_key()) == ("2026-11-01", today.isoformat())


def test_first_day_is_the_setting_else_the_archive_s_else_today(tmp_path):
    today = dt.date(2026, 11, 22)
    assert first_day({FIRST_DAY_VAR: " 2026-03-04 "}, today) == "2026-03-04"
    with pytest.raises(ValueError, match="TORCHCI_FIRST_DAY='March' is not a day: use YYYY-MM-DD"):
        first_day({FIRST_DAY_VAR: "March"}, today)
    archive = tmp_path / "archive"
    assert first_day({"TORCHCI_ARCHIVE_URI": str(archive)}, today) == "2026-11-22"  # nothing there yet
    (archive / "webhooks" / "day=2026-11-05").mkdir(parents=True)
    (archive / "test-runs" / "day=2026-11-03").mkdir(parents=True)
    (archive / "webhooks" / "not-a-day").mkdir(parents=True)
    assert first_day({"TORCHCI_ARCHIVE_URI": str(archive)}, today) == "2026-11-03"
    assert first_day({"TORCHCI_ARCHIVE_URI": str(archive), FIRST_DAY_VAR: "2026-11-04"}, today) == "2026-11-04"


def test_first_day_of_an_archive_on_s3(s3_server):
    from conftest import S3_BUCKET
    prefix = f"s3://{S3_BUCKET}/first-day-{os.getpid()}/archive"
    Store(prefix).write_bytes("ci-results/day=2026-10-30/relay.jsonl", b"{}\n")
    Store(prefix).write_bytes("webhooks/day=2026-11-01/a.jsonl", b"{}\n")
    assert first_day({"TORCHCI_ARCHIVE_URI": prefix}, dt.date(2026, 11, 22)) == "2026-10-30"


def test_an_unreadable_archive_starts_today_and_says_how_to_choose(monkeypatch, caplog):
    monkeypatch.setenv("TORCHCI_S3_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    got = first_day({"TORCHCI_ARCHIVE_URI": "s3://no-such-bucket/archive"}, dt.date(2026, 11, 22))
    assert got == "2026-11-22"
    assert "cannot list the archive s3://no-such-bucket/archive" in caplog.text and FIRST_DAY_VAR in caplog.text


def test_the_nightly_schedule_skips_days_before_the_first_partition(tmp_path):
    from jobs.daily import FINGERPRINT_TAG, daily_schedule
    from resources.configured import ArchiveResource
    from torchci_assets.ingest.landed import day_fingerprint
    from torchci_assets.partitions import daily_partitions

    first = daily_partitions.start  # TORCHCI_FIRST_DAY, pinned by conftest
    day = first.strftime("%Y-%m-%d")
    Store(str(tmp_path)).write_bytes(f"webhooks/day={day}/a.jsonl", b"{}\n")
    resources = {"archive": ArchiveResource(uri=str(tmp_path))}
    at = first.replace(hour=0, minute=30)
    with dg.build_schedule_context(scheduled_execution_time=at, resources=resources) as context:
        skipped = daily_schedule(context)
    assert isinstance(skipped, dg.SkipReason) and "before the first daily partition" in skipped.skip_message
    with dg.build_schedule_context(scheduled_execution_time=at + dt.timedelta(days=1), resources=resources) as context:
        request = daily_schedule(context)
    assert request.partition_key == day
    # the state of the archive it was requested for, which the intra-day refresh takes as its baseline
    assert request.tags[FINGERPRINT_TAG] == day_fingerprint(Store(str(tmp_path)), day).short


def test_a_sqlite_instance_error_is_not_taken_for_an_unreachable_postgres(tmp_path, monkeypatch):
    import sqlalchemy.exc

    from torchci_assets.run import InstanceUnreachable, instance_for_runs

    home = tmp_path / "home"
    (home / "history" / "runs.db").mkdir(parents=True)  # the run storage's file is a folder
    (home / "dagster.yaml").write_text("")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with pytest.raises(Exception) as raised:
        instance_for_runs()[0].get_runs()
    assert not isinstance(raised.value, InstanceUnreachable)
    assert isinstance(raised.value, sqlalchemy.exc.OperationalError) or isinstance(
        raised.value.__cause__, sqlalchemy.exc.OperationalError)


# ---- a lake of another repository than upstream.repo ------------------------------------------------

WARNING = "torchci run: warning: the pushes and workflow runs of these days are of "


def test_a_lake_of_other_repositories_than_upstream_repo_is_one_warning_saying_what_to_set(quiet):
    """The real payloads are of Codertocat/Hello-World and a few others, none of the bundled config's
    pytorch/pytorch: the run says so once, names the repositories and the config to write, with the
    branch the repository's pushes went to."""
    _, result, _ = quiet
    [line] = [x for x in result.stderr.splitlines() if "warning" in x and "upstream.repo" in x]
    assert line.startswith(WARNING + "Codertocat/Hello-World (")
    assert "octo-org/octo-repo (" in line and "none of upstream.repo pytorch/pytorch (from " in line
    assert "default_config.yaml)" in line and "commit_health, pr_jobs, Dr. CI and the HUD" in line
    assert "`upstream: {repo: Codertocat/Hello-World, branches: [master]}`" in line


def test_upstream_warning_reads_the_lake_of_the_days_run(quiet):
    from resources.lake import Lake
    from torchci_assets.run import upstream_warning

    tmp, _, _ = quiet
    lake = Lake.at(str(tmp / "lake"))
    assert upstream_warning(lake, [D1, D2], "pytorch/pytorch", "cfg.yaml").startswith(WARNING)
    assert upstream_warning(lake, [D1, D2], "codertocat/hello-world", "cfg.yaml") is None  # GitHub's case
    assert upstream_warning(lake, [D1, D2], "octo-org/octo-repo", "cfg.yaml") is None  # any of the days' repos
    assert upstream_warning(lake, ["2026-11-01"], "pytorch/pytorch", "cfg.yaml") is None  # nothing to judge


def test_a_config_naming_the_archive_s_repository_runs_without_the_warning(quiet, tmp_path, octokit):
    """The same payloads as the quiet run, which had no TORCHCI_CONFIG and warned."""
    _, unset, _ = quiet
    octokit_archive(tmp_path / "archive", octokit, days=(D2,))
    config = tmp_path / "widgets.yaml"
    config.write_text("upstream:\n  repo: Codertocat/Hello-World\n  branches: [master]\n")
    named = run_cli(tmp_path, "--select", "key:push", TORCHCI_CONFIG=str(config))
    assert unset.returncode == named.returncode == 0, named.stderr[-3000:]
    assert WARNING in unset.stderr and WARNING not in named.stderr


# ---- GitHub refusing the DISABLED-issue loop -------------------------------------------------------

# The assets that read GitHub's issues: they go on with the lists published last when GitHub fails,
# and fail their checks instead of their steps.
ISSUE_READERS = "key:disabled_issues or key:disabled_tests or key:unstable_jobs"
LOOP_ON = "upstream: {repo: pytorch/pytorch, branches: [main]}\npoll_commits: false\ndisabled_issues: {enabled: true}\n"


@pytest.mark.parametrize("status", [401, 403, 502])
def test_checks_github_failed_end_the_run_saying_what_to_fix_and_a_refusal_exits_3(tmp_path, httpserver, octokit,
                                                                                  status):
    """Every step succeeds through a GitHub incident (the lists stay as published, the HUD is built),
    so the run's last line names the checks that could not read GitHub and what to fix; credentials
    GitHub refuses (a 401, a 403 that is no rate limit) stay refused until someone changes them:
    exit status 3, where an outage passes by itself (0)."""
    from fake_github_issues import FakeIssueTracker, json_response
    from test_hud_outage import KINDS

    fake = FakeIssueTracker(httpserver)
    message = {401: "Bad credentials", 403: "Resource not accessible by integration", 502: "Bad Gateway"}[status]
    headers = {"Retry-After": "0"} if status == 502 else {}  # the client's retries of a 502 cost no time
    for kind in KINDS:
        fake.fail(kind, *[json_response(status, {"message": message}, headers)] * 400)
    octokit_archive(tmp_path / "archive", octokit, days=(D1,))
    (tmp_path / "config.yaml").write_text(LOOP_ON)
    result = run_cli(tmp_path, "--select", ISSUE_READERS, GITHUB_TOKEN="t0ken", GITHUB_API_URL=httpserver.url_for(""),
                     TORCHCI_CONFIG=str(tmp_path / "config.yaml"))
    assert f"[1/1] {D1}: ok" in result.stdout, result.stdout[-3000:] + result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    checks = ("disabled_issues:every_disabled_test_has_an_issue, disabled_tests:read_from_the_open_issues, "
              "unstable_jobs:read_from_the_open_issues")
    assert last.startswith(f"torchci run: 3 check(s) reading GitHub failed on {D1}: {checks} (GitHubError: "), last
    assert f"HTTP {status}: {message}" in last
    if status == 502:
        assert result.returncode == 0 and "the next run reads the issues again" in last
    else:
        assert result.returncode == 3 and last.endswith("this does not pass by itself (exit status 3)")
        assert ("set a valid GITHUB_TOKEN" if status == 401 else "needs Issues: read and write on pytorch/pytorch") \
            in last
