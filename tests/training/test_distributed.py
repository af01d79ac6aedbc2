"""Rank-to-device mapping under torchrun: one GPU per local rank, and a clear line when there are too few."""

import pytest

from blocklab.errors import UserError
from blocklab.training import distributed


def test_ranks_within_the_gpu_count_are_accepted():
    """Every rank below the GPU count passes; the first one past it, and any rank on no GPU, does not."""
    assert [distributed.check_gpus(rank, 4, 4) for rank in range(4)] == [None] * 4
    assert distributed.check_gpus(0, 1, 1) is None
    for args in ((4, 5, 4), (1, 2, 1), (0, 1, 0)):
        with pytest.raises(UserError):
            distributed.check_gpus(*args)


def test_more_ranks_than_gpus_is_one_clear_line():
    with pytest.raises(UserError, match=r"2 processes.*1 GPU.*--nproc_per_node=1"):
        distributed.check_gpus(1, 2, 1)


def test_cuda_without_gpu_is_a_user_error(monkeypatch):
    monkeypatch.setattr(distributed.torch.cuda, "device_count", lambda: 0)
    monkeypatch.setenv("LOCAL_RANK", "0")
    with pytest.raises(UserError, match="no CUDA GPU"):
        distributed.setup("cuda")


def test_auto_maps_local_rank_to_its_gpu(monkeypatch):
    """Rank 1 of 2 on a 2-GPU machine gets cuda:1 (set_device is the only CUDA call made)."""
    picked = []
    monkeypatch.setattr(distributed.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(distributed.torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(distributed.torch.cuda, "set_device", picked.append)
    monkeypatch.setattr(distributed.dist, "init_process_group", lambda **kw: None)
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: False)
    for k, v in dict(WORLD_SIZE="2", RANK="1", LOCAL_RANK="1", LOCAL_WORLD_SIZE="2").items():
        monkeypatch.setenv(k, v)
    d = distributed.setup("auto")
    assert str(d.device) == "cuda:1" and [str(p) for p in picked] == ["cuda:1"]
    monkeypatch.setattr(distributed.torch.cuda, "device_count", lambda: 1)
    with pytest.raises(UserError, match="--nproc_per_node=1"):
        distributed.setup("auto")
