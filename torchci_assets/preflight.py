"""The configuration every entry point checks before it does anything: the configuration file
(`TORCHCI_CONFIG`), every `TORCHCI_*` variable and the GitHub credentials.

A bad value found late costs a re-ingested day, a run failing in two assets and a message buried
in a traceback; found here it costs one line naming the variable or key, what it got and what it
expects. `torchci run`, `torchci serve`, the Dagster code location and any other command call
`problems()` (or `check()`) first, before they open the lake. A command about to read and write
the stores (`torchci run`) also asks S3 whether it takes the credentials (`report_stores()`): one
listing per store on S3, none for a local folder.

Each variable is checked by the parser its own module uses at run time, so the check and the use
cannot disagree; this module only adds the variable's name where a parser's message lacks it.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from collections.abc import Callable, Mapping

from resources.credentials import credential_problems
from torchci_assets.cli_values import folder_problem
from torchci_assets.config import CONFIG_ENV_VAR, ConfigError, load_config

_URL_RE = re.compile(r"^https?://[^\s/]+(/\S*)?$")
_ENDPOINT_RE = re.compile(r"^(https?://)?[A-Za-z0-9.-]+(:\d{1,5})?/?$")
_DUCKDB_SIZE_RE = re.compile(r"^\s*\d+(\.\d+)?\s*(B|[KMGT]i?B)\s*$", re.I)
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
FOLDER_VARS = ("TORCHCI_ARCHIVE_URI", "TORCHCI_LAKE_URI", "TORCHCI_OUTPUTS_URI", "TORCHCI_SPOOL_DIR")
STORE_VARS = FOLDER_VARS[:3]  # the stores `torchci run` reads and writes
# pyarrow's S3 errors: "... AWS Error <CODE> during <Operation> operation: <S3's message> (Request ID: ...)"
_AWS_ERROR = (r"AWS Error ([A-Z_]+)(?: \(HTTP status (\d+)\))? during \w+ operation: (.*?)\.?"
              r"(?:\s*\(Request ID: [^)]*\))?\.?\s*$")  # compiled when an S3 store fails, not at every start
# S3's answers that the credentials will not do (whoever they are, or what they may do).
CREDENTIAL_REFUSALS = {"INVALID_ACCESS_KEY_ID", "SIGNATURE_DOES_NOT_MATCH", "ACCESS_DENIED", "EXPIRED_TOKEN",
                       "INVALID_CLIENT_TOKEN_ID", "UNRECOGNIZED_CLIENT", "MISSING_AUTHENTICATION_TOKEN"}
CREDENTIAL_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


class PreflightError(ConfigError):
    """One or more unusable settings; the message has one line per problem."""


def _duckdb_memory(value: str) -> str | None:
    """DuckDB's own parser decides; the pattern first keeps the value a plain size (it is set in SQL)."""
    if _DUCKDB_SIZE_RE.match(value):
        import duckdb

        try:
            duckdb.connect(":memory:", config={"memory_limit": value}).close()
            return None
        except duckdb.Error:
            pass
    return f"TORCHCI_DUCKDB_MEMORY={value!r}: expected a memory size such as 512MB, 4GB or 2GiB"


def _from_parser(parse: Callable[[], object], name: str) -> str | None:
    """Run a module's own parser of `name`; its message, prefixed with the name if it lacks it."""
    try:
        parse()
    except (ValueError, OSError) as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return message if name in message else f"{name}: {message}"
    return None


def _log_rules() -> object:
    from torchci_assets.derived.failures.rules import load_ruleset

    return load_ruleset()


def _first_day() -> object:
    from torchci_assets.cli_values import first_day_setting

    return first_day_setting(os.environ)


def _refresh() -> object:
    from torchci_assets.cadence import refresh_interval_s

    return refresh_interval_s()


def _line_bytes() -> object:
    from torchci_assets.ingest.lines import max_line_bytes

    return max_line_bytes()


def _report_bytes() -> object:
    from torchci_assets.ingest.junit import max_report_bytes

    if max_report_bytes() < 1:
        raise ValueError(f"TORCHCI_MAX_REPORT_BYTES={os.environ['TORCHCI_MAX_REPORT_BYTES']!r}: must be positive")
    return None


def _zip_bytes() -> object:
    from torchci_assets.ingest.report_zips import max_zip_bytes

    text = os.environ["TORCHCI_MAX_ZIP_BYTES"]
    try:
        ok = max_zip_bytes() > 0
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"TORCHCI_MAX_ZIP_BYTES={text!r}: expected a positive number of bytes")
    return None


def _gap_repair() -> object:
    from jobs.gap_repair import LIMIT_VAR, REPAIR_EVERY_MIN, repair_limit

    try:
        return repair_limit()
    except ValueError:
        raise ValueError(f"{LIMIT_VAR}={os.environ[LIMIT_VAR]!r}: expected a number of minutes over the "
                         f"{REPAIR_EVERY_MIN}-minute schedule interval") from None


def _gap_reserve() -> object:
    from torchci_assets.backfill.gaps import repair_reserve

    return repair_reserve()


def _regression_share() -> object:
    from torchci_assets.derived.sharding.regressions import max_cost_share

    return max_cost_share()


def _reject_rate() -> object:
    from torchci_assets.checks import max_reject_rate

    return max_reject_rate()


def _receiver() -> object:
    from torchci_assets.receiver.settings import ReceiverSettings

    return ReceiverSettings.from_env()


def _log_level(value: str) -> str | None:
    if value.upper() not in LOG_LEVELS:
        return f"TORCHCI_LOG_LEVEL={value!r}: expected one of {', '.join(LOG_LEVELS)}"
    return None


def _matching(pattern: re.Pattern, name: str, expected: str) -> Callable[[str], str | None]:
    """A check that `name`'s value matches `pattern`, saying what was expected when it does not."""
    return lambda value: None if pattern.match(value) else f"{name}={value!r}: expected {expected}"


# Variables checked on their value: name -> check(value) -> problem or None.
VALUE_CHECKS: dict[str, Callable[[str], str | None]] = {
    **{name: (lambda value, name=name: folder_problem(name, value)) for name in FOLDER_VARS},
    "TORCHCI_DUCKDB_MEMORY": _duckdb_memory,
    "TORCHCI_LOG_LEVEL": _log_level,
    "TORCHCI_S3_ENDPOINT": _matching(_ENDPOINT_RE, "TORCHCI_S3_ENDPOINT", "http://host:port or https://host"),
    "TORCHCI_HUD_URL": _matching(_URL_RE, "TORCHCI_HUD_URL",
                                 "the address hud/ is served at, such as https://hud.example.org"),
    "TORCHCI_SOURCE_URL": _matching(_URL_RE, "TORCHCI_SOURCE_URL",
                                    "the repository's address, such as https://github.com/org/repo"),
}
# Variables any value of which is usable.
FREE_FORM = ("TORCHCI_SOURCE_BRANCH",)
# Variables checked by the parser their module uses: name -> parse() raising ValueError.
PARSER_CHECKS: dict[str, Callable[[], object]] = {
    "TORCHCI_LOG_RULES": _log_rules,
    "TORCHCI_FIRST_DAY": _first_day,
    "TORCHCI_REFRESH_MINUTES": _refresh,
    "TORCHCI_MAX_LINE_BYTES": _line_bytes,
    "TORCHCI_MAX_REPORT_BYTES": _report_bytes,
    "TORCHCI_MAX_REGRESSION_SHARE": _regression_share,
    "TORCHCI_MAX_REJECT_RATE": _reject_rate,
    "TORCHCI_MAX_ZIP_BYTES": _zip_bytes,
    "TORCHCI_GAP_REPAIR_MINUTES": _gap_repair,
    "TORCHCI_GAP_REPAIR_RESERVE": _gap_reserve,
}


def known_variables() -> set[str]:
    from torchci_assets.receiver.settings import ENV_VARS

    return {*VALUE_CHECKS, *PARSER_CHECKS, *FREE_FORM, *ENV_VARS, CONFIG_ENV_VAR}


def problems(credentials: bool = True) -> list[str]:
    """Every unusable setting in this process's environment, one line each (empty when all is well);
    the GitHub credentials too unless `credentials` is False (the receiver never calls GitHub, and
    must not stop taking webhooks over a token it does not use)."""
    env = os.environ
    found = []
    for name, check in VALUE_CHECKS.items():
        value = (env.get(name) or "").strip()
        if value and (problem := check(value)):
            found.append(problem)
    for name, parse in PARSER_CHECKS.items():
        if (env.get(name) or "").strip() and (problem := _from_parser(parse, name)):
            found.append(problem)
    if problem := _from_parser(_receiver, "TORCHCI_"):
        found.append(problem)
    try:
        load_config(env.get(CONFIG_ENV_VAR) or None)
    except ConfigError as exc:
        origin = f"{CONFIG_ENV_VAR}: " if env.get(CONFIG_ENV_VAR) else ""
        found.append(origin + str(exc).strip().splitlines()[0])
    if credentials:
        found += credential_problems(env)
    return found


def unknown_variables(env: Mapping[str, str] | None = None) -> list[str]:
    """`TORCHCI_*` variables nothing reads, each with the known name it most resembles (a typo
    here silently falls back to a default, such as the demo lake under ./var)."""
    env = os.environ if env is None else env
    known = known_variables()
    out = []
    for name in sorted(n for n in env if n.startswith("TORCHCI_") and n not in known):
        close = difflib.get_close_matches(name, known, n=1)
        out.append(f"{name} is not a setting of this project" + (f" (did you mean {close[0]}?)" if close else ""))
    return out


def check() -> None:
    """Raise PreflightError, one line per problem, if any setting is unusable."""
    found = problems()
    if found:
        raise PreflightError("\n".join(found))


_reported: dict[tuple, bool] = {}


def report(prog: str, credentials: bool = True) -> bool:
    """For a command: print each problem as `prog: problem` on stderr (unknown variables as
    warnings); False when the command must stop (exit status 2). Once per environment: the
    `torchci` dispatcher and the command it runs both call it."""
    key = (prog, credentials, tuple(sorted((k, v) for k, v in os.environ.items()
                                           if k.startswith(("TORCHCI_", "GITHUB_")))))
    if key not in _reported:
        _reported[key] = _report(prog, credentials)
    return _reported[key]


def _report(prog: str, credentials: bool) -> bool:
    for line in unknown_variables():
        print(f"{prog}: warning: {line}", file=sys.stderr)
    found = problems(credentials)
    for line in found:
        print(f"{prog}: {line}", file=sys.stderr)
    return not found


class StoreProblem:
    """A store on S3 that cannot be used as it is set: `line` says why and what to check; `setting` is
    False when S3 did not answer (an outage may pass by itself), True when S3 refused (a fix is needed).
    A plain class, not a dataclass: this module loads before every command, `--help` included."""

    __slots__ = ("line", "setting")

    def __init__(self, line: str, setting: bool):
        self.line, self.setting = line, setting


def _s3_code(code: str) -> str:
    """pyarrow's name of an S3 error code as S3 spells it: INVALID_ACCESS_KEY_ID -> InvalidAccessKeyId."""
    return "".join(part.capitalize() for part in code.split("_"))


def _without_secrets(text: str) -> str:
    for name in CREDENTIAL_VARS[1:]:
        if secret := os.environ.get(name, "").strip():
            text = text.replace(secret, f"<{name}>")
    return text


def _store_problem(name: str, uri: str, exc: OSError) -> StoreProblem:
    """One line for S3's answer to a listing of `uri` (the value of `name`)."""
    text = _without_secrets(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
    found = re.search(_AWS_ERROR, text, re.S)
    code, status, said = found.groups() if found else ("", None, text)
    endpoint = os.environ.get("TORCHCI_S3_ENDPOINT") or "AWS"
    where = f"{name}={uri!r}: "
    if code in CREDENTIAL_REFUSALS or status in ("401", "403"):
        return StoreProblem(f"{where}S3 refused the credentials ({_s3_code(code)}: {said}); check AWS_ACCESS_KEY_ID "
                            "and AWS_SECRET_ACCESS_KEY (or the profile or role the AWS SDK takes them from) and that "
                            "they may read and write the bucket", True)
    if code == "NO_SUCH_BUCKET":
        return StoreProblem(f"{where}the bucket does not exist at {endpoint}; create it, or correct {name} "
                            "(or TORCHCI_S3_ENDPOINT)", True)
    return StoreProblem(f"{where}cannot reach S3 at {endpoint} ({said}); check TORCHCI_S3_ENDPOINT and "
                        "AWS_REGION, and that the endpoint is up", False)


def store_problems(stores: dict[str, str] | None = None) -> list[StoreProblem]:
    """The stores on S3 that S3 will not list for these credentials, one request each (a listing of
    the store's prefix, one page): a refusal found here costs no run, where the first step to write
    would fail and the others after it. A local folder costs nothing: `problems()` checked its path.
    `stores`: setting (or option) -> URI, by default the settings of STORE_VARS."""
    found = []
    if stores is None:
        stores = {name: (os.environ.get(name) or "").strip() for name in STORE_VARS}
    for name, uri in stores.items():
        if not uri.startswith("s3://"):
            continue
        import pyarrow.fs as pafs

        from resources.storage import s3_options

        try:
            pafs.S3FileSystem(**s3_options()).get_file_info(
                pafs.FileSelector(uri[len("s3://"):].rstrip("/"), allow_not_found=True))
        except OSError as exc:
            found.append(_store_problem(name, uri, exc))
    return found


def report_stores(prog: str, stores: dict[str, str] | None = None) -> int:
    """For a command about to use the stores: each one S3 will not list as `prog: problem` on stderr;
    the exit status to stop with (2 for a refusal to fix, 1 when S3 did not answer), or 0."""
    found = store_problems(stores)
    for problem in found:
        print(f"{prog}: {problem.line}", file=sys.stderr)
    if not found:
        return 0
    return 2 if any(p.setting for p in found) else 1
