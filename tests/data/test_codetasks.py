"""CuBERT's five code tasks: known mutations of known functions, the invariants every task
keeps (parses, balance, determinism, per-function seeding), and a smoke run on real files."""

import ast
import sysconfig
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from blocklab.data.codetasks import CODE_TASKS, HOLE, CodeTask, build_code_task
from blocklab.data.documents import Document
from blocklab.errors import UserError

BINARY = ("variable-misuse", "wrong-operator", "swapped-operand", "docstring-mismatch")


def build(task, *sources, **kw) -> CodeTask:
    docs = [Document(f"m{i}.py", textwrap.dedent(src)) for i, src in enumerate(sources)]
    return build_code_task(task, docs, **kw)


def pairs(task: CodeTask) -> list[tuple[str, str]]:
    """(correct, buggy) texts of a binary task, checking they come as neighbours."""
    exs = task.examples
    assert [ex.label for ex in exs] == [0, 1] * (len(exs) // 2)
    assert all(a.doc == b.doc for a, b in zip(exs[::2], exs[1::2]))
    return [(a.text, b.text) for a, b in zip(exs[::2], exs[1::2])]


def buggy_texts(task, src, seeds=range(12)) -> set[str]:
    """Every mutation the task makes of one function over a few seeds."""
    out = set()
    for seed in seeds:
        ((correct, buggy),) = pairs(build(task, src, seed=seed))
        assert correct == textwrap.dedent(src).lstrip("\n")
        out.add(buggy)
    return out


# --- each task on known functions ----------------------------------------------------------


def test_swapped_operand_known():
    assert buggy_texts("swapped-operand", "def f(a, b):\n    return a - b\n") == {"def f(a, b):\n    return b - a\n"}
    assert buggy_texts("swapped-operand", "def f(x, y):\n    return x < y\n") == {"def f(x, y):\n    return y < x\n"}


def test_swapped_operand_keeps_the_meaning_of_a_swap():
    # The outer minus of a - b - c needs parentheses that were not written; the inner does not.
    got = buggy_texts("swapped-operand", "def f(a, b, c):\n    return a - b - c\n", range(30))
    assert got == {"def f(a, b, c):\n    return c - (a - b)\n", "def f(a, b, c):\n    return b - a - c\n"}
    # Written parentheses travel with their operand; a commutative + is never swapped.
    got = buggy_texts("swapped-operand", "def f(a, b, c):\n    return (a + b) / c\n")
    assert got == {"def f(a, b, c):\n    return c / (a + b)\n"}


def test_swapped_operand_skips_commutative_and_equal_operands():
    task = build("swapped-operand", "def f(a, b):\n    return a + b == b * a and a - a\n")
    assert task.examples == [] and task.info["functions_without_candidate"] == 1


def test_string_formatting_is_no_operator_to_mutate():
    src = "def f(a, b):\n    return '%s' % a, f'{a}' % b, b'%d' % a\n"
    for task in ("swapped-operand", "wrong-operator"):
        assert build(task, src).examples == []
    # A modulo of numbers still is one.
    assert buggy_texts("swapped-operand", "def f(a, b):\n    return a % b\n") == {"def f(a, b):\n    return b % a\n"}


def test_wrong_operator_changes_exactly_one_operator():
    src = "def f(a, b):\n    c = a + b\n    return c\n"
    got = buggy_texts("wrong-operator", src, range(40))
    assert got == {src.replace("+", op) for op in ("-", "*", "/", "//", "%", "**")}
    got = buggy_texts("wrong-operator", "def f(a, b):\n    return a<b\n", range(60))
    # Word operators get the spaces they need; every comparison can stand in.
    assert {b.splitlines()[1] for b in got} == {f"    return a{op}b" for op in ("==", "!=", "<=", ">", ">=")} | {
        f"    return a {op} b" for op in ("is", "is not", "in", "not in")
    }


def test_wrong_operator_on_boolean_and_comparison_chains():
    src = "def f(a, b, c):\n    return a and b and c\n"
    assert buggy_texts("wrong-operator", src, range(20)) == {
        "def f(a, b, c):\n    return a or b and c\n",
        "def f(a, b, c):\n    return a and b or c\n",
    }
    src = "def f(a, b):\n    return a is not b\n"
    for buggy in buggy_texts("wrong-operator", src):
        tree = ast.parse(buggy)
        assert len(tree.body[0].body[0].value.ops) == 1 and "is not" not in buggy


def test_variable_misuse_replaces_one_use_by_another_local():
    src = """\
    def f(a, b):
        total = a
        for item in b:
            total = total + item
        return total
    """
    names = {"a", "b", "total", "item"}
    got = buggy_texts("variable-misuse", src, range(30))
    assert len(got) > 3
    for buggy in got:
        diff = [(x, y) for x, y in zip(_names(textwrap.dedent(src)), _names(buggy)) if x != y]
        assert len(diff) == 1 and diff[0][0][1] == "Load" and diff[0][1][0] in names - {diff[0][0][0]}


def _names(text):
    """(name, context) of every Name, in ast.walk order: the same order in both versions,
    since a misuse only changes one identifier."""
    return [(n.id, type(n.ctx).__name__) for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Name)]


def test_variable_misuse_needs_two_locals_and_leaves_nested_scopes_alone():
    assert build("variable-misuse", "def f(a):\n    return a + 1\n").examples == []
    src = "def f(a, b):\n    def g(x):\n        return x\n    return a\n"
    # f: its only use is `a`, so the mutation is `return b`; g has one local: nothing.
    assert [b for _, b in pairs(build("variable-misuse", src))] == [src.replace("return a", "return b")]


def test_exception_type_masks_the_class():
    src = """\
    def f(d, k):
        try:
            return d[k]
        except KeyError:
            return None
    """
    task = build("exception-type", src)
    assert task.label_names == ["KeyError"]
    (ex,) = task.examples
    assert ex.label == 0 and ex.doc == "m0.py"
    assert ex.text == textwrap.dedent(src).replace("except KeyError:", f"except {HOLE}:")


def test_exception_type_classes_by_frequency():
    fn = "def f{i}():\n    try:\n        pass\n    except {exc}:\n        pass\n"
    excs = ["socket.timeout", "ValueError", "KeyError", "KeyError", "ValueError", "OSError", "KeyError"]
    src = "".join(fn.format(i=i, exc=exc) for i, exc in enumerate(excs))
    src += "def g():\n    try:\n        pass\n    except (A, B):\n        pass\n    except:\n        pass\n"
    task = build("exception-type", src, n_exception_classes=3)
    assert task.label_names == ["KeyError", "ValueError", "OSError"]
    assert [task.label_names[ex.label] for ex in task.examples] == [e for e in excs if e != "socket.timeout"]
    assert task.info["examples_of_rarer_classes_dropped"] == 1
    assert task.info["functions_without_candidate"] == 1  # g: a tuple and a bare except
    full = build("exception-type", src)
    assert "socket.timeout" in full.label_names
    assert f"except {HOLE}:" in full.examples[0].text


def test_docstring_pair_and_mismatch():
    src = '''\
    def f(a):
        """Return a plus one."""
        return a + 1

    def g():
        """Say hello."""

    def h(): "One line."; return 2
    '''
    task = build("docstring-mismatch", src, seed=3)
    assert task.label_names == ["match", "mismatch"]
    exs = task.examples
    assert [ex.label for ex in exs] == [0, 1] * 3
    assert [(ex.text, ex.text_pair) for ex in exs[::2]] == [
        ("Return a plus one.", "def f(a):\n    return a + 1\n"),
        ("Say hello.", "def g():\n    pass\n"),
        ("One line.", "def h(): pass; return 2\n"),
    ]
    for match, mismatch in zip(exs[::2], exs[1::2]):
        assert mismatch.text_pair == match.text_pair and mismatch.text != match.text
        assert mismatch.text in {"Return a plus one.", "Say hello.", "One line."}


# --- what every task guarantees ------------------------------------------------------------


def _sample_sources():
    return [
        '''\
        import os

        class Box:
            def put(self, key, value, *, strict=False):
                """Store value under key."""
                old = self.items.get(key)
                if old is not None and strict:
                    raise KeyError(key)
                try:
                    self.items[key] = value * 2 - len(key) // 3
                except TypeError as exc:
                    raise ValueError(key) from exc
                return old

            async def fetch(self, n):
                """Fetch n things."""
                total = 0
                for i in range(n):
                    total = total + i % 7
                    if total >= n << 2:
                        break
                return total
        ''',
        "def broken(:\n    pass\n",
        '''\
        def label(name, width):
            """Pad a name: "é" is one character."""
            s = "é—日本" + name
            try:
                return s.ljust(width - len(s)) if len(s) < width else s
            except os.error:
                return name
        ''',
    ]


@pytest.mark.parametrize("task_name", CODE_TASKS)
def test_every_example_parses_and_binary_tasks_are_balanced(task_name):
    task = build(task_name, *_sample_sources())
    assert task.examples and task.info["files"] == 3 and task.info["files_failed"] == 1
    assert {ex.doc for ex in task.examples} <= {"m0.py", "m2.py"}
    for ex in task.examples:
        ast.parse(ex.text_pair if task_name == "docstring-mismatch" else ex.text)
    if task_name in BINARY:
        counts = Counter(ex.label for ex in task.examples)
        assert counts[0] == counts[1] == len(task.examples) // 2
        assert task.info["examples_per_label"] == dict(zip(task.label_names, [counts[0]] * 2))
        if task_name != "docstring-mismatch":
            assert all(a != b for a, b in pairs(task))


@pytest.mark.parametrize("task_name", CODE_TASKS)
def test_deterministic_and_seeded_per_function(task_name):
    a = build(task_name, *_sample_sources())
    assert a.examples == build(task_name, *_sample_sources()).examples
    assert a.label_names == build(task_name, *_sample_sources()).label_names
    if task_name in ("exception-type", "docstring-mismatch"):
        return  # their class list / negatives depend on the whole input, by design
    # One file's examples do not depend on which other files are present.
    alone = build_code_task(task_name, [Document("m0.py", textwrap.dedent(_sample_sources()[0]))])
    assert alone.examples == [ex for ex in a.examples if ex.doc == "m0.py"]


def test_different_seeds_can_differ():
    srcs = _sample_sources()
    for task_name in ("variable-misuse", "wrong-operator"):
        outs = {tuple(build(task_name, *srcs, seed=s).examples) for s in range(5)}
        assert len(outs) > 1


def test_non_ascii_before_the_operator():
    # ast columns are UTF-8 bytes: "é" and "日" before the operator shift them by 1 and 2.
    src = 'def f(a, b):\n    return ("é日", a - b)\n'
    ((_, buggy),) = pairs(build("swapped-operand", src))
    assert buggy == 'def f(a, b):\n    return ("é日", b - a)\n'
    for buggy in buggy_texts("wrong-operator", src):
        assert buggy.startswith('def f(a, b):\n    return ("é日", a ') and buggy.endswith(" b)\n")
    ((_, buggy),) = pairs(build("variable-misuse", 'def f(a, b):\n    return "é日" + a\n'))
    assert buggy == 'def f(a, b):\n    return "é日" + b\n'
    ex = build("exception-type", 'def f():\n    try: x = "日本"\n    except KeyError: pass\n').examples
    assert ex[0].text == f'def f():\n    try: x = "日本"\n    except {HOLE}: pass\n'


def test_methods_are_dedented_and_long_functions_skipped():
    src = "class A:\n    def m(self, x):\n        return x - self.y\n"
    ((correct, buggy),) = pairs(build("swapped-operand", src))
    assert correct == "def m(self, x):\n    return x - self.y\n"
    assert buggy == "def m(self, x):\n    return self.y - x\n"
    task = build("swapped-operand", src, max_chars=len(correct) - 1)
    assert task.examples == [] and task.info["functions_too_long"] == 1


def test_a_string_line_left_of_the_def_does_not_break_the_method():
    src = 'class A:\n    def m(self, x):\n        s = """\nflush left\n"""\n        return x - s\n'
    ((correct, buggy),) = pairs(build("swapped-operand", src))
    assert correct.startswith("def m(self, x):\n    s = ") and buggy.endswith("return s - x\n")


def test_unknown_task_is_a_user_error():
    with pytest.raises(UserError, match="valid tasks are exception-type, variable-misuse"):
        build_code_task("varmisuse", [])


def test_unparsable_files_are_counted_not_raised():
    docs = [
        Document("bad.py", "def f(:\n"),
        Document("nul.py", "x = 1\x00\n"),
        Document("deep.py", "x = " + "(" * 5000 + ")" * 5000 + "\n"),
        Document("ok.py", "def f(a, b):\n    return a - b\n"),
    ]
    task = build_code_task("swapped-operand", docs)
    assert task.info["files"] == 4 and task.info["files_failed"] == 3
    assert len(task.examples) == 2


# --- real files ----------------------------------------------------------------------------


def test_smoke_on_standard_library_files():
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    docs = [Document(rel, (stdlib / rel).read_text(encoding="utf-8")) for rel in ("json/decoder.py", "argparse.py")]
    for task_name in CODE_TASKS:
        task = build_code_task(task_name, docs)
        assert task.examples, task_name
        for ex in task.examples:
            ast.parse(ex.text_pair if task_name == "docstring-mismatch" else ex.text)
            assert ex.doc in ("json/decoder.py", "argparse.py")


def test_docstring_negatives_stay_on_their_side_of_the_split():
    fns = "".join(
        f'def f{i}(x):\n    """{name} doc {i}."""\n    return x + {i}\n' for i in range(4) for name in ["only"]
    )
    docs = [Document("train.py", fns.replace("only", "train")), Document("val.py", fns.replace("only", "val"))]
    task = build_code_task("docstring-mismatch", docs, side=lambda doc: doc == "val.py")
    negatives = [(ex.doc, ex.text) for ex in task.examples if ex.label == 1]
    assert negatives and all(text.startswith("train" if doc == "train.py" else "val") for doc, text in negatives)
    # Without a side, some negative crosses over (8 functions, seeds fixed).
    mixed = build_code_task("docstring-mismatch", docs).examples
    assert any(ex.doc == "train.py" and ex.text.startswith("val") for ex in mixed if ex.label == 1)


@pytest.mark.parametrize("task_name", BINARY)
def test_the_versions_of_one_function_share_a_group(task_name):
    src = (
        "def f(a, b):\n    '''Doc f.'''\n    x = a - b\n    return x < a\n\n"
        "def g(c, d):\n    '''Doc g.'''\n    y = c % d\n    return y > c\n"
    )
    exs = build(task_name, src).examples
    assert len(exs) == 4 and exs[0].group == exs[1].group != exs[2].group == exs[3].group
