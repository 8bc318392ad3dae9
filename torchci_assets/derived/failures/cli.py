"""`torchci classify-log [--rules FILE] LOGFILE [--json]`: the failure line of one job log.

LOGFILE is a raw GitHub Actions log as downloaded (timestamps and ANSI codes are handled), plain
or gzipped (by its .gz name), a local path or an s3:// URI; `-` reads standard input. The rules
are FILE, else $TORCHCI_LOG_RULES, else the bundled default; PyTorch's own ruleset.toml works
unchanged. Exit status 0 when a rule matched, 3 when none did (scripts can tell an explained
failure from an unexplained one), 1 if the log or the rules cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from torchci_assets.derived.failures.classifier import Classification, Classifier
from torchci_assets.derived.failures.rules import RULES_ENV_VAR, RulesetError, load_ruleset

if TYPE_CHECKING:
    from resources.storage import Store

STDIN_BLOCK = 8 << 20
NO_MATCH = 3


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="torchci classify-log",
                                description="Print the line that explains a failed job's log, with the rule and "
                                            "captures, as PyTorch's log classifier finds it.")
    p.add_argument("logfile", metavar="LOGFILE", help="the log: a path, an s3:// URI, or - for standard input")
    p.add_argument("--rules", metavar="FILE",
                   help=f"rules in PyTorch's ruleset.toml format (default: ${RULES_ENV_VAR}, else the bundled rules)")
    p.add_argument("--json", action="store_true",
                   help='print {"rule", "line_number", "line", "captures"} as JSON')
    p.epilog = "exit status: 0 a rule matched, 3 no rule matched, 1 the log or the rules cannot be read"
    return p


def _from_stdin(ruleset) -> Classification:
    c = Classifier(ruleset)
    tail = b""
    while chunk := sys.stdin.buffer.read(STDIN_BLOCK):
        data = tail + chunk
        cut = data.rfind(b"\n") + 1
        c.feed(data[:cut])
        tail = data[cut:]
    c.feed(tail)
    return c.result()


def _print(result: Classification, as_json: bool) -> None:
    if as_json:
        print(json.dumps(result.as_json(), ensure_ascii=False))
    elif result.rule is None:
        print(f"no rule matched ({result.lines:,} lines)")
    else:
        print(f"rule:     {result.rule}\nline:     {result.line_number}: {result.line}")
        print("captures: " + " | ".join(result.captures))


def _log_store(logfile: str) -> tuple[Store, str]:
    """The store holding the log and its name there (`/x.log` is in `/`, not in `.`)."""
    from resources.storage import Store  # here, not at the top: `--help` and usage errors need no pyarrow

    root, slash, name = logfile.rstrip("/").rpartition("/")
    return Store(root or slash or "."), name


def _unreadable(store: Store, name: str) -> str | None:
    """Why the log cannot be read (missing, a folder, a bucket out of reach), or None."""
    try:
        if store.is_local and Path(store.root, name).is_dir():
            return "a folder, not a log file"
        return None if store.exists(name) else "no such file"
    except OSError as exc:
        return f"cannot read: {exc}"


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    try:
        ruleset = load_ruleset(args.rules)
    except RulesetError as e:
        print(f"torchci classify-log: {e}", file=sys.stderr)
        return 1
    if args.logfile == "-":
        result = _from_stdin(ruleset)
    else:
        store, name = _log_store(args.logfile)
        if problem := _unreadable(store, name):
            print(f"torchci classify-log: {args.logfile}: {problem}", file=sys.stderr)
            return 1
        from torchci_assets.derived.failures.job_failure import classify_log

        r = classify_log(store, name, ruleset)
        if r.error:
            print(f"torchci classify-log: {args.logfile}: read stopped after line {r.lines:,}: {r.error}",
                  file=sys.stderr)
            if not r.lines:
                return 1
        result = Classification(rule=r.rule, line_number=r.line_number, line=r.line, captures=r.captures,
                                context=r.context, lines=r.lines)
    _print(result, args.json)
    return 0 if result.rule is not None else NO_MATCH
