"""Checkpoint averaging: the element-wise mean of the last few checkpoints' weights, usually worth a little BLEU.

    python -m training.average --run-dir runs/release [--last 5] [--out runs/release/averaged]
    python -m training.average --models runs/a/best runs/b/best --out runs/soup

The second form averages model directories of different runs that started from the same weights (a "model
soup", Wortsman et al., 2022): fine-tuned copies of one model stay close enough in weight space to average.
``--weights 1 3`` takes a weighted mean instead, a point a quarter of the way from the first model to the second.
A run directory holds ``checkpoints/step-00001234/`` model directories (plus training state, ignored here)
and ``best/``. The mean is taken in fp32 over checkpoints that share one config and one tokenizer: weights
of different shapes cannot be averaged, and weights over different vocabularies must not be.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from nmt.checkpoint import CheckpointError, load_model, save_model
from nmt.model import Transformer
from training.state import checkpoint_dirs

DEFAULT_LAST = 5


class AveragingError(ValueError):
    """Checkpoints that cannot be averaged together."""


def average_checkpoints(model_dirs: Sequence[str | Path], out_dir: str | Path, weights: Sequence[float] | None = None) -> Path:
    """Write the mean of ``model_dirs``' weights as a model directory; metadata follows the last one given.

    The sources are recorded as given (paths relative to the repository when run from it, as ``released_from``
    is), so that a released model does not carry the path of the machine it was made on.

    ``weights`` (one per model, scaled to sum to 1) make it a weighted mean: a point between two models other than
    their midpoint, e.g. 0.3 / 0.7 to lean towards the second of them.
    """
    if not model_dirs:
        raise AveragingError("no checkpoints to average")
    shares = mixing_shares(len(model_dirs), weights)
    model_dirs = [Path(d) for d in model_dirs]
    first = load_model(model_dirs[0])
    sums = {name: shares[0] * t.float() for name, t in first.model.state_dict().items()}
    metadata = first.metadata
    for directory, share in zip(model_dirs[1:], shares[1:]):  # one model in memory besides the sums
        loaded = load_model(directory)
        if loaded.model.config != first.model.config:
            raise AveragingError(f"{directory} has a different model config from {model_dirs[0]}")
        if loaded.tokenizer.model_proto != first.tokenizer.model_proto:
            raise AveragingError(f"{directory} has a different tokenizer from {model_dirs[0]}")
        for name, tensor in loaded.model.state_dict().items():
            sums[name] += share * tensor.float()
        metadata = loaded.metadata
    averaged = Transformer(first.model.config)
    averaged.load_state_dict(sums)
    provenance = {"averaged_from": [str(d) for d in model_dirs]} | ({"weights": shares} if weights else {})
    return save_model(out_dir, averaged, first.tokenizer, {**metadata, **provenance})


def mixing_shares(count: int, weights: Sequence[float] | None) -> list[float]:
    """Each model's share of the mean: equal without ``weights``, else the weights scaled to sum to 1."""
    if weights is None:
        return [1 / count] * count
    if len(weights) != count:
        raise AveragingError(f"{len(weights)} weights for {count} models: give one weight per model")
    total = sum(weights)
    if any(w < 0 for w in weights) or total <= 0:
        raise AveragingError(f"weights must be >= 0 and not all 0, got {list(weights)}")
    return [w / total for w in weights]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--run-dir", type=Path, help="training run holding checkpoints/step-*/")
    source.add_argument("--models", type=Path, nargs="+", help="model directories of runs that share a start")
    parser.add_argument("--last", type=int, default=DEFAULT_LAST, help="with --run-dir: average the N checkpoints with the highest steps")
    parser.add_argument("--weights", type=float, nargs="+",
                        help="with --models: one weight per model for a weighted mean (scaled to sum to 1; default equal)")
    parser.add_argument("--out", type=Path, help="output model directory (default: RUN_DIR/averaged; needed with --models)")
    args = parser.parse_args(argv)
    if args.last < 1:
        parser.error("--last must be at least 1")
    if args.models and args.out is None:
        parser.error("--models needs --out")
    if args.weights and not args.models:
        parser.error("--weights goes with --models")
    return args


def main(argv: Sequence[str] | None = None) -> Path:
    args = parse_args(argv)
    if args.models:
        out_dir = average_checkpoints(args.models, args.out, args.weights)
        print(f"averaged {len(args.models)} models into {out_dir}")
        return out_dir
    checkpoints = checkpoint_dirs(args.run_dir)[-args.last :]
    if not checkpoints:
        raise SystemExit(f"no checkpoints under {args.run_dir / 'checkpoints'} (expected step-NNNNNNNN/ model directories)")
    if len(checkpoints) < args.last:
        print(f"only {len(checkpoints)} checkpoints available, averaging those")
    out_dir = average_checkpoints(checkpoints, args.out or args.run_dir / "averaged")
    print(f"averaged {', '.join(c.name for c in checkpoints)} into {out_dir}")
    return out_dir


if __name__ == "__main__":
    try:
        main()
    except (AveragingError, CheckpointError) as error:
        raise SystemExit(f"error: {error}") from error
