"""blocklab: build, train and diagnose Transformer blocks (Post-LN, Pre-LN, parallel, SAS, SAS-P)."""

from blocklab.blocks import BLOCKS
from blocklab.config import ModelConfig
from blocklab.model import ModelOutput, build_model, param_groups

__version__ = "0.1.0"
__all__ = ["ModelConfig", "build_model", "BLOCKS", "ModelOutput", "param_groups", "__version__"]
