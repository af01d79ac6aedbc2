"""Package exports imported on first use (blocklab.lazy)."""

import subprocess
import sys

import pytest

import blocklab
from blocklab import lazy


def test_exports_resolve_to_the_modules_attributes_and_unknown_names_fail():
    from blocklab.config import ModelConfig

    assert blocklab.ModelConfig is ModelConfig
    assert "build_model" in dir(blocklab) and "__version__" in dir(blocklab)
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        blocklab.nope  # noqa: B018


def test_relative_paths_name_a_module_of_the_package():
    get, _ = lazy.lazy_exports("blocklab.training", {"TrainConfig": "config"})
    from blocklab.training.config import TrainConfig

    assert get("TrainConfig") is TrainConfig


def test_importing_the_packages_imports_no_torch():
    code = "import sys, blocklab, blocklab.data, blocklab.training, blocklab.experiments, blocklab.probes; "
    code += "print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
