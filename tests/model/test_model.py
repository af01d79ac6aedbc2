import math

import pytest
import torch

from blocklab import BLOCKS, ModelConfig, build_model, param_groups
from blocklab.model import count_parameters
from tests.helpers import small_cfg

PAPER = dict(vocab_size=50_000, d_model=768, n_layers=18, n_heads=12, d_ff=3072, max_seq_len=1024)


def test_parameter_counts_at_the_paper_shape():
    with torch.device("meta"):
        n = {b: count_parameters(build_model(ModelConfig(block=b, **PAPER))) for b in ("pre-ln", "sas", "sas-p")}
    assert n["pre-ln"] / 1e6 == pytest.approx(166.6, abs=0.05)
    assert n["sas"] / 1e6 == pytest.approx(146.0, abs=0.05)
    assert n["sas-p"] / 1e6 == pytest.approx(146.0, abs=0.05)
    L, d, H = 18, 768, 12
    # SAS loses W^V, W^P except the first W^V, gains L * 3H (alpha, beta, gamma) + L beta_FF.
    assert n["pre-ln"] - n["sas"] == (2 * L - 1) * d * d - L * (3 * H + 1)
    # SAS-P also drops one norm per block (d weights) and gains beta_SA.
    assert n["sas"] - n["sas-p"] == L * d - L


def test_api_shapes_and_hidden_states():
    cfg = small_cfg("sas-p")
    out = build_model(cfg)(
        torch.randint(0, 97, (3, 10)), labels=torch.randint(0, 97, (3, 10)), output_hidden_states=True
    )
    assert out.logits.shape == (3, 10, 97)
    assert len(out.hidden_states) == cfg.n_layers + 1 and out.hidden_states[0].shape == (3, 10, 32)
    assert out.loss.ndim == 0
    assert build_model(cfg).blocks.__class__ is torch.nn.ModuleList


def test_loss_ignores_minus_100_and_matches_cross_entropy():
    model = build_model(small_cfg("pre-ln"))
    ids, labels = torch.randint(0, 97, (2, 8)), torch.randint(0, 97, (2, 8))
    labels[:, :3] = -100
    out = model(ids, labels=labels)
    ref = torch.nn.functional.cross_entropy(out.logits[:, 3:].reshape(-1, 97), labels[:, 3:].reshape(-1))
    assert torch.allclose(out.loss, ref)


def test_initial_loss_is_near_uniform():
    out = build_model(small_cfg("pre-ln"))(torch.randint(0, 97, (4, 16)), labels=torch.randint(0, 97, (4, 16)))
    assert abs(out.loss.item() - math.log(97)) < 0.2


def test_weight_matrices_are_linear_modules_and_tied():
    model = build_model(small_cfg("pre-ln"))
    assert model.head is None  # tied: logits use the token embedding
    assert any(isinstance(m, torch.nn.Linear) for m in model.blocks[0].modules())
    untied = build_model(small_cfg("pre-ln", tie_embeddings=False))
    assert count_parameters(untied) == count_parameters(model) + 97 * 32


def test_no_weight_decay_on_gains_norms_biases():
    model = build_model(small_cfg("sas-p", mlp_bias=True, norm="layernorm"))
    decay, no_decay = param_groups(model, 0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    no_decay_names = {names[id(p)] for p in no_decay["params"]}
    decay_names = {names[id(p)] for p in decay["params"]}
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    for n in no_decay_names:
        assert any(k in n for k in ("alpha", "beta", "gamma", "norm", "bias")), n
    for key in ("attn.alpha", "attn.gamma", "beta_ff", "beta_sa", "norm.weight", "norm.bias", "mlp.fc1.bias"):
        assert any(key in n for n in no_decay_names), key
    assert "tok.weight" in decay_names and "blocks.0.mlp.fc1.weight" in decay_names
    assert len(decay_names) + len(no_decay_names) == len(list(model.parameters()))


@pytest.mark.parametrize("positions", ["learned", "sinusoidal"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_options_build_and_run(positions, activation):
    model = build_model(small_cfg("parallel", positions=positions, activation=activation, init="xavier"))
    assert torch.isfinite(model(torch.randint(0, 97, (1, 24))).logits).all()


def test_xavier_init_scales_embeddings():
    d = 256
    model = build_model(small_cfg("pre-ln", init="xavier", d_model=d, vocab_size=4000))
    x0 = model.embed(torch.randint(0, 4000, (4, 24)))
    assert (x0.pow(2).sum(-1).mean() / d).item() == pytest.approx(1.0, abs=0.1)
    assert model.tok.weight.std().item() == pytest.approx(d**-0.5, rel=0.05)


def test_too_long_sequence_is_a_clear_error():
    with pytest.raises(ValueError, match="max_seq_len"):
        build_model(small_cfg())(torch.randint(0, 97, (1, 25)))


def test_all_blocks_listed():
    assert set(BLOCKS) == {
        "post-ln",
        "pre-ln",
        "parallel",
        "v-skipinit",
        "shaped-vp",
        "sas",
        "sas-p",
        "sas-p-nonorm",
        "deepnorm",
        "rezero",
        "peri-ln",
        "mix-ln",
        "lns",
        "ngpt",
        "op",
        "hyper-connections",
        "mhc",
        "attn-res",
        "denseformer",
        "value-residual",
        "laurel",
        "hybridnorm",
        "resi-dual",
        "admin",
        "t-fixup",
        "normformer",
        "olmo2",
        "frac-connections",
        "muddformer",
    }
