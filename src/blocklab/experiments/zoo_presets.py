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

from blocklab.experiments.protocol import PRESET_SEEDS, planned_runs
from blocklab.registry import PUBLIC_BLOCKS

# SPEC 2b's two options, each on the block its paper puts it in.
OPTION_RUNS = [
    {"name": "dyt", "label": "DyT (Pre-LN, norm=dyt)", "model.block": "pre-ln", "model.norm": "dyt"},
    {"name": "qk-norm", "label": "Pre-LN + QK-norm", "model.block": "pre-ln", "model.qk_norm": True},
    # Allen-Zhu's Canon layers at all four positions, against the same Pre-LN without them (the reference)
    {"name": "canon", "label": "Pre-LN + Canon (ABCD)", "model.block": "pre-ln", "model.canon": "ABCD"},
]


def zoo_runs() -> list[dict]:
    """One run per public block (its registry label; its block recipe applies) and one per option."""
    runs = [{"name": b, "label": label, "model.block": b} for b, label in PUBLIC_BLOCKS.items()]
    return runs + [dict(r) for r in OPTION_RUNS]


def zoo(name: str, description: str, cost: tuple[str, float, str], base: dict, lrs: list[float]) -> dict:
    """A zoo preset: every run of zoo_runs() tuned over `lrs` (two tuning seeds), then five final seeds at its
    best, against Pre-LN. `cost`: (what one run is, hours per run, the basis of that estimate); the total
    follows the number of blocks."""
    runs = zoo_runs()
    n = planned_runs(len(runs), len(lrs))
    what, hours, basis = cost
    return {
        "name": name,
        "description": description,
        "expected_cost": f"{n} runs of {what}: about {n * hours:.1f} {basis}",
        "target_run": "pre-ln",
        "seeds": PRESET_SEEDS,
        "tune": {"key": "train.lr", "values": lrs},
        "base": base,
        "runs": runs,
    }


ZOO = zoo(
    "zoo",
    "Every block blocklab offers (`blocklab train --help` lists them with their equations) and the DyT and "
    "QK-norm options on one causal-LM budget, five seeds: "
    "d=128, 4 layers, T=128, batch 16, 200 steps on the stdlib corpus; He & Hofmann's recipe "
    "(AdamW, wd 0.1, 10-step warm-up then linear decay, clip 1) for every block but nGPT (its paper's: "
    "no weight decay, no warm-up); each block at its own best of lr 3e-4..3e-2.",
    (
        "200 steps at d=128",
        41 / 60 / 36,
        "hours on 2 CPU cores (an estimate: the shared-rate zoo's 36 runs took 41 minutes beside another sweep; "
        "the 85 runs of an earlier three-rate grid took 3 minutes on one H100, 7 at a time)",
    ),
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
            # 32 batches: at 8 the eval set's own noise (0.078, paired) was 0.58 of the spread over seeds
            "eval_batches": 32,
            "checkpoint_every": 200,
            # He & Hofmann's recipe: these models leave the unigram plateau late (a stall rule with patience 50
            # cut the H100 zoo's runs at steps 74-97 of 200), so every run trains to the end
            "stall_patience": 0,
        },
    },
    # Measured on one H100 (results/zoo-h100): over 1e-3..1e-2 Pre-LN, QK-norm and Mix-LN had their best at
    # 1e-3 and nGPT, Peri-LN and LNS at 1e-2, both edges, so no comparison was a verdict: the grid reaches
    # one value further on each side.
    [3e-4, 1e-3, 3e-3, 1e-2, 3e-2],
)

# GPU: He & Hofmann's depth and width at 12 layers (d=768) on the whole Python environment.
ZOO_GPU = zoo(
    "zoo-gpu",
    "The zoo at GPU size: every block, 12 layers, d=768, 12 heads, MLP 3072, T=128, batch "
    "128, 5000 steps, bf16, compiled, five seeds; He & Hofmann's recipe (AdamW lr 1e-3, wd 0.1, "
    "5% warm-up, linear decay) for every block but nGPT (no weight decay, no warm-up); each block at "
    "its own best of lr 3e-4, 1e-3, 3e-3.",
    (
        "5000 steps x 16k tokens (82M tokens each)",
        20 / 85,
        "GPU-hours on one H100 (an estimate from the FLOP count, not a measurement)",
    ),
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
            "stall_patience": 0,
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
DEPTHS = [6, 12, 24, 48]
# Measured on one H100 (results/depth-h100): over 1e-3..1e-2, 13 of the 28 groups had their best at an edge
# of the grid (Pre-LN at 1e-2 for 6 and 12 layers, at 1e-3 for 24 and 48), so no comparison was a verdict.
# The grid reaches one value further on each side.
DEPTH_LRS = [3e-4, 1e-3, 3e-3, 1e-2, 3e-2]


def depth_experiments(blocks: list[str], depths: list[int], lrs: list[float], title: str = "{n} layers") -> dict:
    """One experiment per depth, each block against Pre-LN *at that depth* (a deeper model has more
    parameters and a different best rate: comparing it with a 6-layer reference would say nothing about
    the block), each over `lrs`; `title` with {n} the depth. Returns the sweep's `experiments` and `runs`."""
    runs = [
        {
            "name": f"{b}_L{n}",
            "label": f"{PUBLIC_BLOCKS[b]}, {n} layers",
            "model.block": b,
            "model.n_layers": n,
            "experiment": f"L{n}",
        }
        for n in depths
        for b in blocks
    ]
    experiments = {
        f"L{n}": {
            "title": title.format(n=n),
            "target_run": f"pre-ln_L{n}",
            "tune": {"key": "train.lr", "values": lrs},
        }
        for n in depths
    }
    return {"experiments": experiments, "runs": runs}


DEPTH = {
    "name": "depth",
    "description": "Depth scaling: Post-LN, Pre-LN, DeepNorm, Mix-LN, LNS, SAS-P and ReZero at 6, 12, 24 and 48 "
    "layers of d=64 (vocabulary 1024, T=64, batch 16, 300 steps, five seeds) on the stdlib corpus; "
    "He & Hofmann's recipe (AdamW, wd 0.1, 15-step warm-up then linear decay, clip 1), each block "
    "and depth at its own best of lr 3e-4..3e-2, against Pre-LN at the same depth: which train, which "
    "stall, which diverge, and the loss they reach.",
    "expected_cost": f"{planned_runs(len(DEPTH_BLOCKS) * len(DEPTHS), len(DEPTH_LRS))} runs of 300 steps at d=64: "
    "about 5 hours on 2 CPU cores (an estimate: the 140 runs of the three-rate grid took 6 minutes on one H100, 8 "
    "at a time, and 80 minutes were estimated for them on 2 CPU cores)",
    "seeds": PRESET_SEEDS,
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
            # 64 batches: at 16 the eval set's own noise (0.038, paired) was 0.58 of the spread over seeds at 6
            # layers (at 4 it was above it)
            "eval_batches": 64,
            "checkpoint_every": 300,
            # He & Hofmann's recipe: a stall rule with patience 100 cut the H100 depth runs at steps 118-156 of 300
            "stall_patience": 0,
        },
    },
    **depth_experiments(DEPTH_BLOCKS, DEPTHS, DEPTH_LRS),
}
