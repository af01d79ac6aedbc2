"""FSDP's meta-device build (training/materialise.py) and train.fsdp_grad_sync.

In this process: every block's model built with its blocks on the meta device, then built block by block,
equals the one-process build bit for bit and leaves torch's generator where it leaves it. Under torchrun (gloo,
2 processes, one start): the same for the sharded models, gathered whole, with the most parameters a process
held at once; then `blocklab train` runs: FSDP (meta build) against DDP, and grad_accum 2 under each
train.fsdp_grad_sync against one batch (test_fsdp.train_together)."""

import inspect

import pytest
import torch

from blocklab import build_model
from blocklab.config import ModelConfig
from blocklab.errors import UserError
from blocklab.registry import REGISTRY
from blocklab.training import load_config, materialise
from blocklab.training.checkpoint import load_checkpoint
from blocklab.training.config import TrainConfig
from blocklab.training.parallel import SYNC_EVERY, gradient_sync
from tests.training.test_fsdp import base_overrides, losses, ok, summary, train_args, train_together

# (task, block) pairs: every block as a language model, every block with a decoder as a translation model, and
# a classifier; dropout where the block has it (Admin's profiling pass runs with it).
CASES = (
    [("clm", name) for name in sorted(REGISTRY)]
    + [("translation", name) for name in sorted(REGISTRY) if REGISTRY[name].decoder is not None]
    + [("classification", "pre-ln"), ("mlm", "admin")]
)


def case_cfg(task: str, block: str) -> ModelConfig:
    extra = {"dropout": 0.1} if REGISTRY[block].dropout else {}
    if task == "classification":
        extra["n_labels"] = 3
    return ModelConfig(
        block=block, task=task, vocab_size=61, d_model=32, n_layers=4, n_heads=4, d_ff=64, max_seq_len=12, **extra
    )


def assert_meta_build_is_the_one_process_build(cfg: ModelConfig, label: str) -> None:
    torch.manual_seed(3)
    ref = build_model(cfg)
    after_ref = torch.get_rng_state()
    torch.manual_seed(3)
    model = materialise.build(lambda: build_model(cfg))
    assert torch.equal(torch.get_rng_state(), after_ref), label  # dropout and the rest see the same stream
    assert all(p.is_meta for p in model.blocks.parameters()), label
    for blk in model.blocks:
        materialise.realise(model, blk)
    assert torch.equal(torch.get_rng_state(), after_ref), label
    a, b = ref.state_dict(), model.state_dict()
    assert a.keys() == b.keys(), label
    assert [k for k in a if not torch.equal(a[k], b[k])] == [], label


@pytest.mark.parametrize("task", ["clm", "translation", "classification", "mlm"])
def test_meta_build_equals_the_one_process_build_bit_for_bit(task):
    for t, block in CASES:
        if t == task:
            assert_meta_build_is_the_one_process_build(case_cfg(t, block), block)


def test_canon_layers_draw_in_the_meta_build_as_in_the_one_process_build():
    """Canon's convolutions are drawn by their constructors (not by init_weights): the deferred build draws them
    as the one-process build does."""
    for block in ("pre-ln", "normformer"):
        cfg = ModelConfig(block=block, vocab_size=61, d_model=32, n_layers=3, n_heads=4, d_ff=64, canon="ABCD")
        assert_meta_build_is_the_one_process_build(cfg, block)


def test_realise_builds_a_block_into_its_place_the_same_objects():
    cfg = case_cfg("clm", "admin")
    torch.manual_seed(0)
    model = materialise.build(lambda: build_model(cfg))
    block = model.blocks[1]
    forward = block.forward
    materialise.realise(model, block)
    assert model.blocks[1] is block and block.forward == forward and not any(p.is_meta for p in block.parameters())
    before = [p.clone() for p in block.parameters()]
    materialise.realise(model, block)  # built already: nothing happens
    assert all(torch.equal(p, q) for p, q in zip(block.parameters(), before))
    materialise.realise(build_model(cfg), model.blocks[0])  # not that model's block: nothing
    assert all(p.is_meta for p in model.blocks[0].parameters())


def test_only_token_models_are_built_so():
    with pytest.raises(TypeError, match="builds token models"):
        materialise.build(lambda: torch.nn.Linear(2, 2))


def test_an_after_update_hook_that_draws_is_refused(monkeypatch):
    from blocklab.blocks.hooks import ModelHooks

    monkeypatch.setattr(ModelHooks, "after_update", lambda self, model: torch.rand(1))
    with pytest.raises(RuntimeError, match="after_update hook draws random numbers"):
        materialise.build(lambda: build_model(case_cfg("clm", "pre-ln")))


def test_fsdp_grad_sync_is_declared_with_its_choices():
    assert TrainConfig().fsdp_grad_sync in ("every", "last")
    assert TrainConfig(fsdp_grad_sync="last").fsdp_grad_sync == "last"
    with pytest.raises(UserError, match="train.fsdp_grad_sync"):
        load_config(None, ["--train.fsdp_grad_sync", "sometimes"])


@pytest.mark.parametrize("every", [False, True])
def test_gradient_sync_every_reduces_each_micro_batch(every):
    class FakeFSDP(torch.nn.Module):  # what gradient_sync sees of an FSDPModule
        def set_requires_gradient_sync(self, value):
            self.sync = value

    m = FakeFSDP()
    if every:
        SYNC_EVERY.add(m)
    with gradient_sync(m, sync=False):
        assert m.sync is every
    with gradient_sync(m, sync=True):
        assert m.sync is True


# --- under torchrun ------------------------------------------------------------------------------------------

SHARDED = r"""
import torch
import blocklab.blocks
from blocklab import build_model
from blocklab.registry import REGISTRY
from blocklab.config import ModelConfig
from blocklab.training import distributed, materialise, parallel
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

CASES = CASES_HERE
CASE_CFG

d = distributed.setup("cpu")
for task, block in CASES:
    cfg = case_cfg(task, block)
    torch.manual_seed(5)
    ref = build_model(cfg)
    after_ref = torch.get_rng_state()
    torch.manual_seed(5)
    model = materialise.build(lambda: build_model(cfg))
    parallel.scalars_as_vectors(model)
    parallel.shard(model, "fp32")
    same_rng = torch.equal(torch.get_rng_state(), after_ref)
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    want = ref.state_dict()
    diff = [k for k in want if k not in full or not torch.equal(full[k].reshape(want[k].shape), want[k])]
    blocks = [sum(p.numel() for p in b.parameters()) for b in ref.blocks]
    total = sum(p.numel() for p in ref.parameters())
    # the root and one block whole, the shards of the blocks sharded before it (gloo: 2 processes)
    bound = total - sum(blocks) + max(blocks) + sum(blocks) // 2 + 4 * len(list(ref.blocks.parameters()))
    row = f"{task} {block} {int(not diff and same_rng)} {materialise.peak_params(model)} {bound} {total} "
    rows = [None] * d.world_size
    torch.distributed.all_gather_object(rows, row + (",".join(diff[:3]) or "-"))
    if d.main:
        print("".join(f"meta {rank} {r}\n" for rank, r in enumerate(rows)), end="", flush=True)

# What a process holds after the first of 2 micro-batches under each train.fsdp_grad_sync: "every" has
# reduce-scattered it (a shard of the gradient on each sharded parameter), "last" holds it whole, unreduced, in
# FSDP's unsharded parameters (none on the sharded ones yet); after the last, both hold their shard.
ids = torch.randint(0, 61, (4, 12), generator=torch.Generator().manual_seed(d.rank))
for mode in ("every", "last"):
    torch.manual_seed(5)
    model = materialise.build(lambda: build_model(case_cfg("clm", "pre-ln")))
    parallel.shard(model, "fp32", mode)
    held = []
    for i, part in enumerate(ids.split(2)):
        with parallel.gradient_sync(model, sync=i == 1):
            model(part, labels=part).loss.backward()
        held.append(all(p.grad is not None for p in model.blocks.parameters()))
    if d.main:
        print(f"sync {mode} {int(model in parallel.SYNC_EVERY)} {int(held[0])} {int(held[1])}", flush=True)
"""


@pytest.fixture(scope="module")
def meta(tmp_path_factory, corpus_dir):
    """One torchrun start: every case's sharded build (on stdout), then fsdp (meta build), ddp and grad_accum 2
    under each train.fsdp_grad_sync."""
    root = tmp_path_factory.mktemp("fsdp-meta")
    over = base_overrides(corpus_dir)
    over["train"].update(steps=8, checkpoint_every=8, eval_every=8)
    over["model"].update(n_layers=3)
    fsdp = ["--train.parallel", "fsdp"]
    runs = {
        "fsdp": fsdp,
        "ddp": [],
        "every": fsdp + ["--train.grad_accum", "2", "--train.fsdp_grad_sync", "every"],
        "last": fsdp + ["--train.grad_accum", "2", "--train.fsdp_grad_sync", "last"],
    }
    prelude = SHARDED.replace("CASES_HERE", repr(CASES)).replace("CASE_CFG", inspect.getsource(case_cfg))
    p, _ = train_together([train_args(root / name, over, extra) for name, extra in runs.items()], prelude=prelude)
    ok(p)
    return root, p


@pytest.mark.slow
def test_sharded_meta_build_equals_the_one_process_build_and_never_holds_the_whole_model(meta):
    _, p = meta
    rows = [line.split() for line in p.stdout.splitlines() if line.startswith("meta ")]
    assert len(rows) == 2 * len(CASES)  # both processes, every case
    bad = [r for r in rows if r[4] != "1"]
    assert bad == []
    for _, rank, task, block, _, peak, bound, total, _ in rows:
        assert int(peak) <= int(bound) < int(total), (rank, task, block)


@pytest.mark.slow
def test_fsdp_grad_sync_every_reduces_each_micro_batch_and_last_only_the_last(meta):
    _, p = meta
    held = {line.split()[1]: line.split()[2:] for line in p.stdout.splitlines() if line.startswith("sync ")}
    assert held == {"every": ["1", "1", "1"], "last": ["0", "0", "1"]}


@pytest.mark.slow
def test_fsdp_with_meta_build_trains_like_ddp(meta):
    root, _ = meta
    fsdp, ddp = losses(root / "fsdp"), losses(root / "ddp")
    assert summary(root / "fsdp")["parallel"] == "fsdp" and summary(root / "ddp")["parallel"] == "ddp"
    assert fsdp[0] == ddp[0]  # the same initial weights, the same batch: the same first loss, bit for bit
    assert fsdp == pytest.approx(ddp, rel=1e-5) and fsdp[-1] < fsdp[0] - 0.1


@pytest.mark.slow
@pytest.mark.parametrize("sync", ["every", "last"])
def test_grad_accum_under_each_fsdp_grad_sync_makes_one_batchs_update(meta, sync):
    root, _ = meta
    assert losses(root / sync) == pytest.approx(losses(root / "fsdp"), rel=1e-5)
    a = load_checkpoint(root / sync / "checkpoints")["model"]
    b = load_checkpoint(root / "fsdp" / "checkpoints")["model"]
    for k in b:
        assert torch.allclose(a[k], b[k], rtol=1e-4, atol=1e-6), k
