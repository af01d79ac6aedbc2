"""The data of `task="classification"`: an embedded code task (data/codetasks/) or GLUE-layout data
(data/glue.py), by `data.source` (docs/models.md#data).

The code tasks are built from Python files that the pre-training run never trained on. The pool is
the running environment's Python files (`source="python"`: the standard library and the installed
packages), less every file whose content is a training document of the pre-training corpus, which
is read again through its own config (the same split rule, so the same training documents). So:
- pre-trained on `stdlib`: the pool is the installed packages plus the standard library's
  validation files;
- pre-trained on `python`: the pool is that corpus's validation split (all else was trained on);
- any other corpus: its training documents are read and left out the same way.
Files are compared by content (sha256), which also catches a copy under another name. The pool is
taken in a fixed hash order of the file names up to `data.task_pool_mb`, and split by file into the
task's training and validation examples (20%), so the two versions of a mutated function, and all the
functions of one file, stay on one side. Functions are compared too (codetasks/dedup.py): a function
with a copy earlier in the pool, or in a training document of the pre-training corpus, makes no
example, so a vendored copy cannot put one function on both sides. The log says how many went.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from blocklab.atomic import write_atomic
from blocklab.data.codetasks.dedup import file_digests
from blocklab.data.config import DataConfig, cache_root
from blocklab.data.documents import Document, unit_hash
from blocklab.data.examples import Example, LabelledData
from blocklab.data.files import python_stream
from blocklab.data.sources import open_stream
from blocklab.errors import UserError

POOL_SALT = b"blocklab-downstream-pool-v1\x00"
SPLIT_SALT = b"blocklab-downstream-split-v1\x00"
TASK_VAL_FRACTION = 0.2
VERSION = 3  # of the pool, the split and the examples' fields; part of the cache key
# The mutations' seed: one data set per task, whatever the fine-tuning seed (which draws the head
# and the batch order), so that seeds differ in training only.
TASK_SEED = 0


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


def pretraining_digests(pretrain: DataConfig | None, log: Callable) -> set[bytes]:
    """Content digests of the pre-training corpus's training documents (nothing without one)."""
    if pretrain is None:
        return set()
    stream = open_stream(pretrain, log=lambda *a, **k: None)
    return {_digest(doc.text) for doc in stream.docs("train")}


def pretraining_functions(
    pretrain: DataConfig | None, trained: frozenset[bytes], root: Path, log: Callable
) -> frozenset[bytes]:
    """The digests (source.function_digest) of every function of the pre-training corpus's training
    documents, whose content digests are `trained`. Parsing a whole corpus takes a while, so they are
    cached under `root`, keyed by those documents: once per pre-training split, not once per task."""
    if pretrain is None:
        return frozenset()
    h = hashlib.sha256(f"pretraining-functions-v{VERSION}\x00".encode())
    for digest in sorted(trained):
        h.update(digest)
    path = root / "downstream" / f"pretraining-functions-{h.hexdigest()[:32]}.txt"
    if path.is_file():
        return frozenset(bytes.fromhex(line) for line in path.read_text().split())
    log("data: reading the functions of the pre-training split (cached afterwards)")
    stream = open_stream(pretrain, log=lambda *a, **k: None)
    functions = frozenset(d for doc in stream.docs("train") for d in file_digests(doc.text))
    write_atomic(path, "".join(f"{d.hex()}\n" for d in sorted(functions)))
    return functions


# per process: a sweep fine-tunes many runs from one pool
_POOLS: dict[str, tuple[list[Document], frozenset[bytes]]] = {}


def code_pool(pretrain: DataConfig | None, pool_mb: float, log: Callable) -> list[Document]:
    """The environment's Python files that the pre-training split never contains, in hash order, up to
    pool_mb megabytes."""
    return _pool_and_trained(pretrain, pool_mb, log)[0]


def _pool_and_trained(
    pretrain: DataConfig | None, pool_mb: float, log: Callable
) -> tuple[list[Document], frozenset[bytes]]:
    """The pool, and the content digests of the pre-training split's documents it was kept apart from."""
    key = repr((pretrain, pool_mb))
    if key not in _POOLS:
        _POOLS[key] = _code_pool(pretrain, pool_mb, log)
    return _POOLS[key]


def _code_pool(pretrain: DataConfig | None, pool_mb: float, log: Callable) -> tuple[list[Document], frozenset[bytes]]:
    excluded = frozenset(pretraining_digests(pretrain, log))
    stream = python_stream(0.5, lambda *a, **k: None)  # the split of this stream is not used
    docs = sorted(
        (d for d in stream.docs("all") if _digest(d.text) not in excluded), key=lambda d: unit_hash(d.name, POOL_SALT)
    )
    pool, size = [], 0
    for d in docs:
        if size >= pool_mb * 1e6:
            break
        pool.append(d)
        size += len(d.text.encode("utf-8"))
    if not pool:
        raise UserError(
            "no Python file of this environment is outside the pre-training split: "
            "there is nothing to build the code tasks from"
        )
    log(
        f"data: code-task pool: {len(pool):,} files, {size / 1e6:.1f} MB of the environment's "
        f"{stream.info['files']:,} Python files; left out {len(excluded):,} pre-training documents"
    )
    return pool, excluded


def _pool_key(name: str, pool: list[Document], trained: frozenset[bytes]) -> str:
    h = hashlib.sha256(f"code-task-v{VERSION}\x00{name}\x00{TASK_SEED}\x00".encode())
    for d in pool:
        h.update(d.name.encode("utf-8") + b"\x00" + _digest(d.text))
    h.update(b"\x00pre-training\x00" + b"".join(sorted(trained)))  # its functions are left out
    return h.hexdigest()[:32]


def is_val(doc: str) -> bool:
    return unit_hash(doc, SPLIT_SALT) < TASK_VAL_FRACTION


def source_order(doc: str) -> float:
    """The order in which max_examples takes sources (files, rows): a fixed hash, not the file order."""
    return unit_hash(doc, POOL_SALT)


def load_code_task(name: str, cfg: DataConfig, pretrain: DataConfig | None, log: Callable) -> LabelledData:
    from blocklab.data.codetasks import build_code_task

    pool, trained = _pool_and_trained(pretrain, cfg.task_pool_mb, log)
    path = cache_root(cfg) / "downstream" / f"{name}-{_pool_key(name, pool, trained)}.json"
    if path.is_file():
        raw = json.loads(path.read_text())
    else:
        log(f"data: building {name} from {len(pool):,} files (cached afterwards)")
        exclude = pretraining_functions(pretrain, trained, cache_root(cfg), log)
        task = build_code_task(name, pool, seed=TASK_SEED, side=is_val, exclude=exclude)
        raw = {
            "label_names": task.label_names,
            "info": task.info,
            "examples": [[e.text, e.label, e.text_pair, e.doc, e.group] for e in task.examples],
        }
        write_atomic(path, json.dumps(raw))
    examples = [Example(t, label, pair, doc, group) for t, label, pair, doc, group in raw["examples"]]
    train = [e for e in examples if not is_val(e.doc)]
    val = [e for e in examples if is_val(e.doc)]
    info = dict(raw["info"], kind="code", pool_files=len(pool), cache=str(path))
    log(
        f"data: {name}: {info['functions']:,} functions in {info['files']:,} files; left out "
        f"{info['functions_duplicate']:,} copies of an earlier one and {info['functions_in_pretraining']:,} "
        "that the pre-training split holds"
    )
    return LabelledData(name, train, val, raw["label_names"], "accuracy", info)


def load_labelled(cfg: DataConfig, pretrain: DataConfig | None, log: Callable = print) -> LabelledData:
    """The classification data `cfg.source` names: a code task, or GLUE-layout data. Every example:
    `data.max_examples` is applied after encoding (training/tasks/classification.py), so that it counts
    the examples that fit the model."""
    from blocklab.data.codetasks import CODE_TASKS

    if cfg.source in CODE_TASKS:
        return load_code_task(cfg.source, cfg, pretrain, log)
    path = Path(cfg.source).expanduser()
    if not cfg.source.startswith("hf:") and not path.exists():
        raise UserError(
            f"unknown task {cfg.source!r}: choose an embedded code task ({', '.join(CODE_TASKS)}), "
            "hf:NAME with data.hf_config, or a .tsv/.jsonl file or folder of classification data"
        )
    from blocklab.data.glue import load_glue_layout

    return load_glue_layout(cfg.source, cfg.hf_config, log=log, cache_dir=cfg.cache_dir)
