"""Test results joined with their jobs, and the daily aggregates every window reads."""
