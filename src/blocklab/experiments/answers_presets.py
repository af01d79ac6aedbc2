"""The `warmup-answers` presets: the blocks that answered Xiong et al., beside Xiong's Post-LN and Pre-LN.

Each of them claims to remove Post-LN's need for warm-up or to widen the range of usable learning rates: Admin
(Post-LN with profiled skip weights), T-Fixup (no norm, scaled init, no warm-up), ResiDual (a Post-LN and a
Pre-LN stream together), HybridNorm (norms on q, k, v, Post-LN on the MLP), Derf and DyT (a pointwise function
in place of each norm) and gated attention (a sigmoid gate after SDPA). Every one runs with and without warm-up
at its own best learning rate, so a claim is judged by SPEC 10's trainable range, not by one shared rate.

Two experiments, each in Xiong et al.'s setting (Xavier init, LayerNorm, Adam (0.9, 0.98) without clipping or
weight decay, inverse-square-root decay, 6 layers):
- `clm`: causal LM on the Python standard library, the quick preset's Xiong experiment (d=64, 150 steps,
  warm-up 30 or none, rates 3e-4..3e-2), every answer beside Post-LN and Pre-LN.
- `translation`: the encoder-decoders of the blocks whose papers are translation papers (Admin, T-Fixup,
  ResiDual) beside Post-LN and Pre-LN, 6+6 layers at d=64 on the German-English gettext catalogs (the
  xiong-iwslt preset's recipe at half its width and 300 steps), warm-up 50 or none, rates 3e-4..3e-2 (Pre-LN's
  best sat at the top of the first two grids, which ended at 3e-3 and 1e-2).

T-Fixup's recipe says no warm-up; its group with warm-up sets one anyway, to see whether it matters. Derf, DyT
and the gate modify Pre-LN (their papers' baseline). Each group is tuned on seeds 5 and 6, then run on seeds 0-4
at its best rate: the final seeds never include one its rate was chosen on.
"""

from __future__ import annotations

from blocklab.experiments.protocol import PRESET_SEEDS, planned_runs
from blocklab.experiments.warmup_presets import XIONG_SETTING

# (group name, label, settings): the answers of SPEC 2c, then Xiong's two.
CLM_ANSWERS = [
    ("post-ln", "Post-LN", {"model.block": "post-ln"}),
    ("pre-ln", "Pre-LN", {"model.block": "pre-ln"}),
    ("admin", "Admin", {"model.block": "admin"}),
    ("t-fixup", "T-Fixup", {"model.block": "t-fixup"}),
    ("resi-dual", "ResiDual", {"model.block": "resi-dual"}),
    ("hybridnorm", "HybridNorm", {"model.block": "hybridnorm"}),
    ("derf", "Pre-LN + Derf", {"model.block": "pre-ln", "model.norm": "derf"}),
    ("dyt", "Pre-LN + DyT", {"model.block": "pre-ln", "model.norm": "dyt"}),
    ("gate", "Pre-LN + gate", {"model.block": "pre-ln", "model.attn_gate": True}),
]
TRANSLATION_ANSWERS = [a for a in CLM_ANSWERS if a[0] in ("post-ln", "pre-ln", "admin", "t-fixup", "resi-dual")]

TRANSLATION_SETTING = {
    "data.source": "gettext",
    "data.src_lang": "de",
    "data.tgt_lang": "en",
    "data.vocab_size": 8000,
    "model.task": "translation",
    "model.positions": "sinusoidal",
    "model.dropout": 0.1,
    "train.label_smoothing": 0.1,
    "train.batch_size": 32,
    "train.stall_patience": 100,
}


def answer_runs(exp: str, answers, warmup: int, setting: dict) -> list[dict]:
    """Each answer with `warmup` steps of warm-up and without, in experiment `exp`."""
    return [
        {
            "name": f"{exp}_{name}" + ("" if w else "_wu0"),
            "label": f"{label}, " + (f"warm-up {w}" if w else "no warm-up"),
            **setting,
            **settings,
            "train.warmup_steps": w,
            "experiment": exp,
        }
        for name, label, settings in answers
        for w in (warmup, 0)
    ]


def answers_sweep(name, description, cost, base, clm: dict, translation: dict) -> dict:
    """The sweep: `clm` and `translation` give each experiment's warm-up, rates, steps and sizes (dotted)."""
    experiments, runs = {}, []
    for exp, answers, spec, extra in (
        ("clm", CLM_ANSWERS, clm, {}),
        ("translation", TRANSLATION_ANSWERS, translation, TRANSLATION_SETTING),
    ):
        experiments[exp] = {
            "title": f"{'Causal LM' if exp == 'clm' else 'Translation'}: the answers to Xiong et al., with and "
            "without warm-up, each at its own best rate",
            "target_run": f"{exp}_pre-ln",
            "tune": {"key": "train.lr", "values": spec["lrs"], "seeds": [5, 6]},
        }
        runs += answer_runs(exp, answers, spec["warmup"], {**XIONG_SETTING, **extra, **spec["settings"]})
    return {
        "name": name,
        "description": description,
        "expected_cost": cost,
        "seeds": PRESET_SEEDS,
        "base": base,
        "experiments": experiments,
        "runs": runs,
    }


WARMUP_ANSWERS = answers_sweep(
    "warmup-answers",
    "The answers to Xiong et al. (Admin, T-Fixup, ResiDual, HybridNorm, Derf, DyT, gated attention) beside Post-LN "
    "and Pre-LN, with and without warm-up, in Xiong et al.'s setting (Xavier, LayerNorm, Adam, inverse-square-root "
    "decay, 6 layers): causal LM on the stdlib corpus (d=64, 150 steps, warm-up 30, lr 3e-4..3e-2) and "
    "translation on the gettext catalogs (Admin, T-Fixup, ResiDual, Post-LN and Pre-LN encoder-decoders, 6+6 "
    "layers, d=64, 300 steps, warm-up 50, lr 3e-4..3e-2); each group at its own best rate, five seeds there.",
    f"{planned_runs(18, 5)} causal-LM runs of 150 steps and {planned_runs(10, 5)} translation runs of 300 steps "
    "(stalled translation runs end early): about 4 hours on 2 CPU cores (the quick preset's measured runs for the "
    "first; a translation run takes 1.5 to 2 minutes)",
    {
        "data": {"source": "stdlib", "vocab_size": 1024, "seq_len": 64},
        "model": {"d_model": 64, "n_heads": 4, "d_ff": 256},
        "train": {
            "steps": 150,
            "batch_size": 16,
            "log_every": 5,
            "eval_every": 150,
            "eval_batches": 32,
            "checkpoint_every": 300,
        },
    },
    clm={
        "warmup": 30,
        "lrs": [3e-4, 1e-3, 3e-3, 1e-2, 3e-2],
        # no stall rule: at 150 steps runs leave the plateau late (ResiDual stalled at 1e-3 between two rates
        # that trained, on the first run of this preset)
        "settings": {"train.inv_sqrt_scale": 30, "train.stall_patience": 0},
    },
    translation={
        "warmup": 50,
        "lrs": [3e-4, 1e-3, 3e-3, 1e-2, 3e-2],
        "settings": {
            "train.steps": 300,
            "train.inv_sqrt_scale": 150,
            "train.eval_every": 300,
            # 64 batches: at 4 the eval set's own noise (0.043, paired) was 1.5 times the spread over seeds
            "train.eval_batches": 64,
            "data.seq_len": 64,
        },
    },
)

# The same two experiments at GPU size, for one 10-minute script on one H100 with --jobs 8: causal LM at d=256,
# 12 layers, T=128, batch 32, 500 steps, vocabulary 8192 on the stdlib corpus; translation at d=256, 6+6 layers,
# batch 64, 500 steps. fp32 (no compile): the CPU preset's numerics where depth and width matter more.
WARMUP_ANSWERS_GPU = answers_sweep(
    "warmup-answers-gpu",
    "warmup-answers at GPU size: causal LM at d=256, 12 layers, T=128, batch 32, 500 steps (warm-up 50, lr "
    "1e-4..1e-2) and translation at d=256, 6+6 layers, batch 64, 500 steps (warm-up 50, lr 1e-4..3e-3); the "
    "same groups, each at its own best rate, five seeds there.",
    f"{planned_runs(18, 5) + planned_runs(10, 4)} runs of 500 steps: about 20 minutes on one H100 with --jobs 8 (an "
    "estimate scaled by the FLOP count from the stream-gpu preset's 48 runs of 1000 steps at d=512, 7 minutes; not "
    "a measurement)",
    {
        "data": {"source": "stdlib", "vocab_size": 8192, "seq_len": 128},
        "model": {"d_model": 256, "n_heads": 4, "d_ff": 1024},
        "train": {
            "steps": 500,
            "batch_size": 32,
            "log_every": 10,
            "eval_every": 250,
            "eval_batches": 16,
            "checkpoint_every": 500,
        },
    },
    clm={
        "warmup": 50,
        "lrs": [1e-4, 3e-4, 1e-3, 3e-3, 1e-2],
        "settings": {"model.n_layers": 12, "train.inv_sqrt_scale": 50, "train.stall_patience": 150},
    },
    translation={
        "warmup": 50,
        "lrs": [1e-4, 3e-4, 1e-3, 3e-3],
        "settings": {"train.batch_size": 64, "train.inv_sqrt_scale": 250, "train.eval_batches": 32},
    },
)
