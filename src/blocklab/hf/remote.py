"""The modules an exported folder carries so that `trust_remote_code=True` loads it with no import of
blocklab.hf first: each subclasses blocklab's own class and adds nothing (one implementation), so the
folder's code is a few lines and blocklab (pip install 'blocklab[hf]') is its requirement."""

from __future__ import annotations

from pathlib import Path

CONFIG_MODULE = "configuration_blocklab"
MODEL_MODULE = "modeling_blocklab"
AUTO_CLASSES = {
    "clm": ("AutoModelForCausalLM", "BlocklabForCausalLM"),
    "mlm": ("AutoModelForMaskedLM", "BlocklabForMaskedLM"),
    "classification": ("AutoModelForSequenceClassification", "BlocklabForSequenceClassification"),
}

_CONFIG_SOURCE = '''"""The config of a blocklab model: blocklab's own class (requires: pip install 'blocklab[hf]')."""

from blocklab.hf.configuration import BlocklabConfig as _BlocklabConfig


class BlocklabConfig(_BlocklabConfig):
    pass
'''

_MODEL_SOURCE = '''"""A blocklab model: blocklab's own class (requires: pip install 'blocklab[hf]')."""

from blocklab.hf.modeling import {name} as _{name}


class {name}(_{name}):
    pass
'''


def auto_map(task: str) -> dict[str, str]:
    auto, name = AUTO_CLASSES[task]
    return {"AutoConfig": f"{CONFIG_MODULE}.BlocklabConfig", auto: f"{MODEL_MODULE}.{name}"}


def write_remote_code(folder: str | Path, task: str) -> None:
    folder = Path(folder)
    (folder / f"{CONFIG_MODULE}.py").write_text(_CONFIG_SOURCE)
    (folder / f"{MODEL_MODULE}.py").write_text(_MODEL_SOURCE.format(name=AUTO_CLASSES[task][1]))
