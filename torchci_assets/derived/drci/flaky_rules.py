"""PyTorch's flaky-rules.json read for Dr. CI: failures its maintainers know to be flakes.

Upstream publishes the file on test-infra's `generated-stats` branch (`stats/flaky-rules.json`): a
list of `{"name": <regex on the job's name>, "captures": [<regex on its failure>, ...]}`. The same
file is read here unchanged, so a deployment can reuse upstream's list or keep its own.

The rules only ever turn a failure into FLAKY ("not yours"), so a file that cannot be read must not
stop the comments: it is reported, naming the file, and the comments go on without rules. A bad
entry (a pattern Python cannot compile, a missing field) is dropped alone, as upstream's single bad
regex would otherwise cost every rule.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from torchci_assets.derived.drci.classify import FlakyRule


def parse_rules(data: bytes, source: str = "flaky-rules.json",
                log: Callable[[str], None] = lambda s: None) -> tuple[FlakyRule, ...]:
    """The rules of a flaky-rules.json document; ValueError when it is not a list of rules."""
    doc = json.loads(data)
    if not isinstance(doc, list):
        raise ValueError("not a list of {name, captures} rules")
    rules, bad = [], []
    for i, entry in enumerate(doc):
        try:
            rules.append(_rule(entry, source))
        except (ValueError, TypeError, re.error) as exc:
            bad.append(f"#{i} ({exc})")
    if bad:
        log(f"Dr. CI flaky rules {source}: {len(bad)} malformed rule(s) ignored: {', '.join(bad)}")
    return tuple(rules)


def _rule(entry, source: str) -> FlakyRule:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
        raise ValueError("no name")
    captures = entry.get("captures")
    if not isinstance(captures, list) or not captures or not all(isinstance(c, str) for c in captures):
        raise ValueError("captures is not a list of patterns")
    return FlakyRule(entry["name"], tuple(captures), re.compile(entry["name"]),
                     tuple(re.compile(c) for c in captures), source)


def load_rules(path: str | None, log: Callable[[str], None] = lambda s: None) -> tuple[FlakyRule, ...]:
    """The rules of the file at `path`; none without a path. A file missing or malformed is
    reported through `log`, naming it, and gives no rules."""
    if not path:
        return ()
    name = Path(path).name
    try:
        return parse_rules(Path(path).read_bytes(), name, log)
    except OSError as exc:
        log(f"ERROR: Dr. CI flaky rules {path} cannot be read ({exc.strerror or exc}): no flaky rule applied")
    except (ValueError, UnicodeDecodeError) as exc:
        log(f"ERROR: Dr. CI flaky rules {path} is not a flaky-rules.json list of rules ({exc}): "
            "no flaky rule applied")
    return ()
