"""The joint SentencePiece tokenizer: lossless on any Unicode text, special ids, language tags, save/load."""

from pathlib import Path

import pytest

from nmt.normalize import normalize
from fixture_model import without_bt
from nmt.tokenizer import SPEECH_LEVEL_TAGS, Tokenizer, TokenizerConfig


@pytest.fixture(scope="module")
def tokenizer(fixture_translator) -> Tokenizer:
    """The fixture tokenizer: trained on the 80 fixture sentences, so most of Hangul is unseen."""
    return fixture_translator.tokenizer


def special_ids(tokenizer: Tokenizer) -> set[int]:
    return {tokenizer.pad_id, tokenizer.unk_id, tokenizer.bos_id, tokenizer.eos_id}


def test_every_hangul_syllable_round_trips(tokenizer):
    syllables = [chr(code) for code in range(0xAC00, 0xD7A4)]
    ids = tokenizer.encode(" ".join(syllables))  # one call: 11,172 syllables as words
    decoded = tokenizer.decode(ids).split(" ")
    assert len(decoded) == len(syllables) == 11172
    assert [s for s, d in zip(syllables, decoded) if s != d] == []
    assert not special_ids(tokenizer) & set(ids)
    assert any(tokenizer.sp.is_byte(i) for i in ids), "unseen syllables should be spelled as bytes"


@pytest.mark.parametrize(
    "text",
    [
        "😀👍🏽 좋아요 👩‍💻",  # emoji, skin-tone modifier, zero-width-joiner sequence
        "龘 鬱 㐀",  # rare Hanja / CJK extension A
        "𓀀 𝄞 ∮ ¿Qué?",  # characters far outside the training text
        "나는 학생입니다. 🎓",
    ],
)
def test_unseen_characters_become_bytes_never_unk_or_eos(tokenizer, text):
    ids = tokenizer.encode(text)
    assert not special_ids(tokenizer) & set(ids)
    assert tokenizer.decode(ids) == normalize(text)


def test_special_ids_and_pieces(tokenizer):
    ids = [tokenizer.pad_id, tokenizer.unk_id, tokenizer.bos_id, tokenizer.eos_id]
    assert ids == [0, 1, 2, 3]
    assert tokenizer.pieces(ids) == ["<pad>", "<unk>", "<s>", "</s>"]


def test_language_tags(tokenizer):
    assert tokenizer.languages == ["ko", "en"]
    assert tokenizer.pieces([tokenizer.language_id("ko"), tokenizer.language_id("en")]) == ["<2ko>", "<2en>"]
    with pytest.raises(ValueError, match="'fr'.*ko, en"):
        tokenizer.language_id("fr")


def test_tag_typed_in_the_text_is_plain_text(tokenizer):
    """Only source_ids may insert a tag: user text must not be able to choose the target language."""
    ids = tokenizer.encode("<2ko> hello")
    assert not {tokenizer.language_id("ko"), tokenizer.language_id("en")} & set(ids)
    assert tokenizer.decode(ids) == "<2ko> hello"


def test_source_and_target_sequences(tokenizer):
    text_ids = tokenizer.encode("나는 학생입니다.")
    assert tokenizer.source_ids("나는 학생입니다.", "en") == [tokenizer.language_id("en"), *text_ids, tokenizer.eos_id]
    assert tokenizer.target_ids("나는 학생입니다.") == [tokenizer.bos_id, *text_ids, tokenizer.eos_id]


def test_max_tokens_truncates_but_keeps_tag_and_eos(tokenizer):
    source = tokenizer.source_ids("오늘은 날씨가 좋습니다. " * 5, "en", max_tokens=6)
    target = tokenizer.target_ids("The weather is nice today. " * 5, max_tokens=6)
    assert len(source) == len(target) == 6
    assert (source[0], source[-1]) == (tokenizer.language_id("en"), tokenizer.eos_id)
    assert (target[0], target[-1]) == (tokenizer.bos_id, tokenizer.eos_id)


def test_decode_drops_bos_eos_and_padding(tokenizer):
    ids = tokenizer.target_ids("I am a student.") + [tokenizer.pad_id] * 3
    assert tokenizer.decode(ids) == "I am a student."


def test_save_load_round_trip(tokenizer, tmp_path):
    tokenizer.save(tmp_path / "spm.model")
    loaded = Tokenizer.load(tmp_path / "spm.model")
    text = "그녀는 선생님입니다. She is a teacher. 😀"
    assert loaded.vocab_size == tokenizer.vocab_size
    assert loaded.languages == tokenizer.languages
    assert loaded.source_ids(text, "ko") == tokenizer.source_ids(text, "ko")
    assert loaded.decode(loaded.encode(text)) == text


def test_back_translation_tag_is_one_reserved_token(tokenizer):
    """``<bt>`` is a control piece: only ``tagged=True`` inserts it, typed text never encodes to it."""
    assert tokenizer.pieces([tokenizer.bt_id]) == ["<bt>"]
    assert tokenizer.bt_id not in tokenizer.encode("<bt> 나는 학생입니다. <bt>")
    plain = tokenizer.source_ids("나는 학생입니다.", "en")
    tagged = tokenizer.source_ids("나는 학생입니다.", "en", tagged=True)
    assert tagged == [plain[0], tokenizer.bt_id, *plain[1:]]
    assert tokenizer.decode(tagged) == tokenizer.decode(plain) == "나는 학생입니다."


def test_tagged_source_truncation_keeps_tags_and_eos(tokenizer):
    source = tokenizer.source_ids("오늘은 날씨가 좋습니다. " * 5, "en", max_tokens=6, tagged=True)
    assert len(source) == 6
    assert source[:2] == [tokenizer.language_id("en"), tokenizer.bt_id] and source[-1] == tokenizer.eos_id


def test_tokenizer_from_before_the_tag_works_as_before(tokenizer):
    """A tokenizer without ``<bt>``: no tag id, the same sources, tagging refused."""
    old = without_bt(tokenizer)
    assert old.bt_id is None
    assert "<bt>" not in old.pieces(range(old.vocab_size))
    text_ids = old.encode("나는 학생입니다.")
    assert old.source_ids("나는 학생입니다.", "en") == [old.language_id("en"), *text_ids, old.eos_id]
    with pytest.raises(ValueError, match="no <bt> piece"):
        old.source_ids("나는 학생입니다.", "en", tagged=True)


def test_control_pieces_are_appended_and_every_old_id_keeps_its_piece(tokenizer):
    old = without_bt(tokenizer)
    grown = old.with_control_pieces(["<bt>", "<bt>"])
    assert grown.vocab_size == old.vocab_size + 1 and grown.bt_id == old.vocab_size
    assert grown.pieces(range(old.vocab_size)) == old.pieces(range(old.vocab_size))
    text = "나는 학생입니다. <bt> I am a student."
    assert grown.encode(text) == old.encode(text)  # a control piece never matches typed text
    assert grown.source_ids(text, "en", tagged=True) == [old.language_id("en"), grown.bt_id, *old.encode(text), old.eos_id]
    assert grown.with_control_pieces(["<bt>"]).model_proto == grown.model_proto


def test_build_reuses_a_tokenizer_file_and_adds_the_tag(tokenizer, tmp_path):
    without_bt(tokenizer).save(tmp_path / "old.model")
    reused = Tokenizer.build([], TokenizerConfig(reuse=str(tmp_path / "old.model")))
    assert reused.model_proto == without_bt(tokenizer).with_control_pieces(["<bt>"]).model_proto
    with pytest.raises(ValueError, match="no language tag for ja"):
        Tokenizer.build([], TokenizerConfig(reuse=str(tmp_path / "old.model"), languages=("ko", "en", "ja")))


def test_speech_level_tags_follow_the_language_and_back_translation_tags(level_translator):
    """``<formal>``/``<polite>``/``<plain>`` are control pieces placed after ``<2ko>`` (and ``<bt>``); never generated."""
    tokenizer = level_translator.tokenizer
    assert sorted(tokenizer.speech_levels) == ["formal", "plain", "polite"]
    plain = tokenizer.source_ids("I am a student.", "ko")
    formal = tokenizer.source_ids("I am a student.", "ko", level="formal")
    assert formal == [plain[0], tokenizer.level_ids["formal"], *plain[1:]]
    both = tokenizer.source_ids("I am a student.", "ko", tagged=True, level="plain")
    assert both[:3] == [plain[0], tokenizer.bt_id, tokenizer.level_ids["plain"]] and both[3:] == plain[1:]
    assert tokenizer.pieces(list(tokenizer.level_ids.values())) == [f"<{level}>" for level in tokenizer.speech_levels]
    assert not set(tokenizer.level_ids.values()) & set(tokenizer.encode("<formal> I am <plain> a student."))
    assert set(tokenizer.level_ids.values()) <= set(tokenizer.never_generated)
    assert tokenizer.decode(formal) == "I am a student."


def test_a_tokenizer_without_level_tags_refuses_a_level(tokenizer):
    assert tokenizer.speech_levels == [] and tokenizer.level_ids == {}
    with pytest.raises(ValueError, match="no <formal> piece"):
        tokenizer.source_ids("I am a student.", "ko", level="formal")


def test_level_tags_can_be_appended_to_a_released_tokenizer(tokenizer, tmp_path):
    """A recipe that starts tagging from a released model keeps every id and adds the three tags at the end."""
    tokenizer.save(tmp_path / "released.model")
    grown = Tokenizer.build([], TokenizerConfig(reuse=str(tmp_path / "released.model")), SPEECH_LEVEL_TAGS)
    assert grown.vocab_size == tokenizer.vocab_size + 3
    assert grown.pieces(range(tokenizer.vocab_size)) == tokenizer.pieces(range(tokenizer.vocab_size))
    assert sorted(grown.level_ids.values()) == list(range(tokenizer.vocab_size, tokenizer.vocab_size + 3))
