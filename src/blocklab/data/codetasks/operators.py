"""Binary operators: how each is spelled, which may stand in for which, where one is written.

Shared by wrong-operator (replace an operator) and swapped-operand (swap its operands).
An "occurrence" is one operator between two operands: a BinOp, a Compare with a single
operator (`a < b < c` is two comparisons and neither can be changed alone), or one of
the operators of a BoolOp (`a and b or` ... `a and b and c` holds two).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from blocklab.data.codetasks.source import Function

SPELLING: dict[type, str] = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
    ast.MatMult: "@",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.BitAnd: "&",
    ast.BitOr: "|",
    ast.BitXor: "^",
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Is: "is",
    ast.IsNot: "is not",
    ast.In: "in",
    ast.NotIn: "not in",
    ast.And: "and",
    ast.Or: "or",
}

# Operators that can replace one another (CuBERT: "type-compatible"). CuBERT's groups are
# arithmetic, comparison and boolean; we also let the bitwise operators replace one
# another. `@` has no partner and is never replaced.
GROUPS: tuple[tuple[str, ...], ...] = (
    ("+", "-", "*", "/", "//", "%", "**"),
    ("<<", ">>", "&", "|", "^"),
    ("==", "!=", "<", "<=", ">", ">=", "is", "is not", "in", "not in"),
    ("and", "or"),
)
PARTNERS: dict[str, tuple[str, ...]] = {
    op: tuple(other for other in group if other != op) for group in GROUPS for op in group
}

# a op b != b op a. Left out: the commutative + * == != & | ^ and or, and `is` / `is not`,
# whose swap changes nothing a reader could call a bug.
NON_COMMUTATIVE = frozenset({"-", "/", "//", "%", "**", "@", "<<", ">>", "<", "<=", ">", ">=", "in", "not in"})


@dataclass
class Occurrence:
    node: ast.BinOp | ast.Compare | ast.BoolOp
    left: ast.expr
    right: ast.expr
    op: str  # its spelling

    def key(self) -> tuple[int, int, int, int]:
        return (self.left.lineno, self.left.col_offset, self.right.lineno, self.right.col_offset)


def is_string_format(node: ast.AST) -> bool:
    """`"..." % args`: string formatting written as an operator. Left out of both operator tasks: a
    string literal beside the operator gives a swap or a replacement away (it made 29% of the standard
    library's swapped-operand pairs), so it would measure nothing about the encoder. CuBERT keeps it."""
    return (
        isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.Mod)
        and isinstance(node.left, (ast.Constant, ast.JoinedStr))
        and isinstance(getattr(node.left, "value", ""), (str, bytes))
    )


def occurrences(fn: Function) -> list[Occurrence]:
    """Every binary operator of the function's own scope, in source order (string formatting aside)."""
    found = []
    for node in fn.own_nodes():
        if is_string_format(node):
            continue
        if isinstance(node, ast.BinOp):
            found.append(Occurrence(node, node.left, node.right, SPELLING[type(node.op)]))
        elif isinstance(node, ast.Compare) and len(node.ops) == 1:
            found.append(Occurrence(node, node.left, node.comparators[0], SPELLING[type(node.ops[0])]))
        elif isinstance(node, ast.BoolOp):
            op = SPELLING[type(node.op)]
            found += [Occurrence(node, a, b, op) for a, b in zip(node.values, node.values[1:])]
    return sorted(found, key=Occurrence.key)


def operator_span(fn: Function, occ: Occurrence) -> tuple[int, int] | None:
    """Where the operator is written: its token(s) between the end of the left operand and
    the start of the right one (parentheses may sit there too). None if not found."""
    words = occ.op.split()  # "is not" and "not in" are two NAME tokens
    between = fn.tokens_between(fn.span(occ.left)[1], fn.span(occ.right)[0])
    toks = [tok for tok in between if tok.string != "(" and tok.string != ")"]
    if [tok.string for tok in toks] != words:
        return None
    return toks[0].start, toks[-1].end
