"""The `stream` presets: SPEC 2c's residual-stream blocks against Pre-LN under the fair-comparison protocol.

Each block replaces the fixed sum `x + F(x)` around a sub-layer by something learned: several mixed streams
(Hyper-Connections, mHC), attention or a learned average over depth (Attention Residuals, DenseFormer), the
first layer's values mixed into every layer's (ResFormer), a low-rank path beside the skip (LAuReL). Every
one starts as Pre-LN or close to it, so the question is what training makes of the extra freedom, at the
depth where Pre-LN's hidden state grows (Xiong et al.'s Lemma 2, the "PreNorm dilution" these papers name).
One recipe for all, He & Hofmann's (normal init, RMSNorm, AdamW, weight decay 0.1, 5% warm-up then linear
decay): none of the six papers states a training setting of its own method beyond its baseline's.
"""

from __future__ import annotations

from blocklab.experiments.protocol import PRESET_SEEDS, planned_runs
from blocklab.experiments.zoo_presets import depth_experiments

STREAM_BLOCKS = [
    "pre-ln",
    "hyper-connections",
    "mhc",
    "attn-res",
    "denseformer",
    "value-residual",
    "laurel",
    "frac-connections",
    "muddformer",
]


# ResFormer's headline (Zhou et al. 2024, abstract): "equivalent validation loss with 16.11% fewer model
# parameters". Tested directly: a ResFormer whose MLP is narrowed until the whole model has 83.89% of Pre-LN's
# parameters, against Pre-LN. {(d_model, n_layers, vocabulary, seq_len): d_ff}, the closest even width
# (tests/experiments/test_stream_presets.py checks each ratio).
RESFORMER_FEWER = 0.1611
SMALL_RESFORMER_D_FF = {
    (64, 4, 1024, 64): 172,
    (64, 24, 1024, 64): 190,
    (64, 48, 1024, 64): 192,
    (512, 6, 8192, 128): 1442,
}


def stream_experiments(
    grids: dict[int, list[float]], d: int, vocab: int, seq_len: int, tune_seeds: list[int] | None = None
) -> dict:
    """Every block of STREAM_BLOCKS against Pre-LN at each depth of `grids`, each over that depth's rates (on
    `tune_seeds`, default the sweep's), and ResFormer with 16% fewer parameters (ResFormer's claim) beside them."""
    out: dict = {"experiments": {}, "runs": []}
    for n, lrs in grids.items():
        part = depth_experiments(
            STREAM_BLOCKS, [n], lrs, title="The residual stream at {n} layers, each block at its own best rate"
        )
        d_ff = SMALL_RESFORMER_D_FF[(d, n, vocab, seq_len)]
        small = {
            "name": f"value-residual-small_L{n}",
            "label": f"ResFormer, {RESFORMER_FEWER:.0%} fewer parameters (MLP {d_ff}), {n} layers",
            "model.block": "value-residual",
            "model.d_ff": d_ff,
            "model.n_layers": n,
            "experiment": f"L{n}",
        }
        if tune_seeds is not None:
            part["experiments"][f"L{n}"]["tune"]["seeds"] = tune_seeds
        out["experiments"].update(part["experiments"])
        out["runs"] += part["runs"] + [small]
    return out


STREAM_BASE = {
    "data": {"source": "stdlib", "vocab_size": 1024, "seq_len": 64},
    "model": {"d_model": 64, "n_heads": 4, "d_ff": 256},
    "train": {
        "steps": 300,
        "batch_size": 16,
        "weight_decay": 0.1,
        "log_every": 5,
        "eval_every": 150,
        "eval_batches": 32,
        "checkpoint_every": 300,
        # these small models leave the unigram plateau at a step that varies with the seed: runs train to the
        # end and a failure is a final loss within the tolerance of the cap (as in quick)
        "stall_patience": 0,
    },
}
STREAM_WHAT = (
    "Pre-LN against Hyper-Connections, mHC, Attention Residuals, DenseFormer, ResFormer's value residual "
    "(and a ResFormer with 16% fewer parameters) and LAuReL-LR, causal LM on the Python standard library (d=64, "
    "T=64, vocabulary 1024, batch 16, 300 steps); He & Hofmann's recipe"
)

STREAM = {
    "name": "stream",
    "description": f"The residual stream at 4 layers: {STREAM_WHAT}; each block at its own best of lr "
    "1e-3..1e-1 (tuning seeds 5, 6), five final seeds.",
    "expected_cost": f"{planned_runs(10, 5)} runs of 300 steps at 4 layers: about 65 minutes on 2 CPU cores (scaled "
    "from 64 runs in 25 minutes, measured 2026-11-26 beside other work; the streams cost more per step than "
    "Pre-LN, mHC about 5x: `blocklab bench` measures it)",
    "seeds": PRESET_SEEDS,
    "base": STREAM_BASE,
    # tuning seeds named, not derived from the final seeds: `--seeds 7,8,9,10,11` then replicates the verdicts on
    # new final seeds at the rates already chosen
    **stream_experiments({4: [1e-3, 3e-3, 1e-2, 3e-2, 1e-1]}, 64, 1024, 64, tune_seeds=[5, 6]),
}

# Depth: where Pre-LN's hidden state grows (Xiong et al.'s Lemma 2). Pre-LN's best rate falls with depth
# (results/depth-h100: 1e-2 at 6 layers, 1e-3 at 24); the stream blocks' do not follow it: on the first run of
# 3e-4..3e-3 (2026-11-26) Hyper-Connections, Attention Residuals and DenseFormer had their best at 3e-3, the
# grid's top, so the grid reaches 1e-2. mHC's 20 Sinkhorn rounds per sub-layer and Attention Residuals' mixes
# over 48 sources make their 24-layer runs 4-8x Pre-LN's on a CPU. Tuning seeds 5 and 6, as `stream`.
STREAM_DEPTH = {
    "name": "stream-depth",
    "description": f"The residual stream at 24 layers: {STREAM_WHAT}; each block at its own best of lr "
    "3e-4..1e-2 (tuning seeds 5, 6), five final seeds: which blocks train where Pre-LN's hidden state grows.",
    "expected_cost": f"{planned_runs(10, 4)} runs of 300 steps at 24 layers: about 8 hours on 2 CPU cores (scaled "
    "from the 24 tuning runs of 3e-4..3e-3: 90 minutes, two at a time; Attention Residuals' runs 20 minutes "
    "each, mHC's 10-17)",
    "seeds": PRESET_SEEDS,
    "base": STREAM_BASE,
    **stream_experiments({24: [3e-4, 1e-3, 3e-3, 1e-2]}, 64, 1024, 64, tune_seeds=[5, 6]),
}

# The depth sweep on a GPU, at 24 and 48 layers: the CPU preset's settings (fp32, compile off), which 2 CPU
# cores cannot run at 48 layers in a session (mHC's 48-layer runs alone would take hours).
STREAM_DEPTH_GPU = {
    "name": "stream-depth-gpu",
    "description": f"The residual stream at 24 and 48 layers: {STREAM_WHAT}; each block and depth at its own "
    "best of lr 3e-4..1e-2 (tuning seeds 5, 6), five final seeds; fp32, compile off: the CPU preset's settings on "
    "a GPU.",
    "expected_cost": f"{planned_runs(20, 4)} runs of 300 steps at 24 and 48 layers: about 32 minutes on one H100 "
    "with --jobs 8 (an estimate: the depth preset's 140 runs at 6 to 48 layers took 6 minutes there; mHC's many "
    "small kernels may cost more), hours on 2 CPU cores",
    "seeds": PRESET_SEEDS,
    "base": {**STREAM_BASE, "train": {**STREAM_BASE["train"], "compile": False}},
    **stream_experiments({24: [3e-4, 1e-3, 3e-3, 1e-2], 48: [3e-4, 1e-3, 3e-3, 1e-2]}, 64, 1024, 64, tune_seeds=[5, 6]),
}

# GPU: a 10-minute script on one H100 (the tuned comparison of results/gpu-h100-tuned took 225 s for 30 runs
# of this size, six at a time).
STREAM_GPU = {
    "name": "stream-gpu",
    "description": "The residual stream at GPU size: Pre-LN against the six residual-stream blocks (and a "
    "ResFormer with 16% fewer parameters), 6 layers, "
    "d=512, 8 heads, MLP 2048, T=128, batch 32, 1000 steps, bf16, compile off, the Python standard library; "
    "He & Hofmann's recipe; each block at its own best of lr 3e-4..1e-2, five final seeds.",
    "expected_cost": f"{planned_runs(10, 4)} runs of 1000 steps x 4k tokens: about 19 minutes on one H100, six at a "
    "time (an estimate from the 30 runs of the same size in results/gpu-h100-tuned, 225 s)",
    "seeds": PRESET_SEEDS,
    "base": {
        "data": {"source": "stdlib", "vocab_size": 8192, "seq_len": 128},
        "model": {"d_model": 512, "n_heads": 8, "d_ff": 2048},
        "train": {
            "steps": 1000,
            "batch_size": 32,
            "weight_decay": 0.1,
            "warmup_steps": 50,
            "precision": "bf16",
            "compile": False,
            "log_every": 10,
            "eval_every": 500,
            "eval_batches": 16,
            "checkpoint_every": 1000,
        },
    },
    **stream_experiments({6: [3e-4, 1e-3, 3e-3, 1e-2]}, 512, 8192, 128),
}
