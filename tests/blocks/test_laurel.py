"""SPEC 2c `laurel` (LAuReL-LR, Menghani et al. 2024): the paper's initialisation (A column-orthogonal with entries
1/sqrt(r d), B zero), exactly Pre-LN at init, its equation on random weights, the low-rank path opening after one
step, causality, padding invariance and a short run that learns."""

import pytest
import torch

from blocklab import build_model, param_groups
from blocklab.blocks import REGISTRY, model_hooks
from blocklab.blocks.hooks import NO_HOOKS
from blocklab.blocks.laurel import Laurel, LowRank
from blocklab.model import count_parameters
from tests.blocks.test_successors import assert_learns, code_ids
from tests.helpers import assert_causal, randomize, small_cfg


def test_registered_as_a_stream_block():
    spec = REGISTRY["laurel"]
    assert spec.cls is Laurel and spec.family == "stream" and spec.dropout and spec.final_norm
    assert spec.recipe == () and spec.beta_ff is None and spec.beta_sa is None
    assert model_hooks("laurel") is NO_HOOKS  # the stream stays the hidden state


@pytest.mark.parametrize("d,r", [(32, 4), (30, 4), (8, 32), (64, 32)])
def test_init_is_the_papers_column_orthogonal_a_and_zero_b(d, r):
    """Sec. 3.3, footnote 2: A_{i,j} = 1/sqrt(r D) if i mod r = j, else 0 (A is D x r there; F.linear's
    (r, d) weight here), and B = 0; whatever r and d, also when r does not divide d or exceeds it."""
    lr = LowRank(d, r)
    A, B = lr.A.detach(), lr.B.detach()
    assert A.shape == (r, d) and B.shape == (d, r) and torch.equal(B, torch.zeros(d, r))
    j, i = torch.meshgrid(torch.arange(r), torch.arange(d), indexing="ij")
    want = torch.where(i % r == j, (r * d) ** -0.5, 0.0)  # float32, as the parameter
    torch.testing.assert_close(A, want, rtol=0, atol=0)
    assert (A != 0).sum() == d  # each coordinate of x feeds exactly one of the r outputs
    gram = A @ A.T  # the paper's A^T A: its columns are orthogonal
    assert torch.equal(gram, torch.diag(torch.diagonal(gram)))


def test_the_model_keeps_that_init_under_either_config_init():
    """init_weights redraws every Linear; the low-rank factors are not Linears and keep the paper's start."""
    for init in ("normal", "xavier"):
        model = build_model(small_cfg("laurel", init=init, laurel_rank=5))
        ref = LowRank(32, 5)
        for block in model.blocks:
            for lr in block.low_rank:
                assert torch.equal(lr.A, ref.A) and torch.equal(lr.B, ref.B)


@pytest.mark.parametrize("task", ["clm", "mlm"])
def test_at_init_it_is_exactly_pre_ln_with_the_same_weights(task):
    torch.manual_seed(7)
    pre = build_model(small_cfg("pre-ln", task)).eval()
    torch.manual_seed(7)
    laurel = build_model(small_cfg("laurel", task)).eval()
    # The low-rank factors draw no random numbers: one seed gives both models the same Pre-LN weights.
    pre_sd = pre.state_dict()
    for k, v in laurel.state_dict().items():
        assert torch.equal(v, pre_sd[k]) if k in pre_sd else ".low_rank." in k
    ids = torch.randint(0, 97, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[0, 12:] = 0
    a, b = (
        pre(ids, attention_mask=mask, output_hidden_states=True),
        laurel(ids, attention_mask=mask, output_hidden_states=True),
    )
    torch.testing.assert_close(b.logits, a.logits, rtol=0, atol=0)
    for x, y in zip(a.hidden_states, b.hidden_states, strict=True):
        torch.testing.assert_close(y, x, rtol=0, atol=0)


def test_block_equation_on_random_weights():
    """u = x + MHA(Norm(x)) + B_1 A_1 x; y = u + MLP(Norm(u)) + B_2 A_2 u: the low-rank path reads the stream."""
    model = randomize(build_model(small_cfg("laurel", n_layers=2, laurel_rank=3)), seed=1, scale=0.2)
    x = torch.randn(2, 9, 32)
    for b in model.blocks:
        (A1, B1), (A2, B2) = ((lr.A, lr.B) for lr in b.low_rank)
        u = x + b.attn(b.norms[0](x)) + x @ A1.T @ B1.T
        want = u + b.mlp(b.norms[1](u)) + u @ A2.T @ B2.T
        torch.testing.assert_close(b(x), want, atol=1e-5, rtol=1e-5)
        pre_ln = u - x @ A1.T @ B1.T
        assert not torch.allclose(b(x), pre_ln + b.mlp(b.norms[1](pre_ln)), atol=1e-3)  # the path counts


def test_the_low_rank_path_opens_after_one_step():
    """At init only B gets a gradient (B = 0 stops A's); one AdamW step moves B, so B A is no longer zero and
    the model leaves Pre-LN."""
    torch.manual_seed(0)
    pre = build_model(small_cfg("pre-ln"))
    torch.manual_seed(0)
    model = build_model(small_cfg("laurel"))
    ids = code_ids(2, 16)
    model(ids, labels=ids).loss.backward()
    for block in model.blocks:
        for lr in block.low_rank:
            assert lr.A.grad.abs().sum() == 0 and lr.B.grad.abs().sum() > 0
    torch.optim.AdamW(model.parameters(), lr=1e-3).step()
    x = torch.randn(2, 9, 32)
    for block in model.blocks:
        for lr in block.low_rank:
            assert lr.B.abs().sum() > 0 and lr(x).abs().max() > 0
    with torch.no_grad():
        pre.load_state_dict({k: v for k, v in model.state_dict().items() if ".low_rank." not in k})
        assert not torch.allclose(model(ids).logits, pre(ids).logits, atol=1e-6)


def test_low_rank_factors_are_decayed_matrices_and_add_4_r_d_per_block():
    model = build_model(small_cfg("laurel", n_layers=3, laurel_rank=6))
    decayed = {id(p) for p in param_groups(model, 0.1)[0]["params"]}
    factors = [p for n, p in model.named_parameters() if ".low_rank." in n]
    assert len(factors) == 3 * 2 * 2 and all(id(p) in decayed for p in factors)
    pre = build_model(small_cfg("pre-ln", n_layers=3))
    assert count_parameters(model) - count_parameters(pre) == 3 * 2 * (2 * 6 * 32)  # 2 r D per sub-layer


def test_causality_on_random_parameters():
    assert_causal(randomize(build_model(small_cfg("laurel", "clm")), seed=1, scale=0.2))


@pytest.mark.parametrize("impl", ["sdpa", "materialized"])
def test_mlm_padding_invariance(impl):
    model = randomize(build_model(small_cfg("laurel", "mlm", attn_impl=impl)), seed=2, scale=0.2)
    ids = torch.randint(0, 97, (2, 12))
    short = model(ids, attention_mask=torch.ones(2, 12, dtype=torch.long)).logits
    padded_ids = torch.cat([ids, torch.randint(0, 97, (2, 7))], dim=1)
    mask = torch.cat([torch.ones(2, 12), torch.zeros(2, 7)], dim=1).long()
    assert torch.allclose(short, model(padded_ids, attention_mask=mask).logits[:, :12], atol=1e-5)
    assert not torch.allclose(short, model(padded_ids).logits[:, :12], atol=1e-3)  # the mask is what does it


def test_a_short_run_learns():
    assert_learns(small_cfg("laurel", n_layers=4))
