"""Train a model from a prepared run directory (``make data``); under torchrun, with DDP.

    python -m training.train --config configs/release.yaml --run-dir runs/release
    torchrun --standalone --nproc_per_node=2 -m training.train --config ... --run-dir ...

A run directory with checkpoints is resumed from its newest one, exactly where it stopped.

A release can cool a copy of a run down while the run itself goes on (``make cooldown``):

    python -m training.train --config ... --run-dir runs/release-cooldown \
        --fork-from runs/release/checkpoints/step-00007000 --cooldown-steps 600

starts the new run directory from that checkpoint and decays the learning rate linearly to zero over 600 steps.

A fresh run can warm-start from a model directory's weights (fp16 or fp32), e.g. those of an earlier short run on
a GPU, with a fresh optimizer and schedule (``make train INIT_FROM=DIR``):

    python -m training.train --config configs/release.yaml --run-dir runs/release-2 --init-from runs/release/best

Training runs on the GPU when there is one (under torchrun, one per process), on the CPU otherwise.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
from dataclasses import asdict
from pathlib import Path

import torch
import torch.distributed as dist
from datasets import load_from_disk

from nmt.checkpoint import CheckpointError
from nmt.model import ModelConfig, Transformer
from nmt.tokenizer import Tokenizer
from nmt.memory import configure_training_process
from training.recipe import load_recipe
from training.state import fork_run, warm_start
from training.trainer import DevPair, Distributed, Trainer, TrainingConfig


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m training.train", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="recipe YAML")
    parser.add_argument("--run-dir", required=True, type=Path, help="prepared by training.prepare; checkpoints go here")
    parser.add_argument("--max-steps", type=int, help="override the recipe's training.max_steps")
    parser.add_argument("--max-minutes", type=float, help="stop with a checkpoint after this many minutes")
    parser.add_argument("--threads", type=int, help="torch intra-op threads per process")
    parser.add_argument("--no-progress-bar", action="store_true")
    parser.add_argument("--fork-from", type=Path, help="start RUN_DIR from this checkpoint of another run")
    parser.add_argument("--cooldown-steps", type=int,
                        help="with --fork-from: decay the learning rate linearly to zero over this many steps, then stop")
    parser.add_argument("--init-from", type=Path,
                        help="a fresh run starts from this model directory's weights (same shape and vocabulary)")
    args = parser.parse_args(argv)
    if args.init_from and args.fork_from:
        parser.error("--init-from starts a fresh run and --fork-from continues another one: choose one")
    if args.cooldown_steps is not None and (args.fork_from is None or args.cooldown_steps < 1):
        parser.error("--cooldown-steps needs --fork-from and at least 1 step")
    return args


def setup_distributed() -> tuple[Distributed, torch.device]:
    """torchrun sets WORLD_SIZE/RANK/LOCAL_RANK: NCCL on GPUs, gloo on CPUs; one process otherwise."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if world_size > 1:
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
        return Distributed(dist.get_rank(), world_size), device
    return Distributed(), device


def read_dev_pairs(path: Path) -> list[DevPair]:
    if not path.exists():
        return []
    return [DevPair(**json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    configure_training_process()
    recipe = load_recipe(args.config)
    if args.threads:
        torch.set_num_threads(args.threads)
    distributed, device = setup_distributed()
    overrides = {k: v for k, v in {"max_steps": args.max_steps, "max_minutes": args.max_minutes}.items() if v is not None}
    if args.fork_from:
        try:
            fork_step = fork_run(args.fork_from, args.run_dir) if distributed.is_main else None
        except ValueError as error:
            raise SystemExit(f"error: {error}") from error
        if distributed.world_size > 1:
            shared = [fork_step]
            dist.broadcast_object_list(shared, src=0)
            fork_step = shared[0]
        if args.cooldown_steps:
            # The recipe's max_steps ends its main run; a cooldown of that run's last step still runs its own steps.
            overrides = {"max_steps": fork_step + args.cooldown_steps} | overrides
            overrides |= {"cooldown_start": fork_step, "cooldown_steps": args.cooldown_steps}
    config = TrainingConfig(**{**recipe.training, **overrides, **({"progress_bar": False} if args.no_progress_bar else {})})
    torch.manual_seed(config.seed)

    run_dir = args.run_dir
    if not ((run_dir / "spm.model").is_file() and (run_dir / "data" / "train").is_dir()):
        raise SystemExit(f"error: {run_dir} is not prepared: run `python -m training.prepare --config {args.config} "
                         f"--run-dir {run_dir}` (`make data`) first")
    tokenizer = Tokenizer.load(run_dir / "spm.model")
    train = load_from_disk(str(run_dir / "data" / "train"))
    model_config = ModelConfig(vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id, **recipe.model)
    model = Transformer(model_config).to(device)
    metadata = {
        "name": recipe.name,
        "version": "0.1.0",
        "language_pairs": [list(d) for d in recipe.directions],
        "training": {"recipe": str(args.config), "examples": len(train), "config": asdict(config),
                     **({"init_from": str(args.init_from)} if args.init_from else {})},
    }
    # Plain lists: per-example access to Arrow columns costs more than holding ~8M ints in memory.
    sources, targets = (train.data.column(name).to_pylist() for name in ("source", "target"))
    trainer = Trainer(
        model, tokenizer, sources, targets, read_dev_pairs(run_dir / "data" / "dev.jsonl"),
        config, run_dir, metadata, distributed,
    )
    del sources, targets  # the trainer holds them as flat arrays
    resumed = trainer.resume()
    if args.init_from and not resumed:
        try:
            warm_start(model, tokenizer, args.init_from)  # every rank reads the same weights
        except (ValueError, CheckpointError) as error:
            raise SystemExit(f"error: cannot warm-start from {args.init_from}: {error}") from error
    if distributed.is_main:
        where = f"resumed at step {trainer.progress.step}" if resumed else "from scratch"
        if args.init_from:
            where = f"{where} (--init-from applies to a fresh run only)" if resumed else f"from the weights of {args.init_from}"
        print(f"training {recipe.name}: {model.num_parameters() / 1e6:.1f}M parameters, {len(train)} examples, "
              f"{distributed.world_size} process(es) on {device}, {where}", flush=True)
    progress = trainer.fit()
    if distributed.is_main:
        print(f"stopped at step {progress.step} (epoch {progress.epoch}); best dev BLEU {progress.best_score:.2f} "
              f"at step {progress.best_step}; checkpoints in {run_dir / 'checkpoints'}, best model in {run_dir / 'best'}, "
              f"curves in {run_dir / 'curves.png'}", flush=True)
    if distributed.world_size > 1:
        dist.barrier()  # no rank tears its connections down while another still uses them
        # The DDP wrapper keeps the process group (and Gloo's worker threads) alive; left to interpreter exit,
        # their teardown can abort the process ("terminate called without an active exception").
        del trainer
        gc.collect()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
