"""The model directory format: weights, config, tokenizer and metadata, loadable without pickle.

    model_dir/
      model.safetensors   weights (fp16 or fp32 on disk, loaded as fp32)
      config.json         ModelConfig
      spm.model           SentencePiece model
      metadata.json       languages, language pairs, training summary, format version

For transports that cap file sizes, the weights split into shards and join back, bit for bit:

    python -m nmt.checkpoint split models/default --max-mib 16   # model-00001-of-00002.safetensors, ...
    python -m nmt.checkpoint join models/default                 # model.safetensors again
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from nmt.model import ModelConfig, Transformer
from nmt.tokenizer import Tokenizer

FORMAT_VERSION = 1
WEIGHTS, CONFIG, TOKENIZER, METADATA = "model.safetensors", "config.json", "spm.model", "metadata.json"
SHARDS = "model-*-of-*.safetensors"


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


def read_metadata(directory: str | Path) -> dict:
    """A model directory's ``metadata.json`` alone, without loading its weights."""
    return _read_json(Path(directory) / METADATA)


def load_model(directory: str | Path, device: str | torch.device = "cpu") -> LoadedModel:
    """Load a model directory onto ``device`` in fp32; every failure names the file at fault."""
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointError(f"model directory {directory} does not exist")
    if not (directory / WEIGHTS).is_file() and weight_shards(directory):
        raise CheckpointError(f"model directory {directory} holds its weights in shards: "
                              f"join them first (python -m nmt.checkpoint join {directory})")
    for name in (WEIGHTS, CONFIG, TOKENIZER, METADATA):
        if not (directory / name).is_file():
            raise CheckpointError(f"model directory {directory} is missing {name}")
    try:
        config = ModelConfig(**_read_json(directory / CONFIG))
        model = Transformer(config)  # also rejects values no model can have, e.g. heads that do not divide d_model
    except (TypeError, ValueError, KeyError) as error:
        raise CheckpointError(f"{directory / CONFIG} is not a valid model config: {error}") from error
    metadata = read_metadata(directory)
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


def shard_names(count: int) -> list[str]:
    """The file names of a model's weights split into ``count`` shards, in order."""
    return [f"model-{i:05d}-of-{count:05d}.safetensors" for i in range(1, count + 1)]


def weight_shards(directory: Path) -> list[Path]:
    return sorted(directory.glob(SHARDS))


def _shard_bytes(tensors: dict[str, torch.Tensor]) -> int:
    """An upper bound on the size of a safetensors file holding ``tensors``: their bytes plus a generous header."""
    return sum(t.numel() * t.element_size() for t in tensors.values()) + 1024 + 256 * len(tensors)


def split_weights(directory: str | Path, max_bytes: int = 16 * 2**20) -> list[Path]:
    """Replace ``model.safetensors`` by shards of at most ``max_bytes`` each, whole tensors in file order."""
    directory = Path(directory)
    with safe_open(directory / WEIGHTS, "pt") as weights:
        metadata, tensors = weights.metadata(), {name: weights.get_tensor(name) for name in weights.keys()}
    groups: list[dict[str, torch.Tensor]] = [{}]
    for name, tensor in tensors.items():
        if _shard_bytes({name: tensor}) > max_bytes:
            raise ValueError(f"{name} alone takes {_shard_bytes({name: tensor})} bytes, more than a shard of {max_bytes} may")
        if groups[-1] and _shard_bytes({**groups[-1], name: tensor}) > max_bytes:
            groups.append({})
        groups[-1][name] = tensor
    paths = [directory / name for name in shard_names(len(groups))]
    for group, path in zip(groups, paths):
        save_file(group, path, metadata=metadata)
    (directory / WEIGHTS).unlink()
    return paths


def join_weights(directory: str | Path) -> Path:
    """Write the shards of ``directory`` back into one ``model.safetensors`` (the file they were split from) and remove them."""
    directory = Path(directory)
    shards = weight_shards(directory)
    if not shards:
        raise CheckpointError(f"{directory} holds no weight shards ({SHARDS})")
    # A shard lost in transport would otherwise join into a model short of tensors.
    found = [path.name for path in shards]
    counts = {name.removesuffix(".safetensors").rsplit("-of-", 1)[1] for name in found}
    if len(counts) > 1:
        raise CheckpointError(f"{directory} holds an incomplete or mixed set of weight shards (found: {', '.join(found)})")
    if missing := sorted(set(shard_names(int(counts.pop()))) - set(found)):
        raise CheckpointError(f"{directory} holds an incomplete or mixed set of weight shards (missing: {', '.join(missing)})")
    tensors: dict[str, torch.Tensor] = {}
    for shard in shards:
        with safe_open(shard, "pt") as weights:
            metadata = weights.metadata()
            tensors |= {name: weights.get_tensor(name) for name in weights.keys()}
    save_file(tensors, directory / WEIGHTS, metadata=metadata)
    for shard in shards:
        shard.unlink()
    return directory / WEIGHTS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nmt.checkpoint", description="split a model directory's weights into "
                                     "shards, or join them back into model.safetensors")
    parser.add_argument("action", choices=["split", "join"])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--max-mib", type=float, default=16, help="with split: the largest shard (default: %(default)s MiB)")
    args = parser.parse_args(argv)
    try:
        written = split_weights(args.directory, int(args.max_mib * 2**20)) if args.action == "split" else [join_weights(args.directory)]
    except (OSError, ValueError, CheckpointError, SafetensorError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for path in written:
        print(f"{path} ({path.stat().st_size / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
