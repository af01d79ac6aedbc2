"""Attention: the centring matrix, softmax attention (fused or materialised) and the attention sub-blocks."""

from blocklab.attention.centring import centred_mean, centring_matrix
from blocklab.attention.functional import attention_matrix, softmax_attention
from blocklab.attention.modules import IdentityPlus, KVCache, MultiHeadAttention, ShapedAttention

__all__ = [
    "centred_mean",
    "centring_matrix",
    "attention_matrix",
    "softmax_attention",
    "IdentityPlus",
    "KVCache",
    "MultiHeadAttention",
    "ShapedAttention",
]
