"""blocklab models in Hugging Face `transformers` (an optional extra: pip install 'blocklab[hf]').

Importing this package registers the model type "blocklab" with the Auto classes, so an exported
folder (`blocklab export`) loads with AutoConfig, AutoModelForCausalLM (clm runs),
AutoModelForMaskedLM (mlm) and AutoModelForSequenceClassification (fine-tuned runs); the folder
also loads with `trust_remote_code=True` alone, through the small modules `export` writes into it.
Importing `blocklab` itself never imports `transformers`.
"""

from __future__ import annotations

from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSequenceClassification

from blocklab.hf.configuration import MODEL_TYPE, BlocklabConfig
from blocklab.hf.modeling import (
    HF_CLASSES,
    BlocklabForCausalLM,
    BlocklabForMaskedLM,
    BlocklabForSequenceClassification,
    BlocklabPreTrainedModel,
)

AutoConfig.register(MODEL_TYPE, BlocklabConfig, exist_ok=True)
AutoModelForCausalLM.register(BlocklabConfig, BlocklabForCausalLM, exist_ok=True)
AutoModelForMaskedLM.register(BlocklabConfig, BlocklabForMaskedLM, exist_ok=True)
AutoModelForSequenceClassification.register(BlocklabConfig, BlocklabForSequenceClassification, exist_ok=True)

__all__ = [
    "BlocklabConfig",
    "BlocklabPreTrainedModel",
    "BlocklabForCausalLM",
    "BlocklabForMaskedLM",
    "BlocklabForSequenceClassification",
    "HF_CLASSES",
]
