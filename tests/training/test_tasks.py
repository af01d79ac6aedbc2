"""Each task's loss terms on a tiny batch: the summed token loss and the number of loss tokens."""

import contextlib

import pytest
import torch
import torch.nn.functional as F

from blocklab import build_model
from blocklab.errors import UserError
from blocklab.tokens import IGNORE_INDEX
from blocklab.training import load_config
from blocklab.training.tasks import TASKS, get_task
from blocklab.training.tasks.lm import CausalLM, MaskedLM
from blocklab.training.tasks.translation import Translation

CPU = torch.device("cpu")
SMALL = {
    "d_model": 32,
    "n_layers": 2,
    "n_heads": 2,
    "d_ff": 64,
    "vocab_size": 300,
    "max_seq_len": 16,
    "block": "pre-ln",
}


def run_cfg(task, **train):
    return load_config(
        None, {"model": {**SMALL, "task": task}, "data": {"vocab_size": 300, "seq_len": 16}, "train": train}
    )


def reference(logits, labels, smoothing=0.0):
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).double(),
        labels.reshape(-1),
        ignore_index=IGNORE_INDEX,
        reduction="sum",
        label_smoothing=smoothing,
    )


def test_the_registry_names_every_task_and_refuses_others():
    assert {"clm": CausalLM, "mlm": MaskedLM, "translation": Translation}.items() <= TASKS.items()
    assert isinstance(get_task(run_cfg("mlm")), MaskedLM)
    cfg = run_cfg("clm")
    cfg.model.task = "no-such-task"
    with pytest.raises(UserError, match="no-such-task"):
        get_task(cfg)


def test_clm_loss_terms_sum_over_every_label():
    task = get_task(run_cfg("clm"))
    torch.manual_seed(0)
    model = task.build_model().eval()
    ids = torch.randint(4, 300, (2, 6))
    labels = torch.roll(ids, -1, 1)
    loss_sum, n = task.loss(model, (ids, labels), CPU, contextlib.nullcontext)
    assert n.item() == 12
    torch.testing.assert_close(loss_sum.double(), reference(model(ids).logits, labels), rtol=1e-5, atol=1e-5)


def test_mlm_loss_terms_count_only_the_masked_positions():
    task = get_task(run_cfg("mlm"))
    torch.manual_seed(0)
    model = task.build_model().eval()
    ids = torch.randint(4, 300, (2, 6))
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[0, 1], labels[0, 4], labels[1, 2] = 7, 9, 11
    loss_sum, n = task.loss(model, (ids, labels, mask), CPU, contextlib.nullcontext)
    assert n.item() == 3
    logits = model(ids, attention_mask=mask).logits
    torch.testing.assert_close(loss_sum.double(), reference(logits, labels), rtol=1e-5, atol=1e-5)


def test_translation_loss_terms_smooth_labels_in_training_only():
    task = get_task(run_cfg("translation", label_smoothing=0.1))
    torch.manual_seed(0)
    model = task.build_model()
    src = torch.randint(4, 300, (2, 5))
    src_mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    dec = torch.randint(4, 300, (2, 4))
    labels = torch.randint(4, 300, (2, 4))
    labels[1, 3] = IGNORE_INDEX
    batch = (src, src_mask, dec, labels)
    logits = model.eval()(src, src_mask, decoder_input_ids=dec).logits
    eval_sum, n = task.loss(model, batch, CPU, contextlib.nullcontext)
    assert n.item() == 7
    torch.testing.assert_close(eval_sum.double(), reference(logits, labels), rtol=1e-5, atol=1e-5)
    train_sum, _ = task.loss(model.train(), batch, CPU, contextlib.nullcontext)  # dropout 0: same logits
    torch.testing.assert_close(train_sum.double(), reference(logits, labels, 0.1), rtol=1e-5, atol=1e-5)


def test_translation_counts_decoder_self_and_cross_attention():
    task = get_task(run_cfg("translation"))
    model = build_model(task.cfg.model)
    assert task.attention_layers(model) == 2 + 2 * 2
    assert CausalLM(run_cfg("clm")).attention_layers(build_model(run_cfg("clm").model)) == 2


def test_the_autocast_context_wraps_the_forward_pass():
    entered = []

    @contextlib.contextmanager
    def autocast():
        entered.append(True)
        yield

    task = get_task(run_cfg("clm"))
    model = task.build_model().eval()
    ids = torch.randint(4, 300, (1, 4))
    task.loss(model, (ids, ids), CPU, autocast)
    assert entered == [True]


def test_every_model_task_has_a_training_task_and_back():
    """The task names live in blocklab.registry.TASKS (what a model can be built for); the trainer's
    TASKS maps each to its Task class. A task added to one and not the other fails here."""
    from blocklab.registry import TASKS as MODEL_TASKS
    from blocklab.training.tasks import TASKS as TRAINING_TASKS

    assert set(TRAINING_TASKS) == set(MODEL_TASKS)
