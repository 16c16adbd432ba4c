"""nmt.fonts: pictures carry their own Hangul font, whatever fonts the system has."""

import warnings

from fontTools.ttLib import TTFont
from matplotlib import font_manager

from nmt.fonts import HANGUL_FONT_FAMILY, hangul_font_path, register_hangul_font
from nmt.plot_attention import plot_attention
from nmt.translator import Attention

KOREAN = "나는 학생입니다 한국어를 배웁니다"


def test_the_font_file_covers_hangul():
    cmap = TTFont(hangul_font_path(), lazy=True).getBestCmap()
    assert all(ord(character) in cmap for character in KOREAN.replace(" ", ""))
    # Every precomposed syllable, not just the ones above.
    assert all(code in cmap for code in range(0xAC00, 0xD7A4))


def test_registering_makes_the_family_known_to_matplotlib():
    families = register_hangul_font()
    assert families[0] == HANGUL_FONT_FAMILY
    found = font_manager.findfont(font_manager.FontProperties(family=HANGUL_FONT_FAMILY), fallback_to_default=False)
    assert found == str(hangul_font_path())


def test_a_heatmap_of_korean_pieces_draws_every_glyph(tmp_path):
    pieces = ["▁나는", "▁학생", "입니다", "</s>"]
    attention = Attention(pieces, ["▁I", "▁am", "▁a", "▁student"], [[0.25] * 4] * 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plot_attention(attention, tmp_path / "korean.png", title="한국어 제목")
    missing = [str(w.message) for w in caught if "missing from" in str(w.message)]
    assert missing == []
