from pathlib import Path

import pytest
from datasets import Dataset

from training.clean import CleaningConfig, HeldOut, clean, hangul_fraction, implausible_length_ratio, normalize_pairs
from training.corpus import load_corpus
from training.recipe import CorpusSpec

FIXTURES = Path(__file__).parent / "fixtures"
# fixtures/noisy.tsv holds seven good pairs, then lines planted to fail one filter each, in this order.
CONFIG = CleaningConfig(min_chars=2, max_chars=200)
EXPECTED_DROPS = {
    "empty": 2,  # an empty Korean side; an English side of spaces and a zero-width space
    "too_short": 1,  # "가"
    "too_long": 1,  # a 210-character Korean side
    "identical": 1,  # "OK" / "OK"
    "no_hangul_in_korean": 1,
    "hangul_in_english": 1,  # "고양이가 좋아요 cat"
    "length_ratio": 1,  # "네." / a long English request
    "in_dev_or_test": 1,  # "Thank you." is a dev sentence
    "duplicate": 2,  # an exact repeat, and one equal once normalised (double space, full-width period)
}


@pytest.fixture(scope="module")
def held_out() -> HeldOut:
    return HeldOut.from_corpora([normalize_pairs(load_corpus(CorpusSpec(name="dev", path="tiny-dev"), FIXTURES))])


@pytest.fixture(scope="module")
def noisy() -> Dataset:
    return load_corpus(CorpusSpec(name="noisy", path="noisy.tsv", format="tsv"), FIXTURES)


def test_each_planted_line_is_dropped_for_its_reason(noisy, held_out):
    kept, report = clean(noisy, CONFIG, held_out, corpus="noisy")
    assert report.corpus == "noisy"
    assert report.read == 18
    assert report.dropped == EXPECTED_DROPS
    assert report.kept == len(kept) == 7
    assert report.as_dict() == {"read": 18, "kept": 7, "dropped": EXPECTED_DROPS}


def test_kept_pairs_are_normalised(noisy, held_out):
    kept, _ = clean(noisy, CONFIG, held_out)
    pairs = list(zip(kept["ko"], kept["en"]))
    assert ("저는 커피를 좋아해요.", "I like coffee.") in pairs  # no-break and ideographic spaces
    assert ("ㅋㅋ 정말 웃겨요.", "Haha, that is really funny.") in pairs  # compatibility jamo kept as they are
    assert pairs.count(("나는 학생입니다.", "I am a student.")) == 1
    assert ("네.", "Yes.") in pairs  # too short for the length ratio to judge


def test_filters_can_be_switched_off(noisy):
    lenient = CleaningConfig(
        min_chars=2, max_chars=200, drop_identical=False, deduplicate=False, require_hangul=False,
        max_hangul_in_english=1.0, max_byte_ratio=float("inf"),
    )
    _, report = clean(noisy, lenient)  # and no held-out sets
    assert report.dropped == {"empty": 2, "too_short": 1, "too_long": 1}


def test_held_out_sides_match_separately():
    held_out = HeldOut(ko=frozenset({"감사합니다."}), en=frozenset({"Thank you."}))
    assert held_out.overlaps("감사합니다.", "Thanks a lot.")
    assert held_out.overlaps("고마워.", "Thank you.")
    assert not held_out.overlaps("Thank you.", "감사합니다.")


def test_hangul_fraction_counts_letters_only():
    assert hangul_fraction("고양이 cat") == 0.5
    assert hangul_fraction("Python 3.12!") == 0.0
    assert hangul_fraction("123 ...") == 0.0
    assert hangul_fraction("ㅋㅋㅋ") == 1.0


def test_implausible_length_ratio_counts_bytes_and_spares_short_pairs():
    assert implausible_length_ratio("네.", "Could you please send me the report by tomorrow morning?", 3.0, 40)
    assert not implausible_length_ratio("네.", "Yes, sure.", 3.0, 40)  # too short to judge
    assert not implausible_length_ratio("안녕하세요, 반갑습니다.", "Hello, nice to meet you.", 3.0, 10)  # 33 vs 24 bytes
    assert implausible_length_ratio("a" * 10, "b" * 31, 3.0, 10) and not implausible_length_ratio("a" * 10, "b" * 30, 3.0, 10)
