"""Built-in sweeps. Each is the dict form of a SWEEP.toml: base run config, grid, extra runs, probes."""
from __future__ import annotations

# Five blocks of the two papers on the embedded stdlib corpus, sized so that `make demo`
# (install included) ends within 15 minutes on 2 CPU cores. Same optimiser settings for
# every block, as in He & Hofmann; Post-LN and Pre-LN are run again without warm-up
# (Xiong et al.). The init probes of `blocklab probe` run once for the report.
QUICK = {
    "name": "quick",
    "description": "Pre-LN, Post-LN, SAS, SAS-P and SAS-P without norms, causal LM on the Python standard "
                   "library; AdamW with 5% warm-up and linear decay; Post-LN and Pre-LN again without warm-up.",
    "expected_cost": "about 10 minutes on 2 CPU cores",
    "target_run": "pre-ln",  # steps to target: how long each block takes to match Pre-LN's final loss
    "base": {
        "data": {"source": "stdlib", "vocab_size": 4096, "seq_len": 128},
        "model": {"d_model": 128, "n_layers": 4, "n_heads": 4, "d_ff": 512},
        "train": {"steps": 250, "batch_size": 16, "lr": 3e-3, "weight_decay": 0.1, "log_every": 5,
                  "eval_every": 50, "eval_batches": 8, "checkpoint_every": 125},
    },
    "grid": {"model.block": ["pre-ln", "post-ln", "sas", "sas-p", "sas-p-nonorm"]},
    "runs": [
        {"label": "post-ln, no warm-up", "name": "post-ln_wu0", "model.block": "post-ln", "train.warmup_steps": 0},
        {"label": "pre-ln, no warm-up", "name": "pre-ln_wu0", "model.block": "pre-ln", "train.warmup_steps": 0},
    ],
    "probes": {"blocks": "post-ln,pre-ln,sas,sas-p", "depths": "2,4,8,16", "d-model": 128, "n-heads": 4,
               "d-ff": 512, "seq-len": 128, "batch-size": 8, "vocab-size": 4096, "seeds": 2, "batches": 1},
}

# Xiong et al. Section 3.2: Post-LN vs Pre-LN, Adam, lr {5e-4, 1e-3}, warm-up {0, 500, 4000}
# followed by inverse-square-root decay. Scaled to CPU by 1/20 with the 500:4000 ratio kept
# (warm-up 0, 25, 200 of 600 steps). Xavier init and LayerNorm as in their Transformer.
XIONG_WARMUP = {
    "name": "xiong-warmup",
    "description": "Xiong et al. (2020) Sec. 3.2 scaled to CPU: Post-LN vs Pre-LN, Adam, lr 5e-4/1e-3, warm-up "
                   "0/25/200 steps (their 0/500/4000 divided by 20), inverse-square-root decay after warm-up "
                   "(1/sqrt(t) from the first step without warm-up).",
    "expected_cost": "12 runs of 600 steps: about 40 minutes on 2 CPU cores",
    "base": {
        "data": {"source": "stdlib", "vocab_size": 4096, "seq_len": 128},
        "model": {"d_model": 128, "n_layers": 6, "n_heads": 4, "d_ff": 512, "norm": "layernorm", "init": "xavier"},
        "train": {"steps": 600, "batch_size": 16, "optimizer": "adam", "schedule": "inv_sqrt", "weight_decay": 0.0,
                  "beta2": 0.98, "grad_clip": 0.0, "log_every": 5, "eval_every": 100, "checkpoint_every": 200},
    },
    "grid": {"model.block": ["post-ln", "pre-ln"], "train.lr": [5e-4, 1e-3], "train.warmup_steps": [0, 25, 200]},
}

# He & Hofmann's CodeParrot setting, for a GPU. Point data.source at CodeParrot text for the
# paper's corpus; the default is the stdlib, which a model this size overfits.
HE_CODEPARROT = {
    "name": "he-codeparrot",
    "description": "He & Hofmann (2024) CodeParrot setting: 18 layers, d=768, 12 heads, MLP 3072, T=128, "
                   "batch 128, AdamW lr 1e-3, weight decay 0.1, 5% warm-up then linear decay, bf16.",
    "expected_cost": "per run 40k steps x 128 x 128 = 655M tokens, about 6.5e17 FLOPs: roughly 30 minutes on one "
                     "H100 at 40% bf16 utilisation (estimate from the FLOP count, not a measurement); days on a CPU",
    "base": {
        # The whole Python environment (about 10x the stdlib): one pass covers far more steps.
        # For the paper's corpus: --data.source hf:codeparrot/codeparrot-clean --data.text_field content
        # --data.streaming true (needs the network; --data.split train).
        "data": {"source": "python", "vocab_size": 50000, "seq_len": 128},
        "model": {"d_model": 768, "n_layers": 18, "n_heads": 12, "d_ff": 3072, "max_seq_len": 1024},
        "train": {"steps": 40000, "batch_size": 128, "lr": 1e-3, "weight_decay": 0.1, "precision": "bf16",
                  "compile": True, "log_every": 50, "eval_every": 1000, "checkpoint_every": 2000},
    },
    "grid": {"model.block": ["pre-ln", "parallel", "v-skipinit", "sas", "sas-p"]},
}

# Depth scaling: do the simplified blocks keep up with Pre-LN as the model deepens?
DEPTH = {
    "name": "depth",
    "description": "Depth scaling of Pre-LN, SAS and SAS-P at 6, 12 and 24 layers (d=128) on the stdlib corpus.",
    "expected_cost": "9 runs of 300 steps: about 45 minutes on 2 CPU cores",
    "target_run": "pre-ln_L6",
    "base": {
        "data": {"source": "stdlib", "vocab_size": 4096, "seq_len": 128},
        "model": {"d_model": 128, "n_heads": 4, "d_ff": 512},
        "train": {"steps": 300, "batch_size": 16, "lr": 2e-3, "log_every": 5, "eval_every": 50,
                  "checkpoint_every": 100},
    },
    "grid": {"model.block": ["pre-ln", "sas", "sas-p"], "model.n_layers": [6, 12, 24]},
}

PRESETS = {p["name"]: p for p in (QUICK, XIONG_WARMUP, HE_CODEPARROT, DEPTH)}
