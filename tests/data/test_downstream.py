"""The code tasks' file pool: nothing the pre-training split trained on, by content; a fixed split."""

import hashlib
import sysconfig
from pathlib import Path

import pytest

from blocklab.data import DataConfig
from blocklab.data.downstream import code_pool, is_val, load_labelled, pretraining_digests
from blocklab.data.sources import open_stream


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


@pytest.mark.slow
def test_no_file_is_in_both_the_pre_training_split_and_the_task_pool(corpus_dir):
    pretrain = DataConfig(source=str(corpus_dir), val_fraction=0.2)
    trained = {_digest(d.text) for d in open_stream(pretrain, log=lambda *a: None).docs("train")}
    assert trained and trained == pretraining_digests(pretrain, print)
    # The corpus is a copy of standard-library files under other names, so the environment holds the
    # same contents: only the comparison by content keeps them out.
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    env = {_digest(p.read_text()) for p in (stdlib / "json").glob("*.py")}
    assert trained & env
    pool = code_pool(pretrain, 1000.0, lambda *a: None)  # the whole environment
    assert len(pool) > 100 and not trained & {_digest(d.text) for d in pool}


@pytest.mark.slow
def test_pre_training_on_stdlib_leaves_its_validation_files_in_the_pool():
    pretrain = DataConfig(source="stdlib", val_fraction=0.02)
    stream = open_stream(pretrain, log=lambda *a: None)
    val = {_digest(d.text) for d in stream.docs("val")}
    train = {_digest(d.text) for d in stream.docs("train")}
    pool = {_digest(d.text) for d in code_pool(pretrain, 1000.0, lambda *a: None)}
    assert not pool & train and (val - train) <= pool


@pytest.mark.slow
def test_the_pool_and_the_task_split_are_fixed(tmp_path):
    a = code_pool(None, 0.3, lambda *a: None)
    assert [d.name for d in a] == [d.name for d in code_pool(None, 0.3, lambda *a: None)]
    assert sum(len(d.text.encode()) for d in a[:-1]) < 0.3e6
    cfg = DataConfig(source="swapped-operand", task_pool_mb=0.3, cache_dir=str(tmp_path))
    data = load_labelled(cfg, None, lambda *a: None)
    assert data.train and data.val and data.info["kind"] == "code"
    assert all(not is_val(e.doc) for e in data.train) and all(is_val(e.doc) for e in data.val)
    assert not {e.doc for e in data.train} & {e.doc for e in data.val}
    cached = load_labelled(cfg, None, lambda *a: None)  # the second read comes from the cache
    assert cached.train == data.train and list(tmp_path.glob("downstream/swapped-operand-*.json"))
