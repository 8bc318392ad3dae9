"""Dr. CI: one comment per open pull request that says which of its head's failures are its own."""
