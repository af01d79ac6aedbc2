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

from blocklab.experiments.zoo_presets import depth_experiments

STREAM_BLOCKS = ["pre-ln", "hyper-connections", "mhc", "attn-res", "denseformer", "value-residual", "laurel"]


def stream_experiments(depths: list[int], lrs: list[float]) -> dict:
    """Every block of STREAM_BLOCKS against Pre-LN at each depth of `depths`, each over `lrs`."""
    return depth_experiments(
        STREAM_BLOCKS, depths, lrs, title="The residual stream at {n} layers, each block at its own best rate"
    )


STREAM = {
    "name": "stream",
    "description": "The residual stream: Pre-LN against Hyper-Connections, mHC, Attention Residuals, DenseFormer, "
    "ResFormer's value residual and LAuReL-LR, causal LM on the Python standard library (d=64, T=64, "
    "vocabulary 1024, batch 16, 300 steps), at 4 layers and at 24, where Pre-LN's hidden state grows; He & "
    "Hofmann's recipe; each block and depth at its own best of lr 1e-3..1e-1, three final seeds.",
    "expected_cost": "112 runs of 300 steps, 56 at 4 layers and 56 at 24: roughly 45 minutes on 2 idle CPU "
    "cores (an estimate from the quick preset's measured runs scaled by steps and layers, not a measurement; "
    "the streams cost more per step than Pre-LN: `blocklab bench --blocks ...` measures by how much)",
    "seeds": [0, 1, 2],
    "base": {
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
            # these small models leave the unigram plateau at a step that varies with the seed: runs train
            # to the end and a failure is a final loss at the cap (as in quick)
            "stall_patience": 0,
        },
    },
    **stream_experiments([4, 24], [1e-3, 3e-3, 1e-2, 3e-2, 1e-1]),
}

# GPU: a 10-minute script on one H100 (the tuned comparison of results/gpu-h100-tuned took 225 s for 30 runs
# of this size, six at a time).
STREAM_GPU = {
    "name": "stream-gpu",
    "description": "The residual stream at GPU size: Pre-LN against the six residual-stream blocks, 6 layers, "
    "d=512, 8 heads, MLP 2048, T=128, batch 32, 1000 steps, bf16, compile off, the Python standard library; "
    "He & Hofmann's recipe; each block at its own best of lr 3e-4..1e-2, two final seeds.",
    "expected_cost": "42 runs of 1000 steps x 4k tokens: about 6 minutes on one H100, six at a time (an estimate "
    "from the 30 runs of the same size in results/gpu-h100-tuned, 225 s)",
    "seeds": [0, 1],
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
    **stream_experiments([6], [3e-4, 1e-3, 3e-3, 1e-2]),
}
