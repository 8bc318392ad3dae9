"""The archive's sources and the days it holds: what `torchci run` checks its `--from`/`--to`
against before it loads Dagster, and what the daily partitions start from."""

from resources.storage import Store

ARCHIVE_SOURCES = ("webhooks", "test-reports", "test-runs", "ci-results", "logs")


def archive_days(store: Store) -> list[str]:
    """Every `day=` folder of the archive's sources, sorted."""
    days: set[str] = set()
    for source in ARCHIVE_SOURCES:
        days.update(store.list_days(source))
    return sorted(days)
