"""The `transformers` wrappers of every block (blocklab.hf): the same logits as blocklab's own model, the same
greedy tokens as `blocklab generate`'s sampler, through a save_pretrained / from_pretrained round trip."""

import pytest
import torch

from blocklab import ModelConfig, build_model
from blocklab.registry import REGISTRY
from blocklab.training.generate import sample

hf = pytest.importorskip("blocklab.hf")
from transformers import (  # noqa: E402
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
)

AUTO = {"clm": AutoModelForCausalLM, "mlm": AutoModelForMaskedLM, "classification": AutoModelForSequenceClassification}
V, T = 64, 12
# Settings that change what the wrapper carries: sinusoidal positions (a buffer a meta-device load leaves
# empty), an untied head, the optional attention parts, the other norms, the fused path (sdpa on CPU).
VARIANTS = {
    "pre-ln+sinusoidal+untied": dict(block="pre-ln", positions="sinusoidal", tie_embeddings=False),
    "pre-ln+gate+qk_norm": dict(block="pre-ln", attn_gate="headwise", qk_norm=True),
    "pre-ln+dyt": dict(block="pre-ln", norm="dyt"),
    "pre-ln+derf+bias": dict(block="pre-ln", norm="derf", bias=True, mlp_bias=True),
    "sas-p+fused": dict(block="sas-p", attn_impl="fused"),
    "value-residual+learnable": dict(block="value-residual", value_residual_learnable=True),
    "hyper-connections+static": dict(block="hyper-connections", hc_dynamic=False),
    "hybridnorm+first-pre": dict(block="hybridnorm", hybridnorm_first_pre=True),
    "post-ln+xavier": dict(block="post-ln", init="xavier", activation="gelu", norm="layernorm"),
    "pre-ln+canon": dict(block="pre-ln", canon="ABCD"),
    "normformer+output-scale": dict(block="normformer", normformer_head_scale="output", canon="AC"),
    "frac-connections+static+m4": dict(block="frac-connections", hc_dynamic=False, frac_fractions=4),
}
CASES = {b: dict(block=b) for b in REGISTRY} | VARIANTS


def cfg_of(case: str, task: str) -> ModelConfig:
    extra = dict(n_labels=3) if task == "classification" else {}
    return ModelConfig(
        task=task, vocab_size=V, d_model=16, n_layers=2, n_heads=2, d_ff=32, max_seq_len=T, **CASES[case], **extra
    )


def trained_like(cfg: ModelConfig, seed: int = 0) -> torch.nn.Module:
    """A model whose zero-initialised parts (shaped attention's W^Q, ReZero's gains ...) are not zero, so that a
    part the export dropped or misplaced would change the logits; its constraint set restored, as after a step."""
    torch.manual_seed(seed)
    model = build_model(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    model.after_optimizer_step()
    return model.eval()


def round_trip(model: torch.nn.Module, tmp_path):
    wrapper = hf.HF_CLASSES[model.cfg.task].from_blocklab(model)
    wrapper.save_pretrained(tmp_path)
    return AUTO[model.cfg.task].from_pretrained(tmp_path).eval()


def padded_batch(seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, V, (3, T), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0  # right padding, as blocklab's batches have it
    mask[2, 5:] = 0
    ids[mask == 0] = 0
    return ids, mask


def tasks_of(task: str) -> list[str]:
    return [c for c in CASES if task in REGISTRY[CASES[c]["block"]].tasks]


@pytest.mark.parametrize("case", tasks_of("clm"))
def test_causal_logits_and_greedy_tokens_equal_blocklab(case, tmp_path):
    model = trained_like(cfg_of(case, "clm"))
    loaded = round_trip(model, tmp_path)
    assert type(loaded).__name__ == "BlocklabForCausalLM"
    ids, mask = padded_batch()
    with torch.no_grad():
        want = model(ids, mask).logits
        got = loaded(input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    # Past max_seq_len (12): both read the newest window; both stop at <eod>.
    prompt = ids[:1, :4]
    want = sample(model, prompt, 14, temperature=0, stop_id=2)
    got = loaded.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=14, do_sample=False)
    assert got.tolist() == want.tolist()


@pytest.mark.parametrize("case", tasks_of("mlm"))
def test_masked_lm_logits_equal_blocklab(case, tmp_path):
    model = trained_like(cfg_of(case, "mlm"))
    loaded = round_trip(model, tmp_path)
    ids, mask = padded_batch()
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=ids, attention_mask=mask).logits, model(ids, mask).logits)


@pytest.mark.parametrize("case", ["pre-ln", "sas-p", "ngpt", "mhc", "pre-ln+sinusoidal+untied"])
def test_classifier_logits_and_loss_equal_blocklab(case, tmp_path):
    model = trained_like(cfg_of(case, "classification"))
    loaded = round_trip(model, tmp_path)
    assert loaded.config.num_labels == 3
    ids, mask = padded_batch()
    labels = torch.tensor([0, 2, 1])
    with torch.no_grad():
        want, got = model(ids, mask, labels), loaded(input_ids=ids, attention_mask=mask, labels=labels)
    torch.testing.assert_close(got.logits, want.logits)
    torch.testing.assert_close(got.loss, want.loss)


def test_causal_labels_are_shifted_as_transformers_has_them(tmp_path):
    model = trained_like(cfg_of("pre-ln", "clm"))
    wrapper = hf.BlocklabForCausalLM.from_blocklab(model)
    ids, _ = padded_batch()
    with torch.no_grad():
        hf_loss = wrapper(input_ids=ids, labels=ids).loss
        own = model(ids[:, :-1], labels=ids[:, 1:]).loss  # blocklab's labels are the next tokens
    torch.testing.assert_close(hf_loss, own)


def test_a_fresh_model_from_its_config_is_blocklabs_init():
    cfg = cfg_of("sas-p", "clm")
    torch.manual_seed(3)
    want = build_model(cfg).state_dict()
    torch.manual_seed(3)
    got = AutoModelForCausalLM.from_config(hf.BlocklabConfig(blocklab=cfg.to_dict())).model.state_dict()
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)


def test_the_config_carries_the_whole_model_config(tmp_path):
    cfg = cfg_of("hybridnorm+first-pre", "clm")
    hf.BlocklabConfig(blocklab=cfg.to_dict()).save_pretrained(tmp_path)
    back = AutoConfig.from_pretrained(tmp_path)
    assert back.model_config == cfg
    assert (back.hidden_size, back.max_position_embeddings, back.vocab_size) == (16, T, V)


def test_a_wrapper_of_another_task_and_a_bad_config_are_value_errors():
    with pytest.raises(ValueError, match="'clm'"):
        hf.BlocklabForCausalLM(hf.BlocklabConfig(blocklab=cfg_of("pre-ln", "mlm").to_dict()))
    with pytest.raises(ValueError, match="block"):
        hf.BlocklabConfig(blocklab={"block": "no-such-block"})


def test_tied_embeddings_stay_one_tensor(tmp_path):
    from safetensors import safe_open

    loaded = round_trip(trained_like(cfg_of("pre-ln", "clm")), tmp_path)
    with safe_open(tmp_path / "model.safetensors", "pt") as f:
        names = set(f.keys())
    assert "model.tok.weight" in names and not any("head" in n for n in names)
    # The output head is the token embedding itself (transformers' convention for tied weights)
    assert loaded.get_output_embeddings() is loaded.get_input_embeddings() and loaded.config.tie_word_embeddings
    with torch.no_grad():  # the head is the embedding: changing one changes the logits
        before = loaded(input_ids=torch.tensor([[3, 4]])).logits
        loaded.get_input_embeddings().weight[5].add_(1.0)
        after = loaded(input_ids=torch.tensor([[3, 4]])).logits
    assert not torch.equal(before[..., 5], after[..., 5])


def test_wrapping_a_model_draws_nothing_from_the_generator():
    model = trained_like(cfg_of("pre-ln", "clm"))
    before = torch.get_rng_state()
    wrapper = hf.BlocklabForCausalLM.from_blocklab(model)
    assert torch.equal(torch.get_rng_state(), before) and wrapper.model is model
    assert all(p.device.type == "cpu" for p in wrapper.parameters())


@pytest.mark.parametrize("case", ["pre-ln", "sas-p", "pre-ln+sinusoidal+untied"])
def test_a_left_padded_batch_generates_what_each_prompt_does_alone(case):
    """Batched generation pads on the left: a row's positions start at its first token, as alone."""
    model = trained_like(cfg_of(case, "clm"))
    wrapper = hf.BlocklabForCausalLM.from_blocklab(model)
    short, long = torch.tensor([[5, 6, 7]]), torch.tensor([[9, 8, 7, 6, 5]])
    ids = torch.tensor([[0, 0, 5, 6, 7], [9, 8, 7, 6, 5]])
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    with torch.no_grad():
        both = wrapper(input_ids=ids, attention_mask=mask).logits
        torch.testing.assert_close(both[0, 2:], model(short).logits[0])
        torch.testing.assert_close(both[1], model(long).logits[0])
    got = wrapper.generate(ids, attention_mask=mask, max_new_tokens=4, do_sample=False, pad_token_id=0)
    for row, prompt in zip(got, (short, long)):
        alone = sample(model, prompt, 4, temperature=0, stop_id=2)[0]
        assert row[-4:].tolist()[: len(alone) - prompt.shape[1]] == alone[prompt.shape[1] :].tolist()


@pytest.mark.parametrize("task", ["clm", "mlm", "classification"])
def test_automodel_gives_every_exports_final_normed_hidden_states(task, tmp_path):
    from transformers import AutoModel

    model = trained_like(cfg_of("pre-ln+sinusoidal+untied", task))
    round_trip(model, tmp_path)
    base = AutoModel.from_pretrained(tmp_path).eval()
    assert type(base).__name__ == "BlocklabModel" and base.get_output_embeddings() is None
    ids, mask = padded_batch()
    with torch.no_grad():
        got = base(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        x, hidden = model.encode(ids, mask, True)
    torch.testing.assert_close(got.last_hidden_state, x, rtol=1e-6, atol=1e-6)
    assert len(got.hidden_states) == model.cfg.n_layers + 1
    for a, b in zip(got.hidden_states, hidden):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_an_mlm_folder_loads_as_a_classifier_with_a_fresh_head_as_finetuning_starts(tmp_path):
    mlm = trained_like(cfg_of("pre-ln", "mlm"))
    round_trip(mlm, tmp_path / "mlm")
    labels = {0: "neg", 1: "neu", 2: "pos"}
    clf = AutoModelForSequenceClassification.from_pretrained(tmp_path / "mlm", num_labels=3, id2label=labels)
    assert clf.config.model_config.task == "classification" and clf.config.model_config.n_labels == 3
    encoder = {k: v for k, v in clf.model.state_dict().items() if not k.startswith(("pooler", "classifier"))}
    assert encoder.keys() == mlm.state_dict().keys()  # the tied LM head is the embedding: nothing left out
    assert all(torch.equal(v, mlm.state_dict()[k]) for k, v in encoder.items())
    for layer in (clf.model.pooler, clf.model.classifier):  # blocklab's start: N(0, 0.02^2), zero bias
        assert torch.equal(layer.bias, torch.zeros_like(layer.bias))
        assert 0.01 < float(layer.weight.std()) < 0.03
    ids, mask = padded_batch()
    out = clf(input_ids=ids, attention_mask=mask, labels=torch.tensor([0, 2, 1]))
    out.loss.backward()
    assert out.logits.shape == (3, 3) and clf.model.classifier.weight.grad.abs().sum() > 0
    clf.save_pretrained(tmp_path / "clf")  # what HF fine-tuning saves: a classifier's folder with its labels
    again = AutoModelForSequenceClassification.from_pretrained(tmp_path / "clf")
    assert again.config.id2label == labels and again.config.auto_map["AutoModelForSequenceClassification"]
    with torch.no_grad():
        torch.testing.assert_close(
            again(input_ids=ids, attention_mask=mask).logits, clf(input_ids=ids, attention_mask=mask).logits
        )


def test_gradient_checkpointing_recomputes_each_block_with_the_same_loss_and_gradients(tmp_path):
    loaded = round_trip(trained_like(cfg_of("pre-ln", "clm")), tmp_path).train()
    ids, _ = padded_batch()
    calls = []
    for block in loaded.model.blocks:  # the block's first Linear: a recomputation may stop once it has what it needs
        block.attn.q.register_forward_hook(lambda *a: calls.append(1))

    def loss_and_grads():
        loaded.zero_grad()
        loss = loaded(input_ids=ids, labels=ids).loss
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in loaded.parameters()]

    want = loss_and_grads()
    assert len(calls) == 2
    loaded.gradient_checkpointing_enable()
    calls.clear()
    got = loss_and_grads()
    assert len(calls) == 4 and loaded.is_gradient_checkpointing  # each block ran again in the backward pass
    assert torch.equal(got[0], want[0]) and all(torch.equal(a, b) for a, b in zip(got[1], want[1]))
    loaded.gradient_checkpointing_disable()
    calls.clear()
    loss_and_grads()
    assert len(calls) == 2 and not loaded.is_gradient_checkpointing


def test_output_settings_of_the_config_and_of_the_call_are_followed(tmp_path):
    loaded = round_trip(trained_like(cfg_of("pre-ln", "mlm")), tmp_path)
    ids, _ = padded_batch()
    with torch.no_grad():
        assert loaded(input_ids=ids).hidden_states is None
        loaded.config.output_hidden_states = True
        assert len(loaded(input_ids=ids).hidden_states) == 3
        as_tuple = loaded(input_ids=ids, return_dict=False)
    assert isinstance(as_tuple, tuple) and torch.equal(as_tuple[0], loaded(input_ids=ids).logits)


def test_the_task_to_auto_class_table_is_written_once_in_hf():
    """Which Auto class loads which exported task is said once, by the classes in hf/modeling.py (`auto`, `tasks`,
    `also_loads`): the registrations, an export's auto_map and its model card read it. No other module of
    blocklab.hf names an Auto model class, and modeling.py names each once (docstrings aside)."""
    import ast
    from pathlib import Path

    autos = {"AutoModel", "AutoModelForCausalLM", "AutoModelForMaskedLM", "AutoModelForSequenceClassification"}
    owners = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    named = []
    for path in sorted(Path(hf.__file__).parent.glob("*.py")):
        tree = ast.parse(path.read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree) if isinstance(n, owners) and ast.get_docstring(n)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant):
                name = node.value if id(node) not in docs else None
            else:
                name = getattr(node, "id", None) or getattr(node, "attr", None) or getattr(node, "name", None)
            if name in autos:
                named.append((path.name, name))
    assert sorted(named) == sorted(("modeling.py", a) for a in autos), named
    mlm = {
        "AutoModelForMaskedLM": "BlocklabForMaskedLM",
        "AutoModelForSequenceClassification": "BlocklabForSequenceClassification",
    }
    assert {t: {a: c.__name__ for a, c in m.items()} for t, m in hf.modeling.AUTO_CLASSES.items()} == {
        "clm": {"AutoModelForCausalLM": "BlocklabForCausalLM"},
        "mlm": mlm,
        "classification": {"AutoModelForSequenceClassification": "BlocklabForSequenceClassification"},
    }
    for task, cls in hf.HF_CLASSES.items():
        assert AUTO[task]._model_mapping[hf.BlocklabConfig] is cls
