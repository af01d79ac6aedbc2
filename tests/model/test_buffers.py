"""Non-persistent buffers are in no checkpoint: every module that owns one computes it again on
`reset_buffers()`, which a model built on the meta device (a `transformers` load) relies on."""

import pytest
import torch

from blocklab import ModelConfig, build_model
from blocklab.registry import REGISTRY

SETTINGS = [dict(block=b) for b in REGISTRY] + [dict(block="pre-ln", positions="sinusoidal")]


def own_non_persistent(module: torch.nn.Module) -> list[str]:
    return [n for n in module._non_persistent_buffers_set if getattr(module, n, None) is not None]


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: "+".join(map(str, s.values())))
def test_every_non_persistent_buffer_is_computed_again(setting):
    cfg = ModelConfig(vocab_size=32, d_model=16, n_layers=3, n_heads=2, d_ff=32, max_seq_len=8, **setting)
    model = build_model(cfg)
    want = {k: v.clone() for k, v in model.named_buffers()}
    owners = [m for m in model.modules() if own_non_persistent(m)]
    for m in owners:
        assert hasattr(m, "reset_buffers"), f"{type(m).__name__} owns {own_non_persistent(m)} but no reset_buffers"
        for name in own_non_persistent(m):
            getattr(m, name).fill_(float("nan"))
        m.reset_buffers()
    for k, v in model.named_buffers():
        assert torch.equal(v, want[k]), k


def test_the_settings_above_have_such_buffers():
    # the test above would pass vacuously if no module had one
    cfg = ModelConfig(vocab_size=32, d_model=16, n_layers=2, n_heads=2, d_ff=32, max_seq_len=8, positions="sinusoidal")
    assert any(own_non_persistent(m) for m in build_model(cfg).modules())
