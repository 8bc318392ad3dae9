"""Hostile archive inputs, generated deterministically from a seed, each with what it must become.

For any reader of the archive (the Python ingest today, a C JSON reader tomorrow): each
generator builds the files of one archive day of one source and, for every record in them, the
outcome the documented contract demands. The verdicts come from the small rule table below
(`verdict`), written from the contract, not from the implementation: a reader agrees with them
or has a bug (or the contract changed, and this table with it).

    day = webhook_day(seed=7, records=4000, max_line_bytes=1 << 16)
    day.write(archive_root)                  # day.files: {archive path: bytes}
    ...ingest...
    day.expected_rejects                     # Counter of reject locations ("path:line")
    day.expected_rows                        # {table: rows}

Every record is one of: a row (of its table), a reject (with its location), or, for webhooks, a
redelivery dropped as a duplicate. A webhook delivery is a `webhook_events` row AND, for the
typed events, a typed row or a typed reject; a typed row whose timestamp text is not a
timestamp is kept (null timestamp) and rejected too. `hostile` counts the records that carry
at least one hostile mutation.

Hostile values: integers at and beyond the int64 bounds (2**63 is valid JSON), negatives,
floats where integers belong, numeric strings, nulls in required fields, booleans (a JSON true
is a Python int), empty and huge strings, NUL and astral characters, lists and objects in
place of scalars; and per line: cut JSON, invalid UTF-8, nesting beyond any parser's depth,
lines over the line cap, CRLF endings, blank lines, redeliveries, and a gzip member cut short.
"""

from __future__ import annotations

import gzip
import json
import math
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

DAY = "2026-11-01"
INT64_MAX = 2**63 - 1

# ---- the contract, as a rule table ----------------------------------------------------------

VALID_TIMESTAMPS = ["2026-11-01T12:00:00Z", "2026-11-01T12:00:00.123+00:00", "2026-11-01T07:00:00-05:00"]
INVALID_TIMESTAMPS = ["", "yesterday", "2026-13-45T00:00:00Z", "NaN", "0", "123", "\u0000"]
# Valid ISO 8601 text whose UTC instant a datetime cannot hold (Python's range is years 1..9999).
OUT_OF_RANGE_TIMESTAMPS = ["0001-01-01T00:00:00+05:00", "9999-12-31T23:59:59-05:00"]
VALID_REPOS = ["pytorch/pytorch", "acme-ai/torch-npu", "a/b", "A-1/x.y_z"]
INVALID_REPOS = ["", "no-slash", "a/b/c", "-a/b", "a/..", "a/b.git", "a" * 40 + "/b", "a/" + "b" * 101]

SCALARS = [
    None, True, False, 0, 1, -1, 7, 2**31, 2**53 + 1, INT64_MAX, 2**63, 2**64, -(2**63), -(2**63) - 1,
    1.5, 1.0, -0.0, 1e308, "", "123", "-1", "1.5", "9223372036854775808", "abc", "NaN", "\u0000",
    "é\U0001F600", "x" * 3000, [], [1], ["a"], [{"name": 5}], [{"name": "ciflow/trunk"}], {}, {"name": "x"},
    {"a": {"b": {}}}, *VALID_TIMESTAMPS, *INVALID_TIMESTAMPS,
]
# Values for ci-results' run_id, run_attempt and test counts: none of them is a valid number under
# any reading (the relay's callbacks send some numbers as numeric strings; that is another issue's
# contract, and its own tests).
NOT_NUMBERS = [None, True, 2**63, 2**64, -(2**63) - 1, 1.5, "1.5", "abc", "", "9223372036854775808", [], {}, -1]


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def verdict(kind: str, value, required: bool = False) -> bool:
    """Whether `value` (as parsed from JSON) is acceptable for a field of `kind`."""
    if value is None:
        return not required
    if kind == "id":  # GitHub ids and numbers: non-negative int64
        return _is_int(value) and 0 <= value <= INT64_MAX
    if kind == "attempt":
        return _is_int(value) and 1 <= value <= INT64_MAX
    if kind == "count":
        return _is_int(value) and 0 <= value <= INT64_MAX
    if kind == "number":  # a float column: any JSON number a double holds
        return (_is_int(value) or isinstance(value, float)) and math.isfinite(float(value))
    if kind == "str":
        return isinstance(value, str)
    if kind == "nonempty_str":
        return isinstance(value, str) and value != ""
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "object":
        return isinstance(value, dict)
    if kind == "labels":  # label names: strings or {"name": string}
        return isinstance(value, list) and all(
            v is None or isinstance(v, str) or (isinstance(v, dict) and (v.get("name") is None or isinstance(v.get("name"), str)))
            for v in value)
    if kind == "received_at":
        return isinstance(value, str) and value in VALID_TIMESTAMPS
    if kind == "iso_ts":  # parsed in Python: any ISO 8601 text; the instant may be at the range's edge
        return isinstance(value, str) and (value in VALID_TIMESTAMPS or value in OUT_OF_RANGE_TIMESTAMPS)
    if kind == "repo":
        return isinstance(value, str) and value in VALID_REPOS
    if kind == "status":
        return value in ("requested", "pending", "queued", "waiting", "in_progress", "completed")
    if kind == "any":
        return True
    raise ValueError(kind)


@dataclass
class Field:
    path: tuple[str, ...]
    kind: str
    required: bool = False
    pool: list | None = None  # values to draw from (default: SCALARS)


# ---- the generated day ------------------------------------------------------------------------

@dataclass
class HostileDay:
    source: str
    table: str = ""  # the table its records become rows of (webhooks: several, by event)
    files: dict[str, bytes] = field(default_factory=dict)
    expected_rejects: Counter = field(default_factory=Counter)  # location -> rejects there
    expected_rows: Counter = field(default_factory=Counter)  # table -> rows
    keys: dict[str, set] = field(default_factory=dict)  # table -> keys, for tables reduced by key
    records: int = 0
    hostile: int = 0
    duplicates: int = 0

    def write(self, root: str | Path) -> None:
        for rel, data in self.files.items():
            path = Path(root) / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)

    def key_row(self, table: str, key) -> None:
        self.keys.setdefault(table, set()).add(key)
        self.expected_rows[table] = len(self.keys[table])


def _dumps(value) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")


def _set(obj: dict, path: tuple[str, ...], value) -> None:
    for key in path[:-1]:
        obj = obj[key]
    obj[path[-1]] = value


def _get(obj, path: tuple[str, ...]):
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _mutate(rng: random.Random, record: dict, fields: list[Field]) -> tuple[Field, object]:
    f = rng.choice(fields)
    value = rng.choice(f.pool or SCALARS)
    _set(record, f.path, json.loads(json.dumps(value)))  # a fresh copy
    return f, value


def _gzip_members(lines: list[bytes], rng: random.Random) -> bytes:
    """The lines gzipped, in one to three members (appending to a .gz file makes several)."""
    cuts = sorted(rng.sample(range(1, len(lines)), min(2, len(lines) - 1))) if len(lines) > 2 else []
    out, start = b"", 0
    for end in [*cuts, len(lines)]:
        out += gzip.compress(b"".join(lines[start:end]), compresslevel=1, mtime=0)
        start = end
    return out


def _cut_member(line: bytes) -> bytes:
    """A gzip member of one line, cut in its middle: the reader gets none of the line's newline."""
    member = gzip.compress(line + b"\n", compresslevel=1, mtime=0)
    return member[: len(member) // 2]


# ---- webhooks ---------------------------------------------------------------------------------

_STR = "str"
_WEBHOOK_FIELDS = {
    "workflow_job": [
        Field(("workflow_job",), "never"), Field(("workflow_job", "id"), "id", required=True),
        Field(("workflow_job", "run_id"), "id"), Field(("workflow_job", "run_attempt"), "attempt"),
        *[Field(("workflow_job", k), _STR) for k in ("name", "head_sha", "head_branch", "status", "conclusion",
                                                     "workflow_name", "runner_name")],
        *[Field(("workflow_job", k), "sql_ts") for k in ("created_at", "started_at", "completed_at")],
        Field(("workflow_job", "labels"), "labels"), Field(("repository",), "object"),
        Field(("repository", "full_name"), _STR),
    ],
    "workflow_run": [
        Field(("workflow_run",), "never"), Field(("workflow_run", "id"), "id", required=True),
        Field(("workflow_run", "run_attempt"), "attempt"),
        *[Field(("workflow_run", k), _STR) for k in ("name", "event", "head_sha", "head_branch", "status",
                                                     "conclusion")],
        *[Field(("workflow_run", k), "sql_ts") for k in ("created_at", "updated_at")],
        Field(("repository", "full_name"), _STR),
    ],
    "push": [
        Field(("ref",), _STR, required=True), Field(("before",), _STR), Field(("after",), _STR),
        *[Field((k,), "bool") for k in ("forced", "created", "deleted")],
        Field(("head_commit",), "object"), Field(("head_commit", "id"), _STR),
        Field(("head_commit", "timestamp"), "sql_ts"), Field(("commits",), "any"),
        Field(("repository",), "object"),
    ],
    "pull_request": [
        Field(("pull_request",), "object", required=True), Field(("number",), "id"), Field(("action",), _STR),
        Field(("pull_request", "state"), _STR), Field(("pull_request", "head"), "object"),
        Field(("pull_request", "head", "sha"), _STR), Field(("pull_request", "base", "ref"), _STR),
        Field(("pull_request", "labels"), "labels"), Field(("pull_request", "merged"), "bool"),
        Field(("pull_request", "updated_at"), "sql_ts"), Field(("repository", "full_name"), _STR),
    ],
}
_ENVELOPE_FIELDS = [
    Field(("event",), "nonempty_str", required=True),
    Field(("delivery_id",), "nonempty_str", required=True),
    Field(("received_at",), "received_at", required=True,
          pool=[*VALID_TIMESTAMPS, *INVALID_TIMESTAMPS, *OUT_OF_RANGE_TIMESTAMPS, None, 0, 1.5, [], {}]),
    Field(("payload",), "object", required=True),
]


def _webhook_payload(event: str, i: int) -> dict:
    repo = {"full_name": "pytorch/pytorch", "id": 65600975}
    sha = f"{i:040x}"
    if event == "workflow_job":
        return {"action": "completed", "repository": repo, "workflow_job": {
            "id": 40_000_000_000 + i, "run_id": 12_000_000_000 + i // 4, "run_attempt": 1 + i % 2,
            "name": f"linux-jammy-py3.10-gcc11 / test (default, {1 + i % 5}, 5, linux.4xlarge)",
            "head_sha": sha, "head_branch": "main", "status": "completed", "conclusion": "success",
            "workflow_name": "pull", "created_at": "2026-11-01T10:00:00Z", "started_at": "2026-11-01T10:01:00Z",
            "completed_at": "2026-11-01T10:31:00Z", "labels": ["linux.4xlarge"], "runner_name": f"i-{i:x}"}}
    if event == "workflow_run":
        return {"action": "completed", "repository": repo, "workflow_run": {
            "id": 13_000_000_000 + i, "run_attempt": 1, "name": "pull", "event": "pull_request",
            "head_sha": sha, "head_branch": "main", "status": "completed", "conclusion": "failure",
            "created_at": "2026-11-01T10:00:00Z", "updated_at": "2026-11-01T11:00:00Z"}}
    if event == "push":
        return {"ref": "refs/heads/main", "before": "0" * 40, "after": sha, "forced": False, "created": False,
                "deleted": False, "head_commit": {"id": sha, "timestamp": "2026-11-01T09:59:00Z"},
                "commits": [{"id": sha}], "repository": repo}
    if event == "pull_request":
        return {"action": "synchronize", "number": 150_000 + i, "repository": repo, "pull_request": {
            "number": 150_000 + i, "state": "open", "head": {"sha": sha, "ref": f"gh/x/{i}"},
            "base": {"ref": "main"}, "labels": [{"name": "ciflow/trunk"}], "merged": False,
            "updated_at": "2026-11-01T10:00:00Z"}}
    return {"action": "created", "repository": repo, "issue": {"number": i}}


def _typed_key(event: str, payload: dict):
    if event == "workflow_job":  # a job id is one attempt's: its rows are one per id
        return payload["workflow_job"]["id"]
    if event == "workflow_run":
        run = payload["workflow_run"]
        return (run["id"], run.get("run_attempt") or 1)
    return None  # push and pull_request: one row per delivery


def webhook_day(seed: int, records: int, max_line_bytes: int, day: str = DAY) -> HostileDay:
    """Webhook archive lines: ~70% with one hostile field or line-level damage.

    `max_line_bytes` is the line cap the reader runs with (TORCHCI_MAX_LINE_BYTES): some lines
    exceed it.
    """
    rng = random.Random(seed)
    out = HostileDay("webhooks")
    events = ["workflow_job", "workflow_run", "push", "pull_request", "issues"]
    seen: dict[str, None] = {}  # delivery ids in bronze so far (the first delivery of an id wins)
    files = [f"webhooks/day={day}/relay-{k}.jsonl" + (".gz" if k % 2 else "") for k in range(4)]
    per_file: dict[str, list[bytes]] = {f: [] for f in files}
    for i in range(records):
        path = files[i * len(files) // records]
        lines = per_file[path]
        event = events[i % len(events)]
        env = {"event": event, "delivery_id": f"d-{seed}-{i}", "received_at": "2026-11-01T12:00:00Z",
               "payload": _webhook_payload(event, i)}
        roll = rng.random()
        bronze, typed_ok, bad_timestamp = True, True, False
        if roll < 0.30:  # a clean record
            line = _dumps(env)
        elif roll < 0.60 and event in _WEBHOOK_FIELDS:  # one hostile payload field
            f, _ = _mutate(rng, env["payload"], _WEBHOOK_FIELDS[event])
            value = _get(env["payload"], f.path)
            if f.kind == "sql_ts":  # text that is no timestamp: the row is kept (null) and rejected
                typed_ok = value is None or isinstance(value, str)
                bad_timestamp = isinstance(value, str) and value not in VALID_TIMESTAMPS
            else:
                typed_ok = f.kind != "never" and verdict(f.kind, value, f.required)
            line = _dumps(env)
        elif roll < 0.75:  # one hostile envelope field
            f, _ = _mutate(rng, env, _ENVELOPE_FIELDS)
            bronze = verdict(f.kind, env.get(f.path[0]), f.required)
            if f.path == ("event",):
                event = env["event"]  # a valid one is a string no typed table knows: bronze only
            if f.path == ("payload",):
                typed_ok = False  # an object from the pools, without this event's fields
            line = _dumps(env)
        else:  # line-level damage
            line, bronze = _damaged_webhook_line(rng, env, list(seen), max_line_bytes)
        out.records += 1
        out.hostile += roll >= 0.30
        lines.append(line)
        location = f"{path}:{len(lines)}"
        if rng.random() < 0.03:
            lines.append(rng.choice([b"", b"   ", b"\t"]))  # blank lines are not records
        if not bronze:
            out.expected_rejects[location] += 1
            continue
        if env["delivery_id"] in seen:
            out.duplicates += 1
            continue
        seen[env["delivery_id"]] = None
        out.expected_rows["webhook_events"] += 1
        if event not in _WEBHOOK_FIELDS:
            continue
        if not typed_ok:
            out.expected_rejects[location] += 1
            continue
        if bad_timestamp:
            out.expected_rejects[location] += 1
        key = _typed_key(event, env["payload"])
        if key is None:
            out.expected_rows[event] += 1
        else:
            out.key_row(event, key)
    for path, lines in per_file.items():
        data = [line + b"\n" for line in lines]
        if path.endswith(".gz"):
            cut_line = _dumps({"event": "push", "delivery_id": f"cut-{path}", "received_at": VALID_TIMESTAMPS[0],
                               "payload": _webhook_payload("push", 0)})
            out.files[path] = _gzip_members(data, rng) + _cut_member(cut_line)
            out.expected_rejects[f"{path}:{len(lines) + 1}"] += 1  # the cut: one reject, the head kept
            out.records += 1
            out.hostile += 1
        else:
            out.files[path] = b"".join(data)
    return out


def _damaged_webhook_line(rng: random.Random, env: dict, seen: list[str], max_line_bytes: int) -> tuple[bytes, bool]:
    """(line, whether it is a readable envelope); `env` is changed to what the line holds."""
    kind = rng.randrange(9)
    text = _dumps(env)
    if kind == 0:
        return text[: rng.randrange(1, len(text) - 1)], False  # cut JSON
    if kind == 1:
        return rng.choice([b"[1,2,3]", b'"just a string"', b"123", b"null", b"true"]), False
    if kind == 2:
        return text.replace(b'"pytorch/pytorch"', b'"pytorch/\xff\xfe"', 1), False  # invalid UTF-8
    if kind == 3:
        return b"\x00" + text, False  # a NUL outside any string
    if kind == 4:
        env["payload"]["deep"] = "DEEP"
        return _dumps(env).replace(b'"DEEP"', b"[" * 2000 + b"]" * 2000), False  # beyond orjson's depth
    if kind == 5:
        env["payload"]["padding"] = "p" * (max_line_bytes + 1)
        return _dumps(env), False  # over the line cap
    if kind == 6:
        return text + b"\r", True  # CRLF
    if kind == 7 and seen:
        env["delivery_id"] = rng.choice(seen)  # a redelivery
        return _dumps(env), True
    env["payload"]["unknown"] = {"nested": [1, {"x": None}], "big": 2**63, "bigger": 2**64}  # unknown fields are fine
    env["extra_envelope_key"] = 1
    return _dumps(env), True


# ---- ci-results -------------------------------------------------------------------------------

_CI_FIELDS = [
    Field(("trusted",), "never_unless_object"),
    Field(("trusted", "verified_repo"), "repo", required=True, pool=[*VALID_REPOS, *INVALID_REPOS, None, 1, [], {}]),
    Field(("trusted", "downstream_repo_level"), _STR),
    Field(("trusted", "ci_metrics"), "object_metrics"),
    Field(("trusted", "ci_metrics", "queue_time"), "number"),
    Field(("trusted", "ci_metrics", "execution_time"), "number"),
    Field(("untrusted",), "never_unless_object"),
    Field(("untrusted", "callback_payload", "delivery_id"), _STR, required=True),
    Field(("untrusted", "callback_payload", "payload"), "any"),
    Field(("untrusted", "callback_payload", "workflow", "status"), "status", required=True,
          pool=["queued", "in_progress", "completed", "waiting", "requested", "done", "", None, 3, []]),
    Field(("untrusted", "callback_payload", "workflow", "conclusion"), _STR),
    Field(("untrusted", "callback_payload", "workflow", "name"), _STR),
    Field(("untrusted", "callback_payload", "workflow", "run_id"), "id", required=True, pool=NOT_NUMBERS + [0, 1, INT64_MAX]),
    Field(("untrusted", "callback_payload", "workflow", "run_attempt"), "attempt", pool=NOT_NUMBERS + [0, 1, 2, INT64_MAX]),
    Field(("untrusted", "callback_payload", "workflow", "job_name"), _STR, required=True),
    Field(("untrusted", "callback_payload", "workflow", "completed_at"), "iso_ts",
          pool=[*VALID_TIMESTAMPS, *INVALID_TIMESTAMPS, *OUT_OF_RANGE_TIMESTAMPS, 0, 1.5, [], None]),
    Field(("untrusted", "callback_payload", "workflow", "test_results"), "object"),
    *[Field(("untrusted", "callback_payload", "workflow", "test_results", k), "count", pool=NOT_NUMBERS + [0, 5, INT64_MAX])
      for k in ("passed", "failed", "skipped")],
    Field(("received_at",), "iso_ts", pool=[*VALID_TIMESTAMPS, *INVALID_TIMESTAMPS, *OUT_OF_RANGE_TIMESTAMPS, 0, None]),
]


def _ci_record(i: int) -> dict:
    return {
        "trusted": {"verified_repo": VALID_REPOS[i % 2], "downstream_repo_level": "L2",
                    "ci_metrics": {"queue_time": 12.5, "execution_time": 1800}},
        "untrusted": {"callback_payload": {
            "event_type": "pytorch-upstream-ci", "delivery_id": f"sha-{i}", "payload": {"head_sha": f"{i:040x}"},
            "workflow": {"status": "completed", "conclusion": "success", "name": "npu-ci", "run_id": 9_000_000 + i,
                         "run_attempt": 1, "job_name": f"test (default, {i % 3 + 1}, 3)",
                         "started_at": "2026-11-01T10:00:00Z", "completed_at": "2026-11-01T10:30:00Z",
                         "test_results": {"passed": 10, "failed": 0, "skipped": 1}}}},
    }


def _ci_verdict(f: Field, value) -> bool:
    if f.kind == "never_unless_object":
        return False  # a replacement object from the pools lacks the required fields below it
    if f.kind == "object_metrics":
        return value is None or (isinstance(value, dict) and all(
            verdict("number", value.get(k)) for k in ("queue_time", "execution_time")))
    return verdict(f.kind, value, f.required)


def _damaged_line(rng: random.Random, text: bytes, max_line_bytes: int) -> tuple[bytes, bool]:
    """(a damaged copy of the JSON object `text`, whether it is still a readable record)."""
    return [(text[: rng.randrange(1, len(text) - 1)], False),  # cut JSON
            (b'{"x": ' + b"[" * 5000 + b"]" * 5000 + b"}", False),  # beyond any parser's depth
            (text[:-1] + b',"pad":"' + b"p" * max_line_bytes + b'"}', False),  # over the line cap
            (b"\xc3\x28" + text, False),  # invalid UTF-8
            (b"[1]", False),  # not an object
            (text + b"\r", True)][rng.randrange(6)]  # CRLF


def _line_day(out: HostileDay, rng: random.Random, folder: str, n_files: int, records: int, one) -> None:
    """Lines spread over `n_files` files (every other one gzipped, in several members); `one(i)` gives
    record i as (line, readable, hostile, key): a readable record is a row of key `key` (None: a
    row of its own), an unreadable one a reject at its line."""
    files = [f"{folder}/part-{k}.jsonl" + (".gz" if k % 2 else "") for k in range(n_files)]
    per_file: dict[str, list[bytes]] = {f: [] for f in files}
    for i in range(records):
        path = files[i * n_files // records]
        line, readable, hostile, key = one(i)
        per_file[path].append(line)
        out.records += 1
        out.hostile += hostile
        if not readable:
            out.expected_rejects[f"{path}:{len(per_file[path])}"] += 1
        elif key is None:
            out.expected_rows[out.table] += 1
        else:
            out.key_row(out.table, key)
    for path, lines in per_file.items():
        data = [line + b"\n" for line in lines]
        out.files[path] = _gzip_members(data, rng) if path.endswith(".gz") else b"".join(data)


def _ci_key(rec: dict) -> tuple:
    """A `ci_result` row's key: (delivery, verified repo, run, attempt, job)."""
    cb = rec["untrusted"]["callback_payload"]
    w = cb["workflow"]
    return cb["delivery_id"], rec["trusted"]["verified_repo"], w["run_id"], w.get("run_attempt") or 1, w["job_name"]


def ci_results_day(seed: int, records: int, max_line_bytes: int, day: str = DAY) -> HostileDay:
    """ci-results lines (one callback each, unique keys): ~75% hostile."""
    rng = random.Random(seed)
    out = HostileDay("ci-results", table="ci_result")

    def one(i: int):
        rec = _ci_record(i)
        roll = rng.random()
        if roll < 0.85:
            ok = True
            if roll >= 0.25:
                f, _ = _mutate(rng, rec, _CI_FIELDS)
                ok = _ci_verdict(f, _get(rec, f.path))
            return _dumps(rec), ok, roll >= 0.25, _ci_key(rec) if ok else None
        line, ok = _damaged_line(rng, _dumps(rec), max_line_bytes)
        return line, ok, True, _ci_key(rec)

    _line_day(out, rng, f"ci-results/day={day}", 2, records, one)
    return out


# ---- test-runs JSONL --------------------------------------------------------------------------

_RESULT_POOL = [None, {}, {"message": "boom"}, {"message": 42, "text": "x"}, [], [{}], [{"message": "a"}, {"text": "b"}],
                "boom", 1, [1], [{"message": "a"}, "b"], True]
_RUNS_FIELDS = [
    Field(("workflow_id",), "id", required=True), Field(("workflow_run_attempt",), "attempt", required=True),
    Field(("job_id",), "id", required=True), Field(("name",), "nonempty_str", required=True),
    Field(("classname",), _STR), Field(("file",), _STR), Field(("invoking_file",), _STR),
    Field(("time",), "time", pool=[None, 0, 0.5, "0.5", "1,234.5", "1,5", "fast", "", -1, "-1", "nan", "inf", 1e300,
                                   2**63, True, [], {}, 1e9, 1e9 + 1]),
    *[Field((tag,), "result", pool=_RESULT_POOL) for tag in ("failure", "error", "skipped", "rerun", "flakyFailure")],
]


def _time_ok(value) -> bool:
    """JUnit time attribute semantics: absent or "" is 0; numbers and numeric text (Surefire's
    thousands too) up to 1e9 seconds, finite and non-negative."""
    if value is None or value == "":
        return True
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return False
    if isinstance(value, str):
        try:
            seconds = float(value)
        except ValueError:
            if not re.match(r"^\d{1,3}(,\d{3})+(\.\d+)?$", value.strip()):
                return False
            seconds = float(value.replace(",", ""))
    else:
        seconds = float(value)
    return math.isfinite(seconds) and 0 <= seconds <= 1e9


def _result_ok(value) -> bool:
    if value is None:
        return True
    items = value if isinstance(value, list) else [value]
    return bool(items) and all(isinstance(x, dict) for x in items)


def runs_jsonl_day(seed: int, records: int, max_line_bytes: int, day: str = DAY) -> HostileDay:
    """PyTorch's flattened test rows: one test per line (unique names), ~75% hostile, plus a
    file cut mid-gzip (rejected whole: its tests' later attempts may be the cut ones)."""
    rng = random.Random(seed)
    out = HostileDay("test-runs", table="test_run")

    def one(i: int):
        rec = {"classname": "TestOps", "file": "test_ops.py", "invoking_file": "test_ops", "name": f"test_{seed}_{i}",
               "time": 0.25, "failure": None, "skipped": None, "job_id": 50_000 + i % 7, "workflow_id": 9_000,
               "workflow_run_attempt": 1}
        roll = rng.random()
        if roll >= 0.85:
            return *_damaged_line(rng, _dumps(rec), max_line_bytes), True, None
        ok = True
        if roll >= 0.25:
            f, _ = _mutate(rng, rec, _RUNS_FIELDS)
            value = _get(rec, f.path)
            ok = (_time_ok(value) if f.kind == "time" else _result_ok(value) if f.kind == "result"
                  else verdict(f.kind, value, f.required))
            if f.path == ("name",) and ok:
                rec["name"] += f"_{seed}_{i}"  # still unique: two tests of one name would fold into one row
        return _dumps(rec), ok, roll >= 0.25, None

    _line_day(out, rng, f"test-runs/day={day}", 3, records, one)
    # A file whose gzip is cut: rejected whole, one reject at the file.
    cut = f"test-runs/day={day}/cut.jsonl.gz"
    whole = gzip.compress(b"".join(_dumps({"name": f"test_cut_{k}", "job_id": 1, "workflow_id": 1,
                                            "workflow_run_attempt": 1}) + b"\n" for k in range(50)), mtime=0)
    out.files[cut] = whole[: len(whole) // 2]
    out.expected_rejects[cut] += 1
    out.records += 1
    out.hostile += 1
    return out


# ---- JUnit XML --------------------------------------------------------------------------------

def _xml_attr(value: str) -> str:
    return (value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
            .replace("\n", "&#10;"))


_XML_TEXT = ["", "x", "é\U0001F600", "a & b < c", "x" * 3000, "\u2028", "Traceback\n  line", "]]>"]
_XML_TIMES = [None, "", "0.5", "12", "1,234.5", "1,5", "NaN", "nan", "inf", "-inf", "-1", "1e400", "1e300",
              "fast", "0x10", " 1.5 ", "1e9", "1000000001"]


def _report_damage(rng: random.Random, body: str) -> tuple[str | bytes, str]:
    """A whole-report problem: (the damaged document, why it is rejected)."""
    kind = rng.randrange(7)
    if kind == 0:
        return '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">]>' + body, "doctype"
    if kind == 1:
        return body[: rng.randrange(20, len(body) - 10)], "truncated or malformed"
    if kind == 2:
        return body.replace("<testcase ", '<testcase bad="\x01" ', 1), "malformed"  # a control char: not XML
    if kind == 3:
        return "<html><body>502</body></html>", "bad-root"
    if kind == 4:
        return "<testsuites>" + "<testsuite>" * 100 + "</testsuite>" * 100 + "</testsuites>", "too-deep"
    if kind == 5:
        return body.encode()[:-5] + b"\xff\xfe", "malformed"
    return "", "empty"


def junit_day(seed: int, cases: int, max_line_bytes: int, day: str = DAY) -> HostileDay:
    """JUnit reports of ~10 test cases each (one per line, unique names), ~70% of the cases with a
    hostile attribute or child, ~8% of the reports damaged whole (their cases are lost with the
    report, by design) and some with a token over the line cap. Records are test cases and
    damaged reports."""
    rng = random.Random(seed)
    out = HostileDay("test-reports")
    n_reports = max(1, cases // 10)
    done = 0
    for r in range(n_reports):
        path = (f"test-reports/day={day}/{7_000_000 + r // 8}/1/{60_000 + r}/test/test-reports/"
                f"python-pytest/test_ops/test_ops-{r}.xml" + (".gz" if r % 3 == 0 else ""))
        n = cases - done if r == n_reports - 1 else 10
        done += n
        lines = ['<?xml version="1.0" encoding="utf-8"?>', '<testsuites><testsuite name="pytest">']
        expected_rows, case_rejects = 0, []
        hostile = 0
        for k in range(n):
            attrs = {"classname": "test_ops.TestOps", "name": f"test_{seed}_{r}_{k}", "time": "0.5",
                     "file": "test_ops.py"}
            child = ""
            roll = rng.random()
            ok = True
            if roll < 0.30:
                pass
            elif roll < 0.70:
                attrs["time"] = rng.choice(_XML_TIMES)
                if attrs["time"] is None:
                    del attrs["time"]
                ok = _time_ok(attrs.get("time"))
            elif roll < 0.80:
                if rng.random() < 0.5:
                    del attrs["name"]
                else:
                    attrs["name"] = ""
                ok = False
            else:
                text = rng.choice(_XML_TEXT)
                tag = rng.choice(["failure", "error", "skipped", "rerun", "system-out", "properties", "flakyFailure"])
                child = f'<{tag} message="{_xml_attr(text)}">{_xml_attr(text)}</{tag}>'
                attrs["classname"] = rng.choice(["", "x.y.Z", "é", attrs["classname"]])
            hostile += roll >= 0.30
            attr_text = " ".join(f'{key}="{_xml_attr(v)}"' for key, v in attrs.items())
            lines.append(f"<testcase {attr_text}>{child}</testcase>" if child else f"<testcase {attr_text}/>")
            if ok:
                expected_rows += 1
            else:
                case_rejects.append(len(lines))
        lines.append("</testsuite></testsuites>")
        body = "\n".join(lines) + "\n"
        out.records += n
        out.hostile += hostile
        roll = rng.random()
        if roll < 0.08:
            doc, _why = _report_damage(rng, body)
            out.expected_rejects[path] += 1  # located at the file (and line:col within it)
            out.records += 1
            out.hostile += 1
        elif roll < 0.10:
            # A token over the cap, longer than one read chunk too (expat is fed 1 MiB at a time).
            doc = body.replace('name="', 'name="' + "N" * (max_line_bytes + (1 << 20) + 1), 1)
            out.expected_rejects[path] += 1
            out.records += 1
            out.hostile += 1
        else:
            doc = body
            out.expected_rows["test_run"] += expected_rows
            for line in case_rejects:
                out.expected_rejects[f"{path}:{line}"] += 1
        data = doc.encode() if isinstance(doc, str) else doc
        out.files[path] = gzip.compress(data, compresslevel=1, mtime=0) if path.endswith(".gz") else data
    return out


CASE_REJECTS = ("bad-time", "bad-testcase")


def reject_key(location: str, reason: str) -> str:
    """A reject's location as the generators predict it: `path:line` for a line or a test case
    (the XML reader adds `:column` to a test case), the path alone for a whole report or file
    (the XML reader may add `:line:column` where the fault is)."""
    path, sep, rest = location.partition(".xml")
    if not sep:
        return location
    path += ".xml"
    if rest.startswith(".gz"):
        path, rest = path + ".gz", rest[3:]
    if reason.startswith(CASE_REJECTS):
        return f"{path}:{rest.lstrip(':').split(':')[0]}"
    return path


# ---- memory bombs -----------------------------------------------------------------------------

BOMB_MEMBER_BYTES = 16 << 20


def _repeated_gzip(head: bytes, byte: bytes, size: int, tail: bytes = b"") -> bytes:
    """`head` + `size` copies of `byte` + `tail`, gzipped as concatenated members (what appending
    to a .gz file makes): one 16 MiB member compressed once and repeated, so even gigabytes
    take milliseconds to build and a few KB per 16 MiB to store."""
    member = gzip.compress(byte * BOMB_MEMBER_BYTES, compresslevel=9, mtime=0)
    full, rest = divmod(size, BOMB_MEMBER_BYTES)
    return (gzip.compress(head, mtime=0) + member * full + gzip.compress(byte * rest, mtime=0)
            + gzip.compress(tail, mtime=0))


def bomb_archive(root: str | Path, size: int, day: str = DAY) -> dict[str, str]:
    """An archive day where each source holds one record of `size` bytes between good ones:

    - webhooks and ci-results: a .jsonl.gz whose second "line" is `size` NUL bytes;
    - test-runs: the same (the file is then over the report cap too);
    - test-reports: a JUnit report whose first test case has a `size`-byte name attribute.

    Returns {source: archive path of the bomb}. The good records around the bombs are a push to
    main, one callback, one test row and a normal report.
    """
    root = Path(root)
    good_push = _dumps({"event": "push", "delivery_id": "good-push", "received_at": "2026-11-01T12:00:00Z",
                        "payload": _webhook_payload("push", 1)})
    good_callback = _dumps(_ci_record(1))
    good_row = _dumps({"name": "test_ok", "classname": "TestX", "file": "test_x.py", "time": 1.0, "job_id": 1,
                       "workflow_id": 2, "workflow_run_attempt": 1})
    paths = {
        "webhooks": f"webhooks/day={day}/bomb.jsonl.gz",
        "ci-results": f"ci-results/day={day}/bomb.jsonl.gz",
        "test-runs": f"test-runs/day={day}/bomb.jsonl.gz",
        "test-reports": f"test-reports/day={day}/1/1/1/test/test-reports/python-pytest/test_x/bomb.xml.gz",
    }
    files = {
        paths["webhooks"]: _repeated_gzip(good_push + b"\n", b"\0", size, b"\n" + good_push.replace(b"good-push", b"after") + b"\n"),
        paths["ci-results"]: _repeated_gzip(good_callback + b"\n", b"\0", size, b"\n" + good_callback + b"\n"),
        paths["test-runs"]: _repeated_gzip(good_row + b"\n", b"\0", size, b"\n" + good_row + b"\n"),
        paths["test-reports"]: _repeated_gzip(b'<testsuites><testsuite name="pytest"><testcase classname="t" name="', b"A", size,
                                              b'" time="1"/></testsuite></testsuites>'),
        f"test-reports/day={day}/1/1/2/test/test-reports/python-pytest/test_x/ok.xml":
            b'<testsuite><testcase classname="TestX" file="test_x.py" name="test_fine" time="1"/></testsuite>',
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return paths
