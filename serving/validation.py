"""Turn requests into batcher jobs, refusing what the server will not do with a message that names the limit."""

from __future__ import annotations

import math
from collections.abc import Sequence

from nmt.search import SearchOptions
from nmt.sentences import split_sentences
from nmt.translator import Translator, UnsupportedLanguagePair
from serving.batcher import Job
from serving.config import Limits
from serving.errors import InvalidRequest
from serving.stubs import translator_pb2

# DecodingOptions fields, all named as in SearchOptions; unset ones keep the model's defaults (Translator.default_options).
_OPTIONAL_SEARCH_FIELDS = (
    "beam_size", "nbest", "max_len_a", "max_len_b", "length_penalty", "no_repeat_ngram_size", "speech_level",
    "reconstruction_weight", "invented_number_penalty",
)


class RequestValidator:
    def __init__(self, translator: Translator, limits: Limits):
        self.translator, self.limits = translator, limits

    def translate_job(self, request: translator_pb2.TranslateRequest, name: str = "text") -> Job:
        """``name`` is how refusals call the text, e.g. ``requests[3].text`` in a stream."""
        return self._job([request.text], [name], request.source_lang, request.target_lang, request.options)

    def batch_job(self, request: translator_pb2.TranslateBatchRequest) -> Job:
        count, limit = len(request.texts), self.limits.max_batch_texts
        if count == 0:
            raise InvalidRequest("texts is empty: send at least one text")
        if count > limit:
            raise InvalidRequest(f"the batch has {count} texts; the limit is {limit} per request")
        names = [f"texts[{i}]" for i in range(count)]
        return self._job(request.texts, names, request.source_lang, request.target_lang, request.options)

    def _job(self, texts: Sequence[str], names: Sequence[str], source_lang: str, target_lang: str,
             options: translator_pb2.DecodingOptions) -> Job:
        try:
            self.translator.check_pair(source_lang, target_lang)
        except UnsupportedLanguagePair as error:
            raise InvalidRequest(str(error)) from error
        search_options = self.search_options(options, source_lang, target_lang)
        tokens = sum(self._count_tokens(text, name, target_lang, search_options.speech_level)
                     for text, name in zip(texts, names))
        return Job(tuple(texts), source_lang, target_lang, search_options, tokens)

    def _count_tokens(self, text: str, name: str, target_lang: str, level: str | None) -> int:
        """Source tokens of a text, sentence by sentence, as the translator will encode it (with the level's tag)."""
        if not text.strip():
            raise InvalidRequest(f"{name} is empty or only whitespace")
        if len(text) > self.limits.max_text_chars:
            raise InvalidRequest(f"{name} has {len(text)} characters; the limit is {self.limits.max_text_chars}")
        sentence_limit, total = self.translator.max_source_tokens, 0
        for number, sentence in enumerate(split_sentences(text), start=1):
            tokens = len(self.translator.tokenizer.source_ids(sentence, target_lang, level=level))
            if tokens > sentence_limit:
                raise InvalidRequest(f"sentence {number} of {name} has {tokens} tokens; the model reads at most "
                                     f"{sentence_limit} per sentence (split it into shorter sentences)")
            total += tokens
        if total > self.limits.max_text_tokens:
            raise InvalidRequest(f"{name} has {total} tokens; the limit is {self.limits.max_text_tokens}")
        return total

    def search_options(self, options: translator_pb2.DecodingOptions, source_lang: str, target_lang: str) -> SearchOptions:
        settings = {name: getattr(options, name) for name in _OPTIONAL_SEARCH_FIELDS if options.HasField(name)}
        for name in ("max_len_a", "length_penalty", "reconstruction_weight", "invented_number_penalty"):
            if not math.isfinite(settings.get(name, 0.0)):
                raise InvalidRequest(f"options.{name} must be a finite number")
        beam_size = settings.get("beam_size", SearchOptions.beam_size)
        if not 1 <= beam_size <= self.limits.max_beam_size:
            raise InvalidRequest(f"options.beam_size is {beam_size}; it must be between 1 and {self.limits.max_beam_size}")
        try:
            return self.translator.default_options(source_lang, target_lang, **settings, return_attention=options.return_attention)
        except ValueError as error:
            raise InvalidRequest(f"invalid options: {error}") from error
