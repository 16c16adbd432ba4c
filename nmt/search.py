"""Greedy and batched beam search over a :class:`~nmt.model.Transformer`, on whatever device it lives on.

Beam search keeps ``beam_size`` live hypotheses per sentence in one (sentences × beams) batch, reuses the
decoder's key/value cache (reordered with one ``index_select`` per step), moves a hypothesis to the
sentence's finished list when it emits EOS, and drops a sentence from the batch once it has ``beam_size``
finished hypotheses, so the batch shrinks as sentences complete. The beams of a sentence share one copy of
its encoder keys and values. :class:`BeamSearch` also lets new sentences join between steps (the server's
iteration-level batching); :func:`beam_search` is the same engine with one fixed batch.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

from nmt.model import DecoderCache, Transformer
from nmt.numbers import NumberGuard, NumberRules
from nmt.speech_level import REQUESTABLE_LEVELS


@dataclass
class SearchOptions:
    beam_size: int = 4
    nbest: int = 1
    max_len_a: float = 1.5  # at most a·source_length + b target tokens (EOS included)
    max_len_b: int = 10
    min_length: int = 1  # target tokens before EOS is allowed: a sentence never translates to nothing
    length_penalty: float = 1.0  # score = log P / length^α
    no_repeat_ngram_size: int = 0
    return_attention: bool = False
    banned_ids: tuple[int, ...] = ()  # never predicted, like PAD and BOS (the tokenizer's <bt> tag)
    # asked of a translation into Korean: nmt.translator tags the source with it; the search itself never reads it
    speech_level: str | None = None
    # λ of nmt.rerank: nmt.translator reorders the whole beam by how well each candidate translates back into the
    # source (0 keeps the search's order); the search itself never reads it
    reconstruction_weight: float = 0.0
    # taken from the log-probability of a token that would write a number the source does not contain (nmt.numbers);
    # read by a search given the vocabulary's NumberGuard (nmt.translator passes its own), 0 leaves numbers free
    invented_number_penalty: float = 0.0

    def __post_init__(self) -> None:
        if self.beam_size < 1:
            raise ValueError(f"beam_size must be at least 1, got {self.beam_size}")
        if not 1 <= self.nbest <= self.beam_size:
            raise ValueError(f"nbest must be between 1 and beam_size ({self.beam_size}), got {self.nbest}")
        if self.max_len_a < 0 or self.max_len_b < 1:
            raise ValueError("max_len_a must be ≥ 0 and max_len_b ≥ 1")
        if self.min_length < 0:
            raise ValueError(f"min_length must be ≥ 0, got {self.min_length}")
        if self.no_repeat_ngram_size < 0:
            raise ValueError("no_repeat_ngram_size must be ≥ 0")
        for name in ("reconstruction_weight", "invented_number_penalty"):
            if not 0 <= getattr(self, name) < float("inf"):
                raise ValueError(f"{name} must be a finite number ≥ 0, got {getattr(self, name)}")
        levels = [level.value for level in REQUESTABLE_LEVELS]
        if self.speech_level is not None and self.speech_level not in levels:
            raise ValueError(f"speech_level must be one of {', '.join(levels)}, got {self.speech_level!r}")


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


def append_step_attention(history: Tensor | None, step: Tensor) -> Tensor:
    """``history`` (rows, steps, width) with one more step's cross-attention (rows, width') after it, zero-padded to
    the wider of the two: the source width shrinks when the longest sources leave the batch."""
    step = step[:, None].float()
    if history is None:
        return step
    return torch.cat([history, F.pad(step, (0, history.size(-1) - step.size(-1)))], dim=1)


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
    logits: Tensor, k: int, prefixes: Tensor, steps: Tensor, at_limit: Tensor, options: SearchOptions,
    special: tuple[int, int, int], numbers: NumberRules | None = None,
) -> tuple[Tensor, Tensor]:
    """Each row's ``k`` most probable allowed next tokens (rows × k) and their log-probabilities."""
    return top_k(allowed_log_probs(logits, prefixes, steps, at_limit, options, special, numbers), k)


def allowed_log_probs(
    logits: Tensor, prefixes: Tensor, steps: Tensor, at_limit: Tensor, options: SearchOptions,
    special: tuple[int, int, int], numbers: NumberRules | None = None,
) -> Tensor:
    """Next-token log-probabilities (rows × vocabulary), ``-inf`` where a token is not allowed.

    PAD, BOS and ``options.banned_ids`` are never predicted, nor tokens that would repeat a banned n-gram; a row
    that has generated fewer than ``options.min_length`` tokens (``steps``) may not end, and a row at its length
    limit may only end. Without the first rule an empty hypothesis, however improbable, can take one of the
    ``beam_size`` finished slots that stop a sentence's search, and cut off the longer translation it was growing.
    ``numbers`` lowers the tokens that would invent a number (:mod:`nmt.numbers`).
    """
    pad_id, bos_id, eos_id = special
    log_probs = logits.float().log_softmax(dim=-1)
    log_probs[:, [pad_id, bos_id, *options.banned_ids]] = float("-inf")  # one write; ids banned twice are harmless
    if options.no_repeat_ngram_size:
        log_probs.masked_fill_(banned_ngram_mask(prefixes[:, 1:], options.no_repeat_ngram_size, log_probs.size(-1)), float("-inf"))
    too_short = (steps < options.min_length) & ~at_limit
    if bool(too_short.any()):
        log_probs[too_short, eos_id] = float("-inf")
    if bool(at_limit.any()):
        not_eos = torch.arange(log_probs.size(-1), device=log_probs.device) != eos_id
        log_probs.masked_fill_(at_limit[:, None] & not_eos, float("-inf"))
    if numbers is not None:
        numbers.apply(log_probs, prefixes)
    return log_probs


@dataclass(eq=False)
class _Sentence:
    """A sentence in a running beam search: whose it is, where it started, how far it may go, what it found."""

    key: Hashable  # the caller's name for it, returned with its n-best
    max_length: int  # target tokens, EOS included
    start: int  # the cache position of its BOS: it joined the search after ``start`` steps
    numbers: frozenset[str] = frozenset()  # its source's numbers and their prefixes, when numbers are guarded
    steps: int = 0
    finished: list[Hypothesis] = field(default_factory=list)


class BeamSearch:
    """Beam search over a running set of sentences: new ones join between steps, finished ones leave at once.

    Each live sentence keeps ``beam_size`` hypotheses, rows of one (sentences × beams) batch that shares the
    decoder's key/value cache (reordered with one ``index_select`` per step); a hypothesis that emits EOS moves
    to its sentence's finished list, and the sentence leaves with its n-best once it has ``beam_size`` finished
    hypotheses or reaches its length limit. The beams of a sentence share one copy of its encoder keys and values.

    A sentence that joins a running search (:meth:`add`) starts at the cache's current position: its earlier
    self-attention positions are zero-filled and masked, its token positions count from its own start
    (``DecoderCache.starts``) and its source is padded to the batch's width and masked, so its translation is
    the one it gets alone. Positions that no live sentence reads any more are dropped as sentences leave.
    :func:`beam_search` is this engine with every sentence added at once. Given the vocabulary's ``guard``, it
    applies ``options.invented_number_penalty`` (:mod:`nmt.numbers`).
    """

    def __init__(self, model: Transformer, bos_id: int, eos_id: int, options: SearchOptions, guard: NumberGuard | None = None):
        model.eval()
        self.model, self.options, self.special = model, options, (model.config.pad_id, bos_id, eos_id)
        self.guard = guard if options.invented_number_penalty else None
        self._reset()

    def _reset(self) -> None:
        """Empty: the next sentences start a fresh cache, with no positions or source width left from earlier ones."""
        self._sentences: list[_Sentence] = []
        self._cache: DecoderCache | None = None
        self._prefixes: Tensor | None = None  # (rows, steps + 1): column i is the token fed at cache position i
        self._scores: Tensor | None = None  # (sentences, beam) running log-probabilities
        self._attention: Tensor | None = None  # (rows, steps, source width) when options.return_attention

    def __len__(self) -> int:
        """Sentences still searching."""
        return len(self._sentences)

    @property
    def keys(self) -> list[Hashable]:
        return [sentence.key for sentence in self._sentences]

    @torch.inference_mode()
    def add(self, source: Tensor, keys: Sequence[Hashable]) -> None:
        """Let a padded batch of source ids (B, S) join the search, one key per row; they take their first step next."""
        model, beam = self.model, self.options.beam_size
        pad_id, bos_id, _ = self.special
        memory, memory_mask = model.encode(source)
        cache = model.start_cache(memory, memory_mask)
        cache.select_hypotheses(torch.arange(len(keys), device=source.device).repeat_interleave(beam))  # beam rows each
        start = 0 if self._cache is None else self._cache.steps
        limits = max_target_lengths(source, pad_id, self.options, model.config.max_positions).tolist()
        prefixes = torch.full((len(keys) * beam, start + 1), pad_id, dtype=torch.long, device=source.device)
        prefixes[:, -1] = bos_id
        scores = torch.full((len(keys), beam), float("-inf"), device=source.device)
        scores[:, 0] = 0.0  # all beams start identical: expand only the first at its first step
        if self._cache is None:
            self._cache, self._prefixes, self._scores = cache, prefixes, scores
        else:
            self._cache.join(cache)
            self._prefixes, self._scores = torch.cat([self._prefixes, prefixes]), torch.cat([self._scores, scores])
            if self._attention is not None:
                rows, steps, width = self._attention.shape
                attention = self._attention.new_zeros(rows + prefixes.size(0), steps, max(width, self._cache.memory_mask.size(-1)))
                attention[:rows, :, :width] = self._attention
                self._attention = attention
        numbers = [self.guard.source_numbers(row) for row in source.tolist()] if self.guard else [frozenset()] * len(keys)
        self._sentences += [_Sentence(key, limit, start, allowed) for key, limit, allowed in zip(keys, limits, numbers)]
        self._update_starts()

    @torch.inference_mode()
    def step(self) -> list[tuple[Hashable, list[Hypothesis]]]:
        """Advance every live sentence by one token; returns the sentences that finished, with their n-best."""
        options, beam, (pad_id, bos_id, eos_id) = self.options, self.options.beam_size, self.special
        live, width, device = len(self._sentences), 2 * beam, self._prefixes.device  # 2·beam: refills the beam after EOS
        logits, step_attention = self.model.decode_step(self._prefixes[:, -1], self._cache, need_weights=options.return_attention)
        at_limit = [sentence.steps + 1 >= sentence.max_length for sentence in self._sentences]
        steps = torch.tensor([sentence.steps for sentence in self._sentences], device=device).repeat_interleave(beam)
        # A sentence's best `width` continuations are among the best `width` of each of its beams.
        numbers = None if self.guard is None else NumberRules(
            self.guard, [sentence.numbers for sentence in self._sentences for _ in range(beam)], options.invented_number_penalty)
        row_log_probs, row_tokens = best_next_tokens(
            logits, width, self._prefixes, steps, torch.tensor(at_limit, device=device).repeat_interleave(beam),
            options, self.special, numbers,
        )
        if step_attention is not None:
            self._attention = append_step_attention(self._attention, step_attention)

        candidates = (self._scores.view(-1, 1) + row_log_probs).view(live, beam * width)
        top_scores, top_index = candidates.topk(width, dim=1)
        origin, token = top_index // width, row_tokens.view(live, beam * width).gather(1, top_index)
        origin_row = origin + torch.arange(live, device=device)[:, None] * beam
        ends = (token == eos_id) & (top_scores > float("-inf"))

        # An EOS among the best `beam` candidates finishes a hypothesis (later ones are worse than live beams).
        for s, k in ends[:, :beam].nonzero().tolist():
            sentence, row = self._sentences[s], int(origin_row[s, k])
            sentence.finished.append(
                Hypothesis(
                    tokens=self._prefixes[row, sentence.start + 1 :].tolist(),
                    score=length_normalise(float(top_scores[s, k]), sentence.steps + 1, options.length_penalty),
                    attention=None if self._attention is None else self._attention[row, sentence.start :].cpu(),
                )
            )
        done = [len(sentence.finished) >= beam or limit for sentence, limit in zip(self._sentences, at_limit)]
        finished = [
            (sentence.key, sorted(sentence.finished, key=lambda h: h.score, reverse=True)[: options.nbest])
            for sentence, is_done in zip(self._sentences, done)
            if is_done
        ]
        for sentence in self._sentences:
            sentence.steps += 1
        if all(done):
            self._reset()
            return finished

        # The best `beam` non-EOS candidates live on: sort EOS ones behind, keep rank order otherwise.
        order = (ends.long() * width + torch.arange(width, device=device)).argsort(dim=1)[:, :beam]
        keep = ~torch.tensor(done, device=device)
        self._scores = top_scores.gather(1, order)[keep]
        next_rows = origin_row.gather(1, order)[keep].view(-1)
        self._prefixes = torch.cat([self._prefixes.index_select(0, next_rows), token.gather(1, order)[keep].view(-1, 1)], dim=1)
        self._keep(keep.nonzero().squeeze(1), next_rows)
        return finished

    @torch.inference_mode()
    def remove(self, keys: Collection[Hashable]) -> None:
        """Drop sentences nobody waits for any more (a cancelled request): the next step runs without them."""
        kept = [i for i, sentence in enumerate(self._sentences) if sentence.key not in keys]
        if len(kept) == len(self._sentences):
            return
        if not kept:
            self._reset()
            return
        beam, device = self.options.beam_size, self._prefixes.device
        sentences = torch.tensor(kept, device=device)
        rows = (sentences[:, None] * beam + torch.arange(beam, device=device)).view(-1)
        self._scores, self._prefixes = self._scores.index_select(0, sentences), self._prefixes.index_select(0, rows)
        self._keep(sentences, rows)

    def _keep(self, sentences: Tensor, rows: Tensor) -> None:
        """Keep these sentences (indices into the live list) and these hypothesis rows of the cache and attention."""
        if self._attention is not None:
            self._attention = self._attention.index_select(0, rows)
        self._cache.select_hypotheses(rows)  # the encoder side is one row per sentence: only leaving sentences change it
        if len(sentences) < len(self._sentences):
            self._cache.select_sources(sentences)
            self._sentences = [self._sentences[i] for i in sentences.tolist()]
            self._forget_unread_steps()
        self._update_starts()

    def _forget_unread_steps(self) -> None:
        """Drop the cache positions from before the oldest live sentence joined: no row attends to them."""
        offset = min(sentence.start for sentence in self._sentences)
        if not offset:
            return
        self._cache.forget_steps(offset)
        self._prefixes = self._prefixes[:, offset:]
        if self._attention is not None:
            self._attention = self._attention[:, offset:]
        for sentence in self._sentences:
            sentence.start -= offset

    def _update_starts(self) -> None:
        """Per-row starts for the model, or None while every sentence started together (the plain, unmasked path)."""
        starts = [sentence.start for sentence in self._sentences]
        self._cache.starts = (
            None if not any(starts)
            else torch.tensor(starts, device=self._prefixes.device).repeat_interleave(self.options.beam_size)
        )


@torch.inference_mode()
def beam_search(model: Transformer, source: Tensor, bos_id: int, eos_id: int, options: SearchOptions,
                guard: NumberGuard | None = None) -> list[list[Hypothesis]]:
    """Translate a padded batch of source ids (B, S); returns each sentence's n-best, best first."""
    engine = BeamSearch(model, bos_id, eos_id, options, guard)
    engine.add(source, range(source.size(0)))
    results: dict[Hashable, list[Hypothesis]] = {}
    while engine:
        results.update(engine.step())
    return [results[i] for i in range(source.size(0))]


# Picks each row's next token from its allowed log-probabilities (rows × V): (tokens (rows,), their log-probs (rows,)).
ChooseToken = Callable[[Tensor], tuple[Tensor, Tensor]]


def most_probable(log_probs: Tensor) -> tuple[Tensor, Tensor]:
    best_log_prob, best = top_k(log_probs, 1)
    return best[:, 0], best_log_prob[:, 0]


@torch.inference_mode()
def one_hypothesis_search(
    model: Transformer, source: Tensor, bos_id: int, eos_id: int, options: SearchOptions, choose: ChooseToken,
    guard: NumberGuard | None = None,
) -> list[list[Hypothesis]]:
    """One hypothesis per sentence, extended by one ``choose``-n token per step: greedy search or sampling.

    A sentence leaves the batch at the step it ends (EOS, or its length limit, where EOS is all that is allowed), so
    a batch costs less with every sentence done instead of running every row to the longest output.
    """
    model.eval()
    pad_id, device = model.config.pad_id, source.device
    memory, memory_mask = model.encode(source)
    cache = model.start_cache(memory, memory_mask)
    max_lengths = max_target_lengths(source, pad_id, options, model.config.max_positions)
    sentence = torch.arange(source.size(0), device=device)  # which sentence each row is
    tokens = torch.full((source.size(0), 1), bos_id, dtype=torch.long, device=device)
    log_prob = torch.zeros(source.size(0), device=device)
    guard = guard if options.invented_number_penalty else None
    source_numbers = [guard.source_numbers(row) for row in source.tolist()] if guard else []
    attention: Tensor | None = None  # (rows, steps, source width) when options.return_attention
    results: dict[int, list[Hypothesis]] = {}
    for step in range(int(max_lengths.max())):
        logits, step_attention = model.decode_step(tokens[:, -1], cache, need_weights=options.return_attention)
        numbers = None if guard is None else NumberRules(guard, [source_numbers[i] for i in sentence.tolist()],
                                                         options.invented_number_penalty)
        allowed = allowed_log_probs(
            logits, tokens, torch.full_like(max_lengths, step), max_lengths <= step + 1, options, (pad_id, bos_id, eos_id), numbers
        )
        chosen, chosen_log_prob = choose(allowed)
        log_prob += chosen_log_prob
        tokens = torch.cat([tokens, chosen[:, None]], dim=1)
        if step_attention is not None:
            attention = append_step_attention(attention, step_attention)
        ended = chosen == eos_id
        if not bool(ended.any()):
            continue
        rows = ended.nonzero().squeeze(1)
        for row, index, row_log_prob in zip(rows.tolist(), sentence[rows].tolist(), log_prob[rows].tolist()):  # one read each
            results[index] = [Hypothesis(
                tokens=tokens[row, 1:-1].tolist(),
                score=length_normalise(row_log_prob, step + 1, options.length_penalty),
                attention=None if attention is None else attention[row].cpu(),
            )]
        if bool(ended.all()):
            break
        keep = (~ended).nonzero().squeeze(1)
        sentence, tokens, log_prob, max_lengths = sentence[keep], tokens[keep], log_prob[keep], max_lengths[keep]
        attention = None if attention is None else attention.index_select(0, keep)
        cache.select_hypotheses(keep)
        cache.select_sources(keep)
    return [results[i] for i in range(source.size(0))]


def greedy_search(model: Transformer, source: Tensor, bos_id: int, eos_id: int, options: SearchOptions,
                  guard: NumberGuard | None = None) -> list[list[Hypothesis]]:
    """Pick the most probable token at every step: the fast path, and the reference beam size 1 must match."""
    return one_hypothesis_search(model, source, bos_id, eos_id, options, most_probable, guard)


def search(model: Transformer, source: Tensor, bos_id: int, eos_id: int, options: SearchOptions,
           guard: NumberGuard | None = None) -> list[list[Hypothesis]]:
    """Greedy when one hypothesis is all that is wanted, beam search otherwise."""
    strategy = greedy_search if options.beam_size == 1 else beam_search
    return strategy(model, source, bos_id, eos_id, options, guard)
