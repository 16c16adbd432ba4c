"""Numbers the source does not contain: counted in translations, and discouraged while searching.

A small model that does not know a phrase around a number often writes a different number: "기원전 356년 7월 21일"
came out as "21 July 2156 ... March 21, 756" (release v14, flores-dev). Few tokens are digits, so BLEU and chrF
barely see it; a reader trusts a translated date or amount more than any other word, and an invented one is the
error that costs most. So:

* :func:`number_mismatches` counts, for a source and its translation, the source's numbers missing from the
  translation and the translation's numbers not in the source (``training.evaluate`` reports both);
* :class:`NumberGuard` lets a search take ``invented_number_penalty`` from the log-probability of every token that
  would start or extend a number which is not the start of a number in the source.

A number is compared by its digits alone, so "1,234.5" and "1234.5" agree. A translation may write a source's
number in another form, so the guard also allows what a source's numbers mean (:func:`numbers_meant`): a Korean
number with its units multiplied out ("38만" is 380,000; "3억 5천만" is 350,000,000), and an English month or
number word as digits ("July" is 7월, "five" 5). The penalty is soft all the same, and a number may stop short of
the source's (the guard checks that digits are a prefix of a number the source means, not that it ends).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal

import torch
from torch import Tensor

NUMBER = re.compile(r"\d[\d,.]*")  # digits with the separators inside and after them; compared by digits alone
TRAILING_NUMBER = re.compile(NUMBER.pattern + "$")  # the number a text ends in
TAIL_TOKENS = 8  # generated tokens read back to find the number a hypothesis is writing (longer ones are rare)
# A Korean number and its units ("5천만": 5 × 10³ × 10⁴); the powers of ten of 천, 만, 억 and 조.
KOREAN_UNIT_NUMBER = re.compile(r"(\d[\d,]*(?:\.\d+)?)\s?([천만억조]+)")
KOREAN_UNIT_POWERS = {"천": 3, "만": 4, "억": 8, "조": 12}
MONTHS = "january february march april may june july august september october november december".split()
SMALL_NUMBERS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
                 "sixteen seventeen eighteen nineteen twenty").split()
TENS = "thirty forty fifty sixty seventy eighty ninety".split()  # 30 to 90
ENGLISH_NUMBER_WORDS = {**{month: number for number, month in enumerate(MONTHS, start=1)},
                        **{word: number for number, word in enumerate(SMALL_NUMBERS)},
                        **{word: 10 * tens for tens, word in enumerate(TENS, start=3)}}
ENGLISH_WORD = re.compile(r"[A-Za-z]+")


def numbers_in(text: str) -> list[str]:
    """The digit strings of the numbers in ``text``, in order: "On 7/21, 1,234.5 won" → ["7", "21", "12345"]."""
    return [re.sub(r"\D", "", number) for number in NUMBER.findall(text)]


def numbers_meant(text: str) -> set[str]:
    """The digit strings a translation of ``text`` may write for its numbers: :func:`numbers_in`, each Korean number
    with its units multiplied out, alone and summed with the smaller-unit numbers right after it ("3억 5천만" →
    300000000, 50000000 and 350000000), and the numbers that English month and number words name."""
    meant = set(numbers_in(text)) | {_digits(value) for value in _korean_unit_values(text)}
    return meant | {str(ENGLISH_NUMBER_WORDS[word.lower()]) for word in ENGLISH_WORD.findall(text)
                    if word.lower() in ENGLISH_NUMBER_WORDS}


def _korean_unit_values(text: str) -> Iterator[Decimal]:
    """Each Korean number with units in ``text`` multiplied out, and after each one that continues a larger-unit
    number before it (only spaces between), their sum so far."""
    total, last_power, last_end = Decimal(0), None, None
    for match in KOREAN_UNIT_NUMBER.finditer(text):
        power = sum(KOREAN_UNIT_POWERS[unit] for unit in match.group(2))
        value = Decimal(match.group(1).replace(",", "")) * 10**power
        yield value
        follows = last_end is not None and not text[last_end : match.start()].strip() and power < last_power
        total = total + value if follows else value
        if follows:
            yield total
        last_power, last_end = power, match.end()


def _digits(value: Decimal) -> str:
    """The digits of a number as :func:`numbers_in` reads them: 2.5 × 10⁸ → "250000000", 1.25 → "125"."""
    return str(int(value)) if value == value.to_integral_value() else re.sub(r"\D", "", format(value.normalize(), "f"))


def number_mismatches(source: str, translation: str) -> tuple[int, int]:
    """(the source's numbers the translation lacks, the translation's numbers the source lacks), with multiplicity."""
    wanted, written = Counter(numbers_in(source)), Counter(numbers_in(translation))
    return sum((wanted - written).values()), sum((written - wanted).values())


class NumberGuard:
    """Which next tokens would write a number that no source number starts with, given a vocabulary's pieces.

    ``pieces`` holds each token id's text (word-initial pieces with a leading space, control and byte pieces
    empty). The verdicts depend on the source's numbers and the number the hypothesis is writing, so they are
    cached by those two: most rows are not inside a number and share one verdict per source. A verdict is kept as
    a row of 0/1 over the digit-bearing ids, so a step applies all its rows' verdicts in one tensor operation.
    """

    def __init__(self, pieces: Sequence[str]):
        self.pieces = list(pieces)
        self.digit_ids = [i for i, piece in enumerate(self.pieces) if any(c.isdigit() for c in piece)]
        # tokens after which a number may still be being written: those ending in a digit or a separator
        self.may_continue = frozenset(i for i, piece in enumerate(self.pieces) if piece[-1:].isdigit() or piece[-1:] in ",.")
        self._verdicts: dict[tuple[frozenset[str], str], Tensor] = {}
        self._digit_index: dict[torch.device, Tensor] = {}

    @classmethod
    def from_tokenizer(cls, tokenizer) -> NumberGuard:
        return cls([piece_text(tokenizer.sp, i) for i in range(tokenizer.sp.get_piece_size())])

    def source_numbers(self, ids: Sequence[int]) -> frozenset[str]:
        """Every prefix of every number a source (its ids) means (:func:`numbers_meant`), the set a written number
        must stay within."""
        return frozenset(number[:end] for number in numbers_meant(self.text(ids)) for end in range(1, len(number) + 1))

    def text(self, ids: Sequence[int]) -> str:
        return "".join(self.pieces[i] for i in ids)

    def invented(self, allowed: frozenset[str], prefix: Sequence[int]) -> list[int]:
        """The digit-bearing ids that, after the generated ``prefix``, would write a number outside ``allowed``."""
        return [i for i, invents in zip(self.digit_ids, self.verdict(allowed, prefix).tolist()) if invents]

    def verdict(self, allowed: frozenset[str], prefix: Sequence[int]) -> Tensor:
        """:meth:`invented` as 0/1 over ``digit_ids`` (float32, on the CPU), cached."""
        writing = ""
        if prefix and prefix[-1] in self.may_continue:
            found = TRAILING_NUMBER.search(self.text(prefix[-TAIL_TOKENS:]))
            writing = found.group() if found else ""
        key = (allowed, writing)
        if key not in self._verdicts:
            self._verdicts[key] = torch.tensor([not self._keeps_to(allowed, writing, self.pieces[i]) for i in self.digit_ids],
                                               dtype=torch.float32)
        return self._verdicts[key]

    def digit_index(self, device: torch.device) -> Tensor:
        if device not in self._digit_index:
            self._digit_index[device] = torch.tensor(self.digit_ids, dtype=torch.long, device=device)
        return self._digit_index[device]

    @staticmethod
    def _keeps_to(allowed: frozenset[str], writing: str, piece: str) -> bool:
        """Whether every number the piece completes or starts, after the number being written, is in ``allowed``
        (which holds whole source numbers and their prefixes alike)."""
        text = piece if piece.startswith(" ") else writing + piece
        return all(number in allowed for number in numbers_in(text))


def piece_text(sp, token: int) -> str:
    """What a SentencePiece token writes: a word-initial piece's "▁" as a space, a byte-fallback piece of an ASCII
    byte ("<0x33>") as its character (a vocabulary without digit pieces spells numbers that way), nothing for control
    pieces and the bytes of longer UTF-8 characters."""
    if sp.is_byte(token):
        byte = int(sp.id_to_piece(token)[3:-1], 16)
        return chr(byte) if byte < 0x80 else ""
    if sp.is_control(token) or sp.is_unknown(token):
        return ""
    return sp.id_to_piece(token).replace("\u2581", " ")


@dataclass
class NumberRules:
    """A search's guard with each row's allowed numbers and the penalty: applied to a step's log-probabilities."""

    guard: NumberGuard
    row_numbers: Sequence[frozenset[str]]  # one per row of the step's (rows × vocabulary) scores
    penalty: float

    def apply(self, log_probs: Tensor, prefixes: Tensor) -> None:
        """Lower, in place, each row's tokens that would invent a number; ``prefixes`` are the rows' ids so far."""
        tails = prefixes[:, -TAIL_TOKENS:].tolist()
        verdicts = torch.stack([self.guard.verdict(allowed, tail) for allowed, tail in zip(self.row_numbers, tails, strict=True)])
        columns = self.guard.digit_index(log_probs.device)
        log_probs[:, columns] -= self.penalty * verdicts.to(log_probs.device)
