"""Function-preserving growth: a trained model, deeper or with wider feed-forward blocks, that translates exactly as it did.

    python -m training.grow --model models/default --encoder-layers 10 --out runs/grown/enc10
    python -m training.grow --model models/default --ffn-dim 2048 --out runs/grown/ffn2048
    python -m training.train --config RECIPE --run-dir RUN --init-from runs/grown/enc10   # RECIPE: 10 encoder layers

A small model trained for days is a better start for a larger one than random weights. Each new layer is a copy of
an existing one with its output projections (every attention's W_O and the feed-forward W₂, weights and biases)
set to zero. A pre-norm sub-layer adds f(LayerNorm(x)) to the residual stream x, so the copy adds nothing until
training moves those weights, and the grown model's outputs equal the original's (the identity layers of Net2Net,
Chen et al., 2016). The copy sits right after the layer it duplicates, as in progressive stacking (Gong et al.,
2019), so its attention and W₁ already compute features of the right depth when W_O and W₂ start to move.
A post-norm layer normalises after the residual sum, so no copy of one is an identity: such a model cannot deepen.

Widening gives every feed-forward block more hidden units, the capacity where a Transformer keeps what it knows of
words (Geva et al., 2021, "Transformer feed-forward layers are key-value memories"). A new unit reads the input
through a freshly initialised row of W₁ and writes through a zero column of W₂, so the block's output is unchanged
in any norm placement; W₂'s new columns learn from the first step, and W₁'s new rows once those have moved.

A widened model trained on can be averaged back with the model it grew from, a WiSE-FT interpolation (Wortsman et al.,
2022) that keeps some of what the original knew: ``--new-units-from`` gives the grown copy the trained model's W₁ rows
for its new units (still silent behind zero W₂ columns), so that the two differ only in what training changed:
    python -m training.grow --model models/default --ffn-dim 2048 --new-units-from runs/wide/best --out runs/grown/base
    python -m training.average --models runs/grown/base runs/wide/best --out runs/soup

The same holds for pieces the trained model's tokenizer appended (control tags such as ``<formal>``, which a recipe
adds to a released tokenizer): with ``--new-units-from`` the grown copy takes that tokenizer and the trained model's
rows for the new pieces in every vocabulary-sized weight, so the two can be averaged and the mean keeps the rows
that only the trained model learned.
"""

from __future__ import annotations

import argparse
import copy
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import torch
from torch import nn

from nmt.attention import MultiHeadAttention
from nmt.checkpoint import CheckpointError, LoadedModel, load_model, save_model
from nmt.model import FeedForward, ModelConfig, Transformer
from nmt.tokenizer import Tokenizer


class GrowthError(ValueError):
    """A model that cannot grow to the size asked for."""


def silent_copy(layer: nn.Module) -> nn.Module:
    """A copy of ``layer`` whose sub-layers output zero, so that its residual connections pass the input through."""
    twin = copy.deepcopy(layer)
    with torch.no_grad():
        for module in twin.modules():
            output = module.out_proj if isinstance(module, MultiHeadAttention) else module.down if isinstance(module, FeedForward) else None
            if output is not None:
                output.weight.zero_()
                output.bias.zero_()
    return twin


def copied_layers(depth: int, extra: int) -> Counter[int]:
    """How many copies each of ``depth`` layers gets: ``extra`` in all, spread evenly over the stack."""
    return Counter(((2 * k + 1) * depth) // (2 * extra) for k in range(extra))


def deepen(stack: nn.ModuleList, depth: int) -> nn.ModuleList:
    """``stack`` grown to ``depth`` layers, each added one a silent copy placed after the layer it copies."""
    if depth < len(stack):
        raise GrowthError(f"cannot shrink a stack of {len(stack)} layers to {depth}")
    copies = copied_layers(len(stack), depth - len(stack))
    return nn.ModuleList(
        module for i, layer in enumerate(stack) for module in (layer, *(silent_copy(layer) for _ in range(copies[i])))
    )


def widen(ffn: FeedForward, ffn_dim: int, new_units_from: FeedForward | None = None) -> None:
    """Give ``ffn`` ``ffn_dim`` hidden units in place: the new ones read through fresh W₁ rows (or those of
    ``new_units_from``, a block of that width) and write nothing."""
    width = ffn.up.out_features
    if ffn_dim < width:
        raise GrowthError(f"cannot narrow a feed-forward block of {width} units to {ffn_dim}")
    factory = {"device": ffn.up.weight.device, "dtype": ffn.up.weight.dtype}
    up, down = nn.Linear(ffn.up.in_features, ffn_dim, **factory), nn.Linear(ffn_dim, ffn.down.out_features, **factory)
    with torch.no_grad():
        up.weight[:width], up.bias[:width] = ffn.up.weight, ffn.up.bias
        down.weight[:, :width], down.weight[:, width:], down.bias[:] = ffn.down.weight, 0.0, ffn.down.bias
        if new_units_from is not None:
            up.weight[width:], up.bias[width:] = new_units_from.up.weight[width:], new_units_from.up.bias[width:]
    ffn.up, ffn.down = up, down


def grow(model: Transformer, encoder_layers: int, decoder_layers: int, ffn_dim: int | None = None,
         new_units_from: Transformer | None = None) -> Transformer:
    """A copy of ``model`` with the given depths (and feed-forward width) whose outputs equal ``model``'s; with
    ``new_units_from`` (a model of the grown shape) its new hidden units read through that model's W₁ rows."""
    config = model.config
    deeper = (encoder_layers, decoder_layers) != (config.encoder_layers, config.decoder_layers)
    if deeper and not config.pre_norm:
        raise GrowthError("only a pre-norm model can deepen: a post-norm layer normalises its input even when it adds nothing")
    ffn_dim = ffn_dim or config.ffn_dim
    grown_config = replace(config, encoder_layers=encoder_layers, decoder_layers=decoder_layers, ffn_dim=ffn_dim)
    if new_units_from is not None and _shape(new_units_from.config) != _shape(grown_config):
        raise GrowthError("the model lending its new units' W₁ rows must have the grown shape (d_model, encoder and decoder "
                          f"layers, feed-forward units) {_shape(grown_config)}, not {_shape(new_units_from.config)}")
    grown = copy.deepcopy(model)
    grown.encoder_layers = deepen(grown.encoder_layers, encoder_layers)
    grown.decoder_layers = deepen(grown.decoder_layers, decoder_layers)
    if ffn_dim != config.ffn_dim:  # a deepening alone keeps the blocks it copied
        blocks = [m for m in grown.modules() if isinstance(m, FeedForward)]
        donors = [m for m in new_units_from.modules() if isinstance(m, FeedForward)] if new_units_from else [None] * len(blocks)
        for block, donor in zip(blocks, donors, strict=True):
            widen(block, ffn_dim, donor)
    grown.config = grown_config
    return grown


def with_new_pieces(model: Transformer, tokenizer: Tokenizer, donor: LoadedModel) -> tuple[Transformer, Tokenizer]:
    """``model`` over ``donor``'s vocabulary, which must be ``tokenizer``'s with pieces appended: the new pieces take
    ``donor``'s rows in every vocabulary-sized weight (the embedding; an untied output), the others keep ``model``'s."""
    size = tokenizer.vocab_size
    if donor.tokenizer.vocab_size < size or donor.tokenizer.pieces(range(size)) != tokenizer.pieces(range(size)):
        raise GrowthError("the model lending new units must have this model's vocabulary, piece for piece, or more pieces after it")
    grown = Transformer(replace(model.config, vocab_size=donor.tokenizer.vocab_size))
    donor_weights = donor.model.state_dict()
    grown.load_state_dict({
        name: torch.cat([weights, donor_weights[name][size:]]) if weights.shape[:1] == (size,) else weights
        for name, weights in model.state_dict().items()
    })
    return grown, donor.tokenizer


def _shape(config: ModelConfig) -> tuple[int, int, int, int]:
    return config.d_model, config.encoder_layers, config.decoder_layers, config.ffn_dim


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m training.grow", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, type=Path, help="model directory to grow, e.g. models/default")
    parser.add_argument("--out", required=True, type=Path, help="where to write the grown model directory")
    parser.add_argument("--encoder-layers", type=int, help="the grown encoder's depth (default: unchanged)")
    parser.add_argument("--decoder-layers", type=int, help="the grown decoder's depth (default: unchanged)")
    parser.add_argument("--ffn-dim", type=int, help="hidden units of every feed-forward block (default: unchanged)")
    parser.add_argument("--new-units-from", type=Path,
                        help="a model directory of the grown shape whose W₁ rows the new hidden units take, so that the "
                             "grown model can be averaged with it (default: fresh rows)")
    args = parser.parse_args(argv)
    try:
        loaded = load_model(args.model)
        before = loaded.model.config
        donor = load_model(args.new_units_from) if args.new_units_from else None
        grown = grow(loaded.model, args.encoder_layers or before.encoder_layers, args.decoder_layers or before.decoder_layers,
                     args.ffn_dim, donor.model if donor else None)
        grown, tokenizer = with_new_pieces(grown, loaded.tokenizer, donor) if donor else (grown, loaded.tokenizer)
    except (GrowthError, CheckpointError) as error:
        raise SystemExit(f"error: {error}") from error
    origin = {"model": str(args.model), "encoder_layers": before.encoder_layers, "decoder_layers": before.decoder_layers,
              "ffn_dim": before.ffn_dim} | ({"new_units_from": str(args.new_units_from)} if args.new_units_from else {})
    save_model(args.out, grown, tokenizer, {**loaded.metadata, "grown_from": origin})
    print(f"wrote {args.out}: {before.encoder_layers}+{before.decoder_layers} -> "
          f"{grown.config.encoder_layers}+{grown.config.decoder_layers} layers, "
          f"feed-forward {before.ffn_dim} -> {grown.config.ffn_dim} units, "
          f"vocabulary {before.vocab_size} -> {grown.config.vocab_size} pieces, "
          f"{loaded.model.num_parameters() / 1e6:.1f}M -> {grown.num_parameters() / 1e6:.1f}M parameters")


if __name__ == "__main__":
    main()
