"""The HUD: CI health of main commits and pull requests, daily CI metrics, and their pages' HTML (the site that publishes them is `derived/site`)."""
