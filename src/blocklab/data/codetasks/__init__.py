"""CuBERT's five classification tasks, built from Python source files.

Kanade et al., "Learning and Evaluating Contextual Embedding of Source Code" (ICML 2020)
fine-tune a code encoder on five function-level tasks, each made mechanically from
ordinary code, so a GLUE-like score needs nothing but Python files:

    exception-type      which class does the masked `except __HOLE__:` catch? (20 classes)
    variable-misuse     is one variable use replaced by another variable?       (binary)
    wrong-operator      is one binary operator replaced by a compatible one?    (binary)
    swapped-operand     are the operands of one non-commutative operation swapped? (binary)
    docstring-mismatch  does this docstring belong to this function? (text pair, binary)

Every function (def or async def, methods and nested functions too) is a candidate; the
model sees its source, dedented. Each task module says how its examples are made and where
it departs from CuBERT. What the five share:

- The tree comes from `ast`, operator positions from `tokenize`; a mutation splices the
  function's text at those positions (never a regex, never ast.unparse, so the rest keeps
  its exact spelling) and must still parse.
- The binary tasks emit the correct and the mutated version of every function that can be
  mutated: exactly balanced, and both under the same file (Example.doc), so a split by
  file keeps a pair on one side.
- Deterministic: each function's draws come from its own generator, seeded by (seed, task,
  file name, the function's index in its file); only the class list of exception-type
  and the negatives of docstring-mismatch depend on the other files (the negatives on
  those of the same split, given `side`).
- Examples made from one function share `Example.group`, so that a later filter (the
  model's length) keeps or drops them together: a mutation that lengthens the text must
  not make length tell the label.
- One function, one example: copies of a function (vendored packages) are kept once, the
  first in input order, and `exclude` drops those a pre-training run trained on (dedup.py),
  so no function is in two splits; both counts are in the info.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Hashable, Iterable
from dataclasses import dataclass, field

from blocklab.data.codetasks.dedup import distinct
from blocklab.data.codetasks.docstring_mismatch import docstring_examples
from blocklab.data.codetasks.exception_type import HOLE, exception_examples
from blocklab.data.codetasks.source import Function, read_functions
from blocklab.data.codetasks.swapped_operand import swap_operands
from blocklab.data.codetasks.variable_misuse import misuse_variable
from blocklab.data.codetasks.wrong_operator import wrong_operator
from blocklab.data.documents import Document
from blocklab.data.examples import Example
from blocklab.errors import UserError

CODE_TASKS: tuple[str, ...] = (
    "exception-type",
    "variable-misuse",
    "wrong-operator",
    "swapped-operand",
    "docstring-mismatch",
)

# The three tasks that mutate one function at a time: function -> mutated text or None.
_MUTATIONS = {"variable-misuse": misuse_variable, "wrong-operator": wrong_operator, "swapped-operand": swap_operands}

# Every count, in this order, even when zero, so logs of different runs line up.
_COUNTS = (
    "files",
    "files_failed",
    "functions",
    "functions_too_long",
    "functions_failed",
    "functions_duplicate",
    "functions_in_pretraining",
    "functions_without_candidate",
    "mutations_failed",
)


@dataclass
class CodeTask:
    name: str
    examples: list[Example]  # .doc: the Document.name the example came from
    label_names: list[str]  # index = label
    info: dict = field(default_factory=dict)


def build_code_task(
    name: str,
    docs: Iterable[Document],
    seed: int = 0,
    max_chars: int = 2000,
    n_exception_classes: int = 20,
    side: Callable[[str], Hashable] | None = None,
    exclude: Collection[bytes] = frozenset(),
) -> CodeTask:
    """The task's examples from `docs`, in file order then function order.

    Files that do not parse are skipped (and counted), so are functions whose source is
    longer than `max_chars` characters (measured before any mutation, docstring included).
    `side(file name)` names the split a file will go to: docstring-mismatch then draws a
    negative's docstring from the function's own side only, so that no validation docstring
    appears in a training pair. A function is used once however many copies of it the input
    holds, and not at all if its digest (source.function_digest) is in `exclude`.
    """
    if name not in CODE_TASKS:
        raise UserError(f"unknown code task {name!r}: valid tasks are {', '.join(CODE_TASKS)}")
    info = Counter({key: 0 for key in _COUNTS})
    functions = distinct(read_functions(docs, max_chars, info), exclude, info)
    if name == "exception-type":
        examples, label_names = exception_examples(functions, seed, n_exception_classes, info)
    elif name == "docstring-mismatch":
        examples, label_names = docstring_examples(functions, seed, info, side), ["match", "mismatch"]
    else:
        examples, label_names = _binary_examples(name, functions, seed, info), ["correct", "buggy"]
    per_label = Counter(ex.label for ex in examples)
    return CodeTask(
        name,
        examples,
        label_names,
        info={
            "task": name,
            **info,
            "examples": len(examples),
            "examples_per_label": {label: per_label[i] for i, label in enumerate(label_names)},
        },
    )


def _binary_examples(name: str, functions: Iterable[Function], seed: int, info: Counter) -> list[Example]:
    mutate = _MUTATIONS[name]
    examples = []
    for fn in functions:
        mutated = mutate(fn, fn.rng(seed, name), info)
        if mutated is None:  # counted by `mutate`: no candidate, or a failed mutation
            continue
        examples.append(Example(fn.text, 0, doc=fn.doc, group=fn.key))
        examples.append(Example(mutated, 1, doc=fn.doc, group=fn.key))
    return examples


__all__ = ["CODE_TASKS", "CodeTask", "build_code_task", "HOLE"]
