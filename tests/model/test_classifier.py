"""The classification model: pooling over padding, the head's losses, the encoder's parameter names."""

import pytest
import torch

from blocklab import build_model
from blocklab.model.classifier import HEAD, Classifier
from tests.helpers import randomize, small_cfg


@pytest.mark.parametrize("pooling", ["first", "mean"])
@pytest.mark.parametrize("block", ["pre-ln", "sas-p", "post-ln"])
def test_padding_does_not_change_the_logits(block, pooling):
    model = randomize(build_model(small_cfg(block, task="classification", pooling=pooling, n_labels=3))).eval()
    ids = torch.randint(3, 97, (1, 10))
    padded = torch.cat([ids, torch.zeros(1, 6, dtype=torch.long)], 1)
    mask = torch.cat([torch.ones(1, 10), torch.zeros(1, 6)], 1).long()
    alone = model(ids).logits
    with_pad = model(padded, attention_mask=mask).logits
    torch.testing.assert_close(with_pad, alone, atol=1e-5, rtol=1e-5)
    # ... and the padding is really there: without the mask the padded row gives other logits.
    assert not torch.allclose(model(padded).logits, alone, atol=1e-4)


def test_the_encoder_is_bidirectional_and_first_pooling_reads_position_zero():
    model = randomize(build_model(small_cfg("pre-ln", task="classification"))).eval()
    ids = torch.randint(3, 97, (1, 8))
    later = ids.clone()
    later[0, -1] = (ids[0, -1] + 1) % 97
    # The first position sees the last token: a causal model would give equal logits.
    assert not torch.allclose(model(ids).logits, model(later).logits)


def test_losses_cross_entropy_and_regression():
    torch.manual_seed(0)
    cls = randomize(build_model(small_cfg("sas", task="classification", n_labels=4))).eval()
    ids, y = torch.randint(3, 97, (5, 7)), torch.tensor([0, 1, 2, 3, 1])
    out = cls(ids, labels=y, loss_reduction="sum")
    assert out.logits.shape == (5, 4)
    torch.testing.assert_close(out.loss, torch.nn.functional.cross_entropy(out.logits, y, reduction="sum"))
    reg = randomize(build_model(small_cfg("sas", task="classification", n_labels=1))).eval()
    t = torch.randn(5)
    out = reg(ids, labels=t)
    assert out.logits.shape == (5, 1)
    torch.testing.assert_close(out.loss, ((out.logits.squeeze(-1) - t) ** 2).mean())


@pytest.mark.parametrize("block", ["pre-ln", "sas-p-nonorm", "parallel"])
def test_an_mlm_encoder_fits_the_classifier_by_name(block):
    """Fine-tuning copies an mlm run's weights by name: every classifier parameter but the head must
    exist, with its shape, in the language model."""
    lm = build_model(small_cfg(block, task="mlm")).state_dict()
    cls = build_model(small_cfg(block, task="classification")).state_dict()
    encoder = {k: v.shape for k, v in cls.items() if not k.startswith(HEAD)}
    assert encoder and all(k in lm and lm[k].shape == s for k, s in encoder.items())
    assert {k for k in cls if k.startswith(HEAD)} == {
        "pooler.weight",
        "pooler.bias",
        "classifier.weight",
        "classifier.bias",
    }


def test_config_validates_the_classification_fields():
    assert isinstance(build_model(small_cfg(task="classification")), Classifier)
    with pytest.raises(ValueError, match="pooling"):
        small_cfg(task="classification", pooling="max")
    with pytest.raises(ValueError, match="n_labels"):
        small_cfg(task="classification", n_labels=0)
