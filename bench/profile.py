"""Where our decoding time goes: ``torch.profiler`` over one pass of the decode benchmark's batches.

    python -m bench.profile --model models/default --dev runs/release/data/dev.jsonl --batch-size 32  (make bench-profile)

Prints the operators that take the most time, grouped by input shapes (the output projection is the matrix
product with the vocabulary-sized operand), as shares of an unprofiled pass's wall time, and what is left:
time outside operators (Python, beam bookkeeping between operators, dispatch). The profiler inflates each
operator's own time a little, so that remainder is a lower bound.

Then the kernels behind the choices in :mod:`nmt.precision` and :func:`nmt.search.top_k`: the output
projection as ``nn.Linear`` (the BLAS torch was built with), as a oneDNN-packed fp32 and bf16 layer and as a
dynamically quantised int8 one, for the rows of beam 4 at batch 1 and 32; and ``topk`` against a maximum.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch
from torch import nn
from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
from torch.profiler import ProfilerActivity, profile

from bench.common import load_dev_set, markdown_table
from bench.decode import DecodeConfig, length_sorted_batches, ours_decoder


def profile_decoding(config: DecodeConfig, batch_size: int, precision: str, sentences: int, rows: int) -> str:
    from nmt.tokenizer import Tokenizer

    torch.set_num_threads(config.threads)
    dev = load_dev_set(config.dev_path, config.corpus, config.source_lang, config.target_lang, sentences)
    tokenizer = Tokenizer.load(config.model_dir / "spm.model")
    sources = [tokenizer.source_ids(text, config.target_lang) for text in dev.sources]
    batches = [[sources[i] for i in batch] for batch in length_sorted_batches(sources, batch_size)]
    decode = ours_decoder(config, precision)
    decode(batches[0])  # warm-up
    started = time.perf_counter()
    for batch in batches:  # the profiler slows every operator call down: take the wall time without it
        decode(batch)
    wall = time.perf_counter() - started
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as profiler:
        for batch in batches:
            decode(batch)
    events = sorted(profiler.key_averages(group_by_input_shape=True), key=lambda e: e.self_cpu_time_total, reverse=True)
    inside = sum(e.self_cpu_time_total for e in events) / 1e6
    table = [[e.key, shapes(e.input_shapes), e.count, e.self_cpu_time_total / 1e3, 100 * e.self_cpu_time_total / 1e6 / wall]
             for e in events[:rows]]
    outside = max(wall - inside, 0.0)
    table.append(["outside operators (Python, bookkeeping, dispatch)", "", "", outside * 1e3, 100 * outside / wall])
    title = f"ours-{precision}, batch {batch_size}, beam {config.beam_size}, {len(sources)} sentences: {wall:.2f}s unprofiled"
    return title + "\n\n" + markdown_table(["operator", "input shapes", "calls", "self ms", "% of wall"], table)


def microseconds(function: Callable[[], object], repeats: int = 50) -> float:
    """Best of ``repeats`` timings, after a warm-up call."""
    function()
    best = math.inf
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - started)
    return best * 1e6


@torch.inference_mode()
def kernel_table(d_model: int, vocab_size: int, threads: int) -> str:
    """The output projection and the beam's top-k, one kernel at a time (best of 50, microseconds)."""
    from nmt.precision import PackedLinear
    from nmt.search import top_k

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    linear = nn.Linear(d_model, vocab_size, bias=False).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        int8 = quantize_dynamic(nn.Sequential(copy.deepcopy(linear)), {nn.Linear: per_channel_dynamic_qconfig})
    layers = {"nn.Linear fp32": linear, "oneDNN fp32": PackedLinear(linear, torch.float32),
              "oneDNN bf16": PackedLinear(linear, torch.bfloat16), "int8 dynamic": int8}
    rows = []
    for batch in (1, 32):
        hidden = torch.randn(4 * batch, d_model)
        timings = {name: microseconds(lambda layer=layer: layer(hidden)) for name, layer in layers.items()}
        rows.append([f"output projection, {4 * batch} rows", *timings.values()])
    log_probs = torch.randn(128, vocab_size).log_softmax(dim=-1)
    selection = [f"top-8 of (128 × {vocab_size})", microseconds(lambda: log_probs.topk(8, dim=-1)),
                 microseconds(lambda: top_k(log_probs, 8)), microseconds(lambda: log_probs.amax(dim=-1))]
    headers = ["kernel (µs, best of 50)", *layers]
    table = markdown_table(headers, rows)
    table += "\n\n" + markdown_table(["kernel (µs, best of 50)", "torch.topk", "nmt.search.top_k", "amax (one vectorised pass)"], [selection])
    return table


def shapes(input_shapes: list) -> str:
    return " ".join(str(s).replace(" ", "") for s in input_shapes if s)[:60]


def main(argv: list[str] | None = None) -> int:
    defaults = DecodeConfig(Path("models/default"), Path("runs/release/data/dev.jsonl"))
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=defaults.model_dir)
    parser.add_argument("--dev", type=Path, default=defaults.dev_path)
    parser.add_argument("--corpus", default=defaults.corpus)
    parser.add_argument("--batch-size", type=int, nargs="+", default=list(defaults.batch_sizes))
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "int8"])
    parser.add_argument("--sentences", type=int, default=128, help="a slice of the decode benchmark's input set")
    parser.add_argument("--threads", type=int, default=defaults.threads)
    parser.add_argument("--rows", type=int, default=15, help="operators shown")
    args = parser.parse_args(argv)
    config = replace(defaults, model_dir=args.model, dev_path=args.dev, corpus=args.corpus, threads=args.threads)
    for batch_size in args.batch_size:
        print(profile_decoding(config, batch_size, args.precision, args.sentences, args.rows) + "\n")
    model_config = json.loads((args.model / "config.json").read_text())
    print(kernel_table(model_config["d_model"], model_config["vocab_size"], args.threads))
    return 0


if __name__ == "__main__":
    sys.exit(main())
