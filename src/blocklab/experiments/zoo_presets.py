"""The `zoo` and `depth` presets: every block of SPEC sections 2 and 2b on one causal-LM budget, and the
blocks that claim to fix deep training at growing depth.

One shared recipe, He & Hofmann's (normal init, RMSNorm, AdamW, weight decay 0.1, 5% linear warm-up
then linear decay, clipping at 1), because most papers of section 2b state none of their own at this
size or state this one (OP's op.yaml: AdamW, wd 0.1, 5% warm-up; Mix-LN and LNS: LLaMA's AdamW with
warm-up; DyT and QK-norm: the baseline's). The one exception is nGPT, whose paper prescribes no weight
decay and no warm-up (Loshchilov et al. Sec. 2.6): its block recipe (registry) applies. DeepNorm's paper
recipe is its translation one; for a language model it uses the shared recipe, as Post-LN does. Every
block is tuned over one learning-rate grid: each paper tunes its own rate, so one shared rate judges
the blocks by how close their best rate lies to it.
"""

from __future__ import annotations

from blocklab.registry import PUBLIC_BLOCKS

# SPEC 2b's two options, each on the block its paper puts it in.
OPTION_RUNS = [
    {"name": "dyt", "label": "DyT (Pre-LN, norm=dyt)", "model.block": "pre-ln", "model.norm": "dyt"},
    {"name": "qk-norm", "label": "Pre-LN + QK-norm", "model.block": "pre-ln", "model.qk_norm": True},
]


def zoo_runs() -> list[dict]:
    """One run per public block (its registry label; its block recipe applies) and one per option."""
    runs = [{"name": b, "label": label, "model.block": b} for b, label in PUBLIC_BLOCKS.items()]
    return runs + [dict(r) for r in OPTION_RUNS]


def zoo(name: str, description: str, cost: str, base: dict, lrs: list[float]) -> dict:
    """A zoo preset: every run of zoo_runs() tuned over `lrs` (one tuning seed), then two final seeds at its
    best, against Pre-LN."""
    runs = zoo_runs()
    return {
        "name": name,
        "description": description,
        "expected_cost": f"{(len(lrs) + 2) * len(runs)} runs of {cost}",
        "target_run": "pre-ln",
        "seeds": [0, 1],
        "tune": {"key": "train.lr", "values": lrs},
        "base": base,
        "runs": runs,
    }


ZOO = zoo(
    "zoo",
    "Every block blocklab offers (`blocklab train --help` lists them with their equations) and the DyT and "
    "QK-norm options on one causal-LM budget, two seeds: "
    "d=128, 4 layers, T=128, batch 16, 200 steps on the stdlib corpus; He & Hofmann's recipe "
    "(AdamW, wd 0.1, 10-step warm-up then linear decay, clip 1) for every block but nGPT (its paper's: "
    "no weight decay, no warm-up); each block at its own best of lr 1e-3, 3e-3, 1e-2.",
    "200 steps at d=128: about 1h45 on 2 CPU cores (an estimate: the shared-rate zoo's 36 runs took 41 "
    "minutes beside another sweep)",
    {
        "data": {"source": "stdlib", "vocab_size": 4096, "seq_len": 128},
        "model": {"d_model": 128, "n_layers": 4, "n_heads": 4, "d_ff": 512},
        "train": {
            "steps": 200,
            "batch_size": 16,
            "weight_decay": 0.1,
            "warmup_steps": 10,
            "log_every": 5,
            "eval_every": 50,
            "eval_batches": 8,
            "checkpoint_every": 200,
            "stall_patience": 50,
        },
    },
    [1e-3, 3e-3, 1e-2],
)

# GPU: He & Hofmann's depth and width at 12 layers (d=768) on the whole Python environment.
ZOO_GPU = zoo(
    "zoo-gpu",
    "The zoo at GPU size: every block, 12 layers, d=768, 12 heads, MLP 3072, T=128, batch "
    "128, 5000 steps, bf16, compiled, two seeds; He & Hofmann's recipe (AdamW lr 1e-3, wd 0.1, "
    "5% warm-up, linear decay) for every block but nGPT (no weight decay, no warm-up); each block at "
    "its own best of lr 3e-4, 1e-3, 3e-3.",
    "5000 steps x 16k tokens (82M tokens each): about 20 GPU-hours on one H100 (an estimate from the "
    "FLOP count, not a measurement)",
    {
        "data": {"source": "python", "vocab_size": 16384, "seq_len": 128},
        "model": {"d_model": 768, "n_layers": 12, "n_heads": 12, "d_ff": 3072},
        "train": {
            "steps": 5000,
            "batch_size": 128,
            "weight_decay": 0.1,
            "warmup_steps": 250,
            "precision": "bf16",
            "compile": True,
            "log_every": 25,
            "eval_every": 500,
            "checkpoint_every": 1000,
            "stall_patience": 300,
        },
    },
    [3e-4, 1e-3, 3e-3],
)

# Depth: the blocks that claim to train deep stacks (DeepNorm, Mix-LN, LNS, ReZero, SAS-P) against
# Post-LN and Pre-LN, at 6 to 48 thin layers (d=64), the shared recipe and two seeds. A first try at
# vocabulary 4096 and 200 steps of 512 tokens left every block at the unigram loss beyond 6 layers
# (Pre-LN included): too short a budget to tell blocks apart. A 1,024-token vocabulary shortens the
# unigram plateau and cheapens the head, so the budget goes to the layers.
DEPTH_BLOCKS = ["post-ln", "pre-ln", "deepnorm", "mix-ln", "lns", "sas-p", "rezero"]
DEPTH = {
    "name": "depth",
    "description": "Depth scaling: Post-LN, Pre-LN, DeepNorm, Mix-LN, LNS, SAS-P and ReZero at 6, 12, 24 and 48 "
    "layers of d=64 (vocabulary 1024, T=64, batch 16, 300 steps, two seeds) on the stdlib corpus; "
    "He & Hofmann's recipe (AdamW, wd 0.1, 15-step warm-up then linear decay, clip 1), each block "
    "and depth at its own best of lr 1e-3, 3e-3, 1e-2: which train, which stall, which diverge, "
    "and the loss they reach.",
    "expected_cost": "140 runs of 300 steps at d=64 (stalled runs end early): about 80 minutes on 2 CPU cores "
    "(an estimate: the shared-rate sweep's 56 runs took 32 minutes beside another sweep)",
    "target_run": "pre-ln_L6",
    "seeds": [0, 1],
    "tune": {"key": "train.lr", "values": [1e-3, 3e-3, 1e-2]},
    "base": {
        "data": {"source": "stdlib", "vocab_size": 1024, "seq_len": 64},
        "model": {"d_model": 64, "n_heads": 4, "d_ff": 256},
        "train": {
            "steps": 300,
            "batch_size": 16,
            "weight_decay": 0.1,
            "warmup_steps": 15,
            "log_every": 5,
            "eval_every": 100,
            "eval_batches": 4,
            "checkpoint_every": 300,
        },
    },
    "grid": {"model.block": DEPTH_BLOCKS, "model.n_layers": [6, 12, 24, 48]},
}
