"""User-facing errors: the CLI prints these as one line and exits non-zero."""


class UserError(Exception):
    """A problem with the user's input (config, data, checkpoint, paths), not a bug."""
