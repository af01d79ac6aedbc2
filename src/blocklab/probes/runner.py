"""The init probes as `blocklab probe` and a sweep's [probes] table run them: options, data, device, output.

`add_arguments(parser)` declares the options (a sweep's [probes] table uses the same names),
`run(args)` validates them, prepares the batches (`make_batches`), runs `run_init_probes`, writes
probes.json and the figures and prints the summary table; `run_options(argv)` does both for a list
of option strings. Bad input is a UserError, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys

from blocklab.config import NORMS, ModelConfig
from blocklab.errors import UserError
from blocklab.registry import PUBLIC_BLOCKS, REGISTRY
from blocklab.tokens import MASK_ID, PAD_ID

# torch and the probes themselves are imported where they run: the options and their errors answer at once.
BLOCKS = tuple(PUBLIC_BLOCKS)
DEFAULT_BLOCKS = "post-ln,pre-ln,sas,sas-p"
DEFAULT_DEPTHS = "2,4,8,16,32"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of `blocklab probe`, with their defaults and help."""
    D = " (default: %(default)s)"
    p.add_argument("--out", required=True, metavar="DIR", help="output folder for probes.json and the figures")
    p.add_argument("--overwrite", action="store_true", help="replace a probes.json already in DIR (default: refuse)")
    p.add_argument("--blocks", default=DEFAULT_BLOCKS, help=f"comma-separated blocks among {', '.join(BLOCKS)}" + D)
    p.add_argument("--depths", default=DEFAULT_DEPTHS, help="comma-separated depths (numbers of blocks)" + D)
    p.add_argument("--seeds", type=int, default=3, help="model initialisations per block and depth (seeds 0..N-1)" + D)
    p.add_argument("--batches", type=int, default=2, help="batches per model (the same batches for every model)" + D)
    p.add_argument(
        "--ablation",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also probe `softmax-noskip` (plain softmax attention, no skip): the rank-collapse ablation (default: on)",
    )
    m = p.add_argument_group("model (shared by every block and depth)")
    m.add_argument("--d-model", type=int, default=256, help="width d" + D)
    m.add_argument("--n-heads", type=int, default=4, help="attention heads" + D)
    m.add_argument("--d-ff", type=int, default=1024, help="MLP hidden width" + D)
    m.add_argument(
        "--init",
        choices=("normal", "xavier"),
        default="normal",
        help="normal: std 0.02 (He & Hofmann); xavier: fairseq's Xavier-uniform (query/key/value at gain 1/sqrt(2)), sqrt(d)-scaled embeddings (Xiong et al.)"
        + D,
    )
    m.add_argument(
        "--norm",
        choices=NORMS,
        default="rmsnorm",
        help="normalisation layer (dyt: Dynamic Tanh, derf: Dynamic erf, in place of every norm)" + D,
    )
    m.add_argument("--qk-norm", action="store_true", help="RMSNorm on each head's queries and keys (default: off)")
    m.add_argument("--activation", choices=("relu", "gelu"), default="relu", help="MLP activation" + D)
    m.add_argument(
        "--beta-ff",
        type=float,
        default=None,
        help="beta_FF of the blocks that have one (default: each block's own, 0.1)",
    )
    m.add_argument(
        "--task", choices=("clm", "mlm"), default="clm", help="causal LM (decoder) or masked LM (encoder)" + D
    )
    d = p.add_argument_group("data")
    d.add_argument(
        "--data",
        default="stdlib",
        metavar="stdlib|random|PATH",
        help="text for the batches: the Python standard library, uniformly random tokens, or a corpus "
        "(text file, folder or .jsonl) tokenised by blocklab.data; failing data is an error, never a "
        "fallback" + D,
    )
    d.add_argument("--vocab-size", type=int, default=8192, help="tokenizer vocabulary (the corpus may yield fewer)" + D)
    d.add_argument("--seq-len", type=int, default=128, help="tokens per sequence" + D)
    d.add_argument("--batch-size", type=int, default=8, help="sequences per batch" + D)
    p.add_argument("--device", default="auto", help="auto (cuda when available), cpu, cuda or cuda:N" + D)
    p.add_argument("--no-progress", action="store_true", help="no progress bar (it is off anyway when not a terminal)")


# Options that say where and how the probes run, not what they measure: left out of probes.json's `options`.
RUN_ONLY = ("out", "overwrite", "no_progress")


def options_of(args: argparse.Namespace) -> dict:
    """What the probes measure, as probes.json's settings record it (`options`): every option but RUN_ONLY, so
    that a sweep keeps a stored probes.json only when it asks for the same measurement."""
    own = set(vars(parse_options(["--out", "."]))) - set(RUN_ONLY)  # not what the command line adds (its func)
    return {k: v for k, v in sorted(vars(args).items()) if k in own}


def parse_options(argv: list[str]) -> argparse.Namespace:
    """`blocklab probe`'s options from strings (a bad one exits as argparse does, naming `blocklab probe`)."""
    parser = argparse.ArgumentParser(prog="blocklab probe")
    add_arguments(parser)
    return parser.parse_args(argv)


def run_options(argv: list[str]) -> int:
    """`blocklab probe ARGV` without the command line around it: 0, or a UserError."""
    return run(parse_options(argv))


def parse_blocks(text: str) -> list[str]:
    names = [b.strip() for b in str(text).split(",") if b.strip()]
    if not names:
        raise UserError(f"--blocks {text!r} names no block; choose among: {', '.join(BLOCKS)}")
    for b in names:
        if b not in REGISTRY:
            raise UserError(
                f"--blocks: unknown block {b!r}; choose among: {', '.join(BLOCKS)} (ablation: softmax-noskip)"
            )
    return list(dict.fromkeys(names))


def parse_depths(text: str) -> list[int]:
    parts = [x.strip() for x in str(text).split(",") if x.strip()]
    if not parts:
        raise UserError(f"--depths {text!r} names no depth; give positive integers such as 2,4,8")
    depths = []
    for x in parts:
        try:
            L = int(x)
        except ValueError:
            L = 0
        if L < 1:
            raise UserError(f"--depths: {x!r} is not a positive integer; give a list such as 2,4,8,16,32")
        depths.append(L)
    return sorted(set(depths))


def _positive(name: str, value: int) -> None:
    if value < 1:
        raise UserError(f"--{name} {value} is not valid; it must be a positive integer")


def make_batches(args, log):
    """(batches, vocab_size, description) for `--data`; any failure is a UserError, never a silent fallback."""
    import torch

    from blocklab.probes.init_probes import random_batches

    if args.data == "random":
        if args.task == "clm":
            return random_batches(args.vocab_size, args.seq_len, args.batch_size), args.vocab_size, {"data": "random"}
        from blocklab.data import mask_tokens

        specials = (PAD_ID, MASK_ID)  # kept out of the random text

        def get(i):
            g = torch.Generator().manual_seed(1_000_003 + i)
            ids = torch.randint(max(specials) + 1, args.vocab_size, (args.batch_size, args.seq_len), generator=g)
            return mask_tokens(ids, None, 0.15, MASK_ID, args.vocab_size, specials, g)

        return get, args.vocab_size, {"data": "random"}
    try:
        from blocklab.data import ClmBatches, DataConfig, MlmBatches, prepare

        corpus = prepare(DataConfig(source=args.data, vocab_size=args.vocab_size, seq_len=args.seq_len), log=log)
        if args.task == "clm":
            batches = ClmBatches(corpus.train, args.seq_len, args.batch_size, seed=0)
        else:
            batches = MlmBatches(
                corpus.train,
                corpus.train_doc_starts,
                args.seq_len,
                args.batch_size,
                0,
                0.15,
                corpus.mask_id,
                corpus.pad_id,
                corpus.vocab_size,
                corpus.special_ids,
            )
    except UserError:
        raise
    except (ImportError, OSError, ValueError, RuntimeError) as e:
        raise UserError(f"could not prepare --data {args.data!r}: {e}") from e
    info = {"data": args.data, "data_tokens_train": int(len(corpus.train)), "data_vocab_size": corpus.vocab_size}
    return batches, corpus.vocab_size, info


def run(args) -> int:
    """`blocklab probe` on parsed options: 0 once probes.json, the figures and the table are written."""
    import torch

    from blocklab.probes.init_probes import format_table, run_init_probes
    from blocklab.probes.plots import plot_all

    blocks = parse_blocks(args.blocks)
    depths = parse_depths(args.depths)
    for name in ("seeds", "batches", "d_model", "n_heads", "d_ff", "vocab_size", "seq_len", "batch_size"):
        _positive(name.replace("_", "-"), getattr(args, name))
    out = os.fspath(args.out)
    if os.path.exists(out) and not os.path.isdir(out):
        raise UserError(f"--out {out!r} exists and is not a folder")
    if os.path.exists(os.path.join(out, "probes.json")) and not args.overwrite:
        raise UserError(f"{out!r} already holds probes.json; pass --overwrite to replace it or choose another --out")

    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(device)
    except RuntimeError as e:
        raise UserError(f"--device {args.device!r} is not valid: {e}") from e
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"--device {args.device!r}: CUDA is not available on this machine")

    model = dict(
        d_model=args.d_model,
        n_heads=args.n_heads,
        d_ff=args.d_ff,
        init=args.init,
        norm=args.norm,
        activation=args.activation,
        task=args.task,
        max_seq_len=args.seq_len,
        qk_norm=args.qk_norm,
    )
    try:  # shapes and options checked, for every block, before any data is prepared
        for block in blocks:
            ModelConfig(block=block, n_layers=1, vocab_size=args.vocab_size, **model)
    except ValueError as e:
        raise UserError(str(e)) from e
    if args.beta_ff is not None:
        model["beta_ff"] = args.beta_ff
        without = [b for b in blocks if _block_default(b, "beta_ff") is None]
        if without:
            raise UserError(f"--beta-ff does not apply to {', '.join(without)}; probe those blocks separately")

    def log(msg):
        print(msg, file=sys.stderr)

    batches, vocab, info = make_batches(args, log)
    info["options"] = options_of(args)
    model["vocab_size"] = vocab
    result = run_init_probes(
        blocks,
        depths,
        batches,
        model=model,
        seeds=args.seeds,
        n_batches=args.batches,
        ablation=args.ablation,
        device=device,
        progress=False if args.no_progress else None,
        settings=info,
        out=out,
    )
    figures = {k: v for k, v in plot_all(result, out).items() if v}
    print(format_table(result))
    print(
        f"wrote {os.path.join(out, 'probes.json')} and {len(figures)} figures: "
        + ", ".join(os.path.basename(p) for p in figures.values())
    )
    return 0


def _block_default(block: str, name: str):
    return getattr(REGISTRY[block], name)
