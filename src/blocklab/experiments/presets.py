"""Built-in sweeps. Each is the dict form of a SWEEP.toml: base run config, grid, extra runs, probes."""

from __future__ import annotations

from blocklab.experiments.answers_presets import WARMUP_ANSWERS, WARMUP_ANSWERS_GPU
from blocklab.experiments.downstream_presets import HE_BERT, HE_BERT_GPU, XIONG_BERT
from blocklab.experiments.protocol import PRESET_SEEDS, planned_runs
from blocklab.experiments.stream_presets import STREAM, STREAM_DEPTH, STREAM_DEPTH_GPU, STREAM_GPU
from blocklab.experiments.translation_presets import XIONG_IWSLT, XIONG_IWSLT_GPU
from blocklab.experiments.warmup_presets import (
    WARMUP,
    WARMUP_GPU,
    XIONG_ADAM_LRS,
    XIONG_SETTING,
    XIONG_SGD_LRS,
    xiong_arms,
)
from blocklab.experiments.zoo_presets import DEPTH, ZOO, ZOO_GPU

# Each paper's claim in its own paper's setting, each block at its own best learning rate (two tuning seeds,
# 5 and 6, named so that `--seeds` replicates the final seeds at the rates already chosen), then five final
# seeds there (a paired test with one seed to spare), sized so that `make demo` (install included) ends within
# 15 minutes on 2 CPU cores.
# Xiong et al.'s claim is about the range of usable rates, so their experiment sweeps four rates over 1.5
# decades (a pilot with five, 3e-4..3e-2, trained nothing at 3e-4 but Pre-LN without warm-up on one seed; a best
# at an edge extends the grid): without warm-up Post-LN's trainable range should end lower. Their setting: Xavier
# init, LayerNorm, Adam (0.9, 0.98) without clipping, inverse-square-root schedule, 6 layers, a 20% warm-up.
# He & Hofmann's experiment sets SAS-P against Pre-LN in their recipe (normal init, RMSNorm, AdamW, 5% warm-up
# then linear decay), each at its own rate over 1e-3..1e-2 (the pilot's bests were both 3e-3; 3e-2 and 1e-1 ended
# near the cap). Both at d=64, T=64, a 1024-token vocabulary, 150 steps: the cost is in `expected_cost`, which
# two tuning seeds and five final seeds set, within the demo's 15 minutes on 2 cores.
# In both recipes these small models sit on the unigram plateau for a while and leave it at a step that varies
# with the seed and the rate: a stall rule cut runs that went on to learn (SAS-P at lr 1e-2 on seed 5 in He &
# Hofmann's; in Xiong's, warmup-answers' ResiDual stalled at 1e-3 between two rates that trained), so every
# run trains to the end and a failure is a final loss within the tolerance of the cap.
HE_QUICK = {"train.stall_patience": 0}
XIONG_QUICK = {**XIONG_SETTING, "train.inv_sqrt_scale": 30, "train.warmup_steps": 30, "train.stall_patience": 0}
QUICK = {
    "name": "quick",
    "description": "Each block at its own best learning rate (two tuning seeds), then five final seeds there, "
    "compared paired by seed with Holm's correction; 150 steps at d=64. He & Hofmann: SAS-P "
    "against Pre-LN, causal LM on the Python standard library, AdamW with 5% warm-up and linear "
    "decay, rates 1e-3..1e-2. Xiong et al.: Post-LN and Pre-LN with a 30-step warm-up and without, "
    "in their setting (Xavier init, LayerNorm, Adam, inverse-square-root decay, 6 layers), rates "
    "1e-3..3e-2; a best at a grid edge extends the grid.",
    "expected_cost": f"{planned_runs(2, 3) + planned_runs(4, 4)} runs of 150 steps (and 2 more per value a best at a "
    "grid edge adds), 2 at a time: about 7 minutes of training on 2 idle CPU cores (44 tuning runs, then 30 final "
    "ones)",
    "experiments": {
        "he": {
            "title": "He & Hofmann: SAS-P against Pre-LN, each at its own best rate",
            "description": "Pre-LN and SAS-P in He & Hofmann's recipe (normal init, RMSNorm, AdamW, 5% warm-up "
            "then linear decay), learning rate tuned per block.",
            "target_run": "pre-ln",
            "tune": {"key": "train.lr", "values": [1e-3, 3e-3, 1e-2], "seeds": [5, 6]},
        },
        "xiong": {
            "title": "Xiong et al.: warm-up and the range of usable learning rates",
            "description": "Post-LN and Pre-LN with a 30-step warm-up and without, in Xiong et al.'s setting "
            "(Xavier init, LayerNorm, Adam, inverse-square-root decay, 6 layers), learning "
            "rate tuned per group.",
            "target_run": "xiong_pre-ln",
            "tune": {"key": "train.lr", "values": [1e-3, 3e-3, 1e-2, 3e-2], "seeds": [5, 6]},
        },
    },
    "seeds": PRESET_SEEDS,
    "base": {
        "data": {"source": "stdlib", "vocab_size": 1024, "seq_len": 64},
        "model": {"d_model": 64, "n_layers": 4, "n_heads": 4, "d_ff": 256},
        "train": {
            "steps": 150,
            "batch_size": 16,
            "weight_decay": 0.1,
            "log_every": 5,
            "eval_every": 150,
            "eval_batches": 32,
            "checkpoint_every": 150,
        },
    },
    "runs": [
        {"name": "pre-ln", "label": "Pre-LN", "model.block": "pre-ln", **HE_QUICK, "experiment": "he"},
        {"name": "sas-p", "label": "SAS-P", "model.block": "sas-p", **HE_QUICK, "experiment": "he"},
        {
            "name": "xiong_post-ln",
            "label": "Post-LN, warm-up 30 (Xiong)",
            "model.block": "post-ln",
            **XIONG_QUICK,
            "experiment": "xiong",
        },
        {
            "name": "xiong_post-ln_wu0",
            "label": "Post-LN, no warm-up (Xiong)",
            "model.block": "post-ln",
            **XIONG_QUICK,
            "train.warmup_steps": 0,
            "experiment": "xiong",
        },
        {
            "name": "xiong_pre-ln",
            "label": "Pre-LN, warm-up 30 (Xiong)",
            "model.block": "pre-ln",
            **XIONG_QUICK,
            "experiment": "xiong",
        },
        {
            "name": "xiong_pre-ln_wu0",
            "label": "Pre-LN, no warm-up (Xiong)",
            "model.block": "pre-ln",
            **XIONG_QUICK,
            "train.warmup_steps": 0,
            "experiment": "xiong",
        },
    ],
    "probes": {
        "blocks": "post-ln,pre-ln,sas,sas-p",
        "depths": "2,4,8,16",
        "d-model": 64,
        "n-heads": 4,
        "d-ff": 256,
        "seq-len": 64,
        "batch-size": 8,
        "vocab-size": 1024,
        "seeds": 2,
        "batches": 1,
    },
}

# Xiong et al. Section 3.2 (Fig. 2): Post-LN vs Pre-LN, Adam and SGD, warm-up {0, 500, 4000} then
# inverse-square-root decay, each group at its own best rate of a grid around the paper's two. At CPU
# scale: 300 steps, warm-up 0/12/100 (their 1:8 ratio), one decay time scale (100) for every run so that
# runs differ in their warm-up only, and "no warm-up" starts at lr_max (training/optim.py). Six layers at
# d=128, Xavier init and LayerNorm as in their Transformer.
XIONG_WARMUP = {
    "name": "xiong-warmup",
    "description": "Xiong et al. (2020) Fig. 2 at CPU scale: Post-LN vs Pre-LN, 6 layers, d=128, with Adam and with "
    "SGD (the paper's two optimizers, two experiments), warm-up 0/12/100 of 300 steps, then "
    "inverse-square-root decay from step 100 for every run (without warm-up the rate starts at "
    "lr_max); each group at its own best rate (Adam 2.5e-4..2e-3, SGD 2e-4..2.5e-2), five seeds.",
    "expected_cost": f"{planned_runs(12, 4)} runs of 300 steps (stalled runs end early): about 3.2 hours on 2 idle "
    "CPU cores (an estimate: the untuned sweep's 24 runs took 30 minutes)",
    "seeds": PRESET_SEEDS,
    "base": {
        "data": {"source": "stdlib", "vocab_size": 4096, "seq_len": 128},
        "model": {"d_model": 128, "n_layers": 6, "n_heads": 4, "d_ff": 512, "norm": "layernorm", "init": "xavier"},
        "train": {
            "steps": 300,
            "batch_size": 16,
            "optimizer": "adam",
            "schedule": "inv_sqrt",
            "inv_sqrt_scale": 100,
            "weight_decay": 0.0,
            "beta2": 0.98,
            "grad_clip": 0.0,
            "log_every": 1,
            "eval_every": 300,
            "eval_batches": 8,
            "checkpoint_every": 1000,
            "stall_patience": 50,  # Xiong's setting: Post-LN's failures are stalls from the start
        },
    },
    **xiong_arms(["post-ln", "pre-ln"], [0, 12, 100], XIONG_ADAM_LRS, XIONG_SGD_LRS),
}

# He & Hofmann's CodeParrot setting, for a GPU. Point data.source at CodeParrot text for the
# paper's corpus; the default is the stdlib, which a model this size overfits.
HE_CODEPARROT = {
    "name": "he-codeparrot",
    "description": "He & Hofmann (2024) CodeParrot setting: 18 layers, d=768, 12 heads, MLP 3072, T=128, "
    "batch 128, AdamW (each block at its own best of lr 3e-4/1e-3/3e-3; the paper's 1e-3), weight "
    "decay 0.1, 5% warm-up then linear decay, bf16, five final seeds.",
    "expected_cost": f"{planned_runs(5, 3)} runs; per run 40k steps x 128 x 128 = 655M tokens, about 6.5e17 FLOPs: "
    "roughly 30 minutes "
    "on one H100 at 40% bf16 utilisation (estimate from the FLOP count, not a measurement); days "
    "on a CPU",
    "base": {
        # The whole Python environment (about 10x the stdlib): one pass covers far more steps.
        # For the paper's corpus: --data.source hf:codeparrot/codeparrot-clean --data.text_field content
        # --data.streaming true (needs the network; --data.split train).
        "data": {"source": "python", "vocab_size": 50000, "seq_len": 128},
        "model": {"d_model": 768, "n_layers": 18, "n_heads": 12, "d_ff": 3072, "max_seq_len": 1024},
        "train": {
            "steps": 40000,
            "batch_size": 128,
            "weight_decay": 0.1,
            "precision": "bf16",
            "compile": True,
            "log_every": 50,
            "eval_every": 1000,
            "checkpoint_every": 2000,
        },
    },
    "seeds": PRESET_SEEDS,
    "tune": {"key": "train.lr", "values": [3e-4, 1e-3, 3e-3]},
    "grid": {"model.block": ["pre-ln", "parallel", "v-skipinit", "sas", "sas-p"]},
}

# Compare at several sizes (Tay et al. 2022, Porian et al. 2024): each block tuned at each size, then a
# frontier of loss against training FLOPs and the compute Pre-LN needs for each block's loss. Training
# tokens grow with the model (about 20 tokens per parameter at the largest CPU size is out of reach; the
# steps double with each size instead). Two successors beside SAS-P: Peri-LN (a norm placement) and nGPT
# (a normalised residual stream, with its paper's recipe).
_SCALING_RUNS = [
    {"name": b, "label": label, "model.block": b}
    for b, label in (
        ("pre-ln", "Pre-LN"),
        ("sas-p", "SAS-P"),
        ("peri-ln", "Peri-LN"),
        ("ngpt", "nGPT"),
        ("muddformer", "MUDDFormer"),  # its paper's headline is a compute multiplier: the frontier measures one
    )
]
SCALING = {
    "name": "scaling",
    "description": "Pre-LN, SAS-P, Peri-LN, nGPT and MUDDFormer at three sizes (d=32/2 layers/100 steps, d=64/4/200, "
    "d=128/4/400; T=64, vocabulary 1024, batch 16) on the stdlib corpus, He & Hofmann's recipe, each "
    "block tuned over lr 1e-3..3e-2 at each size, five final seeds: a frontier of final eval loss "
    "against training FLOPs and each block's compute multiplier against Pre-LN.",
    "expected_cost": f"{planned_runs(5, 4, sizes=3)} runs, 2 at a time: about 2.5 hours on 2 idle CPU cores (an "
    "estimate from the quick preset's measured runs; the largest size dominates)",
    "seeds": PRESET_SEEDS,
    "target_run": "pre-ln",
    "tune": {"key": "train.lr", "values": [1e-3, 3e-3, 1e-2, 3e-2]},
    "sizes": [
        {"model.d_model": 32, "model.n_layers": 2, "model.d_ff": 128, "train.steps": 100},
        {"model.d_model": 64, "model.n_layers": 4, "model.d_ff": 256, "train.steps": 200},
        {"model.d_model": 128, "model.n_layers": 4, "model.d_ff": 512, "train.steps": 400},
    ],
    "base": {
        "data": {"source": "stdlib", "vocab_size": 1024, "seq_len": 64},
        "model": {"n_heads": 4},
        "train": {
            "batch_size": 16,
            "weight_decay": 0.1,
            "log_every": 10,
            "eval_batches": 32,
            "checkpoint_every": 1000,
            "stall_patience": 0,  # He & Hofmann's recipe: small models leave the unigram plateau late
        },
    },
    "runs": _SCALING_RUNS,
}
SCALING_GPU = {
    "name": "scaling-gpu",
    "description": "The scaling preset at GPU sizes: Pre-LN, SAS-P, Peri-LN, nGPT and MUDDFormer at d=256/6 layers, "
    "d=512/8 "
    "and d=768/12 (T=128, batch 128, vocabulary 16384, bf16, compiled) on the whole Python "
    "environment, steps 2.5k/5k/10k, each tuned over lr 3e-4..3e-3 at each size, five final seeds.",
    "expected_cost": f"{planned_runs(5, 4, sizes=3)} runs: roughly 33 GPU-hours on one H100 (an estimate from the "
    "FLOP count, not a measurement)",
    "seeds": PRESET_SEEDS,
    "target_run": "pre-ln",
    "tune": {"key": "train.lr", "values": [3e-4, 1e-3, 2e-3, 3e-3]},
    "sizes": [
        {"model.d_model": 256, "model.n_layers": 6, "model.n_heads": 4, "model.d_ff": 1024, "train.steps": 2500},
        {"model.d_model": 512, "model.n_layers": 8, "model.n_heads": 8, "model.d_ff": 2048, "train.steps": 5000},
        {"model.d_model": 768, "model.n_layers": 12, "model.n_heads": 12, "model.d_ff": 3072, "train.steps": 10000},
    ],
    "base": {
        "data": {"source": "python", "vocab_size": 16384, "seq_len": 128},
        "train": {
            "batch_size": 128,
            "weight_decay": 0.1,
            "precision": "bf16",
            "compile": True,
            "log_every": 50,
            "eval_every": 1000,
            "eval_batches": 32,
            "checkpoint_every": 2500,
            "stall_patience": 0,
        },
    },
    "runs": _SCALING_RUNS,
}

PRESETS = {
    p["name"]: p
    for p in (
        QUICK,
        XIONG_WARMUP,
        HE_CODEPARROT,
        DEPTH,
        ZOO,
        ZOO_GPU,
        WARMUP,
        WARMUP_GPU,
        XIONG_IWSLT,
        XIONG_IWSLT_GPU,
        HE_BERT,
        HE_BERT_GPU,
        XIONG_BERT,
        SCALING,
        SCALING_GPU,
        STREAM,
        STREAM_DEPTH,
        STREAM_DEPTH_GPU,
        STREAM_GPU,
        WARMUP_ANSWERS,
        WARMUP_ANSWERS_GPU,
    )
}
