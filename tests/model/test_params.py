"""The Muon / AdamW split of a model's parameters (model/params.py, muon_split): every parameter of every
registered block in exactly one part, the blocks' matrices Muon's, every gain, norm weight, bias and scalar
AdamW's, as are the embeddings and the head."""

import pytest
import torch.nn as nn

from blocklab import ModelConfig, build_model
from blocklab.layers import DyT, RMSNorm
from blocklab.model import block_matrices, muon_split
from blocklab.registry import REGISTRY


def tiny(block: str, task: str = "clm", **kw) -> nn.Module:
    return build_model(
        ModelConfig(
            block=block, task=task, vocab_size=50, d_model=16, n_layers=2, n_heads=2, d_ff=32, max_seq_len=8, **kw
        )
    )


def parts(model) -> tuple[dict[str, nn.Parameter], dict[str, nn.Parameter]]:
    muon, adamw = muon_split(model)
    ids = {id(p) for p in muon}
    assert len(ids) == len(muon) and not ids & {id(p) for p in adamw}  # no parameter in both, none twice
    named = dict(model.named_parameters())
    assert {id(p) for p in named.values()} == ids | {id(p) for p in adamw}  # and none left out
    return {n: p for n, p in named.items() if id(p) in ids}, {n: p for n, p in named.items() if id(p) not in ids}


CASES = [(b, "clm", {}) for b in REGISTRY] + [(b, "translation", {}) for b, s in REGISTRY.items() if s.decoder]
# Every option that adds parameters: biases, a gate matrix, DyT's scalar and vectors, 3-D Canon convolutions.
CASES += [("pre-ln", "clm", {"bias": True, "mlp_bias": True, "attn_gate": True, "norm": "dyt", "canon": "ABCD"})]
CASES += [("pre-ln", "classification", {}), ("pre-ln", "clm", {"tie_embeddings": False})]


@pytest.mark.parametrize("block,task,options", CASES, ids=[f"{b}-{t}{'-opts' * bool(o)}" for b, t, o in CASES])
def test_every_parameter_is_in_exactly_one_part_and_only_block_matrices_in_muons(block, task, options):
    model = tiny(block, task, **options)
    muon, adamw = parts(model)
    assert muon and all(p.dim() == 2 and n.startswith(("blocks.", "decoder_blocks.")) for n, p in muon.items())
    # No gain, norm weight, bias or scalar goes to Muon: every parameter of fewer (or more) than 2 dimensions,
    # every parameter of a norm module and every bias is AdamW's, and so are the embeddings and the heads.
    norms = {
        f"{name}.{p}"
        for name, m in model.named_modules()
        if isinstance(m, (RMSNorm, nn.LayerNorm, DyT))
        for p, _ in m.named_parameters(recurse=False)
    }
    outside = [n for n in muon if n.split(".")[0] not in ("blocks", "decoder_blocks")]
    assert not outside and not norms & set(muon) and not [n for n in muon if n.endswith("bias")]
    assert {n for n, p in adamw.items() if p.dim() != 2} == {n for n, p in model.named_parameters() if p.dim() != 2}
    for head in ("tok.weight", "pos.weight", "head.weight", "classifier.weight", "pooler.weight"):
        assert head not in muon
    # Every 2-D parameter of a block is a hidden matrix here: the weights of its linear maps.
    assert set(muon) == {
        n for n, p in model.named_parameters() if n.startswith(("blocks.", "decoder_blocks.")) and p.dim() == 2
    }


def test_ngpt_declares_its_six_matrices_and_keeps_its_scalings_on_adamw():
    model = tiny("ngpt")
    muon, adamw = parts(model)
    roles = ("attn.q", "attn.k", "attn.v", "attn.proj", "mlp.fc1", "mlp.fc2")
    assert set(muon) == {f"blocks.{i}.{r}.weight" for i in range(2) for r in roles}
    scalings = {n for n in adamw if n.endswith(".s")}  # alpha_A, alpha_M, s_qk, s_uv and the logit scale s_z
    assert {n.rsplit(".", 2)[-2] for n in scalings} == {"alpha_a", "alpha_m", "s_qk", "s_uv", "s_z"}
    assert all(p.dim() == 1 for n, p in adamw.items() if n in scalings)


@pytest.mark.parametrize("block", ["sas", "sas-p", "shaped-vp", "v-skipinit"])
def test_shaped_attention_scalars_go_to_adamw_and_its_projections_to_muon(block):
    muon, adamw = parts(tiny(block))
    a = "blocks.0.attn"
    assert {f"{a}.alpha", f"{a}.beta"} <= set(adamw) and f"{a}.q.weight" in muon and f"{a}.k.weight" in muon
    gains = {"blocks.0.beta_ff"} | ({"blocks.0.beta_sa"} if block == "sas-p" else set())
    gains |= {f"{a}.gamma"} if block != "v-skipinit" else set()  # v-skipinit has no centring term
    assert gains <= set(adamw)
    if block == "shaped-vp":  # W = alpha I + beta dW: its trainable scalars AdamW's, dW Muon's
        assert {f"{a}.value.alpha", f"{a}.value.beta", f"{a}.proj.alpha", f"{a}.proj.beta"} <= set(adamw)
        assert {f"{a}.value.dW.weight", f"{a}.proj.dW.weight"} <= set(muon)


def test_a_blocks_own_declaration_decides_and_is_checked():
    model = tiny("pre-ln")
    block = model.blocks[0]
    block.muon_matrices = lambda: [block.attn.q.weight]  # a block that keeps its other matrices on AdamW
    muon, adamw = parts(model)
    assert "blocks.0.attn.q.weight" in muon and "blocks.0.attn.k.weight" in adamw
    assert "blocks.1.attn.k.weight" in muon  # the other block keeps the default
    for bad, words in (
        (lambda: [block.norms[0].weight], "not a trainable 2-D parameter"),
        (lambda: [model.blocks[1].attn.q.weight], "not a trainable 2-D parameter"),  # another block's
        (lambda: [block.attn.q.weight, block.attn.q.weight], "twice"),
    ):
        block.muon_matrices = bad
        with pytest.raises(ValueError, match=words):
            block_matrices(block)
