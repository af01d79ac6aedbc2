"""The `xiong-iwslt` presets: Xiong et al.'s own setting, translation, BLEU against steps.

Xiong et al. (2020) Section 4 / Fig. 2 (c, d): the 6+6-layer Transformer on IWSLT14 German-English,
Post-LN against Pre-LN, Adam (0.9, 0.98), lr 5e-4 and 1e-3, warm-up 0, 500 or 4000 steps then an
inverse-square-root decay, label smoothing 0.1, dropout 0.3 (fairseq's `transformer_iwslt_de_en`).

The CPU preset keeps their depth and recipe at d=128 on the embedded `gettext` corpus (German-English
message catalogs, no download), warm-up 0 / 50 / 250 of 500 steps, all runs sharing one decay time
scale (inv_sqrt_scale 250) so they differ in their warm-up only; without warm-up the rate starts at
lr_max. Dropout 0.1: at this width and under one epoch, 0.3 only slows it down. A translation model
sits at the target unigram loss for a while before it uses the source: with 300 steps and a 50-step
stall window every Post-LN run was called stalled, warm-up or not, so the runs are 500 steps long and
the stall window 100 steps.

The real IWSLT14: build it with fairseq's `examples/translation/prepare-iwslt14.sh` (Moses-tokenized,
lower-cased, as the paper's BLEU is) and join the sides into one file,
`paste train.de train.en > iwslt14.tsv`, then `--data.source iwslt14.tsv`; or a Hugging Face dataset
with a `translation` column holding {"de": ..., "en": ...}: `--data.source hf:NAME --data.hf_config
CONFIG --data.split train` (needs the network once; `blocklab train` never downloads by itself
otherwise). Validation is cut from the training pairs by the hash of each source sentence.
"""

from __future__ import annotations

from blocklab.experiments.protocol import PRESET_SEEDS, planned_runs
from blocklab.experiments.warmup_presets import XIONG_ADAM_LRS, XIONG_SGD_LRS, xiong_arms

_RECIPE = {
    "optimizer": "adam",
    "beta1": 0.9,
    "beta2": 0.98,
    "schedule": "inv_sqrt",
    "weight_decay": 0.0,
    "grad_clip": 0.0,
    "label_smoothing": 0.1,
}
_BLOCKS = ["post-ln", "pre-ln"]

XIONG_IWSLT = {
    "name": "xiong-iwslt",
    "description": "Xiong et al. (2020) on translation at CPU scale: Post-LN vs Pre-LN encoder-decoders, 6+6 layers, "
    "d=128, German-English gettext catalogs, Adam (0.9, 0.98), warm-up 0/50/250 of 500 "
    "steps then inverse-square-root decay, label smoothing 0.1; and the same with SGD (Xiong et al. "
    "Fig. 2's SGD arm); each group at its own best rate (Adam 2.5e-4..2e-3, SGD 2e-4..2.5e-2), five "
    "seeds; BLEU (greedy) against steps.",
    "expected_cost": f"{planned_runs(12, 4)} runs of 500 steps x 32 sentence pairs (stalled runs end early): about "
    "10 hours on 2 idle CPU cores (an estimate: the untuned sweep's 24 runs took 90 minutes)",
    "base": {
        "data": {"source": "gettext", "src_lang": "de", "tgt_lang": "en", "vocab_size": 8000, "seq_len": 64},
        "model": {
            "task": "translation",
            "d_model": 128,
            "n_layers": 6,
            "n_heads": 4,
            "d_ff": 512,
            "norm": "layernorm",
            "init": "xavier",
            "positions": "sinusoidal",
            "dropout": 0.1,
        },
        "train": {
            **_RECIPE,
            "steps": 500,
            "batch_size": 32,
            "inv_sqrt_scale": 250,
            "log_every": 5,
            "eval_every": 100,
            "eval_batches": 64,  # at 4 the eval noise was 1.5 times the seed spread (results/warmup-answers-cpu)
            "checkpoint_every": 500,
            "stall_patience": 100,
        },
    },
    "seeds": PRESET_SEEDS,
    **xiong_arms(_BLOCKS, [0, 50, 250], XIONG_ADAM_LRS, XIONG_SGD_LRS),
}

# fairseq's transformer_iwslt_de_en: d=512, 4 heads, FFN 1024, 6+6 layers, dropout 0.3; warm-up as
# in the paper. Batches are sentence pairs here (fairseq counts tokens: 4096 per GPU is about 128 pairs).
XIONG_IWSLT_GPU = {
    "name": "xiong-iwslt-gpu",
    "description": "Xiong et al. (2020) IWSLT14 setting at full size: Post-LN vs Pre-LN, 6+6 layers, d=512, 4 heads, "
    "FFN 1024, dropout 0.3, label smoothing 0.1, Adam (0.9, 0.98), warm-up 0/500/4000 then "
    "inverse-square-root decay, 20k steps of 128 pairs, and the SGD arm; each group at its own best "
    "rate (Adam 2.5e-4..2e-3, SGD 2e-4..2.5e-2), five seeds. Default data: gettext; "
    "for IWSLT14 pass --data.source iwslt14.tsv (see the module docstring).",
    "expected_cost": f"{planned_runs(12, 4)} runs of 20k steps x 128 pairs: about 1 GPU-hour each on one H100 "
    "(estimate, not measured)",
    "base": {
        "data": {"source": "gettext", "src_lang": "de", "tgt_lang": "en", "vocab_size": 10000, "seq_len": 128},
        "model": {
            "task": "translation",
            "d_model": 512,
            "n_layers": 6,
            "n_heads": 4,
            "d_ff": 1024,
            "norm": "layernorm",
            "init": "xavier",
            "positions": "sinusoidal",
            "dropout": 0.3,
        },
        "train": {
            **_RECIPE,
            "steps": 20000,
            "batch_size": 128,
            "inv_sqrt_scale": 4000,
            "precision": "bf16",
            "log_every": 50,
            "eval_every": 1000,
            "eval_batches": 32,
            "checkpoint_every": 2000,
        },
    },
    "seeds": PRESET_SEEDS,
    **xiong_arms(_BLOCKS, [0, 500, 4000], XIONG_ADAM_LRS, XIONG_SGD_LRS),
}
