"""The encoder-decoder (task="translation"): causality, padding, cross-attention, KV cache, beam search."""

import pytest
import torch

from blocklab import ModelConfig, build_model
from blocklab.model.base import padding_mask
from blocklab.model.beam import beam_search
from blocklab.model.seq2seq import EOS_ID, MASK_ID, PAD_ID, Seq2Seq
from tests.helpers import randomize, small_cfg

BLOCKS = ("post-ln", "pre-ln")
V = 97


def model_for(block, seed=0, **kw):
    m = build_model(small_cfg(block, "translation", max_seq_len=32, **kw))
    return randomize(m, seed).eval()


def ids(B, T, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, V, (B, T), generator=g)


@pytest.mark.parametrize("block", BLOCKS)
def test_shapes_tied_embeddings_and_the_decoder_depth(block):
    m = build_model(small_cfg(block, "translation", n_decoder_layers=2))
    assert isinstance(m, Seq2Seq) and len(m.blocks) == 3 and len(m.decoder_blocks) == 2
    out = m(ids(2, 7, 0), decoder_input_ids=ids(2, 5, 1), labels=ids(2, 5, 2))
    assert out.logits.shape == (2, 5, V) and out.loss.ndim == 0
    assert m.head_weight is m.tok.weight  # source, target and output share one matrix
    # Post-LN ends each stack with a block's own norm; Pre-LN adds a final norm to each.
    assert isinstance(m.encoder_norm, torch.nn.Identity) == (block == "post-ln")


@pytest.mark.parametrize("block", BLOCKS)
def test_decoder_is_causal(block):
    m = model_for(block)
    src, tgt = ids(2, 6, 0), ids(2, 8, 1)
    ref = m(src, decoder_input_ids=tgt).logits
    changed = tgt.clone()
    changed[:, 5:] = ids(2, 3, 9)
    out = m(src, decoder_input_ids=changed).logits
    torch.testing.assert_close(out[:, :5], ref[:, :5])
    assert not torch.allclose(out[:, 5:], ref[:, 5:])


@pytest.mark.parametrize("block", BLOCKS)
def test_source_padding_changes_nothing(block):
    m = model_for(block)
    src, tgt = ids(2, 6, 0), ids(2, 7, 1)
    ref = m(src, decoder_input_ids=tgt).logits
    padded = torch.cat([src, torch.full((2, 4), PAD_ID)], 1)
    mask = torch.cat([torch.ones(2, 6, dtype=torch.long), torch.zeros(2, 4, dtype=torch.long)], 1)
    torch.testing.assert_close(m(padded, mask, decoder_input_ids=tgt).logits, ref)
    # ... whatever the padded positions hold
    padded[:, 6:] = ids(2, 4, 5)
    torch.testing.assert_close(m(padded, mask, decoder_input_ids=tgt).logits, ref)


@pytest.mark.parametrize("block", BLOCKS)
def test_target_padding_changes_nothing_at_real_positions(block):
    m = model_for(block)
    src, tgt = ids(2, 6, 0), ids(2, 5, 1)
    ref = m(src, decoder_input_ids=tgt).logits
    padded = torch.cat([tgt, ids(2, 3, 4)], 1)
    mask = torch.cat([torch.ones(2, 5, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long)], 1)
    out = m(src, decoder_input_ids=padded, decoder_attention_mask=mask).logits
    torch.testing.assert_close(out[:, :5], ref)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("block", BLOCKS)
def test_cross_attention_uses_the_source(block):
    m = model_for(block)
    tgt = ids(1, 6, 1)
    a = m(ids(1, 6, 0), decoder_input_ids=tgt).logits
    b = m(ids(1, 6, 2), decoder_input_ids=tgt).logits
    assert (a - b).abs().max() > 1e-2
    # every decoder position reads the source: a different source changes each position's logits
    assert ((a - b).abs().amax(-1) > 1e-4).all()


def test_labels_alone_are_shifted_behind_eod():
    m = model_for("pre-ln")
    src, labels = ids(2, 6, 0), ids(2, 5, 1)
    labels[1, 3:] = -100
    dec = torch.cat([torch.full((2, 1), EOS_ID), labels[:, :-1].clamp_min(0)], 1)
    dec[1, 4:] = PAD_ID
    torch.testing.assert_close(m(src, labels=labels).loss, m(src, decoder_input_ids=dec, labels=labels).loss)


def test_label_smoothing_matches_torch():
    m = model_for("post-ln")
    src, dec, labels = ids(2, 6, 0), ids(2, 5, 1), ids(2, 5, 2)
    labels[0, 4] = -100
    logits = m(src, decoder_input_ids=dec).logits
    want = torch.nn.functional.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), label_smoothing=0.1)
    torch.testing.assert_close(m(src, decoder_input_ids=dec, labels=labels, label_smoothing=0.1).loss, want)


@pytest.mark.parametrize("block", BLOCKS)
def test_cached_decoding_equals_the_full_forward(block):
    m = model_for(block)
    src = ids(3, 7, 0)
    mask = torch.ones_like(src)
    mask[1, 4:] = 0
    tgt = ids(3, 9, 1)
    full = m(src, mask, decoder_input_ids=tgt).logits
    memory, _ = m.encode(src, mask)
    cache = m.init_cache(memory)
    steps = [m.decode_step(tgt[:, t : t + 1], t, cache, padding_mask(mask)) for t in range(tgt.shape[1])]
    torch.testing.assert_close(torch.stack(steps, 1), full, atol=1e-5, rtol=1e-5)
    assert cache[0].k.shape[2] == tgt.shape[1]  # one key per decoded token: the prefix is never re-run


@pytest.mark.parametrize("block", BLOCKS)
def test_beam_search_with_one_beam_is_greedy(block):
    m = model_for(block)
    src = ids(4, 6, 0)
    mask = torch.ones_like(src)
    mask[2, 3:] = 0
    greedy = m.generate(src, mask, max_new_tokens=12)
    beam = beam_search(m, src, mask, num_beams=1, max_new_tokens=12).tokens
    assert torch.equal(beam, greedy[:, : beam.shape[1]])
    assert (greedy[:, beam.shape[1] :] == PAD_ID).all()


def _sequence_logprob(m, src, mask, tokens):
    """Sum of log p(token) of each generated row up to its <eod> (teacher-forced full forward), under the
    decoding distribution: <pad> and <mask> ruled out."""
    logits = m(src, mask, decoder_input_ids=tokens[:, :-1]).logits
    logits[..., [PAD_ID, MASK_ID]] = float("-inf")
    logp = torch.log_softmax(logits, -1)
    lab = tokens[:, 1:]
    per = logp.gather(2, lab[..., None])[..., 0]
    keep = torch.ones_like(lab, dtype=torch.bool)
    for b in range(lab.shape[0]):
        row = lab[b].tolist()
        end = row.index(EOS_ID) + 1 if EOS_ID in row else len([x for x in row if x != PAD_ID])
        keep[b, end:] = False
    return (per * keep).sum(1)


@pytest.mark.parametrize("block", BLOCKS)
def test_beam_search_scores_are_the_models_and_beat_greedy(block):
    m = model_for(block, seed=3)
    src = ids(3, 6, 0)
    mask = torch.ones_like(src)
    mask[0, 4:] = 0
    res = beam_search(m, src, mask, num_beams=4, max_new_tokens=10, length_penalty=0.0)
    # the reported score is what the model gives the returned sequence: the cache followed the beams
    torch.testing.assert_close(res.scores, _sequence_logprob(m, src, mask, res.tokens), atol=1e-4, rtol=1e-4)
    greedy = m.generate(src, mask, max_new_tokens=10)
    g = _sequence_logprob(m, src, mask, greedy)
    # without length normalisation, beam search finds a sequence at least as likely as greedy's,
    # unless greedy's ran to the length limit (beam hypotheses then compete at equal length)
    ended = (greedy == EOS_ID)[:, 1:].any(1)
    assert (res.scores[ended] >= g[ended] - 1e-4).all()
    assert m.generate(src, mask, max_new_tokens=10, num_beams=4).shape[0] == 3


def ending_sooner(m, bonus):
    """The model with `bonus` added to the <eod> logit while decoding: hypotheses end within the limit."""
    step = m.decode_step

    def biased(*args):
        logits = step(*args)
        logits[:, EOS_ID] += bonus
        return logits

    m.decode_step = biased
    return m


def lengths(tokens):
    return torch.tensor([int((row[1:] != PAD_ID).sum()) for row in tokens], dtype=torch.float)


def test_length_penalty_ranks_by_score_over_length():
    m = ending_sooner(model_for("pre-ln", seed=3), 6.0)
    src = ids(3, 6, 0)
    got = {}
    for lp in (0.0, 1.0, 3.0):
        res = got[lp] = beam_search(m, src, None, num_beams=4, max_new_tokens=10, length_penalty=lp)
        assert (res.tokens == EOS_ID)[:, 1:].any(1).all()  # finished hypotheses, not the length limit
        torch.testing.assert_close(res.normalized, res.scores / lengths(res.tokens) ** lp)
    # the same hypotheses are found whatever the penalty; a larger exponent never picks a shorter one,
    # and here it picks a longer one for some sentence
    assert (lengths(got[3.0].tokens) >= lengths(got[0.0].tokens)).all()
    assert (lengths(got[3.0].tokens) > lengths(got[0.0].tokens)).any()


def test_decoding_never_produces_pad_or_mask():
    m = model_for("post-ln")
    step = m.decode_step

    def likes_pad(*args):
        logits = step(*args)
        logits[:, :2] += 100.0
        return logits

    m.decode_step = likes_pad
    for beams in (1, 3):
        out = m.generate(ids(2, 5, 0), max_new_tokens=6, num_beams=beams)
        assert not ((out[:, 1:] == PAD_ID) | (out[:, 1:] == MASK_ID)).any()


def test_generate_output_layout_and_length_limit():
    m = model_for("pre-ln")
    out = m.generate(ids(2, 5, 0), max_new_tokens=4, num_beams=3)
    assert out.dtype == torch.long and out.shape[1] <= 5 and (out[:, 0] == EOS_ID).all()
    with pytest.raises(ValueError, match="num_beams"):
        m.generate(ids(2, 5, 0), num_beams=0)
    with pytest.raises(ValueError, match="max_seq_len"):
        m(ids(1, 40, 0), decoder_input_ids=ids(1, 3, 1))


def test_dropout_is_off_in_eval_and_on_in_training():
    m = build_model(small_cfg("pre-ln", "translation", dropout=0.3))
    src, tgt = ids(2, 6, 0), ids(2, 5, 1)
    m.eval()
    torch.testing.assert_close(m(src, decoder_input_ids=tgt).logits, m(src, decoder_input_ids=tgt).logits)
    m.train()
    assert not torch.allclose(m(src, decoder_input_ids=tgt).logits, m(src, decoder_input_ids=tgt).logits)


def test_dropout_zero_keeps_the_language_model_exact():
    torch.manual_seed(0)
    a = build_model(small_cfg("post-ln")).train()
    torch.manual_seed(0)
    b = build_model(small_cfg("post-ln", dropout=0.0)).train()
    x = ids(2, 8, 0)
    torch.testing.assert_close(a(x).logits, b(x).logits, rtol=0, atol=0)


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(block="sas-p", task="translation"), "post-ln, pre-ln"),
        (dict(block="parallel", task="translation"), "not offered for task='translation'"),
        (dict(n_decoder_layers=2), "translation"),
        (dict(task="translation", n_decoder_layers=0), "n_decoder_layers"),
        (dict(dropout=1.0), "dropout"),
        (dict(dropout=-0.1), "dropout"),
        (dict(block="sas", dropout=0.1), "post-ln, pre-ln, parallel"),
    ],
)
def test_bad_configs_name_the_field(kw, match):
    with pytest.raises(ValueError, match=match):
        ModelConfig(**{"block": "pre-ln", **kw})
