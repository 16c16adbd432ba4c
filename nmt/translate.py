"""Command line: one text per line on stdin → one translation per line on stdout, same count and order.

    python -m nmt.translate --source-lang ko --target-lang en < input.ko > output.en
    python -m nmt.translate --source-lang ko --target-lang en --int8 < input.ko > output.en   # quantised, faster
    python -m nmt.translate --source-lang en --target-lang ko --speech-level formal < input.en > output.ko
"""

from __future__ import annotations

import argparse
import sys

from nmt.budget import decoding_budget
from nmt.speech_level import REQUESTABLE_LEVELS
from nmt.translator import DEFAULT_MODEL_DIR, TUNED_OPTIONS, Translator


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m nmt.translate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(DEFAULT_MODEL_DIR), help="model directory (default: the bundled model)")
    parser.add_argument("--source-lang", required=True)
    parser.add_argument("--target-lang", required=True)
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--batch-size", type=int,
                        help="lines read and translated together (default: 64 on a CPU, 4096 on a GPU; nmt.budget)")
    add_tuned_options(parser)
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    add_precision_options(parser)
    return parser.parse_args(argv)


def add_precision_options(parser: argparse.ArgumentParser) -> None:
    """``--int8`` or ``--bf16`` for the decoding copy of the model (``args.precision``, fp32 when neither)."""
    precision = parser.add_mutually_exclusive_group()
    precision.add_argument("--int8", dest="precision", action="store_const", const="int8", default="fp32",
                           help="int8 weights (dynamic quantisation, CPU): faster, BLEU within a few tenths")
    precision.add_argument("--bf16", dest="precision", action="store_const", const="bf16",
                           help="bfloat16 weights and products: faster on CPUs with AVX-512-BF16/AMX and on GPUs")


def add_tuned_options(parser: argparse.ArgumentParser) -> None:
    """The options a model directory sets defaults for (``TUNED_OPTIONS``), each overridable on the command line."""
    parser.add_argument("--length-penalty", type=float, help="score = log P / length^α (default: the model's)")
    parser.add_argument("--no-repeat-ngram-size", type=int, help="ban repeating n-grams of this size (default: the model's)")
    parser.add_argument("--speech-level", choices=[level.value for level in REQUESTABLE_LEVELS],
                        help="the speech level of a translation into Korean, for a model trained with level tags "
                             "(default: the model's, else none asked)")
    parser.add_argument("--reconstruction-weight", type=float,
                        help="rerank the beam by how well each candidate translates back into the source, at this "
                             "weight; 0 keeps the search's order (default: the model's)")
    parser.add_argument("--invented-number-penalty", type=float,
                        help="take this from the log-probability of a token that would write a number the source does "
                             "not contain; 0 leaves numbers free (default: the model's)")


def given_options(args: argparse.Namespace) -> dict:
    """The tunable search options given on the command line; the others keep the model's defaults."""
    return {name: getattr(args, name) for name in TUNED_OPTIONS if getattr(args, name) is not None}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        translator = Translator.load(args.model, device=args.device, precision=args.precision)
        options = translator.default_options(args.source_lang, args.target_lang, beam_size=args.beam_size, **given_options(args))
    except (ValueError, RuntimeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    batch_size = args.batch_size or decoding_budget(translator.device).lines_per_call
    lines: list[str] = []

    def flush() -> None:
        for translation in translator.translate(lines, args.source_lang, args.target_lang, options):
            sys.stdout.write(translation.text.replace("\n", " ") + "\n")
        sys.stdout.flush()
        lines.clear()

    for line in sys.stdin:
        lines.append(line.rstrip("\n"))
        if len(lines) >= batch_size:
            flush()
    flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
