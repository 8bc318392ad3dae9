"""GitHub webhook archive lines -> validated envelopes and the typed fields of their payloads.

Pure functions on one line or one payload, shared by the ingest and the relay sensor. Fields
vary across GitHub versions (older payloads lack run_attempt, workflow_name, created_at), so
every field may be missing; a field present with the wrong type raises `FieldError`, which
rejects the typed row while the delivery itself is kept. Ids and numbers must fit the lake's
int64 columns and be non-negative, attempts at least 1 (`fields.checked`); texts hold at most
MAX_TEXT_CHARS characters, label lists MAX_LABELS labels. Timestamps stay
strings here and are cast, and checked, in SQL when a day is reduced.
"""

from __future__ import annotations

import datetime as dt
import re

import orjson
import pyarrow as pa

from resources.sql import Columns
from torchci_assets.ingest.fields import checked
from torchci_assets.ingest.jobnames import parse_job_name

TS = pa.timestamp("ms", tz="UTC")
# The longest text a typed column takes: GitHub's names, refs and labels are well under 1 KB. A
# longer one (1 MB job names exist in hostile archives) is a reject, not a row: typed rows are
# buffered and reduced by the thousand, where a few megabyte values exhaust the memory.
MAX_TEXT_CHARS = 4096
MAX_LABELS = 256
# GitHub's webhook lists at most 2048 commits of a push (its Events API 20, which is not read
# here): a list longer is not GitHub's, and its row would hold megabytes.
MAX_PUSH_COMMITS = 2048
# Job names longer than this are parsed without the cache, which would otherwise keep them.
_CACHED_NAME_CHARS = 512
# A pull request that says it closes a DISABLED test's issue runs the test (PyTorch's
# filter_test_configs.py and Dr. CI's isDisabledTestMentionedInPR match these words; any
# repository's issue URL here). GitHub keeps at most 65536 characters of a body.
_CLOSES = re.compile(r"(?:Close[ds]?|Resolve[ds]?|Fix(?:e[ds])?) (?:#|https://github\.com/[\w.-]+/[\w.-]+/issues/)"
                     r"(\d{1,18})(?!\d)", re.IGNORECASE)
MAX_BODY_CHARS = 65536
MAX_CLOSED_ISSUES = 100


class FieldError(ValueError):
    """A payload field has the wrong type: the typed row is rejected, the delivery is kept."""


def _get(obj: dict, key: str, kind: type | tuple[type, ...], where: str):
    return bounded(checked(obj.get(key), kind, f"{where}.{key}", FieldError), f"{where}.{key}")


def bounded(value, name: str, error: type[ValueError] = FieldError):
    """`value`, unless it is a text over MAX_TEXT_CHARS: then `error` naming the field `name`.
    Every reader of typed text applies it (the ci-results ingest with its own error), so the cap
    and its reject reason are the same whatever the source."""
    if type(value) is str and len(value) > MAX_TEXT_CHARS:
        raise error(f"too long: {name} is {len(value)} characters, more than {MAX_TEXT_CHARS}")
    return value


def _id(obj: dict, key: str, where: str, required: bool = False, minimum: int = 0) -> int | None:
    """A GitHub id or number (non-negative), or an attempt (`minimum=1`), that fits int64."""
    value = checked(obj.get(key), int, f"{where}.{key}", FieldError, minimum=minimum)
    if value is None and required:
        raise FieldError(f"missing field: {where}.{key}")
    return value


def _object(obj: dict, key: str, where: str) -> dict:
    """A nested object that may be absent (then empty), never of another type."""
    return checked(obj.get(key), dict, f"{where}.{key}", FieldError) or {}


def _event_object(p: dict, key: str) -> dict:
    """The payload's object for its event (`workflow_job`, ...), which every typed row needs."""
    obj = p.get(key)
    if not isinstance(obj, dict):
        raise FieldError(f"missing field: {key}")
    return obj


def _labels(value, where: str) -> list[str] | None:
    """Label names: GitHub sends label objects (`{"name": ...}`), runners' labels are strings."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise FieldError(f"wrong type: {where} is {type(value).__name__}, expected list")
    if len(value) > MAX_LABELS:
        raise FieldError(f"too long: {where} has {len(value)} labels, more than {MAX_LABELS}")
    names = []
    for i, v in enumerate(value):
        name = checked(v.get("name"), str, f"{where}[{i}].name", FieldError) if isinstance(v, dict) else v
        names.append(bounded(checked(name, str, f"{where}[{i}]", FieldError), f"{where}[{i}]"))
    return names


def repo_of(payload: dict) -> str | None:
    """The repository's full name for the bronze table: None when absent, not a string or too long
    (the payload is kept verbatim there; the typed tables reject such a one, see `_repo`)."""
    repo = payload.get("repository")
    name = repo.get("full_name") if isinstance(repo, dict) else None
    return name if isinstance(name, str) and len(name) <= MAX_TEXT_CHARS else None


def _repo(p: dict) -> str | None:
    return _get(_object(p, "repository", "payload"), "full_name", str, "repository")


# ---- one function per event, returning its staging row ------------------------------------

JOB_STAGE = pa.schema([
    ("id", pa.int64()), ("run_id", pa.int64()), ("run_attempt", pa.int64()), ("repo", pa.string()),
    ("workflow_name", pa.string()), ("name", pa.string()), ("head_sha", pa.string()),
    ("head_branch", pa.string()), ("status", pa.string()), ("conclusion", pa.string()),
    ("created_at", pa.string()), ("started_at", pa.string()), ("completed_at", pa.string()),
    ("labels", pa.list_(pa.string())), ("runner_name", pa.string()),
    ("build_env", pa.string()), ("test_config", pa.string()), ("shard", pa.int32()),
    ("num_shards", pa.int32()), ("platform", pa.string()),
    ("delivery_id", pa.string()), ("received_at", TS), ("location", pa.string()),
])


def workflow_job_row(p: dict) -> tuple:
    job = _event_object(p, "workflow_job")
    w = "workflow_job"
    job_id = _id(job, "id", w, required=True)
    name = _get(job, "name", str, w)
    parse = parse_job_name if name is None or len(name) <= _CACHED_NAME_CHARS else parse_job_name.__wrapped__
    parsed = parse(name)
    return (
        # no run_attempt (an older GitHub): the reduction takes it from the job's other deliveries
        job_id, _id(job, "run_id", w), _id(job, "run_attempt", w, minimum=1), _repo(p),
        _get(job, "workflow_name", str, w), name, _get(job, "head_sha", str, w),
        _get(job, "head_branch", str, w), _get(job, "status", str, w) or p.get("action"),
        _get(job, "conclusion", str, w), _get(job, "created_at", str, w), _get(job, "started_at", str, w),
        _get(job, "completed_at", str, w), _labels(job.get("labels"), "workflow_job.labels"),
        _get(job, "runner_name", str, w), parsed.build_env, parsed.test_config, parsed.shard,
        parsed.num_shards, parsed.platform,
    )


RUN_STAGE = pa.schema([
    ("id", pa.int64()), ("run_attempt", pa.int64()), ("repo", pa.string()), ("name", pa.string()),
    ("workflow_id", pa.int64()), ("event", pa.string()), ("head_sha", pa.string()), ("head_branch", pa.string()),
    ("status", pa.string()), ("conclusion", pa.string()), ("created_at", pa.string()),
    ("updated_at", pa.string()), ("delivery_id", pa.string()), ("received_at", TS), ("location", pa.string()),
])


def workflow_run_row(p: dict) -> tuple:
    run = _event_object(p, "workflow_run")
    w = "workflow_run"
    return (
        _id(run, "id", w, required=True), _id(run, "run_attempt", w, minimum=1) or 1, _repo(p),
        _get(run, "name", str, w), _id(run, "workflow_id", w),
        _get(run, "event", str, w), _get(run, "head_sha", str, w), _get(run, "head_branch", str, w),
        _get(run, "status", str, w), _get(run, "conclusion", str, w), _get(run, "created_at", str, w),
        _get(run, "updated_at", str, w),
    )


PUSH_STAGE = pa.schema([
    ("repo", pa.string()), ("ref", pa.string()), ("before", pa.string()), ("after", pa.string()),
    ("forced", pa.bool_()), ("created", pa.bool_()), ("deleted", pa.bool_()),
    ("head_commit_id", pa.string()), ("head_commit_timestamp", pa.string()), ("commit_count", pa.int32()),
    ("commits", pa.list_(pa.string())),
    ("delivery_id", pa.string()), ("received_at", TS), ("location", pa.string()),
])
# The push table's columns that partitions written before them lack (a reader takes them as NULL):
# `commits`, the ids of the commits a push lists, oldest first. A merge bot lands a stack of pull
# requests (ghstack) in one push, whose `after` is only the last of them: without the others the
# commits below it would be missing from the branch's line, and their failures blamed on it.
PUSH_COLUMNS_ADDED = Columns({"commits": "VARCHAR[]"})


def push_row(p: dict) -> tuple:
    w = "push"
    ref = _get(p, "ref", str, w)
    if ref is None:
        raise FieldError("missing field: push.ref")
    head = _object(p, "head_commit", w)
    commits = p.get("commits")
    return (
        _repo(p), ref, _get(p, "before", str, w), _get(p, "after", str, w),
        bool(_get(p, "forced", bool, w)), bool(_get(p, "created", bool, w)), bool(_get(p, "deleted", bool, w)),
        _get(head, "id", str, "push.head_commit"), _get(head, "timestamp", str, "push.head_commit"),
        len(commits) if isinstance(commits, list) else None, _commit_ids(commits),
    )


def _commit_ids(value) -> list[str] | None:
    """The ids of a push's `commits`, in GitHub's order (oldest first, the head last), or None when
    they cannot all be read: the push's head (`after`) is what most readers need, so a list not
    shaped as GitHub's (not a list, over MAX_PUSH_COMMITS, a commit without a string id) costs the
    row only its list, as a payload without one (an older or trimmed payload) does. A tag's or a
    deletion's list is empty, not None."""
    if not isinstance(value, list) or len(value) > MAX_PUSH_COMMITS:
        return None
    ids = [c.get("id") if isinstance(c, dict) else None for c in value]
    if not all(type(i) is str and len(i) <= MAX_TEXT_CHARS for i in ids):
        return None
    return ids


PR_STAGE = pa.schema([
    ("repo", pa.string()), ("number", pa.int64()), ("action", pa.string()), ("state", pa.string()),
    ("head_sha", pa.string()), ("head_ref", pa.string()), ("base_ref", pa.string()),
    ("labels", pa.list_(pa.string())), ("merged", pa.bool_()), ("updated_at", pa.string()), ("author", pa.string()),
    ("closes", pa.list_(pa.int64())), ("delivery_id", pa.string()), ("received_at", TS), ("location", pa.string()),
])


def pull_request_row(p: dict) -> tuple:
    pr = _event_object(p, "pull_request")
    w = "pull_request"
    number = _id(p, "number", "payload")
    if number is None:
        number = _id(pr, "number", w)
    head, base = _object(pr, "head", w), _object(pr, "base", w)
    return (
        _repo(p), number, _get(p, "action", str, "payload"), _get(pr, "state", str, w),
        _get(head, "sha", str, "pull_request.head"), _get(head, "ref", str, "pull_request.head"),
        _get(base, "ref", str, "pull_request.base"), _labels(pr.get("labels"), "pull_request.labels"),
        _get(pr, "merged", bool, w), _get(pr, "updated_at", str, w),
        _get(_object(pr, "user", w), "login", str, "pull_request.user"), closed_issues(pr),
    )


def closed_issues(pr: dict) -> list[int] | None:
    """The issue numbers the pull request's body says it closes (`_CLOSES`), in order, each once;
    [] for a body that names none or is empty (null), None when the payload has no body field or
    one that is not text (nothing can be said). Never a reject: a row's other fields stand."""
    if "body" not in pr:
        return None
    body = pr["body"]
    if body is None:
        return []
    if not isinstance(body, str):
        return None
    found = dict.fromkeys(int(n) for n in _CLOSES.findall(body[:MAX_BODY_CHARS]))
    return list(found)[:MAX_CLOSED_ISSUES]


def _parse_received_at(value) -> dt.datetime:
    """An ISO 8601 instant in UTC (a time without zone is UTC); ValueError for anything else,
    including an instant a datetime cannot hold once moved to UTC (year 1 at +05:00)."""
    if not isinstance(value, str):
        raise ValueError
    t = dt.datetime.fromisoformat(value)
    try:
        return t.replace(tzinfo=dt.timezone.utc) if t.tzinfo is None else t.astimezone(dt.timezone.utc)
    except OverflowError:
        raise ValueError from None


def raw_payload(line: bytes, env: dict) -> bytes:
    """The payload's JSON text as archived, without re-serializing it.

    When the envelope has exactly its four keys and ends with the payload object, the first
    `"payload":` in the line is that key (the other values are strings, in which an unescaped
    quote cannot occur), so the text between it and the envelope's closing brace is the
    payload verbatim. Any other layout falls back to re-serializing the parsed payload.

    A line naming the key twice (no writer of the archive makes one) can still look like that:
    orjson keeps the last "payload" where the slice starts at the first, so the slice would hold
    both and not be JSON. Only a slice holding `"payload"` again is parsed to check it is one
    value (a key spelled with \\u escapes is not looked for: the check would parse every payload
    that has any escape).
    """
    if len(env) == 4:
        body = line.rstrip()
        if body.endswith(b"}}"):
            i = body.find(b'"payload":')
            if i > 0:
                text = body[i + 10:-1].strip()
                if _one_value(text):
                    return text
    return orjson.dumps(env["payload"])


def _one_value(text: bytes) -> bool:
    """Whether a slice that may hold a second top-level "payload" key is one JSON value."""
    if b'"payload"' not in text:
        return True
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return True


# The `source` of an archive line read from GitHub's REST API (`torchci backfill`, gap repair), not
# delivered by a webhook: history, which the lake takes as it takes a webhook but nothing acts on.
REST_SOURCE = "rest"


def from_rest(env: dict) -> str:
    """Why an envelope is not acted on ("" when it is a webhook): a backfill writes a repository's
    past pushes and pull requests into today's folders, which must not be dispatched again."""
    if env.get("source") == REST_SOURCE:
        return "a REST record (torchci backfill or gap repair): history, not relayed"
    return ""


def parse_envelope(line: bytes) -> tuple[str, str, dt.datetime, dict, dict]:
    """Validate one archive line; raises ValueError with the reject reason."""
    try:
        env = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        # orjson calls any byte that is not UTF-8 a surrogate: say where the line stops being UTF-8
        # instead (decoded only once the line failed, so a good line pays nothing)
        try:
            bytes(line).decode() if not isinstance(line, str) else None
        except UnicodeDecodeError as bad:
            raise ValueError(f"invalid UTF-8 at byte {bad.start}") from None
        raise ValueError(f"invalid JSON: {exc}") from None
    if not isinstance(env, dict):
        raise ValueError(f"invalid envelope: a JSON {type(env).__name__}, expected an object")
    for key in ("event", "delivery_id", "received_at", "payload"):
        if env.get(key) is None:
            raise ValueError(f"missing field: {key}")
    event, delivery_id, payload = env["event"], env["delivery_id"], env["payload"]
    if not isinstance(event, str) or not event:
        raise ValueError(f"wrong type: event is {type(event).__name__}, expected a non-empty string")
    if not isinstance(delivery_id, str) or not delivery_id:
        raise ValueError(f"wrong type: delivery_id is {type(delivery_id).__name__}, expected a non-empty string")
    if not isinstance(payload, dict):
        raise ValueError(f"wrong type: payload is {type(payload).__name__}, expected an object")
    try:
        received_at = _parse_received_at(env["received_at"])
    except ValueError:
        raise ValueError(f"wrong type: received_at {str(env['received_at'])[:40]!r} is not an ISO 8601 timestamp") from None
    return event, delivery_id, received_at, payload, env
