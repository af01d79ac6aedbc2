"""summary.json keeps the final evaluation's per-batch losses and tokens: the sweep's verdicts pair them."""

import pytest

from blocklab.training import load_config, train


def test_the_per_batch_eval_losses_make_up_the_eval_loss(tmp_path, corpus_dir):
    cfg = load_config(
        None,
        {
            "data": {"source": str(corpus_dir), "vocab_size": 512, "seq_len": 16},
            "model": {"block": "pre-ln", "d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 32},
            "train": {"steps": 3, "batch_size": 2, "eval_every": 3, "eval_batches": 3, "checkpoint_every": 3},
        },
    )
    s = train(cfg, tmp_path / "run", progress=False, log=lambda *a: None)
    b = s.final_eval_batches
    assert len(b["loss"]) == len(b["tokens"]) == 3 and all(t > 0 for t in b["tokens"])
    mean = sum(x * t for x, t in zip(b["loss"], b["tokens"])) / sum(b["tokens"])
    assert mean == pytest.approx(s.final_eval_loss, rel=1e-9)
    assert len(set(b["loss"])) > 1  # the batches differ: their spread is what pairing removes
