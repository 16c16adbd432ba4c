"""Training benchmark: tokens/s of the real training step on a recipe, and the FLOP/s it reaches against a
matrix multiply measured on the same machine.

    python -m bench.train --config configs/release.yaml --run-dir runs/release      (make bench-train)

The step is :meth:`training.trainer.Trainer.update` itself (forward, label-smoothed loss, backward, clipping,
AdamW, schedule) on the recipe's model and batches from the prepared data, so the number is what ``make train``
gets. FLOPs are counted from the padded shapes the hardware actually multiplies: every Linear, the attention
score and value products and the output projection, forward ×3 for forward plus backward.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from bench.common import RESULTS_DIR, machine, markdown_table, report
from nmt.model import ModelConfig

if TYPE_CHECKING:
    from nmt.tokenizer import Tokenizer
    from training.trainer import TrainingConfig


@dataclass(frozen=True)
class TrainBenchConfig:
    recipe: Path = Path("configs/release.yaml")
    run_dir: Path = Path("runs/release")  # holds spm.model and data/train from make data
    steps: int = 20  # timed updates
    warmup_steps: int = 3  # untimed updates first (allocator, oneDNN kernel selection)
    threads: int = 2
    matmul_size: int = 2048  # square matrices for the peak measurement
    cpu_attention: tuple[str, ...] = ("math", "fused")  # attention kernels to time, one after the other (A/B)
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


def matmul_peak(size: int, dtype: torch.dtype, repeats: int = 5) -> float:
    """Best FLOP/s of a square matrix multiply: what this machine's BLAS reaches at ``dtype``."""
    a, b = torch.randn(size, size).to(dtype), torch.randn(size, size).to(dtype)
    torch.mm(a, b)
    best = min(timed(lambda: torch.mm(a, b)) for _ in range(repeats))
    return 2 * size**3 / best


def timed(function) -> float:
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def time_steps(
    config: TrainBenchConfig, model_config: ModelConfig, training_config: TrainingConfig, tokenizer: Tokenizer,
    sources: list[list[int]], targets: list[list[int]],
) -> dict:
    """Warm up, then time ``config.steps`` real updates of a fresh model; tokens/s and FLOP/s of those steps."""
    from nmt.model import Transformer
    from training.batching import token_batches
    from training.trainer import Trainer

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix="bench-train-") as run_dir:
        trainer = Trainer(Transformer(model_config), tokenizer, sources, targets, [], training_config, Path(run_dir), {})
        batches = token_batches(trainer.source_lengths, trainer.target_lengths, training_config.max_tokens, training_config.seed, 0)
        batches = batches[: config.warmup_steps + config.steps]
        for indices in batches[: config.warmup_steps]:
            trainer.update([indices])
        steps = []
        for indices in batches[config.warmup_steps :]:
            source, target = trainer.batch_tensors(indices)
            seconds = timed(lambda: trainer.update([indices]))
            flops = 3 * forward_flops(model_config, len(indices), source.size(1), target.size(1) - 1)
            steps.append({"seconds": seconds, "tokens": int(trainer.target_lengths[indices].sum() - len(indices)), "flops": flops})
    seconds = sum(s["seconds"] for s in steps)
    return {
        "cpu_attention": training_config.cpu_attention,
        "steps": len(steps),
        "median_step_seconds": statistics.median(s["seconds"] for s in steps),
        "target_tokens_per_s": sum(s["tokens"] for s in steps) / seconds,
        "achieved_flops_per_s": sum(s["flops"] for s in steps) / seconds,
    }


def run(config: TrainBenchConfig) -> dict:
    from datasets import load_from_disk

    from nmt.model import Transformer
    from nmt.tokenizer import Tokenizer
    from training.recipe import load_recipe
    from training.trainer import TrainingConfig

    torch.set_num_threads(config.threads)
    recipe = load_recipe(config.recipe)
    tokenizer = Tokenizer.load(config.run_dir / "spm.model")
    model_config = ModelConfig(vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id, **recipe.model)
    train = load_from_disk(str(config.run_dir / "data" / "train"))
    sources, targets = (train.data.column(name).to_pylist() for name in ("source", "target"))
    training_config = TrainingConfig(**{**recipe.training, "progress_bar": False})
    kernels = [time_steps(config, model_config, replace(training_config, cpu_attention=kernel), tokenizer, sources, targets)
               for kernel in config.cpu_attention]
    peaks = {"fp32": matmul_peak(config.matmul_size, torch.float32), "bf16": matmul_peak(config.matmul_size, torch.bfloat16)}
    for timing in kernels:
        timing["fraction_of_peak"] = {dtype: timing["achieved_flops_per_s"] / peak for dtype, peak in peaks.items()}
    result = {
        "parameters": Transformer(model_config).num_parameters(),
        "autocast_bf16": training_config.bf16,
        "matmul_peak_flops_per_s": peaks,
        "kernels": kernels,
    }
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(config).items()}
    return {"benchmark": "train", "machine": machine(), "config": settings, "model": asdict(model_config), "result": result}


def table(result: dict) -> str:
    peak_dtype = "bf16" if result["autocast_bf16"] else "fp32"
    peaks = result["matmul_peak_flops_per_s"]
    return markdown_table(
        ["CPU attention", "target tokens/s", "median step s", "achieved GFLOP/s", "fp32 matmul peak GFLOP/s", "bf16 matmul peak GFLOP/s",
         f"% of {peak_dtype} peak"],
        [[k["cpu_attention"], k["target_tokens_per_s"], k["median_step_seconds"], k["achieved_flops_per_s"] / 1e9, peaks["fp32"] / 1e9,
          peaks["bf16"] / 1e9, 100 * k["fraction_of_peak"][peak_dtype]] for k in result["kernels"]],
    )


def parse_args(argv: list[str] | None = None) -> TrainBenchConfig:
    defaults = TrainBenchConfig()
    parser = argparse.ArgumentParser(prog="python -m bench.train", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=defaults.recipe, help="recipe YAML (default: %(default)s)")
    parser.add_argument("--run-dir", type=Path, default=defaults.run_dir, help="prepared run directory (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=defaults.steps)
    parser.add_argument("--warmup-steps", type=int, default=defaults.warmup_steps)
    parser.add_argument("--threads", type=int, default=defaults.threads)
    parser.add_argument("--matmul-size", type=int, default=defaults.matmul_size)
    parser.add_argument("--cpu-attention", nargs="+", choices=["math", "fused"], default=list(defaults.cpu_attention),
                        help="attention kernels to time (TrainingConfig.cpu_attention); default: both, for the A/B")
    parser.add_argument("--out", type=Path, default=defaults.out, help="JSON result file (default: %(default)s)")
    args = parser.parse_args(argv)
    return TrainBenchConfig(
        args.config, args.run_dir, args.steps, args.warmup_steps, args.threads, args.matmul_size, tuple(args.cpu_attention), args.out
    )


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    results = run(config)
    return report(config.out, results, table(results["result"]))


if __name__ == "__main__":
    sys.exit(main())
