"""variable-misuse: does this function use the wrong variable somewhere?

CuBERT ("Variable-Misuse Classification", after Allamanis et al. 2018 and Vasic et al.
2019): take a function, replace one use of a variable by another variable of the same
function, and classify functions as correct (0) or buggy (1). Both versions of every
function where a replacement is possible are emitted: exactly balanced, same file.

A function's variables here are its parameters and the plain names it assigns (`x = `,
`for x in`, `with ... as x`, tuple targets, `x := `). Deviation from CuBERT, which takes
every variable in scope: names bound by `import`, `except ... as`, `global`/`nonlocal`,
comprehension targets and the enclosing scopes are left out, since telling them apart
needs a full scope analysis and parameters plus assignments cover most of the uses.
A use is a read of one of those names in the body (not in defaults or annotations,
which run in the enclosing scope), outside nested defs, classes and lambdas.
"""

from __future__ import annotations

import ast
from collections import Counter

from blocklab.data.codetasks.source import Function, parses, splice


def local_names(fn: Function) -> set[str]:
    args = fn.node.args
    params = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
    names = {a.arg for a in params if a is not None}
    not_local, comprehension = set(), set()
    for node in fn.own_nodes():
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            not_local.update(node.names)
        elif isinstance(node, ast.comprehension):
            comprehension.update(id(n) for n in ast.walk(node.target))
    for node in fn.own_nodes():
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and id(node) not in comprehension:
            names.add(node.id)
    return names - not_local


def misuse_variable(fn: Function, rng, info: Counter) -> str | None:
    """The function with one variable use replaced by another variable, or None if it has
    fewer than two variables or never reads one."""
    names = local_names(fn)
    if len(names) < 2:
        info["functions_without_candidate"] += 1
        return None
    uses = sorted(
        (
            node
            for node in fn.own_nodes(signature=False)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in names
        ),
        key=lambda n: (n.lineno, n.col_offset),
    )
    if not uses:
        info["functions_without_candidate"] += 1
        return None
    use = rng.choice(uses)
    other = rng.choice(sorted(names - {use.id}))
    start, end = fn.span(use)
    if fn.text[start:end] != use.id:  # a position we cannot trust: leave the function alone
        info["mutations_failed"] += 1
        return None
    mutated = splice(fn.text, [(start, end, other)])
    if not parses(mutated):
        info["mutations_failed"] += 1
        return None
    return mutated
