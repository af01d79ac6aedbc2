"""The built-in blocks' facts that the command line needs before torch is imported: the names a config
accepts, and what `blocklab train --help` prints (each block's equation, its gain defaults and its recipe).

The block classes (blocks/) and their registry specs hold these facts too, and importing them imports torch
(seconds). tests/test_block_table.py keeps this table equal to them, so the two cannot drift: a new block
needs its line here as well as its `register(...)`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BlockFacts:
    """label, beta_ff, beta_sa, recipe, recipe_source: as the block's BlockSpec (registry.py) says;
    equation: the first line of the block class's docstring; public: not an ablation (BlockSpec.public)."""

    label: str
    equation: str
    public: bool = True
    beta_ff: float | None = None
    beta_sa: float | None = None
    recipe: tuple[tuple[str, object], ...] = ()
    recipe_source: str | None = None


# Every built-in block, in registry order (the order of the messages that list them).
BUILTIN_BLOCKS: dict[str, BlockFacts] = {
    "post-ln": BlockFacts("Post-LN", "u = Norm(x + MHA(x)); y = Norm(u + MLP(u))."),
    "pre-ln": BlockFacts("Pre-LN", "u = x + MHA(Norm(x)); y = u + MLP(Norm(u))."),
    "parallel": BlockFacts("parallel", "y = x + MHA(Norm(x)) + MLP(Norm(x)), one shared norm."),
    "deepnorm": BlockFacts(
        "DeepNorm",
        "x <- LN(alpha x + F(x)); Xavier-normal gain beta on W^V, W^P, W1, W2 (DeepNet eq. 6 and Table 1).",
    ),
    "ngpt": BlockFacts(
        "nGPT",
        "h <- Norm(h + alpha_A (Norm(Attn(h)) - h)); h <- Norm(h + alpha_M (Norm(MLP(h)) - h)) (nGPT eqs. 10-11).",
        recipe=(("train.weight_decay", 0.0), ("train.warmup_steps", 0)),
        recipe_source="Loshchilov et al. 2024, Sec. 2.6",
    ),
    "v-skipinit": BlockFacts(
        "V-SkipInit",
        "Attention matrix alpha I + beta A(X) (alpha=1, beta=0 at init) with W^V, W^P; MLP keeps its skip.",
        beta_ff=0.1,
    ),
    "shaped-vp": BlockFacts(
        "shaped value/projection",
        "SAS with W^V, W^P kept as alpha_V I + beta_V dW, to watch beta_V / alpha_V during training.",
        beta_ff=0.1,
    ),
    "sas": BlockFacts("SAS", "u = SAS(Norm(x)); y = u + beta_FF MLP(Norm(u)).", beta_ff=0.1),
    "sas-p": BlockFacts(
        "SAS-P",
        "y = beta_SA SAS(Norm(x)) + beta_FF MLP(Norm(x)): no skip at all, one shared norm.",
        beta_ff=0.1,
        beta_sa=1.0,
    ),
    "sas-p-nonorm": BlockFacts(
        "SAS-P without norms",
        "sas-p without norms, except on the first block's input (and the model's final norm).",
        beta_ff=0.1,
        beta_sa=1.0,
    ),
    "softmax-noskip": BlockFacts(
        "softmax-noskip",
        "Ablation for rank collapse: u = A(Norm(x)) Norm(x), plain softmax attention and no skip.",
        public=False,
        beta_ff=0.1,
    ),
    "rezero": BlockFacts(
        "ReZero",
        "u = x + a MHA(x); y = u + a MLP(u), no norm, a trainable a = 0 at init (Bachlechner et al. 2020, eq. 5).",
    ),
    "peri-ln": BlockFacts(
        "Peri-LN",
        "u = x + Norm(MHA(Norm(x))); y = u + Norm(MLP(Norm(u))) (Kim et al. 2025, eq. 3; CogView's sandwich)",
    ),
    "mix-ln": BlockFacts(
        "Mix-LN",
        "Post-LN for the first floor(N/4) blocks, Pre-LN after them, then the final norm (Li et al. 2024, Sec. 3).",
    ),
    "lns": BlockFacts(
        "LayerNorm Scaling", "Pre-LN with each norm's output scaled by 1/sqrt(l), l = 1..N (Sun et al. 2025, eq. 9)."
    ),
    "op": BlockFacts(
        "OP",
        "u = x + beta_SA MHA(x); y = u + beta_FF MLP(u), QK-norm, no pre-norms (He et al. 2024, Sec. 4).",
        beta_ff=0.2,
        beta_sa=0.2,
    ),
    # Section 2c: the residual stream.
    "attn-res": BlockFacts(
        "AttnRes",
        "h_k = sum_{i<k} softmax_i(w_k^T RMSNorm(v_i)) v_i; v_k = F_k(Norm(h_k)), v_0 the embedding (Kimi Team 2026, eqs. 2-6).",
    ),
    "denseformer": BlockFacts(
        "DenseFormer",
        "X_i = B_i(Y_{i-1}); Y_i = sum_{j<=i} alpha_ij X_j, B_i Pre-LN, alpha_ii = 1 and the others 0 at init (Pagliardini et al. 2024, Sec. 3).",
    ),
    "hyper-connections": BlockFacts(
        "Hyper-Connections",
        "H <- B^T F(Norm(A_m^T H)) + A_r^T H per sub-layer F, n streams, final norm on their sum (Zhu et al. 2025, eq. 5).",
    ),
    "mhc": BlockFacts(
        "mHC",
        "x <- H_res^T x + H_post^T F(Norm(H_pre x)) per sub-layer F, H_res doubly stochastic (Xie et al. 2025, eqs. 3, 7-9).",
    ),
    "laurel": BlockFacts(
        "LAuReL-LR",
        "u = x + MHA(Norm(x)) + B_1 A_1 x; y = u + MLP(Norm(u)) + B_2 A_2 u (LAuReL-LR, Menghani et al. 2024, eq. 3).",
    ),
    "value-residual": BlockFacts(
        "ResFormer",
        "u = x + MHA(Norm(x)) with values V_n <- lambda_1 V_1 + lambda_2 V_n for n >= 2; y = u + MLP(Norm(u)).",
    ),
    # Section 2c: the last norm placements.
    "hybridnorm": BlockFacts(
        "HybridNorm",
        "x_m = x + MHA(N(x W_Q), N(x W_K), N(x W_V)) W_O; y = N(x_m) + MLP(N(x_m)), N per head on q, k, v (Zhuo et al. 2025).",
    ),
    "resi-dual": BlockFacts(
        "ResiDual",
        "x_a <- Norm(x_a + F(x_a)); x_d <- x_d + F(x_a) per sub-layer F; output x_a + Norm(x_d) (Xie et al. 2023).",
    ),
    # Section 2c: the initialisations.
    "admin": BlockFacts(
        "Admin",
        "u = LN(w_1 x + MHA(x)); y = LN(w_2 u + MLP(u)), each w a d-vector profiled at init (Liu et al. 2020).",
    ),
    "t-fixup": BlockFacts(
        "T-Fixup",
        "u = x + MHA(x); y = u + MLP(u), no norm; T-Fixup's scaled Xavier init on V, W^P, W1, W2 (Huang et al. 2020).",
        recipe=(("train.warmup_steps", 0),),
        recipe_source="Huang et al. 2020, abstract; official Train_IWSLT_TFixup_example.sh",
    ),
    # More answers: extra norms, the reordered norm, fractions of the state, dense multiway connections.
    "normformer": BlockFacts(
        "NormFormer",
        "u = x + Norm(HeadScaleMHA(Norm(x))); y = u + W2 Norm(act(W1 Norm(u))) (Shleifer et al. 2021, Sec. 2).",
    ),
    "olmo2": BlockFacts(
        "OLMo 2",
        "u = x + Norm(MHA(x)); y = u + Norm(MLP(u)), RMSNorm over the whole query and key projections (OLMo Team 2025).",
    ),
    "frac-connections": BlockFacts(
        "Frac-Connections",
        "H <- B^T F(Norm(Y^T H)) + A^T H per sub-layer F, the d-wide state in m fractions (Zhu et al. 2025, eq. 8).",
    ),
    "muddformer": BlockFacts(
        "MUDDFormer",
        "X_A = MHA(Norm(X^Q), Norm(X^K), Norm(X^V)) + X^R; X_i = X_A + MLP(Norm(X_A)); X^s = sum_j A_i[s, j] X_j (Xiao et al. 2025).",
    ),
}


def public_blocks() -> dict[str, BlockFacts]:
    """The blocks users train (docs/blocks.md), the ones --help lists, in registry order."""
    return {name: facts for name, facts in BUILTIN_BLOCKS.items() if facts.public}


def describe_blocks() -> str:
    """One line per public block for --model.block: its name and its equation."""
    lines = ["block table (--model.block): each block's equation"]
    lines += [f"  {name:<13} {facts.equation}" for name, facts in public_blocks().items()]
    return "\n".join(lines)


def describe_recipes() -> str:
    """One line per public block with a recipe: its settings as options, and the paper section they come from."""
    return "\n".join(
        f"  {name:<12} {', '.join(f'--{k} {v!r}' for k, v in facts.recipe)}  ({facts.recipe_source})"
        for name, facts in public_blocks().items()
        if facts.recipe
    )


def gain_default(gain: str) -> str:
    """What model.beta_ff / beta_sa None stands for (`gain` is one of the two), for --help."""
    by_value: dict = {}
    for name, facts in public_blocks().items():
        if getattr(facts, gain) is not None:
            by_value.setdefault(getattr(facts, gain), []).append(name)
    own = "; ".join(f"{v} for {', '.join(names)}" for v, names in by_value.items())
    return f"the block's own ({own}; other blocks have no such gain)" if own else "the block's own"


def sublayer_name(k: int) -> str:
    """Sub-layer k = 0, 1, ... of a stack (attention 2l, MLP 2l + 1 of block l), named from 1 as the papers
    count layers: the probes and the report name the residual-stream blocks' connections with it."""
    return f"{'attn' if k % 2 == 0 else 'mlp'} {k // 2 + 1}"
