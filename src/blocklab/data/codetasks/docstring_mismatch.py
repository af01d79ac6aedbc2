"""docstring-mismatch: does this docstring belong to this function?

CuBERT ("Function-Docstring Mismatch", after Louis et al. 2018): a pair of a docstring
and a function body with its docstring taken out; the pair is a match (0) when the
docstring is the function's own, a mismatch (1) when it is the docstring of another
function drawn at random from the data set. Every function with a docstring gives one
pair of each kind: exactly balanced, both under the function's own file.

text = the docstring (cleaned as `inspect.cleandoc` does, like `ast.get_docstring`),
text_pair = the function's source without it. The negative's docstring is drawn from the
whole input (or, given `side`, from the functions whose file goes to the same split), so
this task's negatives (alone among the five) depend on the other files;
the draw is still seeded by the function alone, and a docstring with the very same text
as the function's own is never drawn (that "mismatch" would be a match).
"""

from __future__ import annotations

import ast
import random
from collections import Counter
from collections.abc import Callable, Hashable, Iterable

from blocklab.data.codetasks.source import Function, parses, rng_for, splice
from blocklab.data.examples import Example

_TRIES = 20


def without_docstring(fn: Function) -> str | None:
    """The function's source with its docstring statement removed: its lines go when it
    has them to itself, else (one-line defs, `"doc"; x = 1`, or a body that is nothing
    but the docstring) the statement becomes `pass`, so the code still parses."""
    first = fn.node.body[0]
    start, end = fn.span(first)
    line_start = fn.text.rfind("\n", 0, start) + 1
    line_end = fn.text.find("\n", end) + 1  # the text always ends with "\n"
    after = fn.text[end:line_end].strip()
    own_lines = not fn.text[line_start:start].strip() and (not after or after.startswith("#"))
    if own_lines and len(fn.node.body) > 1:
        code = splice(fn.text, [(line_start, line_end, "")])
    else:
        code = splice(fn.text, [(start, end, "pass")])
    return code if parses(code) else None


def docstring_examples(
    functions: Iterable[Function], seed: int, info: Counter, side: Callable[[str], Hashable] | None = None
) -> list[Example]:
    found = []  # (doc, pos, docstring, code, key)
    for fn in functions:
        docstring = ast.get_docstring(fn.node)
        if not docstring or not docstring.strip():
            info["functions_without_candidate"] += 1
            continue
        code = without_docstring(fn)
        if code is None:
            info["mutations_failed"] += 1
            continue
        found.append((fn.doc, fn.pos, docstring, code, fn.key))

    sides: dict[Hashable, list] = {}
    for item in found:
        sides.setdefault(side(item[0]) if side else None, []).append(item)
    examples = []
    info["no_other_docstring"] += 0  # listed even when zero
    for doc, pos, docstring, code, key in found:
        pool = sides[side(doc) if side else None]
        other = _other_docstring(pool, docstring, rng_for(seed, "docstring-mismatch", doc, pos))
        if other is None:  # every docstring in the input reads the same
            info["no_other_docstring"] += 1
            continue
        examples.append(Example(docstring, 0, text_pair=code, doc=doc, group=key))
        examples.append(Example(other, 1, text_pair=code, doc=doc, group=key))
    return examples


def _other_docstring(found: list, own: str, rng: random.Random) -> str | None:
    for _ in range(_TRIES):
        other = found[rng.randrange(len(found))][2]
        if other != own:
            return other
    # Nearly every docstring is this one: take the next different one after a random start.
    start = rng.randrange(len(found))
    for i in range(len(found)):
        other = found[(start + i) % len(found)][2]
        if other != own:
            return other
    return None
