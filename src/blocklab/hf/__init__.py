"""blocklab models in Hugging Face `transformers` (an optional extra: pip install 'blocklab[hf]').

Importing this package registers the model type "blocklab" with the Auto classes, so an exported
folder (`blocklab export`) loads with AutoConfig, AutoModel (hidden states, any export),
AutoModelForCausalLM (clm runs), AutoModelForMaskedLM (mlm) and AutoModelForSequenceClassification
(fine-tuned runs, or an mlm run's encoder with a fresh head). The folder also loads with
`trust_remote_code=True` alone, on a machine without blocklab: it carries the model's code, generated
from this package (remote.py). Importing `blocklab` itself never imports `transformers`.
"""

from __future__ import annotations

import transformers

from blocklab.hf import remote
from blocklab.hf.configuration import MODEL_TYPE, BlocklabConfig
from blocklab.hf.modeling import (
    HEADS,
    HF_CLASSES,
    BlocklabForCausalLM,
    BlocklabForMaskedLM,
    BlocklabForSequenceClassification,
    BlocklabModel,
    BlocklabPreTrainedModel,
)

transformers.AutoConfig.register(MODEL_TYPE, BlocklabConfig, exist_ok=True)
for cls in (BlocklabModel, *HEADS):  # each with the Auto class it names (modeling.py's task table)
    getattr(transformers, cls.auto).register(BlocklabConfig, cls, exist_ok=True)
# blocklab's own classes write the folder's code on save_pretrained (a folder's copy leaves it to transformers).
BlocklabPreTrainedModel.code_writer = remote

__all__ = [
    "BlocklabConfig",
    "BlocklabPreTrainedModel",
    "BlocklabModel",
    "BlocklabForCausalLM",
    "BlocklabForMaskedLM",
    "BlocklabForSequenceClassification",
    "HF_CLASSES",
]
