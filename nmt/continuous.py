"""Requests translated by one running beam search: they join between decoding steps and leave once translated.

A fixed batch makes short requests wait for the longest one and new requests wait for the whole batch.
Here a request's texts are split into sentences as :meth:`Translator.translate` splits them, the sentences
join the running :class:`~nmt.search.BeamSearch` at the next step boundary (as many as the token budget
allows), and the request is answered at the step where its last sentence finishes, its texts glued by
:meth:`Translator.join_sentences`. A sentence's translation does not depend on when it joined or on its
batch mates, so every request gets what ``translate`` gives it alone. The server's batcher keeps one
:class:`ContinuousTranslation` per language pair and decoding options.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from nmt.search import Hypothesis, SearchOptions
from nmt.sentences import split_sentences
from nmt.translator import Translation, Translator


@dataclass(eq=False)
class _Request:
    key: Hashable
    sentences: list[list[str]]  # per text
    hypotheses: list[list[Hypothesis]]  # per sentence of all texts, filled as they finish
    unfinished: int
    company: int = 1  # the most requests decoded alongside it, itself included


@dataclass(frozen=True)
class Finished:
    key: Hashable
    translations: list[Translation]  # one per text, in order
    company: int  # the most requests that shared a decoding step with it, itself included


@dataclass(frozen=True)
class _Waiting:
    """A sentence not yet in the search."""

    request: _Request
    index: int  # among the request's sentences
    ids: list[int]  # encoder input


@dataclass
class ContinuousTranslation:
    """One language pair and one set of options; requests are added and stepped until translated.

    ``max_batch_tokens`` bounds the search as ``Translator`` bounds a fixed batch: longest source × sentences
    × beam. A sentence that would break it waits (in arrival order) until finished sentences make room; an
    empty search always takes one, however long.
    """

    translator: Translator
    source_lang: str
    target_lang: str
    options: SearchOptions
    max_batch_tokens: int
    _requests: dict[Hashable, _Request] = field(default_factory=dict)
    _waiting: deque[_Waiting] = field(default_factory=deque)
    _lengths: dict[tuple[Hashable, int], int] = field(default_factory=dict)  # source length of each searching sentence

    def __post_init__(self) -> None:
        self.search = self.translator.beam_search(self.options)

    def __len__(self) -> int:
        """Requests not yet answered."""
        return len(self._requests)

    @property
    def keys(self) -> list[Hashable]:
        return list(self._requests)

    @property
    def full(self) -> bool:
        """True once the searching and waiting sentences fill the budget: further requests should wait outside."""
        return self._cost([*self._lengths.values(), *(len(w.ids) for w in self._waiting)]) >= self.max_batch_tokens

    def add(self, key: Hashable, texts: Sequence[str]) -> None:
        """Queue a request's texts; their sentences join the search at the next steps. ``key`` must be new."""
        sentences = [split_sentences(text) for text in texts]
        flat = [sentence for group in sentences for sentence in group]
        ids = [self.translator.encode_source(sentence, self.target_lang, self.options) for sentence in flat]
        request = self._requests[key] = _Request(key, sentences, [[] for _ in flat], len(flat))
        self._waiting.extend(_Waiting(request, i, sentence_ids) for i, sentence_ids in enumerate(ids))

    def remove(self, key: Hashable) -> None:
        """Forget a request nobody waits for any more: its sentences leave the search before the next step."""
        request = self._requests.pop(key, None)
        if request is None:
            return
        self._waiting = deque(w for w in self._waiting if w.request is not request)
        sentences = {(key, i) for i in range(len(request.hypotheses))}
        self.search.remove(sentences)
        for sentence in sentences:
            self._lengths.pop(sentence, None)

    def step(self) -> list[Finished]:
        """Let waiting sentences join within the budget, advance the search by one token, return answered requests."""
        self._admit()
        company = len(self._requests)
        for request in self._requests.values():
            request.company = max(request.company, company)
        if self.search:
            for (key, index), nbest in self.search.step():
                del self._lengths[key, index]
                request = self._requests[key]
                request.hypotheses[index] = nbest
                request.unfinished -= 1
        done = [request for request in self._requests.values() if not request.unfinished]
        for request in done:
            del self._requests[request.key]
        # joined together, so that reranking (Translator.rerank) scores every finished request's beams in one pass
        translations = iter(self.translator.join_texts([texts for r in done for texts in r.sentences],
                                                       [nbest for r in done for nbest in r.hypotheses],
                                                       self.source_lang, self.target_lang, self.options))
        return [Finished(r.key, [next(translations) for _ in r.sentences], r.company) for r in done]

    def _admit(self) -> None:
        joining: list[_Waiting] = []
        lengths = list(self._lengths.values())
        while self._waiting and (not lengths or self._cost([*lengths, len(self._waiting[0].ids)]) <= self.max_batch_tokens):
            joining.append(self._waiting.popleft())
            lengths.append(len(joining[-1].ids))
        if joining:
            keys = [(w.request.key, w.index) for w in joining]
            self.search.add(self.translator.pad([w.ids for w in joining]), keys)
            self._lengths.update((key, len(w.ids)) for key, w in zip(keys, joining))

    def _cost(self, lengths: list[int]) -> int:
        """What a batch of sentences of these source lengths costs: padded to the longest, ``beam_size`` rows each."""
        return max(lengths, default=0) * len(lengths) * self.options.beam_size
