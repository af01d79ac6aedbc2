"""User-facing errors: the CLI prints these as one line and exits non-zero."""


class UserError(Exception):
    """A problem with the user's input (config, data, checkpoint, paths), not a bug."""


class ConfigError(UserError, ValueError):
    """A bad config value. A ValueError for library callers (the contract for every
    config class), and a UserError so the CLI prints it as one line."""
