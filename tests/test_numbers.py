"""Numbers in translations: counting the missing and invented ones, and the guard that tells a search which tokens
would invent one."""

import pytest
import torch

from nmt.numbers import NumberGuard, NumberRules, number_mismatches, numbers_in, numbers_meant

# A toy vocabulary: ids 0-3 are special (empty text), word-initial pieces start with a space.
PIECES = ["", "", "", "", " 3", "5", "6", " 7", " 2", "1", " the", ",", "56", " year"]
THREE, FIVE, SIX, SEVEN, TWO, ONE, THE, COMMA, FIFTY_SIX, YEAR = range(4, 14)
DIGIT_IDS = {THREE, FIVE, SIX, SEVEN, TWO, ONE, FIFTY_SIX}


def test_numbers_are_compared_by_their_digits():
    assert numbers_in("On 7/21, 1,234.5 won and 1234.5 more.") == ["7", "21", "12345", "12345"]
    assert numbers_in("no numbers here") == []


@pytest.mark.parametrize("text, meant", [
    ("38만명 이상", {"38", "380000"}),  # 380,000 people: "380,000" must not be an invention
    ("3억 5천만 원", {"3", "5", "300000000", "50000000", "350000000"}),  # and "350 million" is the sum's prefix
    ("1,100만 파운드", {"1100", "11000000"}),
    ("2.5억", {"25", "250000000"}),
    ("3억, 5천만", {"3", "5", "300000000", "50000000"}),  # not one number: no sum
    ("5천만 3억", {"5", "3", "50000000", "300000000"}),  # a larger unit after a smaller one starts a new number
    ("On July 21, at five", {"7", "21", "5"}),  # 7월 21일, 다섯 시 or 5시
    ("7시 55분", {"7", "55"}),
])
def test_a_source_means_its_numbers_in_other_forms_too(text, meant):
    assert numbers_meant(text) == meant


def test_mismatches_count_missing_and_invented_numbers_with_multiplicity():
    assert number_mismatches("기원전 356년 7월 21일", "on 21 July 2156") == (2, 1)  # 356 and 7 missing, 2156 invented
    assert number_mismatches("1,000 and 1,000", "1000") == (1, 0)
    assert number_mismatches("3시", "three o'clock") == (1, 0)


def test_the_guard_knows_the_digit_pieces_and_the_sources_numbers():
    guard = NumberGuard(PIECES)
    assert set(guard.digit_ids) == DIGIT_IDS
    assert guard.source_numbers([THE, THREE, FIVE, SIX, YEAR]) == {"3", "35", "356"}
    assert guard.source_numbers([THE, YEAR]) == frozenset()


def test_outside_a_number_only_starts_of_source_numbers_are_allowed():
    guard = NumberGuard(PIECES)
    allowed = guard.source_numbers([THREE, FIVE, SIX])
    assert set(guard.invented(allowed, [])) == DIGIT_IDS - {THREE}
    assert set(guard.invented(allowed, [THE])) == DIGIT_IDS - {THREE}


def test_inside_a_number_a_piece_must_continue_it_within_a_source_number():
    guard = NumberGuard(PIECES)
    allowed = guard.source_numbers([THREE, FIVE, SIX])
    # after "3": "5" (35) and "56" (356) continue it; word-initial pieces start a new number
    assert set(guard.invented(allowed, [THE, THREE])) == DIGIT_IDS - {FIVE, FIFTY_SIX, THREE}
    assert set(guard.invented(allowed, [THREE, COMMA])) == DIGIT_IDS - {FIVE, FIFTY_SIX, THREE}  # "3,5" is 35
    assert set(guard.invented(allowed, [THREE, FIVE, SIX])) == DIGIT_IDS - {THREE}  # 356 is whole: nothing extends it


def test_a_korean_number_with_units_allows_its_value_written_out():
    guard = NumberGuard([*PIECES, "만"])
    allowed = guard.source_numbers([THREE, FIVE, len(PIECES)])  # "35만": 350,000
    assert {"35", "350000", "3500"} <= allowed
    assert set(guard.invented(allowed, [THREE, FIVE])) == DIGIT_IDS - {THREE}  # "350…" may go on only with 0s
    assert "36" not in allowed


def test_a_source_without_numbers_makes_every_digit_an_invention():
    guard = NumberGuard(PIECES)
    assert set(guard.invented(frozenset(), [THE])) == DIGIT_IDS


def test_rules_lower_each_rows_inventions_and_leave_banned_tokens_banned():
    guard = NumberGuard(PIECES)
    log_probs = torch.zeros(2, len(PIECES))
    log_probs[1, SEVEN] = float("-inf")
    prefixes = torch.tensor([[2, THE], [2, THREE]])  # BOS then a word; BOS then "3"
    rows = [guard.source_numbers([THREE, FIVE, SIX]), frozenset({"7"})]
    NumberRules(guard, rows, penalty=2.5).apply(log_probs, prefixes)
    lowered = {(row, token) for row, token in (log_probs == -2.5).nonzero().tolist()}
    assert lowered == {(0, t) for t in DIGIT_IDS - {THREE}} | {(1, t) for t in DIGIT_IDS - {SEVEN}}
    assert log_probs[1, SEVEN] == float("-inf")
    assert (log_probs[:, [THE, YEAR, COMMA]] == 0).all()


def test_rules_need_one_number_set_per_row():
    rules = NumberRules(NumberGuard(PIECES), [frozenset()], penalty=1.0)
    with pytest.raises(ValueError):
        rules.apply(torch.zeros(2, len(PIECES)), torch.zeros(2, 1, dtype=torch.long))


def test_the_guard_reads_a_real_tokenizer(fixture_translator):
    tokenizer = fixture_translator.tokenizer
    guard = NumberGuard.from_tokenizer(tokenizer)
    ids = tokenizer.encode("Room 356 opens at 7.")
    assert guard.source_numbers(ids) >= {"356", "7"}
    assert all(any(c.isdigit() for c in guard.pieces[i]) for i in guard.digit_ids)
    assert guard.pieces[tokenizer.eos_id] == "" and guard.pieces[tokenizer.language_id("en")] == ""
