"""Joint Korean+English SentencePiece tokenizer with target-language tags.

One joint vocabulary lets a single model translate both directions and tie its source, target and
output embeddings; the target language is chosen by a tag (``<2en>``/``<2ko>``) at the start of the
source (Johnson et al., 2017). ``character_coverage=1.0`` keeps every Hangul syllable seen in training,
and ``byte_fallback`` spells any other character (rare Hanja, emoji) as UTF-8 bytes, so nothing turns
into ``<unk>`` and nothing ends a sentence early. Text is normalised by :func:`nmt.normalize.normalize`,
not by SentencePiece's NFKC rule, which would break Hangul compatibility jamo.

Tokenizers trained here also reserve ``<bt>``, which marks a back-translated (synthetic) source in training
(Caswell et al., 2019, "Tagged Back-Translation"). Tokenizers trained before it existed have no such piece
(``bt_id`` is None) and work exactly as before; :meth:`Tokenizer.with_control_pieces` appends the piece to one,
so a model trained with it can keep training on tagged data (``training.state.warm_start`` grows its embedding).

A recipe may also ask for speech-level tags, ``<formal>``, ``<polite>`` and ``<plain>``: a side constraint on a
source to be translated into Korean that names the level of the target's ending (Sennrich et al., 2016,
"Controlling Politeness in Neural Machine Translation via Side Constraints"). They too are control pieces, added
only when asked for, so a tokenizer without them stays valid and :attr:`Tokenizer.speech_levels` is empty.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2

from nmt.normalize import normalize
from nmt.speech_level import REQUESTABLE_LEVELS

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<s>", "</s>"
BACK_TRANSLATION_TAG = "<bt>"
_TAG = re.compile(r"<2([a-z]{2,3})>")


def language_tag(lang: str) -> str:
    return f"<2{lang}>"


def level_tag(level: str) -> str:
    return f"<{level}>"


SPEECH_LEVEL_TAGS = tuple(level_tag(level.value) for level in REQUESTABLE_LEVELS)


@dataclass
class TokenizerConfig:
    """SentencePiece training options that matter for ko<->en."""

    vocab_size: int = 8000
    model_type: str = "unigram"
    languages: Sequence[str] = ("ko", "en")
    character_coverage: float = 1.0
    input_sentence_size: int = 2_000_000
    extra_options: dict = field(default_factory=dict)
    reuse: str | None = None  # a SentencePiece model file to keep instead of training one (with <bt> added if missing)


class Tokenizer:
    """Encodes normalised text to ids and back; knows the special and language-tag ids."""

    def __init__(self, model_proto: bytes):
        self.model_proto = model_proto
        self.sp = spm.SentencePieceProcessor(model_proto=model_proto)
        self.pad_id, self.unk_id = self.sp.pad_id(), self.sp.unk_id()
        self.bos_id, self.eos_id = self.sp.bos_id(), self.sp.eos_id()
        self.languages = [
            match.group(1)
            for match in (_TAG.fullmatch(self.sp.id_to_piece(i)) for i in range(self.sp.get_piece_size()))
            if match
        ]
        self.bt_id = self._control_id(BACK_TRANSLATION_TAG)
        # level → id of its tag, for the speech levels this tokenizer can ask of a Korean translation
        tag_ids = ((level.value, self._control_id(level_tag(level.value))) for level in REQUESTABLE_LEVELS)
        self.level_ids: dict[str, int] = {level: tag_id for level, tag_id in tag_ids if tag_id is not None}

    def _control_id(self, piece: str) -> int | None:
        piece_id = self.sp.piece_to_id(piece)  # unknown pieces map to <unk>
        return piece_id if piece_id != self.unk_id else None

    @property
    def speech_levels(self) -> list[str]:
        """The speech levels a source can ask for (``source_ids(level=...)``); empty for a tokenizer without the tags."""
        return list(self.level_ids)

    @property
    def never_generated(self) -> tuple[int, ...]:
        """Ids no translation may contain: PAD, BOS, and the source-side tags (``<bt>``, speech levels)."""
        tags = ((self.bt_id,) if self.bt_id is not None else ()) + tuple(self.level_ids.values())
        return (self.pad_id, self.bos_id, *tags)

    @classmethod
    def train(cls, texts: Iterable[str], config: TokenizerConfig = TokenizerConfig(),
              control_pieces: Sequence[str] = ()) -> Tokenizer:
        """A new SentencePiece model; ``control_pieces`` (e.g. :data:`SPEECH_LEVEL_TAGS`) are reserved beside the
        language tags and ``<bt>``."""
        model = io.BytesIO()
        spm.SentencePieceTrainer.train(
            sentence_iterator=(normalize(t) for t in texts),
            model_writer=model,
            vocab_size=config.vocab_size,
            model_type=config.model_type,
            character_coverage=config.character_coverage,
            byte_fallback=True,
            normalization_rule_name="identity",
            pad_id=0, unk_id=1, bos_id=2, eos_id=3,
            pad_piece=PAD, unk_piece=UNK, bos_piece=BOS, eos_piece=EOS,
            # Control symbols, unlike user-defined ones, never match input text: typing "<2ko>" cannot pick the language.
            control_symbols=[*(language_tag(lang) for lang in config.languages), BACK_TRANSLATION_TAG, *control_pieces],
            input_sentence_size=config.input_sentence_size,
            shuffle_input_sentence=True,
            hard_vocab_limit=False,
            num_threads=2,
            minloglevel=2,
            **config.extra_options,
        )
        return cls(model.getvalue())

    @classmethod
    def build(cls, texts: Iterable[str], config: TokenizerConfig = TokenizerConfig(),
              control_pieces: Sequence[str] = ()) -> Tokenizer:
        """The tokenizer a recipe asks for: ``config.reuse``'s (given the <bt> piece and ``control_pieces``), else
        one trained on ``texts``.

        Reusing a released model's tokenizer lets a new run start from that model's weights with new data.
        """
        if config.reuse is None:
            return cls.train(texts, config, control_pieces)
        tokenizer = cls.load(config.reuse).with_control_pieces([BACK_TRANSLATION_TAG, *control_pieces])
        missing = [lang for lang in config.languages if lang not in tokenizer.languages]
        if missing:
            raise ValueError(f"{config.reuse} has no language tag for {', '.join(missing)}")
        return tokenizer

    def with_control_pieces(self, pieces: Sequence[str]) -> Tokenizer:
        """This tokenizer with the missing ``pieces`` appended as control symbols: every existing id keeps its
        piece, so a model's embedding rows stay valid and only new rows need training."""
        proto = sentencepiece_model_pb2.ModelProto()
        proto.ParseFromString(self.model_proto)
        present = {entry.piece for entry in proto.pieces}
        for piece in dict.fromkeys(pieces):
            if piece not in present:
                proto.pieces.add(piece=piece, score=0.0, type=sentencepiece_model_pb2.ModelProto.SentencePiece.CONTROL)
        return Tokenizer(proto.SerializeToString())

    @classmethod
    def load(cls, path: str | Path) -> Tokenizer:
        return cls(Path(path).read_bytes())

    def save(self, path: str | Path) -> None:
        Path(path).write_bytes(self.model_proto)

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, text: str) -> list[int]:
        """Token ids of normalised text, without BOS/EOS or tags."""
        return self.sp.encode(normalize(text))

    def decode(self, ids: Sequence[int]) -> str:
        special = {self.pad_id, self.bos_id, self.eos_id}
        return self.sp.decode([i for i in ids if i not in special])

    def pieces(self, ids: Sequence[int]) -> list[str]:
        return [self.sp.id_to_piece(int(i)) for i in ids]

    def language_id(self, lang: str) -> int:
        if lang not in self.languages:
            raise ValueError(f"language {lang!r} is not in this tokenizer (it has {', '.join(self.languages)})")
        return self.sp.piece_to_id(language_tag(lang))

    def source_ids(
        self, text: str, target_lang: str, max_tokens: int | None = None, tagged: bool = False, level: str | None = None
    ) -> list[int]:
        """``<2xx> tokens </s>``: the encoder input asking for a translation into ``target_lang``.

        ``tagged`` marks a synthetic source: ``<2xx> <bt> tokens </s>``; ``level`` asks for a speech level:
        ``<2ko> <formal> tokens </s>``. The language tag stays first, so position 0 means the same thing in every
        source and an untagged source is exactly what older models were trained on.
        """
        prefix = [self.language_id(target_lang)]
        if tagged:
            if self.bt_id is None:
                raise ValueError(f"this tokenizer has no {BACK_TRANSLATION_TAG} piece: retrain it to tag sources")
            prefix.append(self.bt_id)
        if level is not None:
            prefix.append(self.level_id(level))
        ids = self.encode(text)
        if max_tokens is not None:
            ids = ids[: max_tokens - len(prefix) - 1]
        return [*prefix, *ids, self.eos_id]

    def level_id(self, level: str) -> int:
        if level not in self.level_ids:
            raise ValueError(f"this tokenizer has no {level_tag(level)} piece (its speech levels: {self.speech_levels})")
        return self.level_ids[level]

    def target_ids(self, text: str, max_tokens: int | None = None) -> list[int]:
        """``<s> tokens </s>``: the decoder sequence; inputs are ``[:-1]``, labels ``[1:]``."""
        ids = self.encode(text)
        if max_tokens is not None:
            ids = ids[: max_tokens - 2]
        return [self.bos_id, *ids, self.eos_id]
