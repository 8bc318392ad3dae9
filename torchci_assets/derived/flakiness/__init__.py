"""Flaky and broken verdicts, the disabled and slow test lists, platform smoke sets."""
