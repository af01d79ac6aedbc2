"""The model card (README.md) of an exported folder: what the model is, what it scored (the metric, its unit and
the data it was measured on), what it was trained on and how, and how to load it. An export may be published,
so the card names local files and folders by their own name, never by their path on this machine."""

from __future__ import annotations

import math
from pathlib import Path

from blocklab.hf.modeling import HF_CLASSES
from blocklab.run_summary import RunSummary
from blocklab.training.config import RunConfig

WHAT = {"clm": "causal language model", "mlm": "masked language model", "classification": "sequence classifier"}
CORPORA = {
    "stdlib": "the Python standard library's source (blocklab's embedded corpus)",
    "python": "every Python file of the training environment (standard library and installed packages)",
    "gettext": "the system's gettext message catalogs",
}


def public_name(value) -> str:
    """A setting as the card may show it: a local path by its last component only (a hub name such as
    `hf:nyu-mll/glue` as it is)."""
    text = str(value)
    if text.startswith("hf:"):
        rest = text[3:]
        local = Path(rest).is_absolute() or rest.startswith(("~", "."))
        return "hf:" + (Path(rest).name if local else rest)
    return Path(text).name if "/" in text or "\\" in text else text


def data_text(source: str) -> str:
    if source in CORPORA:
        return CORPORA[source]
    if source.startswith("hf:"):
        return f"the Hugging Face dataset `{public_name(source)[3:]}`"
    return f"the local data `{public_name(source)}`"


def score_lines(task: str, summary: RunSummary | None, val_fraction: float) -> list[str]:
    """What the run scored on its held-out data, with the metric and its unit; [] when the run has no summary."""
    if summary is None:
        return []
    step = summary.step
    if task == "classification":
        score, metric = summary.final_score, summary.metric
        if not _number(score) or not metric:
            return []
        line = (
            f"- **{metric}** on the validation split of `{public_name(summary.task_name or 'the task')}`: "
            f"**{score:.2f}** (percent, as GLUE reports it) after step {step}"
        )
        base = summary.majority_baseline
        return [line + (f"; always answering the most frequent label scores {base:.2f}." if _number(base) else ".")]
    loss = summary.final_eval_loss
    if not _number(loss):
        return []
    what = "masked positions" if task == "mlm" else "next tokens"
    return [
        f"- **validation loss** (mean cross-entropy of the {what}, in nats per token) after step {step}: "
        f"**{loss:.4f}** (perplexity {math.exp(loss):.2f}), on the {val_fraction:.0%} of the documents held out "
        "from training."
    ]


def model_card(info: dict, cfg: RunConfig, summary: RunSummary | None, config) -> str:
    task, m, d, t = info["task"], cfg.model, cfg.data, cfg.train
    auto = HF_CLASSES[task].auto
    labels = ""
    if task == "classification" and getattr(config, "id2label", None):
        labels = f" over the labels {', '.join(f'`{v}`' for v in config.id2label.values())}"
    training = [
        f"- {t.steps} optimizer steps of {t.batch_size} sequences of {d.seq_len} tokens ({t.optimizer}, peak "
        f"learning rate {t.lr:g}, {t.schedule} schedule after {t.warmup_steps} warm-up steps, weight decay "
        f"{t.weight_decay:g}, {t.precision}, seed {t.seed})",
        f"- data: {data_text(d.source)}; a {d.vocab_size}-token byte-level BPE tokenizer trained on it",
    ]
    if t.init_from:
        training.append(f"- the encoder starts from the masked language model `{public_name(t.init_from)}`")
    lines = [
        "---",
        "library_name: transformers",
        "tags: [blocklab]",
        "---",
        f"# blocklab {info['block']} {WHAT[task]}",
        "",
        f"A {info['n_params']:,}-parameter {WHAT[task]}{labels}: {m.n_layers} `{m.block}` blocks of width "
        f"{m.d_model} ({m.n_heads} heads, MLP {m.d_ff}), context {m.max_seq_len} tokens. Exported by "
        f"`blocklab export` from the run `{info['run']}` at step {info['step']} (blocklab {info['blocklab_version']}).",
        "",
        "## Result",
        "",
        *(score_lines(task, summary, d.val_fraction) or ["- the run has no summary.json: no score recorded."]),
        "",
        "## Training",
        "",
        *training,
        "",
        "The whole model config is in config.json under `blocklab`; every training setting is in the run's own",
        "config.toml (not part of this folder).",
        "",
        "## Use",
        "",
        "The folder carries the model's code (blocklab's own modules, generated from the package), so it needs",
        "`torch` and `transformers` (4.57 to 5.x) only:",
        "",
        "```python",
        f"from transformers import {auto}, PreTrainedTokenizerFast",
        f'model = {auto}.from_pretrained("PATH", trust_remote_code=True)',
        'tokenizer = PreTrainedTokenizerFast.from_pretrained("PATH")  # transformers\' own class: no code to run',
        "```",
        "",
        "With blocklab installed, `import blocklab.hf` registers the classes and `trust_remote_code` is not needed.",
        "",
    ]
    return "\n".join(lines)


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
