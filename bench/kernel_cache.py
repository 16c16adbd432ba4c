"""Resident memory and speed of CPU decoding against the capacity of the oneDNN kernel caches (:mod:`nmt.memory`).

    python -m bench.kernel_cache --model models/default --dev runs/release/data/dev.jsonl     (make bench-kernel-cache)

Batches of 1, 2, …, ``--sentences`` sentences meet a new row count at almost every step, as a server's
step-level search does while requests join and leave, and each new shape puts a compiled kernel into both
caches. For each capacity a fresh process (the caches are sized when first used) decodes the same batches
twice, handing freed memory back to the OS after each pass: its resident memory then is what the model and
the caches hold, and the second pass's time is what a small cache costs in kernels built again. Outputs
must not depend on the capacity; the table says whether they match the first capacity's.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import (RESULTS_DIR, BenchInput, add_input_arguments, json_config, load_dev_set, machine,
                          markdown_table, report, rss_mib, run_isolated)


@dataclass(frozen=True)
class KernelCacheBenchConfig(BenchInput):
    sentences: int = 32  # the largest batch; every size from 1 up is decoded
    capacities: tuple[int, ...] = (1024, 256, 64, 16)  # 1024: oneDNN's and ideep's default
    beam_size: int = 4
    threads: int = 2
    out: Path = RESULTS_DIR / "kernel-cache.json"


def measure(capacity: int, config: KernelCacheBenchConfig) -> dict:
    """In a fresh process: load the model with both caches at ``capacity``, decode every batch size twice."""
    from nmt.memory import KERNEL_CACHE_VARIABLES, limit_kernel_cache, release_free_memory

    for variable in KERNEL_CACHE_VARIABLES:  # the parent's environment must not decide
        os.environ.pop(variable, None)
    limit_kernel_cache(capacity)
    import torch

    from nmt.search import SearchOptions
    from nmt.translator import Translator

    torch.set_num_threads(config.threads)
    dev = load_dev_set(config.dev_path, config.corpus, config.source_lang, config.target_lang, config.sentences)
    translator = Translator.load(config.model_dir, device="cpu")
    options = SearchOptions(beam_size=config.beam_size)
    loaded = rss_mib()
    passes = []
    for _ in range(2):
        started = time.perf_counter()
        outputs = [h.text for size in range(1, len(dev.sources) + 1)
                   for h in translator.translate(dev.sources[:size], dev.source_lang, dev.target_lang, options)]
        seconds = time.perf_counter() - started
        release_free_memory()
        passes.append({"seconds": seconds, "rss_mib": rss_mib()})
    return {"capacity": capacity, "rss_mib_loaded": loaded, "passes": passes, "sentences_per_pass": len(outputs),
            "outputs": outputs}


def run(config: KernelCacheBenchConfig) -> dict:
    results = [run_isolated(measure, capacity, config) for capacity in config.capacities]
    reference = results[0]["outputs"]
    for result in results:
        result["same_outputs"] = result.pop("outputs") == reference
    return {"benchmark": "kernel_cache", "machine": machine(), "config": json_config(config),
            "results": results}


def table(results: dict) -> str:
    rows = []
    for r in results["results"]:
        first, second = r["passes"]
        rows.append([r["capacity"], r["rss_mib_loaded"], first["rss_mib"], second["rss_mib"],
                     first["rss_mib"] - r["rss_mib_loaded"], r["sentences_per_pass"] / second["seconds"],
                     "yes" if r["same_outputs"] else "NO"])
    return markdown_table(["capacity", "RSS loaded MiB", "after pass 1", "after pass 2", "growth MiB",
                           "pass 2 sentences/s", "same outputs"], rows)


def main(argv: list[str] | None = None) -> int:
    defaults = KernelCacheBenchConfig(Path("models/default"), Path("runs/release/data/dev.jsonl"))
    parser = argparse.ArgumentParser(prog="python -m bench.kernel_cache", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_input_arguments(parser, defaults)
    parser.add_argument("--capacities", type=int, nargs="+", default=list(defaults.capacities))
    parser.add_argument("--beam-size", type=int, default=defaults.beam_size)
    parser.add_argument("--threads", type=int, default=defaults.threads)
    parser.add_argument("--out", type=Path, default=defaults.out)
    args = parser.parse_args(argv)
    config = KernelCacheBenchConfig(args.model, args.dev, args.corpus, args.source_lang, args.target_lang, args.sentences,
                                    tuple(args.capacities), args.beam_size, args.threads, args.out)
    results = run(config)
    return report(config.out, results, table(results))


if __name__ == "__main__":
    raise SystemExit(main())
