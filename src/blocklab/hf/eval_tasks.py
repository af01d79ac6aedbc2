"""The offline lm-eval tasks blocklab ships: task configs (YAML) and their documents (JSON lines), written
at run time from a clm run's own data, so `blocklab eval` needs no network and no download.

- `blocklab_val_bpb`: the run's held-out validation documents (the split blocklab made by file, read
  again through the run's data config), scored as lm-eval scores wikitext: `loglikelihood_rolling`,
  with word perplexity, byte perplexity and bits per byte.
- The five code tasks (data/codetasks/), zero-shot: a causal LM has no classification head, so each
  becomes a choice between texts scored by their log-likelihood, on the validation examples that
  `blocklab finetune` scores (the task pool's validation files; none of them is a training document
  of the run):
  - variable-misuse, wrong-operator, swapped-operand: the original and the mutated version of one
    function (the pair shares Example.group). The context is the text the two share up to the line
    where they first differ; the choices are the rest of each version. The shared context adds the
    same log-likelihood to both, so the model picks the version it finds more likely as a whole.
  - exception-type: the function up to the masked `except __HOLE__` as context, the class names
    as choices.
  - docstring-mismatch: the function's own docstring and the one drawn from another function,
    each written back into the function where a docstring goes, as two contexts (lm-eval's
    multiple-input form, as in winogrande); the shared continuation is the body. The model is right
    when the body is more likely after its own docstring: P(code | docstring), so a docstring that
    is merely short or common, which a comparison of the docstrings' own likelihoods would reward,
    wins nothing. acc only: acc_norm would divide by the length of the contexts.
  Which choice is the right one is drawn per example by a hash, never always the first, so that a
  tie (an untrained model) scores chance, not 1.
- lm-eval refuses a continuation longer than the model's window, and a mutation cut off would leave
  a label the text no longer shows (as `blocklab finetune` drops such examples): the shared trailing
  lines are cut to fit, and an example whose differing lines alone do not fit is left out (counted).
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable
from pathlib import Path

from blocklab.atomic import write_atomic
from blocklab.data.codetasks import CODE_TASKS, HOLE
from blocklab.data.codetasks.source import split_lines
from blocklab.data.config import DataConfig
from blocklab.data.documents import Document, unit_hash
from blocklab.data.downstream import load_code_task
from blocklab.data.examples import Example
from blocklab.data.sources import open_stream
from blocklab.errors import UserError

PREFIX = "blocklab_"
VAL_BPB = "blocklab_val_bpb"
ORDER_SALT = b"blocklab-eval-document-order-v1\x00"
# Not ORDER_SALT: the right choice's place must not follow the document order (a --limit would take
# mostly documents whose right choice comes first).
CHOICE_SALT = b"blocklab-eval-choice-order-v1\x00"
VERSION = 1  # of the documents and configs below: part of every task's metadata


def shipped_name(code_task: str) -> str:
    return PREFIX + code_task.replace("-", "_")


CODE_NAMES = {shipped_name(t): t for t in CODE_TASKS}
SHIPPED = {
    VAL_BPB: "bits per byte of the run's held-out validation documents (rolling log-likelihood, as wikitext)",
    shipped_name("exception-type"): "which exception class the masked except clause names (class names as choices)",
    shipped_name("variable-misuse"): "the function or its copy with one variable use replaced: which is more likely",
    shipped_name("wrong-operator"): "the function or its copy with one binary operator replaced",
    shipped_name("swapped-operand"): "the function or its copy with the operands of one operator swapped",
    shipped_name("docstring-mismatch"): "which of two docstrings makes the function's body more likely",
}


def quiet(*args, **kwargs) -> None:
    pass


def validation_documents(data: DataConfig) -> list[Document]:
    """The run's held-out validation documents, in corpus order: the split its training made, read
    again from the source through the run's own data config (the same split rule, so the same files)."""
    return [d for d in open_stream(data, quiet).docs("val") if d.text]


class Window:
    """Whether lm-eval can score a (context, continuation) pair in a window of `max_len` tokens: the
    continuation's tokens as the harness counts them (HFLM: the context's trailing whitespace moves to
    the continuation, the whole is encoded and the context's tokens cut off; an empty context scores
    the continuation after the prefix token) must number 1 to max_len."""

    def __init__(self, tokenizer, max_len: int):
        self.tokenizer, self.max_len = tokenizer, max_len

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def continuation_tokens(self, context: str, continuation: str) -> int:
        if not context:
            return len(self.encode(continuation))
        stripped = context.rstrip()
        if not stripped:
            return 0  # the harness would encode an empty context and fail on it: never fits
        return len(self.encode(context + continuation)) - len(self.encode(stripped))

    def fits(self, context: str, continuation: str) -> bool:
        return 1 <= self.continuation_tokens(context, continuation) <= self.max_len


def longest_fit(window: Window, contexts: list[str], heads: list[str], tail: list[str]) -> int | None:
    """The most lines of the shared `tail` that fit after every (context, head) pair, or None when not even
    the heads fit. A bisection: tokens grow with the lines (give or take one where two lines meet), and the
    count it returns has been checked to fit."""

    def ok(k: int) -> bool:
        rest = "".join(tail[:k])
        return all(window.fits(c, h + rest) for c, h in zip(contexts, heads))

    if not ok(0):
        return None
    lo, hi = 0, len(tail)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid - 1)
    return lo


def ordered(right: str, wrong: str, key: str) -> tuple[list[str], int]:
    """The two choices in an order drawn from `key`, and the right one's index."""
    return ([right, wrong], 0) if unit_hash(key, CHOICE_SALT) < 0.5 else ([wrong, right], 1)


def mutation_doc(original: str, mutated: str, key: str, window: Window) -> dict | None:
    """One document of a mutation task: the shared lines before the first difference as context, the rest of
    each version as the choices (the shared trailing lines cut alike to fit)."""
    if original == mutated:
        return None
    n = 0
    while n < min(len(original), len(mutated)) and original[n] == mutated[n]:
        n += 1
    start = original.rfind("\n", 0, n) + 1  # the start of the line where they first differ
    m = 0  # the shared suffix, never reaching back into the shared prefix
    limit = min(len(original), len(mutated)) - start
    while m < limit and original[-1 - m] == mutated[-1 - m]:
        m += 1
    cut = len(original) - m
    if cut > 0 and original[cut - 1] != "\n":  # the tail starts at the next line start
        nl = original.find("\n", cut)
        cut = len(original) if nl < 0 else nl + 1
    tail = split_lines(original[cut:])
    context = original[:start]
    heads = [original[start:cut], mutated[start : len(mutated) - (len(original) - cut)]]
    k = longest_fit(window, [context, context], heads, tail)
    if k is None:
        return None
    rest = "".join(tail[:k])
    choices, gold = ordered(heads[0] + rest, heads[1] + rest, key)
    return {"context": context, "choices": choices, "gold": gold, "key": key}


def mutation_docs(examples: list[Example], window: Window, info: dict) -> list[dict]:
    pairs: dict[str, dict[int, str]] = {}
    for e in examples:
        pairs.setdefault(e.group, {})[int(e.label)] = e.text
    docs = []
    info["examples"] += len(pairs)
    for key, pair in pairs.items():
        doc = mutation_doc(pair[0], pair[1], key, window) if len(pair) == 2 else None
        if doc is None:
            info["too_long"] += 1
            continue
        docs.append(doc)
    return docs


def exception_docs(examples: list[Example], labels: list[str], window: Window, info: dict) -> list[dict]:
    """The text up to the hole as context, every class name whose tokens fit as a choice."""
    docs = []
    info["examples"] += len(examples)
    for i, e in enumerate(examples):
        if e.text.count(HOLE) != 1:
            info["too_long"] += 1
            continue
        context = e.text[: e.text.index(HOLE)]
        kept = [name for name in labels if window.fits(context, name)]
        if labels[int(e.label)] not in kept or len(kept) < 2:
            info["too_long"] += 1
            continue
        docs.append(
            {"context": context, "choices": kept, "gold": kept.index(labels[int(e.label)]), "key": f"{e.doc}#{i}"}
        )
    return docs


def docstring_block(docstring: str, indent: str) -> str:
    """The cleaned docstring written back as a docstring statement at `indent` (PEP 257's layout)."""
    quote = "'''" if '"""' in docstring or docstring.endswith('"') else '"""'
    lines = docstring.split("\n")
    if len(lines) == 1:
        return f"{indent}{quote}{docstring}{quote}\n"
    rest = "".join(f"{indent}{line}\n" if line.strip() else "\n" for line in lines[1:])
    return f"{indent}{quote}{lines[0]}\n{rest}{indent}{quote}\n"


def split_at_body(code: str) -> tuple[str, str, list[str]] | None:
    """(the lines before the function's first statement, its indentation, the lines from it on), or None when
    that statement shares a line with the signature (`def f(): pass`)."""
    try:
        fn = ast.parse(code).body[0]
    except (SyntaxError, ValueError, RecursionError, IndexError):
        return None
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    lines = split_lines(code)
    first = fn.body[0]
    indent = lines[first.lineno - 1][: first.col_offset]  # whitespace: its bytes are its characters
    if first.lineno <= fn.lineno or indent.strip():
        return None
    return "".join(lines[: first.lineno - 1]), indent, lines[first.lineno - 1 :]


def docstring_docs(examples: list[Example], window: Window, info: dict) -> list[dict]:
    """The own and the drawn docstring, each in the function's docstring place, as the two contexts; the body
    (its leading lines, as many as fit) as the continuation they share."""
    pairs: dict[str, dict[int, Example]] = {}
    for e in examples:
        pairs.setdefault(e.group, {})[int(e.label)] = e
    docs = []
    info["examples"] += len(pairs)
    for key, pair in pairs.items():
        split = split_at_body(pair[0].text_pair or "") if len(pair) == 2 else None
        if split is None:
            info["too_long"] += 1
            continue
        head, indent, body = split
        contexts, gold = ordered(
            head + docstring_block(pair[0].text, indent), head + docstring_block(pair[1].text, indent), key
        )
        k = longest_fit(window, contexts, [body[0], body[0]], body[1:])  # the first line at least
        if k is None:
            info["too_long"] += 1
            continue
        docs.append({"contexts": contexts, "body": "".join(body[: k + 1]), "gold": gold, "key": key})
    return docs


def code_task_docs(name: str, data: DataConfig, window: Window, log: Callable) -> tuple[list[dict], dict]:
    """The documents of the shipped code task `name` and what they are made of (counts), in an order drawn by
    hash, so that --limit takes examples from across the files rather than the first few."""
    task = CODE_NAMES[name]
    cfg = DataConfig(source=task, cache_dir=data.cache_dir, task_pool_mb=data.task_pool_mb)
    labelled = load_code_task(task, cfg, data, log)
    info = {"examples": 0, "too_long": 0}  # examples: a function's pair counts once
    if task == "exception-type":
        docs = exception_docs(labelled.val, labelled.label_names, window, info)
    elif task == "docstring-mismatch":
        docs = docstring_docs(labelled.val, window, info)
    else:
        docs = mutation_docs(labelled.val, window, info)
    docs.sort(key=lambda d: unit_hash(d["key"], ORDER_SALT))  # "key" (the function) stays, for the reader
    info["documents"] = len(docs)
    if not docs:
        raise UserError(
            f"{name}: none of its {info['examples']:,} validation examples fits the model's {window.max_len}-token "
            "window (raise data.task_pool_mb for more examples, or evaluate a run with a longer model.max_seq_len)"
        )
    return docs, info


def task_config(name: str, data_file: Path, cache_dir: Path) -> dict:
    """The lm-eval task config of the shipped task `name`, reading `data_file`."""
    config = {
        "task": name,
        "dataset_path": "json",
        # datasets' json builder on the local file; its converted copy stays beside it, not in ~/.cache
        "dataset_kwargs": {"data_files": {"test": str(data_file)}, "cache_dir": str(cache_dir)},
        "test_split": "test",
        "num_fewshot": 0,
    }
    if name == VAL_BPB:
        ppl = {"aggregation": "weighted_perplexity", "higher_is_better": False}
        metrics = [
            {"metric": "word_perplexity", **ppl},
            {"metric": "byte_perplexity", **ppl},
            {"metric": "bits_per_byte", "aggregation": "bits_per_byte", "higher_is_better": False},
        ]
        config.update(output_type="loglikelihood_rolling", doc_to_text="", doc_to_target="text")
    else:
        acc = {"metric": "acc", "aggregation": "mean", "higher_is_better": True}
        if name == shipped_name("docstring-mismatch"):
            # doc_to_text an int: lm-eval's multiple-input form, one context per choice, the target shared
            config.update(doc_to_text="gold", doc_to_choice="contexts", doc_to_target="body")
            metrics = [acc]
        else:
            config.update(doc_to_text="context", doc_to_choice="choices", doc_to_target="gold")
            metrics = [acc, {**acc, "metric": "acc_norm"}]
        # the texts are joined as they are: no space between a context and its continuation
        config.update(output_type="multiple_choice", target_delimiter="", fewshot_delimiter="")
    config["metric_list"] = metrics
    config["metadata"] = {"version": VERSION, "description": SHIPPED[name]}
    return config


def write_if_changed(path: Path, text: str) -> None:
    # An unchanged file keeps its time stamp, so datasets' converted copy of it stays valid.
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        write_atomic(path, text)


def write_tasks(folder: Path, names: list[str], data: DataConfig, window: Window, log: Callable) -> dict[str, dict]:
    """Write NAME.yaml and NAME.jsonl into `folder` for each shipped task of `names`; returns each one's counts."""
    import yaml  # comes with lm-eval and transformers

    infos = {}
    for name in names:
        if name == VAL_BPB:
            docs = [{"name": d.name, "text": d.text} for d in validation_documents(data)]
            info = {"documents": len(docs)}
        else:
            docs, info = code_task_docs(name, data, window, log)
        data_file = folder / f"{name}.jsonl"
        write_if_changed(data_file, "".join(json.dumps(d) + "\n" for d in docs))
        config = task_config(name, data_file.resolve(), (folder / ".datasets").resolve())
        write_if_changed(folder / f"{name}.yaml", yaml.safe_dump(config, sort_keys=False, allow_unicode=True))
        infos[name] = info
    return infos
