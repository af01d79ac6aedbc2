"""One function, one example: copies of a function are found by a hash of its syntax tree.

The Python environment holds the same function in several files (a vendored package beside
the package itself, a helper copied between projects), so without this one function can land
in both splits of a task, or in a task's validation split and the pre-training run's training
split, and the score then measures recall rather than understanding.

Two functions are the same when `ast.dump` of their defs is equal, with these choices:
- no positions (`ast.dump`'s default): a copy re-indented (a function become a method), with
  its comments, blank lines, line wrapping, parentheses or quote style changed is the same
  function; vendoring tools and formatters change exactly these;
- the docstring compared as `inspect.cleandoc` leaves it (what `ast.get_docstring` returns), so
  its indentation does not count either; its words do: docstring-mismatch reads them, and a
  copy whose docstring was rewritten is another example there;
- decorators left out: the task's text leaves them out too (source.function_text);
- any other difference in names, literals or structure makes another function.
The digest is taken of the def as parsed within its file, so the same code gives the same
digest whichever file holds it, in the task's pool or in the pre-training corpus.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Collection, Iterable, Iterator

from blocklab.data.codetasks.source import FUNCTION_NODES, PARSE_ERRORS, Function, function_digest, normalize


def file_digests(text: str) -> Iterator[bytes]:
    """The digest of every function of one file (none if it does not parse)."""
    if "def " not in text:  # most documents of a prose corpus: no parse needed to know
        return
    try:
        tree = ast.parse(normalize(text))
    except PARSE_ERRORS:
        return
    for node in ast.walk(tree):
        if isinstance(node, FUNCTION_NODES):
            yield function_digest(node)


def distinct(functions: Iterable[Function], exclude: Collection[bytes], info: Counter) -> Iterator[Function]:
    """The first of each group of copies, and none of those whose digest is in `exclude` (the
    pre-training split's functions). Dropping a function changes no other function's draws:
    those are seeded by the function's own place (source.rng_for)."""
    seen: set[bytes] = set()
    for fn in functions:
        if fn.digest in exclude:
            info["functions_in_pretraining"] += 1
        elif fn.digest in seen:
            info["functions_duplicate"] += 1
        else:
            seen.add(fn.digest)
            yield fn
