"""Attention sub-blocks: standard multi-head attention and shaped attention (He & Hofmann)."""

from __future__ import annotations

import torch
import torch.nn as nn

from blocklab.attention.centring import centred_mean, centring_matrix
from blocklab.attention.functional import attention_matrix, merge_heads, softmax_attention, split_heads
from blocklab.attention.logits import ClipsLogits
from blocklab.config import ModelConfig
from blocklab.layers import Canon, InitRule, Linear, RMSNorm, WeightInit, canon_layer, gain


def _fused():
    """The fused kernel's module, imported on first use: Triton and the torch.library op machinery it loads
    cost about 2 s of every process's start, which a CPU run (sdpa) never needs."""
    from blocklab.attention import fused

    return fused


def fused_unavailable(device: torch.device) -> str | None:
    """Why the fused kernel cannot run on `device` (None: it can)."""
    return _fused().unavailable_reason(device)


def resolve_impl(impl: str, device: torch.device, dtype: torch.dtype = torch.float32) -> str:
    """The attention path to run. "auto" is the fastest path measured correct on that kind of device
    for that input precision (docs/models.md#attention-paths; `blocklab check` and benchmarks/RESULTS.md): AUTO_IMPL,
    except that fp32 inputs keep sdpa where AUTO_IMPL names the fused kernel (it computes fp32 in
    TF32: 3e-3 relative gradient error on the H100 against 1e-6 for sdpa), and sdpa where the kernel
    cannot run (no Triton). Resolved per call, so a model keeps "auto" in its config and follows
    .to(device) and autocast."""
    if impl != "auto":
        return impl
    path = AUTO_IMPL.get(device.type, "sdpa")
    if path == "fused" and (dtype == torch.float32 or fused_unavailable(device) is not None):
        return "sdpa"
    return path


# Device type -> the path "auto" runs there on 16-bit inputs; change an entry only with a
# measurement behind it. CUDA: fused, 1.05x Pre-LN compiled at the he-codeparrot shape against
# 1.00x for sdpa, 1.25-1.91x the sdpa path's attention, autotuned path checked on an H100 (RESULTS.md).
AUTO_IMPL = {"cpu": "sdpa", "cuda": "fused"}


def attention_path(model: nn.Module, device: torch.device, dtype: torch.dtype = torch.float32) -> str:
    """The path a model's attention actually runs on `device` with inputs of `dtype` (summary.json,
    the run log): the resolved shaped-attention path, or for softmax-only models the one
    MultiHeadAttention takes."""
    shaped = [m for m in model.modules() if isinstance(m, ShapedAttention)]
    if shaped:
        return resolve_impl(shaped[0].cfg.attn_impl, device, dtype)
    # Softmax attentions (MultiHeadAttention, nGPT's NormalisedAttention) say their path as `impl`.
    softmax = [m for m in model.modules() if isinstance(getattr(type(m), "impl", None), property)]
    return softmax[0].impl if softmax else "none"


class QKNorm(nn.Module):
    """qk_norm=True: RMSNorm (one gain of width d_h shared by the heads) on each head's queries and keys
    before their dot product (Henry et al. 2020; Dehghani et al. 2023, ViT-22B). A zero query stays zero,
    so shaped attention is still the identity at init. `width` d (OLMo 2's): one RMSNorm over the whole
    query projection and one over the whole key projection, before the head split."""

    def __init__(self, width: int, eps: float):
        super().__init__()
        self.q, self.k = RMSNorm(width, eps), RMSNorm(width, eps)


def make_qk_norm(cfg: ModelConfig, always: bool = False, whole: bool = False) -> QKNorm | None:
    """The attention's QKNorm where the config asks for one, or `always` (a block whose paper always
    normalises queries and keys: op), `whole` projections at once (olmo2); else None."""
    if whole:
        return QKNorm(cfg.d_model, cfg.norm_eps)
    return QKNorm(cfg.d_head, cfg.norm_eps) if cfg.qk_norm or always else None


class AttentionGate(Linear):
    """attn_gate: gated attention, W^O [SDPA(Q, K, V) * sigmoid(x W_g)] (Qiu et al. 2025, arXiv 2505.06708,
    Sec. 2.2, Y' = Y * sigma(X W_theta) at position G1: after SDPA, before W^O). This Linear is W_g: d x d
    (attn_gate=True, the paper's elementwise gate, one per channel of each head's output) or d x H
    (attn_gate="headwise", one gate per head). Its forward returns the gate sigmoid(x W_g), in (0, 1), shaped
    (B, T, H, d_h) or (B, T, H, 1) to multiply the heads' outputs with.

    What the paper leaves open, as the official code (qiuzh20/gated_attention, modeling_qwen3.py,
    `Qwen3Attention`, whose gate is extra output rows of `q_proj`) settles it:
    - x is what the query projection reads, the sub-layer's normalised input; in a cross-attention (the
      translation decoder's) the query side's, as the gate is one per query position.
    - A bias only where the query projection has one (`bias`, the code's `qkv_bias`), zero at init as
      every bias here; the paper's sigma(X W_theta) has none.
    - W_g starts as the package starts its Linears: N(0, 0.02^2) under init="normal" (the code's draw:
      its q_proj rows, HF's initializer_range 0.02), Xavier-uniform at gain 1 under init="xavier" (the
      code has no Xavier rule); DeepNorm's gains do not touch it (DeepNet scales only W^V, W^O and the MLP).
    - W_g is a matrix, so it gets weight decay, as every matrix here (model/params.py); its bias does not.
    """

    def __init__(self, cfg: ModelConfig):
        headwise = cfg.attn_gate == "headwise"
        super().__init__(cfg.d_model, cfg.n_heads if headwise else cfg.d_model, bias=cfg.bias)
        self.n_heads, self.headwise = cfg.n_heads, headwise

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g = torch.sigmoid(super().forward(x))
        return g.unflatten(-1, (self.n_heads, -1))


def make_attention_gate(cfg: ModelConfig) -> AttentionGate | None:
    """The attention's output gate where the config asks for one (attn_gate True or "headwise"), else None."""
    return AttentionGate(cfg) if cfg.attn_gate is not False else None


class KVCache:
    """The keys and values (B, H, T, d_h) of the tokens decoded so far, for one self-attention."""

    def __init__(self):
        self.k = self.v = None

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.k = k if self.k is None else torch.cat([self.k, k], 2)
        self.v = v if self.v is None else torch.cat([self.v, v], 2)
        return self.k, self.v

    def reorder(self, index: torch.Tensor) -> None:
        """Keep the rows `index` (beam search)."""
        if self.k is not None:
            self.k, self.v = self.k[index], self.v[index]


class MultiHeadAttention(ClipsLogits, nn.Module):
    """MHA(X, M) = concat_h(A_h V_h) W^P, A_h = softmax(mask(Q_h K_h^T / sqrt(d_h))), Q = X W^Q, K = M W^K, V = M W^V
    (docs/blocks.md#notation-and-what-every-block-shares). Self-attention has M = X; a cross-attention (the translation
    decoder's, over the encoder output) takes M = `memory` with its padding mask. Both run the same `softmax_attention`
    by the path `attn_impl` says (`impl`).

    `causal` defaults to the model's (cfg.causal); the translation decoder asks for a causal
    self-attention and a bidirectional cross-attention in a bidirectional-encoder model.

    attn_gate: the heads' outputs are multiplied by the AttentionGate of X before W^P, on every path.
    Canon position B (`canon` naming B): a Canon layer on the self-attention's queries, keys and values side by
    side, after their projections and QK-norm, as the Canon code's `canonB` on cat(q, k, v).
    `head_scale` (NormFormer): a trainable scale per head on the heads' outputs before W^P, 1 at init.
    `qk_norm_whole` (OLMo 2): RMSNorm over the whole query and key projections, before the head split.
    """

    def __init__(
        self,
        cfg: ModelConfig,
        causal: bool | None = None,
        qk_norm: bool = False,
        head_scale: bool = False,
        qk_norm_whole: bool = False,
    ):
        super().__init__()
        d = cfg.d_model
        self.cfg = cfg
        self.causal = cfg.causal if causal is None else causal
        # init="xavier" (fairseq's MultiheadAttention): the query, key and value projections at gain 1/sqrt(2).
        qkv = WeightInit(gain=2**-0.5)
        self.q, self.k, self.v = (Linear(d, d, bias=cfg.bias, weight_init=qkv) for _ in range(3))
        self.proj = Linear(d, d, bias=cfg.bias)
        # qk_norm=True: the block always has it (op); qk_norm_whole: over the whole projections (olmo2)
        self.qk_norm = make_qk_norm(cfg, always=qk_norm, whole=qk_norm_whole)
        self.qk_whole = qk_norm_whole
        # Made last, so that without them every other weight is drawn as before (init_weights' module order).
        self.gate = make_attention_gate(cfg)
        self.head_scale = gain(1.0, cfg.n_heads) if head_scale else None
        self.canon = canon_layer(cfg, "B", 3 * d)

    @property
    def impl(self) -> str:
        # Softmax attention has no gains to fuse: "fused" and "auto" run SDPA's own flash kernels.
        return "materialized" if self.cfg.attn_impl == "materialized" else "sdpa"

    def heads(self, t: torch.Tensor, norm: nn.Module | None) -> torch.Tensor:
        """A projection (B, T, d) split into heads (B, H, T, d_h), normalised by `norm` where there is one:
        before the split for qk_norm_whole, after it otherwise."""
        if norm is None:
            return split_heads(t, self.cfg.n_heads)
        if self.qk_whole:
            return split_heads(norm(t), self.cfg.n_heads)
        return norm(split_heads(t, self.cfg.n_heads))

    def keys_values(self, m: torch.Tensor, values: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V of `m` (B, T, d), split into heads (B, H, T, d_h): computed once per source when decoding.
        `values`: V from this input instead (MUDDFormer's decoupled key and value streams)."""
        k = self.heads(self.k(m), self.qk_norm.k if self.qk_norm is not None else None)
        return k, split_heads(self.v(m if values is None else values), self.cfg.n_heads)

    def queries(self, x: torch.Tensor) -> torch.Tensor:
        """Q of `x` (B, T, d), split into heads (B, H, T, d_h), normalised where qk_norm is on."""
        return self.heads(self.q(x), self.qk_norm.q if self.qk_norm is not None else None)

    def self_qkv(self, x: torch.Tensor, key_mask: torch.Tensor | None = None):
        """Q, K, V of a self-attention over `x`, split into heads; with Canon position B, the Canon layer over
        the three side by side (merged heads, in that order) before the split."""
        q, (k, v) = self.queries(x), self.keys_values(x)
        if isinstance(self.canon, Canon):
            qkv = self.canon(torch.cat([merge_heads(t) for t in (q, k, v)], -1), key_mask)
            q, k, v = (split_heads(t, self.cfg.n_heads) for t in qkv.chunk(3, -1))
        return q, k, v

    def probabilities(self, x: torch.Tensor, key_mask: torch.Tensor | None = None) -> torch.Tensor:
        """A (B, H, T, T) of this attention as a self-attention over `x`, the softmax its forward applies (the
        probes read it; forward's sdpa path never forms it)."""
        q, k, _ = self.self_qkv(x, key_mask)
        return attention_matrix(q, k, self.causal, key_mask)

    def forward(
        self,
        x: torch.Tensor,
        key_mask: torch.Tensor | None = None,
        memory: torch.Tensor | None = None,
        kv: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """x (B, T, d). `key_mask` (B, Tk): True (1) at the keys that may be attended, None for all.

        Self-attention by default. Cross-attention: `memory` (B, S, d), or `kv` = keys_values(memory)
        computed beforehand (once per source when decoding). Incremental decoding passes as `kv` the
        keys and values of every token so far (a KVCache), x holding the newest: with fewer queries than
        keys, the queries are the last positions (attention/functional.py, `allowed_keys`).
        """
        if kv is not None:
            q, (k, v) = self.queries(x), kv
        elif memory is not None:
            q, (k, v) = self.queries(x), self.keys_values(memory)
        else:
            q, k, v = self.self_qkv(x, key_mask)
        self.note_logits(q, k, self.causal, key_mask)  # train.qk_clip's maxima (attention/logits.py)
        out = softmax_attention(q, k, v, self.causal, key_mask, self.impl)
        if self.head_scale is not None:
            out = out * self.head_scale.view(1, -1, 1, 1).to(out.dtype)
        if self.gate is not None:
            # Outside the attention kernel, so every path (sdpa, materialized) gates the same output:
            # (B, H, T, d_h) -> (B, T, H, d_h), times the gate, heads side by side (merge_heads' layout).
            return self.proj((out.transpose(1, 2) * self.gate(x)).flatten(2))
        return self.proj(merge_heads(out))


class IdentityPlus(nn.Module):
    """W = alpha I + beta dW with dW zero at init, so W is the identity at init.

    alpha=beta=None fixes both at 1 (the first SAS block's W^V = I + dW); numbers make them
    trainable scalars (shaped-vp's W^V and W^P, whose beta/alpha ratio the probes log).
    """

    def __init__(self, d: int, alpha: float | None = None, beta: float | None = None):
        super().__init__()
        self.dW = Linear(d, d, bias=False, weight_init=WeightInit(InitRule.ZEROS))
        self.alpha = gain(alpha) if alpha is not None else None
        self.beta = gain(beta) if beta is not None else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.alpha is None:
            return x + self.dW(x)
        return self.alpha * x + self.beta * self.dW(x)


class ShapedAttention(ClipsLogits, nn.Module):
    """Per head: (alpha_h I + beta_h A_h(X) - gamma_h C) V_h, then the optional projection (He & Hofmann eq. 6).

    `value`/`proj` are None (SAS: V = X, no projection), an IdentityPlus, or a plain Linear
    (v-skipinit). `gamma=None` drops the centring term (v-skipinit). Queries are zero at
    init unless `zero_query=False`, so with beta = gamma, beta A - gamma C = 0 at init.
    """

    def __init__(self, cfg: ModelConfig, alpha=1.0, beta=1.0, gamma=1.0, value=None, proj=None, zero_query=True):
        super().__init__()
        d, H = cfg.d_model, cfg.n_heads
        self.cfg = cfg
        self.q = Linear(d, d, bias=False, weight_init=WeightInit(InitRule.ZEROS if zero_query else InitRule.CONFIG))
        self.k = nn.Linear(d, d, bias=False)
        self.alpha, self.beta = gain(alpha, H), gain(beta, H)
        self.gamma = gain(gamma, H) if gamma is not None else None
        self.value, self.proj = value, proj
        self.qk_norm = make_qk_norm(cfg)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor | None = None) -> torch.Tensor:
        H = self.cfg.n_heads
        q, k = split_heads(self.q(x), H), split_heads(self.k(x), H)
        if self.qk_norm is not None:
            q, k = self.qk_norm.q(q), self.qk_norm.k(k)
        v = split_heads(self.value(x) if self.value is not None else x, H)
        # A_h's logits are q k^T / sqrt(d_h) as softmax attention's: QK-clip applies on every path (the fused
        # kernel's too: the maxima come from these q and k).
        self.note_logits(q, k, self.cfg.causal, key_mask)
        impl = resolve_impl(self.cfg.attn_impl, x.device, q.dtype)
        out = merge_heads(shaped_attention(q, k, v, self.alpha, self.beta, self.gamma, self.cfg.causal, key_mask, impl))
        return self.proj(out) if self.proj is not None else out


def shaped_attention(q, k, v, alpha, beta, gamma, causal: bool, key_mask=None, impl: str = "sdpa") -> torch.Tensor:
    """(alpha_h I + beta_h A_h - gamma_h C) V_h for (B, H, T, d_h) inputs and (H,) gains, gamma
    optional, by the path `impl` (He & Hofmann eq. 6; docs/models.md#attention-paths)."""
    H, T = q.shape[1], q.shape[-2]
    if impl == "fused":
        return _fused().fused_shaped_attention(q, k, v, alpha, beta, gamma, causal, key_mask)
    a, b = alpha.view(1, H, 1, 1), beta.view(1, H, 1, 1)
    if impl == "materialized":
        m = a * torch.eye(T, device=q.device, dtype=v.dtype) + b * attention_matrix(q, k, causal, key_mask)
        if gamma is not None:
            m = m - gamma.view(1, H, 1, 1) * centring_matrix(T, causal, key_mask, q.device, v.dtype)
        return m @ v
    # addcmul: the same sums in fewer elementwise passes (forward and backward).
    out = torch.addcmul(a * v, b, softmax_attention(q, k, v, causal, key_mask, "sdpa"))
    if gamma is not None:
        out = torch.addcmul(out, -gamma.view(1, H, 1, 1), centred_mean(v, causal, key_mask))
    return out
