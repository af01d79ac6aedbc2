"""Shared test helpers: a small config and parameter randomisation."""
import torch

from blocklab import ModelConfig, build_model


def small_cfg(block="pre-ln", task="clm", **kw):
    base = dict(block=block, task=task, vocab_size=97, d_model=32, n_layers=3, n_heads=4, d_ff=64, max_seq_len=24)
    base.update(kw)
    return ModelConfig(**base)


@torch.no_grad()
def randomize(model, seed=0, scale=0.3):
    """Move every parameter off its init, so init-time cancellations (zero queries, beta=0) cannot hide bugs."""
    g = torch.Generator().manual_seed(seed)
    for p in model.parameters():
        p.add_(torch.randn(p.shape, generator=g) * scale)
    return model




def as_args(over: dict) -> list[str]:
    """{'model': {'block': 'sas'}} -> ['--model.block', 'sas']."""
    return [tok for s, kv in over.items() for k, v in kv.items() for tok in (f"--{s}.{k}", str(v))]
