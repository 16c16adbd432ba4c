"""The Hangul font every picture and the web page carry, so Korean never depends on the fonts a system has.

NanumGothic (SIL Open Font License) ships inside the ``koreanize-matplotlib`` wheel. We only take its file and
register it with matplotlib's font manager; importing ``koreanize_matplotlib`` would also rewrite global rc
settings as a side effect.
"""

from __future__ import annotations

import functools
import io
from importlib.util import find_spec
from pathlib import Path

from fontTools.ttLib import TTFont
from matplotlib import font_manager

HANGUL_FONT_FAMILY = "NanumGothic"
# Visual TrueType's hinting sources: editor data that no renderer reads. The wheel's NanumGothic carries an empty
# TSI3, and browsers' font sanitiser (OTS) rejects a font with an empty table, so the web page gets the font without them.
EDITOR_TABLES = ("TSI0", "TSI1", "TSI2", "TSI3", "TSI5")
# DejaVu Sans, matplotlib's own font, draws what NanumGothic lacks (▁ piece markers, most symbols).
FONT_FAMILIES = [HANGUL_FONT_FAMILY, "DejaVu Sans"]


def hangul_font_path() -> Path:
    """NanumGothic.ttf as installed with koreanize-matplotlib, found without importing the package."""
    spec = find_spec("koreanize_matplotlib")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("koreanize-matplotlib, which ships the Hangul font, is not installed (pip install -e .)")
    return Path(spec.submodule_search_locations[0]) / "fonts" / "NanumGothic.ttf"


@functools.cache
def register_hangul_font() -> list[str]:
    """Make NanumGothic known to matplotlib (once per process); returns the families to draw with, best first."""
    font_manager.fontManager.addfont(str(hangul_font_path()))
    return FONT_FAMILIES


@functools.cache
def web_font() -> bytes:
    """NanumGothic as a browser accepts it: the same font without the editor tables (see EDITOR_TABLES)."""
    font = TTFont(hangul_font_path())
    for tag in EDITOR_TABLES:
        if tag in font:
            del font[tag]
    out = io.BytesIO()
    font.save(out)
    return out.getvalue()
