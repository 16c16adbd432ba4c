"""Filters for back-translated pairs: drop the translations a model visibly got wrong, counting each reason.

A back-translation model fails in a few recognisable ways: it outputs nothing, copies its input (untranslated),
stops far too early or rambles on, or loops ("the the the ..."). Such synthetic sources teach the forward model
to do the same. The checks look only at the pair itself, so a shard is filtered without seeing any other; the
corpus-level filters (duplicates, dev/test overlap, language checks) run later, when a recipe prepares the data.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from nmt.normalize import normalize
from training.clean import implausible_length_ratio

BT_DROP_REASONS = {
    "empty": "the input or its translation is empty",
    "copy": "the translation is the input unchanged (after normalisation)",
    "length_ratio": "one side has more than max_byte_ratio times the UTF-8 bytes of the other",
    "repetition": "the translation repeats an n-gram of up to max_ngram words max_repeats times in a row",
}
_WORD = re.compile(r"\w+")  # words without punctuation: "a student a student." repeats "a student"


@dataclass
class OutputFilterConfig:
    """Thresholds of the back-translation filters (the byte ratio as in :class:`training.clean.CleaningConfig`)."""

    max_byte_ratio: float = 3.0
    ratio_min_bytes: int = 40
    max_ngram: int = 4
    max_repeats: int = 4  # "very very very" occurs in real text; four in a row is a decoding loop


def drop_reason(source: str, translation: str, config: OutputFilterConfig = OutputFilterConfig()) -> str | None:
    """The first reason of :data:`BT_DROP_REASONS` that applies to (real input, its translation), else None."""
    source, translation = normalize(source), normalize(translation)
    if not source or not translation:
        return "empty"
    if source == translation:
        return "copy"
    if implausible_length_ratio(source, translation, config.max_byte_ratio, config.ratio_min_bytes):
        return "length_ratio"
    if repeats_ngram(_WORD.findall(translation.lower()), config.max_ngram, config.max_repeats):
        return "repetition"
    return None


def filter_translations(
    sources: Sequence[str], translations: Sequence[str], config: OutputFilterConfig = OutputFilterConfig()
) -> tuple[list[int], Counter[str]]:
    """Indices of the pairs that pass, in order, and how many were dropped for each reason."""
    kept: list[int] = []
    dropped: Counter[str] = Counter()
    for index, (source, translation) in enumerate(zip(sources, translations, strict=True)):
        reason = drop_reason(source, translation, config)
        if reason is None:
            kept.append(index)
        else:
            dropped[reason] += 1
    return kept, dropped


def repeats_ngram(words: Sequence[str], max_ngram: int, max_repeats: int) -> bool:
    """Whether some n-gram (n ≤ ``max_ngram``) of ``words`` occurs ``max_repeats`` times in a row."""
    for n in range(1, max_ngram + 1):
        for start in range(len(words) - n * max_repeats + 1):
            gram = words[start : start + n]
            if all(words[start + k * n : start + (k + 1) * n] == gram for k in range(1, max_repeats)):
                return True
    return False
