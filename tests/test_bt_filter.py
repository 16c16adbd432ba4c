"""The back-translation output filters: each failure is dropped under its own reason and counted."""

import pytest

from training.bt_filter import BT_DROP_REASONS, OutputFilterConfig, drop_reason, filter_translations, repeats_ngram

LONG_KOREAN = "나는 매일 아침 일곱 시에 일어나서 학교에 갑니다."  # 68 UTF-8 bytes


@pytest.mark.parametrize(
    ("source", "translation", "reason"),
    [
        ("나는 학생입니다.", "I am a student.", None),
        ("", "I am a student.", "empty"),
        ("나는 학생입니다.", " \u200b ", "empty"),  # nothing left once normalised
        ("Seoul 2024", "Seoul  2024", "copy"),  # equal once whitespace is collapsed
        (LONG_KOREAN, "I.", "length_ratio"),
        (LONG_KOREAN, "I go to school at seven. " * 12, "length_ratio"),  # checked before the loop
        ("나는 학생입니다.", "I am am am am a student.", "repetition"),
        ("나는 학생입니다.", "I am a student a student a student a student.", "repetition"),
        ("정말 정말 좋아요.", "very very very good.", None),  # three in a row occurs in real text
    ],
)
def test_drop_reason(source, translation, reason):
    assert drop_reason(source, translation) == reason
    assert reason is None or reason in BT_DROP_REASONS


def test_filter_translations_keeps_order_and_counts_every_drop():
    sources = ["가", "", "나는 학생입니다.", "OK", "그는 의사입니다."]
    outputs = ["A", "B", "I am a student.", "OK", "he he he he he"]
    kept, dropped = filter_translations(sources, outputs)
    assert kept == [0, 2]
    assert dropped == {"empty": 1, "copy": 1, "repetition": 1}
    assert len(kept) + sum(dropped.values()) == len(sources)


def test_thresholds_come_from_the_config():
    loose = OutputFilterConfig(max_repeats=6)
    assert drop_reason("나는 학생입니다.", "I am am am am a student.", loose) is None
    assert drop_reason(LONG_KOREAN, "I.", OutputFilterConfig(ratio_min_bytes=100)) is None


def test_repeats_ngram_finds_loops_of_every_length_up_to_the_limit():
    words = "x a b c a b c a b c a b c y".split()
    assert repeats_ngram(words, max_ngram=3, max_repeats=4)
    assert not repeats_ngram(words, max_ngram=2, max_repeats=4)
    assert not repeats_ngram(words, max_ngram=3, max_repeats=5)
    assert not repeats_ngram([], max_ngram=4, max_repeats=4)
