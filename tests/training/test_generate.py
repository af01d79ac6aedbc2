"""blocklab.load_run: a trained run read back from Python, as the README's Python API shows it."""

import pytest
import torch

import blocklab
from blocklab.errors import UserError
from blocklab.training import load_config, train


@pytest.mark.slow
def test_load_run_gives_the_trained_model_its_tokenizer_config_and_step(tmp_path, overrides):
    overrides["train"].update(steps=6, checkpoint_every=3, keep_checkpoints=0)
    run = tmp_path / "run"
    summary = train(load_config(None, overrides), run, progress=False, log=lambda *a: None)
    model, tokenizer, config, step = blocklab.load_run(run)
    assert step == 6 and not model.training and config.model.block == "sas-p"
    assert config == load_config(run / "config.toml")
    ids = torch.tensor([tokenizer.encode("def f(x):\n    return x\n").ids])
    with torch.no_grad():
        assert torch.isfinite(model(ids, labels=ids).loss)
    older = blocklab.load_run(run, step=3)
    assert older.step == 3 and not torch.equal(older.model.tok.weight, model.tok.weight)
    assert summary.step == 6
    with pytest.raises(UserError, match="holds no blocklab run"):
        blocklab.load_run(tmp_path / "nothing")
