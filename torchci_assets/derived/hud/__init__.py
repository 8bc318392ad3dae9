"""The HUD: CI health of main commits and pull requests, daily CI metrics, and the static site."""
