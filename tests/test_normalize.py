"""normalize(): Korean composed into syllables, compatibility jamo kept, everything else NFKC-folded."""

import unicodedata

import pytest

from nmt.normalize import normalize

KOREAN = "한국어 번역기는 잘 작동합니다. 값이 없어요!"


@pytest.mark.parametrize("form", ["NFC", "NFD", "NFKC", "NFKD"])
def test_every_unicode_form_of_korean_normalises_to_composed_syllables(form):
    assert normalize(unicodedata.normalize(form, KOREAN)) == KOREAN


def test_decomposed_input_really_is_conjoining_jamo():
    """Guards the test above: NFD must produce conjoining jamo (U+1100..U+11FF), not syllables."""
    decomposed = unicodedata.normalize("NFD", "한")
    assert [f"{ord(c):04X}" for c in decomposed] == ["1112", "1161", "11AB"]
    assert normalize(decomposed) == "한"


@pytest.mark.parametrize("text", ["ㅋㅋㅋ", "ㅠㅠ 너무 슬퍼", "ㄱ", "ㅎㅇ", "\uffa1\uffa4"])  # the last: half-width jamo
def test_compatibility_jamo_are_kept(text):
    assert normalize(text) == text


def test_compatibility_jamo_kept_while_neighbours_are_folded():
    assert normalize("ＯＫㅋㅋ１２") == "OKㅋㅋ12"


def test_full_width_latin_digits_and_punctuation_are_folded():
    assert normalize("ＡＢＣ ｘｙｚ １２３！") == "ABC xyz 123!"


def test_whitespace_is_collapsed_and_trimmed():
    assert normalize("  나는\t학생\u3000입니다 \n\n 그렇죠 ") == "나는 학생 입니다 그렇죠"


def test_control_and_invisible_characters_are_dropped():
    assert normalize("a\u200bb\x00c\ufeffd\u200e") == "abcd"


def test_normalising_twice_changes_nothing():
    text = unicodedata.normalize("NFD", "ＡＢＣ ㅋㅋ 한국어\t  ") + "ﬁ"
    once = normalize(text)
    assert once == "ABC ㅋㅋ 한국어 fi"
    assert normalize(once) == once
