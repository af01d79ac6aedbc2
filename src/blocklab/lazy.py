"""A package's exports imported on first use (PEP 562's module __getattr__): the package names what it exports
and the module each lives in, so that importing the package (the command line's --help, a config file) does
not import torch."""

from __future__ import annotations

import importlib
import sys


def lazy_exports(package: str, table: dict[str, str]):
    """(__getattr__, __dir__) for `package`: its attribute NAME is the attribute of that name of the module
    `table[NAME]` (a full module path, or one relative to the package)."""

    def __getattr__(name: str):
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        where = table[name]
        # Not kept on the package: a test that patches the module's attribute is seen through the package too.
        return getattr(importlib.import_module(where if where.startswith("blocklab") else f"{package}.{where}"), name)

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(table))

    return __getattr__, __dir__
