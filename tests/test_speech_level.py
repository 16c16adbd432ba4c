import pytest

from nmt.speech_level import SpeechLevel, final_consonant, speech_level, to_formal, with_final


def test_final_consonants_are_read_and_replaced_arithmetically():
    assert final_consonant("하") == 0 and final_consonant("한") == 4 and final_consonant("합") == 17
    assert with_final("하", 17) == "합" and with_final("한", 0) == "하" and with_final("멀", 17) == "멉"


@pytest.mark.parametrize("sentence, level", [
    ("저는 학생입니다.", SpeechLevel.FORMAL),
    ("감사합니다!", SpeechLevel.FORMAL),
    ("여기에 있습니까?", SpeechLevel.FORMAL),
    ("잠시 기다려 주십시오.", SpeechLevel.FORMAL),
    ("어디 가세요?", SpeechLevel.POLITE),
    ("맛있죠.", SpeechLevel.POLITE),
    ("그는 학생이다.", SpeechLevel.PLAIN),
    ("그것은 사실이 아니다.", SpeechLevel.PLAIN),  # 니다 after an open syllable is not formal
    ('그는 "좋다"라고 말했다."', SpeechLevel.PLAIN),
    ("밥 먹었어?", SpeechLevel.OTHER),
    ("대한민국의 수도", SpeechLevel.OTHER),
    ("Hello.", SpeechLevel.OTHER),
    ("이것은 PDF다.", SpeechLevel.OTHER),  # the copula after a Latin word: no stem to make formal
    ("다!", SpeechLevel.OTHER),
    ("", SpeechLevel.OTHER),
])
def test_the_final_ending_names_the_speech_level(sentence, level):
    assert speech_level(sentence) is level


@pytest.mark.parametrize("plain, formal", [
    ("그는 학생이다.", "그는 학생입니다."),
    ("어제 비가 왔다.", "어제 비가 왔습니다."),
    ("서울에 많은 사람이 있다", "서울에 많은 사람이 있습니다"),
    ("그녀는 매일 운동한다.", "그녀는 매일 운동합니다."),
    ("우리는 밥을 먹는다.", "우리는 밥을 먹습니다."),
    ("그는 그 사실을 안다.", "그는 그 사실을 압니다."),  # 알- + -ㄴ다
    ("길이 멀다.", "길이 멉니다."),  # ㄹ drops before ㅂ
    ("그것은 사실이 아니다.", "그것은 사실이 아닙니다."),
    ("비가 올 것이다!", "비가 올 것입니다!"),
    ("“이것이 답이다.”", "“이것이 답입니다.”"),
])
def test_a_plain_ending_becomes_formal(plain, formal):
    assert to_formal(plain) == formal
    assert speech_level(to_formal(plain)) is SpeechLevel.FORMAL


@pytest.mark.parametrize("sentence", ["저는 학생입니다.", "어디 가세요?", "밥 먹었어?", "대한민국의 수도", "Hello.", "이것은 PDF다.", ""])
def test_other_levels_are_left_as_they_are(sentence):
    assert to_formal(sentence) == sentence


def test_only_the_last_predicate_changes():
    assert to_formal("비가 온다고 했다.") == "비가 온다고 했습니다."
