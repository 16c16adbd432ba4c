"""Greedy and batched beam search over a :class:`~nmt.model.Transformer`, on whatever device it lives on.

Beam search keeps ``beam_size`` live hypotheses per sentence in one (sentences × beams) batch, reuses the
decoder's key/value cache (reordered with one ``index_select`` per step), moves a hypothesis to the
sentence's finished list when it emits EOS, and drops a sentence from the batch once it has ``beam_size``
finished hypotheses, so the batch shrinks as sentences complete. The beams of a sentence share one copy of
its encoder keys and values.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from nmt.model import Transformer


@dataclass
class SearchOptions:
    beam_size: int = 4
    nbest: int = 1
    max_len_a: float = 1.5  # at most a·source_length + b target tokens (EOS included)
    max_len_b: int = 10
    length_penalty: float = 1.0  # score = log P / length^α
    no_repeat_ngram_size: int = 0
    return_attention: bool = False

    def __post_init__(self) -> None:
        if self.beam_size < 1:
            raise ValueError(f"beam_size must be at least 1, got {self.beam_size}")
        if not 1 <= self.nbest <= self.beam_size:
            raise ValueError(f"nbest must be between 1 and beam_size ({self.beam_size}), got {self.nbest}")
        if self.max_len_a < 0 or self.max_len_b < 1:
            raise ValueError("max_len_a must be ≥ 0 and max_len_b ≥ 1")
        if self.no_repeat_ngram_size < 0:
            raise ValueError("no_repeat_ngram_size must be ≥ 0")


@dataclass
class Hypothesis:
    tokens: list[int]  # generated ids, EOS excluded
    score: float  # length-normalised log-probability
    attention: Tensor | None = None  # (len(tokens) + 1, source_length): cross-attention per output step


def max_target_lengths(source: Tensor, pad_id: int, options: SearchOptions, limit: int) -> Tensor:
    source_lengths = (source != pad_id).sum(dim=1)
    return (options.max_len_a * source_lengths + options.max_len_b).long().clamp(1, limit - 1)


def banned_ngram_mask(prefixes: Tensor, n: int, vocab_size: int) -> Tensor:
    """True for tokens that would repeat an n-gram already in a prefix (rows × vocab)."""
    rows, length = prefixes.shape
    banned = torch.zeros(rows, vocab_size, dtype=torch.bool, device=prefixes.device)
    if n < 1 or length < n:
        return banned
    windows = prefixes.unfold(1, n, 1)  # (rows, length-n+1, n)
    matches = (windows[:, :, :-1] == prefixes[:, None, length - n + 1 :]).all(dim=2) if n > 1 else torch.ones(
        rows, windows.size(1), dtype=torch.bool, device=prefixes.device
    )
    row_index = torch.arange(rows, device=prefixes.device)[:, None].expand_as(matches)
    banned[row_index[matches], windows[:, :, -1][matches]] = True
    return banned


def length_normalise(log_prob: float, length: int, alpha: float) -> float:
    return log_prob / (length**alpha)


def top_k(values: Tensor, k: int, block: int = 64) -> tuple[Tensor, Tensor]:
    """``values.topk(k, dim=-1)`` of a (rows × vocabulary) matrix, found through per-block maxima.

    PyTorch's CPU ``topk`` over a long row is slow (16× a vectorised maximum over the same row, measured in
    BENCHMARKS.md), while a maximum over blocks of 64 entries is fast: the k blocks with the largest maxima
    hold the k largest entries, so ``topk`` then only runs over k·64 of them. Values are exact; among equal
    values the indices may differ from ``topk``'s.
    """
    rows, width = values.shape
    if width % block or width < 4 * k * block:
        return values.topk(k, dim=-1)
    per_row = width // block
    best_blocks = values.view(rows, per_row, block).amax(dim=-1).topk(k, dim=-1).indices  # (rows, k)
    flat_blocks = best_blocks + torch.arange(rows, device=values.device)[:, None] * per_row
    candidates = values.view(rows * per_row, block).index_select(0, flat_blocks.view(-1)).view(rows, k * block)
    top, position = candidates.topk(k, dim=-1)
    return top, best_blocks.gather(1, position // block) * block + position % block


def best_next_tokens(
    logits: Tensor, k: int, prefixes: Tensor, at_limit: Tensor, options: SearchOptions, special: tuple[int, int, int]
) -> tuple[Tensor, Tensor]:
    """Each row's ``k`` most probable allowed next tokens (rows × k) and their log-probabilities.

    PAD and BOS are never predicted, nor tokens that would repeat a banned n-gram; a row at its length limit
    may only end.
    """
    pad_id, bos_id, eos_id = special
    log_probs = logits.float().log_softmax(dim=-1)
    log_probs[:, pad_id] = float("-inf")
    log_probs[:, bos_id] = float("-inf")
    if options.no_repeat_ngram_size:
        log_probs.masked_fill_(banned_ngram_mask(prefixes[:, 1:], options.no_repeat_ngram_size, log_probs.size(-1)), float("-inf"))
    if bool(at_limit.any()):
        not_eos = torch.arange(log_probs.size(-1), device=log_probs.device) != eos_id
        log_probs.masked_fill_(at_limit[:, None] & not_eos, float("-inf"))
    return top_k(log_probs, k)


@torch.inference_mode()
def beam_search(model: Transformer, source: Tensor, bos_id: int, eos_id: int, options: SearchOptions) -> list[list[Hypothesis]]:
    """Translate a padded batch of source ids (B, S); returns each sentence's n-best, best first."""
    model.eval()
    pad_id, beam, device = model.config.pad_id, options.beam_size, source.device
    sentences, width = source.size(0), 2 * beam  # 2·beam candidates: enough to refill the beam after EOS
    memory, memory_mask = model.encode(source)
    cache = model.start_cache(memory, memory_mask)  # one encoder-side row per sentence, read by all its beams
    max_lengths = max_target_lengths(source, pad_id, options, model.config.max_positions)

    active = torch.arange(sentences, device=device)  # original index of each sentence still searching
    prefixes = torch.full((sentences * beam, 1), bos_id, dtype=torch.long, device=device)
    scores = torch.full((sentences, beam), float("-inf"), device=device)
    scores[:, 0] = 0.0  # all beams start identical: expand only the first at step one
    attention: Tensor | None = None
    finished: list[list[Hypothesis]] = [[] for _ in range(sentences)]

    for step in range(int(max_lengths.max())):
        logits, step_attention = model.decode_step(prefixes[:, -1], cache, need_weights=options.return_attention)
        at_limit = (max_lengths[active] <= step + 1).repeat_interleave(beam)
        # A sentence's best `width` continuations are among the best `width` of each of its beams.
        row_log_probs, row_tokens = best_next_tokens(logits, width, prefixes, at_limit, options, (pad_id, bos_id, eos_id))
        if step_attention is not None:
            step_attention = step_attention[:, None].float()
            attention = step_attention if attention is None else torch.cat([attention, step_attention], dim=1)

        candidates = (scores.view(-1, 1) + row_log_probs).view(len(active), beam * width)
        top_scores, top_index = candidates.topk(width, dim=1)
        origin, token = top_index // width, row_tokens.view(len(active), beam * width).gather(1, top_index)
        origin_row = origin + torch.arange(len(active), device=device)[:, None] * beam
        ends = (token == eos_id) & (top_scores > float("-inf"))

        # An EOS among the best `beam` candidates finishes a hypothesis (later ones are worse than live beams).
        for s, k in ends[:, :beam].nonzero().tolist():
            row = int(origin_row[s, k])
            finished[int(active[s])].append(
                Hypothesis(
                    tokens=prefixes[row, 1:].tolist(),
                    score=length_normalise(float(top_scores[s, k]), step + 1, options.length_penalty),
                    attention=None if attention is None else attention[row].cpu(),
                )
            )
        done = torch.tensor([len(finished[int(i)]) >= beam for i in active.tolist()], device=device)
        if bool(done.all()):
            break

        # The best `beam` non-EOS candidates live on: sort EOS ones behind, keep rank order otherwise.
        order = (ends.long() * width + torch.arange(width, device=device)).argsort(dim=1)[:, :beam]
        keep = ~done
        next_scores = top_scores.gather(1, order)[keep]
        next_rows = origin_row.gather(1, order)[keep].view(-1)
        next_tokens = token.gather(1, order)[keep].view(-1, 1)
        active, scores = active[keep], next_scores
        prefixes = torch.cat([prefixes.index_select(0, next_rows), next_tokens], dim=1)
        if attention is not None:
            attention = attention.index_select(0, next_rows)
        cache.select_hypotheses(next_rows)  # the encoder side is one row per sentence: only leaving sentences change it
        if bool(done.any()):
            cache.select_sources(keep.nonzero().squeeze(1))

    return [sorted(hyps, key=lambda h: h.score, reverse=True)[: options.nbest] for hyps in finished]


@torch.inference_mode()
def greedy_search(model: Transformer, source: Tensor, bos_id: int, eos_id: int, options: SearchOptions) -> list[list[Hypothesis]]:
    """Pick the most probable token at every step: the fast path, and the reference beam size 1 must match."""
    model.eval()
    pad_id, device, sentences = model.config.pad_id, source.device, source.size(0)
    memory, memory_mask = model.encode(source)
    cache = model.start_cache(memory, memory_mask)
    max_lengths = max_target_lengths(source, pad_id, options, model.config.max_positions)
    tokens = torch.full((sentences, 1), bos_id, dtype=torch.long, device=device)
    log_prob = torch.zeros(sentences, device=device)
    lengths = torch.zeros(sentences, dtype=torch.long, device=device)
    running = torch.ones(sentences, dtype=torch.bool, device=device)
    steps: list[Tensor] = []
    for step in range(int(max_lengths.max())):
        logits, step_attention = model.decode_step(tokens[:, -1], cache, need_weights=options.return_attention)
        top_log_prob, top_token = best_next_tokens(logits, 1, tokens, max_lengths <= step + 1, options, (pad_id, bos_id, eos_id))
        best_log_prob, best = top_log_prob[:, 0], top_token[:, 0]
        best = torch.where(running, best, torch.full_like(best, pad_id))
        log_prob += torch.where(running, best_log_prob, torch.zeros_like(best_log_prob))
        lengths += running.long()
        if step_attention is not None:
            steps.append(step_attention.float().cpu())
        tokens = torch.cat([tokens, best[:, None]], dim=1)
        running &= best != eos_id
        if not bool(running.any()):
            break

    results = []
    for i in range(sentences):
        length = int(lengths[i])
        attention = torch.stack([a[i] for a in steps[:length]]) if steps else None
        hypothesis = Hypothesis(
            tokens=tokens[i, 1:length].tolist(),
            score=length_normalise(float(log_prob[i]), length, options.length_penalty),
            attention=attention,
        )
        results.append([hypothesis])
    return results


def search(model: Transformer, source: Tensor, bos_id: int, eos_id: int, options: SearchOptions) -> list[list[Hypothesis]]:
    """Greedy when one hypothesis is all that is wanted, beam search otherwise."""
    strategy = greedy_search if options.beam_size == 1 else beam_search
    return strategy(model, source, bos_id, eos_id, options)
