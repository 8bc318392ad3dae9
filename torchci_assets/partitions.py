"""One partition per day of arrival: the archive's `day=YYYY-MM-DD` folders (UTC), and the day
arithmetic every window over those partitions uses.

The partitions start on `TORCHCI_FIRST_DAY` when it is set, else on the archive's first day,
so a fresh install shows the days it has, not years of "missing" partitions; they end today, or
on the archive's last day when that is earlier (`partitions_for`). The definitions
are loaded by every Dagster process (webserver, daemon, each run), and they must all agree
on the partitions: a deployment (archive on S3, runs in pods) should set `TORCHCI_FIRST_DAY`,
so that no process has to list the archive, and a failing listing cannot leave one process
with another start. Without it the archive is listed once per load (a local folder, or one
listing per source folder on S3); when it is empty or cannot be read, the partitions start
today (UTC), the first day anything can arrive.
"""

import datetime as dt
import logging
import os
import warnings

import dagster as dg
import pyarrow as pa

from resources.storage import Store
from resources.uris import resolved_uri
from torchci_assets.archive_days import archive_days
from torchci_assets.cli_values import FIRST_DAY_VAR, first_day_setting


def _today(today: dt.date | None) -> dt.date:
    return today or dt.datetime.now(dt.timezone.utc).date()


def _listed(environ) -> list[str]:
    """The archive's days, or none when it cannot be listed (said once, with what to do)."""
    uri = resolved_uri("TORCHCI_ARCHIVE_URI", environ)
    try:
        return archive_days(Store(uri))
    except (OSError, pa.ArrowException) as exc:
        logging.getLogger(__name__).warning(
            f"cannot list the archive {uri} for the first partition ({exc}); partitions start today until it "
            f"can: check TORCHCI_ARCHIVE_URI (for s3://, the credentials, AWS_REGION and TORCHCI_S3_ENDPOINT), "
            f"or set {FIRST_DAY_VAR}.")
        return []


def first_day(environ=os.environ, today: dt.date | None = None) -> str:
    """The first daily partition: `TORCHCI_FIRST_DAY`, else the archive's first day, else today."""
    setting = first_day_setting(environ)
    if setting:
        return setting
    days = _listed(environ)
    return days[0] if days else _today(today).isoformat()


def partitions_for(environ=os.environ, today: dt.date | None = None) -> dg.DailyPartitionsDefinition:
    """The daily partitions, from the first day to the last day there is data for.

    A live archive (one with `TORCHCI_FIRST_DAY` set, as a deployment has, or with a folder for
    today) ends today: `end_offset=1` includes today's partition, so data landing today can be
    ingested before midnight (the intra-day refresh, ad-hoc runs), and it rolls over at midnight.
    An archive whose last day is before today (a sample, a copy) ends on that day, so that its
    partitions all fill once processed instead of showing the days after it as missing.
    """
    setting = first_day_setting(environ)
    days = [] if setting else _listed(environ)
    today_s = _today(today).isoformat()
    start = setting or (days[0] if days else today_s)
    if setting or not days or days[-1] >= today_s:
        return dg.DailyPartitionsDefinition(start_date=start, end_offset=1, timezone="UTC")
    end = (dt.date.fromisoformat(days[-1]) + dt.timedelta(days=1)).isoformat()  # end_date is exclusive
    return dg.DailyPartitionsDefinition(start_date=start, end_date=end, timezone="UTC")


daily_partitions = partitions_for()


def last_partition(partitions: dg.DailyPartitionsDefinition = daily_partitions) -> str:
    """The last day with a partition now (today's for a live archive)."""
    return partitions.get_last_partition_key()


def days_around(day: str, before: int, after: int = 0) -> list[str]:
    """The day strings from `before` days before `day` to `after` days after it, oldest first."""
    d = dt.date.fromisoformat(day)
    return [(d + dt.timedelta(days=i)).isoformat() for i in range(-before, after + 1)]


def days_ending(day: str, length: int) -> list[str]:
    """The `length` days ending on `day`, oldest first: a window's partitions."""
    return days_around(day, length - 1)


def window_mapping(before: int, after: int = 0) -> dg.TimeWindowPartitionMapping:
    """Lineage of an asset reading the partitions `before` days before its own to `after` days after.

    Windows reach past the first and last partitions (D+1 of today does not exist yet); the
    parameter that allows it is marked beta, which is not worth a warning on every import.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.BetaWarning)
        return dg.TimeWindowPartitionMapping(start_offset=-before, end_offset=after,
                                             allow_nonexistent_upstream_partitions=True)
