"""User-facing errors: the CLI prints these as one line and exits non-zero."""


class UserError(Exception):
    """A problem with the user's input (config, data, checkpoint, paths), not a bug."""


class ConfigError(UserError, ValueError):
    """A bad config value. A ValueError for library callers (the contract for every
    config class), and a UserError so the CLI prints it as one line."""


def import_extra(module: str, extra: str, purpose: str):
    """`module` imported, or a UserError naming the optional extra that installs it (`purpose`: what needs it)."""
    import importlib

    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        top = module.split(".")[0]
        if e.name is None or e.name.split(".")[0] != top:
            raise  # the package is there but one of its own imports is missing: not the user's to fix this way
        raise UserError(f"{purpose} needs the {top} package: pip install 'blocklab[{extra}]'") from None
