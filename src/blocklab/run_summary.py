"""A run's summary.json as a typed record: one writer (`write_summary`) and one reader (`read_summary`).

Every field is declared once here, with its meaning; docs/run-folder.md's table lists the same fields (a test keeps
the two in step). Reading is tolerant: a field an older blocklab did not write reads as None, and a field this
blocklab does not know is kept in `extra` and written back unchanged, so committed results stay readable.
No torch here: the reports and the sweeps read summaries without it.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from blocklab.atomic import write_atomic

FILE = "summary.json"


def _f(meaning: str, always: bool = False) -> Any:
    """A field of the record: `always` ones are written by every run (None as null); the others only where a
    run has them (a task's, a stop rule's, a launcher's)."""
    return field(default=None, metadata={"meaning": meaning, "always": always})


@dataclass
class RunSummary:
    status: str = field(default="missing", metadata={"meaning": "how the run ended", "always": True})
    step: int | None = _f("updates done; for a diverged run the last good one", True)
    steps: int | None = _f("train.steps, the updates asked for", True)
    block: str | None = _f("model.block", True)
    task: str | None = _f("model.task", True)
    recipe: dict | None = _f("the block recipe's settings applied to this run", True)
    n_params: int | None = _f("the model's parameters, a tied embedding counted once", True)
    initial_loss: float | None = _f("the first update's training loss (nats)", True)
    final_loss: float | None = _f("the last update's training loss (nats)", True)
    final_eval_loss: float | None = _f("the last evaluation's eval_loss (nats)", True)
    final_eval_se: float | None = _f("its standard error over the evaluation batches", True)
    final_eval_batches: dict | None = _f("the last evaluation per batch: loss and tokens", True)
    best_eval_loss: float | None = _f("the lowest eval_loss of the run", True)
    tokens: int | None = _f("training tokens consumed, all processes together", True)
    wall_time_s: float | None = _f("wall clock of the training loop, summed over resumes", True)
    world_size: int | None = _f("processes", True)
    device: str | None = _f("process 0's device", True)
    precision: str | None = _f("train.precision", True)
    compile: bool | None = _f("whether the blocks were compiled", True)
    attn_impl: str | None = _f("the attention path the model actually ran", True)
    parallel: str | None = _f("ddp or fsdp, else null", True)
    grad_accum: int | None = _f("micro-batches per process and update", True)
    threads: int | None = _f("the run's torch threads", True)
    peak_memory_mb: float | None = _f("the largest peak memory over processes", True)
    machine: dict | None = _f("cpu, cpu_count, torch, python (and gpu): where the run trained", True)
    tokens_per_s: float | None = _f("steady-state training tokens per second", True)
    mfu: float | None = _f("tokens_per_s times flops_per_token over peak_flops_per_s", True)
    flops_per_token: float | None = _f("training FLOPs per token", True)
    peak_flops_per_s: float | None = _f("the devices' peak FLOP rate", True)
    compile_s: float | None = _f("the first steps' excess over the steady step time, when compiling", True)
    startup_s: float | None = _f("the same excess, compiled or not", True)
    steady_steps: int | None = _f("the steps tokens_per_s is measured on", True)
    # Where a task or a stop rule has them.
    final_bleu: float | None = _f("translation: the last evaluation's BLEU")
    best_bleu: float | None = _f("translation: the best evaluation's BLEU")
    final_score: float | None = _f("classification: the last validation score, in percent")
    best_score: float | None = _f("classification: the best validation score, in percent")
    init_from: str | None = _f("classification: the mlm run the encoder came from")
    init_step: int | None = _f("classification: that run's checkpoint step")
    task_name: str | None = _f("classification: the task's name")
    metric: str | None = _f("classification: its GLUE metric")
    n_labels: int | None = _f("classification: labels (1: regression)")
    label_names: list | None = _f("classification: the labels' names (null: regression)")
    n_train: int | None = _f("classification: training examples")
    n_val: int | None = _f("classification: validation examples")
    label_counts: str | None = _f("classification: the label balance, as text")
    majority_baseline: float | None = _f("classification: the majority class's score")
    dropped: int | None = _f("classification: examples left out")
    truncated: int | None = _f("classification: examples cut to max_seq_len")
    unigram_eval_loss: float | None = _f("language models: the unigram model's validation loss (a sweep's cap)")
    unigram_entropy: float | None = _f("the training split's unigram entropy (nats)")
    stalled_step: int | None = _f("a stalled run: the step the rule held at")
    stall_margin: float | None = _f("a stalled run: the rule's margin")
    stall_patience: int | None = _f("a stalled run: the rule's patience")
    diverged_step: int | None = _f("a diverged run: the first bad step")
    diverged_loss: float | None = _f("a diverged run: that step's loss")
    launcher: str | None = _f("a sweep's runs: local or ray")
    host: str | None = _f("a sweep's runs: the machine's host name")
    ray_node_id: str | None = _f("a sweep's runs under Ray: the node's id")
    concurrent_runs: int | None = _f("a sweep's runs: how many runs shared the machine")
    # Fields this blocklab does not know (another version wrote them): kept and written back.
    extra: dict = field(default_factory=dict, metadata={"meaning": "", "always": False})
    # The optional fields the file had (or a writer set), so that writing back keeps a null one.
    present: frozenset = field(default=frozenset(), repr=False, compare=False, metadata={"always": False})

    @classmethod
    def from_dict(cls, data: dict) -> RunSummary:
        known = {f.name for f in FIELDS}
        return cls(
            **{k: v for k, v in data.items() if k in known},
            extra={k: v for k, v in data.items() if k not in known},
            present=frozenset(k for k in data if k in known),
        )

    def to_dict(self) -> dict:
        """The JSON object of summary.json: every always-written field, the others where set or read."""
        out = {}
        for f in FIELDS:
            value = getattr(self, f.name)
            if f.metadata["always"] or value is not None or f.name in self.present:
                out[f.name] = value
        out.update(self.extra)
        return out

    def with_fields(self, **values) -> RunSummary:
        """A copy with `values` set (each kept in the file even when None)."""
        return dataclasses.replace(self, **values, present=self.present | set(values))

    def has(self, name: str) -> bool:
        """Whether the run wrote field `name` (a task's field can be null: a translation run's BLEU before any)."""
        return name in self.present or getattr(self, name, None) is not None


FIELDS = tuple(f for f in dataclasses.fields(RunSummary) if f.name not in ("extra", "present"))


def summary_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / FILE


def read_summary(run_dir: str | Path) -> RunSummary | None:
    """RUN_DIR/summary.json, or None where there is none or it cannot be read (a run still going, or killed)."""
    try:
        data = json.loads(summary_path(run_dir).read_text())
    except (OSError, ValueError):
        return None
    return RunSummary.from_dict(data) if isinstance(data, dict) else None


def write_summary(run_dir: str | Path, summary: RunSummary) -> Path:
    """Write RUN_DIR/summary.json atomically (a reader sees the old file or the new one)."""
    return write_atomic(summary_path(run_dir), json.dumps(summary.to_dict(), indent=2) + "\n")
