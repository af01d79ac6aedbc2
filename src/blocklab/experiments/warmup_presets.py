"""The `warmup` presets: does every block need warm-up? Every block x warm-up {0, short, long} x two rates.

The question that joins the two papers and that neither asks: Xiong et al. show that Pre-LN removes
Post-LN's need for warm-up; He & Hofmann's simplified blocks are trained with warm-up only, and at
their width SAS-P with a 50-step warm-up sat at the unigram loss in a 150-step CPU run. The runs use He &
Hofmann's recipe (normal init, RMSNorm, AdamW with weight decay 0.1, linear warm-up then linear
decay, clipping at 1), the same for every block; the report draws the final loss over warm-up x
learning rate per block as a heat map, and stalled runs (loss at the unigram entropy) end early.
"""

from __future__ import annotations

from blocklab.experiments.protocol import PRESET_SEEDS, planned_runs
from blocklab.registry import PUBLIC_BLOCKS as _PUBLIC

BLOCKS = list(_PUBLIC)  # every public block of SPEC sections 2 and 2b


def xiong_arms(blocks, warmups, adam_lrs, sgd_lrs) -> dict:
    """Xiong et al.'s two optimizers (Sec. 3.2, Fig. 2) as two tuned experiments of one sweep: every block x
    warm-up, Adam and SGD (no momentum: the paper states none, fairseq's default is 0), each group at its own
    best rate over a grid around the paper's two. Returns the sweep's `experiments` and `runs`."""
    runs = [
        {
            "name": f"{opt}_{b}_wu{w}",
            "label": f"{opt.upper() if opt == 'sgd' else 'Adam'}, {b}, wu{w}",
            "model.block": b,
            "train.optimizer": opt,
            "train.warmup_steps": w,
            "experiment": opt,
            **({"train.momentum": 0.0} if opt == "sgd" else {}),
        }
        for opt in ("adam", "sgd")
        for b in blocks
        for w in warmups
    ]
    experiments = {
        "adam": {
            "title": "Adam",
            "target_run": f"adam_pre-ln_wu{warmups[0]}",
            "tune": {"key": "train.lr", "values": sorted(adam_lrs)},
        },
        "sgd": {
            "title": "SGD",
            "target_run": f"sgd_pre-ln_wu{warmups[0]}",
            "tune": {"key": "train.lr", "values": sorted(sgd_lrs)},
        },
    }
    return {"experiments": experiments, "runs": runs}


# Xiong et al.'s Transformer and optimizer (fairseq's): Xavier init, LayerNorm, Adam (0.9, 0.98) without
# clipping or weight decay, inverse-square-root decay, 6 layers (the quick and warmup-answers presets' setting).
XIONG_SETTING = {
    "model.n_layers": 6,
    "model.init": "xavier",
    "model.norm": "layernorm",
    "train.optimizer": "adam",
    "train.schedule": "inv_sqrt",
    "train.beta2": 0.98,
    "train.weight_decay": 0.0,
    "train.grad_clip": 0.0,
}

# The paper's rates (Adam 5e-4 and 1e-3, SGD 1e-3 and 5e-3), each grid widened by one value on both sides:
# a best at a grid's edge is no verdict.
XIONG_ADAM_LRS = [2.5e-4, 5e-4, 1e-3, 2e-3]
XIONG_SGD_LRS = [2e-4, 1e-3, 5e-3, 2.5e-2]

# CPU: 36 runs of 200 steps at 1,024 tokens each, d=64, 4 layers. At lr 1e-3 / 3e-3 and 150 steps
# this model had barely left the unigram loss, so the rates are 3e-3 and 1e-2:
# small models take larger rates, and warm-up matters where the rate is high. The unigram plateau
# of this model can last more than 50 steps before it leaves it, so there is no stall rule: every run
# trains to the end.
WARMUP = {
    "name": "warmup",
    "description": "Warm-up for every block x warm-up 0/20/80 of 200 steps, each at "
    "its own best AdamW lr of 1e-3/3e-3/1e-2 (He & Hofmann's recipe: linear warm-up and decay), d=64, "
    "4 layers, on the stdlib corpus, five final seeds.",
    "expected_cost": f"{planned_runs(3 * len(BLOCKS), 3)} runs of 200 steps at d=64: about "
    f"{planned_runs(3 * len(BLOCKS), 3) * 2 / 225:.1f} hours on 2 idle CPU cores (an estimate from the untuned "
    "sweep's 40 minutes for 75 runs)",
    "seeds": PRESET_SEEDS,
    "tune": {"key": "train.lr", "values": [1e-3, 3e-3, 1e-2]},
    "base": {
        "data": {"source": "stdlib", "vocab_size": 4096, "seq_len": 64},
        "model": {"d_model": 64, "n_layers": 4, "n_heads": 4, "d_ff": 256},
        "train": {
            "steps": 200,
            "batch_size": 16,
            "weight_decay": 0.1,
            "log_every": 5,
            "eval_every": 100,
            "eval_batches": 32,
            "checkpoint_every": 200,
            "stall_patience": 0,
        },
    },
    "grid": {"model.block": BLOCKS, "train.warmup_steps": [0, 20, 80]},
}

# GPU: He & Hofmann's depth at a smaller width (18 layers, d=512) on the whole Python environment;
# warm-up 0 / 1% / 10% of 5,000 steps, the two rates around the paper's 1e-3.
WARMUP_GPU = {
    "name": "warmup-gpu",
    "description": "Warm-up for every block at GPU size: every block x warm-up 0/50/500 of 5000 steps, each at its "
    "own best AdamW lr of 3e-4/1e-3/3e-3, 18 layers, d=512, T=128, batch 128, bf16, on the python "
    "source, five final seeds.",
    "expected_cost": f"{planned_runs(3 * len(BLOCKS), 3)} runs of 5000 steps x 16k tokens (82M tokens each): about "
    f"{round(planned_runs(3 * len(BLOCKS), 3) * 10 / 36)} GPU-hours on one H100 "
    "(an estimate from the FLOP count, not a measurement)",
    "base": {
        "data": {"source": "python", "vocab_size": 16384, "seq_len": 128},
        "model": {"d_model": 512, "n_layers": 18, "n_heads": 8, "d_ff": 2048},
        "train": {
            "steps": 5000,
            "batch_size": 128,
            "weight_decay": 0.1,
            "precision": "bf16",
            "compile": True,
            "log_every": 25,
            "eval_every": 500,
            "checkpoint_every": 1000,
            "stall_patience": 0,
        },
    },
    "seeds": PRESET_SEEDS,
    "tune": {"key": "train.lr", "values": [3e-4, 1e-3, 3e-3]},
    "grid": {"model.block": BLOCKS, "train.warmup_steps": [0, 50, 500]},
}
