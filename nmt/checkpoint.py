"""The model directory format: weights, config, tokenizer and metadata, loadable without pickle.

    model_dir/
      model.safetensors   weights (fp16 or fp32 on disk, loaded as fp32)
      config.json         ModelConfig
      spm.model           SentencePiece model
      metadata.json       languages, language pairs, training summary, format version
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from nmt.model import ModelConfig, Transformer
from nmt.tokenizer import Tokenizer

FORMAT_VERSION = 1
WEIGHTS, CONFIG, TOKENIZER, METADATA = "model.safetensors", "config.json", "spm.model", "metadata.json"


class CheckpointError(RuntimeError):
    """A model directory is missing a file or holds one that cannot be read."""


@dataclass
class LoadedModel:
    model: Transformer
    tokenizer: Tokenizer
    metadata: dict


def save_model(
    directory: str | Path, model: Transformer, tokenizer: Tokenizer, metadata: dict, dtype: torch.dtype = torch.float32
) -> Path:
    """Write a model directory atomically: a reader never sees a half-written one."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    try:
        weights = {name: t.detach().to("cpu", dtype if t.is_floating_point() else t.dtype).contiguous() for name, t in model.state_dict().items()}
        save_file(weights, staging / WEIGHTS, metadata={"format_version": str(FORMAT_VERSION)})
        (staging / CONFIG).write_text(json.dumps(model.config.to_dict(), indent=2) + "\n")
        tokenizer.save(staging / TOKENIZER)
        full_metadata = {"format_version": FORMAT_VERSION, "languages": tokenizer.languages, **metadata}
        (staging / METADATA).write_text(json.dumps(full_metadata, indent=2, ensure_ascii=False) + "\n")
        if directory.exists():
            retired = directory.with_name(f".{directory.name}.old")
            shutil.rmtree(retired, ignore_errors=True)
            directory.rename(retired)
            staging.rename(directory)
            shutil.rmtree(retired)
        else:
            staging.rename(directory)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return directory


def _read_json(path: Path) -> dict:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"cannot read {path}: {error}") from error
    if not isinstance(value, dict):
        raise CheckpointError(f"{path} must hold a JSON object")
    return value


def load_model(directory: str | Path, device: str | torch.device = "cpu") -> LoadedModel:
    """Load a model directory onto ``device`` in fp32; every failure names the file at fault."""
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointError(f"model directory {directory} does not exist")
    for name in (WEIGHTS, CONFIG, TOKENIZER, METADATA):
        if not (directory / name).is_file():
            raise CheckpointError(f"model directory {directory} is missing {name}")
    try:
        config = ModelConfig(**_read_json(directory / CONFIG))
        model = Transformer(config)  # also rejects values no model can have, e.g. heads that do not divide d_model
    except (TypeError, ValueError, KeyError) as error:
        raise CheckpointError(f"{directory / CONFIG} is not a valid model config: {error}") from error
    metadata = _read_json(directory / METADATA)
    try:
        tokenizer = Tokenizer.load(directory / TOKENIZER)
    except (OSError, RuntimeError) as error:
        raise CheckpointError(f"cannot read SentencePiece model {directory / TOKENIZER}: {error}") from error
    try:
        weights = load_file(directory / WEIGHTS)
    except (OSError, SafetensorError) as error:
        raise CheckpointError(f"cannot read weights {directory / WEIGHTS}: {error}") from error
    try:
        model.load_state_dict({name: t.float() if t.is_floating_point() else t for name, t in weights.items()})
    except RuntimeError as error:
        raise CheckpointError(f"weights in {directory / WEIGHTS} do not match {directory / CONFIG}: {error}") from error
    if tokenizer.vocab_size != config.vocab_size:
        raise CheckpointError(f"{directory / TOKENIZER} has {tokenizer.vocab_size} pieces but the model expects {config.vocab_size}")
    return LoadedModel(model.to(device).eval(), tokenizer, metadata)
