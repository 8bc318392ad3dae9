"""Lake -> lake and outputs: one folder per domain, each with its assets, its pure logic and its definitions."""
