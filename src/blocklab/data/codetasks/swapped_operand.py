"""swapped-operand: are the two operands of one binary operation the wrong way round?

CuBERT ("Swapped Operand", after DeepBugs): take a function, pick one binary operation
whose operator is not commutative, swap its two operands (`a - b` -> `b - a`,
`x < y` -> `y < x`), and classify functions as correct (0) or buggy (1). Both versions of
every function with such an operation are emitted: exactly balanced, same file.

The swap is made in the text. Parentheses written around an operand travel with it, and
the result must mean the swapped operation and nothing else: its syntax tree must equal
the original's with the two operands exchanged. `a - b - c` swapped at its outer minus
needs parentheses that were not written (`c - (a - b)`); we add them only then, so a
buggy function carries no extra parentheses where none are needed.
"""

from __future__ import annotations

import ast
from collections import Counter

from blocklab.data.codetasks.operators import NON_COMMUTATIVE, Occurrence, occurrences
from blocklab.data.codetasks.source import PARSE_ERRORS, Function, splice

# Operands that never need parentheses, wherever they go.
_ATOMS = (
    ast.Name,
    ast.Constant,
    ast.Attribute,
    ast.Subscript,
    ast.Call,
    ast.List,
    ast.Dict,
    ast.Set,
    ast.ListComp,
    ast.DictComp,
    ast.SetComp,
)


def _exchange(occ: Occurrence) -> None:
    """Swap the operands in the tree itself (twice restores it)."""
    node = occ.node
    if isinstance(node, ast.BinOp):
        node.left, node.right = node.right, node.left
    else:
        node.left, node.comparators[0] = node.comparators[0], node.left


def _swap_text(fn: Function, occ: Occurrence, parenthesize: bool) -> str:
    lspan, rspan = fn.with_parens(occ.left), fn.with_parens(occ.right)
    left, right = fn.text[lspan[0] : lspan[1]], fn.text[rspan[0] : rspan[1]]
    if parenthesize:
        # Only an operand without parentheses of its own that is not an atom can need them.
        if lspan == fn.span(occ.left) and not isinstance(occ.left, _ATOMS):
            left = f"({left})"
        if rspan == fn.span(occ.right) and not isinstance(occ.right, _ATOMS):
            right = f"({right})"
    return splice(fn.text, [(*lspan, right), (*rspan, left)])


def swap_operands(fn: Function, rng, info: Counter) -> str | None:
    """The function with one operation's operands swapped, or None if it has none to swap."""
    candidates = [
        occ for occ in occurrences(fn) if occ.op in NON_COMMUTATIVE and fn.segment(occ.left) != fn.segment(occ.right)
    ]
    if not candidates:
        info["functions_without_candidate"] += 1
        return None
    occ = rng.choice(candidates)
    tree = ast.Module(body=[fn.node], type_ignores=[])
    _exchange(occ)
    expected = ast.dump(tree)
    _exchange(occ)
    for parenthesize in (False, True):
        try:
            mutated = _swap_text(fn, occ, parenthesize)
            if ast.dump(ast.parse(mutated)) == expected:
                return mutated
        except PARSE_ERRORS:
            pass
    info["mutations_failed"] += 1
    return None
