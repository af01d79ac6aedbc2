"""Shared test helpers: a small config and parameter randomisation."""

import math

import torch

from blocklab import ModelConfig


def small_cfg(block="pre-ln", task="clm", **kw):
    base = dict(block=block, task=task, vocab_size=97, d_model=32, n_layers=3, n_heads=4, d_ff=64, max_seq_len=24)
    base.update(kw)
    return ModelConfig(**base)


@torch.no_grad()
def randomize(model, seed=0, scale=0.3):
    """Move every parameter off its init, so init-time cancellations (zero queries, beta=0) cannot hide bugs."""
    g = torch.Generator().manual_seed(seed)
    for p in model.parameters():
        p.add_(torch.randn(p.shape, generator=g) * scale)
    return model


def assert_same_logits_and_grads(model, ours, ref, atol=1e-10):
    """Two computations of a model's logits (`ours`, `ref`, both from the model's own parameters) agree to `atol`,
    and so does the gradient of one loss (the logits weighed across the vocabulary) for every parameter: the
    check of a block against a port of its authors' code at equal weights."""
    torch.testing.assert_close(ours, ref, rtol=0, atol=atol)
    weights = torch.linspace(-1, 1, ours.shape[-1], dtype=ours.dtype)
    grads = []
    for logits in (ours, ref):
        model.zero_grad()
        (logits * weights).sum().backward(retain_graph=True)
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    for name, g in grads[0].items():
        torch.testing.assert_close(g, grads[1][name], rtol=0, atol=atol, msg=name)


def reference_attention(q, k, v, n_heads, causal=True):
    """softmax(Q K^T / sqrt(d_h)) V per head, the causal mask written out, heads side by side again."""
    B, T, d = q.shape
    q, k, v = (t.view(B, T, n_heads, -1).transpose(1, 2) for t in (q, k, v))
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    return (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, d)


def as_args(over: dict) -> list[str]:
    """{'model': {'block': 'sas'}} -> ['--model.block', 'sas']."""
    return [tok for s, kv in over.items() for k, v in kv.items() for tok in (f"--{s}.{k}", str(v))]


def assert_causal(model, vocab: int = 97, t: int = 9):
    """A logit at a position before `t` never moves when token `t` changes; later ones do."""
    ids = torch.randint(0, vocab, (2, 20))
    changed = ids.clone()
    changed[:, t] = (changed[:, t] + 1) % vocab
    a, b = model(ids).logits, model(changed).logits
    assert torch.allclose(a[:, :t], b[:, :t], atol=1e-6)
    assert not torch.allclose(a[:, t:], b[:, t:], atol=1e-4)  # the change does reach later positions


def assert_padding_invariant(model, vocab: int = 97):
    """Right padding with its mask leaves the real tokens' logits as they are (bidirectional models), and the
    mask is what makes it so: without it, the pads leak in."""
    ids = torch.randint(0, vocab, (2, 12))
    short = model(ids, attention_mask=torch.ones(2, 12, dtype=torch.long)).logits
    padded_ids = torch.cat([ids, torch.randint(0, vocab, (2, 7))], dim=1)
    mask = torch.cat([torch.ones(2, 12), torch.zeros(2, 7)], dim=1).long()
    assert torch.allclose(short, model(padded_ids, attention_mask=mask).logits[:, :12], atol=1e-5)
    assert not torch.allclose(short, model(padded_ids).logits[:, :12], atol=1e-3)


def assert_cached_decoding_matches(m, src, tgt, mask):
    """Token-by-token decoding with the cache gives the teacher-forced forward's logits."""
    from blocklab.model.base import padding_mask

    full = m(src, mask, decoder_input_ids=tgt).logits
    memory, _ = m.encode(src, mask)
    cache = m.init_cache(memory)
    steps = [m.decode_step(tgt[:, t : t + 1], t, cache, padding_mask(mask)) for t in range(tgt.shape[1])]
    torch.testing.assert_close(torch.stack(steps, 1), full, atol=1e-5, rtol=1e-5)


def train_reversal_pairs(m, src, steps: int, lr: float = 1e-2, decay: bool = False) -> tuple[list[float], torch.Tensor]:
    """AdamW (no weight decay; `decay`: linear decay to 0) on four fixed pairs whose target is the source reversed
    and shifted; returns the losses and the labels (the target then <eod>), for the translation tests."""
    from blocklab.tokens import EOS_ID

    tgt = torch.flip((src + 7 - 3) % 90 + 3, [1])
    labels = torch.cat([tgt, torch.full((src.shape[0], 1), EOS_ID)], 1)
    opt = torch.optim.AdamW(m.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, (lambda t: 1 - t / steps) if decay else (lambda t: 1.0))
    losses = []
    for _ in range(steps):
        loss = m(src, labels=labels).loss
        loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, labels


def assert_translates(m, src, labels):
    """Greedy and 3-beam decoding of `src` give `labels` after the start token."""
    from blocklab.tokens import EOS_ID

    for beams in (1, 3):
        out = m.generate(src, max_new_tokens=12, num_beams=beams)
        assert out.dtype == torch.long and out.shape[0] == src.shape[0] and out.shape[1] <= 13
        assert (out[:, 0] == EOS_ID).all()
        assert torch.equal(out[:, 1 : 1 + labels.shape[1]], labels), (beams, out)


# The fields of an experiment, a group and a comparison in verdicts.json (docs/verdicts.md; checked by the
# verdict and compare tests).
SPEC_EXPERIMENT_FIELDS = frozenset(
    "metric lower_is_better tuned reference tolerance margin cap tuning_runs_reused tuning_seeds noise_floor "
    "pooled_sd family_size groups comparisons frontier".split()
)
SPEC_COMPARISON_FIELDS = frozenset(
    "against test correlation difference ci95 ci_family p p_holm failures p_fail mde80 n verdict".split()
)
SPEC_GROUP_FIELDS = frozenset(
    "label settings curve best best_at_edge stable trainable sensitivity seeds statuses scores failed mean sd ci95 "
    "n_params tokens_per_s".split()
)
