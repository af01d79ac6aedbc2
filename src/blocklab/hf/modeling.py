"""blocklab's models as `transformers` models: the same modules, wrapped.

Each class holds the blocklab model its config describes (model/build.py) under `model`, so the
exported weights are blocklab's own state dict with a `model.` prefix and the forward pass is
blocklab's forward pass: nothing here recomputes a block. What is added is `transformers`'
conventions around it: output classes, causal-LM labels shifted inside the model, generation
(no key/value cache: blocklab's decoder-only model recomputes its window, as `blocklab generate`
does), hidden states for AutoModel, a fresh classification head on a masked LM's encoder, activation
checkpointing, and the weights a load leaves to initialise (`_init_weights`).

An exported folder carries this module and everything it imports from blocklab as its own code
(hf/remote.py), so nothing here may import the export's own machinery.

Tied embeddings are one tensor (the head reads `tok`), so nothing has to be re-tied after loading.
"""

from __future__ import annotations

import torch
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput, CausalLMOutput, MaskedLMOutput, SequenceClassifierOutput

from blocklab.hf.configuration import HF_NAMES, MODEL_FIELDS, BlocklabConfig
from blocklab.model import build_model
from blocklab.model.base import init_module
from blocklab.model.checkpointing import checkpoint_activations
from blocklab.tokens import IGNORE_INDEX


class BlocklabPreTrainedModel(PreTrainedModel):
    config_class = BlocklabConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    tasks: tuple[str, ...] = ()  # the ModelConfig tasks a subclass wraps
    # The transformers Auto class that loads it (hf/__init__.py registers it there; an export's auto_map and model
    # card name it), and the tasks of the exported folders it loads besides its own (`adapt` turns their config).
    auto = ""
    also_loads: tuple[str, ...] = ()
    # What save_pretrained writes besides transformers' own files: blocklab.hf sets it for blocklab's classes (the
    # folder's own code, generated from the package); a class loaded from such a folder leaves it to transformers,
    # which copies the folder's modules with it.
    code_writer = None

    def __init__(self, config: BlocklabConfig, **kwargs):
        """`kwargs` (from_config(config, hidden_size=128)): model settings, by transformers' name or a ModelConfig
        field's, set on `config` before the model is built; anything else is a ValueError naming it."""
        unknown = [k for k in kwargs if k not in HF_NAMES and k not in MODEL_FIELDS]
        if unknown:
            raise ValueError(
                f"{type(self).__name__} takes no {', '.join(f'{k}=' for k in unknown)}: its settings are "
                f"transformers' {', '.join(HF_NAMES)} and blocklab's ModelConfig fields ({', '.join(MODEL_FIELDS)})"
            )
        for key, value in kwargs.items():
            setattr(config, key, value)
        self.adapt(config)
        super().__init__(config)
        cfg = config.model_config
        if cfg.task not in self.tasks:
            raise ValueError(
                f"{type(self).__name__} wraps a {' or '.join(map(repr, self.tasks))} model; this config is "
                f"task={cfg.task!r}"
            )
        self.model = build_model(cfg)
        if not any(p.is_meta for p in self.model.parameters()):
            # Built for real: blocklab's own initialisation ran (a fresh model equals blocklab's for a seed), and
            # transformers' post_init must not draw again. A load builds on the meta device and leaves this unset.
            for module in self.model.modules():
                module._is_hf_initialized = True
        self.post_init()

    def adapt(self, config: BlocklabConfig) -> None:
        """Make `config` the one this class builds, before anything reads it (a subclass's own rule)."""

    @classmethod
    def from_blocklab(cls, model: torch.nn.Module) -> BlocklabPreTrainedModel:
        """The wrapper of a built (or trained) blocklab model, sharing its parameters."""
        with torch.device("meta"):  # the stand-in model it replaces: no memory, no draw from the generator
            hf = cls(BlocklabConfig(blocklab=model.cfg.to_dict()))
        hf.model = model
        return hf

    def save_pretrained(self, save_directory, *args, **kwargs):
        """transformers' save, plus the folder's own code where `code_writer` is set (blocklab's classes), so that
        the saved folder loads with `trust_remote_code=True` however this model was loaded."""
        if self.code_writer is not None:
            self.config.auto_map = self.code_writer.auto_map(self.config.model_config.task)
        super().save_pretrained(save_directory, *args, **kwargs)
        if self.code_writer is not None:
            self.code_writer.write(save_directory)

    def _init_weights(self, module: torch.nn.Module) -> None:
        # Called by transformers on the modules a load did not fill (and, after a fresh build, on none: they are
        # marked initialised). The non-persistent buffers a load on the meta device leaves empty are computed
        # again; a Linear or an Embedding the checkpoint lacks (a fresh classification head) starts as blocklab
        # starts it (transformers skips the parameters it loaded).
        reset = getattr(module, "reset_buffers", None)
        if reset is not None:
            reset()
        if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
            init_module(module, self.config.model_config)

    def _set_gradient_checkpointing(self, enable: bool = True, gradient_checkpointing_func=None, every_n_layers=1):
        """gradient_checkpointing_enable() / activation_checkpointing_enable(): blocklab's per-block checkpointing
        (train.activation_checkpointing), with transformers' checkpoint function."""
        checkpoint_activations(self.model, enable, gradient_checkpointing_func, every_n_layers)
        self.gradient_checkpointing = enable

    def get_input_embeddings(self) -> torch.nn.Module:
        return self.model.tok

    def set_input_embeddings(self, value: torch.nn.Module) -> None:
        self.model.tok = value

    def get_output_embeddings(self):
        """The output head: its own Linear, or the token embedding itself when tied (one tensor)."""
        return self.model.head if self.model.head is not None else self.model.tok

    def _outputs(self, output_hidden_states, return_dict) -> tuple[bool, bool]:
        """(hidden states wanted, a ModelOutput rather than a tuple): the call's choice, else the config's."""
        hidden = output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states
        as_dict = return_dict if return_dict is not None else self.config.return_dict
        return bool(hidden), as_dict is not False

    @staticmethod
    def _return(out, as_dict: bool):
        return out if as_dict else out.to_tuple()


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


class BlocklabModel(BlocklabPreTrainedModel):
    """AutoModel (feature extraction): any export's final-normed hidden states, the representation its head reads.
    It holds the whole blocklab model, so every export's weights load under their own names; `hidden_states`:
    the embedding output, then each block's output."""

    tasks = ("clm", "mlm", "classification")
    auto = "AutoModel"

    def get_output_embeddings(self):
        return None

    def forward(self, input_ids, attention_mask=None, output_hidden_states=None, return_dict=None, **kwargs):
        hidden, as_dict = self._outputs(output_hidden_states, return_dict)
        positions = left_pad_positions(attention_mask) if self.model.cfg.causal else None
        x, states = self.model.encode(input_ids, attention_mask, hidden, position_ids=positions)
        return self._return(BaseModelOutput(last_hidden_state=x, hidden_states=states), as_dict)


class BlocklabForCausalLM(BlocklabPreTrainedModel, GenerationMixin):
    tasks = ("clm",)
    auto = "AutoModelForCausalLM"

    def forward(
        self, input_ids, attention_mask=None, labels=None, output_hidden_states=None, return_dict=None, **kwargs
    ):
        """`labels` as `transformers` has them: aligned with input_ids and shifted here (blocklab's
        own labels are the next tokens already); IGNORE_INDEX (-100) is skipped."""
        hidden, as_dict = self._outputs(output_hidden_states, return_dict)
        shifted = None
        if labels is not None:
            shifted = torch.full_like(labels, IGNORE_INDEX)
            shifted[:, :-1] = labels[:, 1:]
        out = self.model(
            input_ids,
            attention_mask,
            shifted,
            output_hidden_states=hidden,
            position_ids=left_pad_positions(attention_mask),
        )
        return self._return(CausalLMOutput(loss=out.loss, logits=out.logits, hidden_states=out.hidden_states), as_dict)

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs):
        # The positions end at max_seq_len: the newest window, as blocklab's `sample` reads it.
        T = self.config.max_position_embeddings
        if attention_mask is not None:
            attention_mask = attention_mask[:, -T:]
        return {"input_ids": input_ids[:, -T:], "attention_mask": attention_mask}


class BlocklabForMaskedLM(BlocklabPreTrainedModel):
    tasks = ("mlm",)
    auto = "AutoModelForMaskedLM"

    def forward(
        self, input_ids, attention_mask=None, labels=None, output_hidden_states=None, return_dict=None, **kwargs
    ):
        hidden, as_dict = self._outputs(output_hidden_states, return_dict)
        out = self.model(input_ids, attention_mask, labels, output_hidden_states=hidden)
        return self._return(MaskedLMOutput(loss=out.loss, logits=out.logits, hidden_states=out.hidden_states), as_dict)


class BlocklabForSequenceClassification(BlocklabPreTrainedModel):
    """A fine-tuned classifier (blocklab finetune), or, from a masked LM's folder, its encoder with a fresh head of
    `num_labels` outputs (transformers' fine-tuning route: from_pretrained(mlm_folder, num_labels=3)), as
    `blocklab finetune` starts one: the head (model/classifier.py's pooler and classifier) drawn as blocklab
    draws it, the language-model head left out."""

    tasks = ("classification",)
    auto = "AutoModelForSequenceClassification"
    also_loads = ("mlm",)  # a masked LM's encoder, with a fresh head

    def adapt(self, config: BlocklabConfig) -> None:
        if config.problem_type == "multi_label_classification":
            raise ValueError("blocklab's classifier is single-label (cross-entropy) or a regression (num_labels=1)")
        if config.model_config.task == "mlm":
            config.blocklab = {**config.blocklab, "task": "classification"}
            config.n_labels = config.num_labels
            config.is_decoder = False
        if config.num_labels == 1 and config.problem_type is None:
            config.problem_type = "regression"

    def get_output_embeddings(self):
        return None

    def forward(
        self, input_ids, attention_mask=None, labels=None, output_hidden_states=None, return_dict=None, **kwargs
    ):
        """Cross-entropy over the labels, or the mean squared error when there is one output (regression)."""
        hidden, as_dict = self._outputs(output_hidden_states, return_dict)
        out = self.model(input_ids, attention_mask, labels, output_hidden_states=hidden)
        return self._return(
            SequenceClassifierOutput(loss=out.loss, logits=out.logits, hidden_states=out.hidden_states), as_dict
        )


# The task table: the class a run of each exportable task exports as, in this order; every other table is read
# from it and from the classes' own `tasks`, `auto` and `also_loads`.
HEADS = (BlocklabForCausalLM, BlocklabForMaskedLM, BlocklabForSequenceClassification)
HF_CLASSES = {cls.tasks[0]: cls for cls in HEADS}
# The Auto classes each exported task's folder loads with (every one also loads with AutoModel): its own head's,
# and, for an mlm folder, the classifier's, as transformers' fine-tuning starts one.
AUTO_CLASSES = {task: {cls.auto: cls for cls in HEADS if task in cls.tasks + cls.also_loads} for task in HF_CLASSES}
