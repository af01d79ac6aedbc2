"""The token model reaches a block only through the hooks of its spec (blocks/hooks.py): head parameters,
the matrix the logits use and a step after every update. It names no block; nGPT's logit scale and its
return to the sphere are its hooks."""

import re
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import blocklab
from blocklab import build_model
from blocklab.blocks import NO_HOOKS, ModelHooks, model_hooks, register, unregister
from blocklab.blocks.classic import PreLN
from blocklab.blocks.ngpt import SphereHooks
from blocklab.model.base import lm_head_params
from tests.helpers import small_cfg

SRC = Path(blocklab.__file__).parent


def test_the_token_model_and_the_trainer_name_no_block():
    """What a block asks of the model lives with the block: the model package and the trainer's step never
    name nGPT, nor its unit sphere or logit scale."""
    files = [*sorted((SRC / "model").glob("*.py")), SRC / "training" / "loop.py", SRC / "training" / "pretrained.py"]
    for path in files:
        text = path.read_text()
        found = re.findall(r"ngpt|\bsphere\b|\bs_z\b|renormalise", text, flags=re.IGNORECASE)
        assert not found, f"{path.relative_to(SRC)} names {sorted(set(found))}"


class Tripled(ModelHooks):
    """A toy block's hooks: a head parameter `t`, logits over 3 t w, a count of the updates."""

    head_params = ("t",)

    def __init__(self):
        self.updates = 0

    def add_head(self, model, cfg):
        model.t = nn.Parameter(torch.ones(()))

    def head_weight(self, model, w):
        return 3 * model.t * w

    def after_update(self, model):
        assert not torch.is_grad_enabled()
        self.updates += 1


@pytest.fixture
def hooked_block():
    class Hooked(PreLN):
        pass

    hooks = Tripled()
    register("hooked-toy", label="Hooked toy", family="ablation", colour="#abcdef", model_hooks=hooks)(Hooked)
    try:
        yield "hooked-toy", hooks
    finally:
        unregister("hooked-toy")


@pytest.mark.parametrize("tie", [True, False])
def test_the_model_calls_a_new_blocks_hooks(hooked_block, tie):
    name, hooks = hooked_block
    model = build_model(small_cfg(name, tie_embeddings=tie))
    assert model_hooks(name) is hooks and model.block_hooks is hooks
    assert hooks.updates == 1  # after init_weights
    assert "t" in dict(model.named_parameters())
    torch.testing.assert_close(model.head_weight, 3 * model.head_matrix)
    ids = torch.randint(0, 97, (2, 5))
    out = model(ids, output_hidden_states=True)
    torch.testing.assert_close(out.logits, model.final_norm(out.hidden_states[-1]) @ (3 * model.head_matrix).t())
    model.after_optimizer_step()
    assert hooks.updates == 2
    assert lm_head_params(name) == ("head.", "t.")
    assert [w.data_ptr() for w in model.token_matrices()] == [
        model.tok.weight.data_ptr(),
        *([] if tie else [model.head.weight.data_ptr()]),
    ]


def test_a_block_without_hooks_gets_none():
    assert model_hooks("pre-ln") is NO_HOOKS
    model = build_model(small_cfg("pre-ln"))
    assert model.head_weight is model.tok.weight
    assert lm_head_params("pre-ln") == ("head.",)


def test_ngpts_logit_scale_and_sphere_are_its_hooks_under_the_same_names():
    assert isinstance(model_hooks("ngpt"), SphereHooks)
    assert lm_head_params("ngpt") == ("head.", "s_z.")
    model = build_model(small_cfg("ngpt", tie_embeddings=False))
    assert {"s_z.s", "head.weight", "tok.weight"} <= set(model.state_dict())  # checkpoint names unchanged
    classifier = build_model(small_cfg("ngpt", task="classification", n_labels=2))
    assert not any(k.startswith(lm_head_params("ngpt")) for k in classifier.state_dict())


def test_a_hooks_declaration_of_the_wrong_type_is_refused():
    class Bad(PreLN):
        pass

    register("bad-hooks-toy", label="Bad hooks toy", family="ablation", colour="#fedcba", model_hooks="sphere")(Bad)
    try:
        with pytest.raises(TypeError, match="block 'bad-hooks-toy': model_hooks must be a ModelHooks, got str"):
            model_hooks("bad-hooks-toy")
    finally:
        unregister("bad-hooks-toy")


class TwoStreams(ModelHooks):
    """A toy widened stream: two copies of the embedding, the hidden state their mean."""

    def enter(self, model, x):
        return torch.stack([x, 2 * x], dim=2)

    def leave(self, model, state):
        return state.mean(dim=2)


def test_a_blocks_stream_state_passes_from_block_to_block_and_leaves_as_the_hidden_state():
    class OnTwoStreams(PreLN):
        """Pre-LN on each of two streams, then the streams swapped: the state's shape is the block's to keep."""

        def forward(self, state, key_mask=None):
            a, b = (super(OnTwoStreams, self).forward(state[:, :, i], key_mask) for i in (0, 1))
            return torch.stack([b, a], dim=2)

    register("two-streams-toy", label="Two streams toy", family="ablation", colour="#123456", model_hooks=TwoStreams())(
        OnTwoStreams
    )
    try:
        torch.manual_seed(0)
        model = build_model(small_cfg("two-streams-toy"))
        ids = torch.randint(0, 97, (2, 6))
        out = model(ids, output_hidden_states=True)
        x = model.embed(ids)
        a, b = x, 2 * x
        expected = [x]
        for block in model.blocks:
            a, b = PreLN.forward(block, b, None), PreLN.forward(block, a, None)
            expected.append((a + b) / 2)
        for got, want in zip(out.hidden_states, expected, strict=True):
            torch.testing.assert_close(got, want)
        torch.testing.assert_close(out.logits, model.final_norm(expected[-1]) @ model.head_weight.t())
    finally:
        unregister("two-streams-toy")
