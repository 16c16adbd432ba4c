"""split_sentences(): sentence boundaries in Korean and English, abbreviations kept whole."""

import pytest

from nmt.sentences import split_sentences


@pytest.mark.parametrize(
    "text, sentences",
    [
        ("나는 학생입니다. 그는 의사입니다.", ["나는 학생입니다.", "그는 의사입니다."]),
        ("I am a student. He is a doctor.", ["I am a student.", "He is a doctor."]),
        ("Really?! Yes… 네。 좋아요", ["Really?!", "Yes…", "네。", "좋아요"]),
        ('He said "Hi." Then he left.', ['He said "Hi."', "Then he left."]),
        ("Mr. Smith went home. He slept.", ["Mr. Smith went home.", "He slept."]),
        ("See e.g. Fig. 3 for details.", ["See e.g. Fig. 3 for details."]),
        ("The U.S. Army is big. Yes.", ["The U.S. Army is big.", "Yes."]),
        ("Pi is 3.14 exactly", ["Pi is 3.14 exactly"]),
        ("Hello. world", ["Hello. world"]),  # a lowercase word does not start a sentence
        ("  no boundary here  ", ["no boundary here"]),
    ],
)
def test_split_sentences(text, sentences):
    assert split_sentences(text) == sentences


@pytest.mark.parametrize("text", ["", "   ", "\n\t"])
def test_blank_text_has_no_sentences(text):
    assert split_sentences(text) == []
