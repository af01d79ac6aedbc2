"""nGPT (blocks/ngpt.py): the unit sphere at init and after every step, its scalings and equations."""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from blocklab import build_model
from tests.blocks.test_successors import code_ids
from tests.helpers import randomize, small_cfg


def _unit(x, dim):
    return torch.allclose(x.norm(dim=dim), torch.ones(()), atol=1e-5)


def assert_ngpt_on_sphere(model):
    assert _unit(model.tok.weight, 1)
    if model.head is not None:
        assert _unit(model.head.weight, 1)
    for i, b in enumerate(model.blocks):
        for name, lin in (("q", b.attn.q), ("k", b.attn.k), ("v", b.attn.v), ("fc1", b.mlp.fc1)):
            assert _unit(lin.weight, 1), f"block {i} {name}: rows"
        for name, lin in (("proj", b.attn.proj), ("fc2", b.mlp.fc2)):
            assert _unit(lin.weight, 0), f"block {i} {name}: columns"


def test_ngpt_matrices_and_embedding_unit_norm_at_init():
    for tie in (True, False):
        assert_ngpt_on_sphere(build_model(small_cfg("ngpt", tie_embeddings=tie)))


def test_ngpt_initial_scalings():
    """Effective alpha_A = alpha_M = 0.05, s_qk = 1, s_u = s_v = 1, s_z = 1; stored at 1/sqrt(d) (1 for s_uv)."""
    d, V = 32, 97
    model = build_model(small_cfg("ngpt"))
    for b in model.blocks:
        for sc in (b.alpha_a, b.alpha_m):
            assert torch.allclose(sc(), torch.full((d,), 0.05))
            assert torch.allclose(sc.s, torch.full((d,), d**-0.5))
        assert torch.allclose(b.attn.s_qk(), torch.ones(d))
        assert torch.allclose(b.attn.s_qk.s, torch.full((d,), d**-0.5))
        assert torch.allclose(b.mlp.s_uv(), torch.ones(2 * 64)) and torch.allclose(b.mlp.s_uv.s, torch.ones(2 * 64))
    assert model.s_z.s.shape == (V,) and torch.allclose(model.s_z.s, torch.full((V,), d**-0.5))
    torch.testing.assert_close(model.head_weight, model.tok.weight)  # s_z = 1: logits = h . e_v


def test_ngpt_every_hidden_state_after_block_0_is_on_the_sphere():
    for task in ("clm", "mlm"):
        for model in (
            build_model(small_cfg("ngpt", task)),
            randomize(build_model(small_cfg("ngpt", task)), seed=10, scale=0.3),
        ):
            out = model(code_ids(2, 16), output_hidden_states=True)
            assert not _unit(out.hidden_states[0], -1)  # token + position: not yet normalised
            for h in out.hidden_states[1:]:
                assert _unit(h, -1)
            assert isinstance(model.final_norm, nn.Identity)


def test_ngpt_block_equations():
    """h <- Norm(h + |alpha_A| (Norm(Attn(h)) - h)), then the MLP; attention: q = s_qk Norm(q_h),
    k = s_qk Norm(k_h), softmax scale sqrt(d_h); MLP: W_o (s_u u * SiLU(s_v sqrt(d) v))."""
    torch.manual_seed(3)
    model = randomize(build_model(small_cfg("ngpt", n_layers=1)), seed=11, scale=0.3)
    b = model.blocks[0]
    d, H, dh, T = 32, 4, 8, 10
    x = torch.randn(2, T, d)
    h = F.normalize(x, dim=-1)

    def heads(t):
        return t.view(2, T, H, dh).transpose(1, 2)

    s_qk = heads(b.attn.s_qk().expand(2, T, d))
    q = s_qk * F.normalize(heads(h @ b.attn.q.weight.t()), dim=-1)
    k = s_qk * F.normalize(heads(h @ b.attn.k.weight.t()), dim=-1)
    v = heads(h @ b.attn.v.weight.t())
    scores = (q @ k.transpose(-1, -2)) * math.sqrt(dh)
    scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    att = (scores.softmax(-1) @ v).transpose(1, 2).reshape(2, T, d) @ b.attn.proj.weight.t()
    torch.testing.assert_close(b.attn(h), att, atol=1e-5, rtol=1e-5)
    h1 = F.normalize(h + b.alpha_a().abs() * (F.normalize(att, dim=-1) - h), dim=-1)
    f = b.mlp.fc1.weight.shape[0] // 2
    s = b.mlp.s_uv()
    uv = h1 @ b.mlp.fc1.weight.t()
    u, vv = uv[..., :f], uv[..., f:]
    mlp = (s[:f] * u * F.silu(s[f:] * math.sqrt(d) * vv)) @ b.mlp.fc2.weight.t()
    want = F.normalize(h1 + b.alpha_m().abs() * (F.normalize(mlp, dim=-1) - h1), dim=-1)
    torch.testing.assert_close(b(x), want, atol=1e-5, rtol=1e-5)
    # logits: s_z * (h . e_v), s_z stored at 1/sqrt(d) and used times sqrt(d)
    with torch.no_grad():
        model.s_z.s.copy_(torch.rand(97) * d**-0.5 * 3)
    ids = code_ids(2, T)
    hid = model(ids, output_hidden_states=True)
    logits = hid.hidden_states[-1] @ model.tok.weight.t() * (model.s_z.s * math.sqrt(d))
    torch.testing.assert_close(hid.logits, logits, atol=1e-5, rtol=1e-5)


def _ngpt_step(model, opt):
    ids = code_ids(4, 16, offset=100)
    model(ids, labels=ids).loss.backward()
    opt.step()
    opt.zero_grad()


@pytest.mark.parametrize("tie", [True, False])
def test_ngpt_back_on_the_sphere_after_a_plain_adamw_step(tie):
    model = build_model(small_cfg("ngpt", tie_embeddings=tie))
    _ngpt_step(model, torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.1))
    # guard: the optimizer alone leaves the sphere
    assert not _unit(model.blocks[0].attn.q.weight, 1) and not _unit(model.tok.weight, 1)
    model.after_optimizer_step()
    assert_ngpt_on_sphere(model)


def test_ngpt_back_on_the_sphere_after_blocklab_optimizer_and_trainer_step():
    from blocklab.training.config import TrainConfig
    from blocklab.training.optim import make_optimizer

    model = build_model(small_cfg("ngpt", n_layers=2))
    opt = make_optimizer(model, TrainConfig(lr=0.05, weight_decay=0.0))
    for _ in range(2):
        _ngpt_step(model, opt)
        model.after_optimizer_step()
        assert_ngpt_on_sphere(model)


def test_ngpt_trainer_keeps_the_matrices_on_the_sphere(tmp_path, overrides):
    """blocklab's Trainer (its optimizer with weight decay, then after_optimizer_step): the checkpointed
    weights have moved from init and are unit-norm along the model dimension."""
    from blocklab.training import load_config, train
    from blocklab.training.checkpoint import load_checkpoint

    overrides["model"]["block"] = "ngpt"
    overrides["train"].update(steps=3, checkpoint_every=3, eval_every=3, lr=0.02, weight_decay=0.1)
    s = train(load_config(None, overrides), tmp_path / "r", progress=False)
    assert s.status == "completed"
    state = load_checkpoint(tmp_path / "r" / "checkpoints")["model"]
    assert _unit(state["tok.weight"], 1)
    for i in range(2):
        for name in ("q", "k", "v"):
            assert _unit(state[f"blocks.{i}.attn.{name}.weight"], 1), (i, name)
        assert _unit(state[f"blocks.{i}.mlp.fc1.weight"], 1), i
        assert _unit(state[f"blocks.{i}.attn.proj.weight"], 0), i
        assert _unit(state[f"blocks.{i}.mlp.fc2.weight"], 0), i
    # the s_z / alpha vectors did train (the run is not a no-op)
    assert not torch.allclose(state["s_z.s"], torch.full_like(state["s_z.s"], 32**-0.5))


def test_ngpt_attention_path_is_reported():
    """nGPT runs softmax attention (SDPA on CPU, the materialized formula when asked); the path the run
    log and summary.json record must say so, not "none"."""
    from blocklab.attention.modules import attention_path

    cpu = torch.device("cpu")
    assert attention_path(build_model(small_cfg("ngpt")), cpu) == "sdpa"
    assert attention_path(build_model(small_cfg("ngpt", attn_impl="materialized")), cpu) == "materialized"


def test_ngpt_refuses_dyt_and_qk_norm():
    with pytest.raises(ValueError, match="norm='dyt'.*'ngpt'"):
        small_cfg("ngpt", norm="dyt")
    with pytest.raises(ValueError, match="qk_norm=True.*'ngpt'"):
        small_cfg("ngpt", qk_norm=True)
