"""Scaled dot-product and multi-head attention, with the key/value cache used by incremental decoding."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, dropout: float = 0.0, need_weights: bool = False
) -> tuple[Tensor, Tensor | None]:
    """softmax(Q·Kᵀ/√d_k)·V over the last two dims; ``mask`` is boolean, True where a query may attend.

    Without ``need_weights`` the fused PyTorch kernel computes the same formula; with it we spell the
    formula out so the attention weights can be returned (for alignment pictures).
    """
    if not need_weights:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout), None
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    return F.dropout(weights, dropout) @ v, weights


@dataclass
class KeyValueCache:
    """Keys and values of one attention layer, shaped (batch, heads, length, head_dim)."""

    keys: Tensor
    values: Tensor

    def append(self, keys: Tensor, values: Tensor) -> None:
        self.keys = torch.cat([self.keys, keys], dim=2)
        self.values = torch.cat([self.values, values], dim=2)

    def select(self, rows: Tensor) -> None:
        """Keep (and reorder) batch rows, e.g. after beam search picks which hypotheses survive."""
        self.keys = self.keys.index_select(0, rows)
        self.values = self.values.index_select(0, rows)


class MultiHeadAttention(nn.Module):
    """Projects queries, keys and values into ``n_heads`` subspaces, attends in each, and mixes the results."""

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model {d_model} is not divisible by n_heads {n_heads}")
        self.n_heads, self.head_dim, self.dropout = n_heads, d_model // n_heads, dropout
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def split_heads(self, x: Tensor) -> Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, self.n_heads, self.head_dim).transpose(1, 2)

    def project_keys_values(self, source: Tensor) -> KeyValueCache:
        return KeyValueCache(self.split_heads(self.k_proj(source)), self.split_heads(self.v_proj(source)))

    def forward(
        self,
        query: Tensor,
        source: Tensor | None = None,
        mask: Tensor | None = None,
        cache: KeyValueCache | None = None,
        static_source: bool = False,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from ``query`` (B, Tq, d) to ``source`` (B, Ts, d).

        Incremental decoding passes a ``cache``: for self-attention the new keys/values are appended to it;
        for cross-attention (``static_source``) it already holds the encoder's projected keys/values.
        Returns the output and, if asked, the head-averaged weights (B, Tq, Ts).
        """
        q = self.split_heads(self.q_proj(query))
        if static_source:
            k, v = cache.keys, cache.values
        else:
            kv = self.project_keys_values(query if source is None else source)
            if cache is not None:
                cache.append(kv.keys, kv.values)
                kv = cache
            k, v = kv.keys, kv.values
        dropout = self.dropout if self.training else 0.0
        out, weights = scaled_dot_product_attention(q, k, v, mask, dropout, need_weights)
        out = out.transpose(1, 2).reshape(query.shape)
        return self.out_proj(out), None if weights is None else weights.mean(dim=1)
