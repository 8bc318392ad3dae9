"""Archive -> lake: every source read into its raw tables, anything unreadable into `rejects`."""
