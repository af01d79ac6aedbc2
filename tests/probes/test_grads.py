"""layer_grad_norms: every block's and role's weight-gradient norm, equal to a direct computation."""

import pytest
import torch
import torch.nn as nn

from blocklab import ModelConfig, build_model
from blocklab.probes.grads import block_weights, layer_grad_norms

ROLES = ("attn.q", "attn.k", "attn.v", "attn.proj", "mlp.fc1", "mlp.fc2")


def model_after_backward(block, task="clm", n_layers=3):
    cfg = ModelConfig(
        block=block, task=task, vocab_size=50, d_model=16, n_layers=n_layers, n_heads=2, d_ff=32, max_seq_len=8
    )
    model = build_model(cfg)
    x = torch.randint(0, 50, (2, 8))
    model(x, labels=x).loss.backward()
    return model


def direct(model, prefix: str) -> dict[str, float]:
    """Every Linear weight's gradient norm, named by its module path: an independent computation."""
    out = {}
    for name, m in model.named_modules():
        if isinstance(m, nn.Linear) and name.startswith(prefix) and m.weight.grad is not None:
            out[name] = m.weight.grad.double().norm().item()
    return out


@pytest.mark.parametrize("block", ["post-ln", "pre-ln", "sas-p"])
def test_norms_equal_the_direct_computation_for_every_block_and_role(block):
    model = model_after_backward(block)
    g = layer_grad_norms(model)
    want = direct(model, "blocks.")
    assert len(g) == len(want) > 0  # one key per Linear of every block, none twice
    for name, value in want.items():
        layer, rest = name.removeprefix("blocks.").split(".", 1)
        role = {"attn.value": "attn.v", "attn.value.dW": "attn.v"}.get(rest, rest.removesuffix(".dW"))
        assert g[f"L{layer}.{role}"] == pytest.approx(value, rel=1e-5)
    layers = {int(k[1:].split(".")[0]) for k in g}
    assert layers == {0, 1, 2}
    roles = ROLES if block != "sas-p" else ("attn.q", "attn.k", "attn.v", "mlp.fc1", "mlp.fc2")  # SAS: no W^P
    assert {k.split(".", 1)[1] for k in g} == set(roles)
    # SAS starts with W^Q = 0 (He & Hofmann), so W^K's gradient is exactly 0 at init; every other is > 0
    zero = {k for k, v in g.items() if v == 0}
    assert zero == ({f"L{i}.attn.k" for i in range(3)} if block == "sas-p" else set())


def test_decoder_blocks_have_their_own_prefix():
    model = model_after_backward("pre-ln", task="translation", n_layers=2)
    g = layer_grad_norms(model)
    want = direct(model, "decoder_blocks.")
    assert {k for k in g if k.startswith("D")} == {
        f"D{i}.{r}"
        for i in range(2)
        for r in (
            "self_attn.q",
            "self_attn.k",
            "self_attn.v",
            "self_attn.proj",
            "cross_attn.q",
            "cross_attn.k",
            "cross_attn.v",
            "cross_attn.proj",
            "mlp.fc1",
            "mlp.fc2",
        )
    }
    for name, value in want.items():
        layer, role = name.removeprefix("decoder_blocks.").split(".", 1)
        assert g[f"D{layer}.{role}"] == pytest.approx(value, rel=1e-5)
    assert {k for k in g if k.startswith("L")} == {f"L{i}.{r}" for i in range(2) for r in ROLES}


def test_missing_grads_are_skipped_and_a_wrapper_is_unwrapped():
    model = model_after_backward("pre-ln")
    model.blocks[1].mlp.fc2.weight.grad = None
    g = layer_grad_norms(model)
    assert "L1.mlp.fc2" not in g and "L0.mlp.fc2" in g
    wrapper = nn.Module()
    wrapper.module = model  # as DistributedDataParallel holds it
    assert layer_grad_norms(wrapper) == g
    model.zero_grad(set_to_none=True)
    assert layer_grad_norms(model) == {} and len(block_weights(model)) == 3 * len(ROLES)


def test_one_device_sync(monkeypatch):
    """One `.tolist()` for all the weights, no `.item()` per weight."""
    model = model_after_backward("pre-ln")
    calls = {"item": 0}
    real_item = torch.Tensor.item

    def counting_item(self):
        calls["item"] += 1
        return real_item(self)

    monkeypatch.setattr(torch.Tensor, "item", counting_item)
    assert len(layer_grad_norms(model)) == 3 * len(ROLES)
    assert calls["item"] == 0
