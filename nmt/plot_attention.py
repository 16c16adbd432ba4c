"""Draw one attention map of a translation as a heatmap: which pieces each piece looked at.

    python -m nmt.plot_attention --model DIR --source-lang ko --target-lang en --text "나는 학생입니다." \\
        --kind cross --layer -1 --head mean --out attention.png

``--kind`` picks the encoder's self-attention, the decoder's masked self-attention or the cross-attention
(target pieces to source pieces); ``--layer`` counts from 0 (negative from the end) and ``--head`` picks one
head or ``mean``, the average of the layer's heads. Several sentences give a block-diagonal picture.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from nmt.explain import KINDS, explain
from nmt.fonts import register_hangul_font
from nmt.translator import DEFAULT_MODEL_DIR, Attention, Translator

AXIS_NAMES = {"encoder": ("source", "source"), "decoder": ("target (predicted)", "target (decoder input)"),
              "cross": ("target", "source")}


def plot_attention(attention: Attention, path: str | Path, kind: str = "cross", title: str = "") -> Path:
    """Write a heatmap PNG: key pieces along x, query pieces down y, weight as colour.

    Draws on an Agg canvas directly rather than through pyplot, so no display or global backend is involved.
    """
    rows, columns = len(attention.target_tokens), len(attention.source_tokens)
    row_name, column_name = AXIS_NAMES[kind]
    with matplotlib.rc_context({"font.family": register_hangul_font()}):
        figure = Figure(figsize=(2.5 + 0.35 * columns, 1.5 + 0.35 * rows))
        FigureCanvasAgg(figure)
        axes = figure.add_subplot()
        image = axes.imshow(attention.weights, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
        axes.set_xticks(range(columns), attention.source_tokens, rotation=90)
        axes.set_yticks(range(rows), attention.target_tokens)
        axes.set_xlabel(column_name)
        axes.set_ylabel(row_name)
        if title:
            axes.set_title(title)
        figure.colorbar(image, ax=axes, fraction=0.05)
        figure.tight_layout()
        figure.savefig(path, dpi=120)
    return Path(path)


def head_choice(value: str) -> int | None:
    """``mean`` (None: the average of the heads) or a head number."""
    if value == "mean":
        return None
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a head number or 'mean', got {value!r}") from None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m nmt.plot_attention", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(DEFAULT_MODEL_DIR), help="model directory (default: the bundled model)")
    parser.add_argument("--source-lang", required=True)
    parser.add_argument("--target-lang", required=True)
    parser.add_argument("--text", required=True, help="text to translate (several sentences give a block-diagonal picture)")
    parser.add_argument("--out", default="attention.png", help="PNG file to write")
    parser.add_argument("--kind", choices=KINDS, default="cross", help="which attention to draw (default: %(default)s)")
    parser.add_argument("--layer", type=int, default=-1, help="layer from 0, negative from the end (default: the last)")
    parser.add_argument("--head", type=head_choice, default=None, help="head from 0, or 'mean' of all heads (default: mean)")
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        translator = Translator.load(args.model, device=args.device)
        explanation = explain(translator, args.text, args.source_lang, args.target_lang, translator.default_options(args.source_lang, args.target_lang, beam_size=args.beam_size))
        if not explanation.sentences:
            raise ValueError("the text is empty, so there is no attention to plot")
        attention = explanation.heatmap(args.kind, args.layer, args.head)
    except (ValueError, RuntimeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(explanation.translation.text)
    layers = explanation.sentences[0].weights(args.kind).size(0)
    head = "mean of heads" if args.head is None else f"head {args.head}"
    title = f"{args.kind} attention, layer {args.layer % layers}, {head}"
    print(f"wrote {plot_attention(attention, args.out, args.kind, title)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
