"""BlocklabConfig: a blocklab ModelConfig as a `transformers` PretrainedConfig.

The whole ModelConfig travels in `config.json` under `blocklab` (every field, as `blocklab train`
wrote it), and it is the only copy: the names `transformers` reads (hidden_size, num_hidden_layers,
max_position_embeddings, tie_word_embeddings ...) and every ModelConfig field by its own name (d_model,
n_layers, pooling ...) are properties that read and write it. So a setting given to
`from_pretrained(path, num_hidden_layers=2)`, `AutoConfig.from_pretrained(path, d_model=128)` or set on
the config before `from_config` is the model's own setting when the model is built, and the config can
never describe another model than the one it builds. A value that is not valid for the model is a
ValueError naming the field when the model is built (ModelConfig's own check).
"""

from __future__ import annotations

from dataclasses import fields

from transformers import PretrainedConfig

from blocklab.config import ModelConfig
from blocklab.tokens import EOD_ID, MASK_ID, PAD_ID

MODEL_TYPE = "blocklab"
# transformers' names for ModelConfig fields (the names its pipelines, lm-eval and other tools read).
HF_NAMES = {
    "hidden_size": "d_model",
    "num_hidden_layers": "n_layers",
    "num_attention_heads": "n_heads",
    "intermediate_size": "d_ff",
    "max_position_embeddings": "max_seq_len",
    "tie_word_embeddings": "tie_embeddings",
}


def _setting(name: str) -> property:
    """A property that reads and writes ModelConfig field `name` in the config's `blocklab` dict."""

    def get(self):
        return self.blocklab[name]

    def put(self, value):
        self.blocklab = {**self.blocklab, name: value}

    return property(get, put, doc=f"ModelConfig.{name} (config.json: blocklab.{name})")


class BlocklabConfig(PretrainedConfig):
    model_type = MODEL_TYPE

    def __init__(self, blocklab: dict | None = None, **kwargs):
        self.blocklab = ModelConfig.from_dict(dict(blocklab or {})).to_dict()  # a bad field: ValueError naming it
        for name in [k for k in kwargs if k in HF_NAMES or k in MODEL_FIELDS]:  # given by name: they win
            setattr(self, name, kwargs.pop(name))
        cfg = self.model_config
        self.mask_token_id = MASK_ID
        if cfg.task == "classification":
            if "id2label" not in kwargs:
                kwargs.setdefault("num_labels", cfg.n_labels)
            if cfg.n_labels == 1:
                kwargs.setdefault("problem_type", "regression")
        kwargs.setdefault("pad_token_id", PAD_ID)
        # <eod> separates documents: what generation stops at and what the first token is predicted from
        kwargs.setdefault("eos_token_id", EOD_ID)
        kwargs.setdefault("bos_token_id", EOD_ID)
        kwargs.setdefault("is_decoder", cfg.causal)
        # transformers 4.x's PretrainedConfig sets tie_word_embeddings itself (default True): the model's value
        kwargs["tie_word_embeddings"] = cfg.tie_embeddings
        super().__init__(**kwargs)

    @property
    def model_config(self) -> ModelConfig:
        """The ModelConfig these settings describe, checked: a ValueError names a bad field. A classifier's
        outputs are `num_labels` (transformers' own setting, which sizes `id2label`)."""
        values = dict(self.blocklab)
        if values.get("task") == "classification" and getattr(self, "id2label", None) is not None:
            values["n_labels"] = len(self.id2label)
        return ModelConfig.from_dict(values)

    @property
    def n_labels(self) -> int:
        """A classifier's outputs: transformers' `num_labels` once the config is made (it sizes id2label)."""
        return self.model_config.n_labels

    @n_labels.setter
    def n_labels(self, value: int) -> None:
        self.blocklab = {**self.blocklab, "n_labels": value}
        if getattr(self, "id2label", None) is not None and self.blocklab.get("task") == "classification":
            self.num_labels = value

    def to_dict(self) -> dict:
        """config.json: transformers' own fields, `blocklab` (the whole ModelConfig), and transformers' names of
        its fields for the tools that read the file itself (the same values: loading gives them back)."""
        out = super().to_dict()
        out.update({hf: self.blocklab[own] for hf, own in HF_NAMES.items()})
        return out


MODEL_FIELDS = tuple(f.name for f in fields(ModelConfig))
for _name in MODEL_FIELDS:
    if _name == "n_labels":
        continue  # its own property: it follows num_labels
    setattr(BlocklabConfig, _name, _setting(_name))
for _hf, _own in HF_NAMES.items():
    setattr(BlocklabConfig, _hf, _setting(_own))
