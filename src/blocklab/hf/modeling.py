"""blocklab's models as `transformers` models: the same modules, wrapped.

Each class holds the blocklab model its config describes (model/build.py) under `model`, so the
exported weights are blocklab's own state dict with a `model.` prefix and the forward pass is
blocklab's forward pass: nothing here recomputes a block. What is added is `transformers`'
conventions around it: output classes, causal-LM labels shifted inside the model, generation
(no key/value cache: blocklab's decoder-only model recomputes its window, as `blocklab generate`
does), and the buffers a meta-device load leaves empty (`reset_buffers`).

Tied embeddings are one tensor (the head reads `tok`), so nothing has to be re-tied after loading.
"""

from __future__ import annotations

import torch
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutput, MaskedLMOutput, SequenceClassifierOutput

from blocklab.hf.configuration import BlocklabConfig
from blocklab.hf.remote import auto_map, write_remote_code
from blocklab.model import build_model
from blocklab.tokens import IGNORE_INDEX


class BlocklabPreTrainedModel(PreTrainedModel):
    config_class = BlocklabConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    task = ""  # the ModelConfig task a subclass wraps

    def __init__(self, config: BlocklabConfig):
        super().__init__(config)
        cfg = config.model_config
        if cfg.task != self.task:
            raise ValueError(f"{type(self).__name__} wraps a {self.task!r} model; this config is task={cfg.task!r}")
        self.model = build_model(cfg)
        self.post_init()

    @classmethod
    def from_blocklab(cls, model: torch.nn.Module) -> BlocklabPreTrainedModel:
        """The wrapper of a built (or trained) blocklab model, sharing its parameters."""
        with torch.device("meta"):  # the stand-in model it replaces: no memory, no draw from the generator
            hf = cls(BlocklabConfig(blocklab=model.cfg.to_dict()))
        hf.model = model
        return hf

    def save_pretrained(self, save_directory, *args, **kwargs):
        """`transformers`' save, plus the folder's own modules (remote.py), so that the saved folder loads with
        `trust_remote_code=True` however this model was loaded."""
        self.config.auto_map = auto_map(self.task)
        super().save_pretrained(save_directory, *args, **kwargs)
        write_remote_code(save_directory, self.task)

    def _init_weights(self, module: torch.nn.Module) -> None:
        # blocklab's own init ran when the model was built (a fresh model equals blocklab's for a seed);
        # a load fills every parameter from the checkpoint, and only the non-persistent buffers, which
        # a load on the meta device leaves empty, need computing again.
        reset = getattr(module, "reset_buffers", None)
        if reset is not None:
            reset()

    def get_input_embeddings(self) -> torch.nn.Module:
        return self.model.tok

    def set_input_embeddings(self, value: torch.nn.Module) -> None:
        self.model.tok = value

    def get_output_embeddings(self):
        return self.model.head  # None when tied: the logits read the token embedding itself


def left_pad_positions(attention_mask) -> torch.Tensor | None:
    """Each token's position counted from its row's first real token, where some row is left-padded (batched
    generation pads on the left); None otherwise, so an unpadded or right-padded batch is blocklab's own call."""
    if attention_mask is None:
        return None
    leading = (attention_mask.cumsum(-1) == 0).sum(-1, keepdim=True)
    if not bool(leading.any()):
        return None
    T = attention_mask.shape[1]
    return (torch.arange(T, device=attention_mask.device) - leading).clamp(min=0)


class BlocklabForCausalLM(BlocklabPreTrainedModel, GenerationMixin):
    task = "clm"

    def forward(self, input_ids, attention_mask=None, labels=None, output_hidden_states=None, **kwargs):
        """`labels` as `transformers` has them: aligned with input_ids and shifted here (blocklab's
        own labels are the next tokens already); IGNORE_INDEX (-100) is skipped."""
        shifted = None
        if labels is not None:
            shifted = torch.full_like(labels, IGNORE_INDEX)
            shifted[:, :-1] = labels[:, 1:]
        out = self.model(
            input_ids,
            attention_mask,
            shifted,
            output_hidden_states=bool(output_hidden_states),
            position_ids=left_pad_positions(attention_mask),
        )
        return CausalLMOutput(loss=out.loss, logits=out.logits, hidden_states=out.hidden_states)

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs):
        # The positions end at max_seq_len: the newest window, as blocklab's `sample` reads it.
        T = self.config.max_position_embeddings
        if attention_mask is not None:
            attention_mask = attention_mask[:, -T:]
        return {"input_ids": input_ids[:, -T:], "attention_mask": attention_mask}


class BlocklabForMaskedLM(BlocklabPreTrainedModel):
    task = "mlm"

    def forward(self, input_ids, attention_mask=None, labels=None, output_hidden_states=None, **kwargs):
        out = self.model(input_ids, attention_mask, labels, output_hidden_states=bool(output_hidden_states))
        return MaskedLMOutput(loss=out.loss, logits=out.logits, hidden_states=out.hidden_states)


class BlocklabForSequenceClassification(BlocklabPreTrainedModel):
    task = "classification"

    def get_output_embeddings(self):
        return None

    def forward(self, input_ids, attention_mask=None, labels=None, output_hidden_states=None, **kwargs):
        """Cross-entropy over the labels, or the mean squared error when there is one output (regression)."""
        out = self.model(input_ids, attention_mask, labels, output_hidden_states=bool(output_hidden_states))
        return SequenceClassifierOutput(loss=out.loss, logits=out.logits, hidden_states=out.hidden_states)


HF_CLASSES = {c.task: c for c in (BlocklabForCausalLM, BlocklabForMaskedLM, BlocklabForSequenceClassification)}
