"""SPEC 2c's depth-mixing blocks, attn-res (Kimi Team 2026) and denseformer (Pagliardini et al. 2024): their
stated property at init, the sources each mix reads, causality, padding invariance and a short run that
learns. The suites over every public block (tests/blocks/test_blocks.py, test_options.py, ...) cover them
at their default options; here the options too (Block AttnRes, DenseFormer's dilation and period)."""

import pytest
import torch

import blocklab.blocks  # noqa: F401  (registers the blocks before a config names them)
from blocklab import build_model
from blocklab.blocks import REGISTRY
from blocklab.blocks.classic import PreLN
from blocklab.blocks.depthmix import DepthAttention
from tests.blocks.test_successors import assert_learns, code_ids
from tests.helpers import assert_causal, assert_same_logits_and_grads, randomize, small_cfg

L = 3  # small_cfg's depth: 2L = 6 sub-layers
VARIANTS = [
    ("attn-res", {}),  # Full AttnRes
    ("attn-res", {"attn_res_block": 2}),  # Block AttnRes, one block per layer
    ("attn-res", {"attn_res_block": 3}),  # a boundary between attention and MLP
    ("denseformer", {}),
    ("denseformer", {"denseformer_dilation": 2, "denseformer_period": 2}),
]
IDS = [f"{b}-" + ("-".join(f"{k}={v}" for k, v in kw.items()) or "default") for b, kw in VARIANTS]


@pytest.mark.parametrize("block,kw", VARIANTS, ids=IDS)
def test_causal_on_random_parameters(block, kw):
    assert_causal(randomize(build_model(small_cfg(block, "clm", **kw)), seed=1, scale=0.2))


@pytest.mark.parametrize("block,kw", VARIANTS, ids=IDS)
def test_mlm_padding_invariance(block, kw):
    model = randomize(build_model(small_cfg(block, "mlm", **kw)), seed=2, scale=0.2)
    ids = torch.randint(0, 97, (2, 12))
    short = model(ids, attention_mask=torch.ones(2, 12, dtype=torch.long)).logits
    padded_ids = torch.cat([ids, torch.randint(0, 97, (2, 7))], dim=1)
    mask = torch.cat([torch.ones(2, 12), torch.zeros(2, 7)], dim=1).long()
    torch.testing.assert_close(model(padded_ids, attention_mask=mask).logits[:, :12], short, atol=1e-5, rtol=0)
    assert not torch.allclose(short, model(padded_ids).logits[:, :12], atol=1e-3)  # the mask is what does it


@pytest.mark.parametrize("block,kw", VARIANTS, ids=IDS)
def test_a_short_run_learns(block, kw):
    assert_learns(small_cfg(block, n_layers=4, **kw))


@pytest.mark.parametrize("block", ["attn-res", "denseformer"])
def test_registered_as_stream_blocks_with_a_final_norm(block):
    spec = REGISTRY[block]
    assert spec.family == "stream" and spec.public and spec.final_norm
    assert set(spec.tasks) == {"clm", "mlm", "classification"}  # no decoder: no translation
    assert spec.recipe == ()  # neither paper states lr, warm-up or weight decay as part of its method
    out = build_model(small_cfg(block, "classification", n_labels=3))(code_ids(2, 10))
    assert out.logits.shape == (2, 3)


# ------------------------------------------------------------------------------------------ DenseFormer


def pre_ln_and(block, task="clm", own=(), **kw):
    """A Pre-LN model on random (not init) weights, and a `block` model (with its `own` options) with the same
    block weights."""
    torch.manual_seed(0)
    ref = randomize(build_model(small_cfg("pre-ln", task, n_layers=4, **kw)), seed=3, scale=0.2)
    model = build_model(small_cfg(block, task, n_layers=4, **dict(own), **kw))
    missing, unexpected = model.load_state_dict(ref.state_dict(), strict=False)
    assert unexpected == []
    return ref, model, missing


@pytest.mark.parametrize("task", ["clm", "mlm"])
@pytest.mark.parametrize("k,p", [(1, 1), (2, 1), (1, 3), (3, 2)])
def test_denseformer_is_pre_ln_at_its_initial_weights(task, k, p):
    """alpha_ii = 1, the others 0: every DWA is the identity, so the same block weights give the same
    logits and hidden states as Pre-LN, exactly (Pagliardini et al. Sec. 3.1)."""
    ref, model, missing = pre_ln_and("denseformer", task, {"denseformer_dilation": k, "denseformer_period": p})
    assert missing and all(name.endswith(".dwa.weight") for name in missing)  # the DWA weights alone are new
    ids = code_ids(2, 16)
    a, b = ref(ids, output_hidden_states=True), model(ids, output_hidden_states=True)
    assert torch.equal(a.logits, b.logits)
    for x, y in zip(a.hidden_states, b.hidden_states):
        assert torch.equal(x, y)


@pytest.mark.parametrize("k,p", [(1, 1), (2, 2), (3, 1), (2, 3)])
def test_denseformer_dilation_and_period_select_the_sources(k, p):
    """Block i has a DWA when p divides i, over X_j for j <= i, j = i mod k (epfml/DenseFormer DWAModules),
    its last weight (X_i's) 1 at init; Y_i = X_i otherwise. Checked on random weights against the sum
    written out."""
    n = 6
    model = build_model(small_cfg("denseformer", n_layers=n, denseformer_dilation=k, denseformer_period=p))
    for i, b in enumerate(model.blocks, 1):
        assert (b.dwa is not None) == (i % p == 0)
        if i % p == 0:
            alpha = b.dwa.weight
            assert alpha.shape == (i // k + 1,) and alpha[-1] == 1 and (alpha[:-1] == 0).all()
    randomize(model, seed=4, scale=0.2)
    ids = code_ids(2, 16)
    out = model(ids, output_hidden_states=True)
    y = model.embed(ids)
    xs = [y]
    for i, b in enumerate(model.blocks, 1):
        xs.append(PreLN.forward(b, y))
        y = sum(b.dwa.weight[j // k] * xs[j] for j in range(i + 1) if j % k == i % k) if i % p == 0 else xs[-1]
        torch.testing.assert_close(out.hidden_states[i], y)
    torch.testing.assert_close(out.logits, model.final_norm(y) @ model.tok.weight.t())


# ---------------------------------------------------------------------------------- Attention Residuals


def recorded(model, ids):
    """Run the model; return (its output, every sub-layer's output v_1 .. v_2L in order, {m: the (n, B, T, d)
    sources of h_{m+1}, the mix after m outputs}): m = 2l + 1 for block l's MLP, 2l + 2 after the block
    (m = 2L: the final hidden state)."""
    outs, sources = [], {}
    for l, b in enumerate(model.blocks):
        b.attn.register_forward_hook(lambda mod, a, y: outs.append(y))
        b.mlp.register_forward_hook(lambda mod, a, y: outs.append(y))
        for m, mix in ((2 * l + 1, b.mix_mlp), (2 * l + 2, b.mix_out)):
            mix.register_forward_pre_hook(lambda mod, a, m=m: sources.__setitem__(m, a[0]))
    out = model(ids, output_hidden_states=True)
    return out, outs, sources


def n_sources(m, S):
    """Sources after m outputs: the embedding, the m // S completed blocks and the open block's partial sum."""
    return 1 + m // S + (m % S != 0)


@pytest.mark.parametrize("S", [0, 1, 2, 3, 2 * L])
@pytest.mark.parametrize("task", ["clm", "mlm"])
def test_attn_res_averages_its_sources_uniformly_at_init(S, task):
    """Every pseudo-query is zero at init, so each mix gives each of its n sources weight 1/n, whatever the
    sources (the block weights are random here): Full AttnRes k sources before sub-layer k, Block AttnRes
    the embedding, the completed blocks and the partial sum."""
    model = randomize(build_model(small_cfg("attn-res", task, attn_res_block=S)), seed=5, scale=0.2)
    mixes = [mod for mod in model.modules() if isinstance(mod, DepthAttention)]
    assert len(mixes) == 2 * L  # w_2 .. w_{2L+1}: w_1 would face the embedding alone
    for mix in mixes:
        mix.query.data.zero_()  # as at init (randomize moved them)
    out, _, sources = recorded(model, code_ids(2, 16))
    assert sorted(sources) == list(range(1, 2 * L + 1))
    for l, b in enumerate(model.blocks):
        for m, mix in ((2 * l + 1, b.mix_mlp), (2 * l + 2, b.mix_out)):
            v = sources[m]
            assert v.shape[0] == n_sources(m, S or 1)
            w = mix.weights(v)
            torch.testing.assert_close(w, torch.full_like(w, 1 / v.shape[0]), rtol=0, atol=1e-7)
            torch.testing.assert_close(mix(v), v.mean(0))
    # the final hidden state is the last mix: the mean of every source after the last sub-layer
    torch.testing.assert_close(out.hidden_states[-1], sources[2 * L].mean(0))


def test_attn_res_pseudo_queries_start_at_zero_and_take_no_weight_decay():
    from blocklab.model.params import no_weight_decay

    model = build_model(small_cfg("attn-res"))
    for m in model.modules():
        if isinstance(m, DepthAttention):
            assert (m.query == 0).all() and m.query.shape == (32,) and no_weight_decay(m.query)


@pytest.mark.parametrize("S", [0, 2, 3, 4])
def test_attn_res_sources_are_the_embedding_the_blocks_and_the_partial_sum(S):
    """On random weights: the sources after m outputs are b_0 (the embedding), each completed block's sum of
    S outputs, then the sum of the open block's outputs so far (eqs. 5-6); Full AttnRes: every output."""
    model = randomize(build_model(small_cfg("attn-res", attn_res_block=S)), seed=6, scale=0.2)
    out, outs, sources = recorded(model, code_ids(2, 16))
    emb, s = out.hidden_states[0], S or 1
    assert len(outs) == 2 * L
    for m, v in sources.items():
        want = [emb] + [sum(outs[j : j + s]) for j in range(0, m // s * s, s)]
        if m % s:
            want.append(sum(outs[m // s * s : m]))
        torch.testing.assert_close(v, torch.stack(want))
    # and each sub-layer reads its mix: block l's MLP input is Norm(mix_mlp(its sources))
    b = model.blocks[1]
    h = b.mix_mlp(sources[3])
    torch.testing.assert_close(outs[3], b.mlp(b.norms[1](h)))


@pytest.mark.parametrize("S", [0, 3, 8])
@pytest.mark.parametrize("task", ["clm", "mlm"])
def test_attn_res_is_pre_ln_at_init_up_to_the_norms_epsilon(task, S):
    """Each mix starts as the mean of its n sources, which partition the outputs: Pre-LN's stream over n,
    whose scale each pre-norm and the final norm undo. So the same block weights give Pre-LN's logits (up to
    the norms' epsilon), and the hidden state after block l is Pre-LN's over n (Full AttnRes, Block AttnRes,
    and one block of all 2L = 8 sub-layers, N = 1, where the paper recovers the standard residual)."""
    ref, model, missing = pre_ln_and("attn-res", task, {"attn_res_block": S}, norm_eps=1e-12)
    assert missing and all(".mix_" in name for name in missing)
    ids = code_ids(2, 16)
    a, b = ref(ids, output_hidden_states=True), model(ids, output_hidden_states=True)
    torch.testing.assert_close(b.logits, a.logits, atol=1e-5, rtol=1e-5)
    for l, (x, y) in enumerate(zip(a.hidden_states[1:], b.hidden_states[1:])):
        torch.testing.assert_close(n_sources(2 * l + 2, S or 1) * y, x, atol=1e-5, rtol=1e-5)
    # and it is the pseudo-queries that move it away: the same model with w != 0 is another function
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, DepthAttention):
                m.query.normal_(0, 0.3)
    assert not torch.allclose(model(ids).logits, a.logits, atol=1e-2)


def block_attn_res(blocks, partial_block, mix):
    """The official pseudocode's `block_attn_res` (MoonshotAI/Attention-Residuals README, the paper's Figure 2),
    written from it: a softmax over [blocks..., partial_block] of w^T RMSNorm(v); `mix` gives w and the norm."""
    V = torch.stack(blocks + [partial_block])
    logits = torch.einsum("d,nbtd->nbt", mix.query, mix.norm(V))
    return torch.einsum("nbt,nbtd->btd", logits.softmax(0), V)


def official_logits(model, ids, S, embedding_twice=False):
    """The model run as the pseudocode's layer `forward` (block_size = S sub-layers, layer_number from 0): the
    stack starts with `blocks = []` and `hidden_states` the embedding, so the first boundary makes the embedding
    b_0 (Sec. 3.2: b_0 = h_1); then "the final output layer aggregates all N block representations" (Sec. 3.2):
    one more block_attn_res over the blocks and the last partial sum, with the last block's `mix_out`.
    `embedding_twice`: the other reading of the first call, `blocks = [embedding]` already (layer 0's input is
    the embedding either way: a softmax over two equal sources)."""
    e = model.token_embedding(ids, "pos")
    blocks, partial = ([e] if embedding_twice else []), e
    mix_attn = None  # layer 0's attention reads the embedding: no pseudo-query
    for layer_number, b in enumerate(model.blocks):
        h = partial if mix_attn is None else block_attn_res(blocks, partial, mix_attn)
        if layer_number % (S // 2) == 0:
            blocks, partial = blocks + [partial], None
        attn_out = b.attn(b.norms[0](h))
        partial = partial + attn_out if partial is not None else attn_out
        h = block_attn_res(blocks, partial, b.mix_mlp)
        partial = partial + b.mlp(b.norms[1](h))
        mix_attn = b.mix_out
    return model.final_norm(block_attn_res(blocks, partial, mix_attn)) @ model.head_weight.T


def full_attn_res_logits(model, ids):
    """Full AttnRes from eqs. 1-4: h_l = sum_{i<l} softmax_i(w_l^T RMSNorm(v_i)) v_i, v_0 = h_1 the embedding,
    v_i = f_i(h_i); the final output one more such mix over v_0 .. v_2L."""
    v = [model.token_embedding(ids, "pos")]
    mix = None
    for b in model.blocks:
        h = v[0] if mix is None else block_attn_res(v[:-1], v[-1], mix)
        v.append(b.attn(b.norms[0](h)))
        v.append(b.mlp(b.norms[1](block_attn_res(v[:-1], v[-1], b.mix_mlp))))
        mix = b.mix_out
    return model.final_norm(block_attn_res(v[:-1], v[-1], mix)) @ model.head_weight.T


@pytest.mark.parametrize("S", [0, 2, 4])
def test_attn_res_equals_the_official_pseudocode_and_the_papers_equations(S):
    """At equal weights in float64, every pseudo-query (zero at init) and key-norm gain moved off its init: the
    logits and every parameter's gradient equal the official pseudocode's (Block AttnRes, S = 2, 4) and eqs. 1-4
    (Full AttnRes, S = 0) to 1e-10, the first layer reading the embedding alone and the final norm one more mix."""
    torch.manual_seed(0)
    model = randomize(build_model(small_cfg("attn-res", n_layers=4, attn_res_block=S)).double(), seed=9, scale=0.3)
    assert all((m.query != 0).all() for m in model.modules() if isinstance(m, DepthAttention))
    ids = code_ids(2, 12)
    ref = official_logits(model, ids, S) if S else full_attn_res_logits(model, ids)
    assert_same_logits_and_grads(model, model(ids).logits, ref)
    # the other reading of the first call (the embedding both a completed block and the first partial sum)
    # counts b_0 twice: an O(1) difference, which the comparison above would see
    if S:
        with torch.no_grad():
            assert (official_logits(model, ids, S, embedding_twice=True) - ref).abs().max() > 1e-2


def test_attn_res_key_norm_is_rmsnorm_whatever_the_stream_norm():
    """The keys' norm is the paper's RMSNorm under norm="layernorm" too; norm="dyt" replaces it (SPEC 2b)."""
    from blocklab.layers import DyT, RMSNorm

    for norm, kind in (("layernorm", RMSNorm), ("rmsnorm", RMSNorm), ("dyt", DyT)):
        model = build_model(small_cfg("attn-res", norm=norm))
        assert all(isinstance(m.norm, kind) for m in model.modules() if isinstance(m, DepthAttention))


def test_compiling_a_denseformer_block_leaves_its_average_eager_and_importing_blocks_leaves_the_compiler_alone():
    """Block-by-block compilation (the trainer's) must not put each DWA's differently shaped weight in its
    block's graph; and importing the blocks must not import torch._dynamo (3 s of every command's start)."""
    import subprocess
    import sys

    code = "import sys, blocklab.blocks, blocklab.model; print('torch._dynamo' in sys.modules)"
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        == "False"
    )
    model = build_model(small_cfg("denseformer", n_layers=2))
    ids = torch.randint(0, 97, (2, 9))
    want = model(ids).logits
    for block in model.blocks:
        block.compile(backend="eager")
    assert all(getattr(b.dwa.forward, "_torchdynamo_disable", False) for b in model.blocks)
    assert torch.allclose(model(ids).logits, want, atol=1e-6)
