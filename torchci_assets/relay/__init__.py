"""Relaying new upstream commits to allowlisted downstream backend repositories."""
