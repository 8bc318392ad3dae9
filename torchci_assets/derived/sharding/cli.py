"""`torchci shard-plan`: plan test shards from a PyTorch test-times.json.

The CLI exists so a CI job can compute its own shard before running tests, from the
same test-times.json run_test downloads; every node computes the same plan.
Errors in the inputs exit with status 2 and a one-line message on stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping

from torchci_assets.derived.sharding.planner import (
    DEFAULT_OVERHEAD_SECONDS,
    DEFAULT_TIME_NOISE,
    ShardPlan,
    plan_shards,
    plan_to_dict,
    select_times,
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
        test_times = _read_test_times(args.test_times)
        tests = _read_test_list(args.tests)
    except InputError as exc:
        print(f"torchci shard-plan: {exc}", file=sys.stderr)
        return 2

    times, source = select_times(test_times, args.build_env, args.test_config)
    if source != f"{args.build_env}/{args.test_config}":
        print(
            f"torchci shard-plan: no times for {args.build_env}/{args.test_config}; "
            f"using {source or 'none (every file gets the same estimate)'}",
            file=sys.stderr,
        )
    plan = plan_shards(times, tests, args.shards, args.process_overhead, time_noise=args.time_noise)
    if args.json:
        out = plan_to_dict(plan)
        out.update(build_env=args.build_env, test_config=args.test_config, times_from=source)
        print(json.dumps(out, indent=2))
    else:
        print(format_table(plan, args.build_env, args.test_config, source))
    return 0


def format_table(plan: ShardPlan, build_env: str, test_config: str, source: str) -> str:
    """A plan as people read it in a CI log: one block per shard, longest entries first."""
    lines = [
        f"Shard plan for {build_env} / {test_config}: {len(plan.shards)} shards, "
        f"{plan.overhead:g} s overhead per entry, times from {source or 'nowhere'}"
    ]
    if plan.unknown_files:
        lines.append(
            f"{len(plan.unknown_files)} file(s) without history, estimated at "
            f"{plan.unknown_estimate:.1f} s (median of known files): {', '.join(plan.unknown_files)}"
        )
    for shard in plan.shards:
        lines.append("")
        lines.append(
            f"shard {shard.index}: expected {shard.expected_seconds:.1f} s, {len(shard.tests)} entries"
        )
        for test in sorted(shard.tests, key=lambda t: (-t.seconds, t.file, t.part)):
            part = f" (part {test.part}/{test.parts})" if test.parts > 1 else ""
            lines.append(f"  {test.seconds:>9.1f} s  {test.file}{part}")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torchci shard-plan",
        description="Balance test files over N shards from PyTorch's test-times.json.",
    )
    parser.add_argument("--test-times", required=True, metavar="FILE",
                        help="test-times.json: {build_env: {test_config: {file: seconds}}}")
    parser.add_argument("--build-env", required=True, metavar="E")
    parser.add_argument("--test-config", required=True, metavar="C")
    parser.add_argument("--shards", required=True, type=int, metavar="N")
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
