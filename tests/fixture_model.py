"""A tiny ko<->en model overfitted on ``fixtures/tiny.tsv``: the model every test that needs one uses.

It trains in seconds on a CPU and reproduces its 40 training pairs in both directions, so tests can
check real translations ("나는 학생입니다." → "I am a student.") without shipping weights.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch
from sentencepiece import sentencepiece_model_pb2

from nmt.checkpoint import save_model
from nmt.loss import label_smoothed_nll
from nmt.model import ModelConfig, Transformer
from nmt.tokenizer import SPEECH_LEVEL_TAGS, Tokenizer, TokenizerConfig

FIXTURES = Path(__file__).parent / "fixtures"
DIRECTIONS = (("ko", "en"), ("en", "ko"))


def fixture_pairs() -> list[tuple[str, str]]:
    """The (Korean, English) pairs of the fixture corpus."""
    lines = (FIXTURES / "tiny.tsv").read_text(encoding="utf-8").splitlines()
    return [tuple(line.split("\t")) for line in lines if line]


def write_fixture_dev_set(path: Path) -> Path:
    """The fixture pairs as a prepared ko->en dev set (``dev.jsonl`` lines of corpus "fixture"), for the benchmarks."""
    path.write_text("".join(json.dumps({"corpus": "fixture", "source_lang": "ko", "target_lang": "en", "source": ko,
                                        "target": en}, ensure_ascii=False) + "\n" for ko, en in fixture_pairs()),
                    encoding="utf-8")
    return path


def fixture_examples(tokenizer: Tokenizer) -> list[tuple[list[int], list[int]]]:
    """(source ids, target ids) for every pair in both directions."""
    examples = []
    for ko, en in fixture_pairs():
        text = {"ko": ko, "en": en}
        for source, target in DIRECTIONS:
            examples.append((tokenizer.source_ids(text[source], target), tokenizer.target_ids(text[target])))
    return examples


def pad(rows: list[list[int]], pad_id: int = 0) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([r + [pad_id] * (width - len(r)) for r in rows], dtype=torch.long)


def tiny_config(vocab_size: int, **overrides) -> ModelConfig:
    settings = dict(d_model=64, n_heads=4, encoder_layers=2, decoder_layers=2, ffn_dim=128, dropout=0.0, max_positions=128)
    return ModelConfig(vocab_size=vocab_size, **{**settings, **overrides})


def without_bt(tokenizer: Tokenizer) -> Tokenizer:
    """The tokenizer as trained before ``<bt>`` existed (as the first release's was): the same pieces minus that one."""
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(tokenizer.model_proto)
    del proto.pieces[tokenizer.bt_id]
    return Tokenizer(proto.SerializeToString())


def model_from_before_the_tag(model: Transformer, tokenizer: Tokenizer) -> tuple[Transformer, Tokenizer]:
    """The model and tokenizer as the first release was made: no ``<bt>`` piece, and no embedding row for it."""
    old_tokenizer = without_bt(tokenizer)
    state = model.state_dict()
    state["embedding.weight"] = state["embedding.weight"][[i for i in range(tokenizer.vocab_size) if i != tokenizer.bt_id]]
    old = Transformer(dataclasses.replace(model.config, vocab_size=old_tokenizer.vocab_size))
    old.load_state_dict(state)
    return old, old_tokenizer


def train_fixture_tokenizer() -> Tokenizer:
    texts = [side for pair in fixture_pairs() for side in pair]
    return Tokenizer.train(texts, TokenizerConfig(vocab_size=600))


def level_fixture_rows() -> list[dict[str, str]]:
    """``fixtures/levels.tsv``: English sentences with their Korean at each speech level."""
    lines = (FIXTURES / "levels.tsv").read_text(encoding="utf-8").splitlines()
    return [dict(zip(("en", "formal", "plain", "polite"), line.split("\t"))) for line in lines if line]


def level_fixture_examples(tokenizer: Tokenizer) -> list[tuple[list[int], list[int]]]:
    """The fixture corpus, plus en->ko with each level's tag on the source and the formal Korean untagged."""
    examples = fixture_examples(tokenizer)
    for row in level_fixture_rows():
        examples.append((tokenizer.source_ids(row["en"], "ko"), tokenizer.target_ids(row["formal"])))
        for level in tokenizer.speech_levels:
            examples.append((tokenizer.source_ids(row["en"], "ko", level=level), tokenizer.target_ids(row[level])))
    return examples


def train_fixture_model(tokenizer: Tokenizer, steps: int = 600, seed: int = 0,
                        examples: list[tuple[list[int], list[int]]] | None = None, **overrides) -> Transformer:
    """Full-batch Adam on the fixture corpus (or ``examples``) until it is memorised."""
    torch.manual_seed(seed)
    model = Transformer(tiny_config(tokenizer.vocab_size, **overrides))
    examples = examples or fixture_examples(tokenizer)
    source, target = pad([s for s, _ in examples]), pad([t for _, t in examples])
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        loss, _ = label_smoothed_nll(model(source, target[:, :-1]), target[:, 1:], 0.0, tokenizer.pad_id)
        optimizer.zero_grad()
        (loss / (target[:, 1:] != tokenizer.pad_id).sum()).backward()
        optimizer.step()
    return model.eval()


def write_fixture_model(directory: Path) -> Path:
    tokenizer = train_fixture_tokenizer()
    model = train_fixture_model(tokenizer)
    metadata = {"name": "fixture-tiny", "version": "test", "language_pairs": [list(d) for d in DIRECTIONS]}
    return save_model(directory, model, tokenizer, metadata)


def write_level_fixture_model(directory: Path) -> Path:
    """A fixture model trained with speech-level tags: ``I am a student.`` into Korean comes out formal untagged, and
    at the level asked for with ``<formal>``, ``<plain>`` or ``<polite>``."""
    texts = [side for pair in fixture_pairs() for side in pair] + [text for row in level_fixture_rows() for text in row.values()]
    tokenizer = Tokenizer.train(texts, TokenizerConfig(vocab_size=600), control_pieces=SPEECH_LEVEL_TAGS)
    model = train_fixture_model(tokenizer, examples=level_fixture_examples(tokenizer))
    metadata = {"name": "fixture-levels", "version": "test", "language_pairs": [list(d) for d in DIRECTIONS]}
    return save_model(directory, model, tokenizer, metadata)
