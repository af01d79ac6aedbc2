"""BlocklabConfig: a blocklab ModelConfig as a `transformers` PretrainedConfig.

The whole ModelConfig travels in `config.json` under `blocklab` (every field, as `blocklab train`
wrote it); the fields `transformers` reads by their own names (hidden_size, max_position_embeddings,
pad/eos ids, num_labels ...) are derived from it, so the two can never disagree.
"""

from __future__ import annotations

from transformers import PretrainedConfig

from blocklab.config import ModelConfig
from blocklab.tokens import EOD_ID, MASK_ID, PAD_ID

MODEL_TYPE = "blocklab"


class BlocklabConfig(PretrainedConfig):
    model_type = MODEL_TYPE

    def __init__(self, blocklab: dict | None = None, **kwargs):
        self.blocklab = dict(blocklab or {})
        cfg = ModelConfig.from_dict(self.blocklab)  # validated: a bad field is a ValueError naming it
        self.blocklab = cfg.to_dict()
        self.vocab_size = cfg.vocab_size
        self.hidden_size = cfg.d_model
        self.num_hidden_layers = cfg.n_layers
        self.num_attention_heads = cfg.n_heads
        self.intermediate_size = cfg.d_ff
        self.max_position_embeddings = cfg.max_seq_len  # lm-eval and the pipelines read the context length here
        self.mask_token_id = MASK_ID
        if cfg.task == "classification":
            kwargs.setdefault("num_labels", cfg.n_labels)
            if cfg.n_labels == 1:
                kwargs.setdefault("problem_type", "regression")
        kwargs.setdefault("pad_token_id", PAD_ID)
        # <eod> separates documents: what generation stops at and what the first token is predicted from
        kwargs.setdefault("eos_token_id", EOD_ID)
        kwargs.setdefault("bos_token_id", EOD_ID)
        kwargs["tie_word_embeddings"] = cfg.tie_embeddings
        kwargs.setdefault("is_decoder", cfg.causal)
        super().__init__(**kwargs)
        if cfg.task == "classification" and self.num_labels != cfg.n_labels:
            raise ValueError(
                f"num_labels={self.num_labels} does not match the blocklab config's n_labels={cfg.n_labels}"
            )

    @property
    def model_config(self) -> ModelConfig:
        return ModelConfig.from_dict(self.blocklab)
