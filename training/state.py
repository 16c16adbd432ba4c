"""Training checkpoints that resume exactly: model directory + optimizer, schedule, RNG and data position.

    RUN_DIR/checkpoints/step-00001200/   a model directory (nmt.checkpoint format, fp32) plus
        training_state.pt                optimizer, scheduler, RNG states and Progress

A checkpoint is assembled in a hidden staging folder and renamed into place, so a run killed at any
moment (kill -9 included) leaves either the previous complete checkpoint or the new one, never half of one.
``training_state.pt`` holds only tensors and plain containers and is read with ``weights_only=True``.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file

from nmt.checkpoint import CONFIG, METADATA, TOKENIZER, WEIGHTS, load_model, save_model
from nmt.model import Transformer
from nmt.tokenizer import Tokenizer

STATE_FILE = "training_state.pt"
FORK_FILE = "forked_from.json"
_STEP_DIR = re.compile(r"step-(\d+)")


@dataclass
class Progress:
    """Where training stands; everything a resumed run needs besides weights and optimizer."""

    step: int = 0  # optimizer updates done
    epoch: int = 0
    batch_in_epoch: int = 0  # index of the next batch in this epoch's (sharded) order
    best_score: float = float("-inf")
    best_step: int = 0
    evals_without_improvement: int = 0
    train_seconds: float = 0.0


def checkpoint_dirs(run_dir: Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first."""
    folder = run_dir / "checkpoints"
    if not folder.is_dir():
        return []
    found = [p for p in folder.iterdir() if _STEP_DIR.fullmatch(p.name) and (p / STATE_FILE).is_file()]
    return sorted(found, key=lambda p: int(_STEP_DIR.fullmatch(p.name).group(1)))


def save_checkpoint(
    run_dir: Path,
    model: Transformer,
    tokenizer: Tokenizer,
    metadata: dict,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    progress: Progress,
    keep_last: int,
) -> Path:
    folder = run_dir / "checkpoints"
    final = folder / f"step-{progress.step:08d}"
    staging = folder / f".staging-{progress.step:08d}"
    shutil.rmtree(staging, ignore_errors=True)
    save_model(staging, model, tokenizer, {**metadata, "step": progress.step})
    state = {
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "rng_cpu": torch.get_rng_state(),
        "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "progress": asdict(progress),
    }
    torch.save(state, staging / STATE_FILE)
    shutil.rmtree(final, ignore_errors=True)
    staging.rename(final)
    for old in checkpoint_dirs(run_dir)[:-keep_last]:
        shutil.rmtree(old)
    return final


def restore_checkpoint(
    checkpoint: Path, model: Transformer, optimizer: torch.optim.Optimizer, scheduler: torch.optim.lr_scheduler.LRScheduler
) -> Progress:
    """Load weights, optimizer, schedule and RNG from a checkpoint; returns where to continue."""
    model.load_state_dict(load_file(checkpoint / "model.safetensors"))
    state = torch.load(checkpoint / STATE_FILE, weights_only=True)
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["rng_cpu"])
    if state["rng_cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["rng_cuda"])
    return Progress(**state["progress"])


def fork_run(checkpoint: Path, run_dir: Path) -> int:
    """Start ``run_dir`` from another run's checkpoint and return that checkpoint's step.

    The checkpoint is copied, the source run's prepared data and tokenizer are linked, and its metrics log
    is carried over so the curves continue. The source run is not touched. Calling it again for the same
    fork (e.g. to resume it) changes nothing; forking a run directory from a different step is an error.
    """
    match = _STEP_DIR.fullmatch(checkpoint.name)
    if not match or not (checkpoint / STATE_FILE).is_file():
        raise ValueError(f"{checkpoint} is not a training checkpoint (a step-NNNNNNNN directory holding {STATE_FILE})")
    step, record = int(match.group(1)), run_dir / FORK_FILE
    if record.exists():
        forked_at = json.loads(record.read_text())["step"]
        if forked_at != step:
            raise ValueError(f"{run_dir} was forked at step {forked_at}, not {step}; fork into a new run directory")
        return step
    if checkpoint_dirs(run_dir):
        raise ValueError(f"{run_dir} already holds a run of its own; fork into a new run directory")
    source_run = checkpoint.parent.parent
    staging = run_dir / "checkpoints" / f".staging-fork-{checkpoint.name}"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(checkpoint, staging)
    for name in ("data", "spm.model"):
        if not (run_dir / name).exists():
            (run_dir / name).symlink_to((source_run / name).resolve())
    if (source_run / "metrics.jsonl").is_file():
        shutil.copy2(source_run / "metrics.jsonl", run_dir / "metrics.jsonl")
    staging.rename(run_dir / "checkpoints" / checkpoint.name)
    record.write_text(json.dumps({"from": str(checkpoint.resolve()), "step": step}) + "\n")
    return step


def warm_start(model: Transformer, tokenizer: Tokenizer, model_dir: Path) -> None:
    """Give a fresh run's ``model`` the weights of a model directory (fp16 or fp32 on disk), e.g. one trained in an
    earlier short run on another machine; the optimizer and schedule start afresh.

    The directory must hold a model of the same shape (dropout may differ) whose vocabulary is the run's, piece for
    piece, or its beginning: pieces appended since (``Tokenizer.with_control_pieces``, e.g. ``<bt>``) keep the
    fresh model's initial embedding rows.
    """
    loaded = load_model(model_dir)
    shape = lambda config: {k: v for k, v in config.to_dict().items() if k not in ("dropout", "attention_dropout", "vocab_size")}
    ours, theirs = shape(model.config), shape(loaded.model.config)
    differences = [f"{k} {theirs[k]} (the recipe: {ours[k]})" for k in ours if ours[k] != theirs[k]]
    if differences:
        raise ValueError(f"{model_dir} holds a different model: {', '.join(differences)}")
    pieces = lambda t: [t.sp.id_to_piece(i) for i in range(t.vocab_size)]
    known = pieces(loaded.tokenizer)
    if pieces(tokenizer)[: len(known)] != known:
        raise ValueError(f"{model_dir / TOKENIZER} is not the run's tokenizer: the vocabularies differ")
    fresh = model.state_dict()
    with torch.no_grad():
        model.load_state_dict({
            # vocabulary-sized tensors (the embedding; an untied output) keep their fresh rows for the new pieces
            name: torch.cat([weights.to(fresh[name].dtype), fresh[name][len(known):]]) if weights.shape != fresh[name].shape else weights
            for name, weights in loaded.model.state_dict().items()
        })


def clear_staging(run_dir: Path) -> None:
    """Remove half-written checkpoints left by a killed run."""
    for leftover in (run_dir / "checkpoints").glob(".staging-*"):
        shutil.rmtree(leftover, ignore_errors=True)


def export_model(checkpoint: Path, destination: Path) -> Path:
    """Copy a checkpoint's model files (not its training state) to ``destination``, replacing it atomically."""
    staging = destination.with_name(f".{destination.name}.staging")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for name in (WEIGHTS, CONFIG, TOKENIZER, METADATA):
        shutil.copy2(checkpoint / name, staging / name)
    retired = destination.with_name(f".{destination.name}.retired")
    if destination.exists():
        destination.rename(retired)
    staging.rename(destination)
    shutil.rmtree(retired, ignore_errors=True)
    return destination
