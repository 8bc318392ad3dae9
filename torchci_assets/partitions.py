"""One partition per day of arrival: the archive's `day=YYYY-MM-DD` folders (UTC)."""

import dagster as dg

# end_offset=1 includes today's partition, so data landing today can be ingested before
# midnight (the sensor-driven relay and ad-hoc runs use it); the schedule processes
# yesterday once it is complete.
daily_partitions = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_offset=1, timezone="UTC")
