"""A name with a leading underscore is its module's own: no other module of the package imports it or
reads it off the module (`from m import _x`, `m._x`). A name two modules share is public."""

import ast
from pathlib import Path

import blocklab

SRC = Path(blocklab.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_uses(path: Path) -> list[tuple[int, str]]:
    """(line, module.name) of every private name of another blocklab module that `path` uses."""
    tree = ast.parse(path.read_text())
    here, modules, uses = module_name(path), {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("blocklab.") and a.asname:
                    modules[a.asname] = a.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("blocklab"):
            for a in node.names:
                if private(a.name):
                    uses.append((node.lineno, f"{node.module}.{a.name}"))
                else:  # `from blocklab.pkg import mod as m`: m is a module if pkg.mod is one
                    modules[a.asname or a.name] = f"{node.module}.{a.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and private(node.attr):
            target = modules.get(node.value.id)
            if target is not None and target != here:
                uses.append((node.lineno, f"{target}.{node.attr}"))
    return uses


def test_no_module_uses_another_modules_private_names():
    found = [
        f"{path.relative_to(SRC.parent)}:{line}: {name}"
        for path in sorted(SRC.rglob("*.py"))
        for line, name in private_uses(path)
    ]
    assert not found, "private names used across modules:\n" + "\n".join(found)
