"""nGPT's language-model head in the harness: fine-tuning leaves s_z behind, FLOPs count the stored matrix."""

import torch
import torch.nn as nn

from blocklab import ModelConfig, build_model
from blocklab.training.checkpoint import save_checkpoint
from blocklab.training.pretrained import load_encoder
from blocklab.training.throughput import flops_per_token


def ngpt(task, **kw):
    torch.manual_seed(0)
    return build_model(
        ModelConfig(
            block="ngpt", task=task, vocab_size=120, d_model=32, n_layers=2, n_heads=4, d_ff=64, max_seq_len=16, **kw
        )
    )


def test_a_classifier_takes_an_ngpt_mlm_encoder_without_its_logit_scale(tmp_path):
    mlm = ngpt("mlm", tie_embeddings=False)
    assert {"s_z.s", "head.weight"} <= set(mlm.state_dict())
    save_checkpoint(tmp_path / "checkpoints", 5, mlm, torch.optim.SGD(mlm.parameters(), lr=0.1), {})
    clf = ngpt("classification")
    assert load_encoder(clf, tmp_path, 5) == 5
    torch.testing.assert_close(clf.blocks[1].attn.q.weight, mlm.blocks[1].attn.q.weight)
    torch.testing.assert_close(clf.tok.weight, mlm.tok.weight)


def test_flops_count_the_untied_ngpt_head_once():
    model = ngpt("clm", tie_embeddings=False)
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))  # the head included
    assert flops_per_token(model, 16) == 6.0 * linear + 12.0 * 2 * 16 * 32
    tied = ngpt("clm")
    linear = sum(m.weight.numel() for m in tied.modules() if isinstance(m, nn.Linear)) + tied.tok.weight.numel()
    assert flops_per_token(tied, 16) == 6.0 * linear + 12.0 * 2 * 16 * 32
