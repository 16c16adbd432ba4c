"""Every attention map behind one translation: what each layer and head of the model looked at.

The search picks each sentence's best hypothesis; one teacher-forced pass over it (the source through the
encoder, ``<s>`` and the hypothesis through the decoder) then records every layer's and every head's weights:
encoder self-attention, masked decoder self-attention and cross-attention. The pass runs the decoding copy of
the model, so it explains the translation the server gives. Sentences of a text are explained one by one and
keep their own maps.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from nmt.model import AttentionRecord
from nmt.search import Hypothesis, SearchOptions
from nmt.sentences import split_sentences
from nmt.translator import Attention, Translation, Translator

# Each kind of attention and the pieces along its (rows, columns): queries attend to keys.
AXES = {
    "encoder": ("source_pieces", "source_pieces"),
    "decoder": ("target_pieces", "decoder_input_pieces"),
    "cross": ("target_pieces", "source_pieces"),
}
KINDS = tuple(AXES)


@dataclass
class SentenceAttention:
    """The attention maps of one sentence, each (layers, heads, query rows, key columns)."""

    source_pieces: list[str]  # encoder input: the <2xx> tag, the sentence's pieces, </s>
    target_pieces: list[str]  # what each decoder position predicts: the hypothesis' pieces, then </s>
    decoder_input_pieces: list[str]  # <s> then the hypothesis' pieces: the keys of decoder self-attention
    encoder: Tensor  # (layers, heads, S, S)
    decoder: Tensor  # (layers, heads, T, T), zero above the diagonal: a position sees only its prefix
    cross: Tensor  # (layers, heads, T, S)

    def weights(self, kind: str) -> Tensor:
        if kind not in AXES:
            raise ValueError(f"attention kind must be one of {', '.join(KINDS)}, got {kind!r}")
        return getattr(self, kind)

    def labels(self, kind: str) -> tuple[list[str], list[str]]:
        """(row labels, column labels) of a kind's maps."""
        self.weights(kind)  # refuses an unknown kind
        rows, columns = AXES[kind]
        return getattr(self, rows), getattr(self, columns)

    def heatmap(self, kind: str = "cross", layer: int = -1, head: int | None = None) -> Attention:
        """One map as rows × columns: a layer's head, or the average of its heads when ``head`` is None."""
        weights = self.weights(kind)
        layers, heads = weights.shape[:2]
        if not -layers <= layer < layers:
            raise ValueError(f"layer must be between 0 and {layers - 1} (or negative from the end), got {layer}")
        if head is not None and not 0 <= head < heads:
            raise ValueError(f"head must be between 0 and {heads - 1}, got {head}")
        chosen = weights[layer].mean(dim=0) if head is None else weights[layer, head]
        rows, columns = self.labels(kind)
        return Attention(source_tokens=columns, target_tokens=rows, weights=chosen.tolist())

    def to_dict(self, decimals: int = 4) -> dict:
        """Pieces and maps as JSON-ready lists, weights rounded (a sentence's maps are tens of thousands of numbers)."""
        maps = {kind: self.weights(kind).double().round(decimals=decimals).tolist() for kind in KINDS}  # float64: short in JSON
        pieces = {"source_pieces": self.source_pieces, "target_pieces": self.target_pieces,
                  "decoder_input_pieces": self.decoder_input_pieces}
        return {**pieces, **maps}


@dataclass
class Explanation:
    translation: Translation
    sentences: list[SentenceAttention]  # one per sentence of the text, in order

    def heatmap(self, kind: str = "cross", layer: int = -1, head: int | None = None) -> Attention:
        """The sentences' maps side by side along the diagonal: a sentence attends only within itself."""
        maps = [sentence.heatmap(kind, layer, head) for sentence in self.sentences]
        width = sum(len(m.source_tokens) for m in maps)
        weights, offset = [], 0
        for m in maps:
            weights += [[0.0] * offset + row + [0.0] * (width - offset - len(row)) for row in m.weights]
            offset += len(m.source_tokens)
        return Attention(
            source_tokens=[piece for m in maps for piece in m.source_tokens],
            target_tokens=[piece for m in maps for piece in m.target_tokens],
            weights=weights,
        )


def explain(translator: Translator, text: str, source_lang: str, target_lang: str,
            options: SearchOptions | None = None) -> Explanation:
    """Translate ``text`` and record every attention map of each sentence's best hypothesis."""
    translator.check_pair(source_lang, target_lang)
    options = options or translator.default_options(source_lang, target_lang)
    sentences = split_sentences(text)
    hypotheses = translator.rerank(sentences, translator.translate_sentences(sentences, target_lang, options), source_lang, options)
    translation = translator.join_sentences(sentences, hypotheses, target_lang, options)
    return Explanation(translation, [attend(translator, s, nbest[0], target_lang, options) for s, nbest in zip(sentences, hypotheses)])


@torch.inference_mode()
def attend(translator: Translator, sentence: str, hypothesis: Hypothesis, target_lang: str,
           options: SearchOptions) -> SentenceAttention:
    """The teacher-forced pass over one sentence and its chosen hypothesis, from the source ``options`` encoded."""
    tokenizer, model, device = translator.tokenizer, translator.inference_model, translator.device
    source_ids = translator.encode_source(sentence, target_lang, options)
    decoder_input = [tokenizer.bos_id, *hypothesis.tokens]
    record = AttentionRecord()
    memory, memory_mask = model.encode(torch.tensor([source_ids], device=device), record)
    model.decode(torch.tensor([decoder_input], device=device), memory, memory_mask, record=record)

    def stacked(maps: list[Tensor]) -> Tensor:
        return torch.stack([weights[0] for weights in maps]).float().cpu()

    return SentenceAttention(
        source_pieces=tokenizer.pieces(source_ids),
        target_pieces=tokenizer.pieces([*hypothesis.tokens, tokenizer.eos_id]),
        decoder_input_pieces=tokenizer.pieces(decoder_input),
        encoder=stacked(record.encoder),
        decoder=stacked(record.decoder),
        cross=stacked(record.cross),
    )
