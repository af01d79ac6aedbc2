"""The training loop: one run directory, exact resume, divergence detection, signals, DDP.

What the loop is made of lives beside it: the step and the evaluation (loop.py), the run directory and
what a resume may change (rundir.py), checkpoint reads and writes (saving.py), the stopping rules
(stopping.py, stall.py) and the metrics rows (logger.py)."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import torch

from blocklab.atomic import write_atomic
from blocklab.attention.modules import attention_path
from blocklab.bench.machine import run_machine
from blocklab.errors import UserError
from blocklab.model import count_parameters
from blocklab.model.checkpointing import checkpoint_activations
from blocklab.run_summary import RunSummary, write_summary
from blocklab.training import distributed, materialise, parallel
from blocklab.training.config import RunConfig, compiles, to_toml
from blocklab.training.logger import MetricsLogger, grad_values
from blocklab.training.loop import StepMixin
from blocklab.training.optim import make_optimizer
from blocklab.training.qk_clip import QKClip
from blocklab.training.recipe import describe_recipe
from blocklab.training.rundir import RESUMABLE_CHANGES, RUN_FILES, discard_run, prepare_run_dir
from blocklab.training.saving import restore_latest, write_checkpoint
from blocklab.training.stall import stall_detector
from blocklab.training.stopping import SignalFlag, diverged, divergence_message, interrupted, stall_message
from blocklab.training.tasks import get_task
from blocklab.training.threads import run_threads
from blocklab.training.throughput import Throughput, flops_per_token, peak_for, peak_memory_mb
from blocklab.training.trackers import RUN_ARTIFACTS, open_trackers, require

__all__ = ["RESUMABLE_CHANGES", "RUN_FILES", "Trainer", "prepare_run_dir", "train"]


class Trainer(StepMixin):
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
        require(cfg.train)  # a tracker's missing package is said now, not after the training
        if self.dist.main:
            prepare_run_dir(cfg, self.out, resume, overwrite)  # before the data: a refusal costs nothing
        self.resume = resume
        self.progress = progress
        t, dev = cfg.train, self.dist.device
        torch.set_num_threads(run_threads(t.threads, cfg.model))  # train.threads; 0: auto (training/threads.py)
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
        fsdp = t.parallel == "fsdp" and self.dist.enabled
        # FSDP: the blocks stay on the meta device until each is sharded, with the one-process build's values
        # (training/materialise.py); a fine-tuning run reads the whole pre-trained checkpoint anyway.
        self.model = materialise.build(self.task.build_model) if fsdp and not t.init_from else self.task.build_model()
        if not fsdp:
            self.model = self.model.to(dev)  # FSDP moves each unit to the device as it shards it, one at a time
        if t.activation_checkpointing:
            checkpoint_activations(self.model)
        self.compiled = compiles(t, dev.type)
        if self.compiled:
            self.task.compile(self.model)
        # The fsdp format holds the scalar gains as 1-element vectors, in one process as in several.
        self.scalar_params = parallel.scalars_as_vectors(self.model) if t.parallel == "fsdp" else []
        self.forward = parallel.wrap(self.model, self.dist, t.parallel, t.precision, t.fsdp_grad_sync)
        self.sharded = parallel.is_sharded(self.model)  # FSDP: every process takes part in norms and saves
        self.optimizer = make_optimizer(self.model, t)
        self.qk_clip = QKClip(self.model, t.qk_clip, self.dist, cfg.model.block) if t.qk_clip is not None else None
        self.scaler = torch.amp.GradScaler("cuda", enabled=t.precision == "fp16")
        self.grad_norms: dict[str, float] | None = None  # the last step's, on the steps that measure them
        self.pending: list[torch.Tensor] = []  # the losses of the updates since the last read, on the device
        self._count_checked = False  # Task.loss_count against Task.loss, on the first step
        self.saved_step: int | None = None  # the run's last checkpoint, once one is restored or written
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

    def _restore(self) -> int:
        ckpt = restore_latest(self.out, self.cfg.train, self.model, self.optimizer, self.dist, self.log)
        if ckpt is None:
            return 0
        self.state.update(ckpt["extra"])
        self.saved_step = ckpt["step"]
        return ckpt["step"]

    def save(self, step: int) -> None:
        t = self.cfg.train
        write_checkpoint(
            self.out, t, step, self.model, self.optimizer, dict(self.state, step=step), self.dist, self.scalar_params
        )
        self.saved_step = step

    def summary(self, status: str, step: int, extra: dict | None = None) -> RunSummary:
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
            "final_eval_batches": s.get("last_eval_batches"),
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
            "threads": torch.get_num_threads(),
            "peak_memory_mb": self.dist.max(peak_memory_mb(self.dist.device)),
            "machine": run_machine(self.dist.device),
        }
        out.update(self.throughput.summary())  # steady-state tokens_per_s, compile_s, mfu
        out.update(self.task.summary_fields(s))
        if hasattr(self.data, "unigram_eval_loss"):  # language-model corpora: the score of a failed run
            out["unigram_eval_loss"] = self.data.unigram_eval_loss
        out.update(extra or {})
        summary = RunSummary.from_dict(out)
        if self.dist.main:
            write_summary(self.out, summary)
        return summary

    def run(self) -> RunSummary:
        try:
            return self._run()
        except BaseException:
            if self.dist.main and not self.resume and not self.state["tokens"]:
                # A new run that failed before its first step (a tracker that cannot start, a bad URI, Ctrl-C):
                # what it wrote would make the same command a refusal ("already holds a run"); it goes.
                discard_run(self.out)
            raise
        finally:
            self.dist.close()

    def _run(self) -> RunSummary:
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
        trackers = open_trackers(self.cfg, self.out, start) if self.dist.main else None
        logger = MetricsLogger(
            self.out, start, t.steps, self.state["train_seconds"], self.dist.main, self.progress, trackers
        )
        window, done, status, extra = [], start, "completed", {}
        self.state["stalled_step"] = None
        wall0 = time.perf_counter() - self.state["wall_seconds"]
        self.model.train()
        summary = None
        try:
            with SignalFlag() as flag:
                for step in range(start, t.steps):
                    # Between reads the losses stay on the device: no host sync (the divergence and stall
                    # checks run at the reads: docs/models.md#training).
                    losses = self._timed_step(step, self.reads_step(step + 1) or self._signalled(flag))
                    if not losses:
                        logger.advance()
                        continue
                    first = step + 2 - len(losses)
                    verdict = self._check_losses(first, losses, window, stall)
                    if verdict is not None and verdict[0] == "diverged":
                        status, extra = verdict
                        done = extra["diverged_step"] - 1  # the last good step; nothing later is saved
                        self.log(
                            divergence_message(
                                done + 1, extra["diverged_loss"], self.state["initial_loss"], self.saved_step
                            )
                        )
                        break
                    done = step + 1
                    self.state["wall_seconds"] = time.perf_counter() - wall0
                    self._write_row(logger, done, window)
                    stop = self._stops(done, flag, stall, verdict)
                    if stop:
                        status, extra = stop
                        break
                    if done % t.checkpoint_every == 0 or done == t.steps:
                        self.save(done)
            self.state["wall_seconds"] = time.perf_counter() - wall0
            summary = self.summary(status, done, {**stall.summary(), **extra})
        finally:
            # After the summary, which the trackers record; without one (an error) they mark the run failed.
            # The trackers record summary.json's contents as they are in the file.
            logger.close(summary and summary.to_dict(), [self.out / name for name in RUN_ARTIFACTS])
        return summary

    def reads_step(self, done: int) -> bool:
        """Whether the losses are read to the host after update `done` (1-based): where a row is logged, the
        gradient norms measured, the model evaluated or saved (a checkpoint is only written once every loss
        before it has been checked), and at the end. Other steps never wait for the device."""
        t = self.cfg.train
        return self.measures_grads(done) or self.evaluates_step(done) or done % t.checkpoint_every == 0

    def _signalled(self, flag: SignalFlag) -> bool:
        # One process reads its flag for free; processes must agree on the step they stop at, which a
        # collective at each read gives them (stopping.interrupted), so they stop at the next read.
        return not self.dist.enabled and flag.raised

    def _timed_step(self, step: int, read: bool) -> list[float]:
        """Train update `step` (0-based) and count its time and tokens. With `read`, the losses of every update
        since the last read, as floats (the read's wait for the device counts as training time); else []."""
        t0 = time.perf_counter()
        self.pending.append(self.train_step(step))
        losses = []
        if read:
            losses = torch.stack(self.pending).tolist()
            self.pending.clear()
        dt = time.perf_counter() - t0
        tokens = self.batches.train.tokens_per_step
        self.state["train_seconds"] += dt
        self.throughput.step(dt, tokens)
        self.state["tokens"] += tokens
        return losses

    def _check_losses(self, first: int, losses: list[float], window: list[float], stall) -> tuple[str, dict] | None:
        """The losses of updates first, first + 1, ... in order: the run's initial loss, the logging window,
        divergence (("diverged", fields) at the exact step, where the others stop counting) and the stall
        rule (("stalled", {"stalled_step"}) at the first step it holds), whichever comes first."""
        for k, loss in enumerate(losses, first):
            if self.state["initial_loss"] is None:
                self.state["initial_loss"] = loss
            if diverged(loss, self.state["initial_loss"], self.cfg.train.divergence_factor):
                return "diverged", {"diverged_step": k, "diverged_loss": loss}
            window.append(loss)
            self.state["last_loss"] = loss
            if stall.update(k, loss):
                # The run stops here: what came after the stall's step neither enters its window (a resume
                # decides on the same window) nor outranks it (a later divergence is not this run's end).
                return "stalled", {"stalled_step": k}
        return None

    def _write_row(self, logger: MetricsLogger, done: int, window: list[float]) -> None:
        """The metrics row of update `done`: training values on logged steps (the mean loss over `window`,
        the losses since the last row, which it empties), gradient norms where measured, evaluation on
        evaluated steps; the progress bar moves on every step."""
        row = None
        if self.logs_step(done):
            tokens = len(window) * self.batches.train.tokens_per_step
            lr = self.optimizer.param_groups[0]["lr"]
            row = logger.train_row(done, sum(window) / len(window), lr, self.state, tokens, self.model)
            row["mfu"] = self.throughput.mfu(row["tokens_per_s"])
            if self.qk_clip is not None:
                row.update(self.qk_clip.values())  # this step's largest logit per layer, before its clip
            window.clear()
        if self.grad_norms is not None:
            row = dict(row or {"step": done}, **grad_values(self.grad_norms))
        if self.evaluates_step(done):
            ev = self.evaluate()
            best = self.state["best_eval_loss"]
            self.state.update(last_eval_loss=ev, best_eval_loss=ev if best is None else min(best, ev))
            row = dict(row or {"step": done}, eval_loss=ev)
            # At the run's precision, as training: a compiled block would otherwise recompile
            # for autocast off (on an H100 a fine-tuning run hit dynamo's recompile limit).
            with self.autocast():
                row.update(self.task.evaluate(self.model, self.data, self.batches.val, self.dist.device, self.state))
        if row is not None:
            logger.write(row)
        logger.advance()

    def _stops(self, done: int, flag: SignalFlag, stall, verdict) -> tuple[str, dict] | None:
        """(status, summary fields) where the run stops after update `done` (a read), its checkpoint saved: a
        signal to any process, or a stall (`verdict`, from the losses just read, with the step it held at)."""
        if (self.dist.enabled or flag.raised) and interrupted(flag, self.dist):
            self.save(done)
            self.log(
                f"interrupted at step {done}; checkpoint saved (train: add --resume to continue; compare and "
                "finetune: run the same command again)"
            )
            return "interrupted", {}
        if verdict is not None:
            stalled_step = verdict[1]["stalled_step"]
            self.state["stalled_step"] = stalled_step
            self.save(done)
            t = self.cfg.train
            self.log(stall_message(stalled_step, t.stall_margin, stall.entropy, t.stall_patience))
            return "stalled", stall.summary(stalled_step)
        return None


def train(
    cfg: RunConfig,
    out: str | Path,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool | None = None,
    log=print,
) -> RunSummary:
    """Train one run into `out`; returns its summary (also written to summary.json). A run that fails before its
    first step leaves no folder it made (rundir.discard_run): the same command can run again."""
    out = Path(out)
    made = not out.exists()
    try:
        return Trainer(cfg, out, resume, overwrite, progress, log).run()
    except BaseException:
        if made:
            with contextlib.suppress(OSError):  # only an empty folder: another process may have written there
                out.rmdir()
        raise
