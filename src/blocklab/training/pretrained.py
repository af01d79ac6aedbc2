"""The mlm run a classification run starts from (`train.init_from`): its config and tokenizer, checked,
and its encoder copied into a fresh classifier (docs/models.md#tasks)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch

from blocklab.data import DataConfig
from blocklab.data.tokenizer import load_tokenizer
from blocklab.errors import UserError
from blocklab.model.base import lm_head_params
from blocklab.model.classifier import HEAD
from blocklab.training.checkpoint import load_checkpoint
from blocklab.training.config import RunConfig, load_config


@dataclass(frozen=True)
class Pretrained:
    path: Path
    cfg: RunConfig
    tokenizer: object

    @property
    def data(self) -> DataConfig:
        return self.cfg.data


def pretraining_run(run: str | Path) -> Pretrained:
    """The mlm run a fine-tuning starts from: its config and tokenizer, checked (read once per process
    while its config.toml is unchanged: every seed and evaluation of a sweep asks again)."""
    path = Path(run).expanduser().resolve()
    if not (path / "config.toml").is_file():
        raise UserError(f"{path} holds no blocklab run (no config.toml); give the directory of an mlm run")
    return _read(path, (path / "config.toml").stat().st_mtime_ns)


@lru_cache(maxsize=16)
def _read(path: Path, mtime_ns: int) -> Pretrained:
    cfg = load_config(path / "config.toml")
    if cfg.model.task != "mlm":
        raise UserError(
            f"{path} is a {cfg.model.task} run; fine-tuning needs the bidirectional encoder of an "
            "mlm run (blocklab train --model.task mlm)"
        )
    if not (path / "tokenizer.json").is_file():
        raise UserError(f"{path} has no tokenizer.json")
    try:
        tokenizer = load_tokenizer(path / "tokenizer.json")
    except Exception as e:  # tokenizers raises plain Exceptions on bad files
        raise UserError(f"{path}/tokenizer.json is unreadable: {e}") from None
    return Pretrained(path, cfg, tokenizer)


def load_encoder(model: torch.nn.Module, run: str | Path, step: int | None = None) -> int:
    """Copy the mlm run's encoder (checkpoint of `step`, default its latest) into `model`; the head
    keeps its fresh initialisation. Returns the checkpoint's step."""
    ckpt = load_checkpoint(Path(run).expanduser() / "checkpoints", step, fallback=True)
    lm_head = lm_head_params(model.cfg.block)
    state = {k: v for k, v in ckpt["model"].items() if not k.startswith(lm_head)}  # no use here
    own = model.state_dict()
    for k, v in state.items():
        if k not in own or own[k].shape != v.shape:
            raise UserError(
                f"checkpoint {ckpt['path']} does not fit the classifier: "
                f"{k} {tuple(v.shape)} vs {tuple(own[k].shape) if k in own else 'absent'}"
            )
    missing = model.load_state_dict(state, strict=False).missing_keys
    fresh = [k for k in missing if not k.startswith(HEAD)]
    if fresh:
        raise UserError(f"checkpoint {ckpt['path']} lacks encoder weights: {', '.join(fresh[:3])}")
    return ckpt["step"]
