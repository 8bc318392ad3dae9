"""`torchci shard-plan`: plan test shards from PyTorch test-times.json snapshots.

The CLI exists so a CI job can compute its own shard before running tests, from the
same test-times.json run_test downloads; every node computes the same plan. Given several
snapshots (say the last three days'), it plans from their per-entry median; files the
config has no time for are estimated from the same file in other configs (see
`derived.sharding.estimates`). Errors in the inputs exit with status 2 and a one-line
message on stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping

from torchci_assets.derived.sharding.estimates import ConfigTimes, Estimator, smooth_test_times
from torchci_assets.derived.sharding.planner import (
    DEFAULT_OVERHEAD_SECONDS,
    DEFAULT_TIME_NOISE,
    ShardPlan,
    plan_shards,
    plan_to_dict,
)


class InputError(Exception):
    """Bad command-line input: reported on stderr with exit status 2."""


def main(argv: list[str]) -> int:
    parser = _parser()
    args = parser.parse_args(argv)  # argparse itself exits 2 on unknown or missing options
    try:
        if args.shards < 1:
            raise InputError(f"--shards must be at least 1, got {args.shards}")
        if not (math.isfinite(args.process_overhead) and args.process_overhead >= 0):
            raise InputError(f"--process-overhead must be >= 0 seconds, got {args.process_overhead}")
        if not (math.isfinite(args.time_noise) and args.time_noise >= 0):
            raise InputError(f"--time-noise must be >= 0, got {args.time_noise}")
        snapshots = [_read_test_times(path) for path in args.test_times]
        tests = _read_test_list(args.tests)
        if not tests:  # planning nothing would print empty shards
            raise InputError(f"--tests {args.tests}: no test file listed")
    except InputError as exc:
        print(f"torchci shard-plan: {exc}", file=sys.stderr)
        return 2

    times = Estimator(smooth_test_times(snapshots)).config_times(args.build_env, args.test_config, tests)
    if not times.source:
        print(
            f"torchci shard-plan: no times for {args.build_env}/{args.test_config}; every file is "
            "estimated from the same file in other configs and the \"default\" averages"
            + _unknown_build_env(snapshots, args.build_env),
            file=sys.stderr,
        )
    plan = plan_shards(times.known, tests, args.shards, args.process_overhead, unknown_estimate=times.fallback,
                       time_noise=args.time_noise,
                       estimates={name: e.seconds for name, e in times.estimates.items()})
    if args.json:
        out = plan_to_dict(plan)
        out.update(build_env=args.build_env, test_config=args.test_config, times_from=times.source,
                   test_times_files=len(snapshots),
                   unknown_estimated_from={name: e.source for name, e in times.estimates.items()})
        print(json.dumps(out, indent=2))
    else:
        print(format_table(plan, args.build_env, args.test_config, times))
    return 0


def format_table(plan: ShardPlan, build_env: str, test_config: str, times: ConfigTimes) -> str:
    """A plan as people read it in a CI log: one block per shard, longest entries first."""
    lines = [
        f"Shard plan for {build_env} / {test_config}: {len(plan.shards)} shards, "
        f"{plan.overhead:g} s overhead per entry, times from {times.source or 'other configs'}"
    ]
    if times.estimates:
        lines.append(f"{len(times.estimates)} file(s) without history in this config, estimated:")
        lines += [f"  {e.seconds:>9.1f} s  {name}  ({e.source})" for name, e in sorted(times.estimates.items())]
    for shard in plan.shards:
        lines.append("")
        lines.append(
            f"shard {shard.index}: expected {shard.expected_seconds:.1f} s, {len(shard.tests)} entries"
        )
        for test in sorted(shard.tests, key=lambda t: (-t.seconds, t.file, t.part)):
            part = f" (part {test.part}/{test.parts})" if test.parts > 1 else ""
            lines.append(f"  {test.seconds:>9.1f} s  {test.file}{part}")
    return "\n".join(lines)


def _unknown_build_env(snapshots: list, build_env: str) -> str:
    """A build_env no snapshot has is planned from estimates (a new one has no times yet), but is
    more often a typo: the warning then names the build environments the files have."""
    envs = sorted({env for doc in snapshots for env in doc} - {"default"})
    if not envs or build_env in envs:
        return ""
    return (f". No file has build_env {build_env!r}; they have: " + ", ".join(envs[:20])
            + (f" and {len(envs) - 20} more" if len(envs) > 20 else ""))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torchci shard-plan",
        description="Balance test files over N shards from PyTorch's test-times.json.",
    )
    parser.add_argument("--test-times", required=True, metavar="FILE", nargs="+", action="extend",
                        help="test-times.json: {build_env: {test_config: {file: seconds}}}; give several "
                             "(say the last three days') to plan from each entry's median over them")
    parser.add_argument("--build-env", required=True, metavar="E",
                        help="the build environment, as in test-times.json (e.g. linux-jammy-py3.10-gcc11)")
    parser.add_argument("--test-config", required=True, metavar="C",
                        help="the test configuration (e.g. default, distributed); one without times is estimated")
    parser.add_argument("--shards", required=True, type=int, metavar="N", help="number of shards to balance over")
    parser.add_argument("--tests", required=True, metavar="LISTFILE",
                        help="test files to run, one per line (blank lines and # comments ignored)")
    parser.add_argument("--process-overhead", type=float, default=DEFAULT_OVERHEAD_SECONDS,
                        metavar="SECONDS", help="start-up cost of every entry (default %(default)s)")
    parser.add_argument("--time-noise", type=float, default=DEFAULT_TIME_NOISE, metavar="FRACTION",
                        help="assumed day-to-day relative variation of a file's time "
                             "(default %(default)s; 0 plans for the given times exactly)")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    return parser


def _read_test_times(path: str) -> Mapping[str, Mapping[str, Mapping[str, float]]]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as exc:
        raise InputError(f"cannot read --test-times {path}: {exc.strerror or exc}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"--test-times {path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise InputError(f"--test-times {path}: expected an object of build envs")
    for env, configs in data.items():
        if not isinstance(configs, dict):
            raise InputError(f"--test-times {path}: {env!r} should map test configs to files")
        for config, files in configs.items():
            if not isinstance(files, dict):
                raise InputError(f"--test-times {path}: {env}/{config} should map files to seconds")
            for name, seconds in files.items():
                if (
                    isinstance(seconds, bool)
                    or not isinstance(seconds, (int, float))
                    or not math.isfinite(seconds)
                    or seconds < 0
                ):
                    raise InputError(
                        f"--test-times {path}: {env}/{config}/{name} has invalid seconds {seconds!r}"
                    )
    return data


def _read_test_list(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise InputError(f"cannot read --tests {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise InputError(f"--tests {path} is not UTF-8 text: {exc}") from exc
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
