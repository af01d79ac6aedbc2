"""The `warmup` presets: does every block need warm-up? Every block x warm-up {0, short, long} x two rates.

The question that joins the two papers and that neither asks: Xiong et al. show that Pre-LN removes
Post-LN's need for warm-up; He & Hofmann's simplified blocks are trained with warm-up only, and at
their width SAS-P with a 50-step warm-up sits at the unigram loss (issue 12). The runs use He &
Hofmann's recipe (normal init, RMSNorm, AdamW with weight decay 0.1, linear warm-up then linear
decay, clipping at 1), the same for every block; the report draws the final loss over warm-up x
learning rate per block as a heat map, and stalled runs (loss at the unigram entropy) end early.
"""
from __future__ import annotations

from blocklab.blocks import BLOCKS as _PUBLIC

BLOCKS = list(_PUBLIC)  # every public block of SPEC sections 2 and 2b


def sgd_runs(blocks, lrs, warmups, stem: str = "sgd") -> list[dict]:
    """Xiong et al.'s SGD arm (Sec. 3.2, Fig. 2): every block x SGD lr_max x warm-up, on the Adam runs'
    schedule. The paper's rates for SGD are 5e-3 and 1e-3; it states no momentum, so fairseq's SGD
    default (0) is used."""
    return [{"name": f"{stem}_{b}_lr{lr:g}_wu{w}", "label": f"SGD, {b}, lr{lr:g}, wu{w}", "model.block": b,
             "train.optimizer": "sgd", "train.momentum": 0.0, "train.lr": lr, "train.warmup_steps": w}
            for b in blocks for lr in lrs for w in warmups]


XIONG_SGD_LRS = [5e-3, 1e-3]

# CPU: 36 runs of 200 steps at 1,024 tokens each, d=64, 4 layers. At lr 1e-3 / 3e-3 and 150 steps
# this model had barely left the unigram loss (issue 12's note), so the rates are 3e-3 and 1e-2:
# small models take larger rates, and warm-up matters where the rate is high. The unigram plateau
# of this model can last more than 50 steps before it leaves it, so stall detection keeps its
# default patience of 100 steps.
WARMUP = {
    "name": "warmup",
    "description": "Warm-up for every block of SPEC sections 2 and 2b x warm-up 0/20/80 of 200 steps x AdamW lr "
                   "3e-3/1e-2 (He & Hofmann's recipe: linear warm-up and decay), d=64, 4 layers, on the stdlib "
                   "corpus; heat map of the final loss per block.",
    "expected_cost": f"{6 * len(BLOCKS)} runs of 200 steps at d=64 (stalled runs end early): about 40 minutes on 2 "
                     "idle CPU cores",
    "base": {
        "data": {"source": "stdlib", "vocab_size": 4096, "seq_len": 64},
        "model": {"d_model": 64, "n_layers": 4, "n_heads": 4, "d_ff": 256},
        "train": {"steps": 200, "batch_size": 16, "weight_decay": 0.1, "log_every": 5, "eval_every": 100,
                  "eval_batches": 4, "checkpoint_every": 200},  # stall_patience: the default 100 steps
    },
    "grid": {"model.block": BLOCKS, "train.warmup_steps": [0, 20, 80], "train.lr": [3e-3, 1e-2]},
}

# GPU: He & Hofmann's depth at a smaller width (18 layers, d=512) on the whole Python environment;
# warm-up 0 / 1% / 10% of 5,000 steps, the two rates around the paper's 1e-3.
WARMUP_GPU = {
    "name": "warmup-gpu",
    "description": "Warm-up for every block at GPU size: every block x warm-up 0/50/500 of 5000 steps x AdamW "
                   "lr 3e-4/1e-3, 18 layers, d=512, T=128, batch 128, bf16, on the python source.",
    "expected_cost": f"{6 * len(BLOCKS)} runs of 5000 steps x 16k tokens (82M tokens each): about "
                     f"{round(6 * len(BLOCKS) * 10 / 36)} GPU-hours on one H100 "
                     "(an estimate from the FLOP count, not a measurement)",
    "base": {
        "data": {"source": "python", "vocab_size": 16384, "seq_len": 128},
        "model": {"d_model": 512, "n_layers": 18, "n_heads": 8, "d_ff": 2048},
        "train": {"steps": 5000, "batch_size": 128, "weight_decay": 0.1, "precision": "bf16", "compile": True,
                  "log_every": 25, "eval_every": 500, "checkpoint_every": 1000, "stall_patience": 300},
    },
    "grid": {"model.block": BLOCKS, "train.warmup_steps": [0, 50, 500], "train.lr": [3e-4, 1e-3]},
}
