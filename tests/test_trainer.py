"""The trainer on the fixture corpus: loss goes down, logs and plots appear, and resuming is exact."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from fixture_model import fixture_examples, fixture_pairs, tiny_config, train_fixture_tokenizer
from nmt.model import Transformer
from training.trainer import DevPair, Trainer, TrainingConfig


def make_trainer(run_dir, tokenizer, **overrides) -> Trainer:
    torch.manual_seed(0)
    examples = fixture_examples(tokenizer)
    dev = [DevPair("tiny", "ko", "en", ko, en) for ko, en in fixture_pairs()[:8]]
    settings = dict(max_tokens=160, warmup_steps=10, lr=3e-3, log_every=5, eval_every=20, save_every=10,
                    max_steps=40, dev_max_sentences=8, dev_beam_size=2, progress_bar=False, seed=3)
    config = TrainingConfig(**{**settings, **overrides})
    model = Transformer(tiny_config(tokenizer.vocab_size, dropout=0.1))
    metadata = {"name": "test", "language_pairs": [["ko", "en"], ["en", "ko"]]}
    return Trainer(model, tokenizer, [s for s, _ in examples], [t for _, t in examples], dev, config, run_dir, metadata)


def test_training_lowers_loss_and_writes_log_plot_and_best(tmp_path):
    tokenizer = train_fixture_tokenizer()
    trainer = make_trainer(tmp_path, tokenizer)
    trainer.resume()
    trainer.fit()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    dev = [r for r in records if r["kind"] == "dev"]
    assert train[-1]["nll"] < train[0]["nll"] * 0.7
    assert [r["step"] for r in dev] == [20, 40]
    assert dev[-1]["dev_nll"] < dev[0]["dev_nll"]
    assert "bleu/tiny.ko-en" in dev[-1] and "chrf/tiny.ko-en" in dev[-1]
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "best" / "model.safetensors").is_file()
    assert not (tmp_path / "best" / "training_state.pt").exists()


def test_keep_last_limits_checkpoints(tmp_path):
    trainer = make_trainer(tmp_path, train_fixture_tokenizer(), keep_last=2, eval_every=1000)
    trainer.resume()
    trainer.fit()
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["step-00000030", "step-00000040"]


def test_resume_is_exact(tmp_path):
    """N steps straight == N/2 steps, a fresh process state, then N/2 more from the checkpoint."""
    tokenizer = train_fixture_tokenizer()
    straight = make_trainer(tmp_path / "straight", tokenizer, max_steps=30)
    straight.resume()
    straight.fit()

    first_half = make_trainer(tmp_path / "split", tokenizer, max_steps=15)
    first_half.resume()
    first_half.fit()
    torch.manual_seed(1234)  # a resumed process starts with other RNG state; the checkpoint must restore it
    second_half = make_trainer(tmp_path / "split", tokenizer, max_steps=30)
    assert second_half.resume()
    assert second_half.progress.step == 15
    second_half.fit()

    expected = load_file(tmp_path / "straight" / "checkpoints" / "step-00000030" / "model.safetensors")
    actual = load_file(tmp_path / "split" / "checkpoints" / "step-00000030" / "model.safetensors")
    assert expected.keys() == actual.keys()
    for name in expected:
        assert torch.equal(expected[name], actual[name]), name


def test_cpu_attention_kernels_train_alike(tmp_path):
    """The math and the fused attention kernel compute the same function: one update gives the same loss."""
    tokenizer = train_fixture_tokenizer()
    losses = []
    for kernel in ("math", "fused"):
        trainer = make_trainer(tmp_path / kernel, tokenizer, cpu_attention=kernel)
        losses.append(trainer.update([np.arange(8)])["loss"])
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)


def test_unknown_cpu_attention_kernel_is_refused():
    with pytest.raises(ValueError, match="cpu_attention"):
        TrainingConfig(cpu_attention="flash")
