"""Training benchmark: tokens/s of the real training step on a recipe, and the FLOP/s it reaches against a
matrix multiply measured on the same machine.

    python -m bench.train --config configs/release.yaml --run-dir runs/release      (make bench-train)

The step is :meth:`training.trainer.Trainer.update` itself (forward, label-smoothed loss, backward, clipping,
AdamW, schedule) on the recipe's model and batches from the prepared data, padded by the trainer's prefetching
loader, so the number is what ``make train`` gets. On a GPU (``--device cuda``) the clock stops when the GPU has
finished the last step, and the peak is a bf16 and an fp32 matrix multiply measured there; ``--set`` sizes the
model and batches differently from the recipe, ``--compile`` adds a row with ``torch.compile``:

    python -m bench.train --device cuda --set model.d_model=512 model.ffn_dim=2048 training.max_tokens=16384 FLOPs are counted from the padded shapes the hardware actually multiplies: every Linear, the attention
score and value products and the output projection, forward ×3 for forward plus backward.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from bench.common import RESULTS_DIR, json_config, machine, markdown_table, report, resolve_bench_device, synchronize
from nmt.memory import configure_training_process
from nmt.model import ModelConfig

if TYPE_CHECKING:
    from nmt.tokenizer import Tokenizer
    from training.trainer import TrainingConfig


@dataclass(frozen=True)
class TrainBenchConfig:
    recipe: Path = Path("configs/release.yaml")
    run_dir: Path = Path("runs/release")  # holds spm.model and data/train from make data
    steps: int = 20  # timed updates
    warmup_steps: int = 3  # untimed updates first (allocator, oneDNN kernel selection, CUDA kernel autotuning)
    threads: int = 2
    matmul_size: int | None = None  # square matrices for the peak measurement; None: 2048 on a CPU, 8192 on a GPU
    cpu_attention: tuple[str, ...] = ("math", "fused")  # attention kernels to time on a CPU, one after the other (A/B)
    device: str = "cpu"  # cpu, cuda or cuda:N (the command line also takes auto)
    compile: bool = False  # also time the step with torch.compile (TrainingConfig.compile)
    overrides: tuple[str, ...] = ()  # recipe values replaced, e.g. "model.d_model=512" or "training.max_tokens=16384"
    out: Path = RESULTS_DIR / "train.json"


def linear_flops(tokens: int, fan_in: int, fan_out: int) -> int:
    return 2 * tokens * fan_in * fan_out


def forward_flops(c: ModelConfig, batch: int, source_len: int, target_len: int) -> int:
    """Multiply-adds ×2 of one forward pass over a padded (batch × source_len, batch × target_len) batch."""
    d, f = c.d_model, c.ffn_dim
    src, tgt = batch * source_len, batch * target_len
    attention = lambda queries, keys: 2 * 2 * batch * queries * keys * d  # Q·Kᵀ and weights·V over all heads
    encoder = 4 * linear_flops(src, d, d) + linear_flops(src, d, f) + linear_flops(src, f, d) + attention(source_len, source_len)
    decoder = (
        4 * linear_flops(tgt, d, d) + attention(target_len, target_len)  # self-attention
        + 2 * linear_flops(tgt, d, d) + 2 * linear_flops(src, d, d) + attention(target_len, source_len)  # cross-attention
        + linear_flops(tgt, d, f) + linear_flops(tgt, f, d)
    )
    return c.encoder_layers * encoder + c.decoder_layers * decoder + linear_flops(tgt, d, c.vocab_size)


def matmul_peak(size: int, dtype: torch.dtype, device: str = "cpu", repeats: int = 5) -> float:
    """Best FLOP/s of a square matrix multiply: what this machine's BLAS (or the GPU's cuBLAS) reaches at ``dtype``."""
    a, b = (torch.randn(size, size).to(device, dtype) for _ in range(2))
    torch.mm(a, b)
    best = min(timed(lambda: torch.mm(a, b), device) for _ in range(repeats))
    return 2 * size**3 / best


def timed(function, device: str = "cpu") -> float:
    """Wall seconds of ``function()``, up to the moment the device has finished what it queued."""
    synchronize(device)
    started = time.perf_counter()
    function()
    synchronize(device)
    return time.perf_counter() - started


def apply_overrides(sections: dict[str, dict], overrides: tuple[str, ...]) -> dict[str, dict]:
    """``section.key=value`` settings (values read as YAML) replacing those of the recipe's ``model`` and ``training``."""
    import yaml

    sections = {name: dict(values) for name, values in sections.items()}
    for override in overrides:
        key, _, value = override.partition("=")
        section, _, name = key.partition(".")
        if section not in sections or not name or not value:
            raise SystemExit(f"error: --set takes model.KEY=VALUE or training.KEY=VALUE, got {override!r}")
        sections[section][name] = yaml.safe_load(value)
    return sections


def time_steps(
    config: TrainBenchConfig, model_config: ModelConfig, training_config: TrainingConfig, tokenizer: Tokenizer,
    sources: list[list[int]], targets: list[list[int]], variant: str,
) -> dict:
    """Warm up, then time ``config.steps`` real updates of a fresh model as the training loop runs them (batches
    prefetched, nothing read back between steps); tokens/s and FLOP/s of those steps."""
    from nmt.model import Transformer
    from training.batching import token_batches
    from training.trainer import Trainer

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix="bench-train-") as run_dir:
        model = Transformer(model_config).to(config.device)
        trainer = Trainer(model, tokenizer, sources, targets, [], training_config, Path(run_dir), {})
        batches = token_batches(trainer.source_lengths, trainer.target_lengths, training_config.max_tokens, training_config.seed, 0)
        warmup, timed_batches = batches[: config.warmup_steps], batches[config.warmup_steps : config.warmup_steps + config.steps]
        for group in trainer.batch_groups([[indices] for indices in warmup]):
            trainer.update(group)
        groups = [[indices] for indices in timed_batches]
        seconds = timed(lambda: [trainer.update(group) for group in trainer.batch_groups(groups)], config.device)
    longest = lambda lengths, indices: int(lengths[indices].max())
    flops = sum(3 * forward_flops(model_config, len(b), longest(trainer.source_lengths, b), longest(trainer.target_lengths, b) - 1)
                for b in timed_batches)
    return {
        "variant": variant,
        "steps": len(timed_batches),
        "mean_step_seconds": seconds / len(timed_batches),
        "target_tokens_per_s": sum(int(trainer.target_lengths[b].sum() - len(b)) for b in timed_batches) / seconds,
        "achieved_flops_per_s": flops / seconds,
    }


def run(config: TrainBenchConfig) -> dict:
    from datasets import load_from_disk

    from nmt.model import Transformer
    from nmt.tokenizer import Tokenizer
    from training.recipe import load_recipe
    from training.trainer import TrainingConfig

    torch.set_num_threads(config.threads)
    recipe = load_recipe(config.recipe)
    sections = apply_overrides({"model": recipe.model, "training": recipe.training}, config.overrides)
    tokenizer = Tokenizer.load(config.run_dir / "spm.model")
    model_config = ModelConfig(vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id, **sections["model"])
    train = load_from_disk(str(config.run_dir / "data" / "train"))
    sources, targets = (train.data.column(name).to_pylist() for name in ("source", "target"))
    training_config = TrainingConfig(**{**sections["training"], "progress_bar": False})
    on_gpu = config.device.startswith("cuda")
    if on_gpu:  # the attention kernel is PyTorch's choice there
        variants = {"eager": training_config} | ({"compile": replace(training_config, compile=True)} if config.compile else {})
    else:
        variants = {f"{kernel} attention": replace(training_config, cpu_attention=kernel) for kernel in config.cpu_attention}
        variants |= {"compile": replace(training_config, compile=True)} if config.compile else {}
    timings, failures = [], {}
    for name, settings in variants.items():
        try:
            timings.append(time_steps(config, model_config, settings, tokenizer, sources, targets, name))
        except Exception as error:  # a compiler that cannot handle the model is a finding, not the end of the benchmark
            if not settings.compile:
                raise
            failures[name] = f"{type(error).__name__}: {error}"[:2000]
            print(f"{name}: failed: {failures[name][:300]}", file=sys.stderr, flush=True)
    size = config.matmul_size or (8192 if on_gpu else 2048)
    peaks = {"fp32": matmul_peak(size, torch.float32, config.device), "bf16": matmul_peak(size, torch.bfloat16, config.device)}
    for timing in timings:
        timing["fraction_of_peak"] = {dtype: timing["achieved_flops_per_s"] / peak for dtype, peak in peaks.items()}
    result = {
        "parameters": Transformer(model_config).num_parameters(),
        "max_tokens": training_config.max_tokens,
        "autocast_bf16": on_gpu if training_config.bf16 is None else training_config.bf16,  # as the Trainer decides
        "matmul_peak_flops_per_s": peaks,
        "matmul_size": size,
        "variants": timings,
        "failed_variants": failures,
    }
    return {"benchmark": "train", "machine": machine(config.device), "config": json_config(config), "model": asdict(model_config), "result": result}


def table(result: dict) -> str:
    peak_dtype = "bf16" if result["autocast_bf16"] else "fp32"
    peaks = result["matmul_peak_flops_per_s"]
    return markdown_table(
        ["variant", "parameters (M)", "batch tokens", "target tokens/s", "mean step s", "achieved GFLOP/s", "fp32 matmul peak GFLOP/s",
         "bf16 matmul peak GFLOP/s", f"% of {peak_dtype} peak"],
        [[v["variant"], result["parameters"] / 1e6, result["max_tokens"], v["target_tokens_per_s"], v["mean_step_seconds"],
          v["achieved_flops_per_s"] / 1e9, peaks["fp32"] / 1e9, peaks["bf16"] / 1e9, 100 * v["fraction_of_peak"][peak_dtype]]
         for v in result["variants"]],
    )


def parse_args(argv: list[str] | None = None) -> TrainBenchConfig:
    defaults = TrainBenchConfig()
    parser = argparse.ArgumentParser(prog="python -m bench.train", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=defaults.recipe, help="recipe YAML (default: %(default)s)")
    parser.add_argument("--run-dir", type=Path, default=defaults.run_dir, help="prepared run directory (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=defaults.steps)
    parser.add_argument("--warmup-steps", type=int, default=defaults.warmup_steps)
    parser.add_argument("--threads", type=int, default=defaults.threads)
    parser.add_argument("--matmul-size", type=int, help="square matrices of the peak measurement (default: 2048 on a CPU, 8192 on a GPU)")
    parser.add_argument("--cpu-attention", nargs="+", choices=["math", "fused"], default=list(defaults.cpu_attention),
                        help="attention kernels to time on a CPU (TrainingConfig.cpu_attention); default: both, for the A/B")
    parser.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda or cuda:N (default: %(default)s)")
    parser.add_argument("--compile", action="store_true", help="also time the step under torch.compile")
    parser.add_argument("--set", dest="overrides", nargs="+", default=[], metavar="SECTION.KEY=VALUE",
                        help="replace recipe values, e.g. model.d_model=512 training.max_tokens=16384")
    parser.add_argument("--out", type=Path, default=defaults.out, help="JSON result file (default: %(default)s)")
    args = parser.parse_args(argv)
    return TrainBenchConfig(
        args.config, args.run_dir, args.steps, args.warmup_steps, args.threads, args.matmul_size, tuple(args.cpu_attention),
        resolve_bench_device(args.device), args.compile, tuple(args.overrides), args.out,
    )


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    configure_training_process()  # as make train does: the step measured is the step that trains
    results = run(config)
    return report(config.out, results, table(results["result"]))


if __name__ == "__main__":
    sys.exit(main())
