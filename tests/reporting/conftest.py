"""Fixtures of the report tests: a tiny real corpus and cache (as tests/training), one real tiny
training run and tiny real init probes, both made once per session, and headless Chromium."""

from __future__ import annotations

import shutil
import sysconfig
from pathlib import Path

import pytest

from tests.reporting.chromium import find_or_install


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("corpus")
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for f in (stdlib / "json").glob("*.py"):
        shutil.copy(f, d / f"json_{f.name}")
    return d


@pytest.fixture(scope="session", autouse=True)
def cache_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("BLOCKLAB_CACHE", str(d))
    yield d
    mp.undo()


@pytest.fixture(scope="session")
def real_run(tmp_path_factory, corpus_dir, cache_dir) -> Path:
    """One real run of the trainer (sas-p, 24 steps, log every 2, eval every 8): the real file formats."""
    from blocklab.training import load_config, train

    over = {
        "data": {"source": str(corpus_dir), "vocab_size": 512, "seq_len": 32},
        "model": {"block": "sas-p", "d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64},
        "train": {
            "steps": 24,
            "batch_size": 4,
            "log_every": 2,
            "eval_every": 8,
            "eval_batches": 2,
            "checkpoint_every": 24,
            "lr": 3e-3,
        },
    }
    out = tmp_path_factory.mktemp("real") / "runs" / "sas-p-real"
    train(load_config(None, over), out, progress=False, log=lambda *a, **k: None)
    return out


@pytest.fixture(scope="session")
def real_probes(tmp_path_factory) -> Path:
    """probes.json and its figures, written by `blocklab probe` on a tiny random-token setting."""
    import argparse

    from blocklab.cli import probe

    out = tmp_path_factory.mktemp("probes") / "probes"
    parser = argparse.ArgumentParser(prog="blocklab")
    probe.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        [
            "probe",
            "--out",
            str(out),
            "--blocks",
            "pre-ln,sas-p",
            "--depths",
            "1,2",
            "--d-model",
            "16",
            "--n-heads",
            "2",
            "--d-ff",
            "32",
            "--seq-len",
            "8",
            "--batch-size",
            "2",
            "--vocab-size",
            "64",
            "--seeds",
            "1",
            "--batches",
            "1",
            "--data",
            "random",
            "--no-ablation",
            "--no-progress",
        ]
    )
    assert probe.run(args) == 0
    return out


@pytest.fixture(scope="session")
def chromium() -> tuple[str | None, str | None]:
    """(path, None) of a headless Chromium, installed from Debian's packages when missing (at most once
    per session), or (None, why). The test calls `require(chromium)`, so a missing browser FAILS the test
    (never a skip, nor a set-up error)."""
    return find_or_install()
