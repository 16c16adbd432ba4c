"""Scaled dot-product and multi-head attention, with the key/value cache used by incremental decoding."""

from __future__ import annotations

import math

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


class KeyValueCache:
    """Keys and values of one attention layer, seen as (batch, heads, length, head_dim).

    Incremental decoding appends one position per step, reorders rows after every beam-search step, and (in a
    running search) takes the rows of joining sentences. The tensors live time-major, (length, rows, heads,
    head_dim), in buffers with room to grow in both length and rows: appending writes one slice, joining writes
    only the new rows, and reordering copies the filled part into a second buffer of the same size, which then
    takes the first one's place (so no step allocates).
    """

    def __init__(self, keys: Tensor, values: Tensor):
        self._keys, self._values = keys.permute(2, 0, 1, 3), values.permute(2, 0, 1, 3)  # views: no copy
        self._spare: tuple[Tensor, Tensor] | None = None  # what select writes into; same capacity as the buffers
        self.length, self.rows = keys.size(2), keys.size(0)

    @property
    def keys(self) -> Tensor:
        return self._keys[: self.length, : self.rows].permute(1, 2, 0, 3)

    @property
    def values(self) -> Tensor:
        return self._values[: self.length, : self.rows].permute(1, 2, 0, 3)

    def append(self, keys: Tensor, values: Tensor) -> None:
        """Add positions at the end; an empty cache takes whatever rows come first."""
        if self.length == 0:
            self.rows = keys.size(0)
        end = self.length + keys.size(2)
        if end > self._keys.size(0) or self.rows > self._keys.size(1):
            self._reserve(max(end, 2 * self._keys.size(0), 16), max(self.rows, self._keys.size(1)))
        self._keys[self.length : end, : self.rows] = keys.permute(2, 0, 1, 3)
        self._values[self.length : end, : self.rows] = values.permute(2, 0, 1, 3)
        self.length = end

    def append_rows(self, other: KeyValueCache) -> None:
        """Add ``other``'s batch rows after ours, e.g. sentences joining a running search.

        The side with fewer positions is zero-filled up to the other's length; the caller masks those positions
        (zeros, not garbage: a masked value still meets a zero weight).
        """
        length, rows = max(self.length, other.length), self.rows + other.rows
        if length > self._keys.size(0) or rows > self._keys.size(1):
            self._reserve(max(length, self._keys.size(0)), max(rows, 2 * self._keys.size(1)))
        for mine, theirs in ((self._keys, other._keys), (self._values, other._values)):
            mine[self.length : length, : self.rows] = 0  # only the gaps: positions from `length` on are written before read
            mine[: other.length, self.rows : rows] = theirs[: other.length, : other.rows]
            mine[other.length : length, self.rows : rows] = 0
        self.length, self.rows = length, rows

    def keep_first(self, count: int) -> None:
        """Forget the positions from ``count`` on (padding no row reads any more); a later append overwrites them."""
        self.length = min(self.length, count)

    def drop_first(self, count: int) -> None:
        """Forget the oldest ``count`` positions, once no row reads them any more (views: no copy)."""
        self._keys, self._values = self._keys[count:], self._values[count:]
        if self._spare is not None:
            self._spare = (self._spare[0][count:], self._spare[1][count:])
        self.length -= count

    def select(self, rows: Tensor) -> None:
        """Keep (and reorder) batch rows, e.g. after beam search picks which hypotheses survive."""
        if rows.numel() > self._keys.size(1):
            self._reserve(self._keys.size(0), rows.numel())
        if self._spare is None:
            self._spare = (torch.empty_like(self._keys), torch.empty_like(self._values))
        if self.length:  # nothing to copy (or bounds-check) in an empty cache
            for old, new in zip((self._keys, self._values), self._spare):
                torch.index_select(old[: self.length, : self.rows], 1, rows, out=new[: self.length, : rows.numel()])
        self._spare, (self._keys, self._values) = (self._keys, self._values), self._spare
        self.rows = rows.numel()

    def _reserve(self, length: int, rows: int) -> None:
        """Move into buffers with room for ``length`` positions of ``rows`` rows; the spare is made again when needed."""
        for name in ("_keys", "_values"):
            old = getattr(self, name)
            buffer = old.new_empty(length, rows, *old.shape[2:])
            if self.length:
                buffer[: self.length, : self.rows] = old[: self.length, : self.rows]
            setattr(self, name, buffer)
        self._spare = None


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
        self.qkv_proj: nn.Linear | None = None  # see fuse_projections

    def fuse_projections(self) -> None:
        """Project queries, keys and values with one (d → 3d) product instead of three, for decoding.

        Only for self-attention (all three come from the same input) in a decode-only model: the separate
        projections are removed, so the parameter names no longer match a checkpoint's.
        """
        q, k, v = self.q_proj, self.k_proj, self.v_proj
        # skip_init: no random initialisation, which would advance the RNG a training run relies on
        self.qkv_proj = nn.utils.skip_init(nn.Linear, q.in_features, 3 * q.out_features, device=q.weight.device)
        with torch.no_grad():
            self.qkv_proj.weight.copy_(torch.cat([q.weight, k.weight, v.weight]))
            self.qkv_proj.bias.copy_(torch.cat([q.bias, k.bias, v.bias]))
        del self.q_proj, self.k_proj, self.v_proj

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
        head_weights: list[Tensor] | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from ``query`` (B, Tq, d) to ``source`` (B, Ts, d).

        Incremental decoding passes a ``cache``: for self-attention the new keys/values are appended to it;
        for cross-attention (``static_source``) it already holds the encoder's projected keys/values. That
        cache may hold one row per group of consecutive query rows (the beams of one sentence): the group's
        queries then attend as one longer query sequence, so the encoder side is stored and read once.
        Returns the output and, if asked, the head-averaged weights (B, Tq, Ts). A ``head_weights`` list
        receives every head's weights (B, heads, Tq, Ts), for explaining a translation (:mod:`nmt.explain`).
        """
        rows, length, _ = query.shape
        if static_source:
            k, v = cache.keys, cache.values
            query = query.reshape(k.size(0), -1, query.size(-1))  # a no-op unless rows share a cache row
            q = self.split_heads(self.q_proj(query))
        elif self.qkv_proj is not None:
            if source is not None:
                raise ValueError("a module with fused projections only does self-attention")
            q, k, v = (self.split_heads(x) for x in self.qkv_proj(query).chunk(3, dim=-1))
        else:
            q = self.split_heads(self.q_proj(query))
            kv = self.project_keys_values(query if source is None else source)
            k, v = kv.keys, kv.values
        if cache is not None and not static_source:
            cache.append(k, v)
            k, v = cache.keys, cache.values
        dropout = self.dropout if self.training else 0.0
        out, weights = scaled_dot_product_attention(q, k, v, mask, dropout, need_weights or head_weights is not None)
        if head_weights is not None:
            head_weights.append(weights)
        out = out.transpose(1, 2).reshape(rows, length, -1)
        if not need_weights:
            return self.out_proj(out), None
        return self.out_proj(out), weights.mean(dim=1).reshape(rows, length, -1)
