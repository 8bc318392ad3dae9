"""The project's configuration (`TORCHCI_CONFIG`): upstream repo, allowlist, L4 approvals, eligibility
thresholds, and whether flaky tests are filed as DISABLED issues upstream.

The allowlist is written in the cross-repo CI relay's own YAML format so that a file this
project proposes (`allowlist-proposal.yaml`) can be reviewed and pasted into the relay
unchanged. A mistake in this file silently changes which repositories receive upstream
commits, so loading is strict: every problem is reported with the file and the place in
it (`allowlist.L3.npu`, `thresholds.L2.min_success_rate`, ...) instead of being guessed
around. YAML's habit of keeping the last of two equal keys is turned into an error too,
because a repeated repo or level is almost always a merge accident.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from resources.names import repo_name_problem
from torchci_assets.config_error import ConfigError  # noqa: F401  (raised here, imported from here by callers)
from torchci_assets.guardian_config import GuardianSettings, guardian_settings

DEFAULT_CONFIG_PATH = Path(__file__).with_name("default_config.yaml")
CONFIG_ENV_VAR = "TORCHCI_CONFIG"
LEVELS = ("L1", "L2", "L3", "L4")

# Devices become the `ciflow/crcr/<device>` label on upstream pull requests.
_DEVICE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_ONCALL_RE = re.compile(r"^@?[A-Za-z0-9][A-Za-z0-9._/-]*$")


@dataclass(frozen=True)
class AllowlistEntry:
    """One allowlisted downstream repository. `device` is set for device-keyed entries (L3)."""

    repo: str
    level: str
    device: str | None = None
    oncalls: tuple[str, ...] = ()


@dataclass(frozen=True)
class L2Thresholds:
    window_days: int = 7
    min_completed_jobs: int = 20
    min_success_rate: float = 0.70
    max_commit_time_p95_s: float = 3 * 3600.0
    max_callbacks_per_minute: float = 60.0


@dataclass(frozen=True)
class L3Thresholds:
    """Applied on top of every L2 criterion."""

    min_success_rate: float = 0.90
    min_infra_availability: float = 0.95
    max_queue_time_p90_s: float = 30 * 60.0


@dataclass(frozen=True)
class L4Thresholds:
    """Applied on top of every L3 criterion, plus the repo being in `maintainer_approved`."""

    window_days: int = 28
    min_success_rate: float = 0.95


@dataclass(frozen=True)
class Thresholds:
    L2: L2Thresholds = field(default_factory=L2Thresholds)
    L3: L3Thresholds = field(default_factory=L3Thresholds)
    L4: L4Thresholds = field(default_factory=L4Thresholds)


# Log classification rules (by name) whose match means the job failed for a reason outside its
# tests; both this project's default rules and PyTorch's ruleset.toml names are listed.
DEFAULT_INFRA_RULES = (
    "runner lost", "job timeout", "CUDA device error", "GPU unavailable", "disk full",
    "network error during setup", "docker registry error",
    "GHA timeout", "GHA cancellation", "Faulty ROCM runner", "Runner disk space issue", "Out of space error",
    "Runner pod failed to come online", "NVIDIA installation failure", "apt-get update failure",
    "Dependency fetch error", "Docker login failure", "failed to download github artifacts",
    "Action archive download failure", "GitHub API rate limit exceeded", "Curl error",
    "uv python download metadata fetch failed", "AWS credentials could not be loaded",
)


@dataclass(frozen=True)
class DisabledIssuesConfig:
    """The disabled-test loop through DISABLED issues in the upstream repo (needs credentials).

    Off by default: any token may open issues in a public repository, and the bundled config
    names the real pytorch/pytorch, so a token set for the relay must not start filing issues
    from a simulated archive's verdicts.
    """

    enabled: bool = False
    # PyTorch's flaky-test bot labels its issues so.
    labels: tuple[str, ...] = ("skipped", "module: flaky-tests")
    # A bound on new issues per run, so a wrong verdict cannot flood the tracker.
    max_new_per_run: int = 10
    # The label of an issue whose test file names no owner (PyTorch's flaky bot: module: unknown).
    unknown_owner_label: str = "module: unknown"


@dataclass(frozen=True)
class DrciConfig:
    """Dr. CI comments on pull requests (needs credentials to post; off by default for the same
    reason as DISABLED issues: the bundled config names the real pytorch/pytorch)."""

    enabled: bool = False
    # A head whose jobs are missing this long after its push, or in progress this long, is
    # refreshed from the REST API before its comment is written (a lost webhook).
    missing_after_minutes: int = 30
    stuck_after_minutes: int = 300
    # The login that posts (a GitHub App's `<slug>[bot]`): when set, only its comments with the
    # marker are taken as ours, so another bot's Dr. CI comment on the same PR is left alone.
    author: str | None = None
    # A flaky-rules.json in PyTorch's format (test-infra's generated-stats branch publishes one):
    # failures a rule matches are FLAKY. A relative path is taken from the config file's folder.
    flaky_rules: str | None = None


@dataclass(frozen=True)
class HudConfig:
    """Which workflows decide a main commit's conclusion on the HUD (and the guardians' alerts), and
    which a developer waits for (time to signal). PyTorch's are its viable/strict gate and `pull`,
    `trunk`, with more than 10 job groups needed for a signal; a project whose workflows have other
    names would see every commit "no signal" under them, so another repository's default is every
    workflow that ran on the commit, and one job group. An empty list is every workflow too."""

    blocking_workflows: tuple[str, ...] = ()
    signal_workflows: tuple[str, ...] = ()
    min_job_groups: int = 1


PYTORCH_REPORT_ARTIFACTS = ("test-reports",)  # PyTorch's upload-test-artifacts names them test-reports-*


@dataclass(frozen=True)
class BackfillConfig:
    """`torchci backfill`'s reading of test reports: the name prefixes of the artifacts that hold a
    job's JUnit reports. PyTorch's upload action names them `test-reports-...`; a team's workflow
    names its own (`junit-<os>`), and its tests are read only once named here."""

    report_artifacts: tuple[str, ...] = PYTORCH_REPORT_ARTIFACTS


PYTORCH = "pytorch/pytorch"


def is_pytorch(repo: str) -> bool:
    """Whether `repo` is PyTorch's own, whose names (workflows, branches) the defaults follow."""
    return repo.lower() == PYTORCH


PYTORCH_HUD = HudConfig(("Lint", "pull", "trunk", "linux-aarch64", "docs-build"), ("pull", "trunk"), 11)
MAIN_BRANCHES = ("refs/heads/main", "refs/heads/master")
# How long an upstream check run may stay in progress before the relay's zombie sweep completes it
# as timed_out: the cross-repo relay's ZOMBIE_TIMEOUT_SECONDS and its default. At most two days,
# so that a check run past it is still within the three days the sweep looks back, with a day to
# spare for a sweep that was stopped.
ZOMBIE_TIMEOUT_S = 6 * 3600
MAX_ZOMBIE_TIMEOUT_S = 2 * 86400


def main_branch(branches: tuple[str, ...]) -> str:
    """The one branch whose commits are "main" (the HUD, the guardians, code owners): `main` (or
    `master`) when `branches` lists it, else the first. The others (a release branch) are relayed
    too, but their pushes are not main's history: in one timeline a green release commit pushed
    after main broke would hide the break, and move the guardians' culprit."""
    return next((b for b in MAIN_BRANCHES if b in branches), branches[0])


@dataclass(frozen=True)
class TorchciConfig:
    """The whole of TORCHCI_CONFIG: the relay (upstream, allowlist, approvals, thresholds), the
    DISABLED-issue loop, Dr. CI, the guardians, the log classifier's infrastructure rules, the HUD's
    workflows and the backfill's report artifacts, read once and passed around."""

    upstream_repo: str
    branches: tuple[str, ...]
    allowlist: tuple[AllowlistEntry, ...]
    maintainer_approved: frozenset[str]
    thresholds: Thresholds
    poll_commits: bool = True
    disabled_issues: DisabledIssuesConfig = field(default_factory=DisabledIssuesConfig)
    drci: DrciConfig = field(default_factory=DrciConfig)
    source: str = ""
    infra_rules: tuple[str, ...] = DEFAULT_INFRA_RULES  # log_classifier.infra_rules
    guardians: GuardianSettings | None = None  # the `autorevert`, `alerts` and `main_window` sections
    zombie_timeout_seconds: int = ZOMBIE_TIMEOUT_S
    hud: HudConfig = PYTORCH_HUD
    backfill: BackfillConfig = field(default_factory=BackfillConfig)

    @property
    def main_branch(self) -> str:
        return main_branch(self.branches)

    @property
    def main_branch_name(self) -> str:
        """The main branch as people name it (`master`, not `refs/heads/master`): the pages',
        comments' and issues' word for it."""
        return self.main_branch.removeprefix("refs/heads/")

    def entry_for(self, repo: str) -> AllowlistEntry | None:
        """The allowlist entry of `repo` (GitHub names are case-insensitive), or None."""
        wanted = repo.lower()
        return next((e for e in self.allowlist if e.repo.lower() == wanted), None)

    def is_approved(self, repo: str) -> bool:
        return repo.lower() in {r.lower() for r in self.maintainer_approved}


# ---- YAML reading --------------------------------------------------------------------


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects a mapping with the same key twice."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                first = seen.get(key)
            except TypeError:  # unhashable key; the base constructor reports it
                break
            if first is not None:
                raise ConfigError(
                    f"line {key_node.start_mark.line + 1}: key {key!r} appears twice "
                    f"(first on line {first.start_mark.line + 1})")
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


def _read_yaml(text: str, source: str) -> Any:
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: not valid YAML: {_yaml_problem(e)}") from None


def _yaml_problem(e: yaml.YAMLError) -> str:
    """PyYAML's error on one line, with where it is (its own message spreads that over several,
    and only the first line is shown where settings are checked)."""
    mark, problem = getattr(e, "problem_mark", None), getattr(e, "problem", None)
    if mark is None or not problem:
        return " ".join(str(e).split())
    context = getattr(e, "context", None)
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" + (f" ({context})" if context else "")


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _expect(value: Any, kind: type | tuple[type, ...], where: str, what: str) -> Any:
    if not isinstance(value, kind):
        raise ConfigError(f"{where}: must be {what}, got {_type_name(value)} {value!r}")
    return value


def _check_keys(raw: dict, allowed: Iterable[str], where: str) -> None:
    unknown = [k for k in raw if k not in allowed]
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (expected one of: "
                          f"{', '.join(allowed)})")


# ---- allowlist -----------------------------------------------------------------------


def _repo(raw: Any, where: str) -> str:
    """The `owner/repo` of an entry, spaces and slashes around it dropped as the relay drops them."""
    name = raw.strip().strip("/") if isinstance(raw, str) else raw
    problem = repo_name_problem(name)
    if problem:
        raise ConfigError(f"{where}: {problem}")
    return name


def _oncalls(raw: Any, where: str, as_list: bool) -> tuple[str, ...]:
    """Oncalls in the one form the relay reads at that place: a list under an L3 device (it
    iterates them: a string would be read a letter at a time), one comma-separated string in the
    other levels' lists (it splits them: a list would be read as its printed form)."""
    if raw is None:
        return ()
    if as_list:
        items = _expect(raw, list, where, "a list of oncall handles ([alice, bob]), as the relay reads L3's")
    else:
        _expect(raw, str, where, "one comma-separated string of oncall handles (owner/repo: alice, bob), "
                                 "as the relay reads them outside L3")
        items = [s.strip() for s in raw.split(",") if s.strip()]
    for item in items:
        if not isinstance(item, str) or not _ONCALL_RE.match(item):
            raise ConfigError(f"{where}: oncall {item!r} is not a GitHub user or team handle")
    return tuple(items)


def _device(raw: Any, where: str) -> str:
    if not isinstance(raw, str) or not _DEVICE_RE.match(raw):
        raise ConfigError(f"{where}: device {raw!r} must be a name of letters, digits, '.', "
                          "'-' or '_' (quote names YAML reads as booleans or numbers)")
    return raw


def parse_allowlist(raw: Any, where: str = "allowlist") -> tuple[AllowlistEntry, ...]:
    """Entries of an allowlist in the relay format, in file order.

    L3 is a `{device: {owner/repo: [oncalls]}}` map; L1, L2 and L4 are lists of `owner/repo`
    strings and `{owner/repo: "oncall, oncall"}` maps. Those are the shapes the relay accepts, each
    read as the relay reads it: a file this loads, the relay loads the same. A repository may appear
    only once overall.
    """
    if raw is None:
        return ()
    _expect(raw, dict, where, "a mapping of levels (L1..L4)")
    entries: list[AllowlistEntry] = []
    for level, body in raw.items():
        if level not in LEVELS:
            raise ConfigError(f"{where}: unknown level {level!r} (levels are {', '.join(LEVELS)})")
        here = f"{where}.{level}"
        if body is None:
            continue
        if (level == "L3") != isinstance(body, dict):
            raise ConfigError(f"{here}: must be " + (
                "a mapping of devices (npu: {owner/repo: [oncall]}), as the relay requires of L3" if level == "L3"
                else "a list of repos (- owner/repo, or - owner/repo: oncall1, oncall2); the relay keys only "
                     "L3 by device") + f", got {_type_name(body)}")
        if isinstance(body, dict):
            for device, repos in body.items():
                dev_where = f"{here}.{device}"
                device = _device(device, dev_where)
                _expect(repos, dict, dev_where, "a mapping of owner/repo to oncalls")
                for name, oncalls in repos.items():
                    repo_where = f"{dev_where}[{name!r}]"
                    entries.append(AllowlistEntry(_repo(name, repo_where), level, device,
                                                  _oncalls(oncalls, repo_where, as_list=True)))
        elif isinstance(body, list):
            for i, item in enumerate(body):
                item_where = f"{here}[{i}]"
                if isinstance(item, dict):
                    if len(item) != 1:
                        raise ConfigError(f"{item_where}: a mapping entry must hold exactly "
                                          f"one owner/repo, got {len(item)}")
                    (name, oncalls), = item.items()
                    entries.append(AllowlistEntry(_repo(name, item_where), level, None,
                                                  _oncalls(oncalls, item_where, as_list=False)))
                else:
                    entries.append(AllowlistEntry(_repo(item, item_where), level))
        else:
            raise ConfigError(f"{here}: must be a list of repos or a mapping of devices, "
                              f"got {_type_name(body)} {body!r}")
    _reject_duplicates(entries, where)
    return tuple(entries)


def _reject_duplicates(entries: list[AllowlistEntry], where: str) -> None:
    seen: dict[str, AllowlistEntry] = {}
    for e in entries:
        first = seen.setdefault(e.repo.lower(), e)
        if first is not e:
            raise ConfigError(f"{where}: repo {e.repo!r} is listed twice "
                              f"(in {first.level} and in {e.level})")


def dump_allowlist(entries: Iterable[AllowlistEntry]) -> str:
    """The relay-format YAML for `entries`, in a stable order (levels, devices, repos sorted).

    L3 is a device map, `{device: {repo: [oncalls]}}`, so every L3 entry needs a device; the other
    levels are lists of repos, with `{repo: "oncall, oncall"}` for entries that have oncalls, and
    carry no device (`parse_allowlist` reads both back as the relay does).
    """
    entries = list(entries)
    unknown = {e.level for e in entries} - set(LEVELS)
    if unknown:
        raise ValueError(f"unknown level {sorted(unknown)[0]!r} (levels are {', '.join(LEVELS)})")
    _reject_duplicates(entries, "entries")
    doc: dict[str, Any] = {}
    for level in LEVELS:
        at = sorted((e for e in entries if e.level == level), key=lambda e: e.repo.lower())
        if not at:
            continue
        odd = next((e for e in at if bool(e.device) != (level == "L3")), None)
        if odd is not None:
            raise ValueError(f"{level}: {odd.repo} " + ("has no device: the relay keys every L3 repo by one"
                             if level == "L3" else f"has a device ({odd.device}): the relay keys only L3 by device"))
        if level == "L3":
            doc[level] = {}
            for e in sorted(at, key=lambda e: e.device or ""):
                doc[level].setdefault(e.device, {})[e.repo] = list(e.oncalls)
        else:
            doc[level] = [{e.repo: ", ".join(e.oncalls)} if e.oncalls else e.repo for e in at]
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)


# ---- thresholds ----------------------------------------------------------------------


def _threshold(value: Any, name: str, where: str) -> float | int:
    if name.endswith("_rate") or name.endswith("_availability"):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise ConfigError(f"{where}: must be a fraction between 0 and 1 (0.9 for 90%), "
                              f"got {value!r}")
        return float(value)
    if name == "window_days" or name == "min_completed_jobs":
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{where}: must be a whole number of at least 1, got {value!r}")
        if name == "window_days" and value > 366:
            raise ConfigError(f"{where}: must be at most 366 days, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(f"{where}: must be a positive number, got {value!r}")
    return float(value)


def _parse_thresholds(raw: Any, where: str) -> Thresholds:
    if raw is None:
        return Thresholds()
    _expect(raw, dict, where, "a mapping with L2, L3 and L4")
    _check_keys(raw, ("L2", "L3", "L4"), where)
    parsed = {}
    for level, cls in (("L2", L2Thresholds), ("L3", L3Thresholds), ("L4", L4Thresholds)):
        here = f"{where}.{level}"
        body = {} if raw.get(level) is None else raw[level]
        _expect(body, dict, here, "a mapping of threshold names to values")
        names = [f.name for f in fields(cls)]
        _check_keys(body, names, here)
        parsed[level] = cls(**{k: _threshold(v, k, f"{here}.{k}") for k, v in body.items()})
    return Thresholds(**parsed)


# ---- the whole file ------------------------------------------------------------------

_TOP_KEYS = ("upstream", "poll_commits", "zombie_timeout_seconds", "allowlist", "maintainer_approved", "thresholds",
             "log_classifier", "disabled_issues", "drci", "autorevert", "alerts", "main_window", "hud", "backfill")


def _infra_rules(raw: Any) -> tuple[str, ...]:
    """`log_classifier.infra_rules`: rule names, matched exactly against the log rules' names."""
    if raw is None:
        return DEFAULT_INFRA_RULES
    _expect(raw, dict, "log_classifier", "a mapping with infra_rules")
    _check_keys(raw, ("infra_rules",), "log_classifier")
    names = raw.get("infra_rules", list(DEFAULT_INFRA_RULES))
    _expect(names, list, "log_classifier.infra_rules", "a list of rule names")
    for i, name in enumerate(names):
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"log_classifier.infra_rules[{i}]: must be a rule name, got {name!r}")
    return tuple(names)


def _zombie_timeout(raw: Any) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= raw <= MAX_ZOMBIE_TIMEOUT_S:
        raise ConfigError(f"zombie_timeout_seconds: must be a whole number of seconds from 1 to "
                          f"{MAX_ZOMBIE_TIMEOUT_S} ({MAX_ZOMBIE_TIMEOUT_S // 86400} days), got {raw!r}")
    return raw


def _parse_disabled_issues(raw: Any, where: str) -> DisabledIssuesConfig:
    if raw is None:
        return DisabledIssuesConfig()
    _expect(raw, dict, where, "a mapping with enabled, labels, max_new_per_run and unknown_owner_label")
    _check_keys(raw, ("enabled", "labels", "max_new_per_run", "unknown_owner_label"), where)
    default = DisabledIssuesConfig()
    enabled = _expect(raw.get("enabled", default.enabled), bool, f"{where}.enabled", "true or false")
    labels = raw.get("labels", list(default.labels))
    _expect(labels, list, f"{where}.labels", "a list of label names")
    unknown = raw.get("unknown_owner_label", default.unknown_owner_label)
    for name, label in [*((f"labels[{i}]", x) for i, x in enumerate(labels)), ("unknown_owner_label", unknown)]:
        if not isinstance(label, str) or not label.strip() or len(label) > 50:
            raise ConfigError(f"{where}.{name}: must be a label name of 1 to 50 characters, got {label!r}")
    limit = raw.get("max_new_per_run", default.max_new_per_run)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ConfigError(f"{where}.max_new_per_run: must be a whole number of at least 0, got {limit!r}")
    return DisabledIssuesConfig(enabled, tuple(labels), limit, unknown)


def _parse_drci(raw: Any, where: str, source: str) -> DrciConfig:
    if raw is None:
        return DrciConfig()
    _expect(raw, dict, where, "a mapping with enabled, missing_after_minutes, stuck_after_minutes, author and flaky_rules")
    _check_keys(raw, ("enabled", "missing_after_minutes", "stuck_after_minutes", "author", "flaky_rules"), where)
    default = DrciConfig()
    enabled = _expect(raw.get("enabled", default.enabled), bool, f"{where}.enabled", "true or false")
    minutes = {}
    for key in ("missing_after_minutes", "stuck_after_minutes"):
        value = raw.get(key, getattr(default, key))
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{where}.{key}: must be a whole number of minutes of at least 1, got {value!r}")
        minutes[key] = value
    author = raw.get("author")
    if author is not None and (not isinstance(author, str) or not author.strip() or " " in author):
        raise ConfigError(f"{where}.author: must be a GitHub login such as my-app[bot], got {author!r}")
    rules = raw.get("flaky_rules")
    if rules is not None and (not isinstance(rules, str) or not rules.strip()):
        raise ConfigError(f"{where}.flaky_rules: must be the path of a flaky-rules.json, got {rules!r}")
    if rules and not os.path.isabs(rules) and os.path.exists(source):
        rules = os.path.join(os.path.dirname(os.path.abspath(source)), rules)
    return DrciConfig(enabled, **minutes, author=author, flaky_rules=rules)


def _workflow_names(raw: Any, where: str) -> tuple[str, ...]:
    _expect(raw, list, where, "a list of workflow names (empty: every workflow)")
    if not all(isinstance(w, str) and w.strip() for w in raw):
        raise ConfigError(f"{where}: every entry must be a workflow's name, as its `name:` says, got {raw!r}")
    return tuple(w.strip() for w in raw)


def _parse_hud(raw: Any, upstream_repo: str) -> HudConfig:
    """The section, each key left out taking the repository's default: PyTorch's for pytorch/pytorch,
    every workflow and one group for any other (HudConfig)."""
    default = PYTORCH_HUD if is_pytorch(upstream_repo) else HudConfig()
    if raw is None:
        return default
    _expect(raw, dict, "hud", "a mapping with blocking_workflows, signal_workflows and min_job_groups")
    _check_keys(raw, ("blocking_workflows", "signal_workflows", "min_job_groups"), "hud")
    names = {k: _workflow_names(raw[k], f"hud.{k}") if k in raw else getattr(default, k)
             for k in ("blocking_workflows", "signal_workflows")}
    groups = raw.get("min_job_groups", default.min_job_groups)
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise ConfigError(f"hud.min_job_groups: must be a whole number of at least 1, got {groups!r}")
    return HudConfig(**names, min_job_groups=groups)


# characters GitHub refuses in an artifact's name
_ARTIFACT_NAME_BAD = re.compile(r'[":<>|*?\r\n\\/]')


def _parse_backfill(raw: Any) -> BackfillConfig:
    if raw is None:
        return BackfillConfig()
    _expect(raw, dict, "backfill", "a mapping with report_artifacts")
    _check_keys(raw, ("report_artifacts",), "backfill")
    prefixes = raw.get("report_artifacts", list(BackfillConfig().report_artifacts))
    if not isinstance(prefixes, list) or not prefixes:
        raise ConfigError(f"backfill.report_artifacts: must be a list of artifact name prefixes (test-reports, "
                          f"junit-), got {prefixes!r}")
    for i, prefix in enumerate(prefixes):
        if not isinstance(prefix, str) or not prefix.strip() or _ARTIFACT_NAME_BAD.search(prefix):
            raise ConfigError(f"backfill.report_artifacts[{i}]: must be the start of an artifact's name, without "
                              f"\" : < > | * ? \\ / or a line break, got {prefix!r}")
    return BackfillConfig(tuple(prefixes))


def _branch(raw: Any, where: str) -> str:
    """A full ref as push events carry it; a bare branch name means refs/heads/<name>."""
    if not isinstance(raw, str) or not raw.strip() or " " in raw.strip():
        raise ConfigError(f"{where}: branch {raw!r} must be a branch name or refs/heads/<name>")
    ref = raw.strip()
    if ref.startswith("refs/") and not ref.startswith("refs/heads/"):
        raise ConfigError(f"{where}: {ref!r} is not a branch (pushes of tags are not commits)")
    return ref if ref.startswith("refs/heads/") else f"refs/heads/{ref}"


def parse_config(raw: Any, source: str = "<config>") -> TorchciConfig:
    """A validated `TorchciConfig` from the already-read YAML document `raw`."""
    try:
        return _parse_config(raw, source)
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None


def _parse_config(raw: Any, source: str) -> TorchciConfig:
    _expect(raw, dict, "top level", "a mapping")
    _check_keys(raw, _TOP_KEYS, "top level")

    upstream = raw.get("upstream") or {}
    _expect(upstream, dict, "upstream", "a mapping with repo and branches")
    _check_keys(upstream, ("repo", "branches"), "upstream")
    upstream_repo = _repo(upstream.get("repo", PYTORCH), "upstream.repo")
    branches_raw = upstream.get("branches", ["refs/heads/main"])
    _expect(branches_raw, list, "upstream.branches", "a list of branches")
    if not branches_raw:
        raise ConfigError("upstream.branches: must name at least one branch")
    branches = tuple(_branch(b, f"upstream.branches[{i}]") for i, b in enumerate(branches_raw))

    poll = _expect(raw.get("poll_commits", True), bool, "poll_commits", "true or false")

    allowlist = parse_allowlist(raw.get("allowlist"))
    if any(e.repo.lower() == upstream_repo.lower() for e in allowlist):
        raise ConfigError(f"allowlist: the upstream repo {upstream_repo!r} cannot be a downstream")

    approved_raw = raw.get("maintainer_approved") or []
    _expect(approved_raw, list, "maintainer_approved", "a list of owner/repo")
    approved = frozenset(_repo(r, f"maintainer_approved[{i}]") for i, r in enumerate(approved_raw))
    approved_lower = {r.lower() for r in approved}
    for e in allowlist:
        if e.level == "L4" and e.repo.lower() not in approved_lower:
            raise ConfigError(f"allowlist.L4: {e.repo!r} is not in maintainer_approved "
                              "(L4 requires the maintainers' approval)")

    return TorchciConfig(
        upstream_repo=upstream_repo,
        branches=branches,
        allowlist=allowlist,
        maintainer_approved=approved,
        thresholds=_parse_thresholds(raw.get("thresholds"), "thresholds"),
        poll_commits=poll,
        disabled_issues=_parse_disabled_issues(raw.get("disabled_issues"), "disabled_issues"),
        drci=_parse_drci(raw.get("drci"), "drci", source),
        source=source,
        infra_rules=_infra_rules(raw.get("log_classifier")),
        guardians=_guardians(raw, upstream_repo),
        zombie_timeout_seconds=_zombie_timeout(raw.get("zombie_timeout_seconds", ZOMBIE_TIMEOUT_S)),
        hud=_parse_hud(raw.get("hud"), upstream_repo),
        backfill=_parse_backfill(raw.get("backfill")),
    )


def _guardians(raw: dict, upstream_repo: str):
    return guardian_settings(raw, is_pytorch(upstream_repo))


def load_config(path: str | None = None) -> TorchciConfig:
    """The config at `path`, else at $TORCHCI_CONFIG, else the bundled default."""
    path = path or os.environ.get(CONFIG_ENV_VAR) or str(DEFAULT_CONFIG_PATH)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the relay config: {e.strerror}") from None
    return _parsed(path, text)


@functools.lru_cache(maxsize=4)
def _parsed(path: str, text: str) -> TorchciConfig:
    """Parsed once per text: a run's steps each load the config (~7 ms of YAML each), and the
    result is immutable. A changed file is parsed again; an invalid one raises every time."""
    return parse_config(_read_yaml(text, path), path)
