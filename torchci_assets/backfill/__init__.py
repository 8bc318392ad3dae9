"""Bring your own repository: GitHub's REST API -> ordinary archive files (`torchci backfill`),
and gap repair for deliveries GitHub never made."""
