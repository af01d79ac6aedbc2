"""What QK-clip (train.qk_clip) asks of an attention: the largest logit of each head over a training batch,
and the scaling of a head's query and key projections that lowers its logits.

QK-clip is Kimi K2's (Kimi Team 2025, "Kimi K2: Open Agentic Intelligence", arXiv 2507.20534, Sec. 2.1,
"MuonClip"): after each optimizer step, a head h whose largest logit S_max^h on that step's batch exceeded tau
has W^Q_h and W^K_h multiplied by sqrt(gamma_h) each, gamma_h = tau / S_max^h, so that its logits on that
batch scale by gamma_h, the largest back to tau; every other head is left as it is. The logit is what the
softmax reads, q_i . k_j / sqrt(d_h), over the pairs the mask allows.

The maxima cost one more Q K^T product per attention and step (no gradient, a few batch rows at a time), and
only while a run asks for QK-clip: `tracks_logits` is off otherwise and the forward pays nothing. They are
taken from the very q and k every path's kernel receives, so sdpa, the materialized matrix and the fused
shaped-attention kernel clip alike.
"""

from __future__ import annotations

import math

import torch

from blocklab.attention.functional import allowed_keys

CHUNK = 1 << 24  # logits per piece of the maxima: a (rows, H, Tq, Tk) block of at most this many fp32 values


@torch.no_grad()
def head_max_logits(q: torch.Tensor, k: torch.Tensor, causal: bool, key_mask=None) -> torch.Tensor:
    """(H,) fp32: each head's largest q_i . k_j / sqrt(d_h) over the batch, the queries and the keys each query
    may attend, for (B, H, Tq, d_h) queries and (B, H, Tk, d_h) keys; `key_mask` (B, Tk) marks the real keys."""
    B, H, Tq, dh = q.shape
    Tk = k.shape[-2]
    allowed = allowed_keys(Tq, Tk, causal, key_mask, q.device)  # (B or 1, 1, Tq, Tk)
    rows = max(1, CHUNK // (H * Tq * Tk))
    out = torch.full((H,), -math.inf, dtype=torch.float32, device=q.device)
    for s in range(0, B, rows):
        scores = q[s : s + rows].float() @ k[s : s + rows].float().transpose(-2, -1) / math.sqrt(dh)
        scores = scores.masked_fill(~(allowed if allowed.shape[0] == 1 else allowed[s : s + rows]), -math.inf)
        out = torch.maximum(out, scores.amax(dim=(0, 2, 3)))
    return out


@torch.no_grad()
def scale_rows(param: torch.Tensor, rows: torch.Tensor) -> None:
    """param[r] *= rows[r] in place, for a Linear's (out, in) weight or (out,) bias; a sharded (FSDP) parameter
    scales each shard's rows by theirs."""
    # imported here: torch.distributed.tensor imports torch._dynamo, seconds of every command's start
    from torch.distributed.tensor import DTensor, Replicate

    if isinstance(param, DTensor):
        mesh = param.device_mesh
        rows = DTensor.from_local(rows, mesh, [Replicate()] * mesh.ndim, run_check=False)
    param.mul_(rows.view(-1, *(1,) * (param.dim() - 1)))


class ClipsLogits:
    """An attention QK-clip can clip: its logits are (x W^Q)(m W^K)^T / sqrt(d_h) per head, W^Q and W^K the
    Linears `q` and `k`, whose output rows h d_h .. (h + 1) d_h are head h's (split_heads' layout), and its
    forward calls `note_logits` with the queries and keys its softmax reads. An attention whose logits do not
    scale with W^Q and W^K says why in `qk_clip_refusal` (a run with QK-clip is then refused)."""

    tracks_logits = False  # set while a run clips (training/qk_clip.py)
    max_logits: torch.Tensor | None = None  # (H,): the largest logits since the last `take_max_logits`

    def qk_clip_refusal(self) -> str | None:
        """Why QK-clip cannot lower this attention's logits by scaling W^Q and W^K; None: it can."""
        if getattr(self, "qk_norm", None) is not None:
            return (
                "its queries and keys are normalised (QK-norm) before their dot product, so scaling W^Q and W^K "
                "does not change its logits"
            )
        return None

    def note_logits(self, q: torch.Tensor, k: torch.Tensor, causal: bool, key_mask=None) -> None:
        """Keep each head's largest logit of this forward (training only, while tracking)."""
        if self.tracks_logits and self.training:
            self._note(q, k, causal, key_mask)

    def track_logits(self) -> None:
        """Keep each head's largest logit from now on. A compiled block runs the forward's attention compiled and
        the note eagerly: torch.compiler.disable is applied here rather than as a decorator, which would import
        the compiler (seconds) wherever an attention is imported."""
        if not self.tracks_logits:
            self.tracks_logits = True
            self._note = torch.compiler.disable(self._note)

    def _note(self, q, k, causal, key_mask) -> None:
        m = head_max_logits(q.detach(), k.detach(), causal, key_mask)
        self.max_logits = m if self.max_logits is None else torch.maximum(self.max_logits, m)

    def take_max_logits(self) -> torch.Tensor:
        """The heads' largest logits since the last call (-inf for a head that saw none), and start afresh."""
        m, self.max_logits = self.max_logits, None
        if m is None:
            return torch.full((self.cfg.n_heads,), -math.inf, device=self.q.weight.device)
        return m

    @torch.no_grad()
    def scale_logits(self, factors: torch.Tensor) -> None:
        """Multiply head h's logits by factors[h] (H,): its rows of W^Q and W^K (and of their biases) by
        sqrt(factors[h]) each. A factor of 1 leaves the head's weights bit for bit as they were."""
        rows = factors.sqrt().repeat_interleave(self.cfg.d_head).to(self.q.weight.dtype)
        for linear in (self.q, self.k):
            scale_rows(linear.weight, rows)
            if linear.bias is not None:
                scale_rows(linear.bias, rows)
