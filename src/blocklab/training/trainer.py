"""The training loop: one run directory, exact resume, divergence detection, signals, DDP."""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import signal
import statistics
import time
from pathlib import Path

import torch

from blocklab.atomic import write_atomic
from blocklab.attention.modules import attention_path
from blocklab.errors import UserError
from blocklab.model import count_parameters
from blocklab.probes.grads import layer_grad_norms
from blocklab.training import distributed, parallel
from blocklab.training.checkpoint import (
    has_checkpoint,
    numerics,
    open_checkpoint,
    read_weights,
    restore_rng,
    save_checkpoint,
)
from blocklab.training.config import RunConfig, compiles, config_differences, describe_recipe, load_config, to_toml
from blocklab.training.logger import MetricsLogger, grad_values
from blocklab.training.optim import lr_factor, make_optimizer, set_lr
from blocklab.training.sharded import load_sharded, open_sharded, save_sharded
from blocklab.training.stall import stall_detector
from blocklab.training.tasks import get_task
from blocklab.training.throughput import Throughput, flops_per_token, peak_for, peak_memory_mb

RUN_FILES = ("config.toml", "metrics.jsonl", "summary.json", "tokenizer.json", "checkpoints", "tb")
# Fields that may change when resuming: how long to train, how often to log, how to fit the batch in
# memory and whether to stop stalled runs, not what to train. train.parallel fixes the checkpoint format.
RESUMABLE_CHANGES = {
    ("train", k)
    for k in (
        "steps",
        "log_every",
        "eval_every",
        "checkpoint_every",
        "eval_batches",
        "grad_accum",
        "activation_checkpointing",
        "stall_patience",
        "stall_margin",
    )
}


def prepare_run_dir(cfg: RunConfig, out: Path, resume: bool, overwrite: bool) -> None:
    if resume and overwrite:
        raise UserError("--resume and --overwrite exclude each other")
    if (out / "config.toml").is_file():
        if overwrite:
            for name in RUN_FILES:
                p = out / name
                shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
        elif resume:
            for key, old, value in config_differences(load_config(out / "config.toml"), cfg, RESUMABLE_CHANGES)[:1]:
                raise UserError(
                    f"{out} holds a run with {key}={old!r}, not {value!r}; "
                    f"resume with the same config or pass --overwrite"
                )
        else:
            raise UserError(f"{out} already holds a run; pass --resume to continue it or --overwrite to replace it")
    elif resume:
        raise UserError(f"nothing to resume: {out} holds no blocklab run")
    elif out.exists() and any(out.iterdir()):
        raise UserError(f"{out} is not empty and holds no blocklab run; choose another --out")


class Trainer:
    """The loop of every task; what is particular to a task is its `Task` (training/tasks/)."""

    def __init__(
        self,
        cfg: RunConfig,
        out: Path,
        resume: bool = False,
        overwrite: bool = False,
        progress: bool | None = None,
        log=print,
    ):
        self.cfg, self.out, self.log = cfg, Path(out), log
        self.dist = distributed.setup(cfg.train.device)
        if self.dist.main:
            prepare_run_dir(cfg, self.out, resume, overwrite)
            self.out.mkdir(parents=True, exist_ok=True)
        self.resume = resume
        self.progress = progress
        t, dev = cfg.train, self.dist.device
        if t.precision == "fp16" and dev.type == "cpu":
            raise UserError("train.precision=fp16 is not supported on CPU (too slow and unstable); use bf16 or fp32")
        self.task = get_task(cfg)
        quiet = log if self.dist.main else (lambda *a, **k: None)
        self.data = self.task.prepare(quiet)
        if self.data.vocab_size > cfg.model.vocab_size:
            raise UserError(
                f"the tokenizer has {self.data.vocab_size} tokens but model.vocab_size="
                f"{cfg.model.vocab_size}; raise model.vocab_size"
            )
        self.batches = self.task.batches(self.data, quiet)
        world = self.dist.world_size
        if t.batch_size % (world * t.grad_accum):
            raise UserError(
                f"train.batch_size={t.batch_size} does not split into {world} process(es) x "
                f"train.grad_accum={t.grad_accum} equal micro-batches"
            )
        torch.manual_seed(t.seed)
        self.model = self.task.build_model()
        if not (t.parallel == "fsdp" and self.dist.enabled):
            self.model = self.model.to(dev)  # FSDP moves each unit to the device as it shards it, one at a time
        if t.activation_checkpointing:
            parallel.checkpoint_activations(self.model)
        self.compiled = compiles(t, dev.type)
        if self.compiled:
            self.task.compile(self.model)
        # The fsdp format holds the scalar gains as 1-element vectors, in one process as in several.
        self.scalar_params = parallel.scalars_as_vectors(self.model) if t.parallel == "fsdp" else []
        self.forward = parallel.wrap(self.model, self.dist, t.parallel, t.precision)
        self.sharded = parallel.is_sharded(self.model)  # FSDP: every process takes part in norms and saves
        self.optimizer = make_optimizer(self.model, t)
        self.scaler = torch.amp.GradScaler("cuda", enabled=t.precision == "fp16")
        self.grad_norms: dict[str, float] | None = None  # the last step's, on the steps that measure them
        self._count_checked = False  # Task.loss_count against Task.loss, on the first step
        # The block recipe's applied values travel in the checkpoint's run state: a resumed run loads its
        # stored config, which already holds them, so nothing is applied then, yet the run still follows them.
        self.state = {
            "step": 0,
            "initial_loss": None,
            "tokens": 0,
            "train_seconds": 0.0,
            "wall_seconds": 0.0,
            "best_eval_loss": None,
            "last_eval_loss": None,
            "last_loss": None,
            "recipe": dict(cfg.recipe),
            **self.task.initial_state(),
        }
        flops = flops_per_token(self.model, cfg.data.seq_len, self.task.attention_layers(self.model))
        # MFU of the whole job: the global batch's tokens/s against the peak of every process's device.
        self.throughput = Throughput(self.state, self.compiled, flops, lambda: world * peak_for(dev, t.precision))

    def compute_dtype(self) -> torch.dtype:
        """The dtype the attention inputs have under this run's autocast."""
        return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.cfg.train.precision, torch.float32)

    def autocast(self):
        p, dev = self.cfg.train.precision, self.dist.device.type
        if p == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(dev, dtype=torch.bfloat16 if p == "bf16" else torch.float16)

    def loss_terms(self, batch, model):
        """Summed token loss and the global token count, so that DDP's gradient average equals the
        gradient of the global-batch mean even when ranks hold different numbers of masked tokens."""
        return self.task.loss(model, batch, self.dist.device, self.autocast)

    @torch.no_grad()
    def evaluate(self) -> float:
        """The mean loss over the evaluation batches, each taken in pieces of a training micro-batch's
        rows: what fits training fits evaluation (every process computes all of it)."""
        self.model.eval()
        total, count, means = 0.0, 0, []
        rows = self.cfg.train.batch_size // (self.dist.world_size * self.cfg.train.grad_accum)
        for batch in self.batches.val.val_batches(self.cfg.train.eval_batches):
            b_total, b_count = 0.0, 0
            for part in parallel.pieces(batch, rows):
                s, n = self.loss_terms(part, self.model)
                b_total, b_count = b_total + s.item(), b_count + n.item()
            total, count = total + b_total, count + b_count
            means.append(b_total / max(b_count, 1))
        self.model.train()
        # The eval loss's own noise (its standard error over the evaluation batches): a sweep's verdicts
        # compare it with the spread over seeds, which it must stay well below.
        self.state["last_eval_se"] = statistics.stdev(means) / math.sqrt(len(means)) if len(means) > 1 else None
        return total / max(count, 1)

    def train_step(self, step: int) -> float:
        t = self.cfg.train
        set_lr(self.optimizer, t.lr * lr_factor(step, t))
        batch = self.batches.train.get(step, self.dist.rank, self.dist.world_size)
        micro = parallel.micro_batches(batch, t.grad_accum)
        # The global count of loss terms comes first, so that every micro-batch's backward already has
        # its share of the global-batch mean: k micro-batches sum to the gradient of the unsplit batch.
        n_local = sum(self.task.loss_count(b) for b in micro).to(self.dist.device)
        n_global = self.dist.sum(n_local).clamp_min(1)
        total, counted = 0.0, 0
        for i, part in enumerate(micro):
            with parallel.gradient_sync(self.forward, sync=i == len(micro) - 1):
                loss_sum, n = self.loss_terms(part, self.forward)
                self.scaler.scale(loss_sum / n_global * self.dist.world_size).backward()
            total, counted = total + loss_sum.detach(), counted + n
        if not self._count_checked:  # a task's two counts must agree, or every loss is off by their ratio
            if int(counted) != int(n_local):
                raise RuntimeError(
                    f"{type(self.task).__name__}.loss_count gives {int(n_local)} loss terms for a batch "
                    f"whose loss has {int(counted)}"
                )
            self._count_checked = True
        # Per-layer gradient norms on the steps that get a row only (nothing on the others): unscaled, so
        # true gradients, and before clipping. One unscale_: scaler.step skips it once done here, and
        # it is a no-op without fp16, so the update is the same bit for bit. Under DDP the gradients
        # are already averaged over the ranks: rank 0's norms are the global ones; FSDP's are
        # gathered from every process's shards (all of them compute).
        measure = (self.dist.main or self.sharded) and self.measures_grads(step + 1)
        if t.grad_clip > 0 or measure:
            self.scaler.unscale_(self.optimizer)
        self.grad_norms = layer_grad_norms(self.model) if measure else None
        if t.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), t.grad_clip)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.model.after_optimizer_step()  # nGPT puts its matrices back on the unit sphere
        self.optimizer.zero_grad(set_to_none=True)
        return (self.dist.sum(total) / n_global).item()

    def logs_step(self, done: int) -> bool:
        """Whether the step that makes update number `done` (1-based) gets a training row."""
        t = self.cfg.train
        return done % t.log_every == 0 or done == t.steps

    def measures_grads(self, done: int) -> bool:
        """The logged steps, and step 1: its gradient is taken at the initial weights (before any
        update), the "init" of the gradient-norm figure (reporting/gradnorms.py). When step 1 is not
        a logged step it gets a row of its own holding only `step` and the `grad/` keys."""
        return done == 1 or self.logs_step(done)

    def _restore(self) -> int:
        ckpt_root = self.out / "checkpoints"
        if not has_checkpoint(ckpt_root):
            self.log(f"warning: {self.out} has no checkpoint yet; starting from step 0")
            return 0
        want = "dcp" if self.cfg.train.parallel == "fsdp" else "safetensors"
        ckpt = open_sharded(ckpt_root, self.dist) if want == "dcp" else open_checkpoint(ckpt_root)
        if ckpt["format"] != want:
            raise UserError(
                f"checkpoint {ckpt['path']} is {ckpt['format']} but a train.parallel="
                f"{self.cfg.train.parallel} run reads {want} checkpoints"
            )
        try:
            if want == "dcp":
                load_sharded(ckpt["path"], self.model, self.optimizer, self.dist)
            else:
                ckpt = read_weights(ckpt)
                self.model.load_state_dict(ckpt["model"])
                self.optimizer.load_state_dict(ckpt["optimizer"])
        except (RuntimeError, ValueError, KeyError) as e:
            raise UserError(f"checkpoint {ckpt['path']} does not fit this model: {str(e).splitlines()[0]}") from None
        restore_rng(ckpt)
        saved, now = ckpt["meta"].get("numerics"), numerics()
        if saved and saved != now and self.dist.device.type == "cpu" and self.dist.main:
            changed = ", ".join(f"{k} {saved.get(k)!r} -> {v!r}" for k, v in now.items() if saved.get(k) != v)
            self.log(
                f"warning: resuming with {changed}: the losses may differ from an uninterrupted run's in the "
                "last digits (a bit-exact resume needs the same torch build, CPU type, thread count and MKL_CBWR)"
            )
        self.state.update(ckpt["extra"])
        return ckpt["step"]

    def save(self, step: int) -> None:
        root, state, keep = self.out / "checkpoints", dict(self.state, step=step), self.cfg.train.keep_checkpoints
        if self.cfg.train.parallel == "fsdp":  # sharded, by every process (in one process too: one format)
            save_sharded(root, step, self.model, self.optimizer, state, keep, self.dist, self.scalar_params)
        elif self.dist.main:
            save_checkpoint(root, step, self.model, self.optimizer, state, keep)

    def summary(self, status: str, step: int, extra: dict | None = None) -> dict:
        s, t = self.state, self.cfg.train
        out = {
            "status": status,
            "step": step,
            "steps": t.steps,
            "block": self.cfg.model.block,
            "task": self.cfg.model.task,
            "recipe": dict(s.get("recipe") or {}),
            "n_params": count_parameters(self.model),
            "initial_loss": s["initial_loss"],
            "final_loss": s["last_loss"],
            "final_eval_loss": s["last_eval_loss"],
            "final_eval_se": s.get("last_eval_se"),
            "best_eval_loss": s["best_eval_loss"],
            "tokens": s["tokens"],
            "wall_time_s": s["wall_seconds"],
            "world_size": self.dist.world_size,
            "device": str(self.dist.device),
            "precision": t.precision,
            "compile": self.compiled,
            "attn_impl": attention_path(self.model, self.dist.device, self.compute_dtype()),
            "parallel": t.parallel if self.dist.enabled or t.parallel == "fsdp" else None,
            "grad_accum": t.grad_accum,
            "peak_memory_mb": self.dist.max(peak_memory_mb(self.dist.device)),
        }
        out.update(self.throughput.summary())  # steady-state tokens_per_s, compile_s, mfu
        out.update(self.task.summary_fields(s))
        if hasattr(self.data, "unigram_eval_loss"):  # language-model corpora: the score of a failed run
            out["unigram_eval_loss"] = self.data.unigram_eval_loss
        out.update(extra or {})
        if self.dist.main:
            write_atomic(self.out / "summary.json", json.dumps(out, indent=2) + "\n")
        return out

    def run(self) -> dict:
        try:
            return self._run()
        finally:
            self.dist.close()

    def _run(self) -> dict:
        t = self.cfg.train
        start = self._restore() if self.resume else 0
        if self.dist.main:
            write_atomic(self.out / "config.toml", to_toml(self.cfg))
            self.data.tokenizer.save(str(self.out / "tokenizer.json"))
            if self.state["recipe"]:
                self.log(describe_recipe(self.cfg.model.block, self.state["recipe"]))
        stall = stall_detector(t, self.data.unigram_entropy, self.state)
        if self.state.get("stalled_step") is not None and stall.stalled():
            # The uninterrupted run stopped here: resuming makes the same decision, not one more step.
            if self.dist.main:
                self.log(f"this run stalled at step {start}; nothing to resume (--train.stall_patience 0 trains on)")
            return self.summary("stalled", start, stall.summary(self.state["stalled_step"]))
        if start >= t.steps:
            return self.summary("completed", start)
        if self.dist.main:
            self.log(
                f"attention path: {attention_path(self.model, self.dist.device, self.compute_dtype())} "
                f"(attn_impl={self.cfg.model.attn_impl!r} on {self.dist.device.type})"
            )
        logger = MetricsLogger(self.out, start, t.steps, self.state["train_seconds"], self.dist.main, self.progress)
        stop = _SignalFlag()
        tokens_per_step = self.batches.train.tokens_per_step
        window, step, status, extra = [], start, "completed", {}
        self.state["stalled_step"] = None
        wall0 = time.perf_counter() - self.state["wall_seconds"]
        self.model.train()
        try:
            with stop:
                for step in range(start, t.steps):
                    t0 = time.perf_counter()
                    loss = self.train_step(step)
                    dt = time.perf_counter() - t0
                    self.state["train_seconds"] += dt
                    self.throughput.step(dt, tokens_per_step)
                    self.state["tokens"] += tokens_per_step
                    if self.state["initial_loss"] is None:
                        self.state["initial_loss"] = loss
                    if not math.isfinite(loss) or loss > t.divergence_factor * self.state["initial_loss"]:
                        status, extra = "diverged", {"diverged_step": step + 1, "diverged_loss": loss}
                        self.log(
                            f"diverged at step {step + 1}: loss {loss:.4g} "
                            f"(initial {self.state['initial_loss']:.4g}); the last good checkpoint is kept"
                        )
                        break
                    window.append(loss)
                    done = step + 1
                    self.state["last_loss"] = loss
                    self.state["wall_seconds"] = time.perf_counter() - wall0
                    row = None
                    if self.logs_step(done):
                        row = logger.train_row(
                            done,
                            sum(window) / len(window),
                            self.optimizer.param_groups[0]["lr"],
                            self.state,
                            len(window) * tokens_per_step,
                            self.model,
                        )
                        row["mfu"] = self.throughput.mfu(row["tokens_per_s"])
                        window = []
                    if self.grad_norms is not None:
                        row = dict(row or {"step": done}, **grad_values(self.grad_norms))
                    if done % t.eval_every == 0 or done == t.steps:
                        ev = self.evaluate()
                        best = self.state["best_eval_loss"]
                        self.state.update(last_eval_loss=ev, best_eval_loss=ev if best is None else min(best, ev))
                        row = dict(row or {"step": done}, eval_loss=ev)
                        # At the run's precision, as training: a compiled block would otherwise recompile
                        # for autocast off (on an H100 a fine-tuning run hit dynamo's recompile limit).
                        with self.autocast():
                            row.update(
                                self.task.evaluate(
                                    self.model, self.data, self.batches.val, self.dist.device, self.state
                                )
                            )
                    if row is not None:
                        logger.write(row)
                    logger.advance()
                    if self.dist.sum(torch.tensor(float(stop.raised), device=self.dist.device)).item() > 0:
                        status = "interrupted"
                        self.save(done)
                        self.log(f"interrupted at step {done}; checkpoint saved, resume with --resume")
                        step = done
                        break
                    if stall.update(done, loss):
                        status, extra = "stalled", stall.summary(done)
                        self.state["stalled_step"] = done
                        self.save(done)
                        self.log(
                            f"stalled at step {done}: the loss has stayed within {t.stall_margin:g} of the "
                            f"unigram entropy {stall.entropy:.4g} for {t.stall_patience} steps; checkpoint kept"
                        )
                        step = done
                        break
                    if done % t.checkpoint_every == 0 or done == t.steps:
                        self.save(done)
                    step = done
        finally:
            logger.close()
        self.state["wall_seconds"] = time.perf_counter() - wall0
        return self.summary(status, step, {**stall.summary(), **extra})


class _SignalFlag:
    """Turn the first SIGINT/SIGTERM into a flag the loop checks; a second SIGINT interrupts at once."""

    def __init__(self):
        self.raised = False
        self._old = {}

    def _handle(self, signum, frame):
        if self.raised and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.raised = True

    def __enter__(self):
        with contextlib.suppress(ValueError):  # not the main thread: leave signals alone
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)


def train(
    cfg: RunConfig,
    out: str | Path,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool | None = None,
    log=print,
) -> dict:
    """Train one run into `out`; returns the summary (also written to summary.json)."""
    return Trainer(cfg, Path(out), resume, overwrite, progress, log).run()
