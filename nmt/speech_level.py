"""Korean speech levels, read from a sentence's final ending, and the rewrite of a plain ending into a formal one.

A Korean sentence says how formally it addresses its reader in the ending of its last predicate: 합쇼체, formal
polite (있습니다, 합니다, 입니까); 해요체, polite (있어요, 하세요); 해라체, plain (있다, 한다, 이다), the register
of encyclopaedias, newspapers and textbooks. English marks none of this, so a translation into Korean picks one,
and reference translations differ by convention: the same kind of English text is rendered formal in one test set
and plain in another. chrF counts the ending's characters, so the level a model chose moves its score.

Hangul syllables are composed arithmetically (Unicode 3.12): index = (initial × 21 + vowel) × 28 + final, from
U+AC00; so a final consonant can be read and replaced without a table.
"""

from __future__ import annotations

import re
from enum import Enum

FIRST_SYLLABLE, SYLLABLES, FINALS = 0xAC00, 11172, 28
NO_FINAL, FINAL_N, FINAL_L, FINAL_B = 0, 4, 8, 17  # no final consonant, ㄴ, ㄹ, ㅂ

_CLOSING = r"[\s.!?。…\"'”’»)\]}]*$"  # what may follow the last word: stops, quotes, brackets, spaces
_TRAILING = re.compile(_CLOSING)
_PLAIN_DECLARATIVE = re.compile(rf"([가-힣]+)다(?={_CLOSING})")


class SpeechLevel(str, Enum):
    FORMAL = "formal"  # 합쇼체: -ㅂ니다, -습니다, -ㅂ니까, -십시오
    POLITE = "polite"  # 해요체: -요, -죠
    PLAIN = "plain"  # 해라체, declarative: -다
    OTHER = "other"  # informal 해체, plain questions and commands, fragments, titles, text that is not Korean


# The levels a translation into Korean can be asked for (a tag on the source, nmt.tokenizer.level_tag): the three
# that a sentence's ending names. OTHER is what is left over, not a register anyone asks for.
REQUESTABLE_LEVELS = (SpeechLevel.FORMAL, SpeechLevel.POLITE, SpeechLevel.PLAIN)


def is_syllable(char: str) -> bool:
    return 0 <= ord(char) - FIRST_SYLLABLE < SYLLABLES


def final_consonant(syllable: str) -> int:
    """The index of a syllable's final consonant (0: none)."""
    return (ord(syllable) - FIRST_SYLLABLE) % FINALS


def with_final(syllable: str, final: int) -> str:
    """The syllable with its final consonant replaced (0 removes it)."""
    return chr(ord(syllable) - final_consonant(syllable) + final)


def _is_formal_ending(word: str) -> bool:
    """-습니다/-습니까, or a syllable closed by ㅂ before 니다/니까 (합니다, 입니까); 아니다 is plain."""
    if word.endswith(("십시오", "시오")):
        return True
    if not word.endswith(("니다", "니까")) or len(word) < 3:
        return False
    before = word[-3]
    return before == "습" or (is_syllable(before) and final_consonant(before) == FINAL_B)


def speech_level(sentence: str) -> SpeechLevel:
    """The speech level of a sentence's final ending; OTHER where the ending names none."""
    text = _TRAILING.sub("", sentence)
    if not text or not is_syllable(text[-1]):
        return SpeechLevel.OTHER
    if _is_formal_ending(text):
        return SpeechLevel.FORMAL
    if text[-1] in "요죠":
        return SpeechLevel.POLITE
    if text[-1] == "다" and len(text) > 1 and is_syllable(text[-2]):  # not "다" alone, nor after a Latin word
        return SpeechLevel.PLAIN
    return SpeechLevel.OTHER


def formal_stem(stem: str) -> str:
    """The stem with the formal declarative ending: 있 → 있습니다, 하 → 합니다, 멀 → 멉니다 (ㄹ drops before ㅂ)."""
    last = final_consonant(stem[-1])
    if last in (NO_FINAL, FINAL_L):
        return stem[:-1] + with_final(stem[-1], FINAL_B) + "니다"
    return stem + "습니다"


def to_formal(sentence: str) -> str:
    """The sentence with a plain declarative ending (해라체) made formal (합쇼체); other sentences unchanged.

    The plain present of verbs carries -ㄴ다/-는다 (한다, 먹는다), which the formal ending replaces (합니다,
    먹습니다); elsewhere the ending attaches to the stem as it stands (했다 → 했습니다, 이다 → 입니다). Only the last
    predicate changes: a pronoun inside the sentence (나 → 저) stays as it was. A noun that takes the copula
    without 이 (사과다) gets a verb's ending (사괍니다, not 사과입니다): telling the two apart needs a morphological
    analyser.
    """
    if speech_level(sentence) is not SpeechLevel.PLAIN:
        return sentence
    match = _PLAIN_DECLARATIVE.search(sentence)
    stem = match.group(1)
    if stem.endswith("는") and len(stem) > 1:  # 먹는다: the present marker after a consonant stem
        stem = stem[:-1]
    elif final_consonant(stem[-1]) == FINAL_N:  # 한다, 산다 (살-): the present marker -ㄴ- closes the last syllable
        stem = stem[:-1] + with_final(stem[-1], NO_FINAL)
    return sentence[: match.start()] + formal_stem(stem) + sentence[match.end():]
