import re
import textwrap

import pytest
import yaml

from resources.names import repo_name_problem
from torchci_assets.config import (
    AllowlistEntry,
    ConfigError,
    L2Thresholds,
    dump_allowlist,
    load_config,
    parse_allowlist,
)


def write(tmp_path, text, name="relay.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def load_text(tmp_path, text):
    return load_config(write(tmp_path, text))


def test_bundled_default_loads(monkeypatch):
    monkeypatch.delenv("TORCHCI_CONFIG", raising=False)
    cfg = load_config()
    assert cfg.upstream_repo == "pytorch/pytorch"
    assert cfg.branches == ("refs/heads/main",)
    assert cfg.poll_commits is True
    assert cfg.maintainer_approved == frozenset()
    # the demo allowlist is the simulator's backends at the levels the simulator says they hold
    from torchci_assets.simulate.backends import backends
    levels = {e.repo: (e.level, e.device) for e in cfg.allowlist}
    assert levels == {b.repo: (b.profile.current_level, b.device if b.profile.current_level in ("L3", "L4") else None)
                      for b in backends(4)}
    t = cfg.thresholds
    assert (t.L2.window_days, t.L2.min_completed_jobs, t.L2.min_success_rate) == (7, 20, 0.70)
    assert (t.L2.max_commit_time_p95_s, t.L2.max_callbacks_per_minute) == (3 * 3600, 60)
    assert (t.L3.min_success_rate, t.L3.min_infra_availability) == (0.90, 0.95)
    assert t.L3.max_queue_time_p90_s == 30 * 60
    assert (t.L4.window_days, t.L4.min_success_rate) == (28, 0.95)


def test_env_var_names_the_config(tmp_path, monkeypatch):
    path = write(tmp_path, """
        upstream: {repo: my-org/upstream, branches: [main, refs/heads/release-1.0]}
        poll_commits: false
        allowlist: {L1: [my-org/backend]}
    """)
    monkeypatch.setenv("TORCHCI_CONFIG", path)
    cfg = load_config()
    assert cfg.source == path
    assert cfg.upstream_repo == "my-org/upstream"
    assert cfg.branches == ("refs/heads/main", "refs/heads/release-1.0")
    assert cfg.poll_commits is False
    assert cfg.allowlist == (AllowlistEntry("my-org/backend", "L1"),)
    # Omitted thresholds keep their defaults.
    assert cfg.thresholds.L2 == L2Thresholds()


def test_every_allowlist_shape(tmp_path):
    cfg = load_text(tmp_path, """
        allowlist:
          L1: [org1/repo1, " org2/repo2 "]
          L2: [org3/repo3]
          L3:
            device1: {org/device1-repo: [oncall1, oncall2]}
            device2: {org/device2-repo: [solo]}
          L4:
            - {org5/repo5: "oncall1, oncall2"}
            - org6/repo6
            - {org7/repo7: null}
        maintainer_approved: [org5/repo5, org6/repo6, ORG7/Repo7]
    """)
    assert cfg.allowlist == (
        AllowlistEntry("org1/repo1", "L1"),
        AllowlistEntry("org2/repo2", "L1"),
        AllowlistEntry("org3/repo3", "L2"),
        AllowlistEntry("org/device1-repo", "L3", "device1", ("oncall1", "oncall2")),
        AllowlistEntry("org/device2-repo", "L3", "device2", ("solo",)),
        AllowlistEntry("org5/repo5", "L4", None, ("oncall1", "oncall2")),
        AllowlistEntry("org6/repo6", "L4"),
        AllowlistEntry("org7/repo7", "L4"),
    )
    assert cfg.entry_for("ORG3/REPO3").level == "L2"
    assert cfg.entry_for("org9/repo9") is None
    assert cfg.is_approved("org7/repo7")
    assert not cfg.is_approved("org3/repo3")


def test_a_repo_written_with_a_slash_at_either_end_loads_as_the_relay_reads_it(tmp_path):
    """The relay strips whitespace and slashes around each name (`org/repo/` is `org/repo` to it): a file it
    loads must not stop every entry point here, and must name the same repositories."""
    cfg = load_text(tmp_path, """
        allowlist:
          L2: [org3/repo3/]
          L3:
            npu: {/org/npu-repo/: [oncall1]}
          L4:
            - {org5/repo5/: "oncall1"}
        maintainer_approved: [org5/repo5]
    """)
    assert cfg.allowlist == (
        AllowlistEntry("org3/repo3", "L2"),
        AllowlistEntry("org/npu-repo", "L3", "npu", ("oncall1",)),
        AllowlistEntry("org5/repo5", "L4", None, ("oncall1",)),
    )
    assert cfg.entry_for("org3/repo3").level == "L2"


@pytest.mark.parametrize("raw, message", [
    ({"L2": {"gpu": {"a/b": ["x"]}}}, "allowlist.L2: must be a list of repos"),
    ({"L3": ["c/d"]}, "allowlist.L3: must be a mapping of devices"),
    ({"L3": {"npu": {"c/d": "alice"}}}, "a list of oncall handles"),  # the relay would read a, l, i, c, e
    ({"L4": [{"c/d": ["alice", "bob"]}]}, "one comma-separated string"),  # it would read "['alice', 'bob']"
])
def test_shapes_the_relay_refuses_or_misreads_are_refused_by_name(raw, message):
    """Only L3 is keyed by device, with its oncalls as a list; the other levels list repos with
    their oncalls as one string: what loads here, the relay loads the same."""
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_allowlist(raw)


@pytest.mark.parametrize("name, fragment", [
    ("org/repo", None),
    ("a-b-c/x.y_z-1", None),
    ("o" * 39 + "/r", None),
    ("o" * 40 + "/r", "owner"),
    ("-org/repo", "owner"),
    ("org-/repo", "owner"),
    ("or--g/repo", "owner"),
    ("or_g/repo", "owner"),
    ("org/re po", "repository"),
    ("org/..", "repository"),
    ("org/repo.git", "repository"),
    ("org/" + "r" * 101, "repository"),
    ("orgrepo", "owner/repo"),
    ("org/repo/extra", "owner/repo"),
    ("/repo", "owner"),
])
def test_repo_name_rules(name, fragment):
    problem = repo_name_problem(name)
    if fragment is None:
        assert problem is None
    else:
        assert fragment in problem


@pytest.mark.parametrize("text, message", [
    # duplicates, across and within levels, case-insensitive, and as repeated YAML keys
    ("allowlist: {L1: [a/b], L2: [a/b]}", "allowlist: repo 'a/b' is listed twice (in L1 and in L2)"),
    ("allowlist: {L1: [a/b, A/B]}", "repo 'A/B' is listed twice (in L1 and in L1)"),
    ("allowlist:\n  L3:\n    npu: {a/b: []}\n    tpu: {a/b: []}\n", "'a/b' is listed twice (in L3 and in L3)"),
    ("allowlist:\n  L3:\n    npu:\n      a/b: [x]\n      a/b: [y]\n", "line 5: key 'a/b' appears twice (first on line 4)"),
    ("allowlist: {L1: [a/b]}\nallowlist: {L2: [c/d]}\n", "key 'allowlist' appears twice"),
    # syntax of names
    ("allowlist: {L2: [a/b, not-a-repo]}", "allowlist.L2[1]: 'not-a-repo' must have the form 'owner/repo'"),
    ("allowlist: {L3: {npu: {-bad/x: []}}}", "allowlist.L3.npu['-bad/x']: '-bad/x': owner '-bad'"),
    ("allowlist: {L4: [{bad/x.git: me}]}\nmaintainer_approved: [bad/x.git]", "allowlist.L4[0]: 'bad/x.git': repository"),
    ("upstream: {repo: pytorch}", "upstream.repo: 'pytorch' must have the form"),
    ("maintainer_approved: [a/b, nope]", "maintainer_approved[1]: 'nope'"),
    # levels
    ("allowlist: {L5: [a/b]}", "allowlist: unknown level 'L5' (levels are L1, L2, L3, L4)"),
    ("allowlist: {l1: [a/b]}", "unknown level 'l1'"),
    # types
    ("allowlist: [a/b]", "allowlist: must be a mapping of levels (L1..L4), got list"),
    ("allowlist: {L1: a/b}", "allowlist.L1: must be a list of repos or a mapping of devices, got str"),
    ("allowlist: {L1: [{a/b: x, c/d: y}]}", "allowlist.L1[0]: a mapping entry must hold exactly one owner/repo, got 2"),
    ("allowlist: {L1: [42]}", "allowlist.L1[0]: must be an 'owner/repo' string, got int"),
    ("allowlist: {L3: {npu: [a/b]}}", "allowlist.L3.npu: must be a mapping of owner/repo to oncalls, got list"),
    ("allowlist: {L3: {yes: {a/b: []}}}", "allowlist.L3.True: device True must be a name"),
    ("allowlist: {L3: {npu: {a/b: {x: 1}}}}", "allowlist.L3.npu['a/b']: must be a list of oncall handles"),
    ("allowlist: {L3: {npu: {a/b: [has space]}}}", "oncall 'has space' is not a GitHub user or team handle"),
    ("poll_commits: 'no'", "poll_commits: must be true or false, got str 'no'"),
    ("maintainer_approved: a/b", "maintainer_approved: must be a list of owner/repo, got str"),
    ("upstream: {repo: a/b, branches: main}", "upstream.branches: must be a list of branches"),
    ("upstream: {repo: a/b, branches: []}", "upstream.branches: must name at least one branch"),
    ("upstream: {repo: a/b, branches: [refs/tags/v1]}", "upstream.branches[0]: 'refs/tags/v1' is not a branch"),
    ("- just\n- a list\n", "top level: must be a mapping, got list"),
    ("", "top level: must be a mapping, got null"),
    ("allowlist: {L1: [a/b]\n", "not valid YAML: line 2, column 1: expected ',' or '}'"),
    ("upstream:\n  repo: a/b\n   branches: [x]\n", "not valid YAML: line 3, column 12: mapping values are not allowed"),
    # typos in keys
    ("alowlist: {L1: [a/b]}", "top level: unknown key 'alowlist'"),
    ("upstream: {repo: a/b, branch: [main]}", "upstream: unknown key 'branch'"),
    ("thresholds: {L2: {min_sucess_rate: 0.5}}", "thresholds.L2: unknown key 'min_sucess_rate'"),
    ("thresholds: {L1: {}}", "thresholds: unknown key 'L1'"),
    # threshold ranges
    ("thresholds: {L2: {min_success_rate: 70}}", "thresholds.L2.min_success_rate: must be a fraction between 0 and 1"),
    ("thresholds: {L3: {min_infra_availability: -0.1}}", "thresholds.L3.min_infra_availability: must be a fraction"),
    ("thresholds: {L2: {min_completed_jobs: 0}}", "thresholds.L2.min_completed_jobs: must be a whole number of at least 1, got 0"),
    ("thresholds: {L2: {min_completed_jobs: 2.5}}", "must be a whole number of at least 1, got 2.5"),
    ("thresholds: {L4: {window_days: 400}}", "thresholds.L4.window_days: must be at most 366 days"),
    ("thresholds: {L2: {max_commit_time_p95_s: 0}}", "thresholds.L2.max_commit_time_p95_s: must be a positive number, got 0"),
    ("thresholds: {L3: {max_queue_time_p90_s: true}}", "must be a positive number, got True"),
    ("thresholds: {L2: [1]}", "thresholds.L2: must be a mapping of threshold names to values, got list"),
    # cross-section rules
    ("allowlist: {L4: [a/b]}", "allowlist.L4: 'a/b' is not in maintainer_approved"),
    ("allowlist: {L1: [pytorch/pytorch]}", "the upstream repo 'pytorch/pytorch' cannot be a downstream"),
])
def test_validation_errors_name_problem_and_place(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{path}: ")
    assert message in str(info.value)


def test_thresholds_override_only_what_is_given(tmp_path):
    cfg = load_text(tmp_path, """
        thresholds:
          L2: {min_success_rate: 0.5, max_callbacks_per_minute: 120}
          L4: {window_days: 14}
    """)
    assert cfg.thresholds.L2.min_success_rate == 0.5
    assert cfg.thresholds.L2.max_callbacks_per_minute == 120
    assert cfg.thresholds.L2.min_completed_jobs == 20
    assert cfg.thresholds.L3.min_success_rate == 0.90
    assert cfg.thresholds.L4.window_days == 14
    assert cfg.thresholds.L4.min_success_rate == 0.95


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="nope.yaml: cannot read the relay config"):
        load_config(str(tmp_path / "nope.yaml"))


def test_dump_writes_the_relay_shapes():
    text = dump_allowlist([
        AllowlistEntry("z-org/b", "L2"),
        AllowlistEntry("acme/npu", "L3", "npu", ("alice", "bob")),
        AllowlistEntry("a-org/a", "L2", None, ("carol",)),
        AllowlistEntry("f/fpga", "L1"),
    ])
    assert yaml.safe_load(text) == {
        "L1": ["f/fpga"],
        "L2": [{"a-org/a": "carol"}, "z-org/b"],
        "L3": {"npu": {"acme/npu": ["alice", "bob"]}},
    }
    assert list(yaml.safe_load(text)) == ["L1", "L2", "L3"]


def test_dump_then_load_round_trips(tmp_path, monkeypatch):
    entries = (
        AllowlistEntry("fabrikam/torch-fpga", "L1"),
        AllowlistEntry("Contoso/torch-dsp", "L2", None, ("dsp-oncall",)),
        AllowlistEntry("example-org/torch-tpu-backend", "L2"),
        AllowlistEntry("acme-ai/torch-npu", "L3", "npu", ("alice", "@acme-ai/npu-team")),
        AllowlistEntry("acme-ai/torch-npu2", "L3", "npu", ()),
        AllowlistEntry("other/gpu", "L3", "gpu", ("bob",)),
        AllowlistEntry("big/backend", "L4", None, ("x", "y")),
    )
    text = dump_allowlist(entries)
    assert set(parse_allowlist(yaml.safe_load(text))) == set(entries)
    # Dumping is canonical, so a second round trip is byte-identical.
    assert dump_allowlist(parse_allowlist(yaml.safe_load(text))) == text
    # And the dumped allowlist is accepted as the allowlist of a full config file.
    path = write(tmp_path, "allowlist:\n" + textwrap.indent(text, "  ")
                 + "maintainer_approved: [big/backend]\n")
    assert set(load_config(path).allowlist) == set(entries)


def test_dump_refuses_what_the_format_cannot_hold():
    with pytest.raises(ValueError, match="L3: c/d has no device"):
        dump_allowlist([AllowlistEntry("a/b", "L3", "npu"), AllowlistEntry("c/d", "L3")])
    with pytest.raises(ValueError, match=r"L4: a/b has a device \(npu\)"):
        dump_allowlist([AllowlistEntry("a/b", "L4", "npu")])
    with pytest.raises(ValueError, match="unknown level 'L9'"):
        dump_allowlist([AllowlistEntry("a/b", "L9")])
    with pytest.raises(ConfigError, match="repo 'A/b' is listed twice"):
        dump_allowlist([AllowlistEntry("a/b", "L1"), AllowlistEntry("A/b", "L2")])


def test_the_disabled_issue_loop_is_off_unless_the_config_turns_it_on(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHCI_CONFIG", raising=False)
    bundled = load_config().disabled_issues
    assert (bundled.enabled, bundled.labels, bundled.max_new_per_run) == (False, ("skipped", "module: flaky-tests"), 10)
    assert load_text(tmp_path, "upstream: {repo: a/b}\n").disabled_issues == bundled  # omitted: the defaults
    on = load_text(tmp_path, """
        disabled_issues: {enabled: true, labels: [flaky, "module: ci"], max_new_per_run: 0,
                          unknown_owner_label: "needs triage"}
    """).disabled_issues
    assert (on.enabled, on.labels, on.max_new_per_run) == (True, ("flaky", "module: ci"), 0)
    assert (on.unknown_owner_label, bundled.unknown_owner_label) == ("needs triage", "module: unknown")


@pytest.mark.parametrize("text, message", [
    ("disabled_issues: {enabled: yes please}", "disabled_issues.enabled: must be true or false"),
    ("disabled_issues: {max_new_per_run: -1}", "disabled_issues.max_new_per_run: must be a whole number of at least 0"),
    ("disabled_issues: {labels: skipped}", "disabled_issues.labels: must be a list of label names"),
    ("disabled_issues: {labels: ['']}", "disabled_issues.labels[0]: must be a label name"),
    ("disabled_issues: {file: true}", "disabled_issues: unknown key 'file'"),
    ("disabled_issues: {unknown_owner_label: 7}", "disabled_issues.unknown_owner_label: must be a label name"),
])
def test_disabled_issue_settings_are_checked(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_text(tmp_path, text)
