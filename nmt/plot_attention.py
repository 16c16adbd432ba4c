"""Draw the cross-attention of one translation as a heatmap: which source pieces each target piece looked at.

    python -m nmt.plot_attention --model DIR --source-lang ko --target-lang en --text "나는 학생입니다." --out attention.png
"""

from __future__ import annotations

import argparse
import re
import sys
import warnings
from pathlib import Path

import matplotlib
from matplotlib import font_manager
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from nmt.search import SearchOptions
from nmt.translator import DEFAULT_MODEL_DIR, Attention, Translator

# Fonts with Hangul glyphs, best first; matplotlib falls back glyph by glyph to the next family listed.
HANGUL_FONTS = ("Noto Sans CJK KR", "Noto Sans KR", "NanumGothic", "UnDotum", "Malgun Gothic", "AppleGothic", "Noto Sans CJK JP")
_HANGUL = re.compile("[\u1100-\u11ff\u3131-\u318e\uac00-\ud7a3]")


def installed_hangul_fonts() -> list[str]:
    installed = {font.name for font in font_manager.fontManager.ttflist}
    return [name for name in HANGUL_FONTS if name in installed]


def plot_attention(attention: Attention, path: str | Path) -> Path:
    """Write a heatmap PNG: source pieces along x, target pieces down y, weight as colour.

    Draws on an Agg canvas directly rather than through pyplot, so no display or global backend is involved.
    """
    hangul_fonts = installed_hangul_fonts()
    rows, columns = len(attention.target_tokens), len(attention.source_tokens)
    with matplotlib.rc_context({"font.family": [*hangul_fonts, "DejaVu Sans"]}), warnings.catch_warnings():
        if not hangul_fonts and _HANGUL.search("".join(attention.source_tokens + attention.target_tokens)):
            # One clear warning instead of one per missing glyph; Latin pieces and ▁ markers still show.
            warnings.filterwarnings("ignore", message="Glyph .* missing from font")
            warnings.warn("no Hangul font installed (e.g. fonts-noto-cjk): Hangul pieces are drawn as boxes", stacklevel=2)
        figure = Figure(figsize=(2.5 + 0.35 * columns, 1.5 + 0.35 * rows))
        FigureCanvasAgg(figure)
        axes = figure.add_subplot()
        image = axes.imshow(attention.weights, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
        axes.set_xticks(range(columns), attention.source_tokens, rotation=90)
        axes.set_yticks(range(rows), attention.target_tokens)
        axes.set_xlabel("source")
        axes.set_ylabel("target")
        figure.colorbar(image, ax=axes, fraction=0.05)
        figure.tight_layout()
        figure.savefig(path, dpi=120)
    return Path(path)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m nmt.plot_attention", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(DEFAULT_MODEL_DIR), help="model directory (default: the bundled model)")
    parser.add_argument("--source-lang", required=True)
    parser.add_argument("--target-lang", required=True)
    parser.add_argument("--text", required=True, help="text to translate (several sentences give a block-diagonal picture)")
    parser.add_argument("--out", default="attention.png", help="PNG file to write")
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        translator = Translator.load(args.model, device=args.device)
        options = SearchOptions(beam_size=args.beam_size, return_attention=True)
        [translation] = translator.translate([args.text], args.source_lang, args.target_lang, options)
    except (ValueError, RuntimeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if translation.attention is None:
        print("error: the text is empty, so there is no attention to plot", file=sys.stderr)
        return 2
    print(translation.text)
    print(f"wrote {plot_attention(translation.attention, args.out)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
