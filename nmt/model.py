"""The Transformer encoder-decoder (Vaswani et al., 2017), written out so it reads like the paper.

Shapes: B batch, S source length, T target length, d model width, V vocabulary.
Masks are boolean and True where attention is allowed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt.attention import KeyValueCache, MultiHeadAttention
from nmt.dropout import Dropout


@dataclass
class ModelConfig:
    vocab_size: int
    d_model: int = 512
    n_heads: int = 8
    encoder_layers: int = 6
    decoder_layers: int = 6
    ffn_dim: int = 2048
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation: str = "relu"
    pre_norm: bool = True
    tie_output: bool = True  # output projection shares the (joint) embedding matrix
    max_positions: int = 1024
    pad_id: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


class SinusoidalPositions(nn.Module):
    """PE(pos, i) = sin(pos / 10000^(2i/d)) and PE(pos, d/2 + i) = cos(pos / 10000^(2i/d)), for i < d/2.

    The paper interleaves sines and cosines; we store the sines first and the cosines after (the tensor2tensor
    layout, a fixed permutation of the same features), which is what Marian and Pegasus use, so our weights
    export to those Hugging Face classes unchanged.
    """

    def __init__(self, d_model: int, max_positions: int):
        super().__init__()
        position = torch.arange(max_positions).unsqueeze(1)
        frequency = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        table = torch.zeros(max_positions, d_model)
        table[:, : d_model // 2] = torch.sin(position * frequency)
        table[:, d_model // 2 :] = torch.cos(position * frequency)
        self.register_buffer("table", table, persistent=False)

    def forward(self, length: int, start: int | Tensor = 0) -> Tensor:
        """Positions ``start … start + length - 1`` (length, d); a tensor of starts (B,) gives each row its own (B, length, d)."""
        end = int(start.max()) + length if isinstance(start, Tensor) else start + length
        if end > self.table.size(0):
            raise ValueError(f"sequence of {end} tokens exceeds max_positions {self.table.size(0)}")
        if isinstance(start, Tensor):
            return self.table[start[:, None] + torch.arange(length, device=start.device)]
        return self.table[start : start + length]


class FeedForward(nn.Module):
    """FFN(x) = W₂·act(W₁·x + b₁) + b₂, applied to each position alike."""

    def __init__(self, d_model: int, ffn_dim: int, dropout: float, activation: str):
        super().__init__()
        self.up, self.down = nn.Linear(d_model, ffn_dim), nn.Linear(ffn_dim, d_model)
        self.activation = {"relu": F.relu, "gelu": F.gelu}[activation]
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(self.dropout(self.activation(self.up(x))))


class Residual(nn.Module):
    """x + Dropout(f(LayerNorm(x))) when pre-norm; LayerNorm(x + Dropout(f(x))) when post-norm."""

    def __init__(self, d_model: int, dropout: float, pre_norm: bool):
        super().__init__()
        self.norm, self.dropout, self.pre_norm = nn.LayerNorm(d_model), Dropout(dropout), pre_norm

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        if self.pre_norm:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


@dataclass
class AttentionRecord:
    """Every head's attention weights of one pass, appended layer by layer as (B, heads, queries, keys).

    Passed down by :mod:`nmt.explain`; decoding passes none, so it keeps the fused attention kernel.
    """

    encoder: list[Tensor] = field(default_factory=list)  # self-attention, (B, H, S, S) per layer
    decoder: list[Tensor] = field(default_factory=list)  # masked self-attention, (B, H, T, T) per layer
    cross: list[Tensor] = field(default_factory=list)  # (B, H, T, S) per layer


class EncoderLayer(nn.Module):
    def __init__(self, c: ModelConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(c.d_model, c.n_heads, c.attention_dropout)
        self.ffn = FeedForward(c.d_model, c.ffn_dim, c.dropout, c.activation)
        self.attn_block, self.ffn_block = (Residual(c.d_model, c.dropout, c.pre_norm) for _ in range(2))

    def forward(self, x: Tensor, mask: Tensor, record: AttentionRecord | None = None) -> Tensor:
        weights = None if record is None else record.encoder
        x = self.attn_block(x, lambda h: self.self_attn(h, mask=mask, head_weights=weights)[0])
        return self.ffn_block(x, self.ffn)


@dataclass
class LayerCache:
    """What one decoder layer remembers between decoding steps."""

    self_attn: KeyValueCache
    cross_attn: KeyValueCache


@dataclass
class DecoderCache:
    """Per-layer caches plus the source mask.

    Self-attention rows are hypotheses; encoder-side rows (cross-attention keys/values, the mask) may be
    fewer, one per sentence, when several hypotheses of a sentence share them (see MultiHeadAttention).
    """

    layers: list[LayerCache]
    memory_mask: Tensor  # (N, 1, 1, S)
    steps: int = 0
    # Per self-attention row, the step at which its sentence joined a running search (None: all at step 0).
    # A row attends only to its own positions and counts its positions from there (see nmt.search.BeamSearch).
    starts: Tensor | None = None

    def self_attention_mask(self) -> Tensor | None:
        """Which cached positions (the one being added included) each row may attend to: (N, 1, 1, steps + 1)."""
        if self.starts is None:
            return None
        return (torch.arange(self.steps + 1, device=self.starts.device) >= self.starts[:, None])[:, None, None, :]

    def join(self, other: DecoderCache) -> None:
        """Add the rows of a search that has not stepped yet after ours; the shorter sources are padded and masked."""
        for mine, theirs in zip(self.layers, other.layers):
            mine.self_attn.append_rows(theirs.self_attn)
            mine.cross_attn.append_rows(theirs.cross_attn)
        width = max(self.memory_mask.size(-1), other.memory_mask.size(-1))
        mask = self.memory_mask.new_zeros(self.memory_mask.size(0) + other.memory_mask.size(0), 1, 1, width)
        mask[: self.memory_mask.size(0), ..., : self.memory_mask.size(-1)] = self.memory_mask
        mask[self.memory_mask.size(0) :, ..., : other.memory_mask.size(-1)] = other.memory_mask
        self.memory_mask = mask

    def forget_steps(self, count: int) -> None:
        """Drop the oldest ``count`` self-attention positions, which only rows that have left could read."""
        for layer in self.layers:
            layer.self_attn.drop_first(count)
        self.steps -= count

    def select_hypotheses(self, rows: Tensor) -> None:
        """Keep and reorder the self-attention rows, e.g. after beam search picks the surviving hypotheses."""
        for layer in self.layers:
            layer.self_attn.select(rows)

    def select_sources(self, rows: Tensor) -> None:
        """Keep and reorder the encoder-side rows, e.g. when finished sentences leave the batch.

        The source positions past the longest kept source go too: they are padding that only leaving sentences
        filled, and a running search that never empties would otherwise attend over its widest source ever.
        """
        mask = self.memory_mask.index_select(0, rows)
        width = int(mask.flatten(1).sum(1).max())  # sources are left-aligned, so the longest one's length
        self.memory_mask = mask[..., :width]
        for layer in self.layers:
            layer.cross_attn.keep_first(width)
            layer.cross_attn.select(rows)


class DecoderLayer(nn.Module):
    def __init__(self, c: ModelConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(c.d_model, c.n_heads, c.attention_dropout)
        self.cross_attn = MultiHeadAttention(c.d_model, c.n_heads, c.attention_dropout)
        self.ffn = FeedForward(c.d_model, c.ffn_dim, c.dropout, c.activation)
        self.self_block, self.cross_block, self.ffn_block = (Residual(c.d_model, c.dropout, c.pre_norm) for _ in range(3))

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None,
        self_mask: Tensor | None,
        memory_mask: Tensor,
        cache: LayerCache | None = None,
        need_weights: bool = False,
        record: AttentionRecord | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Masked self-attention over the target prefix, cross-attention to the source, feed-forward."""
        cross_weights = None
        self_record, cross_record = (None, None) if record is None else (record.decoder, record.cross)

        def attend_source(h: Tensor) -> Tensor:
            nonlocal cross_weights
            out, cross_weights = self.cross_attn(
                h, memory, memory_mask, cache and cache.cross_attn, static_source=cache is not None, need_weights=need_weights,
                head_weights=cross_record,
            )
            return out

        x = self.self_block(
            x, lambda h: self.self_attn(h, mask=self_mask, cache=cache and cache.self_attn, head_weights=self_record)[0]
        )
        x = self.cross_block(x, attend_source)
        return self.ffn_block(x, self.ffn), cross_weights


class Transformer(nn.Module):
    """Encoder-decoder with one embedding matrix shared by source, target and (optionally) output."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        c = self.config = config
        self.embedding = nn.Embedding(c.vocab_size, c.d_model, padding_idx=c.pad_id)
        nn.init.normal_(self.embedding.weight, std=c.d_model**-0.5)
        self.positions = SinusoidalPositions(c.d_model, c.max_positions)
        self.dropout = Dropout(c.dropout)
        self.encoder_layers = nn.ModuleList(EncoderLayer(c) for _ in range(c.encoder_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(c) for _ in range(c.decoder_layers))
        # Pre-norm stacks end un-normalised, so each gets a final LayerNorm; post-norm layers already end in one.
        self.encoder_norm = nn.LayerNorm(c.d_model) if c.pre_norm else nn.Identity()
        self.decoder_norm = nn.LayerNorm(c.d_model) if c.pre_norm else nn.Identity()
        self.output = None if c.tie_output else nn.Linear(c.d_model, c.vocab_size, bias=False)

    def embed(self, tokens: Tensor, start: int | Tensor = 0) -> Tensor:
        x = self.embedding(tokens) * math.sqrt(self.config.d_model)
        return self.dropout(x + self.positions(tokens.size(1), start))

    def logits(self, hidden: Tensor) -> Tensor:
        return F.linear(hidden, self.embedding.weight) if self.output is None else self.output(hidden)

    def source_mask(self, source: Tensor) -> Tensor:
        return (source != self.config.pad_id)[:, None, None, :]  # (B, 1, 1, S)

    def encode(self, source: Tensor, record: AttentionRecord | None = None) -> tuple[Tensor, Tensor]:
        """Source ids (B, S) → memory (B, S, d) and its padding mask (B, 1, 1, S)."""
        mask = self.source_mask(source)
        x = self.embed(source)
        for layer in self.encoder_layers:
            x = layer(x, mask, record)
        return self.encoder_norm(x), mask

    def decode(
        self, target_in: Tensor, memory: Tensor, memory_mask: Tensor, need_weights: bool = False,
        record: AttentionRecord | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Teacher-forced decoding: target prefix (B, T) → logits (B, T, V) and last-layer cross-attention.

        A ``record`` receives every layer's and head's weights (see :class:`AttentionRecord`).
        """
        length = target_in.size(1)
        causal = torch.ones(length, length, dtype=torch.bool, device=target_in.device).tril()
        x, weights = self.embed(target_in), None
        for i, layer in enumerate(self.decoder_layers):
            last = i == len(self.decoder_layers) - 1
            x, weights = layer(x, memory, causal, memory_mask, need_weights=need_weights and last, record=record)
        return self.logits(self.decoder_norm(x)), weights

    def forward(self, source: Tensor, target_in: Tensor) -> Tensor:
        memory, memory_mask = self.encode(source)
        return self.decode(target_in, memory, memory_mask)[0]

    def start_cache(self, memory: Tensor, memory_mask: Tensor) -> DecoderCache:
        """Project the encoder output once per layer for cross-attention; empty self-attention caches."""
        batch, heads, head_dim = memory.size(0), self.config.n_heads, self.config.d_model // self.config.n_heads
        empty = memory.new_zeros(batch, heads, 0, head_dim)
        layers = [
            LayerCache(KeyValueCache(empty, empty), layer.cross_attn.project_keys_values(memory))
            for layer in self.decoder_layers
        ]
        return DecoderCache(layers, memory_mask)

    def decode_step(self, tokens: Tensor, cache: DecoderCache, need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """One incremental step: the newest token per row (N,) → next-token logits (N, V) and cross-attention (N, S)."""
        positions = cache.steps if cache.starts is None else cache.steps - cache.starts
        x, weights, self_mask = self.embed(tokens[:, None], start=positions), None, cache.self_attention_mask()
        for i, (layer, layer_cache) in enumerate(zip(self.decoder_layers, cache.layers)):
            last = i == len(self.decoder_layers) - 1
            x, weights = layer(x, None, self_mask, cache.memory_mask, layer_cache, need_weights=need_weights and last)
        cache.steps += 1
        logits = self.logits(self.decoder_norm(x))[:, 0]
        return logits, None if weights is None else weights[:, 0]

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
