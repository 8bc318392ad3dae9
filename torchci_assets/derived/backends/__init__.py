"""Downstream backends: health over windows of their results, and relay levels."""
