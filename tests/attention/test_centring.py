import pytest
import torch

from blocklab.attention import centred_mean, centring_matrix


def test_causal_centring_matrix_is_uniform_over_the_past():
    C = centring_matrix(5, causal=True)[0, 0]
    for i in range(5):
        for j in range(5):
            assert C[i, j].item() == pytest.approx(1 / (i + 1) if j <= i else 0.0, rel=1e-6)


def test_bidirectional_centring_matrix_is_uniform():
    assert torch.equal(centring_matrix(4, causal=False)[0, 0], torch.full((4, 4), 0.25))


def test_padded_centring_matrix_ignores_pad_keys():
    mask = torch.tensor([[1, 1, 1, 0, 0]])
    C = centring_matrix(5, causal=False, key_mask=mask)[0, 0]
    assert torch.allclose(C[:, :3], torch.full((5, 3), 1 / 3))
    assert torch.all(C[:, 3:] == 0)
    Cc = centring_matrix(5, causal=True, key_mask=mask)[0, 0]
    assert torch.allclose(Cc[4], torch.tensor([1 / 3, 1 / 3, 1 / 3, 0, 0]))


def test_centred_mean_equals_the_matrix_product():
    v = torch.randn(2, 3, 7, 4)
    mask = torch.tensor([[1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1, 1]])
    for causal in (True, False):
        for m in (None, mask):
            ref = centring_matrix(7, causal, m) @ v
            assert torch.allclose(centred_mean(v, causal, m), ref, atol=1e-6), (causal, m)
