"""What a benchmark run measures: the shape, the variants (block x precision x compile x optimizer) and the
options.

Every user-facing check lives here and raises `UserError` with one line, so the CLI and
`benchmarks/run_all.py` share the same validation: `Variant` and `BenchConfig` check their settings from
their declarations (blocklab.settings) when built, and `check_device` what the machine can run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from blocklab.errors import ConfigError, UserError
from blocklab.settings import setting, validate

PRECISIONS = ("fp32", "bf16", "fp16")
DEVICES = ("auto", "cpu", "cuda")
ADAMW_IMPLS = ("fused", "foreach", "loop")
OPTIMIZERS = ("adamw", "muon")  # train.optimizer's two that a benchmark times (blocklab/optimizers.py)
ATTN_IMPLS = ("sdpa", "fused", "materialized", "auto")  # see ModelConfig.attn_impl

# Short keys of --shape and the ModelConfig / batch field each one sets.
SHAPE_KEYS = {
    "d": "d_model",
    "heads": "n_heads",
    "ff": "d_ff",
    "T": "seq_len",
    "layers": "n_layers",
    "vocab": "vocab_size",
    "batch": "batch",
}
ALIASES = {
    "d_model": "d",
    "n_heads": "heads",
    "d_ff": "ff",
    "seq_len": "T",
    "n_layers": "layers",
    "vocab_size": "vocab",
    "batch_size": "batch",
}


@dataclass(frozen=True)
class Shape:
    """Model width and the batch of one training step. The default is the named shape cpu-target."""

    d_model: int = 768
    n_heads: int = 12
    d_ff: int = 3072
    seq_len: int = 128
    n_layers: int = 6
    vocab_size: int = 2048
    batch: int = 8

    @property
    def tokens(self) -> int:
        return self.batch * self.seq_len

    def spec(self) -> str:
        """The `--shape` string that reproduces this shape."""
        return ",".join(f"{k}={getattr(self, v)}" for k, v in SHAPE_KEYS.items())

    __str__ = spec  # how --help shows the default shape

    def model_config(self, block: str, attn_impl: str = "sdpa", seq_len: int | None = None):
        from blocklab import ModelConfig

        T = seq_len or self.seq_len
        return ModelConfig(
            block=block,
            task="clm",
            vocab_size=self.vocab_size,
            d_model=self.d_model,
            n_layers=self.n_layers,
            n_heads=self.n_heads,
            d_ff=self.d_ff,
            max_seq_len=T,
            attn_impl=attn_impl,
        )


# Named shapes accepted by --shape (and as the base that `key=value` pairs override).
SHAPES = {
    # A GPT-2-small-wide block that still times in seconds on a laptop CPU: d=768, 12 heads, MLP 3072, T=128,
    # 6 layers, vocab 2048, batch 8.
    "cpu-target": Shape(),
    "he-codeparrot": Shape(
        d_model=768, n_heads=12, d_ff=3072, seq_len=128, n_layers=18, vocab_size=50000, batch=128
    ),  # a GPU run at He & Hofmann's CodeParrot model shape (18 layers, d=768, 12 heads, MLP 3072)
    "tiny": Shape(d_model=64, n_heads=4, d_ff=256, seq_len=32, n_layers=2, vocab_size=256, batch=2),
}


def parse_shape(text: str) -> Shape:
    """`d=768,heads=12,ff=3072,T=128,layers=6,vocab=2048,batch=8`, a named shape, or `NAME,key=value,...`."""
    parts = [p.strip() for p in (text or "").split(",") if p.strip()]
    if not parts:
        raise UserError("--shape is empty; give key=value pairs such as d=768,heads=12,T=128")
    base = Shape()
    if "=" not in parts[0]:
        if parts[0] not in SHAPES:
            raise UserError(f"--shape: unknown named shape {parts[0]!r}; choose one of: {', '.join(SHAPES)}")
        base, parts = SHAPES[parts[0]], parts[1:]
    values = {}
    for part in parts:
        key, sep, raw = part.partition("=")
        key = key.strip()
        name = SHAPE_KEYS.get(ALIASES.get(key, key))
        if not sep or name is None:
            raise UserError(f"--shape: {part!r} is not key=value with a key among: {', '.join(SHAPE_KEYS)}")
        try:
            value = int(raw)
        except ValueError:
            raise UserError(f"--shape: {key}={raw!r} is not an integer") from None
        if value <= 0:
            raise UserError(f"--shape: {key}={value} must be positive")
        values[name] = value
    shape = replace(base, **values)
    if shape.d_model % shape.n_heads:
        raise UserError(f"--shape: d={shape.d_model} is not divisible by heads={shape.n_heads}")
    return shape


@dataclass(frozen=True)
class Variant:
    """One timed configuration: a block at a precision, eager or compiled, with an attention path."""

    # The block's name is checked where it is read (parse_blocks, parse_variants): listing the registry here
    # would import every block, and torch, for --help.
    block: str = setting(help="the block timed")
    precision: str = setting(
        "fp32",
        help="fp32, bf16 (autocast) or fp16 (autocast + GradScaler, CUDA only; refused on CPU)",
        choices=PRECISIONS,
        option="--precision",
    )
    compile: bool = setting(False, help="run the model through torch.compile instead of eagerly", option="--compile")
    attn_impl: str = setting(
        "sdpa",
        help="sdpa (SDPA + running mean), fused (the Triton kernel, CUDA), materialized (T x T matrix) "
        "or auto (the measured default of the device, see README)",
        choices=ATTN_IMPLS,
        option="--attn-impl",
    )
    optimizer: str = setting(
        "adamw",
        help="the optimizer each step ends with: adamw, or muon (torch.optim.Muon on the blocks' matrices and "
        "AdamW on the rest, as train.optimizer muon)",
        choices=OPTIMIZERS,
        option="--optimizer",
    )

    def __post_init__(self) -> None:
        validate(self)

    @property
    def label(self) -> str:
        extra = "" if self.attn_impl == "sdpa" else f" [{self.attn_impl}]"
        return f"{self.block} {self.mode}{extra}"

    @property
    def mode(self) -> str:
        """The block-independent part of the label: variants with equal modes are compared with each other."""
        muon = " muon" if self.optimizer == "muon" else ""
        return f"{self.precision} {'compile' if self.compile else 'eager'}{muon}"


@dataclass
class BenchConfig:
    shape: Shape = setting(
        default_factory=Shape,
        help="model and batch shape, see below; the default is the named shape cpu-target",
        option="--shape",
    )
    variants: list[Variant] = setting(
        default_factory=list,
        help="the timed variants: each block at a precision, eager or compiled, with an attention path",
    )
    device: str = setting("cpu", help="the device everything runs on (--device auto resolved)", choices=("cpu", "cuda"))
    # Each round times `steps` steps of every variant, in a rotating order.
    reps: int = setting(5, help="timed round-robin rounds", min=1, option="--reps")
    steps: int = setting(1, help="timed steps per block per round", unit="steps", min=1, option="--steps")
    warmup: int = setting(2, help="untimed steps per block before timing", unit="steps", min=0, option="--warmup")
    memory: bool = setting(True, help="measure each variant's peak memory, in a fresh process each")
    # Smaller than 16 the matmul times its overheads, not the machine's peak.
    peak_size: int | None = setting(
        None, help="n of the n x n matmul peak", derived="2048 on CPU, 8192 on CUDA", min=16, option="--peak-size"
    )
    scaling_T: list[int] = setting(
        default_factory=list,
        help="also measure forward+backward peak memory at these sequence lengths",
        unit="tokens",
        min=1,
        distinct=True,
        option="--memory-scaling",
    )
    scaling_blocks: list[str] = setting(
        default_factory=list,
        help="blocks of the memory scaling",
        derived="--blocks",
        distinct=True,
        option="--scaling-blocks",
    )
    scaling_impls: list[str] = setting(
        default_factory=lambda: ["sdpa", "materialized"],
        help=f"attention paths of the memory scaling, among: {', '.join(ATTN_IMPLS)}",
        choices=ATTN_IMPLS,
        nonempty=True,
        distinct=True,
        option="--scaling-impls",
    )
    scaling_precision: str = setting(
        "fp32", help="the memory scaling's precision", choices=PRECISIONS, option="--precision"
    )
    skip_steps: bool = setting(
        False, help="run only the memory scaling (no step timing, no peak)", option="--scaling-only"
    )
    reference: str = setting("pre-ln", help="block the ratios are taken against", option="--reference")
    adamw: str = setting(
        "fused",
        help="AdamW implementation: fused (one kernel; 4-7x faster than loop on CPU), foreach, or loop "
        "(PyTorch's CPU default)",
        choices=ADAMW_IMPLS,
        option="--adamw",
    )
    command: str | None = setting(
        None, help="the command line that produced this run, for the report", derived="none: built in Python"
    )

    def __post_init__(self) -> None:
        validate(self, "bench")
        labels = [v.label for v in self.variants]
        dup = sorted({x for x in labels if labels.count(x) > 1})
        if dup:
            raise ConfigError(f"variant {dup[0]!r} is listed twice (check --blocks, --extra and --vs-fp32-eager)")
        if not self.skip_steps and not self.variants:
            raise ConfigError("nothing to benchmark: no blocks given")
        if self.skip_steps and not self.scaling_T:
            raise ConfigError("--scaling-only needs --memory-scaling T1,T2,...")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["shape"] = asdict(self.shape) | {"spec": self.shape.spec()}
        return d


def parse_list(text: str, what: str) -> list[str]:
    items = [t.strip() for t in (text or "").split(",") if t.strip()]
    if not items:
        raise UserError(f"{what} is empty")
    dup = sorted({t for t in items if items.count(t) > 1})
    if dup:
        raise UserError(f"{what}: {dup[0]!r} is listed twice")
    return items


def parse_blocks(text: str) -> list[str]:
    from blocklab.blocks import REGISTRY

    blocks = parse_list(text, "--blocks")
    for b in blocks:
        if b not in REGISTRY:
            raise UserError(f"--blocks: unknown block {b!r}; choose among: {', '.join(REGISTRY)}")
    return blocks


def parse_variants(text: str) -> list[Variant]:
    """`pre-ln:bf16:compile,sas-p:fp32:muon` -> variants; tokens after the block: a precision, compile|eager,
    sdpa|fused|materialized|auto, adamw|muon, in any order (defaults fp32, eager, sdpa, adamw)."""
    from blocklab.blocks import REGISTRY

    out = []
    for item in parse_list(text, "--extra"):
        block, *tokens = item.split(":")
        if block not in REGISTRY:
            raise UserError(f"--extra: unknown block {block!r} in {item!r}; choose among: {', '.join(REGISTRY)}")
        kw: dict = {}
        for tok in tokens:
            if tok in PRECISIONS:
                kw["precision"] = tok
            elif tok in ("compile", "eager"):
                kw["compile"] = tok == "compile"
            elif tok in ATTN_IMPLS:
                kw["attn_impl"] = tok
            elif tok in OPTIMIZERS:
                kw["optimizer"] = tok
            else:
                raise UserError(
                    f"--extra: {tok!r} in {item!r} is not a precision ({', '.join(PRECISIONS)}), "
                    f"compile|eager, an attention path ({', '.join(ATTN_IMPLS)}) or an optimizer "
                    f"({', '.join(OPTIMIZERS)})"
                )
        out.append(Variant(block, **kw))
    return out


def parse_ints(text: str, what: str) -> list[int]:
    out = []
    for t in parse_list(text, what):
        try:
            v = int(t)
        except ValueError:
            raise UserError(f"{what}: {t!r} is not an integer") from None
        out.append(v)
    return out


def resolve_device(name: str) -> str:
    """`auto` -> cuda when available, else cpu; `cuda` without a GPU is a UserError."""
    import torch

    if name not in DEVICES:
        raise UserError(f"--device {name!r} is not valid; choose one of: {', '.join(DEVICES)}")
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda: no CUDA device is available (torch.cuda.is_available() is False)")
    return name


def check_precision(precision: str, device: str) -> None:
    import torch

    if precision == "fp16" and device == "cpu":
        raise UserError("--precision fp16 is refused on CPU (no fp16 autocast training there); use bf16 or fp32")
    if precision == "bf16" and device == "cuda" and not torch.cuda.is_bf16_supported():
        raise UserError("--precision bf16: this GPU does not support bfloat16; use fp16 or fp32")


def check_compile_available(device: str) -> None:
    """torch.compile's CPU backend writes C++: refuse early, in one line, when there is no compiler."""
    import shutil

    if device == "cpu" and not (shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")):
        raise UserError("--compile needs a C++ compiler on CPU (g++ or clang++); none was found on PATH")


def check_fused_available(impl: str, device: str) -> None:
    """The Triton kernel runs on CUDA (or, slowly, through TRITON_INTERPRET=1): refuse early, in one line."""
    if impl == "fused":
        import torch

        from blocklab.attention.fused import unavailable_reason

        why = unavailable_reason(
            torch.device("cuda" if device in ("cuda", "auto") and torch.cuda.is_available() else "cpu")
        )
        if why:
            raise UserError(why)


def check_device(cfg: BenchConfig) -> BenchConfig:
    """What this machine can run of a (valid) config: each precision on the device, a compiler for
    --compile, the fused kernel."""
    for v in cfg.variants:
        check_precision(v.precision, cfg.device)
        check_fused_available(v.attn_impl, cfg.device)
        if v.compile:
            check_compile_available(cfg.device)
    check_precision(cfg.scaling_precision, cfg.device)
    for impl in cfg.scaling_impls:
        check_fused_available(impl, cfg.device)
    return cfg
