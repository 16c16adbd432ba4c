"""Decoding benchmark: our beam search against Hugging Face ``generate`` and CTranslate2 on the same weights.

    python -m bench.decode --model models/default --dev runs/release/data/dev.jsonl      (make bench-decode)
    python -m bench.decode --device cuda ...       (make bench-decode DEVICE=cuda): the same systems on one GPU

Every system decodes the same length-sorted batches of the same encoder inputs (``<2xx> tokens </s>`` ids),
beam 4, length penalty 1, the same output-length cap; each runs in a fresh process (its own peak RSS) on
``--threads`` threads, warms up on one batch, then decodes the whole set ``--runs`` times. We report medians,
and the BLEU of each system's output, so that speed never hides a quality loss.

On a GPU (``--device cuda``, or ``auto`` with one present) every system runs on it: ours and HF ``generate`` at
fp32 and bf16, CTranslate2's CUDA build at fp32 and bf16 (if its wheel runs there), at larger batches; the
results name the GPU and its driver, and give each system's peak GPU memory.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from bench.common import (
    RESULTS_DIR, BenchInput, DevSet, add_input_arguments, json_config, load_dev_set, machine, markdown_table, median,
    peak_rss_mib, report, resolve_bench_device, run_isolated, synchronize,
)
from nmt.precision import cpu_has_bf16

Ids = list[int]
DecodeFn = Callable[[Sequence[Ids]], list[Ids]]  # a batch of encoder inputs → best output ids, EOS excluded


@dataclass(frozen=True)
class System:
    name: str
    family: str  # ours | hf | ct2
    precision: str  # fp32 | bf16 | int8


SYSTEMS = {s.name: s for s in (
    System("ours-fp32", "ours", "fp32"),
    System("ours-int8", "ours", "int8"),
    System("ours-bf16", "ours", "bf16"),
    System("hf-fp32", "hf", "fp32"),
    System("hf-bf16", "hf", "bf16"),
    System("ct2-fp32", "ct2", "fp32"),
    System("ct2-int8", "ct2", "int8"),
    System("ct2-bf16", "ct2", "bf16"),
)}
CPU_SYSTEMS = ("ours-fp32", "ours-int8", "ours-bf16", "hf-fp32", "ct2-fp32", "ct2-int8")
GPU_SYSTEMS = ("ours-fp32", "ours-bf16", "hf-fp32", "hf-bf16", "ct2-fp32", "ct2-bf16")
CPU_BATCH_SIZES, GPU_BATCH_SIZES = (1, 32), (64, 512)  # a GPU idles at batch 1; HF would take minutes there
BASELINE = "ours-fp32"
HF_BASELINE = "hf-fp32"  # what the "≥ 3× HF generate" target is measured against


@dataclass(frozen=True)
class DecodeConfig(BenchInput):
    beam_size: int = 4
    batch_sizes: tuple[int, ...] = CPU_BATCH_SIZES
    runs: int = 3
    threads: int = 2
    systems: tuple[str, ...] = CPU_SYSTEMS
    device: str = "cpu"  # cpu, cuda or cuda:N (the command line also takes auto)
    export_dir: Path = RESULTS_DIR / "exports"
    out: Path = RESULTS_DIR / "decode.json"
    report_only: bool = False


@dataclass
class Measurement:
    """One system at one batch size: wall times of whole passes, the outputs of the last pass, memory."""

    system: str
    batch_size: int
    seconds: list[float]
    load_seconds: float
    peak_rss_mib: float
    outputs: list[Ids] = field(repr=False)
    peak_gpu_mib: float | None = None


# ---- the systems --------------------------------------------------------------------------------------------


def output_limit(sources: Sequence[Ids], beam_size: int, pad_id: int, max_positions: int) -> int:
    """The longest output our search allows any sentence of the batch (EOS included); others get the same cap."""
    from nmt.search import SearchOptions, max_target_lengths
    from training.batching import pad_batch

    options = SearchOptions(beam_size=beam_size)
    return int(max_target_lengths(pad_batch(sources, pad_id), pad_id, options, max_positions).max())


def ours_decoder(config: DecodeConfig, precision: str) -> DecodeFn:
    from nmt.search import SearchOptions
    from nmt.translator import Translator

    translator = Translator.load(config.model_dir, config.device, precision=precision)
    options = SearchOptions(beam_size=config.beam_size)
    return lambda sources: [nbest[0].tokens for nbest in translator.search_ids(sources, options)]


def hugging_face_decoder(config: DecodeConfig, precision: str) -> DecodeFn:
    from transformers import AutoModelForSeq2SeqLM
    from transformers.utils import logging

    from training.batching import pad_batch

    logging.set_verbosity_error()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    model = AutoModelForSeq2SeqLM.from_pretrained(config.export_dir / "hf").to(config.device, dtype).eval()
    pad, eos, max_positions = model.config.pad_token_id, model.config.eos_token_id, model.config.max_position_embeddings

    def decode(sources: Sequence[Ids]) -> list[Ids]:
        source = pad_batch(sources, pad).to(config.device)
        with torch.inference_mode():
            generated = model.generate(
                source, attention_mask=source != pad, num_beams=config.beam_size, do_sample=False, length_penalty=1.0,
                early_stopping=True,  # a sentence is done once it has beam_size finished hypotheses, as in ours
                max_new_tokens=output_limit(sources, config.beam_size, pad, max_positions),
            )
        return [until_eos(row[1:], eos) for row in generated.tolist()]

    return decode


def ctranslate2_decoder(config: DecodeConfig, precision: str) -> DecodeFn:
    import ctranslate2 as ct2

    from nmt.tokenizer import Tokenizer

    tokenizer = Tokenizer.load(config.model_dir / "spm.model")
    device, _, index = config.device.partition(":")
    translator = ct2.Translator(str(config.export_dir / "ct2"), device=device, device_index=int(index or 0),
                                compute_type={"fp32": "float32", "int8": "int8", "bf16": "bfloat16"}[precision],
                                intra_threads=config.threads, inter_threads=1)
    max_positions = json.loads((config.model_dir / "config.json").read_text())["max_positions"]

    def decode(sources: Sequence[Ids]) -> list[Ids]:
        results = translator.translate_batch(
            [tokenizer.pieces(s) for s in sources], beam_size=config.beam_size, length_penalty=1.0,
            max_decoding_length=output_limit(sources, config.beam_size, tokenizer.pad_id, max_positions),
        )
        return [[tokenizer.sp.piece_to_id(p) for p in result.hypotheses[0]] for result in results]

    return decode


LOADERS: dict[str, Callable[[DecodeConfig, str], DecodeFn]] = {"ours": ours_decoder, "hf": hugging_face_decoder, "ct2": ctranslate2_decoder}


def until_eos(ids: Ids, eos_id: int) -> Ids:
    return ids[: ids.index(eos_id)] if eos_id in ids else ids


# ---- measuring ----------------------------------------------------------------------------------------------


def length_sorted_batches(sources: Sequence[Ids], batch_size: int) -> list[list[int]]:
    """Indices of the sources, shortest first, cut into batches: every system gets the same batches."""
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def measure(system: System, config: DecodeConfig, sources: list[Ids], batch_size: int) -> Measurement:
    """Runs in its own process: load, warm up on one batch, decode the whole set ``runs`` times."""
    torch.set_num_threads(config.threads)
    started = time.perf_counter()
    decode = LOADERS[system.family](config, system.precision)
    load_seconds = time.perf_counter() - started
    batches = length_sorted_batches(sources, batch_size)
    decode([sources[i] for i in batches[len(batches) // 2]])
    seconds, outputs = [], [[] for _ in sources]
    for _ in range(config.runs):
        synchronize(config.device)
        started = time.perf_counter()
        for batch in batches:
            for i, output in zip(batch, decode([sources[i] for i in batch])):
                outputs[i] = output
        synchronize(config.device)
        seconds.append(time.perf_counter() - started)
    on_gpu = config.device.startswith("cuda")
    peak_gpu_mib = torch.cuda.max_memory_allocated(config.device) / 2**20 if on_gpu else None  # PyTorch's allocator only
    return Measurement(system.name, batch_size, seconds, load_seconds, peak_rss_mib(), outputs, peak_gpu_mib)


def export_models(config: DecodeConfig) -> None:
    """The Hugging Face export and, converted from it, the CTranslate2 model (only what the systems need)."""
    from nmt.export import convert_hf_to_ctranslate2, export_hf

    families = {SYSTEMS[name].family for name in config.systems}
    if families & {"hf", "ct2"}:
        export_hf(config.model_dir, config.export_dir / "hf")
    if "ct2" in families:
        convert_hf_to_ctranslate2(config.export_dir / "hf", config.export_dir / "ct2")


def summarise(measurements: list[Measurement], dev: DevSet, config: DecodeConfig) -> list[dict]:
    from nmt.tokenizer import Tokenizer
    from training.evaluate import score

    tokenizer = Tokenizer.load(config.model_dir / "spm.model")
    rows = []
    for m in measurements:
        seconds = median(m.seconds)
        tokens = sum(len(o) for o in m.outputs)
        hypotheses = [tokenizer.decode(o) for o in m.outputs]
        rows.append({
            "system": m.system, "batch_size": m.batch_size, "sentences_per_s": len(m.outputs) / seconds,
            "tokens_per_s": tokens / seconds, "target_tokens": tokens, "median_seconds": seconds, "seconds": m.seconds,
            "load_seconds": m.load_seconds, "peak_rss_mib": m.peak_rss_mib, "peak_gpu_mib": m.peak_gpu_mib,
            "bleu": score(hypotheses, dev.references, dev.target_lang)["bleu"], "sample": hypotheses[:3],
        })
    return add_ratios(rows)


def add_ratios(rows: list[dict]) -> list[dict]:
    """Each row's tokens/s relative to ours-fp32 and to HF at the same batch size (None without that system)."""
    for row in rows:
        for key, system in (("tokens_per_s_vs_ours", BASELINE), ("tokens_per_s_vs_hf", HF_BASELINE)):
            reference = next((r for r in rows if r["system"] == system and r["batch_size"] == row["batch_size"]), None)
            row[key] = row["tokens_per_s"] / reference["tokens_per_s"] if reference else None
    return rows


def table(rows: list[dict]) -> str:
    headers = ["system", "batch", "sentences/s", "target tokens/s", f"× {BASELINE} (tok/s)", f"× {HF_BASELINE} (tok/s)", "peak RSS MiB", "BLEU"]
    return markdown_table(headers, [
        [r["system"], r["batch_size"], r["sentences_per_s"], r["tokens_per_s"], r["tokens_per_s_vs_ours"], r["tokens_per_s_vs_hf"],
         r["peak_rss_mib"], r["bleu"]]
        for r in rows
    ])


def run(config: DecodeConfig) -> dict:
    from nmt.checkpoint import load_model

    dev = load_dev_set(config.dev_path, config.corpus, config.source_lang, config.target_lang, config.sentences)
    loaded = load_model(config.model_dir)
    limit = loaded.model.config.max_positions // 2  # what the Translator allows a source sentence
    sources = [loaded.tokenizer.source_ids(text, config.target_lang, limit) for text in dev.sources]
    del loaded
    run_isolated(export_models, config)
    measurements = []
    for batch_size in config.batch_sizes:
        for name in config.systems:
            measurement = run_isolated(measure, SYSTEMS[name], config, sources, batch_size)
            print(f"{name} batch {batch_size}: median {median(measurement.seconds):.1f}s", file=sys.stderr, flush=True)
            measurements.append(measurement)
    rows = summarise(measurements, dev, config)
    return {"benchmark": "decode", "machine": machine(config.device), "config": json_config(config), "results": rows}


def parse_args(argv: list[str] | None = None) -> DecodeConfig:
    defaults = DecodeConfig(Path("models/default"), Path("runs/release/data/dev.jsonl"))
    gpu_defaults = f"(default: {' '.join(map(str, CPU_BATCH_SIZES))} on a CPU, {' '.join(map(str, GPU_BATCH_SIZES))} on a GPU)"
    parser = argparse.ArgumentParser(prog="python -m bench.decode", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_input_arguments(parser, defaults)
    parser.add_argument("--beam-size", type=int, default=defaults.beam_size)
    parser.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda or cuda:N (default: %(default)s)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", help=f"sentences per batch {gpu_defaults}")
    parser.add_argument("--runs", type=int, default=defaults.runs, help="timed passes per system; the median is reported")
    parser.add_argument("--threads", type=int, default=defaults.threads)
    parser.add_argument("--systems", nargs="+", choices=list(SYSTEMS),
                        help=f"default: {' '.join(CPU_SYSTEMS)} on a CPU (ours-bf16 where it has bf16 kernels), "
                             f"{' '.join(GPU_SYSTEMS)} on a GPU")
    parser.add_argument("--export-dir", type=Path, default=defaults.export_dir, help="where the HF and CTranslate2 exports go")
    parser.add_argument("--out", type=Path, default=defaults.out, help="JSON result file (default: %(default)s)")
    parser.add_argument("--report-only", action="store_true", help="print the table of the results already in --out, run nothing")
    args = parser.parse_args(argv)
    device = args.device if args.report_only else resolve_bench_device(args.device)
    on_gpu = device.startswith("cuda")
    batch_sizes = args.batch_sizes or (GPU_BATCH_SIZES if on_gpu else CPU_BATCH_SIZES)
    systems = args.systems or (GPU_SYSTEMS if on_gpu else [s for s in CPU_SYSTEMS if s != "ours-bf16" or cpu_has_bf16()])
    return DecodeConfig(
        args.model, args.dev, args.corpus, args.source_lang, args.target_lang, args.sentences, args.beam_size,
        tuple(batch_sizes), args.runs, args.threads, tuple(systems), device, args.export_dir, args.out, args.report_only,
    )


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    if config.report_only:  # print the table of an earlier run
        print(table(add_ratios(json.loads(config.out.read_text(encoding="utf-8"))["results"])))
        return 0
    results = run(config)
    return report(config.out, results, table(results["results"]))


if __name__ == "__main__":
    sys.exit(main())
