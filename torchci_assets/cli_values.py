"""The values a command's options and the TORCHCI_* folder settings take, each checked where it is
read: a mistyped one is one line naming it, not a traceback or a half-written folder later."""

from __future__ import annotations

import argparse
import datetime as dt
import re
from pathlib import Path

_S3_RE = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$")


def folder_problem(name: str, value: str) -> str | None:
    """Why `value` cannot be the folder (or s3://bucket/prefix) `name` names, or None.

    A local folder need not exist yet (it is created on first write), but nothing on its path
    may be a file: that fails only when an asset first writes, deep inside a run.
    """
    if value.startswith("s3://"):
        if not _S3_RE.match(value):
            return f"{name}={value!r}: expected s3://bucket/prefix with a valid bucket name"
        return None
    if "://" in value:
        return f"{name}={value!r}: expected a local folder or s3://bucket/prefix"
    path = Path(value).expanduser()
    for at in (path, *path.parents):
        if at.exists():
            if not at.is_dir():
                what = "is a file" if at == path else f"is below {at}, which is a file"
                return f"{name}={value!r}: {what}; expected a folder"
            return None
    return None


def day(text: str) -> dt.date:
    """An argparse type: a YYYY-MM-DD day (`yesterday` or 2026-13-01 are usage errors)."""
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a day (YYYY-MM-DD)") from None


def port(text: str) -> int:
    """An argparse type: a TCP port. The socket layer takes 99999 for 34463 and 0 for any port."""
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a port number from 1 to 65535")
    return int(text)


def at_least_one(what: str):
    """An argparse type: a whole number of `what`, 1 or more."""
    def parse(text: str) -> int:
        if not text.strip().isdigit() or int(text) < 1:
            raise argparse.ArgumentTypeError(f"{text!r}: expected a number of {what}, 1 or more")
        return int(text)
    return parse


FIRST_DAY_VAR = "TORCHCI_FIRST_DAY"


class FirstDayError(ValueError):
    """TORCHCI_FIRST_DAY is set to something that is not a day."""


def first_day_setting(environ) -> str | None:
    """TORCHCI_FIRST_DAY as a day, None when unset. Here, not with the partitions, so that a command's
    check of its settings says a bad one at once, without loading Dagster."""
    text = (environ.get(FIRST_DAY_VAR) or "").strip()
    if not text:
        return None
    try:
        return dt.date.fromisoformat(text).isoformat()
    except ValueError:
        raise FirstDayError(f"{FIRST_DAY_VAR}={text!r} is not a day: use YYYY-MM-DD") from None
