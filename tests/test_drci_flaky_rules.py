"""Dr. CI with PyTorch's flaky-rules.json: a failure its maintainers list as a known flake is FLAKY.

The rules are upstream's own file (tests/data/drci-flaky-rules, from test-infra's generated-stats
branch), and the failures are the lines this project's log classifier finds in PyTorch's real logs
(tests/data/log-classifier/fixtures), so the rules meet the lines they were written for.
"""

import datetime as dt
import re
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import ram_instance
from test_drci import BASE, MAIN, trunk
from test_log_rules import FIXTURES, PYTORCH_RULES, _fixture_log
from resources.github import GitHubResource
from resources.lake import Lake
from torchci_assets.derived.drci import classify as c
from torchci_assets.derived.drci.flaky_rules import load_rules, parse_rules
from torchci_assets.derived.failures.classifier import classify_bytes
from torchci_assets.derived.failures.job_failure import JOB_FAILURE_SCHEMA
from torchci_assets.derived.failures.rules import load_ruleset

RULES = Path(__file__).parent / "data" / "drci-flaky-rules" / "flaky-rules.json"
LINUX_TEST = "linux-jammy-py3.10-gcc11 / test (default, 1, 5, linux.4xlarge)"
WIN_TEST = "win-vs2022-cpu-py3 / test (default, 2, 3, windows.4xlarge.nonephemeral)"


@pytest.fixture(scope="module")
def lines() -> dict[str, str]:
    """fixture name -> the line PyTorch's ruleset finds in that real log."""
    ruleset = load_ruleset(PYTORCH_RULES)
    return {f.stem: classify_bytes(_fixture_log(f), ruleset).line for f in FIXTURES}


def job(line: str, name: str = LINUX_TEST, workflow: str = "pull", **kw) -> c.HeadJob:
    return c.HeadJob(name=name, job_group=f"{workflow} / {name.split(' (')[0]}", state="failure", failure_class="new",
                     job_id=7, run_id=3, workflow=workflow, failure_line=line, **kw)


def verdict(j: c.HeadJob, rules=(), at_base: c.Trunk | None = None) -> c.Verdict:
    return c.classify(j, at_base or trunk({}), c.Flaky(), rules=rules)


def test_upstreams_rules_mark_the_real_failures_they_name_flaky_and_no_other(lines):
    rules = load_rules(str(RULES))
    assert len(rules) == 23  # every rule of upstream's file compiles here
    flaky = {name: v.evidence for name, line in lines.items() if line
             for v in [verdict(job(line), rules)] if v.cls == c.FLAKY}
    # the runner's shutdown and a Docker daemon error, both under upstream's `linux` rule
    assert flaky == {"docker_manifest_unknown": "matched **linux** rule in flaky-rules.json",
                     "gha_cancellation_shutdown": "matched **linux** rule in flaky-rules.json"}
    # a step cancelled on a Windows runner is upstream's `win` flake, not a cancelled job to retry
    assert verdict(job(lines["gha_operation_canceled"], WIN_TEST), rules).evidence == \
        "matched **win** rule in flaky-rules.json"
    assert verdict(job(lines["gha_operation_canceled"], WIN_TEST)).cls == c.CANCELLED
    # without rules (the default), nothing changes
    assert all(verdict(job(line)).cls == c.NEW for line in (lines["docker_manifest_unknown"],
                                                            lines["compile_error"]))


@pytest.mark.parametrize("workflow, name", [
    ("Lint", "lintrunner-noclang / linux-job"),           # lint: never flaky nor broken trunk
    ("pull", "linux-docs / build-docs-python-false"),      # the jobs upstream never calls flaky
    ("pull", "linux-jammy-py3.10-gcc11 / build"),
    ("pull", "ghstack-mergeability-check"),
])
def test_a_rule_never_marks_lint_nor_the_jobs_upstream_never_calls_flaky(lines, workflow, name):
    rules = load_rules(str(RULES))
    docker = lines["docker_manifest_unknown"]
    rule = c.FlakyRule(".*", ("Error response",), re.compile(".*"), (re.compile("Error response"),))
    for given in (rules, (rule,)):  # upstream's `linux` rule, and one matching every job name
        assert verdict(job(docker, name, workflow), given).cls == c.NEW


def test_broken_trunk_comes_before_a_rule_as_upstream_tries_the_merge_base_first(lines):
    docker = lines["docker_manifest_unknown"]
    main = trunk({BASE: [("pull / linux-jammy-py3.10-gcc11 / test", docker)]})
    v = verdict(job(docker), load_rules(str(RULES)), main)
    assert v.cls == c.BROKEN_TRUNK and v.main.sha == BASE and BASE in MAIN


def test_a_rules_file_missing_or_malformed_is_reported_by_name_and_applies_nothing(tmp_path, lines):
    logged: list[str] = []
    missing = tmp_path / "nowhere" / "flaky-rules.json"
    assert load_rules(str(missing), logged.append) == () and str(missing) in logged[-1] and "ERROR" in logged[-1]
    broken = tmp_path / "rules.json"
    for text in (b'[{"name": "linux", "captures": ["x"]', b'{"name": "linux", "captures": ["x"]}', b"\xff\xfe"):
        broken.write_bytes(text)
        assert load_rules(str(broken), logged.append) == () and str(broken) in logged[-1] and "ERROR" in logged[-1]
    assert load_rules(None, logged.append) == () and len(logged) == 4  # no path: no rule, nothing to say
    # one bad rule (a pattern Python cannot compile, no captures) is dropped alone, and said
    good = parse_rules(b'[{"name": "(", "captures": ["x"]}, {"name": "win"}, '
                       b'{"name": "linux", "captures": ["Error response from daemon"]}]', "mine.json", logged.append)
    assert [r.name for r in good] == ["linux"] and "mine.json: 2 malformed rule(s) ignored" in logged[-1]
    assert verdict(job(lines["docker_manifest_unknown"]), good).evidence == "matched **linux** rule in mine.json"


def lake_with_failing_head(tmp_path, line: str, captures=()) -> tuple[Lake, dt.datetime]:
    """Main passing, and PR 50's head failing LINUX_TEST with `line` (and `captures`) in `job_failure`,
    written as the log classifier's asset writes it; `pr_jobs` and `commit_health` built."""
    from hud_lake import DAY, REPO, T0, History
    from torchci_assets.derived.hud.health import build_commit_health, build_pr_jobs

    h, now, head = History(), T0 + dt.timedelta(hours=12), "ab" * 20
    for i in (1, 2):
        h.job(h.push(i, T0 + dt.timedelta(hours=i)), "linux-jammy / build", "success", run_id=10 * i,
              created=T0 + dt.timedelta(hours=i))
    h.add("pull_request", DAY, repo=REPO, number=50, state="open", head_sha=head, head_ref="u/50", base_ref="main",
          labels=[], merged=None, updated_at=T0, received_at=T0)
    failed = h.job(head, LINUX_TEST, "failure", run_id=500, branch="u/50")
    lake = Lake.at(str(tmp_path / "lake"))
    h.write(lake)
    lake.write("job_failure", DAY, pa.Table.from_pylist([{
        "job_id": failed, "run_attempt": 1, "job_name": LINUX_TEST, "conclusion": "failure", "line": line,
        "captures": list(captures), "infra": False}], schema=JOB_FAILURE_SCHEMA))
    build_commit_health(lake, DAY, REPO, ("refs/heads/main",), min_groups=1, now=now)
    build_pr_jobs(lake, DAY, REPO, now=now)
    return lake, now


def test_the_rules_file_given_to_the_builder_reaches_the_comment(tmp_path, lines):
    """Through the lake: the log classifier's line in `job_failure`, `pr_jobs`, then `drci_comments`."""
    from hud_lake import DAY, REPO
    from torchci_assets.derived.drci.build import build_comments

    lake, now = lake_with_failing_head(tmp_path, lines["docker_manifest_unknown"])
    dry, logged = GitHubResource(api_url="http://127.0.0.1:9"), []
    row = build_comments(lake, dry, DAY, REPO, now=now, flaky_rules=str(RULES)).rows[0]
    assert (row["flaky"], row["new"]) == (1, 0) and "matched **linux** rule in flaky-rules.json" in row["body"]
    assert build_comments(lake, dry, DAY, REPO, now=now).rows[0]["new"] == 1  # no file given: as before
    # a file that is not there is said, and the comments are still written, without rules
    row = build_comments(lake, dry, DAY, REPO, now=now, flaky_rules=str(tmp_path / "gone.json"),
                         warn=logged.append).rows[0]
    assert row["new"] == 1 and len(logged) == 1 and "gone.json" in logged[0]


def test_the_config_file_names_the_rules_beside_it_and_refuses_what_is_no_path(tmp_path):
    from torchci_assets.config import ConfigError, load_config

    assert load_config().drci.flaky_rules is None  # the bundled default: no rules
    config = tmp_path / "conf" / "torchci.yaml"
    config.parent.mkdir()
    config.write_text("drci:\n  flaky_rules: rules/flaky-rules.json\n")
    assert load_config(str(config)).drci.flaky_rules == str(tmp_path / "conf" / "rules" / "flaky-rules.json")
    config.write_text(f"drci:\n  flaky_rules: {RULES}\n")
    assert load_config(str(config)).drci.flaky_rules == str(RULES)
    for bad in ("''", "[a.json]", "3"):
        config.write_text(f"drci:\n  flaky_rules: {bad}\n")
        with pytest.raises(ConfigError, match="drci.flaky_rules: must be the path of a flaky-rules.json"):
            load_config(str(config))


def test_the_asset_reads_the_configured_rules_and_says_when_it_cannot(tmp_path, httpserver, monkeypatch):
    """In Dagster: the config file's rules reach the builder; a rules file gone is an error in the
    run's log naming it, and the comments are still written."""
    from test_drci import materialize_on_hud_lake
    from torchci_assets.config import CONFIG_ENV_VAR

    config = tmp_path / "torchci.yaml"
    config.write_text("drci:\n  flaky_rules: gone/flaky-rules.json\n")
    monkeypatch.setenv(CONFIG_ENV_VAR, str(config))
    with ram_instance() as instance:
        lake, meta = materialize_on_hud_lake(tmp_path, httpserver, instance=instance)
        logged = [e.user_message for e in instance.all_logs(instance.get_runs()[0].run_id)]
    assert meta["pull_requests"].value == 2
    assert any("gone/flaky-rules.json" in m and "no flaky rule applied" in m for m in logged)


def test_a_rule_matches_any_capture_of_the_log_classifier_as_upstream(tmp_path, lines):
    """Upstream's isFlaky takes a rule's pattern as matched when it is found in any of the failure's
    captures or in its line. The real shutdown log's line starts with `##[error]`, its capture with the
    message: a rule anchored on the message is met by the capture only, through the lake's `job_failure`."""
    from hud_lake import DAY, REPO
    from torchci_assets.derived.drci.build import build_comments

    log = classify_bytes(_fixture_log(next(f for f in FIXTURES if f.stem == "gha_cancellation_shutdown")),
                         load_ruleset(PYTORCH_RULES))
    anchored = tmp_path / "flaky-rules.json"
    anchored.write_text('[{"name": "^pull / linux", "captures": ["^The runner has received a shutdown signal"]}]')
    lake, now = lake_with_failing_head(tmp_path, log.line, log.captures)
    dry = GitHubResource(api_url="http://127.0.0.1:9")
    row = build_comments(lake, dry, DAY, REPO, now=now, flaky_rules=str(anchored)).rows[0]
    assert (row["flaky"], row["new"]) == (1, 0) and "matched **^pull / linux** rule in flaky-rules.json" in row["body"]
    # every pattern of a rule must be met, each by the line or by some capture
    rules = parse_rules(b'[{"name": "linux", "captures": ["^SIGBUS$", "^nn/test_pruning$"]},'
                        b' {"name": "linux", "captures": ["^SIGBUS$", "^test_nn$"]}]')
    crash = lines["test_file_signal_crash"]
    assert verdict(job(crash, captures=("nn/test_pruning", "SIGBUS")), rules).evidence == \
        "matched **linux** rule in flaky-rules.json"
    assert verdict(job(crash, captures=("test_nn", "SIGSEGV")), rules).cls == c.NEW
