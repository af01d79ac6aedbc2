"""One function, one example: copies of a function (vendored packages) make no example twice, in
either split of a code task, and none at all when the pre-training split holds them."""

import ast
import textwrap
from collections import Counter

import pytest

from blocklab.data import DataConfig, downstream
from blocklab.data.codetasks import CODE_TASKS, build_code_task
from blocklab.data.codetasks.source import FUNCTION_NODES, function_digest, read_functions
from blocklab.data.documents import Document
from blocklab.data.files import folder_stream
from blocklab.data.sources import open_stream

F = '''\
def scale(a, b):
    """Scale a by b, less one."""
    x = a - b * 2
    try:
        return x < a
    except KeyError:
        return b % a
'''
# The same function as a vendoring tool or a formatter leaves it: a method, re-wrapped, with
# comments, other quotes, another docstring indentation and a decorator.
F_COPY = """\
class Vendored:
    @staticmethod
    def scale(a, b):
        '''Scale a by b, less one.'''
        x = (a -
             b * 2)  # the factor
        try:
            return x < a
        except KeyError:
            return b % a
"""
G = '''\
def ratio(p, q):
    """The ratio, floored."""
    if p > q:
        return p // q
    try:
        return q - p
    except ValueError:
        return p % q
'''


def _digest(src: str) -> bytes:
    node = next(n for n in ast.walk(ast.parse(textwrap.dedent(src))) if isinstance(n, FUNCTION_NODES))
    return function_digest(node)


def test_copies_share_a_digest_and_other_code_does_not():
    assert _digest(F) == _digest(F_COPY)
    assert _digest(F) != _digest(F.replace("Scale a by b", "Scale b by a"))  # docstring-mismatch reads it
    assert _digest(F) != _digest(F.replace("b * 2", "b * 3"))
    assert _digest(F) != _digest(F.replace("def scale", "async def scale"))
    assert _digest(F) != _digest(G)


def _sides(n_val: int = 1) -> tuple[str, ...]:
    """A file name whose examples go to training and `n_val` whose go to validation."""
    names = [f"mod_{i}.py" for i in range(100)]
    return (next(n for n in names if not downstream.is_val(n)), *[n for n in names if downstream.is_val(n)][:n_val])


@pytest.mark.parametrize("task_name", CODE_TASKS)
def test_a_function_in_two_files_makes_examples_in_one_split(task_name):
    train_name, val_name = _sides()
    docs = [Document(train_name, F + "\n\n" + G), Document(val_name, F_COPY)]
    task = build_code_task(task_name, docs, side=downstream.is_val)
    assert task.info["functions_duplicate"] == 1 and task.info["functions_in_pretraining"] == 0
    scale = [ex for ex in task.examples if "scale(a, b)" in (ex.text_pair or ex.text)]
    assert scale and {ex.doc for ex in scale} == {train_name}  # the first copy, on its side only
    # Without the copy nothing changes but the count.
    alone = build_code_task(task_name, docs[:1], side=downstream.is_val)
    assert alone.examples == task.examples and alone.info["functions_duplicate"] == 0


def test_functions_the_pre_training_split_holds_make_no_example():
    docs = [Document("a.py", F), Document("b.py", G)]
    task = build_code_task("swapped-operand", docs, exclude={_digest(G)})
    assert task.info["functions_in_pretraining"] == 1
    assert {ex.group for ex in task.examples} == {"a.py#0"}


@pytest.fixture
def small_environment(tmp_path, monkeypatch):
    """The code tasks' pool drawn from a folder of four files instead of the whole environment, and a
    pre-training corpus of two files that both hold (a copy of) G, so that its training split does."""
    train_name, val_name, other_val_name = _sides(2)
    env = tmp_path / "env"
    env.mkdir()
    (env / train_name).write_text(F + "\n\n" + G.replace("ratio", "ratio2"))
    (env / val_name).write_text(F_COPY)
    (env / "vendored_g.py").write_text(textwrap.indent(G, "    ").replace("    def", "class C:\n    def", 1))
    (env / other_val_name).write_text("def other(u, v):\n    return u - v\n")
    pre = tmp_path / "pre"
    pre.mkdir()
    (pre / "one.py").write_text(G + "\n\ndef one(x, y):\n    return x / y\n")
    (pre / "two.py").write_text(G + "\n\ndef two(x, y):\n    return x << y\n")
    monkeypatch.setattr(downstream, "python_stream", lambda fraction, log: folder_stream(env, None, fraction, log))
    monkeypatch.setattr(downstream, "_POOLS", {})
    return DataConfig(source=str(pre), val_fraction=0.5)


def test_no_function_of_a_task_is_in_both_splits_or_in_pre_training(small_environment, tmp_path, logs):
    pretrain = small_environment
    cfg = DataConfig(source="swapped-operand", task_pool_mb=1.0, cache_dir=str(tmp_path / "cache"))
    data = downstream.load_labelled(cfg, pretrain, logs)
    assert "data: swapped-operand: 5 functions in 4 files; left out 1 copies of an earlier one and 1 that the" in (
        "\n".join(logs.lines)
    )
    # Every example's function, by digest: none on both sides, none that pre-training trained on.
    pool = downstream.code_pool(pretrain, 1.0, print)
    digest = {fn.key: fn.digest for fn in read_functions(pool, 10_000, Counter())}
    train, val = ({digest[ex.group] for ex in split} for split in (data.train, data.val))
    trained = open_stream(pretrain, log=print).docs("train")
    pre = {function_digest(n) for d in trained for n in ast.walk(ast.parse(d.text)) if isinstance(n, FUNCTION_NODES)}
    assert train and val and not train & val and not (train | val) & pre
    assert _digest(F) in train | val and _digest(G) in pre
    # The pre-training functions are read once and kept on disk; a second task needs no second pass.
    logs.lines.clear()
    downstream.load_labelled(
        DataConfig(source="wrong-operator", task_pool_mb=1.0, cache_dir=cfg.cache_dir), pretrain, logs
    )
    assert not any("reading the functions of the pre-training split" in line for line in logs.lines)
    assert len(list((tmp_path / "cache" / "downstream").glob("pretraining-functions-*.txt"))) == 1
