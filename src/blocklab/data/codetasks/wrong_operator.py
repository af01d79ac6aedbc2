"""wrong-operator: is one binary operator of this function the wrong one?

CuBERT ("Wrong Binary Operator", after DeepBugs, Pradel & Sen 2018): take a function,
replace one binary operator occurrence by a different, type-compatible one, and classify
functions as correct (0) or buggy (1). Both versions of every function where a
replacement is possible are emitted, so the task is exactly balanced and a split by file
keeps the pair together.

The replacement is made in the text, at the operator's tokens, so the rest of the
function keeps its exact spelling. A new operator with a different precedence can regroup
its neighbours (`a + b * c` -> `a ** b * c`): that is still the text a programmer who
typed the wrong operator would have written, so we keep it, as long as it parses.
Deviation: CuBERT's groups are arithmetic, comparison and boolean; we add a bitwise group.
"""

from __future__ import annotations

from collections import Counter

from blocklab.data.codetasks.operators import PARTNERS, occurrences, operator_span
from blocklab.data.codetasks.source import Function, parses, splice


def _spaced(text: str, start: int, end: int, new: str) -> str:
    """A word operator (`in`, `is not`, `or`) put where `<` stood must not run into its
    neighbours: `a<b` -> `a in b`, not `ainb`."""
    if new[0].isalpha() and start > 0 and not text[start - 1].isspace():
        new = " " + new
    if new[-1].isalpha() and end < len(text) and not text[end].isspace():
        new = new + " "
    return new


def wrong_operator(fn: Function, rng, info: Counter) -> str | None:
    """The function with one operator replaced, or None if it has none to replace."""
    candidates = [occ for occ in occurrences(fn) if occ.op in PARTNERS]
    if not candidates:
        info["functions_without_candidate"] += 1
        return None
    occ = rng.choice(candidates)
    new = rng.choice(PARTNERS[occ.op])
    span = operator_span(fn, occ)
    if span is None:
        info["mutations_failed"] += 1
        return None
    start, end = span
    mutated = splice(fn.text, [(start, end, _spaced(fn.text, start, end, new))])
    if not parses(mutated):
        info["mutations_failed"] += 1
        return None
    return mutated
