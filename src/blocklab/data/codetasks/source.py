"""The functions of a Python file, each as its own small program to mutate.

Every task works on one function at a time. We cut the function's text out of its file,
remove the indentation of its `def`, and parse that text again on its own: from then on
every ast position and every token position refers to the text the model will see, so a
mutation is a splice of that text and nothing has to be translated back to the file.

Two position systems meet here. `ast` gives (line, column) with the column in UTF-8
*bytes*; `tokenize` gives (line, column) in *characters*. A line holding "é" or "日" makes
them differ, so both are turned into one character offset into the function's text.
"""

from __future__ import annotations

import ast
import hashlib
import io
import random
import tokenize
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from blocklab.data.documents import Document

# What a file may throw at ast.parse besides SyntaxError: NUL bytes (ValueError), nesting
# deeper than the parser's stack (RecursionError), lone surrogates (UnicodeError).
PARSE_ERRORS = (SyntaxError, ValueError, RecursionError, UnicodeError, MemoryError)

FUNCTION_NODES = (ast.FunctionDef, ast.AsyncFunctionDef)
# A nested def, class or lambda is a scope of its own (and a nested def is a candidate of
# its own). f-strings are left out because before Python 3.12 the positions of the
# expressions inside them are unreliable and tokenize sees one opaque STRING token.
_NOT_OWN = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.JoinedStr)
_TRIVIA = (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)
DIGEST_BYTES = 8  # a collision among a million functions has odds of about 3e-8 (and drops one function)


def split_lines(text: str) -> list[str]:
    """Lines with their "\\n", split the way Python's parser splits them: str.splitlines
    would also split at form feeds and other characters the parser treats as text."""
    lines = [line + "\n" for line in text.split("\n")]
    lines[-1] = lines[-1][:-1]
    return lines if lines[-1] else lines[:-1]


def normalize(text: str) -> str:
    """One line end and no BOM, so that line numbers mean the same thing to ast, tokenize
    and our own line list."""
    return text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


@dataclass(frozen=True)
class Token:
    type: int
    string: str
    start: int  # character offsets into the function's text
    end: int


@dataclass
class Function:
    """One function: its dedented source `text`, that text parsed (`node`, the def itself),
    and where it came from (`doc`, and `pos`, its index among the file's functions)."""

    doc: str
    pos: int
    text: str
    node: ast.FunctionDef | ast.AsyncFunctionDef = field(repr=False)
    digest: bytes = field(default=b"", repr=False)  # what copies of it share (dedup.py)
    _starts: list[int] = field(init=False, repr=False)
    _lines: list[str] = field(init=False, repr=False)
    _tokens: list[Token] | None = field(default=None, init=False, repr=False)

    def __post_init__(self):
        self._lines = split_lines(self.text)
        self._starts = [0]
        for line in self._lines:
            self._starts.append(self._starts[-1] + len(line))

    @property
    def key(self) -> str:
        """The function's name among all the input's functions (Example.group)."""
        return f"{self.doc}#{self.pos}"

    def rng(self, seed: int, task: str) -> random.Random:
        return rng_for(seed, task, self.doc, self.pos)

    def offset(self, lineno: int, col_bytes: int) -> int:
        line = self._lines[lineno - 1] if lineno <= len(self._lines) else ""
        if not line.isascii():
            col_bytes = len(line.encode("utf-8")[:col_bytes].decode("utf-8"))
        return self._starts[lineno - 1] + col_bytes

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (self.offset(node.lineno, node.col_offset), self.offset(node.end_lineno, node.end_col_offset))

    def segment(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.text[start:end]

    def tokens(self) -> list[Token]:
        """The significant tokens (no comments, line ends or indentation), made on the
        first call: most functions never need them."""
        if self._tokens is None:
            self._tokens = []  # stays empty if tokenize disagrees with ast: no mutation then
            try:
                self._tokens = self._tokenize()
            except (tokenize.TokenError, SyntaxError):
                pass
        return self._tokens

    def _tokenize(self) -> list[Token]:
        return [
            Token(
                tok.type,
                tok.string,
                self._starts[tok.start[0] - 1] + tok.start[1],
                self._starts[tok.end[0] - 1] + tok.end[1],
            )
            for tok in tokenize.generate_tokens(io.StringIO(self.text).readline)
            if tok.type not in _TRIVIA
        ]

    def tokens_between(self, start: int, end: int) -> list[Token]:
        return [tok for tok in self.tokens() if tok.start >= start and tok.end <= end]

    def with_parens(self, node: ast.AST) -> tuple[int, int]:
        """The node's span grown to take in the parentheses written around it, so that
        moving `(a + b)` moves its parentheses too. A "(" right before a whole expression
        and a ")" right after it can only be a pair that groups exactly that expression."""
        start, end = self.span(node)
        toks = self.tokens()
        while True:
            before = [t for t in toks if t.end <= start]
            after = [t for t in toks if t.start >= end]
            if not (before and after and before[-1].string == "(" and after[0].string == ")"):
                return start, end
            start, end = before[-1].start, after[0].end

    def own_nodes(self, signature: bool = True) -> Iterator[ast.AST]:
        """The nodes of this function's own scope, in no particular order: its signature
        (unless `signature=False`) and body, not the insides of nested defs, classes,
        lambdas and f-strings."""
        todo = list(self.node.body)
        if signature:
            todo += [self.node.args] + ([self.node.returns] if self.node.returns else [])
        while todo:
            node = todo.pop()
            yield node
            todo.extend(child for child in ast.iter_child_nodes(node) if not isinstance(child, _NOT_OWN))


def function_digest(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bytes:
    """What copies of a function share: see dedup.py for what counts as a copy. Taken of the def
    as parsed within its file, so it does not depend on how the file is cut up."""
    fields = {name: getattr(node, name, None) for name in node._fields}
    docstring = ast.get_docstring(node, clean=True)
    if docstring is not None:
        fields["body"] = [ast.Expr(ast.Constant(docstring)), *node.body[1:]]
    fields["decorator_list"] = []
    text = ast.dump(type(node)(**fields))
    return hashlib.blake2b(text.encode("utf-8"), digest_size=DIGEST_BYTES).digest()


def rng_for(seed: int, task: str, doc: str, pos: int) -> random.Random:
    """A function's own random draws. A string seed is hashed with sha512, the same in
    every process, so the draws depend on nothing but the seed, the task and where the
    function is: adding or removing other files changes none of them."""
    return random.Random(f"{seed}\x00{task}\x00{doc}\x00{pos}")


def splice(text: str, edits: Iterable[tuple[int, int, str]]) -> str:
    """`text` with each (start, end) range replaced; the ranges must not overlap."""
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return text


def parses(text: str) -> bool:
    try:
        ast.parse(text)
    except PARSE_ERRORS:
        return False
    return True


def function_text(lines: list[str], node: ast.AST) -> str:
    """The def's source (decorators left out), its indentation removed from every line.

    textwrap.dedent would stop at the least indented line, which can be a line inside a
    multi-line string; removing exactly the def's own indentation from the lines that start
    with it always leaves a method at column 0 and code that parses."""
    first, last = lines[node.lineno - 1], lines[node.end_lineno - 1]
    end_chars = len(last.encode("utf-8")[: node.end_col_offset].decode("utf-8"))
    body = lines[node.lineno - 1 : node.end_lineno - 1] + [last[:end_chars] + "\n"]
    indent = first[: len(first) - len(first.lstrip(" \t\f"))]
    if indent:
        body = [line[len(indent) :] if line.startswith(indent) else line for line in body]
    return "".join(body)


def read_functions(docs: Iterable[Document], max_chars: int, info: Counter) -> Iterator[Function]:
    """Every function of every file that parses, nested ones and methods included, in file
    order then source order. Counts files, failures and skips in `info`."""
    for doc in docs:
        info["files"] += 1
        text = normalize(doc.text)
        try:
            tree = ast.parse(text)
        except PARSE_ERRORS:
            info["files_failed"] += 1
            continue
        lines = split_lines(text)
        defs = sorted(
            (n for n in ast.walk(tree) if isinstance(n, FUNCTION_NODES)), key=lambda n: (n.lineno, n.col_offset)
        )
        for pos, node in enumerate(defs):
            info["functions"] += 1
            source = function_text(lines, node)
            if len(source) > max_chars:
                info["functions_too_long"] += 1
                continue
            try:
                own = ast.parse(source).body[0]
            except PARSE_ERRORS:
                info["functions_failed"] += 1
                continue
            yield Function(doc.name, pos, source, own, function_digest(node))
