"""Response messages built from translations and the model: one mapping for gRPC and for the HTTP API."""

from __future__ import annotations

from nmt.translator import Translation, Translator
from serving.config import Limits
from serving.stubs import translator_pb2


def translation_message(translation: Translation) -> translator_pb2.TranslateResponse:
    response = translator_pb2.TranslateResponse(
        translation=translation.text,
        hypotheses=[translator_pb2.Hypothesis(text=c.text, score=c.score) for c in translation.candidates],
    )
    if translation.attention is not None:
        attention = translation.attention
        response.attention.source_tokens.extend(attention.source_tokens)
        response.attention.target_tokens.extend(attention.target_tokens)
        response.attention.rows.extend(translator_pb2.AttentionRow(weights=row) for row in attention.weights)
    return response


def batch_message(translations: list[Translation]) -> translator_pb2.TranslateBatchResponse:
    results = [translation_message(t) for t in translations]
    return translator_pb2.TranslateBatchResponse(translations=[r.translation for r in results], results=results)


def model_info_message(translator: Translator, limits: Limits) -> translator_pb2.GetModelInfoResponse:
    config = translator.model.config
    return translator_pb2.GetModelInfoResponse(
        language_pairs=[translator_pb2.LanguagePair(source_lang=s, target_lang=t) for s, t in translator.language_pairs],
        model_name=str(translator.metadata.get("name", "")),
        model_version=str(translator.metadata.get("version", "")),
        languages=translator.tokenizer.languages,
        vocabulary_size=translator.tokenizer.vocab_size,
        parameter_count=sum(p.numel() for p in translator.model.parameters()),
        model_dim=config.d_model,
        encoder_layers=config.encoder_layers,
        decoder_layers=config.decoder_layers,
        device=str(translator.device),
        precision=translator.precision,
        speech_levels=translator.tokenizer.speech_levels,
        limits=translator_pb2.ServingLimits(
            max_text_chars=limits.max_text_chars,
            max_text_tokens=limits.max_text_tokens,
            max_sentence_tokens=translator.max_source_tokens,
            max_batch_texts=limits.max_batch_texts,
            max_beam_size=limits.max_beam_size,
        ),
    )
