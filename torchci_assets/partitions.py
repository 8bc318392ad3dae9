"""One partition per day of arrival: the archive's `day=YYYY-MM-DD` folders (UTC), and the day
arithmetic every window over those partitions uses."""

import datetime as dt
import warnings

import dagster as dg

# end_offset=1 includes today's partition, so data landing today can be ingested before
# midnight (the sensor-driven relay and ad-hoc runs use it); the schedule processes
# yesterday once it is complete.
daily_partitions = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_offset=1, timezone="UTC")


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
