"""One training step and one evaluation, and which steps log, as the Trainer's methods (training/trainer.py
builds what they use: the model, its wrapped forward, the optimizer, the batches, the task)."""

from __future__ import annotations

import contextlib
import math
import statistics

import torch

from blocklab.probes.grads import layer_grad_norms
from blocklab.training import parallel
from blocklab.training.optim import lr_factor, set_lr


class StepMixin:
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
        total, count, means, counts = 0.0, 0, [], []
        rows = self.cfg.train.batch_size // (self.dist.world_size * self.cfg.train.grad_accum)
        for batch in self.batches.val.val_batches(self.cfg.train.eval_batches):
            b_total, b_count = 0.0, 0
            for part in parallel.pieces(batch, rows):
                s, n = self.loss_terms(part, self.model)
                b_total, b_count = b_total + s.item(), b_count + n.item()
            total, count = total + b_total, count + b_count
            means.append(b_total / max(b_count, 1))
            counts.append(b_count)
        self.model.train()
        # The eval loss's own noise (its standard error over the evaluation batches): a sweep's verdicts
        # compare it with the spread over seeds, which it must stay well below. Every run of a sweep sees the
        # same batches, so the per-batch losses let a comparison take its noise paired (stats.paired_se).
        self.state["last_eval_se"] = statistics.stdev(means) / math.sqrt(len(means)) if len(means) > 1 else None
        self.state["last_eval_batches"] = {"loss": means, "tokens": counts}
        return total / max(count, 1)

    def train_step(self, step: int) -> torch.Tensor:
        """One update; its loss (the global batch's mean) stays on the device, a 0-dim tensor: the step itself
        never waits for the device (the trainer reads the losses at its logging steps)."""
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
        if self.qk_clip is not None:
            self.qk_clip.step()  # train.qk_clip: before the block's hook, which has the last word on the weights
        self.model.after_optimizer_step()  # the block's after_update hook (blocks/hooks.py)
        self.optimizer.zero_grad(set_to_none=True)
        return (self.dist.sum(total) / n_global).detach()

    def logs_step(self, done: int) -> bool:
        """Whether the step that makes update number `done` (1-based) gets a training row."""
        t = self.cfg.train
        return done % t.log_every == 0 or done == t.steps

    def measures_grads(self, done: int) -> bool:
        """The logged steps, and step 1: its gradient is taken at the initial weights (before any
        update), the "init" of the gradient-norm figure (reporting/gradnorms.py). When step 1 is not
        a logged step it gets a row of its own holding only `step` and the `grad/` keys."""
        return done == 1 or self.logs_step(done)

    def evaluates_step(self, done: int) -> bool:
        t = self.cfg.train
        return done % t.eval_every == 0 or done == t.steps
