"""Qualitative signal-propagation trends at init on small models (Xiong et al.'s setting:
Xavier init, LayerNorm, ReLU), measured through run_init_probes."""

import json

import pytest
import torch

from blocklab.probes import random_batches, run_init_probes
from blocklab.probes.predictions import lemma2_bounds

D, V, T, B = 64, 128, 32, 4
XIONG = dict(vocab_size=V, d_model=D, n_heads=4, d_ff=D, init="xavier", norm="layernorm", activation="relu")


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the test machine is shared; small matrices gain little from threads
    out = tmp_path_factory.mktemp("probes")
    try:
        r = run_init_probes(
            ["post-ln", "pre-ln", "sas"],
            [2, 4, 8, 16],
            random_batches(V, T, B),
            model=XIONG,
            seeds=3,
            n_batches=1,
            ablation=True,
            out=out,
        )
    finally:
        torch.set_num_threads(threads)
    return r, out


def hidden(result, block, L):
    return result["results"][block][str(L)]["hidden_sq_norm"]["mean"]


@pytest.mark.slow
def test_pre_ln_grows_linearly_within_lemma_2_and_post_ln_is_flat(result):
    r, _ = result
    pre = hidden(r, "pre-ln", 16)
    assert all(b > a for a, b in zip(pre, pre[1:]))
    for l, n in enumerate(pre):
        lo, hi = lemma2_bounds(l, D)
        assert 0.97 * lo <= n <= 1.03 * hi, (l, n / D)
    growth = [(b - a) / D for a, b in zip(pre, pre[1:])]
    assert 0.5 < sum(growth) / len(growth) < 1.5  # about linear: the mean step is within the per-block bounds
    post = hidden(r, "post-ln", 16)
    assert all(abs(n / D - 1) < 1e-3 for n in post[1:])


def test_last_ffn_gradient_post_ln_flat_pre_ln_shrinking(result):
    r, _ = result
    post, pre = r["last_ffn_vs_depth"]["post-ln"], r["last_ffn_vs_depth"]["pre-ln"]
    assert max(post["mean"]) / min(post["mean"]) < 1.5
    assert abs(post["slope"]) < 0.15
    assert pre["mean"][0] > pre["mean"][-1]
    assert -0.8 < pre["slope"] < -0.3  # Theorem 1: -0.5
    assert pre["reference"]["slope"] == -0.5 and post["reference"]["slope"] == 0.0
    assert r["last_ffn_vs_depth"]["sas"]["reference"] is None


def test_rank_collapse_softmax_noskip_but_not_shaped_attention(result):
    r, _ = result
    noskip = r["results"]["softmax-noskip"]["16"]["cosine_similarity"]["mean"]
    sas = r["results"]["sas"]["16"]["cosine_similarity"]["mean"]
    assert noskip[-1] > 0.95 and noskip[-1] > noskip[1] > noskip[0]
    assert max(sas) < 0.2
    assert r["settings"]["ablation"] == "softmax-noskip"


def test_probes_json_is_written_and_complete(result):
    r, out = result
    on_disk = json.loads((out / "probes.json").read_text())
    assert on_disk == json.loads(json.dumps(r))
    assert on_disk["schema"] == "blocklab.probes/1"
    assert on_disk["settings"]["blocks"] == ["post-ln", "pre-ln", "sas", "softmax-noskip"]
    entry = on_disk["results"]["pre-ln"]["4"]
    assert len(entry["hidden_sq_norm"]["mean"]) == 5 and len(entry["cosine_similarity"]["std"]) == 5
    assert len(entry["grad_norm"]["mlp.fc2"]["mean"]) == 4
    assert entry["n_samples"] == 3
    assert len(on_disk["predictions"]["pre-ln"]["hidden_sq_norm"]["upper"]) == 17
