"""The data of `task="classification"`: an embedded code task (data/codetasks/) or GLUE-layout data
(data/glue.py), by `data.source` (SPEC section 7).

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
functions of one file, stay on one side.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from blocklab.atomic import write_atomic
from blocklab.data.config import DataConfig, cache_root
from blocklab.data.documents import Document, unit_hash
from blocklab.data.examples import Example, LabelledData
from blocklab.data.files import python_stream
from blocklab.data.sources import open_stream
from blocklab.errors import UserError

POOL_SALT = b"blocklab-downstream-pool-v1\x00"
SPLIT_SALT = b"blocklab-downstream-split-v1\x00"
TASK_VAL_FRACTION = 0.2
VERSION = 2  # of the pool, the split and the examples' fields; part of the cache key
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


_POOLS: dict[str, list[Document]] = {}  # per process: a sweep fine-tunes many runs from one pool


def code_pool(pretrain: DataConfig | None, pool_mb: float, log: Callable) -> list[Document]:
    """The environment's Python files that the pre-training split never contains, in hash order, up to
    pool_mb megabytes."""
    key = repr((pretrain, pool_mb))
    if key not in _POOLS:
        _POOLS[key] = _code_pool(pretrain, pool_mb, log)
    return _POOLS[key]


def _code_pool(pretrain: DataConfig | None, pool_mb: float, log: Callable) -> list[Document]:
    excluded = pretraining_digests(pretrain, log)
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
    return pool


def _pool_key(name: str, pool: list[Document]) -> str:
    h = hashlib.sha256(f"code-task-v{VERSION}\x00{name}\x00{TASK_SEED}\x00".encode())
    for d in pool:
        h.update(d.name.encode("utf-8") + b"\x00" + _digest(d.text))
    return h.hexdigest()[:32]


def is_val(doc: str) -> bool:
    return unit_hash(doc, SPLIT_SALT) < TASK_VAL_FRACTION


def source_order(doc: str) -> float:
    """The order in which max_examples takes sources (files, rows): a fixed hash, not the file order."""
    return unit_hash(doc, POOL_SALT)


def load_code_task(name: str, cfg: DataConfig, pretrain: DataConfig | None, log: Callable) -> LabelledData:
    from blocklab.data.codetasks import build_code_task

    pool = code_pool(pretrain, cfg.task_pool_mb, log)
    path = cache_root(cfg) / "downstream" / f"{name}-{_pool_key(name, pool)}.json"
    if path.is_file():
        raw = json.loads(path.read_text())
    else:
        log(f"data: building {name} from {len(pool):,} files (cached afterwards)")
        task = build_code_task(name, pool, seed=TASK_SEED, side=is_val)
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
