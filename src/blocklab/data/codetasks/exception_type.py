"""exception-type: which exception does this `except` clause catch?

CuBERT ("Exception Type"): in a function with `except` clauses, the exception type of one
clause is replaced by the token `__HOLE__`, and the model names it among the 20 most
frequent types of the data set. Multi-class, and not balanced: CuBERT keeps the natural
frequencies, where a few types (Exception, KeyError, ...) dominate.

One example per function at most. Only clauses that name a single class (`except
KeyError:`, `except socket.timeout as e:`) count: a tuple has no single answer and a
bare `except:` none at all. The label is the class as written (dotted names whole). The
clause is drawn before the class list is known, so a function's draw depends only on the
function; the list of kept classes is the one thing that depends on the whole input.
The other except clauses of the function stay as they are, as in CuBERT.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Iterable

from blocklab.data.codetasks.source import Function, parses, splice
from blocklab.data.examples import Example

HOLE = "__HOLE__"


def _dotted(node: ast.expr) -> bool:
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def mask_exception(fn: Function, rng, info: Counter) -> tuple[str, str] | None:
    """(the function with one exception type masked, that type), or None if no clause
    of the function names a single class."""
    clauses = sorted(
        (
            node
            for node in fn.own_nodes(signature=False)
            if isinstance(node, ast.ExceptHandler) and node.type is not None and _dotted(node.type)
        ),
        key=lambda n: (n.lineno, n.col_offset),
    )
    if not clauses:
        info["functions_without_candidate"] += 1
        return None
    clause = rng.choice(clauses)
    start, end = fn.span(clause.type)
    masked = splice(fn.text, [(start, end, HOLE)])
    if not parses(masked):
        info["mutations_failed"] += 1
        return None
    return masked, ast.unparse(clause.type)


def exception_examples(
    functions: Iterable[Function], seed: int, n_classes: int, info: Counter
) -> tuple[list[Example], list[str]]:
    """The examples and the class names (most frequent first, ties by name)."""
    found = []
    for fn in functions:
        masked = mask_exception(fn, fn.rng(seed, "exception-type"), info)
        if masked is not None:
            found.append((fn.doc, *masked))
    counts = Counter(label for _, _, label in found)
    label_names = sorted(counts, key=lambda name: (-counts[name], name))[:n_classes]
    index = {name: i for i, name in enumerate(label_names)}
    examples = [Example(text, index[label], doc=doc) for doc, text, label in found if label in index]
    info["classes_seen"] = len(counts)
    info["examples_of_rarer_classes_dropped"] = len(found) - len(examples)
    return examples, label_names
