"""Translate lists of texts with a model directory: sentence splitting, length-sorted batching, search."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import torch

from nmt.budget import decoding_budget
from nmt.checkpoint import load_model
from nmt.model import Transformer
from nmt.numbers import NumberGuard
from nmt.precision import prepare_for_inference
from nmt.rerank import mean_log_probs, rerank
from nmt.search import BeamSearch, Hypothesis, SearchOptions, search
from nmt.sentences import split_sentences
from nmt.tokenizer import Tokenizer

DEFAULT_MODEL_DIR = Path(__file__).resolve().parent.parent / "models" / "default"
# SearchOptions fields a model directory may set defaults for in metadata.json's "decoding" (training.tune_decoding):
# for every pair at its top level, and for one pair under "directions" → "ko-en", which wins.
TUNED_OPTIONS = ("length_penalty", "no_repeat_ngram_size", "speech_level", "reconstruction_weight", "invented_number_penalty")


class Strategy(Protocol):
    """How a batch is decoded: nmt.search.search (beam or greedy), or nmt.sampling.sample with its options bound.
    ``guard`` is passed, by keyword, only when the options ask for the number penalty."""

    def __call__(self, model: Transformer, source: torch.Tensor, bos_id: int, eos_id: int, options: SearchOptions,
                 guard: NumberGuard | None = None) -> list[list[Hypothesis]]: ...


def resolve_device(device: str) -> torch.device:
    """``auto`` picks CUDA when present, else the CPU."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("--device cuda was asked for but no CUDA device is available")
    return torch.device(device)


class UnsupportedLanguagePair(ValueError):
    pass


class UnsupportedSpeechLevel(ValueError):
    pass


def tuned_defaults(decoding: dict, pairs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], dict]:
    """Each pair's tuned search options from metadata.json's ``decoding``: its own entry under ``directions``
    over the shared top-level ones. Directions differ in what they need (a longer-favouring length penalty
    helps chrF into Korean and costs BLEU into English on the same dev sets), so they are tuned apart."""
    by_direction = decoding.get("directions", {})
    return {(s, t): {**_tuned_fields(decoding), **_tuned_fields(by_direction.get(f"{s}-{t}", {}))} for s, t in pairs}


def _tuned_fields(settings: dict) -> dict:
    return {name: settings[name] for name in TUNED_OPTIONS if name in settings}


@dataclass
class Attention:
    """Cross-attention weights, one row per target token, one column per source token."""

    source_tokens: list[str]
    target_tokens: list[str]
    weights: list[list[float]]


@dataclass
class Candidate:
    text: str
    score: float


@dataclass
class Translation:
    text: str
    candidates: list[Candidate] = field(default_factory=list)  # n-best, best first
    attention: Attention | None = None


class Translator:
    """A loaded model with its tokenizer, ready to translate between the language pairs it was trained on.

    ``model`` stays the model as trained (to save, inspect or train further); decoding runs on a copy taken
    now and prepared for ``precision``: ``fp32``, ``bf16`` or ``int8`` (see :mod:`nmt.precision`).
    ``max_batch_tokens`` defaults to the device's budget (:mod:`nmt.budget`). ``decoding_overrides`` replace
    tuned defaults for every pair (a server's ``--reconstruction-weight``); a request's own options still win.
    """

    def __init__(
        self, model: Transformer, tokenizer: Tokenizer, metadata: dict, max_batch_tokens: int | None = None, precision: str = "fp32",
        decoding_overrides: Mapping[str, object] | None = None,
    ):
        self.model, self.tokenizer, self.metadata = model, tokenizer, metadata
        self.inference_model = prepare_for_inference(copy.deepcopy(model), precision)
        self.number_guard = NumberGuard.from_tokenizer(tokenizer)
        self.max_batch_tokens = decoding_budget(self.device).max_batch_tokens if max_batch_tokens is None else max_batch_tokens
        self.precision = precision
        pairs = metadata.get("language_pairs") or [[s, t] for s in tokenizer.languages for t in tokenizer.languages if s != t]
        self.language_pairs: list[tuple[str, str]] = [tuple(pair) for pair in pairs]
        if unknown := set(decoding_overrides or {}) - set(TUNED_OPTIONS):
            raise ValueError(f"not tuned decoding options: {', '.join(sorted(unknown))} (tuned: {', '.join(TUNED_OPTIONS)})")
        self.decoding_defaults = {pair: {**defaults, **(decoding_overrides or {})}
                                  for pair, defaults in tuned_defaults(metadata.get("decoding", {}), self.language_pairs).items()}

    @classmethod
    def load(cls, model_dir: str | Path = DEFAULT_MODEL_DIR, device: str = "auto", **kwargs) -> Translator:
        loaded = load_model(model_dir, resolve_device(device))
        return cls(loaded.model, loaded.tokenizer, loaded.metadata, **kwargs)

    @property
    def device(self) -> torch.device:
        return self.model.embedding.weight.device

    @property
    def max_source_tokens(self) -> int:
        return self.model.config.max_positions // 2

    def default_options(self, source_lang: str, target_lang: str, **overrides) -> SearchOptions:
        """Search options with this model's tuned defaults for the pair (length penalty, n-gram ban, speech level)
        under ``overrides``."""
        self.check_pair(source_lang, target_lang)
        options = SearchOptions(**{**self.decoding_defaults[source_lang, target_lang], **overrides})
        self.check_speech_level(target_lang, options.speech_level)
        return options

    def check_speech_level(self, target_lang: str, level: str | None) -> None:
        """A level is asked only of translations into Korean, and only of a model trained with its tag."""
        if level is None:
            return
        if target_lang != "ko":
            raise UnsupportedSpeechLevel(f"a speech level is chosen for translations into Korean, not into {target_lang!r}")
        if level not in self.tokenizer.speech_levels:
            known = f"it knows {', '.join(self.tokenizer.speech_levels)}" if self.tokenizer.speech_levels else "it was trained without speech-level tags"
            raise UnsupportedSpeechLevel(f"speech level {level!r} cannot be asked of this model ({known})")

    def check_pair(self, source_lang: str, target_lang: str) -> None:
        if (source_lang, target_lang) not in self.language_pairs:
            served = ", ".join(f"{s}->{t}" for s, t in self.language_pairs)
            raise UnsupportedLanguagePair(f"language pair {source_lang}->{target_lang} is not served (served: {served})")

    def translate(
        self, texts: Sequence[str], source_lang: str, target_lang: str, options: SearchOptions | None = None
    ) -> list[Translation]:
        """One :class:`Translation` per text, in order; empty texts give empty translations."""
        self.check_pair(source_lang, target_lang)
        options = options or self.default_options(source_lang, target_lang)
        sentences_per_text = [split_sentences(text) for text in texts]
        sentences = [s for group in sentences_per_text for s in group]
        hypotheses = self.translate_sentences(sentences, target_lang, options)
        return self.join_texts(sentences_per_text, hypotheses, source_lang, target_lang, options)

    def join_texts(self, sentences_per_text: Sequence[list[str]], hypotheses: Sequence[list[Hypothesis]],
                   source_lang: str, target_lang: str, options: SearchOptions) -> list[Translation]:
        """One :class:`Translation` per text from the searched n-best lists of all texts' sentences, in order
        (reranked first where ``options`` ask)."""
        hypotheses = self.rerank([s for group in sentences_per_text for s in group], hypotheses, source_lang, options)
        results, position = [], 0
        for group in sentences_per_text:
            results.append(self.join_sentences(group, hypotheses[position : position + len(group)], target_lang, options))
            position += len(group)
        return results

    def translate_sentences(
        self, sentences: Sequence[str], target_lang: str, options: SearchOptions, strategy: Strategy | None = None
    ) -> list[list[Hypothesis]]:
        """n-best lists for single sentences, decoded in length-sorted batches of at most ``max_batch_tokens``."""
        self.check_speech_level(target_lang, options.speech_level)
        encoded = [self.encode_source(s, target_lang, options) for s in sentences]
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
        results: list[list[Hypothesis]] = [[] for _ in encoded]
        for batch in self._batches(order, [len(ids) for ids in encoded], options.beam_size):
            for i, nbest in zip(batch, self.search_ids([encoded[i] for i in batch], options, strategy)):
                results[i] = nbest
        return results

    def rerank(self, sentences: Sequence[str], hypotheses: Sequence[list[Hypothesis]], source_lang: str,
               options: SearchOptions) -> list[list[Hypothesis]]:
        """Each sentence's n-best reordered by :func:`nmt.rerank.rerank` at ``options.reconstruction_weight`` and cut
        to ``options.nbest``; as searched when the weight is 0 or the search kept one hypothesis (greedy)."""
        if not options.reconstruction_weight or options.beam_size == 1:
            return list(hypotheses)
        channel = self.reconstruction_scores(sentences, hypotheses, source_lang)
        return [rerank(nbest, scores, options.reconstruction_weight, options.length_penalty)[: options.nbest]
                for nbest, scores in zip(hypotheses, channel)]

    def reconstruction_scores(self, sentences: Sequence[str], hypotheses: Sequence[list[Hypothesis]], source_lang: str) -> list[list[float]]:
        """For every sentence's n-best, log P(sentence | hypothesis) per source token: the reverse direction's
        probability of translating each candidate back into the source (:mod:`nmt.rerank`), in one batched pass."""
        limit, language, eos = self.max_source_tokens, self.tokenizer.language_id(source_lang), self.tokenizer.eos_id
        reverse = [[language, *h.tokens[: limit - 2], eos] for nbest in hypotheses for h in nbest]
        originals = [self.tokenizer.target_ids(sentence, limit) for sentence, nbest in zip(sentences, hypotheses) for _ in nbest]
        lengths = [max(len(r), len(o)) for r, o in zip(reverse, originals)]
        scores = [0.0] * len(reverse)
        for batch in self._batches(sorted(range(len(reverse)), key=lengths.__getitem__), lengths, 1):
            means = mean_log_probs(self.inference_model, self.pad([reverse[i] for i in batch]), self.pad([originals[i] for i in batch]))
            for i, mean in zip(batch, means.tolist()):
                scores[i] = mean
        flat = iter(scores)
        return [[next(flat) for _ in nbest] for nbest in hypotheses]

    def encode_source(self, sentence: str, target_lang: str, options: SearchOptions) -> list[int]:
        """The encoder input for one sentence: its target-language tag, the speech level ``options`` ask for, its
        tokens cut to the model's source length, EOS."""
        return self.tokenizer.source_ids(sentence, target_lang, self.max_source_tokens, level=options.speech_level)

    def search_ids(
        self, sources: Sequence[Sequence[int]], options: SearchOptions, strategy: Strategy | None = None
    ) -> list[list[Hypothesis]]:
        """n-best lists for one batch of encoder inputs (``<2xx> tokens </s>`` ids), decoded together by ``strategy``
        (:func:`~nmt.search.search` when None, looked up at call time)."""
        options = self.decoding_options(options)
        guard = {"guard": self.number_guard} if options.invented_number_penalty else {}  # a strategy without it still works
        return (strategy or search)(self.inference_model, self.pad(sources), self.tokenizer.bos_id, self.tokenizer.eos_id, options,
                                    **guard)

    def decoding_options(self, options: SearchOptions) -> SearchOptions:
        """``options`` as every search of this model needs them: the tokenizer's never-generated ids banned
        (the ``<bt>`` tag marks synthetic training sources, so an output must never contain it), and the whole beam
        kept when it is to be reranked (:meth:`rerank`). EOS cannot be banned: no hypothesis could end, and the
        search would return none."""
        if self.tokenizer.eos_id in options.banned_ids:
            raise ValueError(f"banned_ids holds the end-of-sentence id {self.tokenizer.eos_id}: no translation could end")
        missing = tuple(i for i in self.tokenizer.never_generated if i not in options.banned_ids)
        nbest = options.beam_size if options.reconstruction_weight else options.nbest
        return dataclasses.replace(options, banned_ids=(*options.banned_ids, *missing), nbest=nbest)

    def beam_search(self, options: SearchOptions) -> BeamSearch:
        """An empty iteration-level search on the decoding model, which sentences may join between steps (:mod:`nmt.continuous`)."""
        return BeamSearch(self.inference_model, self.tokenizer.bos_id, self.tokenizer.eos_id, self.decoding_options(options),
                          self.number_guard)

    def _batches(self, order: list[int], lengths: list[int], beam_size: int) -> list[list[int]]:
        """Greedy packing of rows sorted by ``lengths`` so that longest × count × beam stays within budget."""
        batches: list[list[int]] = []
        current: list[int] = []
        for i in order:
            longest = lengths[i]  # sorted ascending: the newest member is the longest
            if current and longest * (len(current) + 1) * beam_size > self.max_batch_tokens:
                batches.append(current)
                current = []
            current.append(i)
        if current:
            batches.append(current)
        return batches

    def pad(self, rows: Sequence[Sequence[int]]) -> torch.Tensor:
        width = max(len(r) for r in rows)
        pad = self.tokenizer.pad_id
        return torch.tensor([[*r, *[pad] * (width - len(r))] for r in rows], dtype=torch.long, device=self.device)

    def join_sentences(self, sentences: list[str], hypotheses: list[list[Hypothesis]], target_lang: str, options: SearchOptions) -> Translation:
        """Glue sentence translations back into one text; n-best and attention follow the sentences."""
        if not sentences:
            return Translation(text="", candidates=[Candidate("", 0.0)] * options.nbest)
        decode = self.tokenizer.decode
        best = " ".join(decode(nbest[0].tokens) for nbest in hypotheses)
        candidates = [
            Candidate(
                text=" ".join(decode(nbest[min(k, len(nbest) - 1)].tokens) for nbest in hypotheses),
                score=sum(nbest[min(k, len(nbest) - 1)].score for nbest in hypotheses),
            )
            for k in range(options.nbest)
        ]
        attention = self._attention(sentences, hypotheses, target_lang, options) if options.return_attention else None
        return Translation(best, candidates, attention)

    def _attention(self, sentences: list[str], hypotheses: list[list[Hypothesis]], target_lang: str,
                   options: SearchOptions) -> Attention:
        """Block-diagonal attention over all sentences of a text (each sentence attends only to its source)."""
        source_ids = [self.encode_source(s, target_lang, options) for s in sentences]
        target_ids = [nbest[0].tokens + [self.tokenizer.eos_id] for nbest in hypotheses]
        width = sum(len(ids) for ids in source_ids)
        weights: list[list[float]] = []
        offset = 0
        for src, nbest in zip(source_ids, hypotheses):
            for row in nbest[0].attention.tolist():
                weights.append([0.0] * offset + row[: len(src)] + [0.0] * (width - offset - len(src)))
            offset += len(src)
        pieces = self.tokenizer.pieces
        return Attention(
            source_tokens=[p for ids in source_ids for p in pieces(ids)],
            target_tokens=[p for ids in target_ids for p in pieces(ids)],
            weights=weights,
        )
