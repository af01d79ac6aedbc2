"""blocklab: build, train and diagnose Transformer blocks (Post-LN, Pre-LN, parallel, SAS, SAS-P)."""

from __future__ import annotations

from blocklab.lazy import lazy_exports

__version__ = "0.1.0"
__all__ = ["ModelConfig", "build_model", "BLOCKS", "ModelOutput", "param_groups", "load_run", "__version__"]

# Imported on first use: the models bring torch and Triton (seconds and hundreds of MB), which the command
# line's --help and argument errors, and any user of blocklab.data or blocklab.config alone, do not need.
_LAZY = {
    "BLOCKS": "blocklab.blocks",
    "ModelConfig": "blocklab.config",
    "ModelOutput": "blocklab.model",
    "build_model": "blocklab.model",
    "param_groups": "blocklab.model",
    "load_run": "blocklab.training.generate",  # a trained run's model, tokenizer and config (README, Python API)
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
