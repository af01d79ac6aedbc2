"""SPEC 2c `value-residual` (ResFormer, Zhou et al. 2024): its equation, exactly Pre-LN with lambda = (0, 1), the
lambdas trained only when asked, causality and padding invariance with either kind of lambda, and a short run
that learns. The stream's state (x, V_1) stays inside the stack: hidden states and logits are the usual ones."""

import pytest
import torch

from blocklab import build_model, param_groups
from blocklab.attention import attention_matrix
from blocklab.attention.functional import merge_heads, split_heads
from blocklab.blocks import REGISTRY, model_hooks
from blocklab.blocks.value_residual import FirstValues, ValueResidual
from tests.blocks.test_successors import assert_learns, code_ids
from tests.helpers import assert_causal, randomize, small_cfg

LEARNABLE = [False, True]


def vr_cfg(task="clm", learnable=False, **kw):
    return small_cfg("value-residual", task, value_residual_learnable=learnable, **kw)


def set_lambdas(model, l1, l2):
    with torch.no_grad():
        for block in model.blocks[1:]:
            block.attn.lambda1.fill_(l1)
            block.attn.lambda2.fill_(l2)


def test_registered_as_a_stream_block_whose_state_carries_the_first_values():
    spec = REGISTRY["value-residual"]
    assert spec.cls is ValueResidual and spec.family == "stream" and spec.dropout
    assert spec.recipe == () and spec.beta_ff is None and spec.beta_sa is None
    hooks = model_hooks("value-residual")
    assert isinstance(hooks, FirstValues)
    x = torch.randn(2, 3, 4)
    state = hooks.enter(None, x)
    assert state[0] is x and state[1] is None and hooks.leave(None, (x, torch.ones(1))) is x


@pytest.mark.parametrize("learnable", LEARNABLE)
def test_causality_on_random_parameters(learnable):
    assert_causal(randomize(build_model(vr_cfg("clm", learnable)), seed=1, scale=0.2))


@pytest.mark.parametrize("learnable", LEARNABLE)
@pytest.mark.parametrize("impl", ["sdpa", "materialized"])
def test_mlm_padding_invariance(learnable, impl):
    model = randomize(build_model(vr_cfg("mlm", learnable, attn_impl=impl)), seed=2, scale=0.2)
    set_lambdas(model, 0.8, 0.3)  # away from 0.5 = 0.5, so that V_1's share is visible
    ids = torch.randint(0, 97, (2, 12))
    short = model(ids, attention_mask=torch.ones(2, 12, dtype=torch.long)).logits
    padded_ids = torch.cat([ids, torch.randint(0, 97, (2, 7))], dim=1)
    mask = torch.cat([torch.ones(2, 12), torch.zeros(2, 7)], dim=1).long()
    assert torch.allclose(short, model(padded_ids, attention_mask=mask).logits[:, :12], atol=1e-5)
    assert not torch.allclose(short, model(padded_ids).logits[:, :12], atol=1e-3)  # the mask is what does it


def reference_hidden_states(model, ids, causal):
    """The equation written out with the T x T attention matrix: V_1 = Norm(x_0) W^V_1 (layer 1's own values),
    then every layer n >= 2 attends over lambda_1 V_1 + lambda_2 Norm(x_{n-1}) W^V_n."""
    H = model.cfg.n_heads
    x = model.embed(ids)
    hidden, v1 = [x], None
    for n, block in enumerate(model.blocks):
        attn, h = block.attn, block.norms[0](x)
        q, k, v = (split_heads(lin(h), H) for lin in (attn.q, attn.k, attn.v))
        if n == 0:
            v1 = v
        else:
            v = attn.lambda1 * v1 + attn.lambda2 * v
        u = x + attn.proj(merge_heads(attention_matrix(q, k, causal) @ v))
        x = u + block.mlp(block.norms[1](u))
        hidden.append(x)
    return hidden


@pytest.mark.parametrize("learnable", LEARNABLE)
@pytest.mark.parametrize("task", ["clm", "mlm"])
def test_block_equation_every_layer_mixes_the_first_layers_values(task, learnable):
    model = randomize(build_model(vr_cfg(task, learnable, n_layers=4)), seed=3, scale=0.2)
    set_lambdas(model, 0.9, 0.4)
    ids = torch.randint(0, 97, (2, 10))
    out = model(ids, output_hidden_states=True)
    want = reference_hidden_states(model, ids, task == "clm")
    assert len(out.hidden_states) == 5
    for got, expected in zip(out.hidden_states, want, strict=True):
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.logits, model.final_norm(want[-1]) @ model.head_weight.t(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("learnable", LEARNABLE)
@pytest.mark.parametrize("task", ["clm", "mlm"])
def test_lambda_0_1_is_exactly_pre_ln_with_the_same_weights(task, learnable):
    pre = randomize(build_model(small_cfg("pre-ln", task)), seed=4, scale=0.2).eval()
    vr = build_model(vr_cfg(task, learnable)).eval()
    missing, unexpected = vr.load_state_dict(pre.state_dict(), strict=False)
    assert unexpected == [] and all(k.endswith(("lambda1", "lambda2")) for k in missing)
    assert len(missing) == (4 if learnable else 0)  # the two gains of layers 2 and 3; buffers are not saved
    ids = torch.randint(0, 97, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, 11:] = 0
    want = pre(ids, attention_mask=mask).logits
    assert not torch.allclose(vr(ids, attention_mask=mask).logits, want, atol=1e-3)  # lambda = 0.5, 0.5
    set_lambdas(vr, 0.0, 1.0)
    torch.testing.assert_close(vr(ids, attention_mask=mask).logits, want, rtol=0, atol=0)


def test_default_lambdas_are_fixed_buffers_at_one_half():
    model = build_model(vr_cfg(n_layers=3))
    assert not any("lambda" in n for n, _ in model.named_parameters())
    assert not any("lambda" in k for k in model.state_dict())
    assert not hasattr(model.blocks[0].attn, "lambda1")  # layer 1's values are V_1 themselves
    for block in model.blocks[1:]:
        assert block.attn.lambda1.item() == block.attn.lambda2.item() == 0.5
    ids = code_ids(2, 16)
    model(ids, labels=ids).loss.backward()
    assert all(b.attn.lambda1.grad is None for b in model.blocks[1:])


def test_learnable_lambdas_start_at_one_half_get_gradients_and_no_weight_decay():
    model = build_model(vr_cfg(learnable=True, n_layers=3))
    names = sorted(n for n, _ in model.named_parameters() if "lambda" in n)
    assert names == [f"blocks.{n}.attn.lambda{i}" for n in (1, 2) for i in (1, 2)]
    ids = code_ids(2, 16)
    model(ids, labels=ids).loss.backward()
    for block in model.blocks[1:]:
        for lam in (block.attn.lambda1, block.attn.lambda2):
            assert lam.item() == 0.5 and lam.grad is not None and lam.grad.abs().item() > 0
    decayed, undecayed = param_groups(model, 0.1)
    lambdas = {id(p) for n, p in model.named_parameters() if "lambda" in n}
    assert lambdas <= {id(p) for p in undecayed["params"]} and not lambdas & {id(p) for p in decayed["params"]}
    before = [b.attn.lambda1.item() for b in model.blocks[1:]]
    torch.optim.AdamW(model.parameters(), lr=1e-2).step()
    assert all(b.attn.lambda1.item() != v for b, v in zip(model.blocks[1:], before))


def test_the_first_values_are_not_detached():
    """With layer 1's output projection zero, W^V_1 reaches the loss only through V_1 in the later layers: it
    still gets a gradient (the official code does not detach V_1)."""
    model = randomize(build_model(vr_cfg(n_layers=3)), seed=5, scale=0.1)
    with torch.no_grad():
        model.blocks[0].attn.proj.weight.zero_()
    ids = code_ids(2, 16)
    model(ids, labels=ids).loss.backward()
    assert model.blocks[0].attn.v.weight.grad.abs().sum() > 0
    set_lambdas(model, 0.0, 1.0)  # and only through them: without the mix, no gradient at all
    model.zero_grad()
    model(ids, labels=ids).loss.backward()
    assert model.blocks[0].attn.v.weight.grad.abs().sum() == 0


@pytest.mark.parametrize("learnable", LEARNABLE)
def test_a_short_run_learns(learnable):
    assert_learns(vr_cfg(learnable=learnable, n_layers=4))
