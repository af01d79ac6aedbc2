"""Block-level properties of SPEC.md section 2 that must hold."""

import pytest
import torch

from blocklab import BLOCKS, build_model
from tests.helpers import assert_causal, assert_padding_invariant, randomize, small_cfg


@pytest.mark.parametrize("norm", ["rmsnorm", "layernorm"])
@pytest.mark.parametrize("task", ["clm", "mlm"])
def test_sas_p_is_identity_at_init(norm, task):
    """sas-p with beta_ff=0 maps every block input x to beta_SA * Norm(x)."""
    model = build_model(small_cfg("sas-p", task, norm=norm, beta_ff=0.0, beta_sa=0.7))
    out = model(torch.randint(0, 97, (2, 16)), output_hidden_states=True)
    for block, x, y in zip(model.blocks, out.hidden_states[:-1], out.hidden_states[1:]):
        assert torch.allclose(y, 0.7 * block.norm(x), atol=1e-5)


def test_identity_needs_the_centring_term():
    """Guard for the test above: without -gamma C the block is not the identity at init."""
    model = build_model(small_cfg("sas-p", beta_ff=0.0))
    for block in model.blocks:
        block.attn.gamma.data.zero_()
    out = model(torch.randint(0, 97, (2, 16)), output_hidden_states=True)
    x, y = out.hidden_states[0], out.hidden_states[1]
    assert not torch.allclose(y, model.blocks[0].norm(x), atol=1e-3)


@pytest.mark.parametrize("task", ["clm", "mlm"])
def test_sas_and_sas_p_agree_at_init(task):
    ids = torch.randint(0, 97, (2, 16))
    outs = []
    for block in ("sas", "sas-p"):
        torch.manual_seed(5)
        outs.append(build_model(small_cfg(block, task)).eval()(ids).logits)
    assert torch.allclose(outs[0], outs[1], atol=1e-4)


@pytest.mark.parametrize("block", BLOCKS)
def test_causality_on_random_parameters(block):
    assert_causal(randomize(build_model(small_cfg(block, "clm")), seed=1, scale=0.2))


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("impl", ["sdpa", "materialized"])
def test_mlm_padding_invariance(block, impl):
    model = randomize(build_model(small_cfg(block, "mlm", attn_impl=impl)), seed=2, scale=0.2)
    assert_padding_invariant(model)


@pytest.mark.parametrize("block", BLOCKS)
def test_every_block_trains_at_issue_shape(block):
    """Forward and backward at d=256, 6 layers, T=256 on CPU, finite gradients everywhere."""
    model = build_model(
        small_cfg(block, d_model=256, n_layers=6, n_heads=4, d_ff=1024, max_seq_len=256, vocab_size=512)
    )
    ids = torch.randint(0, 512, (2, 256))
    out = model(ids, labels=ids)
    out.loss.backward()
    assert torch.isfinite(out.loss)
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name


def test_first_sas_block_keeps_identity_plus_value_others_have_none():
    model = build_model(small_cfg("sas", n_layers=3))
    assert model.blocks[0].attn.value is not None and model.blocks[0].attn.value.dW.weight.abs().sum() == 0
    assert all(b.attn.value is None and b.attn.proj is None for b in model.blocks[1:])
    assert all(b.attn.q.weight.abs().sum() == 0 for b in model.blocks)


def test_shaped_vp_reparametrisation():
    model = build_model(small_cfg("shaped-vp", beta_v=0.3))
    for b in model.blocks:
        for w in (b.attn.value, b.attn.proj):
            assert w.alpha.item() == 1.0 and w.beta.item() == pytest.approx(0.3)
            assert w.dW.weight.abs().sum() == 0


@pytest.mark.slow
@pytest.mark.parametrize(
    "block,kw",
    [
        ("normformer", {}),
        ("olmo2", {}),
        ("frac-connections", {}),
        ("muddformer", {}),
        ("pre-ln", {"canon": "ABCD"}),
    ],
)
def test_blocks_compiled_one_by_one_equal_eager(block, kw):
    """The trainer compiles block by block (train.compile): through AOTAutograd (backend aot_eager, which traces
    the backward too), the logits and every gradient equal the eager model's."""
    torch.manual_seed(0)
    model = randomize(build_model(small_cfg(block, **kw)), seed=4, scale=0.1)
    ids = torch.randint(0, 97, (2, 12))

    def run():
        model.zero_grad()
        out = model(ids, labels=ids)
        out.loss.backward()
        return out.logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    logits, grads = run()
    for b in model.blocks:
        b.compile(backend="aot_eager")
    logits_c, grads_c = run()
    torch.testing.assert_close(logits_c, logits, rtol=1e-5, atol=1e-6)
    for name, g in grads.items():
        torch.testing.assert_close(grads_c[name], g, rtol=1e-4, atol=1e-6, msg=name)
