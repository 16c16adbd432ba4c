"""The server's decoding engine without the server: sentences/s of :mod:`nmt.continuous` with N sentences in flight.

    python -m bench.continuous --model models/default --dev runs/release/data/dev.jsonl   (make bench-continuous)

``bench.serve`` measures the whole path (gRPC, the batcher, a load generator on the same CPUs); this measures the
step-level beam search alone, in one process, as closed-loop clients would drive it: ``--in-flight`` requests of
one dev sentence each are in the search at every step, and each one answered is replaced by the next sentence at
once. The ratio of N in flight to one in flight is the ceiling of the server's "32 clients ÷ 1 client". Every
level translates the same sentences, so their outputs must agree (a sentence's translation does not depend on its
batch mates); the table says whether they do.

Beside each level runs the fixed batch it replaces: the same sentences, N at a time in arrival order, each batch
formed at once and decoded to its end (``Translator.translate``, as the server batched before step-level
batching). Fixed batches make requests wait, so they are no way to serve, but their sentences/s says what the
step-level search costs per sentence beyond the arithmetic of a batch of N: the engine's own overhead.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bench.common import RESULTS_DIR, BenchInput, add_input_arguments, json_config, load_dev_set, machine, markdown_table, report

if TYPE_CHECKING:
    from nmt.translator import Translator


@dataclass(frozen=True)
class ContinuousBenchConfig(BenchInput):
    sentences: int = 256  # translated at every level
    in_flight: tuple[int, ...] = (1, 8, 32)
    beam_size: int = 4
    threads: int = 2
    max_batch_tokens: int = 16_384  # large enough that the in-flight count, not the budget, sets the batch
    out: Path = RESULTS_DIR / "continuous.json"


def closed_loop(translator: Translator, sources: list[str], source_lang: str, target_lang: str, in_flight: int,
                config: ContinuousBenchConfig) -> dict:
    """Translate ``sources`` keeping ``in_flight`` of them in the search; their outputs, steps and seconds."""
    from nmt.continuous import ContinuousTranslation
    from nmt.search import SearchOptions

    engine = ContinuousTranslation(translator, source_lang, target_lang, SearchOptions(beam_size=config.beam_size), config.max_batch_tokens)
    outputs: dict[int, str] = {}
    queued = iter(range(len(sources)))
    for index in range(min(in_flight, len(sources))):
        engine.add(next(queued), [sources[index]])
    steps, started = 0, time.perf_counter()
    while engine:
        for finished in engine.step():
            outputs[finished.key] = finished.translations[0].text
            if (index := next(queued, None)) is not None:
                engine.add(index, [sources[index]])
        steps += 1
    seconds = time.perf_counter() - started
    return {"in_flight": in_flight, "sentences": len(sources), "steps": steps, "seconds": seconds,
            "sentences_per_s": len(sources) / seconds, "outputs": [outputs[i] for i in range(len(sources))]}


def fixed_batches(translator: Translator, sources: list[str], source_lang: str, target_lang: str, size: int,
                  config: ContinuousBenchConfig) -> dict:
    """Translate ``sources`` ``size`` at a time, each batch decoded to its end; their outputs and sentences/s."""
    from nmt.search import SearchOptions

    options, outputs, started = SearchOptions(beam_size=config.beam_size), [], time.perf_counter()
    for first in range(0, len(sources), size):
        outputs += [t.text for t in translator.translate(sources[first : first + size], source_lang, target_lang, options)]
    return {"sentences_per_s": len(sources) / (time.perf_counter() - started), "outputs": outputs}


def run(config: ContinuousBenchConfig) -> dict:
    import torch

    from nmt.translator import Translator

    torch.set_num_threads(config.threads)
    dev = load_dev_set(config.dev_path, config.corpus, config.source_lang, config.target_lang, config.sentences)
    translator = Translator.load(config.model_dir, device="cpu", max_batch_tokens=config.max_batch_tokens)
    closed_loop(translator, dev.sources[:16], dev.source_lang, dev.target_lang, 8, config)  # warm-up: kernels and buffers
    results = [closed_loop(translator, dev.sources, dev.source_lang, dev.target_lang, n, config) for n in config.in_flight]
    reference, single = results[0]["outputs"], results[0]["sentences_per_s"]
    for result in results:
        fixed = fixed_batches(translator, dev.sources, dev.source_lang, dev.target_lang, result["in_flight"], config)
        result |= {"vs_first": result["sentences_per_s"] / single, "fixed_batch_sentences_per_s": fixed["sentences_per_s"],
                   "same_outputs": result.pop("outputs") == reference == fixed["outputs"]}
    return {"benchmark": "continuous", "machine": machine(), "config": json_config(config), "results": results}


def table(results: dict) -> str:
    return markdown_table(
        ["in flight", "sentences/s", "× first level", "steps", "ms per step", "fixed batches of N, sentences/s",
         "step-level ÷ fixed", "same outputs"],
        [[r["in_flight"], r["sentences_per_s"], r["vs_first"], r["steps"], 1000 * r["seconds"] / r["steps"],
          r["fixed_batch_sentences_per_s"], r["sentences_per_s"] / r["fixed_batch_sentences_per_s"],
          "yes" if r["same_outputs"] else "NO"] for r in results["results"]],
    )


def main(argv: list[str] | None = None) -> int:
    defaults = ContinuousBenchConfig(Path("models/default"), Path("runs/release/data/dev.jsonl"))
    parser = argparse.ArgumentParser(prog="python -m bench.continuous", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_input_arguments(parser, defaults)
    parser.add_argument("--in-flight", type=int, nargs="+", default=list(defaults.in_flight),
                        help="sentences kept in the search, one level each; the first is the baseline (default: %(default)s)")
    parser.add_argument("--beam-size", type=int, default=defaults.beam_size)
    parser.add_argument("--threads", type=int, default=defaults.threads)
    parser.add_argument("--max-batch-tokens", type=int, default=defaults.max_batch_tokens)
    parser.add_argument("--out", type=Path, default=defaults.out)
    args = parser.parse_args(argv)
    config = ContinuousBenchConfig(args.model, args.dev, args.corpus, args.source_lang, args.target_lang, args.sentences,
                                   tuple(args.in_flight), args.beam_size, args.threads, args.max_batch_tokens, args.out)
    results = run(config)
    return report(config.out, results, table(results))


if __name__ == "__main__":
    raise SystemExit(main())
