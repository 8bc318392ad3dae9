"""PyTorch's CI job names, split into the fields test statistics are keyed by.

PyTorch names test jobs `<build_env> / test (<test_config>, <shard>, <num_shards>, <runner>[, <extra>...])`
and build jobs `<build_env> / build`; jobs on its OSDC runners are named `test-osdc (...)` and
`build-osdc`, with the same fields (test-infra's test-times queries read both since its commit
67f681a09: otherwise their times would be lost). The build environment may itself contain " / "
(`unit-test / inductor-test`), and HUD-style names carry the workflow in front
(`pull / linux-jammy-py3.10-gcc11 / test (...)`), so the test part is matched from the right.
These fields are what PyTorch's own test-times.json is keyed by (build_env, test_config).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

_TEST_RE = re.compile(
    r"^(?P<env>.+?) / test(?:-osdc)? \("
    r"\s*(?P<config>[^,()]+?)\s*,\s*(?P<shard>\d{1,9})\s*,\s*(?P<num>\d{1,9})"  # int32 columns
    r"(?:\s*,\s*(?P<runner>[^,()]+?))?(?:\s*,\s*[^()]*)?\s*\)$"
)
_BUILD_RE = re.compile(r"^(?P<env>.+?) / (?:build|build-osdc|build-and-test)(?: \(.*\))?$")
# Workflow names PyTorch puts in front of job names on HUD; not part of the build_env.
_WORKFLOW_PREFIXES = (
    "pull / ", "trunk / ", "periodic / ", "slow / ", "inductor / ", "inductor-periodic / ",
    "rocm / ", "rocm-mi300 / ", "rocm-mi355 / ", "xpu / ", "mac-mps / ", "linux-aarch64 / ",
    "inductor-unittest / ", "nightly / ", "unstable / ",
)


@dataclass(frozen=True)
class JobName:
    build_env: str | None
    test_config: str | None
    shard: int | None
    num_shards: int | None
    runner: str | None
    platform: str


def platform_of(text: str) -> str:
    """The platform family a job runs on, as PyTorch's disable lists name them.

    Accelerator families win over the OS (a ROCm job runs on Linux but is disabled as "rocm").
    """
    t = text.lower()
    if "rocm" in t:
        return "rocm"
    if "xpu" in t:
        return "xpu"
    if t.startswith("win") or "windows" in t or "-win-" in t:
        return "win"
    if t.startswith("macos") or "macos" in t or t.startswith("mac-") or "-mps" in t:
        return "mac"
    if "s390x" in t:
        return "s390x"
    if "aarch64" in t or "arm64" in t:
        return "linux-aarch64"
    return "linux"


@lru_cache(maxsize=65536)
def parse_job_name(name: str | None) -> JobName:
    """Split a job name into build_env, test_config, shard, num_shards, runner and platform.

    Names that are neither test nor build jobs (lint, label checks) keep build_env None and
    get a platform from the whole name. Cached: a day has few distinct names.
    """
    if not name:
        return JobName(None, None, None, None, None, "unknown")
    stripped = name.strip()
    for prefix in _WORKFLOW_PREFIXES:
        if stripped.startswith(prefix) and " / " in stripped[len(prefix):]:
            stripped = stripped[len(prefix):]
            break
    m = _TEST_RE.match(stripped)
    if m:
        env, runner = m.group("env"), m.group("runner")
        return JobName(
            build_env=env,
            test_config=m.group("config"),
            shard=int(m.group("shard")),
            num_shards=int(m.group("num")),
            runner=runner,
            platform=platform_of(f"{env} {runner or ''}"),
        )
    m = _BUILD_RE.match(stripped)
    if m:
        env = m.group("env")
        return JobName(env, None, None, None, None, platform_of(env))
    return JobName(None, None, None, None, None, platform_of(stripped))
