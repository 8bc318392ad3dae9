"""The error of a configuration file that cannot be used.

Its own module because both halves of the config file raise it: `config` (the relay, the log
classifier) and `guardian_config` (the trunk guardians), which `config` reads the guardians'
sections through.
"""


class ConfigError(ValueError):
    """A configuration file that cannot be used, with the place of the problem."""
