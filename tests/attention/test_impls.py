"""sdpa and materialized paths agree on random parameters, forward and backward (SPEC section 2).

float64 shows the two formulas are the same function (agreement to 1e-9); float32 shows
the default dtype stays within rounding relative to each tensor's scale.
"""

import pytest
import torch

from blocklab import BLOCKS, build_model
from tests.helpers import randomize, small_cfg

TOL = {torch.float64: 1e-9, torch.float32: 2e-5}
# Random weights far from init in float64; milder in float32, where a norm-free stack
# with large random weights amplifies rounding beyond what "rounding" should mean.
SCALE = {torch.float64: 0.3, torch.float32: 0.1}


def _run(block, task, impl, ids, mask, labels, dtype):
    torch.manual_seed(1)
    model = randomize(build_model(small_cfg(block, task, attn_impl=impl)), seed=3, scale=SCALE[dtype]).to(dtype)
    out = model(ids, attention_mask=mask, labels=labels)
    out.loss.backward()
    return out.logits, {n: p.grad for n, p in model.named_parameters()}


def close(a, b, tol):
    return (a - b).abs().max().item() <= tol * max(1.0, a.abs().max().item())


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("block", BLOCKS + ("softmax-noskip",))
@pytest.mark.parametrize("task,padded", [("clm", False), ("mlm", False), ("mlm", True)])
def test_fused_and_materialized_agree(block, task, padded, dtype):
    ids = torch.randint(0, 97, (2, 16))
    mask = None
    labels = torch.randint(0, 97, (2, 16))
    if padded:
        mask = torch.ones(2, 16, dtype=torch.long)
        mask[0, 11:] = 0
        labels = labels.masked_fill(mask == 0, -100)
    la, ga = _run(block, task, "sdpa", ids, mask, labels, dtype)
    lb, gb = _run(block, task, "materialized", ids, mask, labels, dtype)
    real = slice(None) if mask is None else mask.bool()
    assert close(la[real], lb[real], TOL[dtype])
    for name in ga:
        assert ga[name] is not None, name
        assert close(ga[name], gb[name], TOL[dtype]), name


def test_sdpa_path_never_builds_a_T_by_T_tensor(monkeypatch):
    """The default shaped path must not call the materialised helpers."""
    import blocklab.attention.modules as mod

    def boom(*a, **k):
        raise AssertionError("materialised attention used on the sdpa path")

    monkeypatch.setattr(mod, "attention_matrix", boom)
    monkeypatch.setattr(mod, "centring_matrix", boom)
    paths, real = [], mod.softmax_attention
    monkeypatch.setattr(mod, "softmax_attention", lambda *a: (paths.append(a[-1]), real(*a))[1])
    for block in ("sas", "sas-p", "shaped-vp", "v-skipinit"):
        paths.clear()
        model = build_model(small_cfg(block))
        model(torch.randint(0, 97, (1, 16))).logits.sum().backward()
        assert paths == ["sdpa"] * model.cfg.n_layers, (block, paths)  # every block's attention ran, on sdpa


def test_cpu_bf16_autocast_runs_the_flash_kernel_in_fp32(monkeypatch):
    """The CPU flash backward is 3-4x slower in bf16; autocast must not undo the fp32 upcast."""
    import blocklab.attention.functional as fn

    seen, real = [], fn.F.scaled_dot_product_attention

    def spy(q, k, v, **kw):
        seen.append(q.dtype)
        return real(q, k, v, **kw)

    monkeypatch.setattr(fn.F, "scaled_dot_product_attention", spy)
    for block in ("pre-ln", "sas-p"):
        model = build_model(small_cfg(block))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(torch.randint(0, 97, (2, 16))).logits
        assert out.dtype == torch.bfloat16  # the rest of the model does run in bf16
    assert seen and all(d == torch.float32 for d in seen)


def test_sdpa_path_takes_mixed_dtypes_like_the_materialized_one():
    """Queries and keys wider than the values (shaped attention's V is the block input, whose dtype can differ
    from the projections' outside autocast): SDPA refuses mixed dtypes, so the sdpa path computes in their
    promotion and returns V's dtype, as the materialized path does."""
    from blocklab.attention.functional import softmax_attention

    torch.manual_seed(0)
    q, k = torch.randn(2, 2, 7, 8, dtype=torch.float64), torch.randn(2, 2, 7, 8, dtype=torch.float64)
    v = torch.randn(2, 2, 7, 8)
    key_mask = torch.tensor([[1] * 7, [1] * 4 + [0] * 3])
    for mask in (None, key_mask):
        out = softmax_attention(q, k, v, True, mask, "sdpa")
        ref = softmax_attention(q, k, v.double(), True, mask, "materialized")
        assert out.dtype == torch.float32
        torch.testing.assert_close(out, ref.float(), rtol=1e-5, atol=1e-6)


def _mha(impl, causal=None, seed=0):
    from blocklab.attention import MultiHeadAttention

    torch.manual_seed(seed)
    cfg = small_cfg("pre-ln", "translation", attn_impl=impl)
    return randomize(MultiHeadAttention(cfg, causal=causal), seed=seed + 1).double()


def _reference(m, x, memory, key_mask, causal):
    """concat_h(softmax(mask(Q_h K_h^T / sqrt(d_h))) V_h) W^P, written out: the formula, no library function."""
    B, T, d = x.shape
    S, H = memory.shape[1], m.cfg.n_heads
    dh = d // H
    q = (x @ m.q.weight.t()).view(B, T, H, dh).transpose(1, 2)
    k = (memory @ m.k.weight.t()).view(B, S, H, dh).transpose(1, 2)
    v = (memory @ m.v.weight.t()).view(B, S, H, dh).transpose(1, 2)
    scores = q @ k.transpose(-2, -1) / dh**0.5
    ok = torch.ones(B, 1, T, S, dtype=torch.bool)
    if key_mask is not None:
        ok = ok & key_mask.bool()[:, None, None, :]
    if causal:
        ok = ok & torch.ones(T, S, dtype=torch.bool).tril(S - T)
    out = scores.masked_fill(~ok, float("-inf")).softmax(-1) @ v
    return out.transpose(1, 2).reshape(B, T, d) @ m.proj.weight.t()


@pytest.mark.parametrize("impl", ["materialized", "sdpa", "fused", "auto"])
def test_cross_attention_is_the_formula_with_a_key_padding_mask(impl):
    """Queries from x, keys and values from the memory (another length), padded memory keys never seen."""
    m = _mha(impl, causal=False)
    g = torch.Generator().manual_seed(0)
    x, memory = torch.randn(3, 5, 32, generator=g).double(), torch.randn(3, 7, 32, generator=g).double()
    key_mask = torch.ones(3, 7, dtype=torch.long)
    key_mask[0, 4:], key_mask[2, 1:] = 0, 0
    want = _reference(m, x, memory, key_mask, causal=False)
    assert close(m(x, key_mask, memory=memory), want, 1e-9)
    assert close(m(x, key_mask, kv=m.keys_values(memory)), want, 1e-9)
    # whatever the padded memory rows hold
    other = memory.clone()
    other[0, 4:], other[2, 1:] = 5.0, -3.0
    assert close(m(x, key_mask, memory=other), want, 1e-9)
    assert close(m(x, None, memory=memory), _reference(m, x, memory, None, causal=False), 1e-9)


@pytest.mark.parametrize("impl", ["materialized", "sdpa"])
def test_incremental_decoding_equals_the_full_causal_pass(impl):
    """Token by token (and a chunk of several new tokens at once) with a KVCache, as the translation
    decoder decodes, gives the full causal self-attention's outputs."""
    from blocklab.attention import KVCache

    m = _mha(impl, causal=True)
    x = torch.randn(2, 9, 32, generator=torch.Generator().manual_seed(1)).double()
    full = m(x)
    assert close(full, _reference(m, x, x, None, causal=True), 1e-9)
    cache = KVCache()
    steps = [m(x[:, t : t + 1], kv=cache.append(*m.keys_values(x[:, t : t + 1]))) for t in range(4)]
    steps.append(m(x[:, 4:], kv=cache.append(*m.keys_values(x[:, 4:]))))  # 5 new queries, 9 keys
    assert cache.k.shape[2] == 9
    assert close(torch.cat(steps, 1), full, 1e-9)
    cache.reorder(torch.tensor([1, 0]))
    torch.testing.assert_close(cache.k[0], m.keys_values(x)[0][1])
