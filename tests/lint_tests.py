"""Find tests that cannot fail: `python tests/lint_tests.py [FILES...]` prints one line per finding
and exits 1 if there is any (tests/test_lint_tests.py runs it over tests/).

Three rules, read from the source with `ast`:

- no-check: a test function with no check in it. A check is an `assert`, a `with pytest.raises`
  or `pytest.warns`, `pytest.fail`, or a call of a helper that checks: any function whose name starts
  with `assert` or `check` (torch.testing.assert_close, np.testing.assert_array_equal, ...) or any
  function defined under tests/ that itself checks (found here, to any depth of helpers).
- self-compare: `x == x`, `x is x` and the like, where both sides are the same expression.
- exists-only: a test whose every assert is only that a file exists or is not empty
  (`.exists()`, `.is_file()`, `.is_dir()`, `.stat().st_size > 0`): its content is never looked at.

A finding that is right as it is goes in ALLOWED with one line of reason.
"""

import ast
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

# "path::function": why it needs no further check.
ALLOWED: dict[str, str] = {
    "tests/test_settings.py::test_valid_values_pass_and_none_only_where_the_annotation_allows_it": (
        "a validator's accepting side: the check is that construction raises nothing"
    ),
}

RAISING = {"raises", "warns", "deprecated_call", "fail"}
EXISTS = {"exists", "is_file", "is_dir"}


def _name(func: ast.expr) -> str:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _is_check_call(node: ast.Call, checkers: set[str]) -> bool:
    name = _name(node.func)
    if name.startswith(("assert", "check")) or name in checkers:
        return True
    return name in RAISING and isinstance(node.func, ast.Attribute) and _name(node.func.value) == "pytest"


def _checks(fn: ast.AST, checkers: set[str]) -> bool:
    """Whether `fn` holds a check, not counting the bodies of functions nested in it."""
    stack = list(ast.iter_child_nodes(fn))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Assert):
            return True
        if isinstance(node, ast.Call) and _is_check_call(node, checkers):
            return True
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            stack.extend(ast.iter_child_nodes(node))
    return False


def _functions(tree: ast.AST):
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def checking_helpers(trees: list[ast.AST]) -> set[str]:
    """Names of the functions under tests/ that check, directly or through other such functions."""
    fns = [f for t in trees for f in _functions(t) if not f.name.startswith("test")]
    found: set[str] = set()
    while True:
        more = {f.name for f in fns if f.name not in found and _checks(f, found)}
        if not more:
            return found
        found |= more


def _is_exists_only(test: ast.AST) -> bool:
    asserts = [n for n in ast.walk(test) if isinstance(n, ast.Assert)]
    if not asserts or any(isinstance(n, ast.Call) and _name(n.func) in RAISING for n in ast.walk(test)):
        return False

    def existence(e: ast.expr) -> bool:
        if isinstance(e, ast.BoolOp):
            return all(existence(v) for v in e.values)
        if isinstance(e, ast.Call) and _name(e.func) in EXISTS:
            return True
        if isinstance(e, ast.Compare) and isinstance(e.left, ast.Attribute) and e.left.attr == "st_size":
            return True
        return False

    return all(existence(a.test) for a in asserts)


def findings(paths: list[Path]) -> list[str]:
    every = {p: ast.parse(p.read_text(), str(p)) for p in TESTS.rglob("*.py")}
    trees = {p: every[p] if p in every else ast.parse(p.read_text(), str(p)) for p in paths}
    checkers = checking_helpers(list({**every, **trees}.values()))
    out = []
    for path, tree in trees.items():
        rel = path.relative_to(TESTS.parent) if path.is_relative_to(TESTS.parent) else path
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                for a, b in zip(sides, sides[1:]):
                    if ast.dump(a) == ast.dump(b):
                        out.append(f"{rel}:{node.lineno}: self-compare: {ast.unparse(a)} against itself")
        if not path.name.startswith("test_"):
            continue
        for fn in _functions(tree):
            if not fn.name.startswith("test") or f"{rel}::{fn.name}" in ALLOWED:
                continue
            if not _checks(fn, checkers):
                out.append(f"{rel}:{fn.lineno}: no-check: {fn.name} checks nothing")
            elif _is_exists_only(fn):
                out.append(f"{rel}:{fn.lineno}: exists-only: {fn.name} only checks that files exist")
    return out


def main(argv: list[str]) -> int:
    paths = [Path(a).resolve() for a in argv] or sorted(TESTS.rglob("*.py"))
    found = findings(paths)
    print("\n".join(found) or "no findings")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
