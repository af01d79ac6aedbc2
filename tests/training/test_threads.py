"""train.threads: auto gives a small model one thread and a wide one a thread per core but one (benchmarks/RESULTS.md,
"CPU: threads per run"), keeps OMP_NUM_THREADS where it is set (a compare --jobs worker's share of the cores), and
a run records the count it trained with in summary.json."""

import json

import pytest
import torch

from blocklab.cli import main
from blocklab.config import ModelConfig
from blocklab.errors import UserError
from blocklab.training import threads
from blocklab.training.config import load_config


@pytest.fixture
def torch_threads():
    """The process's torch thread count, restored after the test (runs set it)."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_auto_is_one_thread_for_a_small_model_and_all_cores_but_one_for_a_wide_one(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "cpu_count", lambda: 8)
    assert threads.auto_threads(ModelConfig(d_model=256)) == 1
    assert threads.auto_threads(ModelConfig(d_model=512, n_heads=8)) == 7
    monkeypatch.setattr(threads, "cpu_count", lambda: 1)
    assert threads.auto_threads(ModelConfig(d_model=512, n_heads=8)) == 1
    assert threads.run_threads(3, ModelConfig(d_model=64)) == 3  # set: as set
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the user's, torchrun's or a compare worker's choice
    assert threads.auto_threads(ModelConfig(d_model=512, n_heads=8)) == 2
    assert threads.auto_threads(ModelConfig(d_model=64)) == 2
    monkeypatch.setenv("OMP_NUM_THREADS", "")
    assert threads.auto_threads(ModelConfig(d_model=64)) == 1


def test_a_compare_worker_sets_its_share_where_a_runs_auto_reads_it(monkeypatch, torch_threads):
    from blocklab.experiments import jobs

    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # restored after the test
    jobs._init_worker(3, [], None)
    assert torch.get_num_threads() == 3
    assert threads.auto_threads(ModelConfig(d_model=512, n_heads=8)) == 3


def test_threads_is_a_setting_of_how_a_run_is_computed_not_of_what_it_trains():
    from blocklab.training.rundir import NO_EFFECT, RESUMABLE_CHANGES

    assert ("train", "threads") in NO_EFFECT and ("train", "threads") in RESUMABLE_CHANGES
    assert load_config(None, {"train": {"threads": 2}}).train.threads == 2
    with pytest.raises(UserError, match=r"train.threads=-1 is not valid; it must be an integer >= 0"):
        load_config(None, {"train": {"threads": -1}})


@pytest.mark.slow
def test_a_run_trains_with_its_thread_count_and_records_it(tmp_path, corpus_dir, torch_threads):
    args = ["train", "--no-progress", "--model.d_model", "16", "--model.n_layers", "1", "--model.n_heads", "2"]
    args += ["--model.d_ff", "32", "--data.source", str(corpus_dir), "--data.vocab_size", "300"]
    args += ["--data.seq_len", "16", "--train.batch_size", "4", "--train.steps", "2"]
    assert main([*args, "--out", str(tmp_path / "two"), "--train.threads", "2"]) == 0
    assert json.loads((tmp_path / "two" / "summary.json").read_text())["threads"] == 2 == torch.get_num_threads()
    assert main([*args, "--out", str(tmp_path / "auto")]) == 0  # auto: OMP_NUM_THREADS=1, as the tests set it
    assert json.loads((tmp_path / "auto" / "summary.json").read_text())["threads"] == 1
