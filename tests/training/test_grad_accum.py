"""train.grad_accum and train.activation_checkpointing in one process: the same losses as without them
(SPEC section 5: "the optimizer sees the same batch and the same losses while the device holds less")."""

import json
import os

import numpy as np
import pytest
import torch

from blocklab.errors import UserError
from blocklab.training import load_config, train, trainer
from blocklab.training.trainer import Trainer

REL = 1e-5  # micro-batches sum the loss and the gradients in another order: float tolerance, not equality


def losses(run):
    return [r["loss"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "loss" in r]


def quiet_train(cfg, out, **kw):
    return train(cfg, out, progress=False, log=lambda *a: None, **kw)


@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
    """A small classification set whose sentences have different lengths (padded batches)."""
    words = ["value", "items", "self", "name", "data", "key", "result", "path"]
    rows = [
        {
            "sentence": f"{words[i % 8]} {words[(i * 3) % 8]} = {'True' if i % 2 else 'None'}" + " x" * (i % 5),
            "label": i % 2,
        }
        for i in range(240)
    ]
    path = tmp_path_factory.mktemp("labelled") / "toy.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """A word-for-word language pair with sentences of 4 to 7 words (padded targets)."""
    src = ["Haus", "Baum", "Katze", "Hund", "Auto", "Tisch", "Buch", "Stadt", "Fluss", "Berg"]
    tgt = ["house", "tree", "cat", "dog", "car", "table", "book", "city", "river", "mountain"]
    rng = np.random.default_rng(0)
    lines = []
    for _ in range(200):
        idx = rng.integers(0, len(src), rng.integers(4, 8))
        lines.append(" ".join(src[i] for i in idx) + "\t" + " ".join(tgt[i] for i in idx))
    path = tmp_path_factory.mktemp("pairs") / "pairs.tsv"
    path.write_text("\n".join(lines) + "\n")
    return path


def run_overrides(task, overrides, labelled, pairs, **train_kw):
    train_common = {
        "steps": 10,
        "batch_size": 8,
        "log_every": 1,
        "eval_every": 10,
        "eval_batches": 2,
        "checkpoint_every": 10,
        "lr": 3e-3,
        **train_kw,
    }
    if task in ("clm", "mlm"):
        over = {k: dict(v) for k, v in overrides.items()}
        over["model"]["task"] = task
        over["train"] = train_common
        return over
    model = {"block": "pre-ln", "d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64, "max_seq_len": 32}
    if task == "classification":
        return {
            "data": {"source": str(labelled), "vocab_size": 512, "seq_len": 32},
            "model": {**model, "task": "classification", "n_labels": 2},
            "train": train_common,
        }
    return {
        "data": {"source": str(pairs), "vocab_size": 300, "seq_len": 24, "val_fraction": 0.1},
        "model": {**model, "task": "translation", "n_layers": 1, "dropout": 0.0},
        "train": {**train_common, "optimizer": "adam", "label_smoothing": 0.1},
    }


@pytest.fixture
def recorded(monkeypatch):
    """Each training micro-batch's (summed loss, count of loss terms), in order."""
    seen = []
    real = Trainer.loss_terms

    def loss_terms(self, batch, model):
        loss_sum, n = real(self, batch, model)
        if model.training:
            seen.append((loss_sum.item(), int(n)))
        return loss_sum, n

    monkeypatch.setattr(Trainer, "loss_terms", loss_terms)
    return seen


@pytest.mark.parametrize("task", ["clm", "mlm", "classification", "translation"])
def test_micro_batches_give_the_losses_of_the_whole_batch(tmp_path, overrides, labelled, pairs, recorded, task):
    """grad_accum 2 and 4 log the training loss of every step of grad_accum 1, to float tolerance.

    The counts differ between micro-batches for mlm (each holds its own number of masked tokens) and for
    translation (padded targets): the trainer divides every micro-batch's summed loss by the count of the
    whole batch (task.loss_count, summed before the first backward). A naive trainer that averaged each
    micro-batch on its own and then averaged those means would weight the tokens of small micro-batches
    more: its losses (and gradients) would differ by far more than REL. The test checks that this case is
    really exercised: it computes that naive mean from the micro-batches the trainer ran and asserts it is
    off by more than 10 x REL on some step.

    No dropout here: micro-batches draw their dropout masks in other shapes from the random stream, so
    with dropout > 0 the masks (and the losses, by ~1e-3 at the first step) differ from the whole batch's."""
    ks = (1, 2, 4) if task != "translation" else (1, 2)
    got = {}
    for k in ks:
        recorded.clear()
        s = quiet_train(
            load_config(None, run_overrides(task, overrides, labelled, pairs, grad_accum=k)), tmp_path / f"k{k}"
        )
        assert s.status == "completed" and s.grad_accum == k
        got[k] = losses(tmp_path / f"k{k}")
        assert len(got[k]) == 10 and len(recorded) == 10 * k  # k forward passes a step
        per_step = [recorded[i * k : (i + 1) * k] for i in range(10)]
        # The logged loss is the global-batch mean: summed losses over summed counts.
        for logged, parts in zip(got[k], per_step):
            assert logged == pytest.approx(sum(s for s, _ in parts) / sum(n for _, n in parts), rel=REL)
        if k > 1 and task in ("mlm", "translation"):
            assert any(len({n for _, n in parts}) > 1 for parts in per_step)  # unequal micro-batches
            naive = [np.mean([s / n for s, n in parts]) for parts in per_step]
            assert max(abs(a - b) / b for a, b in zip(naive, got[k])) > 10 * REL
    for k in ks[1:]:
        assert got[k] == pytest.approx(got[1], rel=REL), k
        assert got[k][-1] != got[k][0]  # the model did learn something: the losses compared move


def test_micro_batches_give_muon_the_losses_of_the_whole_batch(tmp_path, overrides, labelled, pairs):
    """Muon steps on the accumulated gradient as AdamW does (its Newton-Schulz iteration runs in bf16, yet
    the micro-batches' float-rounding differences stay within REL over these steps)."""
    got = {}
    for k in (1, 2):
        over = run_overrides("clm", overrides, labelled, pairs, grad_accum=k, optimizer="muon")
        assert quiet_train(load_config(None, over), tmp_path / f"k{k}").status == "completed"
        got[k] = losses(tmp_path / f"k{k}")
    assert got[2] == pytest.approx(got[1], rel=REL) and got[1][-1] < got[1][0]  # equal, and they move


@pytest.mark.parametrize("task", ["clm", "translation"])
def test_activation_checkpointing_gives_the_same_losses(tmp_path, overrides, labelled, pairs, monkeypatch, task):
    """Recomputing each block in the backward pass changes nothing on the CPU in fp32: exact equality,
    dropout included (a Pre-LN model with dropout 0.1: the recomputation replays the random state)."""
    applied = []
    real = trainer.checkpoint_activations
    monkeypatch.setattr(trainer, "checkpoint_activations", lambda m: applied.append(m) or real(m))
    runs = {}
    for ac in (False, True):
        over = run_overrides(task, overrides, labelled, pairs, activation_checkpointing=ac, grad_accum=2)
        over["model"].update(block="pre-ln", dropout=0.1)
        s = quiet_train(load_config(None, over), tmp_path / str(ac))
        assert s.status == "completed"
        runs[ac] = losses(tmp_path / str(ac))
    assert len(applied) == 1  # the True run's model only
    assert len(runs[True]) == 10 and runs[True] == runs[False]
    if task == "translation":  # the evaluation (BLEU: decoding step by step) ran through the patched blocks
        rows = [json.loads(line) for line in (tmp_path / "True" / "metrics.jsonl").read_text().splitlines()]
        assert "bleu" in rows[-1]


def test_resuming_with_other_grad_accum_and_checkpointing_continues_the_run(tmp_path, overrides):
    """How the batch fits in memory may change on resume: the losses continue as before (to tolerance)."""
    over = {k: dict(v) for k, v in overrides.items()}
    over["train"].update(steps=10, checkpoint_every=5, batch_size=8, schedule="constant", warmup_steps=0)
    quiet_train(load_config(None, over), tmp_path / "full")
    over["train"]["steps"] = 5
    quiet_train(load_config(None, over), tmp_path / "cut")
    over["train"].update(steps=10, grad_accum=4, activation_checkpointing=True)
    s = quiet_train(load_config(None, over), tmp_path / "cut", resume=True)
    assert s.status == "completed" and s.grad_accum == 4
    a, b = losses(tmp_path / "full"), losses(tmp_path / "cut")
    assert len(b) == 10 and b[:5] == a[:5] and b[5:] == pytest.approx(a[5:], rel=REL)


def test_summary_of_a_one_process_run(tmp_path, overrides):
    overrides["train"].update(steps=4, grad_accum=2)
    s = quiet_train(load_config(None, overrides), tmp_path / "r")
    saved = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert saved["peak_memory_mb"] == s.peak_memory_mb > 0
    if s.device == "cpu":  # the process's peak resident set in MiB: torch alone takes >100 MiB; not KiB or bytes
        assert 50 < s.peak_memory_mb < 64 * 1024
    assert saved["grad_accum"] == 2
    assert "parallel" in saved and saved["parallel"] is None  # no torchrun: no data-parallel wrapper
    # where it trained, for a report drawn elsewhere
    assert saved["machine"]["torch"] == torch.__version__ and saved["machine"]["cpu_count"] == os.cpu_count()
    assert ("gpu" in saved["machine"]) == (s.device != "cpu")


# --- configuration errors --------------------------------------------------------------------------


def test_grad_accum_must_divide_the_batch(overrides):
    overrides["train"].update(batch_size=4, grad_accum=3)
    with pytest.raises(UserError, match=r"train\.grad_accum=3 .*divide train\.batch_size=4"):
        load_config(None, overrides)
    for bad in (0, -2):
        overrides["train"]["grad_accum"] = bad
        with pytest.raises(UserError, match="train.grad_accum"):
            load_config(None, overrides)
    overrides["train"]["grad_accum"] = 4  # a micro-batch of one row is fine
    assert load_config(None, overrides).train.grad_accum == 4


def test_unknown_parallel_names_the_choices(overrides):
    overrides["train"]["parallel"] = "bogus"
    with pytest.raises(UserError, match="train.parallel") as e:
        load_config(None, overrides)
    assert "bogus" in str(e.value) and "ddp" in str(e.value) and "fsdp" in str(e.value)
    overrides["train"]["parallel"] = "fsdp"
    assert load_config(None, overrides).train.parallel == "fsdp"


def test_activation_checkpointing_must_be_a_boolean(overrides):
    with pytest.raises(UserError, match="activation_checkpointing"):
        load_config(None, ["--train.activation_checkpointing", "maybe"])
    overrides["train"]["activation_checkpointing"] = "maybe"
    with pytest.raises(UserError, match="activation_checkpointing.*true or false"):
        load_config(None, overrides)
    assert load_config(None, ["--train.activation_checkpointing", "true"]).train.activation_checkpointing is True
    assert load_config(None, []).train.activation_checkpointing is False


def test_evaluation_runs_in_pieces_of_a_micro_batch(tmp_path, overrides, labelled, pairs, monkeypatch):
    """What fits training fits evaluation: no evaluation forward holds more rows than a micro-batch, and
    the evaluation loss is the one of the whole batches (float tolerance)."""
    rows = []
    real = Trainer.loss_terms

    def loss_terms(self, batch, model):
        if not model.training:
            rows.append(len(batch[0]))
        return real(self, batch, model)

    monkeypatch.setattr(Trainer, "loss_terms", loss_terms)
    whole = quiet_train(load_config(None, run_overrides("mlm", overrides, labelled, pairs)), tmp_path / "k1")
    assert max(rows) == 8
    rows.clear()
    split = quiet_train(
        load_config(None, run_overrides("mlm", overrides, labelled, pairs, grad_accum=4)), tmp_path / "k4"
    )
    assert max(rows) == 2 and len(rows) >= 4
    assert split.final_eval_loss == pytest.approx(whole.final_eval_loss, rel=REL)
