"""Filter a parallel corpus down to pairs worth training on, counting every pair dropped and why.

Each dropped pair is counted under the first reason in :data:`DROP_REASONS` that applies, so a corpus's counts add
up to the pairs it lost. Dev and test sets are never cleaned (only normalised): scores must be comparable with
other systems that use them as published.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from datasets import Dataset

from nmt.normalize import normalize
from nmt.tokenizer import Tokenizer
from training.corpus import LANGUAGES

DROP_REASONS = {
    "empty": "a side is empty after normalisation",
    "too_short": "a side has fewer than min_chars characters",
    "too_long": "a side has more than max_chars characters",
    "identical": "the Korean and English sides are the same text (untranslated)",
    "no_hangul_in_korean": "the Korean side has no Hangul",
    "hangul_in_english": "more than max_hangul_in_english of the English side's letters are Hangul",
    "length_ratio": "one side is more than max_byte_ratio times longer than the other (UTF-8 bytes)",
    "in_dev_or_test": "the Korean or the English side also occurs in a dev or test set",
    "duplicate": "the same pair occurred earlier in the corpus",
    "too_many_tokens": "a side needs more than max_tokens tokens (checked once the tokenizer exists)",
}

_HANGUL = re.compile("[\u1100-\u11ff\u3130-\u318f\ua960-\ua97f\uac00-\ud7a3\ud7b0-\ud7ff\uffa0-\uffdc]")
_LETTER = re.compile(r"[^\W\d_]")


@dataclass
class CleaningConfig:
    """Thresholds of the training-data filters; the recipe's ``cleaning:`` section sets these fields."""

    min_chars: int = 1
    max_chars: int = 400
    # A Hangul syllable carries about as much as three Latin letters and takes three UTF-8 bytes, so byte lengths of
    # a good ko-en pair are close (median ratio en/ko about 0.8). Short pairs vary too much ("I quit." / "나는 이번
    # 일에서 손을 떼겠어."), so the ratio is only checked once the longer side has ratio_min_bytes bytes.
    max_byte_ratio: float = 3.0
    ratio_min_bytes: int = 40
    require_hangul: bool = True
    max_hangul_in_english: float = 0.5
    drop_identical: bool = True
    drop_held_out: bool = True
    deduplicate: bool = True
    max_tokens: int | None = 128  # per side, counting the language tag or BOS and the EOS


@dataclass
class CleaningReport:
    """How many pairs of one corpus were read and how many each filter dropped."""

    corpus: str
    read: int = 0
    dropped: dict[str, int] = field(default_factory=dict)

    @property
    def kept(self) -> int:
        return self.read - sum(self.dropped.values())

    def drop(self, reason: str, count: int = 1) -> None:
        if reason not in DROP_REASONS:
            raise ValueError(f"unknown drop reason {reason!r}")
        if count:
            self.dropped[reason] = self.dropped.get(reason, 0) + count

    def as_dict(self) -> dict:
        dropped = {reason: self.dropped[reason] for reason in DROP_REASONS if reason in self.dropped}
        return {"read": self.read, "kept": self.kept, "dropped": dropped}


@dataclass(frozen=True)
class HeldOut:
    """The normalised sides of the dev and test sets: a training pair sharing one would inflate their scores."""

    ko: frozenset[str] = frozenset()
    en: frozenset[str] = frozenset()

    @classmethod
    def from_corpora(cls, normalized: Iterable[Dataset]) -> HeldOut:
        """From dev and test sets already passed through :func:`normalize_pairs`."""
        ko: set[str] = set()
        en: set[str] = set()
        for corpus in normalized:
            columns = corpus.to_dict()
            ko.update(columns["ko"])
            en.update(columns["en"])
        return cls(frozenset(ko), frozenset(en))

    def overlaps(self, ko: str, en: str) -> bool:
        return ko in self.ko or en in self.en


def normalize_pairs(dataset: Dataset) -> Dataset:
    """Both sides through :func:`nmt.normalize.normalize` (NFC/NFKC without breaking jamo, whitespace collapsed)."""
    return dataset.map(
        lambda batch: {lang: [normalize(text) for text in batch[lang]] for lang in LANGUAGES}, batched=True
    )


def clean(
    dataset: Dataset, config: CleaningConfig = CleaningConfig(), held_out: HeldOut = HeldOut(), corpus: str = ""
) -> tuple[Dataset, CleaningReport]:
    """Normalise a ``{"ko", "en"}`` dataset and drop the pairs that fail a filter; the report names each reason."""
    normalized = normalize_pairs(dataset)
    report = CleaningReport(corpus, read=len(normalized))
    columns = normalized.to_dict()  # iterating dataset["ko"] would fetch row by row
    seen: set[tuple[str, str]] = set()
    kept: list[int] = []
    for index, (ko, en) in enumerate(zip(columns["ko"], columns["en"])):
        reason = _drop_reason(ko, en, config)
        if reason is None and config.drop_held_out and held_out.overlaps(ko, en):
            reason = "in_dev_or_test"
        if reason is None and config.deduplicate and (ko, en) in seen:
            reason = "duplicate"
        if reason is None:
            seen.add((ko, en))
            kept.append(index)
        else:
            report.drop(reason)
    return normalized.select(kept), report


def drop_too_many_tokens(dataset: Dataset, tokenizer: Tokenizer, max_tokens: int, report: CleaningReport) -> Dataset:
    """Drop pairs with a side longer than ``max_tokens`` once encoded (``+2`` for the tag or BOS, and EOS)."""
    columns = dataset.to_dict()
    fits = [
        max(len(tokenizer.encode(ko)), len(tokenizer.encode(en))) + 2 <= max_tokens
        for ko, en in zip(columns["ko"], columns["en"])
    ]
    report.drop("too_many_tokens", fits.count(False))
    return dataset.select([index for index, fit in enumerate(fits) if fit])


def hangul_fraction(text: str) -> float:
    """Share of the letters in ``text`` that are Hangul (0.0 for text without letters)."""
    letters = _LETTER.findall(text)
    return sum(1 for letter in letters if _HANGUL.match(letter)) / len(letters) if letters else 0.0


def implausible_length_ratio(first: str, second: str, max_byte_ratio: float, min_bytes: int) -> bool:
    """One text has more than ``max_byte_ratio`` times the UTF-8 bytes of the other, the longer having at least
    ``min_bytes`` (shorter pairs vary too much to judge)."""
    shorter, longer = sorted((len(first.encode()), len(second.encode())))
    return longer >= min_bytes and longer > max_byte_ratio * shorter


def _drop_reason(ko: str, en: str, config: CleaningConfig) -> str | None:
    """The first filter, in :data:`DROP_REASONS` order, that the pair fails on its own (without other pairs)."""
    if not ko or not en:
        return "empty"
    if min(len(ko), len(en)) < config.min_chars:
        return "too_short"
    if max(len(ko), len(en)) > config.max_chars:
        return "too_long"
    if config.drop_identical and ko == en:
        return "identical"
    if config.require_hangul and not _HANGUL.search(ko):
        return "no_hangul_in_korean"
    if hangul_fraction(en) > config.max_hangul_in_english:
        return "hangul_in_english"
    if implausible_length_ratio(ko, en, config.max_byte_ratio, config.ratio_min_bytes):
        return "length_ratio"
    return None
