"""Publish a trained model directory as the bundled default model, with fp16 weights on disk.

    python -m training.release --model runs/release/best --out models/default

fp16 halves the directory (what ships in git) and is loaded back as fp32, so inference is unchanged
apart from rounding of the weights; the command reports how many of a sample of dev translations change.
A model trained on from an earlier release can keep that release's tuned decoding defaults (``--decoding-from``):
its metadata's ``decoding`` is copied as it is, with the directory it came from.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from nmt.checkpoint import CheckpointError, load_model, read_metadata, save_model
from nmt.search import SearchOptions
from nmt.translator import Translator


def carried_decoding(model_dir: Path) -> dict:
    """The tuned ``decoding`` of another model directory's metadata, marked with where it came from."""
    decoding = read_metadata(model_dir).get("decoding")
    if not decoding:
        raise ValueError(f"{model_dir} has no tuned decoding defaults in its metadata.json to carry over")
    return {**decoding, "carried_from": str(model_dir)}


def release(model_dir: Path, out_dir: Path, sample: list[tuple[str, str, str]], decoding_from: Path | None = None) -> int:
    """Write ``out_dir`` with fp16 weights; returns how many ``sample`` translations differ from fp32."""
    loaded = load_model(model_dir)
    metadata = {**loaded.metadata, "released_from": str(model_dir), "weights_dtype": "float16"}
    if decoding_from is not None:
        metadata["decoding"] = carried_decoding(decoding_from)
    save_model(out_dir, loaded.model, loaded.tokenizer, metadata, dtype=torch.float16)
    full, half = Translator(loaded.model, loaded.tokenizer, loaded.metadata), Translator.load(out_dir, device="cpu")
    options = SearchOptions(beam_size=4)
    changed = 0
    for source_lang, target_lang in {(s, t) for _, s, t in sample}:
        texts = [text for text, s, t in sample if (s, t) == (source_lang, target_lang)]
        before = full.translate(texts, source_lang, target_lang, options)
        after = half.translate(texts, source_lang, target_lang, options)
        changed += sum(a.text != b.text for a, b in zip(after, before))
    return changed


def dev_sample(run_dir: Path, per_direction: int) -> list[tuple[str, str, str]]:
    """The first dev sentences of each direction from a prepared run directory (``data/dev.jsonl``)."""
    path = run_dir / "data" / "dev.jsonl"
    if not path.exists():
        return []
    taken: dict[tuple[str, str], int] = {}
    sample = []
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        key = (row["source_lang"], row["target_lang"])
        if taken.get(key, 0) < per_direction:
            taken[key] = taken.get(key, 0) + 1
            sample.append((row["source"], *key))
    return sample


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m training.release", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, type=Path, help="model directory to publish, e.g. runs/release/best")
    parser.add_argument("--out", default=Path("models/default"), type=Path)
    parser.add_argument("--run-dir", type=Path, help="prepared run directory whose dev sentences check the fp16 copy")
    parser.add_argument("--check-sentences", type=int, default=100, help="dev sentences per direction to compare")
    parser.add_argument("--decoding-from", type=Path, help="model directory whose tuned decoding defaults to carry over")
    args = parser.parse_args(argv)
    sample = dev_sample(args.run_dir, args.check_sentences) if args.run_dir else []
    try:
        changed = release(args.model, args.out, sample, args.decoding_from)
    except (ValueError, CheckpointError) as error:
        raise SystemExit(f"error: {error}") from error
    size = sum(p.stat().st_size for p in args.out.iterdir()) / 1e6
    print(f"released {args.model} as {args.out} ({size:.1f} MB, fp16 weights)")
    if sample:
        print(f"fp16 vs fp32: {changed} of {len(sample)} dev translations differ (beam 4)")


if __name__ == "__main__":
    main()
