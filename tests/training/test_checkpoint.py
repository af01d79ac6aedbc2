"""Checkpoints that a full disk or a cut copy damaged: the newest that verifies is used and the damaged one
named; --step picks an older one; the CUDA generators' state travels with the CPU's."""

import json

import pytest
import torch

from blocklab.errors import UserError
from blocklab.training import checkpoint as C
from blocklab.training.distributed import Dist
from blocklab.training.sharded import open_sharded


def _save(root, steps, keep=0):
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters())
    for step in steps:
        model.weight.data.fill_(step)
        C.save_checkpoint(root, step, model, opt, {"at": step}, keep)
    return model, opt


@pytest.fixture
def root(tmp_path):
    _save(tmp_path / "ckpt", [3, 6, 9])
    return tmp_path / "ckpt"


def _opened(root, **kw):
    lines = []
    ckpt = C.open_checkpoint(root, fallback=True, warn=lines.append, **kw)
    return ckpt["step"], lines


def test_an_intact_run_opens_its_latest_without_a_word(root):
    assert _opened(root) == (9, [])


@pytest.mark.parametrize("pointer", ["", "step-000", "step-00000042"])
def test_an_empty_or_cut_latest_pointer_gives_the_newest_checkpoint(root, pointer):
    (root / "latest").write_text(pointer)
    step, lines = _opened(root)
    assert step == 9 and len(lines) == 1
    assert str(root / "latest") in lines[0] and "step-00000009" in lines[0]
    with pytest.raises(UserError, match="latest is (empty|damaged)") as e:  # without fallback: one line
        C.open_checkpoint(root)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("damage", ["manifest", "truncate", "flip"])
def test_a_damaged_latest_checkpoint_gives_the_newest_that_verifies(root, damage):
    ckpt = root / "step-00000009"
    if damage == "manifest":
        (ckpt / "manifest.json").unlink()
    else:
        data = (ckpt / "model.safetensors").read_bytes()
        cut = data[: len(data) // 2] if damage == "truncate" else data[:-4] + bytes(4)
        (ckpt / "model.safetensors").write_bytes(cut)
    step, lines = _opened(root)
    assert step == 6 and len(lines) == 1
    assert "step-00000009 is" in lines[0] and "using the checkpoint of step 6" in lines[0]
    assert C.load_checkpoint(root, fallback=True, warn=lambda line: None)["model"]["weight"].eq(6).all()
    if damage == "manifest":
        with pytest.raises(UserError, match="incomplete: it has no manifest.json"):
            C.open_checkpoint(root)


def test_weights_that_cannot_be_read_count_as_damage_too(root, monkeypatch):
    real = C.load_file

    def load(path):
        if "step-00000009" in str(path):
            raise OSError(5, "Input/output error")
        return real(path)

    monkeypatch.setattr(C, "load_file", load)
    lines = []
    assert C.load_checkpoint(root, fallback=True, warn=lines.append)["step"] == 6
    assert "unreadable" in lines[0]


def test_when_none_verifies_one_line_names_each(root):
    for step in (3, 6, 9):
        (root / f"step-{step:08d}" / "state.json").write_text("{")
    with pytest.raises(UserError) as e:
        _opened(root)
    message = str(e.value)
    assert "\n" not in message and "can be used" in message
    assert all(f"step-{s:08d}" in message for s in (3, 6, 9))


def test_a_missing_step_names_the_steps_there_are(root):
    assert C.open_checkpoint(root, 6)["step"] == 6
    with pytest.raises(UserError, match=r"no checkpoint of step 4; it has: 3, 6, 9$"):
        C.open_checkpoint(root, 4)


def test_a_run_resumed_before_a_damaged_checkpoint_keeps_its_good_ones(tmp_path):
    root = tmp_path / "ckpt"
    _save(root, [5, 10, 20], keep=2)
    (root / "step-00000020" / "manifest.json").unlink()  # damaged: the run resumes from step 10
    (root / "latest").write_text("step-00000010")
    _save(root, [15], keep=2)
    assert C.checkpoint_steps(root) == [10, 15]  # not only 15 beside the damaged step 20


def test_processes_agree_on_the_checkpoint_they_fall_back_to(root):
    (root / "step-00000009" / "model.safetensors").write_bytes(b"cut")
    assert open_sharded(root, Dist(), fallback=True)["step"] == 6
    with pytest.raises(UserError, match="step-00000009 is corrupted"):
        open_sharded(root, Dist())


class FakeCuda:
    """CUDA as a GPU run leaves it: initialised, with a generator per device (here two)."""

    def __init__(self, monkeypatch, device=1):
        self.states = [torch.arange(16, dtype=torch.uint8) + 16 * i for i in range(2)]
        self.device, self.set = device, []
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: self.device)
        monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: [s.clone() for s in self.states])
        monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device: self.set.append((state, device)))


def test_the_cuda_generators_are_saved_and_restored(tmp_path, monkeypatch):
    cuda = FakeCuda(monkeypatch, device=1)
    _save(tmp_path / "ckpt", [1])
    ckpt = C.open_checkpoint(tmp_path / "ckpt")
    assert sorted(ckpt["cuda_rng"]) == [0, 1] and torch.equal(ckpt["cuda_rng"][1], cuda.states[1])
    C.restore_rng(ckpt)
    ((state, device),) = cuda.set  # the process's own device gets its saved state
    assert device == 1 and torch.equal(state, cuda.states[1])


def test_a_checkpoint_without_cuda_state_still_resumes(tmp_path, monkeypatch):
    _save(tmp_path / "ckpt", [1])  # a CPU run: CUDA never initialised, nothing of it saved
    root = tmp_path / "ckpt"
    ckpt = C.open_checkpoint(root)
    assert ckpt["cuda_rng"] == {} and "cuda_device" not in json.loads((ckpt["path"] / "state.json").read_text())["rng"]
    cuda = FakeCuda(monkeypatch)
    C.restore_rng(ckpt)
    assert cuda.set == []
    del ckpt["cuda_rng"]  # as an older version's open_checkpoint gave it
    C.restore_rng(ckpt)
