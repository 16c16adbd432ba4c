"""Export a model directory to Hugging Face ``transformers`` and to CTranslate2: train here, deploy anywhere.

    python -m nmt.export --format hf --model models/default --out exported/hf
    python -m nmt.export --format ctranslate2 --model models/default --out exported/ct2

Our Transformer is, weight for weight, a stock ``transformers`` encoder-decoder, so exporting is renaming:

* pre-norm (the default) is ``PegasusForConditionalGeneration``: pre-norm layers with a final LayerNorm per
  stack, embeddings scaled by √d, sinusoidal positions with the sines in the first half and the cosines in
  the second, counted from 0, no embedding LayerNorm, one embedding matrix tied to the output projection;
* post-norm is ``MarianMTModel``: the same embeddings and positions, post-norm layers, no final LayerNorm
  (Hugging Face only: CTranslate2's Marian loader assumes Marian's own vocabulary layout).

The special ids stay ours (pad 0, unk 1, ``<s>`` 2, ``</s>`` 3): the decoder starts from ``<s>``, and the
source is ``<2xx> tokens </s>`` exactly as :meth:`~nmt.tokenizer.Tokenizer.source_ids` builds it. The exported
folder carries a ``tokenizers`` copy of our SentencePiece model that writes the same ids.

CTranslate2 is converted from the Hugging Face export with CTranslate2's own converter; one fp32 model serves
every compute type (``compute_type="int8"`` quantises at load time).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from nmt.checkpoint import CheckpointError, LoadedModel, load_model
from nmt.model import ModelConfig
from nmt.tokenizer import BACK_TRANSLATION_TAG, Tokenizer, language_tag

FORMATS = ("hf", "ctranslate2")

# Our parameter names → Hugging Face's (Pegasus and Marian share them), per layer.
_ENCODER_LAYER = {
    "self_attn.": "self_attn.",
    "attn_block.norm.": "self_attn_layer_norm.",
    "ffn.up.": "fc1.",
    "ffn.down.": "fc2.",
    "ffn_block.norm.": "final_layer_norm.",
}
_DECODER_LAYER = {
    "self_attn.": "self_attn.",
    "self_block.norm.": "self_attn_layer_norm.",
    "cross_attn.": "encoder_attn.",
    "cross_block.norm.": "encoder_attn_layer_norm.",
    "ffn.up.": "fc1.",
    "ffn.down.": "fc2.",
    "ffn_block.norm.": "final_layer_norm.",
}
_TOP_LEVEL = {
    "embedding.weight": "model.shared.weight",
    "encoder_norm.": "model.encoder.layer_norm.",
    "decoder_norm.": "model.decoder.layer_norm.",
    "output.weight": "lm_head.weight",
}


def hf_parameter_name(name: str) -> str:
    """``decoder_layers.0.cross_attn.q_proj.weight`` → ``model.decoder.layers.0.encoder_attn.q_proj.weight``."""
    for stack, renames in (("encoder", _ENCODER_LAYER), ("decoder", _DECODER_LAYER)):
        head = f"{stack}_layers."
        if name.startswith(head):
            index, rest = name[len(head) :].split(".", 1)
            for ours, theirs in renames.items():
                if rest.startswith(ours):
                    return f"model.{stack}.layers.{index}.{theirs}{rest[len(ours):]}"
    for ours, theirs in _TOP_LEVEL.items():
        if name.startswith(ours):
            return theirs + name[len(ours) :]
    raise KeyError(f"no Hugging Face name for parameter {name}")


def hf_config(config: ModelConfig, tokenizer: Tokenizer):
    """The ``PegasusConfig`` (pre-norm) or ``MarianConfig`` (post-norm) of the same network and special ids."""
    from transformers import MarianConfig, PegasusConfig

    common = dict(
        vocab_size=config.vocab_size,
        d_model=config.d_model,
        encoder_layers=config.encoder_layers,
        decoder_layers=config.decoder_layers,
        encoder_attention_heads=config.n_heads,
        decoder_attention_heads=config.n_heads,
        encoder_ffn_dim=config.ffn_dim,
        decoder_ffn_dim=config.ffn_dim,
        activation_function=config.activation,  # our "gelu" is the exact (erf) GELU, as is theirs
        max_position_embeddings=config.max_positions,
        dropout=config.dropout,
        attention_dropout=config.attention_dropout,
        activation_dropout=0.0,
        scale_embedding=True,
        tie_word_embeddings=config.tie_output,
        pad_token_id=tokenizer.pad_id,
        bos_token_id=tokenizer.bos_id,
        eos_token_id=tokenizer.eos_id,
        decoder_start_token_id=tokenizer.bos_id,
        forced_eos_token_id=None,
    )
    if config.pre_norm:
        # Hub Pegasus configs spell out the layout; CTranslate2's converter reads these two fields.
        return PegasusConfig(normalize_before=True, normalize_embedding=False, **common)
    return MarianConfig(decoder_vocab_size=config.vocab_size, share_encoder_decoder_embeddings=True, **common)


def to_hf_model(loaded: LoadedModel):
    """A ``transformers`` model holding our weights; fails loudly if any parameter is left unmapped."""
    from transformers import GenerationConfig, MarianMTModel, PegasusForConditionalGeneration

    config = hf_config(loaded.model.config, loaded.tokenizer)
    model_class = PegasusForConditionalGeneration if loaded.model.config.pre_norm else MarianMTModel
    model = model_class(config).eval()
    weights = {hf_parameter_name(name): tensor for name, tensor in loaded.model.state_dict().items()}
    missing, unexpected = model.load_state_dict(weights, strict=False)
    # Tied copies of the embedding, the fixed position tables and the all-zero logits bias are HF's own.
    derived = ("embed_tokens.weight", "embed_positions.weight", "final_logits_bias", "lm_head.weight")
    untouched = [name for name in missing if not name.endswith(derived)]
    if unexpected or untouched:
        raise RuntimeError(f"export mapping is incomplete: unexpected {unexpected}, not set {untouched}")
    if not loaded.model.config.tie_output and "lm_head.weight" in missing:
        raise RuntimeError("the untied output projection was not exported")
    model.generation_config = GenerationConfig(
        decoder_start_token_id=loaded.tokenizer.bos_id,
        bos_token_id=loaded.tokenizer.bos_id,
        eos_token_id=loaded.tokenizer.eos_id,
        pad_token_id=loaded.tokenizer.pad_id,
        suppress_tokens=list(loaded.tokenizer.never_generated),  # what our search never predicts either
        num_beams=4,
        max_length=loaded.model.config.max_positions,
    )
    return model


def to_hf_tokenizer(tokenizer: Tokenizer):
    """A fast tokenizer that reproduces :meth:`Tokenizer.source_ids` for ``"<2xx>" + text``.

    The pipeline is SentencePiece's (whitespace to ``▁``, unigram over the same pieces and scores, UTF-8 byte
    fallback); our Hangul-safe normalisation is approximated by NFKC, which differs only on compatibility jamo.
    """
    from tokenizers import Regex, decoders, normalizers, pre_tokenizers, processors
    from tokenizers import Tokenizer as FastTokenizer
    from tokenizers.models import Unigram
    from transformers import PreTrainedTokenizerFast

    sp = tokenizer.sp
    pieces = [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())]
    fast = FastTokenizer(Unigram(pieces, unk_id=tokenizer.unk_id, byte_fallback=True))
    fast.normalizer = normalizers.Sequence([
        normalizers.NFKC(),
        normalizers.Replace(Regex(r"\s+"), " "),
        normalizers.Strip(),
    ])
    fast.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    fast.decoder = decoders.Sequence([
        decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)
    ])
    eos = sp.id_to_piece(tokenizer.eos_id)
    fast.post_processor = processors.TemplateProcessing(single=f"$A {eos}", special_tokens=[(eos, tokenizer.eos_id)])
    return PreTrainedTokenizerFast(
        tokenizer_object=fast,
        pad_token=sp.id_to_piece(tokenizer.pad_id),
        unk_token=sp.id_to_piece(tokenizer.unk_id),
        bos_token=sp.id_to_piece(tokenizer.bos_id),
        eos_token=eos,
        additional_special_tokens=[
            *(language_tag(lang) for lang in tokenizer.languages),
            *([BACK_TRANSLATION_TAG] if tokenizer.bt_id is not None else []),
        ],
    )


def export_hf(model_dir: str | Path, out: str | Path) -> Path:
    """Write a ``transformers`` model folder (weights, config, generation config, tokenizer)."""
    loaded = load_model(model_dir, "cpu")
    out = Path(out)
    to_hf_model(loaded).save_pretrained(out)
    to_hf_tokenizer(loaded.tokenizer).save_pretrained(out)
    (out / "kotrans.json").write_text(json.dumps({"languages": loaded.tokenizer.languages, **loaded.metadata}, indent=2, ensure_ascii=False) + "\n")
    return out


def convert_hf_to_ctranslate2(hf_dir: str | Path, out: str | Path) -> Path:
    """Run CTranslate2's converter on a Hugging Face export of a pre-norm model, then start the decoder from ``<s>``.

    CTranslate2's Pegasus loader follows Pegasus' pretraining convention of starting the decoder from pad; ours
    starts from ``<s>``, as the Hugging Face export does. Its Marian loader assumes Marian's vocabulary layout
    (pad last, decoder started from a zero vector) and cannot take a post-norm export of ours.
    """
    import ctranslate2
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(hf_dir)
    if config.model_type != "pegasus":
        raise ValueError(f"CTranslate2 export needs a pre-norm (Pegasus) model; {hf_dir} is {config.model_type}")
    out = Path(out)
    ctranslate2.converters.TransformersConverter(str(hf_dir)).convert(str(out), force=True)
    bos = AutoTokenizer.from_pretrained(hf_dir).convert_ids_to_tokens(config.decoder_start_token_id)
    config_path = out / "config.json"
    ct2_config = json.loads(config_path.read_text())
    ct2_config.update(bos_token=bos, decoder_start_token=bos)
    config_path.write_text(json.dumps(ct2_config, indent=2) + "\n")
    return out


def export_ctranslate2(model_dir: str | Path, out: str | Path) -> Path:
    with tempfile.TemporaryDirectory(prefix="hf-export-") as hf_dir:
        export_hf(model_dir, hf_dir)
        return convert_hf_to_ctranslate2(hf_dir, out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nmt.export", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--format", required=True, choices=FORMATS)
    parser.add_argument("--model", required=True, help="our model directory")
    parser.add_argument("--out", required=True, help="folder to write")
    args = parser.parse_args(argv)
    export = export_hf if args.format == "hf" else export_ctranslate2
    try:
        print(export(args.model, args.out))
    except ImportError as error:
        print(f"error: {error.name} is not installed; pip install '.[bench]'", file=sys.stderr)
        return 2
    except (ValueError, CheckpointError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
